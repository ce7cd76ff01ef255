//! Serving the control API: each request decoded into a [`Request`], answered by the op's
//! function, its reply fitted into one NATS message.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use serde::Serialize;
use serde_json::Value;

use super::access::refuse;
use super::protocol::{
    AdvanceRequest, Advanced, CancelRequest, CheckReleaseRequest, DeployRequest, ErrorBody,
    ErrorReply, FlowRequest, FollowLease, FollowRequest, RecordsRequest, ReleaseRefusal, Request,
    RunPageRequest, RunRequest, RunStarted, RunTimelinePage, ServicesRequest, StateRequest,
    TriggerRequest, ViolationsRequest,
};
use super::{FOLLOW_LEASE, MAX_FOLLOW_LEASE, PREFIX, RUN_PAGE, STATE_RUNS, records_subject};
use crate::emulator::{Emulator, TriggerOptions};
use crate::error::EmulatorError;
use crate::recorder::{Record, Run};
use crate::reply_fit::{self, json_len};

/// What an op answers: its result's JSON, or the error to send.
type Answer = Result<Vec<u8>, ErrorBody>;

/// Subscribes the control subjects; returns the task that serves them (and starts the records'
/// forwarder while someone follows).
pub(crate) async fn serve(
    emulator: Emulator,
) -> Result<impl std::future::Future<Output = ()> + Send + 'static, EmulatorError> {
    let client = emulator
        .config()
        .control_client
        .clone()
        .unwrap_or_else(|| emulator.client().clone());
    let mut requests = client
        .subscribe(format!("{PREFIX}.*"))
        .await
        .map_err(|e| EmulatorError::nats("subscribe to the control API", e))?;
    // In place at the server before the emulator says it is up.
    triggers_sdk::transport::round_trip(&client)
        .await
        .map_err(|e| EmulatorError::nats("subscribe to the control API", e))?;
    let server = Server {
        records_to: records_subject(emulator.config().control_token.as_ref()),
        emulator,
        client,
        lease: Arc::new(Mutex::new(Lease::default())),
    };
    Ok(async move {
        while let Some(msg) = requests.next().await {
            let op = msg.subject.as_str().rsplit('.').next().unwrap_or_default();
            // A reply above the server's max_payload would never be sent, and the requester
            // would wait for nothing: keep room for the envelope of the result.
            let max = server
                .client
                .server_info()
                .max_payload
                .saturating_sub(64)
                .max(1024);
            let answer = server
                .answer(op, msg.headers.as_ref(), &msg.payload, max)
                .await;
            if let Some(to) = msg.reply {
                let bytes = reply_bytes(answer, max);
                if let Err(e) = server.client.publish(to, bytes.into()).await {
                    tracing::warn!(op, "a control reply could not be sent: {e}");
                }
            }
        }
    })
}

/// The control API's side of one emulator.
struct Server {
    emulator: Emulator,
    /// The connection the API is served on.
    client: async_nats::Client,
    /// Where records are published while someone follows.
    records_to: String,
    lease: Arc<Mutex<Lease>>,
}

impl Server {
    /// Checks the token, decodes the request, answers it.
    async fn answer(
        &self,
        op: &str,
        headers: Option<&async_nats::HeaderMap>,
        body: &[u8],
        max: usize,
    ) -> Answer {
        let token = self.emulator.config().control_token.as_ref();
        if let Some(refusal) = refuse(token, headers) {
            return Err(refusal.into());
        }
        let request = Request::decode(op, body)?;
        self.handle(request, max).await
    }

