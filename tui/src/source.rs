//! Where the data comes from, and the background tasks that turn it into [`Msg`]s.
//!
//! Each task owns its end of the work and only sends messages: the control API's state polled
//! and its records followed (with a backfill of what the emulator kept, and of any gap a
//! reconnection leaves); raw `triggers.v2.>` traffic for the passive observer; an in-process
//! emulator's records and summary; and a tick with the connection's state.

use std::time::Duration;

use futures::StreamExt;
use tokio::sync::{broadcast, mpsc};
use tokio::task::JoinSet;
use triggers_emulator::Emulator;
use triggers_emulator::control::{ControlClient, RECORDS_SUBJECT};
use triggers_emulator::recorder::Record;
use triggers_sdk::transport::{self, DropCounter};
use triggers_sdk::wire::GoTime;
use triggers_sdk::wire::subject;

use crate::error::{SubscribeError, TuiError};
use crate::model::Mode;
use crate::msg::{Cmd, Msg, Observed};

/// Records asked for per backfill request.
const BACKFILL_PAGE: usize = 1000;
/// Messages gathered into one `Msg` when they arrive together.
const BATCH: usize = 512;

/// What the terminal UI watches.
#[derive(Debug, Clone)]
pub enum Source {
    /// A running `triggers-lab up`, over its control API: state, records, trigger, advance.
    Control(ControlClient),
    /// Any NATS server: `triggers.v2.>` decoded with the wire types. Read-only. The counter
    /// counts what NATS drops for the client's slow subscription (make the client with
    /// `triggers_emulator::drops::connect_options` over it).
    Passive(async_nats::Client, DropCounter),
    /// An emulator in this process (`up --tui`, `run --tui`).
    InProcess(Emulator),
}

impl Source {
    /// The mode the model runs in.
    #[must_use]
    pub fn mode(&self) -> Mode {
        match self {
            Source::Control(_) => Mode::Control,
            Source::Passive(..) => Mode::Passive,
            Source::InProcess(_) => Mode::InProcess,
        }
    }

    fn client(&self) -> &async_nats::Client {
        match self {
            Source::Control(c) => c.client(),
            Source::Passive(c, _) => c,
            Source::InProcess(e) => e.client(),
        }
    }

    /// Messages NATS dropped for this UI's own slow subscriptions; `None` in process, where the
    /// emulator's summary says.
    fn own_dropped(&self) -> Option<u64> {
        match self {
            Source::Control(c) => Some(c.dropped_messages()),
            Source::Passive(_, drops) => Some(drops.count()),
            Source::InProcess(_) => None,
        }
    }

    /// What the header shows: the server's address, or `in-process`.
    pub(crate) fn label(&self) -> String {
        if let Source::InProcess(_) = self {
            return "in-process".into();
        }
        let info = self.client().server_info();
        format!("nats://{}:{}", info.host, info.port)
    }

    /// Starts the background tasks; they stop when the set is dropped (it aborts them) or when
    /// the receiver goes.
    pub(crate) async fn spawn(
        &self,
        tx: mpsc::Sender<Msg>,
        poll: Duration,
    ) -> Result<JoinSet<()>, TuiError> {
        // `TuiOptions::poll_interval` of zero would make tokio's intervals panic.
        let poll = poll.max(Duration::from_millis(1));
        let mut tasks = JoinSet::new();
        tasks.spawn(tick(self.clone(), tx.clone(), poll));
        match self {
            Source::Control(control) => {
                let records = control.follow().await.map_err(|e| TuiError::Subscribe {
                    subject: RECORDS_SUBJECT.into(),
                    source: e.into(),
                })?;
                tasks.spawn(poll_control(control.clone(), tx.clone(), poll));
                tasks.spawn(follow_control(control.clone(), records, tx));
            }
            Source::Passive(client, _) => {
                let all = |e: SubscribeError| TuiError::Subscribe {
                    subject: subject::ALL.into(),
                    source: e,
                };
                let sub = client
                    .subscribe(subject::ALL)
                    .await
                    .map_err(|e| all(e.into()))?;
                // In place at the server before the UI says it is watching.
                triggers_sdk::transport::round_trip(client)
                    .await
                    .map_err(|e| all(e.into()))?;
                tasks.spawn(observe(sub, tx));
            }
            Source::InProcess(emulator) => {
                // Subscribe before reading what was kept, so nothing falls between the two.
                let records = emulator.subscribe_records();
                tasks.spawn(poll_emulator(emulator.clone(), tx.clone(), poll));
                tasks.spawn(follow_emulator(emulator.clone(), records, tx));
            }
        }
        Ok(tasks)
    }

