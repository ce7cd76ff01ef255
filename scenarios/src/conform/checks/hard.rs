//! The checks of issue 31: flows that reach the hard cases (a node run twice before a hop, a
//! redeploy mid-run, an output after a timer, traces), timing (heartbeats, backoff, the wait for
//! a late broadcast) and what the conformance checker sees of acks, consumers and ordering.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use triggers_emulator::conformance::Violation;
use triggers_emulator::recorder::{Record, RecordKind};
use triggers_sdk::flow::Flow;
use triggers_sdk::transport;
use triggers_sdk::wire::header::names;
use triggers_sdk::wire::shapes::status;
use triggers_sdk::wire::{CompletionEvent, Headers};

use super::{
    Ctx, Failure, SERVICE, action, cin, echo_flow, fail, flaky_flow, forged_envelope, line, output,
    pin,
};
use crate::conform::peer::PEER;

/// How often a poll of the emulator's records looks again.
const POLL: Duration = Duration::from_millis(50);

impl Ctx {
    /// Waits until `echo` succeeds in the forged run `run`; gives up when the run's delivery is
    /// dead-lettered, saying so in `dead_lettered`'s words (from the entry's kind, its subject
    /// and its error message).
    async fn echo_succeeds(
        &self,
        run: &str,
        dead_lettered: impl Fn(&str, &str, &str) -> String,
    ) -> Result<CompletionEvent, String> {
        let id = triggers_emulator::RunId(run.to_owned());
        self.poll(
            |ctx| {
                ctx.events(&id, "echo")
                    .into_iter()
                    .find(|e| e.status == status::SUCCEEDED)
            },
            |ctx| {
                ctx.lab.dlq().into_iter().find_map(|r| match &r.kind {
                    RecordKind::Dlq { entry: Some(e), .. } if e.envelope.flow_run_id == run => {
                        Some(dead_lettered(&e.kind, &r.subject, &e.err_msg))
                    }
                    _ => None,
                })
            },
        )
        .await
    }