    /// Answers one request with at most `max` bytes.
    async fn handle(&self, request: Request, max: usize) -> Answer {
        let emulator = &self.emulator;
        match request {
            Request::State(r) => state(emulator, &r, max),
            Request::Deploy(r) => deploy(emulator, r, max).await,
            Request::CheckRelease(r) => check_release(emulator, &r, max),
            Request::Trigger(r) => trigger(emulator, r, max).await,
            Request::ResendDlq(r) => {
                let resent = emulator.resend_dlq(&r.msg_id).await.map_err(message)?;
                to_json(&resent, max, "")
            }
            Request::Advance(r) => advance(emulator, &r, max).await,
            Request::Cancel(r) => cancel(emulator, &r, max),
            Request::Runs(_) => to_json(
                &emulator.runs(),
                max,
                "read their summaries a page at a time with `run_page`, and each run with `run`",
            ),
            Request::RunPage(r) => run_page(emulator, &r, max),
            Request::Run(r) => run(emulator, &r, max),
            Request::Flow(r) => flow(emulator, &r, max),
            Request::FlowList(_) => to_json(
                &emulator.flow_list(),
                max,
                "too many flows to list at once; read them one at a time with `flow`",
            ),
            Request::Records(r) => records(emulator, &r, max),
            Request::Violations(r) => violations(emulator, &r, max),
            Request::Services(r) => services(emulator, &r, max),
            Request::Follow(r) => Ok(self.follow(&r)),
        }
    }

    /// A `follow` request: records are published on the records' subject for the lease it asks
    /// (at most [`MAX_FOLLOW_LEASE`]), or until a later request's lease ends, whichever is
    /// later. The forwarder's receiver is made here, before the reply, so every record after
    /// the reply is sent.
    fn follow(&self, req: &FollowRequest) -> Vec<u8> {
        let asked = req
            .lease_ms
            .map_or(FOLLOW_LEASE, Duration::from_millis)
            .min(MAX_FOLLOW_LEASE);
        let until = tokio::time::Instant::now() + asked;
        {
            let mut held = self.lease.lock().unwrap_or_else(|e| e.into_inner());
            held.until = Some(held.until.map_or(until, |u| u.max(until)));
            if !held.forwarding {
                held.forwarding = true;
                tokio::spawn(forward_records(
                    self.emulator.subscribe_records(),
                    self.client.clone(),
                    self.records_to.clone(),
                    self.lease.clone(),
                ));
            }
        }
        let lease = FollowLease {
            lease_ms: u64::try_from(asked.as_millis()).unwrap_or(u64::MAX),
            subject: self.records_to.clone(),
        };
        serde_json::to_vec(&lease).unwrap_or_default()
    }
}

/// An error's text as the reply's error.
fn message(e: impl std::fmt::Display) -> ErrorBody {
    ErrorBody::Message(e.to_string())
}

/// `state`: the summary with the newest runs that fit, then the flows, then the services.
fn state(emulator: &Emulator, req: &StateRequest, max: usize) -> Answer {
    let mut summary = emulator.summary_newest(req.runs_limit.unwrap_or(STATE_RUNS));
    // The newest runs that fit: half as many each time they do not; then the flows that
    // fit, the largest left out first (`flow` reads them); then the services' action
    // names, the longest list first (counted in `action_count`).
    loop {
        match to_json(&summary, max, "") {
            Err(_) if !summary.runs.is_empty() => {
                let keep = summary.runs.len() / 2;
                summary.runs.drain(..summary.runs.len() - keep);
            }
            Err(_) if !summary.flows.is_empty() => {
                // The largest flows that together make up what is too much, measured once
                // (not one flow and a new try at a time: there may be thousands).
                let mut over = json_len(&summary).saturating_sub(max);
                summary
                    .flows
                    .sort_by_cached_key(|f| std::cmp::Reverse(json_len(f)));
                while over > 0 && !summary.flows.is_empty() {
                    over = over.saturating_sub(json_len(&summary.flows.remove(0)));
                }
                summary.flows.sort_by(|a, b| a.id.cmp(&b.id));
            }
            Err(_) if summary.services.iter().any(|s| !s.actions.is_empty()) => {
                let mut over = json_len(&summary).saturating_sub(max);
                let mut order: Vec<usize> = (0..summary.services.len()).collect();
                order.sort_by_cached_key(|i| {
                    std::cmp::Reverse(json_len(&summary.services[*i].actions))
                });
                for i in order {
                    if over == 0 {
                        break;
                    }
                    let names = std::mem::take(&mut summary.services[i].actions);
                    over = over.saturating_sub(json_len(&names));
                }
            }
            // Then the services that fit, the first by name (`services` pages them all).
            Err(_) if !summary.services.is_empty() => {
                let keep = summary.services.len() / 2;
                summary.services.truncate(keep);
            }
            other => {
                break other.map_err(|_| {
                        ErrorBody::Message(format!(
                            "the state is larger than the server's max_payload ({max} bytes) even without its runs, flows and services: read its parts with `services`, `flow_list`, `violations` and `run_page`"
                        ))
                    });
            }
        }
    }
}