    /// Performs a command in the background; its outcome comes back as a message.
    pub(crate) fn perform(&self, cmd: Cmd, tx: mpsc::Sender<Msg>) {
        let this = self.clone();
        tokio::spawn(async move {
            if let Some(msg) = this.perform_now(cmd).await {
                let _ = tx.send(msg).await;
            }
        });
    }

    async fn perform_now(&self, cmd: Cmd) -> Option<Msg> {
        let outcome = match (self, cmd) {
            (_, Cmd::Quit | Cmd::Copy(_)) | (Source::Passive(..), _) => return None,
            (Source::Control(c), Cmd::LoadRun(id)) => {
                return Some(match c.run(&id).await {
                    Ok(run) => Msg::RunLoaded(Box::new(run)),
                    Err(e) => Msg::SourceError(format!("run {id}: {e}")),
                });
            }
            (Source::InProcess(e), Cmd::LoadRun(id)) => {
                return e.run(&id).map(|r| Msg::RunLoaded(Box::new(r)));
            }
            (Source::Control(c), Cmd::Trigger { flow_id, payload }) => c
                .trigger(&flow_id, &payload)
                .await
                .map(|run| format!("triggered {flow_id}: run {run}"))
                .map_err(|e| CommandError::Trigger(flow_id, e.into())),
            (Source::InProcess(e), Cmd::Trigger { flow_id, payload }) => e
                .trigger(&flow_id, &payload)
                .await
                .map(|run| format!("triggered {flow_id}: run {run}"))
                .map_err(|e| CommandError::Trigger(flow_id, e.into())),
            (Source::Control(c), Cmd::ResendDlq(id)) => c
                .resend_dlq(&id)
                .await
                .map(|r| resent(&r))
                .map_err(|e| CommandError::Resend(id, e.into())),
            (Source::InProcess(e), Cmd::ResendDlq(id)) => e
                .resend_dlq(&id)
                .await
                .map(|r| resent(&r))
                .map_err(|e| CommandError::Resend(id, e.into())),
            (Source::Control(c), Cmd::CancelRun(id)) => c
                .cancel(&id)
                .await
                .map(|c| format!("run {} {c}", c.run_id))
                .map_err(|e| CommandError::Cancel(e.into())),
            (Source::InProcess(e), Cmd::CancelRun(id)) => e
                .cancel(&id)
                .map(|c| format!("run {} {c}", c.run_id))
                .map_err(|e| CommandError::Cancel(e.into())),
            (Source::Control(c), Cmd::Advance(by)) => c
                .advance(by)
                .await
                .map(|v| advanced(by, v.fired.len()))
                .map_err(|e| CommandError::Advance(e.into())),
            (Source::InProcess(e), Cmd::Advance(by)) => e
                .advance(by)
                .await
                .map(|fired| advanced(by, fired.len()))
                .map_err(|e| CommandError::Advance(e.into())),
        };
        Some(match outcome {
            Ok(text) => Msg::Done { text, error: false },
            Err(e) => Msg::Done {
                text: e.to_string(),
                error: true,
            },
        })
    }
}