    /// Looks at the emulator's state until `look` finds something or `give_up` says there is
    /// no point waiting longer, with the check's patience (extended as [`Ctx::patient`] does).
    async fn poll<T>(
        &self,
        look: impl Fn(&Ctx) -> Option<T>,
        give_up: impl Fn(&Ctx) -> Option<String>,
    ) -> Result<T, String> {
        let cap = self.timeout.saturating_mul(super::PATIENCE_CAP);
        let started = Instant::now();
        let mut window = Instant::now();
        let mut before = self.progress();
        loop {
            if let Some(found) = look(self) {
                return Ok(found);
            }
            if let Some(why) = give_up(self) {
                return Err(why);
            }
            if window.elapsed() >= self.timeout {
                let now = self.progress();
                if now == before || started.elapsed() + self.timeout > cap {
                    return Err(format!("nothing within {:?}", started.elapsed()));
                }
                before = now;
                window = Instant::now();
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// The hops the services published in `run` from `source`.
    fn hops(&self, run: &str, source: &str) -> Vec<Record> {
        let (records, _) = self.lab.records();
        records
            .into_iter()
            .filter(|r| {
                matches!(&r.kind, RecordKind::Hop { run_id, source_node_id, from_emulator: false }
                    if run_id == run && source_node_id == source)
            })
            .collect()
    }

    /// The conformance checker's violations of any of `rules`.
    fn violations_of(&self, rules: &[&str]) -> Vec<Violation> {
        self.lab
            .violations()
            .into_iter()
            .filter(|v| rules.contains(&v.rule))
            .collect()
    }
}

fn headers_of(record: &Record) -> Headers {
    record
        .headers
        .iter()
        .map(|(n, v)| (n.clone(), v.clone()))
        .collect()
}

fn describe_violations(found: &[Violation]) -> String {
    found
        .iter()
        .take(3)
        .map(|v| format!("{} on {}: {}", v.rule, v.subject, v.message))
        .collect::<Vec<_>>()
        .join(" | ")
}

/// How long the kit looks for the checker's verdict on a delivery after its run settled: the
/// ack follows the reports, so a correct service's is in at once; a broken service's ack came
/// before them, so the verdict is in already. A slow machine can only hide a mistake, never
/// fail a correct service.
const VERDICT_WAIT: Duration = Duration::from_secs(1);

/// Fails when the conformance checker reported any of `rules` (which the emulator judges as it
/// watches acks, consumers and the order of what a delivery publishes).
async fn no_violation(ctx: &Ctx, rules: &[&str], expected: &str) -> Result<(), Failure> {
    let started = Instant::now();
    loop {
        let found = ctx.violations_of(rules);
        if !found.is_empty() {
            return fail(expected, describe_violations(&found));
        }
        if started.elapsed() >= VERDICT_WAIT {
            return Ok(());
        }
        tokio::time::sleep(POLL).await;
    }
}

pub(super) async fn consumer(ctx: &mut Ctx) -> Result<(), Failure> {
    ctx.deploy(echo_flow()).await?;
    let run = ctx.trigger("conform-echo", &json!({"consumer": 1})).await?;
    ctx.succeeded(&run).await?;
    no_violation(
        ctx,
        &["consumer_missing", "consumer_config"],
        "the durable consumer as protocol.md §4 says: bounded max_deliver, explicit acks, max_ack_pending as specified",
    )
    .await
}

pub(super) async fn ack_order(ctx: &mut Ctx) -> Result<(), Failure> {
    ctx.deploy(echo_flow()).await?;
    let run = ctx.trigger("conform-echo", &json!({"ack": 1})).await?;
    ctx.succeeded(&run).await?;
    ctx.deploy(flaky_flow()).await?;
    let run = ctx
        .trigger("conform-flaky", &json!({"failures": 9}))
        .await?;
    ctx.settled(&run).await?;
    no_violation(
        ctx,
        &["ack_before_reports"],
        "each delivery acked after all its reports (events, DLQ entries, hops, outputs) were confirmed",
    )
    .await
}

pub(super) async fn dlq_order(ctx: &mut Ctx) -> Result<(), Failure> {
    ctx.deploy(flaky_flow()).await?;
    let run = ctx
        .trigger("conform-flaky", &json!({"failures": 9}))
        .await?;
    ctx.settled(&run).await?;
    no_violation(
        ctx,
        &["dlq_before_failed_event"],
        "a node's failed event published before its DLQ entry",
    )
    .await
}

fn hop_out_flow() -> Value {
    line(
        "conform-hop-out",
        vec![
            cin("in"),
            action("echo", SERVICE, "echo"),
            pin("pin"),
            action("pecho", PEER, "echo"),
        ],
    )
}

pub(super) async fn handoff_order(ctx: &mut Ctx) -> Result<(), Failure> {
    ctx.deploy(hop_out_flow()).await?;
    let run = ctx.trigger("conform-hop-out", &json!({"order": 1})).await?;
    ctx.succeeded(&run).await?;
    ctx.deploy(echo_flow()).await?;
    let run = ctx.trigger("conform-echo", &json!({"order": 2})).await?;
    ctx.succeeded(&run).await?;
    no_violation(
        ctx,
        &["handed_on_before_event"],
        "a node's succeeded event published before its output or hop",
    )
    .await
}

pub(super) async fn hop_jetstream(ctx: &mut Ctx) -> Result<(), Failure> {
    ctx.deploy(hop_out_flow()).await?;
    let run = ctx.trigger("conform-hop-out", &json!({"js": 1})).await?;
    ctx.succeeded(&run).await?;
    no_violation(
        ctx,
        &["hop_not_jetstream"],
        "hops published through JetStream, the PubAck awaited (a request with a reply subject)",
    )
    .await
}

/// Whether `text` is a W3C traceparent of version 00 for `trace_id`.
fn traceparent_of(text: &str, trace_id: &str) -> bool {
    let parts: Vec<&str> = text.split('-').collect();
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    parts.len() == 4
        && parts[0] == "00"
        && parts[1] == trace_id
        && hex(parts[2], 16)
        && parts[2] != "0000000000000000"
        && hex(parts[3], 2)
}

pub(super) async fn hop_traceparent(ctx: &mut Ctx) -> Result<(), Failure> {
    ctx.deploy(hop_out_flow()).await?;
    let run = ctx.trigger("conform-hop-out", &json!({"trace": 1})).await?;
    let settled = ctx.succeeded(&run).await?;
    let Some(hop) = ctx.hops(&run.0, "echo").into_iter().next() else {
        return fail("a hop from echo on peer.inbound", "none recorded");
    };
    let headers = headers_of(&hop);
    let got = headers.get(names::TRACEPARENT).unwrap_or_default();
    if settled.trace_id.is_empty() || traceparent_of(got, &settled.trace_id) {
        return Ok(());
    }
    fail(
        format!(
            "the hop's {} `00-{}-<a new span id>-<flags>` (the run has a trace)",
            names::TRACEPARENT,
            settled.trace_id
        ),
        if got.is_empty() {
            "no traceparent: the run's trace ends at the hop".to_owned()
        } else {
            format!("{got:?}")
        },
    )
}

pub(super) async fn traceparent_invalid(ctx: &mut Ctx) -> Result<(), Failure> {
    let version = ctx.deploy(echo_flow()).await?;
    let envelope = forged_envelope(
        "conform-forged-bad-traceparent",
        "conform-echo",
        version,
        "in",
    );
    let mut headers = envelope.to_headers();
    headers.insert(names::TRACEPARENT, "zz-not-a-traceparent");
    ctx.forge(&headers, json!({"trace": "bad"}).to_string().as_bytes())
        .await?;
    let ran = ctx
        .echo_succeeds(&envelope.flow_run_id, |kind, subject, err| {
            format!("the delivery was dead-lettered ({kind} on {subject}: {err})")
        })
        .await;
    match ran {
        Ok(_) => Ok(()),
        Err(arrived) => fail(
            "an invalid traceparent ignored (tracing never refuses work): echo runs and succeeds",
            arrived,
        ),
    }
}

/// `in → m1, m2 → echo → pin → pecho`: echo runs twice in one delivery (a fan-in without a
/// join), and each execution hands on to `peer`.
fn fan_in_flow() -> Value {
    json!({
        "id": "conform-hop-keys",
        "nodes": [
            cin("in"),
            {"id": "m1", "type": "mapping", "config": {"fields": {"x": "$.x", "path": {"const": "one"}}}},
            {"id": "m2", "type": "mapping", "config": {"fields": {"x": "$.x", "path": {"const": "two"}}}},
            action("echo", SERVICE, "echo"),
            pin("pin"),
            action("pecho", PEER, "echo"),
        ],
        "edges": [
            {"id": "e1", "from": "in", "to": "m1"},
            {"id": "e2", "from": "in", "to": "m2"},
            {"id": "e3", "from": "m1", "to": "echo"},
            {"id": "e4", "from": "m2", "to": "echo"},
            {"id": "e5", "from": "echo", "to": "pin"},
            {"id": "e6", "from": "pin", "to": "pecho"},
        ],
    })
}

pub(super) async fn hop_keys(ctx: &mut Ctx) -> Result<(), Failure> {
    ctx.deploy(fan_in_flow()).await?;
    let run = ctx.trigger("conform-hop-keys", &json!({"x": 1})).await?;
    // A key shared by the two hand-offs loses one to JetStream's dedup: the run never settles,
    // so judge the keys whether or not it did.
    let settled = ctx.settled(&run).await;
    let hops = ctx.hops(&run.0, "echo");
    let keys: Vec<String> = hops
        .iter()
        .map(|h| {
            headers_of(h)
                .get(names::NATS_MSG_ID)
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    let distinct: std::collections::BTreeSet<&String> = keys.iter().collect();
    if hops.len() >= 2 && distinct.len() < hops.len() {
        return fail(
            "two hand-offs of one node in one run (a fan-in) with two keys: each derived from the \
             inbound delivery's key and the edges taken since (wire.md)",
            format!(
                "{} hops share the key {:?}: JetStream's dedup drops all but one",
                hops.len(),
                keys[0]
            ),
        );
    }
    settled?;
    let pecho = ctx.statuses(&run, "pecho");
    if hops.len() != 2 || pecho != [status::SUCCEEDED, status::SUCCEEDED] {
        return fail(
            "echo run twice (once per path), each execution handing on once: pecho succeeded twice",
            format!("{} hop(s) from echo; pecho: {pecho:?}", hops.len()),
        );
    }
    Ok(())
}

fn strip_flow() -> Value {
    line(
        "conform-timer-strip",
        vec![
            cin("in"),
            action("echo", SERVICE, "echo"),
            json!({"id": "wait", "type": "timer", "config": {"delay_ms": 3_600_000}}),
            cin("cin"),
            action("echo2", SERVICE, "echo"),
            output("out", "conform.out.timer-strip"),
        ],
    )
}

pub(super) async fn timer_strip(ctx: &mut Ctx) -> Result<(), Failure> {
    ctx.deploy(strip_flow()).await?;
    let mut out = ctx.listen("conform.out.timer-strip").await?;
    let run = ctx
        .trigger("conform-timer-strip", &json!({"strip": 1}))
        .await?;
    wait_on_timer(ctx, &run, "the timer armed after echo succeeded").await?;
    advance_hour(ctx).await?;
    let msg = ctx
        .next(&mut out, "the output after the timer's delivery")
        .await?;
    let headers = transport::from_nats(msg.headers.as_ref());
    let forwarded: Vec<&str> = names::DURABLE_TIMER_TRIPLET
        .iter()
        .copied()
        .filter(|n| headers.get(n).is_some())
        .collect();
    if !forwarded.is_empty() {
        return fail(
            "an output after a timer's delivery without the Durable Timer triplet (it is the \
             delivery's, never forwarded)",
            format!("the output carries {}", forwarded.join(", ")),
        );
    }
    ctx.succeeded(&run).await.map(|_| ())
}

/// Waits until `run` is idle with a timer armed; `armed` says what the check expected of it.
pub(super) async fn wait_on_timer(
    ctx: &Ctx,
    run: &triggers_emulator::RunId,
    armed: &str,
) -> Result<(), Failure> {
    let idle = ctx
        .patient(|lab| {
            let run = run.clone();
            async move { lab.wait_run_idle(&run).await }
        })
        .await
        .map_err(|e| Failure {
            expected: "the run to wait on its timer".into(),
            arrived: e.to_string(),
        })?;
    if idle.timers.is_empty() {
        return fail(
            armed,
            format!(
                "{:?}: {}",
                idle.status,
                ctx.lab.describe_run(&run.0).replace('\n', "; ")
            ),
        );
    }
    Ok(())
}

async fn advance_hour(ctx: &Ctx) -> Result<(), Failure> {
    ctx.lab
        .advance(Duration::from_secs(3600))
        .await
        .map(|_| ())
        .map_err(|e| Failure {
            expected: "the timer's delivery to be published".into(),
            arrived: e.to_string(),
        })
}

fn redeploy_flow(delay_ms: u64) -> Value {
    line(
        "conform-redeploy",
        vec![
            cin("in"),
            action("echo", SERVICE, "echo"),
            json!({"id": "wait", "type": "timer", "config": {"delay_ms": delay_ms}}),
            cin("cin"),
            action("echo2", SERVICE, "echo"),
            pin("pin"),
            action("pecho", PEER, "echo"),
        ],
    )
}

pub(super) async fn redeploy_mid_run(ctx: &mut Ctx) -> Result<(), Failure> {
    let v1 = ctx.deploy(redeploy_flow(3_600_000)).await?;
    let run = ctx
        .trigger("conform-redeploy", &json!({"redeploy": 1}))
        .await?;
    wait_on_timer(ctx, &run, "the timer armed after echo succeeded").await?;
    // A newer version while the run waits: its later deliveries still carry v1.
    let flow: Flow = serde_json::from_value(redeploy_flow(3_600_001)).map_err(|e| Failure {
        expected: "the kit's flow conform-redeploy (v2) to decode".into(),
        arrived: e.to_string(),
    })?;
    let deployed_at = triggers_sdk::wire::GoTime::now();
    let v2 = match ctx.lab.deploy(flow).await {
        Ok(d) => d.flow.version,
        Err(e) => return fail("conform-redeploy v2 to be released", e.to_string()),
    };
    ctx.versions.insert("conform-redeploy".into(), v2);
    // The service holds v2 once the broadcast arrived: a heartbeat sent after the deploy says
    // it had time to take it (one sent before would not: the timer's delivery could then race
    // the broadcast, and a service reporting the held version would pass unseen).
    let _ = ctx
        .lab
        .with_wait_timeout(Duration::from_secs(7).max(ctx.timeout))
        .wait_for_heartbeat(SERVICE, |hb| hb.now.unix_nanos() > deployed_at.unix_nanos())
        .await;
    advance_hour(ctx).await?;
    let settled = ctx.settled(&run).await;
    let events: Vec<CompletionEvent> = ctx
        .lab
        .completions()
        .into_iter()
        .filter(|e| e.flow_run_id == run.0 && e.service == SERVICE)
        .collect();
    let wrong: Vec<String> = events
        .iter()
        .filter(|e| e.flow_version != v1)
        .map(|e| {
            format!(
                "{} {} with flow_version {}",
                e.node_id, e.status, e.flow_version
            )
        })
        .collect();
    let hop_versions: Vec<String> = ctx
        .hops(&run.0, "echo2")
        .iter()
        .filter_map(|h| {
            let v = headers_of(h).get(names::FLOW_VERSION)?.to_owned();
            (v != v1.to_string()).then(|| format!("the hop from echo2 with flow_version {v}"))
        })
        .collect();
    if !wrong.is_empty() || !hop_versions.is_empty() {
        return fail(
            format!(
                "the run's version (v{v1}) on every event and hop, though v{v2} was deployed mid-run"
            ),
            wrong
                .into_iter()
                .chain(hop_versions)
                .collect::<Vec<_>>()
                .join("; "),
        );
    }
    let settled = settled?;
    if settled.status != triggers_emulator::recorder::RunStatus::Succeeded {
        return fail(
            "the v1 run to succeed after the redeploy",
            format!(
                "{:?}: {}",
                settled.status,
                ctx.lab.describe_run(&run.0).replace('\n', "; ")
            ),
        );
    }
    Ok(())
}

/// The heartbeats of the service so far (not the shutting-down one), in arrival order.
fn beats(ctx: &Ctx) -> Vec<triggers_sdk::wire::Heartbeat> {
    let (records, _) = ctx.lab.records();
    records
        .into_iter()
        .filter_map(|r| match r.kind {
            RecordKind::Heartbeat { heartbeat }
                if heartbeat.service == SERVICE && !heartbeat.shutting_down =>
            {
                Some(heartbeat)
            }
            _ => None,
        })
        .collect()
}

/// The interval protocol.md §12 asks for, and what the kit takes as it (a loaded machine may
/// delay a beat; a service beating every minute, or many times a second, is wrong).
const BEAT: Duration = Duration::from_secs(5);
const BEAT_MIN: Duration = Duration::from_millis(3500);
const BEAT_MAX: Duration = Duration::from_millis(8500);

pub(super) async fn heartbeat_interval(ctx: &mut Ctx) -> Result<(), Failure> {
    // Three beats make two intervals: up to 10 s after the first.
    let patience = (BEAT * 2 + BEAT_MAX).max(ctx.timeout);
    let started = Instant::now();
    while beats(ctx).len() < 3 && started.elapsed() < patience {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let beats = beats(ctx);
    if beats.len() < 3 {
        return fail(
            format!("heartbeats every {BEAT:?}: three within {patience:?}"),
            format!("{} heartbeat(s)", beats.len()),
        );
    }
    let moved: Vec<String> = beats
        .iter()
        .filter(|b| b.started_at.unix_nanos() != beats[0].started_at.unix_nanos())
        .map(|b| b.started_at.to_string())
        .collect();
    if !moved.is_empty() {
        return fail(
            format!(
                "started_at fixed for the replica's life ({})",
                beats[0].started_at
            ),
            format!("later heartbeats say {}", moved.join(", ")),
        );
    }
    let gaps: Vec<Duration> = beats
        .windows(2)
        .map(|w| {
            let ns = (w[1].now.unix_nanos() - w[0].now.unix_nanos()).max(0);
            Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
        })
        .collect();
    let mut sorted = gaps.clone();
    sorted.sort();
    let median = sorted[sorted.len() / 2];
    if median < BEAT_MIN || median > BEAT_MAX {
        return fail(
            format!("a heartbeat every {BEAT:?} (protocol.md §12)"),
            format!("intervals {gaps:?} (median {median:?})"),
        );
    }
    Ok(())
}

pub(super) async fn retry_backoff(ctx: &mut Ctx) -> Result<(), Failure> {
    ctx.deploy(flaky_flow()).await?;
    let run = ctx
        .trigger("conform-flaky", &json!({"failures": 2}))
        .await?;
    ctx.succeeded(&run).await?;
    let events = ctx.events(&run, "flaky");
    if events.len() != 3 {
        return fail(
            "retrying, retrying, succeeded for flaky",
            format!("{:?}", events.iter().map(|e| &e.status).collect::<Vec<_>>()),
        );
    }
    // flaky's policy: 20 ms before attempt 2, then 40 ms (initial_backoff_ms 20, factor 2).
    // Between two attempts' finished_at: the wait and an attempt; a fifth off is the slack.
    let ns = |e: &CompletionEvent| e.finished_at.unix_nanos();
    let gaps = [
        ns(&events[1]) - ns(&events[0]),
        ns(&events[2]) - ns(&events[1]),
    ];
    let want = [20_000_000i128, 40_000_000];
    if gaps[0] * 5 < want[0] * 4 || gaps[1] * 5 < want[1] * 4 {
        return fail(
            "flaky's retries after 20 ms, then 40 ms (initial_backoff_ms 20, backoff_factor 2)",
            format!(
                "the events {} ms and {} ms apart",
                gaps[0] / 1_000_000,
                gaps[1] / 1_000_000
            ),
        );
    }
    Ok(())
}

fn late_flow() -> Value {
    line(
        "conform-late",
        vec![cin("in"), action("echo", SERVICE, "echo")],
    )
}

/// How long after its delivery the kit deploys the flow: well inside the 2 s a service waits.
const LATE_BY: Duration = Duration::from_millis(500);

pub(super) async fn unknown_flow_wait(ctx: &mut Ctx) -> Result<(), Failure> {
    if ctx.versions.contains_key("conform-late") {
        return fail("conform-late not deployed yet", "it was");
    }
    // A new flow's first version is 1.
    let envelope = forged_envelope("conform-forged-late-flow", "conform-late", 1, "in");
    ctx.forge(
        &envelope.to_headers(),
        json!({"late": true}).to_string().as_bytes(),
    )
    .await?;
    tokio::time::sleep(LATE_BY).await;
    let version = ctx.deploy(late_flow()).await?;
    if version != 1 {
        return fail("conform-late at version 1", format!("version {version}"));
    }
    let ran = ctx
        .echo_succeeds(&envelope.flow_run_id, |kind, _, err| {
            format!(
                "dead-lettered as {kind} though the flow was broadcast {LATE_BY:?} after the \
                 delivery: {err}"
            )
        })
        .await;
    match ran {
        Ok(_) => Ok(()),
        Err(arrived) => fail(
            "a delivery for a flow not held yet waits for its broadcast (at least 2 s), then runs",
            arrived,
        ),
    }
}