/// `deploy`: the released flow, or the release's problems.
async fn deploy(emulator: &Emulator, req: DeployRequest, max: usize) -> Answer {
    match emulator.deploy(req.flow).await {
        Ok(d) => to_json(&d, max, "deploy a smaller flow"),
        Err(EmulatorError::Release(problems)) => {
            let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
            Err(ErrorBody::Release(ReleaseRefusal {
                message: format!("release refused: {}", text.join("; ")),
                problems,
            }))
        }
        Err(e) => Err(message(e)),
    }
}

/// `check_release`: the resolved flow, or the release's problems.
fn check_release(emulator: &Emulator, req: &CheckReleaseRequest, max: usize) -> Answer {
    match emulator.check_release(&req.flow) {
        Ok(flow) => to_json(&flow, max, "check a smaller flow"),
        Err(problems) => Err(ErrorBody::Release(ReleaseRefusal {
            message: "release refused".to_owned(),
            problems,
        })),
    }
}

/// `trigger`: the payload as raw bytes, exact JSON text, or JSON written as Go writes it.
async fn trigger(emulator: &Emulator, req: TriggerRequest, max: usize) -> Answer {
    let bytes = match (req.payload_raw, req.payload_json) {
        (Some(raw), _) => raw.into_bytes(),
        (None, Some(text)) => {
            serde_json::from_str::<serde::de::IgnoredAny>(&text)
                .map_err(|e| message(format!("payload_json is not JSON: {e}")))?;
            text.into_bytes()
        }
        (None, None) => {
            triggers_sdk::wire::json::to_vec(&triggers_sdk::wire::json::GoAny(&req.payload))
                .map_err(message)?
        }
    };
    let options = TriggerOptions {
        entry: req.entry,
        run_id: None,
    };
    let run = emulator
        .trigger_bytes(&req.flow_id, bytes, options)
        .await
        .map_err(message)?;
    to_json(&RunStarted { run_id: run.0 }, max, "")
}

/// `advance`: the timers fired and the clock after.
async fn advance(emulator: &Emulator, req: &AdvanceRequest, max: usize) -> Answer {
    let fired = emulator
        .advance(Duration::from_millis(req.duration_ms))
        .await
        .map_err(message)?;
    to_json(
        &Advanced {
            clock: emulator.now(),
            fired,
        },
        max,
        "the timers fired, but their list is too long to send; read them from the records",
    )
}

/// `cancel`: what the run still owed.
fn cancel(emulator: &Emulator, req: &CancelRequest, max: usize) -> Answer {
    let cancelled = emulator.cancel(&req.run_id).map_err(message)?;
    to_json(
        &cancelled,
        max,
        "the run was cancelled, but what it dropped is too long to send; read the run with `run`",
    )
}

/// `run_page`: as many summaries as fit, up to the request's `limit`.
fn run_page(emulator: &Emulator, req: &RunPageRequest, max: usize) -> Answer {
    let mut limit = req.limit.unwrap_or(RUN_PAGE).clamp(1, RUN_PAGE);
    loop {
        let page = emulator.run_page(req.after, limit);
        match to_json(&page, max, "ask for a smaller `limit`") {
            Err(_) if limit > 1 => limit /= 2,
            other => return other,
        }
    }
}

/// `run`: the run, whole or a page of its timeline.
fn run(emulator: &Emulator, req: &RunRequest, max: usize) -> Answer {
    match emulator.run(&req.run_id) {
        Some(run) => run_reply(run, req, max),
        None => Err(message(format!("no run {:?}", req.run_id))),
    }
}