/// Why a command the user gave failed: what was asked, and what refused it. Shown on screen.
#[derive(Debug, thiserror::Error)]
enum CommandError {
    /// Starting a run of the flow.
    #[error("trigger {0}: {1}")]
    Trigger(String, #[source] Refusal),
    /// Re-sending the DLQ entry with this id.
    #[error("re-send {0}: {1}")]
    Resend(String, #[source] Refusal),
    /// Cancelling a run.
    #[error("cancel: {0}")]
    Cancel(#[source] Refusal),
    /// Advancing the clock.
    #[error("advance: {0}")]
    Advance(#[source] Refusal),
}

/// What refused a command: the emulator over its control API, or the one in this process.
#[derive(Debug, thiserror::Error)]
enum Refusal {
    /// The control API.
    #[error(transparent)]
    Control(#[from] triggers_emulator::ControlError),
    /// The in-process emulator.
    #[error(transparent)]
    Emulator(#[from] triggers_emulator::EmulatorError),
}

fn resent(r: &triggers_emulator::Resent) -> String {
    format!(
        "re-sent to {} as {}: run {} waits on {} again",
        r.subject,
        r.idempotency_key,
        r.run_id,
        r.nodes.join(", ")
    )
}

fn advanced(by: Duration, fired: usize) -> String {
    format!(
        "advanced the clock by {}: {fired} timer{} fired",
        crate::format::duration_ns(by.as_nanos() as i128),
        if fired == 1 { "" } else { "s" }
    )
}

/// The wall clock, the connection's state whenever it changes, and what NATS dropped for this
/// UI's slow subscriptions whenever that grows.
async fn tick(source: Source, tx: mpsc::Sender<Msg>, every: Duration) {
    use async_nats::connection::State;
    let mut last = None;
    let mut dropped = 0;
    let mut interval = tokio::time::interval(every);
    loop {
        interval.tick().await;
        if tx.send(Msg::Tick(GoTime::now())).await.is_err() {
            return;
        }
        if let Some(now) = source.own_dropped()
            && now > dropped
        {
            dropped = now;
            if tx.send(Msg::Dropped(now)).await.is_err() {
                return;
            }
        }
        let state = source.client().connection_state();
        if last.as_ref() != Some(&state) {
            let msg = match state {
                State::Connected => Msg::Connected,
                State::Disconnected => Msg::Disconnected("disconnected".into()),
                State::Pending => Msg::Disconnected("connecting".into()),
            };
            last = Some(state);
            if tx.send(msg).await.is_err() {
                return;
            }
        }
    }
}

/// The deployed flows missing from `shown`, each read whole with `flow` unless `cache` holds
/// its version already.
async fn left_out_flows(
    control: &ControlClient,
    shown: &[triggers_sdk::flow::Flow],
    cache: &mut std::collections::BTreeMap<String, triggers_sdk::flow::Flow>,
) -> Result<Vec<triggers_sdk::flow::Flow>, triggers_emulator::ControlError> {
    let listed = control.flow_list().await?;
    cache.retain(|id, _| listed.iter().any(|f| &f.id == id));
    let mut out = Vec::new();
    for f in listed.iter().filter(|f| shown.iter().all(|s| s.id != f.id)) {
        let fresh = cache.get(&f.id).is_some_and(|c| c.version == f.version);
        if !fresh {
            cache.insert(f.id.clone(), control.flow(&f.id).await?);
        }
        if let Some(flow) = cache.get(&f.id) {
            out.push(flow.clone());
        }
    }
    Ok(out)
}

async fn poll_control(control: ControlClient, tx: mpsc::Sender<Msg>, every: Duration) {
    let mut interval = tokio::time::interval(every);
    let mut failing = false;
    // Flows the state left out (too large to send with the rest), fetched once per version.
    let mut large = std::collections::BTreeMap::new();
    loop {
        interval.tick().await;
        let msg = match tokio::time::timeout(Duration::from_secs(3), control.state()).await {
            Ok(Ok(mut summary)) => {
                failing = false;
                if summary.flows_total > summary.flows.len() {
                    let fetch = tokio::time::timeout(
                        Duration::from_secs(3),
                        left_out_flows(&control, &summary.flows, &mut large),
                    );
                    if let Ok(Ok(flows)) = fetch.await {
                        summary.flows.extend(flows);
                    }
                }
                Msg::Summary(summary)
            }
            // One notice per outage, not one per poll.
            Ok(Err(_)) | Err(_) if failing => continue,
            Ok(Err(e)) => {
                failing = true;
                Msg::SourceError(format!("control API: {e}"))
            }
            Err(_) => {
                failing = true;
                Msg::SourceError("control API: no answer within 3 s".into())
            }
        };
        if tx.send(msg).await.is_err() {
            return;
        }
    }
}

/// Sends the records after `since` the emulator still keeps; returns the last seq sent.
async fn backfill(control: &ControlClient, mut since: u64, tx: &mpsc::Sender<Msg>) -> Option<u64> {
    loop {
        let page = match control.records(since, BACKFILL_PAGE).await {
            Ok(page) => page,
            Err(e) => {
                let _ = tx.send(Msg::SourceError(format!("records: {e}"))).await;
                return Some(since);
            }
        };
        let full = page.len() == BACKFILL_PAGE;
        if let Some(last) = page.last() {
            since = last.seq;
            tx.send(Msg::Records(page)).await.ok()?;
        }
        if !full {
            return Some(since);
        }
    }
}

async fn follow_control(
    control: ControlClient,
    records: impl futures::Stream<Item = Record> + Send + 'static,
    tx: mpsc::Sender<Msg>,
) {
    let Some(mut last) = backfill(&control, 0, &tx).await else {
        return;
    };
    let mut batches = Box::pin(records.ready_chunks(BATCH));
    while let Some(batch) = batches.next().await {
        let batch: Vec<Record> = batch.into_iter().filter(|r| r.seq > last).collect();
        let Some(first) = batch.first() else {
            continue;
        };
        if first.seq > last + 1 {
            // Records published while the connection was down: fetch what the emulator kept.
            match backfill(&control, last, &tx).await {
                Some(to) => last = to,
                None => return,
            }
        }
        let batch: Vec<Record> = batch.into_iter().filter(|r| r.seq > last).collect();
        if let Some(r) = batch.last() {
            last = r.seq;
            if tx.send(Msg::Records(batch)).await.is_err() {
                return;
            }
        }
    }
}

async fn observe(sub: async_nats::Subscriber, tx: mpsc::Sender<Msg>) {
    let mut batches = sub.ready_chunks(BATCH);
    while let Some(batch) = batches.next().await {
        let at = GoTime::now();
        let observed = batch
            .into_iter()
            .map(|m| Observed {
                at,
                subject: m.subject.to_string(),
                headers: transport::from_nats(m.headers.as_ref())
                    .into_iter()
                    .collect(),
                payload: m.payload.to_vec(),
            })
            .collect();
        if tx.send(Msg::Observed(observed)).await.is_err() {
            return;
        }
    }
}

async fn poll_emulator(emulator: Emulator, tx: mpsc::Sender<Msg>, every: Duration) {
    let mut interval = tokio::time::interval(every);
    loop {
        interval.tick().await;
        if tx.send(Msg::Summary(emulator.summary())).await.is_err() {
            return;
        }
    }
}

async fn follow_emulator(
    emulator: Emulator,
    mut records: broadcast::Receiver<Record>,
    tx: mpsc::Sender<Msg>,
) {
    let mut last = 0;
    let catch_up = |last: u64| {
        let mut kept = Vec::new();
        let mut since = last;
        loop {
            let page = emulator.records_since(since, BACKFILL_PAGE);
            let full = page.len() == BACKFILL_PAGE;
            if let Some(r) = page.last() {
                since = r.seq;
            }
            kept.push(page);
            if !full {
                return (kept, since);
            }
        }
    };
    let (pages, to) = catch_up(last);
    last = to;
    for page in pages.into_iter().filter(|p| !p.is_empty()) {
        if tx.send(Msg::Records(page)).await.is_err() {
            return;
        }
    }
    loop {
        let first = match records.recv().await {
            Ok(r) => r,
            Err(broadcast::error::RecvError::Lagged(_)) => {
                // The UI fell behind the broadcast: read what was missed from the recorder.
                let (pages, to) = catch_up(last);
                last = to;
                for page in pages.into_iter().filter(|p| !p.is_empty()) {
                    if tx.send(Msg::Records(page)).await.is_err() {
                        return;
                    }
                }
                continue;
            }
            Err(broadcast::error::RecvError::Closed) => return,
        };
        let mut batch = vec![first];
        while batch.len() < BATCH {
            match records.try_recv() {
                Ok(r) => batch.push(r),
                Err(_) => break,
            }
        }
        batch.retain(|r| r.seq > last);
        if let Some(r) = batch.last() {
            last = r.seq;
            if tx.send(Msg::Records(batch)).await.is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! The sources against a real nats-server and emulator (the emulator's `Harness`), their
    //! messages applied to a model as the app does.

    use std::time::Duration;

    use tokio::sync::mpsc;
    use triggers_emulator::Harness;
    use triggers_emulator::recorder::{Record, RecordKind};
    use triggers_sdk::wire::{GoTime, Heartbeat};

    use super::Source;
    use crate::model::{Mode, Model, ModelConfig};
    use crate::msg::{Cmd, Msg};
    use crate::theme::Theme;
    use crate::update::update;

    async fn dead_letter(client: &async_nats::Client, run: &str) {
        let entry = serde_json::json!({
            "kind": "action_failed",
            "envelope": {"trace_id": "", "span_id": "", "traceparent": "", "flow_run_id": run,
                "flow_id": "f", "flow_version": 1, "idempotency_key": run, "source_node_id": "in",
                "retry_count": 0, "emitted_at": "2026-05-26T14:30:00Z"},
            "body": {"b": 1, "a": [true]},
            "err_msg": "boom",
            "occurred_at": "2026-05-26T14:30:01Z"});
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Msg-Id", format!("{run}:dlq:1").as_str());
        client
            .publish_with_headers("triggers.v2.dlq.svc.act", headers, entry.to_string().into())
            .await
            .expect("publish");
        client.flush().await.expect("flush");
    }

    fn dlq_runs(m: &Model) -> Vec<String> {
        m.dlq
            .iter()
            .filter_map(|d| d.entry.as_ref())
            .map(|e| e.envelope.flow_run_id.clone())
            .collect()
    }

    #[test]
    fn dlq_records_survive_serde_whole() {
        let record = crate::fixtures::records()
            .into_iter()
            .find(|r| matches!(r.kind, RecordKind::Dlq { .. }))
            .expect("a DLQ record");
        // What the emulator publishes and serves, read back as the control client reads it.
        let value = serde_json::to_value(&record).expect("serialises");
        let decoded: Record = serde_json::from_value(value).expect("decodes");
        let (RecordKind::Dlq { entry: Some(a), .. }, RecordKind::Dlq { entry: Some(b), .. }) =
            (&decoded.kind, &record.kind)
        else {
            panic!("the entry is lost: {decoded:?}");
        };
        assert_eq!(a.envelope, b.envelope);
        assert_eq!(a.body.to_value().unwrap(), b.body.to_value().unwrap());
    }

    async fn heartbeat(client: &async_nats::Client, service: &str) {
        let hb = Heartbeat {
            service: service.into(),
            service_version: "1.0.0".into(),
            manifest_hash: "sha256:00".into(),
            started_at: GoTime::now(),
            now: GoTime::now(),
            shutting_down: false,
        };
        let bytes = hb.to_json().expect("encodes");
        client
            .publish("triggers.v2.heartbeat", bytes.into())
            .await
            .expect("publish");
        client.flush().await.expect("flush");
    }

    /// Applies messages until `done` holds (10 s at most).
    async fn until(
        model: &mut Model,
        rx: &mut mpsc::Receiver<Msg>,
        what: &str,
        done: impl Fn(&Model) -> bool,
    ) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !done(model) {
            let msg = tokio::time::timeout_at(deadline, rx.recv())
                .await
                .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
                .expect("the sources are running");
            update(model, msg);
        }
    }

    fn saw_heartbeat(m: &Model, service: &str) -> bool {
        m.events.iter().any(|e| {
            matches!(&e.kind, Some(triggers_emulator::recorder::RecordKind::Heartbeat { heartbeat })
                if heartbeat.service == service)
        })
    }

    fn model(mode: Mode) -> Model {
        Model::new(ModelConfig {
            mode,
            theme: Theme::monochrome(),
            ..ModelConfig::default()
        })
    }

    /// Flows the state leaves out (too large to send with the rest) are read one by one, once
    /// per version.
    #[tokio::test]
    async fn flows_left_out_of_the_state_are_read_once_per_version() {
        let lab = Harness::start().await.expect("a nats-server");
        let mut m: triggers_sdk::wire::Manifest = serde_json::from_value(serde_json::json!({
            "protocol_version": "1.0.0", "service": "shop", "service_version": "1.0.0",
            "actions": [{"name": "charge", "timeout_ms": 1000,
                "input_schema": {"type": "object"}, "result_schema": {"type": "object"}, "dlq": "triggers.v2.dlq.shop.charge",
                "retry": {"max_attempts": 1, "initial_backoff_ms": 10, "backoff_factor": 2.0, "max_backoff_ms": 100}}],
            "service_sources": [{"name": "nats", "transport": "nats", "default": "shop.inbound"}],
            "supports_nodes": [], "runtime_capabilities": []}))
        .unwrap();
        m.seal().unwrap();
        let reply = lab
            .client()
            .request(
                "triggers.v2.manifest.register",
                serde_json::to_vec(&m).unwrap().into(),
            )
            .await
            .expect("a reply");
        let reply = String::from_utf8_lossy(&reply.payload).into_owned();
        assert!(!reply.contains("error\":\""), "{reply}");
        let flows: Vec<triggers_sdk::flow::Flow> = ["a", "b"]
            .iter()
            .map(|id| {
                serde_json::from_value(serde_json::json!({"id": id, "nodes": [
                    {"id": "in", "type": "service-in", "service": "shop"},
                    {"id": "pay", "type": "action", "service": "shop", "action": "charge"}],
                  "edges": [{"id": "e1", "from": "in", "to": "pay"}]}))
                .unwrap()
            })
            .collect();
        for f in &flows {
            lab.emulator().deploy(f.clone()).await.expect("deployed");
        }
        let control = triggers_emulator::control::ControlClient::connect(lab.url())
            .await
            .unwrap();
        let shown = control.flow(&flows[0].id).await.unwrap();
        let mut cache = std::collections::BTreeMap::new();
        let got = super::left_out_flows(&control, std::slice::from_ref(&shown), &mut cache)
            .await
            .unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].id, flows[1].id);
        assert_eq!(cache.len(), 1);
        // A redeploy is a new version: read again.
        lab.emulator().deploy(flows[1].clone()).await.unwrap();
        let again = super::left_out_flows(&control, std::slice::from_ref(&shown), &mut cache)
            .await
            .unwrap();
        assert_eq!(again[0].version, got[0].version + 1);
    }

    #[tokio::test]
    async fn control_backfills_follows_and_drives_the_emulator() {
        let lab = Harness::start().await.expect("a nats-server");
        heartbeat(lab.client(), "before").await;
        dead_letter(lab.client(), "r-before").await;
        lab.emulator()
            .wait_for_heartbeat("before", |_| true)
            .await
            .expect("recorded");
        lab.emulator()
            .wait_dlq(triggers_emulator::DlqFilter::any())
            .await
            .expect("recorded");
        let source = crate::connect(lab.url()).await.expect("connects");
        assert_eq!(source.mode(), Mode::Control);
        let (tx, mut rx) = mpsc::channel(256);
        let _tasks = source
            .spawn(tx.clone(), Duration::from_millis(100))
            .await
            .expect("subscribes");
        let mut m = model(Mode::Control);
        // What was recorded before the UI attached comes from the backfill.
        until(&mut m, &mut rx, "the earlier heartbeat", |m| {
            saw_heartbeat(m, "before")
                && m.clock.is_some()
                && *m.connection() == crate::Connection::Connected
        })
        .await;
        assert_eq!(dlq_runs(&m), ["r-before"]);
        heartbeat(lab.client(), "after").await;
        dead_letter(lab.client(), "r-after").await;
        until(&mut m, &mut rx, "the live heartbeat and DLQ entry", |m| {
            saw_heartbeat(m, "after") && m.dlq.len() == 2
        })
        .await;
        assert_eq!(dlq_runs(&m), ["r-before", "r-after"]);
        let before = m.clock.expect("a clock").0;
        source.perform(Cmd::Advance(Duration::from_secs(3600)), tx.clone());
        until(&mut m, &mut rx, "the clock to move", |m| {
            m.clock
                .is_some_and(|(t, _)| t.unix_nanos() > before.unix_nanos())
        })
        .await;
        assert!(
            m.notice.as_ref().is_some_and(|n| !n.error),
            "{:?}",
            m.notice
        );
        source.perform(
            Cmd::Trigger {
                flow_id: "nope".into(),
                payload: serde_json::json!({}),
            },
            tx,
        );
        until(&mut m, &mut rx, "the refused trigger", |m| {
            m.notice.as_ref().is_some_and(|n| n.error)
        })
        .await;
    }

    #[tokio::test]
    async fn a_closed_control_api_is_watched_with_its_credentials_and_token() {
        use triggers_emulator::control::{ControlAccess, ControlToken};
        use triggers_emulator::{EmulatorConfig, NatsConfig};
        let token = ControlToken::generate();
        let lab = Harness::start_with(
            NatsConfig {
                private_control: true,
                ..Default::default()
            },
            EmulatorConfig {
                control_token: Some(token.clone()),
                ..Default::default()
            },
        )
        .await
        .expect("a nats-server");
        // Without them, as a service: no control API, only what services can see.
        let source = crate::connect(lab.url()).await.expect("connects");
        assert_eq!(source.mode(), Mode::Passive);
        let access = ControlAccess {
            credentials: lab.control_credentials().cloned(),
            token: Some(token),
        };
        let source = crate::connect_with(lab.url(), &access)
            .await
            .expect("connects");
        assert_eq!(source.mode(), Mode::Control);
        let (tx, mut rx) = mpsc::channel(256);
        let _tasks = source
            .spawn(tx, Duration::from_millis(100))
            .await
            .expect("subscribes");
        let mut m = model(Mode::Control);
        until(&mut m, &mut rx, "the connection", |m| {
            *m.connection() == crate::Connection::Connected && m.clock.is_some()
        })
        .await;
        // A service's heartbeat reaches the UI through the records on the token's subject.
        heartbeat(lab.client(), "svc").await;
        until(&mut m, &mut rx, "the heartbeat", |m| {
            saw_heartbeat(m, "svc")
        })
        .await;
    }

    #[tokio::test]
    async fn passive_decodes_the_locked_subjects() {
        let lab = Harness::start().await.expect("a nats-server");
        let client = triggers_sdk::transport::connect(lab.url())
            .await
            .expect("connects");
        let source = Source::Passive(client, triggers_sdk::transport::DropCounter::new());
        let (tx, mut rx) = mpsc::channel(256);
        let _tasks = source
            .spawn(tx, Duration::from_millis(100))
            .await
            .expect("subscribes");
        let mut m = model(Mode::Passive);
        // The subscription is live once the connection reports in.
        until(&mut m, &mut rx, "the connection", |m| {
            *m.connection() == crate::Connection::Connected
        })
        .await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        heartbeat(lab.client(), "seen").await;
        until(&mut m, &mut rx, "the heartbeat", |m| {
            m.services.contains_key("seen")
        })
        .await;
    }

    #[tokio::test]
    async fn passive_shows_what_nats_dropped_for_its_slow_subscription() {
        let lab = Harness::start().await.expect("a nats-server");
        let drops = triggers_sdk::transport::DropCounter::new();
        // A slow consumer on purpose: room for one message at a time.
        let options = triggers_emulator::drops::connect_options("slow watch", &drops)
            .subscription_capacity(1);
        // The harness's URL carries its account's user, which async-nats does not read itself.
        let client = triggers_sdk::transport::with_url_credentials(options, lab.url())
            .connect(lab.url())
            .await
            .expect("connects");
        let source = Source::Passive(client, drops.clone());
        let (tx, mut rx) = mpsc::channel(256);
        let _tasks = source
            .spawn(tx, Duration::from_millis(100))
            .await
            .expect("subscribes");
        let mut m = model(Mode::Passive);
        until(&mut m, &mut rx, "the connection", |m| {
            *m.connection() == crate::Connection::Connected
        })
        .await;
        let flooder = lab.client().clone();
        let counted = drops.clone();
        let flood = tokio::spawn(async move {
            // A round at a time until a drop is counted (no timing).
            for _ in 0..500 {
                for i in 0..1_000 {
                    let _ = flooder
                        .publish("triggers.v2.heartbeat", format!("{{junk {i}").into())
                        .await;
                }
                let _ = flooder.flush().await;
                if counted.count() > 0 {
                    return;
                }
                tokio::task::yield_now().await;
            }
        });
        until(&mut m, &mut rx, "the drop count", |m| {
            m.dropped_messages().1 > 0
        })
        .await;
        flood.abort();
        assert!(drops.count() >= m.dropped_messages().1);
    }

    #[tokio::test]
    async fn in_process_follows_the_emulator() {
        let lab = Harness::start().await.expect("a nats-server");
        heartbeat(lab.client(), "before").await;
        lab.emulator()
            .wait_for_heartbeat("before", |_| true)
            .await
            .expect("recorded");
        let source = Source::InProcess(lab.emulator().clone());
        assert_eq!(source.label(), "in-process");
        let (tx, mut rx) = mpsc::channel(256);
        let _tasks = source
            .spawn(tx.clone(), Duration::from_millis(100))
            .await
            .expect("subscribes");
        let mut m = model(Mode::InProcess);
        until(&mut m, &mut rx, "the earlier heartbeat", |m| {
            m.services.contains_key("before")
        })
        .await;
        heartbeat(lab.client(), "after").await;
        until(&mut m, &mut rx, "the live heartbeat", |m| {
            m.services.contains_key("after")
        })
        .await;
        source.perform(Cmd::Advance(Duration::from_secs(60)), tx);
        until(&mut m, &mut rx, "the advance", |m| m.notice.is_some()).await;
    }
}