/// The run, whole, or a page of its timeline that fits in `max` bytes.
fn run_reply(mut run: Run, req: &RunRequest, max: usize) -> Answer {
    if req.timeline_from.is_none() && req.timeline_limit.is_none() {
        return to_json(
            &run,
            max,
            "read its timeline a page at a time with `timeline_from` (ControlClient::run does)",
        );
    }
    let timeline = std::mem::take(&mut run.timeline);
    let total = timeline.len();
    let from = req.timeline_from.unwrap_or(0).min(total);
    let mut limit = req.timeline_limit.unwrap_or(total).clamp(1, total.max(1));
    let mut page = RunTimelinePage {
        run,
        timeline_from: Some(from),
        timeline_total: Some(total),
    };
    // As many entries as fit: half as many each time they do not (one at least).
    loop {
        let end = (from + limit).min(total);
        page.run.timeline = timeline[from..end].to_vec();
        match to_json(
            &page,
            max,
            "even one timeline entry (with the run's other fields) is more than one message holds",
        ) {
            Err(_) if limit > 1 => limit /= 2,
            other => return other,
        }
    }
}

/// `flow`: the deployed flow, its latest version.
fn flow(emulator: &Emulator, req: &FlowRequest, max: usize) -> Answer {
    match emulator.lock().registry.flow(&req.flow_id).cloned() {
        Some(flow) => to_json(&*flow, max, "the flow is larger than one message"),
        None => Err(message(format!("no flow {:?} is deployed", req.flow_id))),
    }
}

/// `records`: the first records after `since` that fit; the requester asks again after the last
/// seq it got.
fn records(emulator: &Emulator, req: &RecordsRequest, max: usize) -> Answer {
    let records = emulator.records_since(req.since, req.limit);
    let items = records
        .iter()
        .map(serde_json::to_value)
        .collect::<Result<Vec<_>, _>>()
        .map_err(message)?;
    page_reply(emulator, items, max, None)
}

/// `violations`: a page of them, or all of them when the request names no `limit`.
fn violations(emulator: &Emulator, req: &ViolationsRequest, max: usize) -> Answer {
    let all = emulator.violations();
    let from = req.after.unwrap_or(0).min(all.len());
    let items = all[from..]
        .iter()
        .take(req.limit.unwrap_or(usize::MAX))
        .map(serde_json::to_value)
        .collect::<Result<Vec<_>, _>>()
        .map_err(message)?;
    let whole = req.limit.is_none().then_some(
        "the violations do not fit in one reply: read them a page at a time with `after` \
         (how many you have) and `limit` (ControlClient::violations does)",
    );
    page_reply(emulator, items, max, whole)
}

/// `services`: those named after `after`, as many as fit, by name.
fn services(emulator: &Emulator, req: &ServicesRequest, max: usize) -> Answer {
    let services = emulator.services_after(req.after.as_deref(), req.limit);
    let items = services
        .iter()
        .map(|(name, s)| serde_json::to_value((name, s)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(message)?;
    let (page, cuts) = reply_fit::fit_page(items, max);
    note_cuts(emulator, cuts);
    if req.limit.is_none() && page.len() < services.len() {
        return Err(message(format!(
            "the {} services do not fit in one reply (the server's max_payload is {max} \
             bytes): read them a page at a time with `after` (the last name you have) \
             and `limit` (ControlClient::services does)",
            services.len()
        )));
    }
    // Back from the [name, service] pairs fitted above to the reply's map.
    let map: serde_json::Map<String, Value> = page
        .into_iter()
        .filter_map(|pair| match pair {
            Value::Array(mut kv) if kv.len() == 2 => {
                let v = kv.pop()?;
                Some((kv.pop()?.as_str()?.to_owned(), v))
            }
            _ => None,
        })
        .collect();
    to_json(&map, max, "")
}

/// Counts the items sent cut (`cut_in_replies` in the state).
fn note_cuts(emulator: &Emulator, cuts: usize) {
    if cuts > 0 {
        emulator.lock().counts.cut_in_replies += cuts as u64;
    }
}

/// The first of `items` that fit in a reply, each cut to fit on its own if it must (counted).
/// With `whole`, the request asked for every item: if they do not all fit, that error instead.
fn page_reply(emulator: &Emulator, items: Vec<Value>, max: usize, whole: Option<&str>) -> Answer {
    let total = items.len();
    let (page, cuts) = reply_fit::fit_page(items, max);
    note_cuts(emulator, cuts);
    if let Some(error) = whole
        && page.len() < total
    {
        return Err(message(format!(
            "{total} items are more than one reply holds (the server's max_payload is {max} bytes): {error}"
        )));
    }
    to_json(&page, max, "")
}

/// A writer that refuses to grow past a limit, so a reply too large for NATS is found while it
/// is written, not after the whole of it was built.
struct Limited {
    bytes: Vec<u8>,
    max: usize,
}

impl std::io::Write for Limited {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len() + buf.len() > self.max {
            return Err(std::io::Error::other("too large"));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// `v` as JSON in at most `max` bytes; else an error that says how to ask for less.
fn to_json<T: Serialize>(v: &T, max: usize, ask_for_less: &str) -> Answer {
    let mut out = Limited {
        bytes: Vec::new(),
        max,
    };
    match serde_json::to_writer(&mut out, v) {
        Ok(()) => Ok(out.bytes),
        Err(e) if e.is_io() => Err(message(format!(
            "the reply would be larger than the server's max_payload ({max} bytes) and cannot be sent: {ask_for_less}"
        ))),
        Err(e) => Err(message(e)),
    }
}

/// The reply's bytes: `{"ok": true, "result": …}` or `{"ok": false, "error": …}`, within `max`
/// bytes (an error too large is cut to its first part). Errors go through a JSON value, so
/// their keys are sorted (`error` before `ok`), as they always were.
fn reply_bytes(answer: Answer, max: usize) -> Vec<u8> {
    let error = match answer {
        Ok(result) => {
            let mut bytes = br#"{"ok":true,"result":"#.to_vec();
            bytes.extend_from_slice(&result);
            bytes.push(b'}');
            return bytes;
        }
        Err(error) => error,
    };
    let sorted = |reply: &ErrorReply| {
        serde_json::to_value(reply)
            .and_then(|v| serde_json::to_vec(&v))
            .unwrap_or_default()
    };
    let text = serde_json::to_string(&error).unwrap_or_default();
    let bytes = sorted(&ErrorReply { ok: false, error });
    if bytes.len() <= max {
        return bytes;
    }
    let cut: String = text.chars().take(max / 8).collect();
    sorted(&ErrorReply {
        ok: false,
        error: ErrorBody::Message(format!(
            "{cut}… (cut: the whole error is larger than the server's max_payload)"
        )),
    })
}

/// Whether records are being published, and until when.
#[derive(Debug, Default)]
struct Lease {
    until: Option<tokio::time::Instant>,
    /// A forwarder task is running.
    forwarding: bool,
}

/// Publishes every record on `subject` until the lease runs out (then ends, so an emulator nobody
/// follows neither serialises nor sends records) or the emulator is gone. A forwarder that falls
/// behind the recorder's channel skips records, counted and logged here; a follower sees the gap
/// in their `seq` and fetches them with `records`.
async fn forward_records(
    mut records: tokio::sync::broadcast::Receiver<Record>,
    client: async_nats::Client,
    subject: String,
    lease: std::sync::Arc<std::sync::Mutex<Lease>>,
) {
    use tokio::sync::broadcast::error::RecvError;
    let mut skipped: u64 = 0;
    loop {
        let until = {
            let mut held = lease.lock().unwrap_or_else(|e| e.into_inner());
            match held.until {
                Some(until) if until > tokio::time::Instant::now() => until,
                _ => {
                    // Decided under the lock, so a request now starts a new forwarder.
                    held.forwarding = false;
                    held.until = None;
                    return;
                }
            }
        };
        let sleep = tokio::time::sleep_until(until);
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                record = records.recv() => match record {
                    Ok(record) => {
                        if let Ok(bytes) = serde_json::to_vec(&record) {
                            let _ = client.publish(subject.clone(), bytes.into()).await;
                        }
                    }
                    Err(RecvError::Lagged(n)) => {
                        skipped = skipped.saturating_add(n);
                        tracing::warn!(
                            skipped,
                            "the records' forwarder fell behind and skipped {n} records \
                             (followers fetch them by seq with `records`)"
                        );
                    }
                    Err(RecvError::Closed) => {
                        lease.lock().unwrap_or_else(|e| e.into_inner()).forwarding = false;
                        return;
                    }
                },
                // The lease as it was: look again (it may have been renewed).
                () = &mut sleep => break,
            }
        }
    }
}
