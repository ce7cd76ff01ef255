//! The `expect_*` steps: each waits until what it expects has arrived (or, for an exact count,
//! watches a little longer), and otherwise says what it expected and what did arrive.

use serde_json::Value;
use tokio::time::Instant;
use triggers_emulator::recorder::{Record, RecordKind, TimelineEntry};
use triggers_sdk::wire::ResultEvent;
use triggers_sdk::wire::header::parse_dlq_msg_id;

use crate::describe;
use crate::model::{
    EventOrder, EventSpec, ExpectCallsStep, ExpectDlqStep, ExpectEventsStep, ExpectHttpStep,
    ExpectRegistrationStep,
};
use crate::runner::{DEFAULT_SETTLE, IDLE_GRACE, Lab};
use crate::steps::StepResult;

pub(crate) async fn expect_heartbeat(
    lab: &Lab<'_>,
    h: &crate::model::ExpectHeartbeatStep,
) -> StepResult {
    let mut w = lab.waiter(h.timeout);
    loop {
        let (records, _) = lab.em().records();
        let found = records.iter().rev().find_map(|r| match &r.kind {
            RecordKind::Heartbeat { heartbeat }
                if heartbeat.service == h.service
                    && h.shutting_down.is_none_or(|s| s == heartbeat.shutting_down) =>
            {
                Some(heartbeat.clone())
            }
            _ => None,
        });
        if let Some(hb) = found {
            return Ok(format!("heartbeat at {}", hb.now));
        }
        if !w.next().await {
            return Err(w.timeout(
                format!(
                    "a heartbeat from {:?}{}",
                    h.service,
                    match h.shutting_down {
                        Some(s) => format!(" with shutting_down={s}"),
                        None => String::new(),
                    }
                ),
                describe::heartbeats(lab.em()),
            ));
        }
    }
}

pub(crate) async fn expect_service(
    lab: &Lab<'_>,
    s: &crate::model::ExpectServiceStep,
) -> StepResult {
    let mut w = lab.waiter(s.timeout);
    let replicas = || {
        lab.em()
            .services()
            .get(&s.service)
            .map(|st| st.replicas.len())
    };
    loop {
        match (replicas(), s.replicas) {
            (Some(_), None) => return Ok("registered".into()),
            (Some(n), Some(want)) if n >= want => {
                tokio::time::sleep(DEFAULT_SETTLE).await;
                let n = replicas().unwrap_or_default();
                return if n == want {
                    Ok(format!("{n} replica(s)"))
                } else {
                    Err(format!(
                        "expected {want} replica(s) of {:?}, the emulator saw {n}; {}",
                        s.service,
                        describe::heartbeats(lab.em())
                    ))
                };
            }
            _ => {}
        }
        if !w.next().await {
            return Err(w.timeout(
                format!(
                    "service {:?}{}",
                    s.service,
                    s.replicas
                        .map(|n| format!(" with {n} replica(s) heartbeating"))
                        .unwrap_or_else(|| " to register".into())
                ),
                format!(
                    "{}\n{}",
                    describe::registrations(lab.em()),
                    describe::heartbeats(lab.em())
                ),
            ));
        }
    }
}

pub(crate) async fn expect_violation(
    lab: &mut Lab<'_>,
    v: &crate::model::ExpectViolationStep,
) -> StepResult {
    // What the step expects is excused from the final conformance check, as narrowly as the
    // step matches it (the rule, on its subject if it names one); a step that expects none of
    // it (`count: 0`) excuses nothing.
    if v.count != Some(0) {
        lab.expected_rules
            .insert((v.rule.clone(), v.subject.clone()));
    }
    let matching = || {
        lab.em()
            .violations()
            .into_iter()
            .filter(|x| x.rule == v.rule)
            .filter(|x| v.subject.as_ref().is_none_or(|s| *s == x.subject))
            .collect::<Vec<_>>()
    };
    let what = format!(
        "{} {} violation(s){}",
        v.count
            .map(|n| format!("exactly {n}"))
            .unwrap_or_else(|| "at least one".into()),
        v.rule,
        v.subject
            .as_ref()
            .map(|s| format!(" on {s}"))
            .unwrap_or_default()
    );
    let saw = || {
        let all = lab.em().violations();
        if all.is_empty() {
            "no violation arrived".to_owned()
        } else {
            triggers_emulator::describe_violations(&all)
                .trim_end()
                .to_owned()
        }
    };
    let n = counted(lab, v.timeout, v.count, v.settle, &what, matching, saw).await?;
    Ok(format!("{n} violation(s)"))
}

/// Waits until `matching` finds at least `count` (or one), then, for an exact count, watches
/// `settle` longer and checks the number. Returns how many matched.
async fn counted<T>(
    lab: &Lab<'_>,
    timeout: Option<crate::model::Dur>,
    count: Option<usize>,
    settle: Option<crate::model::Dur>,
    what: &str,
    matching: impl Fn() -> Vec<T>,
    saw: impl Fn() -> String,
) -> Result<usize, String> {
    let runs = RunsConcerned {
        settled: &|| false,
        quiet: None,
    };
    counted_until(lab, timeout, count, settle, what, matching, saw, runs).await
}

/// What a count knows of the runs it concerns.
struct RunsConcerned<'a> {
    /// They have settled: nothing more can come.
    settled: &'a dyn Fn() -> bool,
    /// Where the count is of one run: whether that run is quiet (nothing in flight: settled, or
    /// waiting only for a timer). An exact count is judged only then, since while the run is
    /// running more may come after the count is first reached.
    quiet: Option<(&'a str, &'a dyn Fn() -> bool)>,
}

/// Whether run `id` has settled, and whether it is quiet (not running): both false and true
/// respectively when no run is given or it is not known.
fn run_concerned<'a>(
    lab: &'a Lab<'_>,
    id: Option<&'a str>,
) -> (impl Fn() -> bool + 'a, impl Fn() -> bool + 'a) {
    let status = move || id.and_then(|id| lab.em().run(id)).map(|r| r.status);
    (
        move || status().is_some_and(|s| s.is_settled()),
        move || status().is_none_or(|s| s != triggers_emulator::recorder::RunStatus::Running),
    )
}

/// [`counted`], ending early when `runs.settled` says nothing more can come (the runs it
/// concerns have settled): an exact count that is short then fails after `settle`, rather than at the
/// end of the step's timeout.
#[allow(clippy::too_many_arguments)]
async fn counted_until<T>(
    lab: &Lab<'_>,
    timeout: Option<crate::model::Dur>,
    count: Option<usize>,
    settle: Option<crate::model::Dur>,
    what: &str,
    matching: impl Fn() -> Vec<T>,
    saw: impl Fn() -> String,
    runs: RunsConcerned<'_>,
) -> Result<usize, String> {
    let settle = settle.map_or(DEFAULT_SETTLE, |d| d.0);
    let want = count.unwrap_or(1);
    let mut w = lab.waiter(timeout);
    if want > 0 {
        let mut finished_at: Option<tokio::time::Instant> = None;
        while matching().len() < want {
            if count.is_some() && (runs.settled)() {
                let at = *finished_at.get_or_insert_with(tokio::time::Instant::now);
                if at.elapsed() >= settle {
                    let n = matching().len();
                    return Err(format!(
                        "expected {what}, found {n}: the run settled, so no more can come \
                         (watched {} after it did); {}",
                        crate::model::Dur(settle),
                        saw()
                    ));
                }
            } else {
                finished_at = None;
            }
            if !w.next().await {
                return Err(w.timeout(what.to_owned(), saw()));
            }
        }
    }
    let Some(exact) = count else {
        return Ok(matching().len());
    };
    // A count of a run still running is not a verdict yet: its next retry, DLQ entry or call
    // may be on the way.
    if let Some((label, quiet)) = runs.quiet {
        while !quiet() {
            if !w.next().await {
                return Err(format!(
                    "expected {what}, found {} so far, but run {label} is still running: more may \
                     come, so the count is not a verdict yet; wait for the run first \
                     (`wait_settled: {label}`), or give the step a longer `timeout`; {}",
                    matching().len(),
                    saw()
                ));
            }
        }
    }
    tokio::time::sleep(settle).await;
    let n = matching().len();
    if n == exact {
        Ok(n)
    } else {
        Err(format!(
            "expected {what}, found {n} (after watching {} more); {}",
            crate::model::Dur(settle),
            saw()
        ))
    }
}

fn event_matches(spec: &EventSpec, e: &TimelineEntry) -> bool {
    e.node_id == spec.node
        && spec.status.as_ref().is_none_or(|s| *s == e.status)
        && spec.service.as_ref().is_none_or(|s| *s == e.service)
        && spec
            .error_contains
            .as_ref()
            .is_none_or(|t| e.error.contains(t.as_str()))
}

fn describe_event(spec: &EventSpec) -> String {
    let mut s = spec.node.clone();
    if let Some(st) = &spec.status {
        s.push_str(&format!(" {st}"));
    }
    if let Some(sv) = &spec.service {
        s.push_str(&format!(" on {sv}"));
    }
    if let Some(t) = &spec.error_contains {
        s.push_str(&format!(" (error contains {t:?})"));
    }
    s
}

/// Whether the timeline satisfies the expected events, in the step's order.
fn events_match(step: &ExpectEventsStep, timeline: &[TimelineEntry]) -> bool {
    let engine = ["triggered", "armed", "fired"];
    let with_engine = step
        .events
        .iter()
        .any(|e| e.status.as_deref().is_some_and(|s| engine.contains(&s)));
    let seen: Vec<&TimelineEntry> = timeline
        .iter()
        .filter(|e| with_engine || e.service != "engine")
        .collect();
    match step.order {
        EventOrder::Strict => {
            seen.len() == step.events.len()
                && seen
                    .iter()
                    .zip(&step.events)
                    .all(|(e, spec)| event_matches(spec, e))
        }
        EventOrder::InOrder => {
            let mut it = seen.iter();
            step.events
                .iter()
                .all(|spec| it.any(|e| event_matches(spec, e)))
        }
        EventOrder::Any => {
            let mut used = vec![false; seen.len()];
            step.events.iter().all(|spec| {
                match seen
                    .iter()
                    .enumerate()
                    .find(|(i, e)| !used[*i] && event_matches(spec, e))
                {
                    Some((i, _)) => {
                        used[i] = true;
                        true
                    }
                    None => false,
                }
            })
        }
    }
}

pub(crate) async fn expect_events(lab: &Lab<'_>, step: &ExpectEventsStep) -> StepResult {
    let id = lab.run_id(&step.run)?;
    let order = match step.order {
        EventOrder::Strict => "exactly, in this order",
        EventOrder::InOrder => "in this order",
        EventOrder::Any => "in any order",
    };
    let expected = format!(
        "run {} to show these events {order}:\n{}",
        step.run,
        step.events
            .iter()
            .map(|e| format!("    {}", describe_event(e)))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let mut w = lab.waiter(step.timeout);
    let mut idle_since: Option<Instant> = None;
    loop {
        if let Some(run) = lab.em().run(&id) {
            let matched = events_match(step, &run.timeline);
            let idle = run.pending.is_empty();
            // A strict list must not match a run still on its way: more may come.
            if matched && (idle || step.order != EventOrder::Strict) {
                return Ok(format!("{} event(s) matched", step.events.len()));
            }
            if idle {
                let since = *idle_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= IDLE_GRACE {
                    return Err(format!(
                        "expected {expected}\nthe run is idle and they did not arrive; {}",
                        lab.account_run(&id)
                    ));
                }
            } else {
                idle_since = None;
            }
        }
        if !w.next().await {
            return Err(w.timeout(expected, lab.account_run(&id)));
        }
    }
}

/// JSON equality with numbers compared as numbers (`1` equals `1.0`).
pub(crate) fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_eq(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

struct DlqWant {
    subject: Option<String>,
    run: Option<String>,
    run_label: String,
    kind: Option<String>,
    msg_id: Option<String>,
    err_contains: Option<String>,
    body: Option<Value>,
}

impl DlqWant {
    fn matches(&self, r: &Record) -> bool {
        matches!(&r.kind, RecordKind::Dlq { .. }) && self.differences(r).is_empty()
    }

    /// How a stored entry differs from the one expected (empty: it matches).
    fn differences(&self, r: &Record) -> Vec<String> {
        let RecordKind::Dlq { entry, msg_id } = &r.kind else {
            return vec!["not a DLQ record".into()];
        };
        let mut out = Vec::new();
        if let Some(s) = &self.subject
            && *s != r.subject
        {
            out.push(format!("subject is {}, not {s}", r.subject));
        }
        let Some(e) = entry else {
            if self.run.is_some()
                || self.kind.is_some()
                || self.err_contains.is_some()
                || self.body.is_some()
                || self.msg_id.as_deref() == Some("dlq_form")
            {
                out.push("the bytes are not a DLQ entry".into());
            }
            if let Some(m) = &self.msg_id
                && m != "dlq_form"
                && m != msg_id
            {
                out.push(format!("Nats-Msg-Id is {msg_id}, not {m}"));
            }
            return out;
        };
        if let Some(id) = &self.run
            && e.envelope.flow_run_id != *id
        {
            out.push(format!("run is {}, not {id}", e.envelope.flow_run_id));
        }
        if let Some(k) = &self.kind
            && e.kind != *k
        {
            out.push(format!("kind is {}, not {k}", e.kind));
        }
        if let Some(t) = &self.err_contains
            && !e.err_msg.contains(t.as_str())
        {
            out.push(format!("err_msg does not contain {t:?}"));
        }
        if let Some(b) = &self.body
            && !serde_json::from_str::<Value>(e.body.get()).is_ok_and(|got| json_eq(b, &got))
        {
            out.push(format!("body is {}, not {b}", e.body.get()));
        }
        match self.msg_id.as_deref() {
            None => {}
            Some("dlq_form") => match parse_dlq_msg_id(msg_id) {
                None => out.push(format!(
                    "Nats-Msg-Id {msg_id:?} is not of the form <idempotency_key>:dlq:<unix_ns>"
                )),
                Some((key, _)) if key != e.envelope.idempotency_key => out.push(format!(
                    "Nats-Msg-Id {msg_id:?} names key {key:?}, the entry's idempotency_key is {:?}",
                    e.envelope.idempotency_key
                )),
                Some(_) => {}
            },
            Some(exact) if exact != msg_id => {
                out.push(format!("Nats-Msg-Id is {msg_id}, not {exact}"));
            }
            Some(_) => {}
        }
        out
    }

    /// Every stored entry, each with how it differs from the one expected.
    fn account(&self, lab: &Lab<'_>) -> String {
        describe::listing(
            lab.em()
                .dlq()
                .iter()
                .map(|r| {
                    let diff = self.differences(r);
                    if diff.is_empty() {
                        format!("{} (matches)", describe::dlq_line(r))
                    } else {
                        format!(
                            "{}
      differs: {}",
                            describe::dlq_line(r),
                            diff.join("; ")
                        )
                    }
                })
                .collect(),
        )
    }

    fn describe(&self, count: Option<usize>) -> String {
        let mut parts = Vec::new();
        if let Some(s) = &self.subject {
            parts.push(format!("on {s}"));
        }
        if let Some(k) = &self.kind {
            parts.push(format!("of kind {k}"));
        }
        if self.run.is_some() {
            parts.push(format!("of run {}", self.run_label));
        }
        if let Some(m) = &self.msg_id {
            parts.push(if m == "dlq_form" {
                "with Nats-Msg-Id <idempotency_key>:dlq:<unix_ns>".to_owned()
            } else {
                format!("with Nats-Msg-Id {m}")
            });
        }
        if let Some(t) = &self.err_contains {
            parts.push(format!("whose err_msg contains {t:?}"));
        }
        if let Some(b) = &self.body {
            parts.push(format!("with body {b}"));
        }
        format!(
            "{} DLQ entr{} {} (as stored, after Nats-Msg-Id dedup)",
            count
                .map(|n| format!("exactly {n}"))
                .unwrap_or_else(|| "at least one".into()),
            if count == Some(1) { "y" } else { "ies" },
            parts.join(", ")
        )
    }
}

pub(crate) async fn expect_dlq(lab: &Lab<'_>, d: &ExpectDlqStep) -> StepResult {
    let want = DlqWant {
        subject: d.subject.as_deref().map(|s| lab.subst_str(s)).transpose()?,
        run: d.run.as_deref().map(|r| lab.run_id(r)).transpose()?,
        run_label: match &d.run {
            Some(name) => format!("{name} ({})", lab.run_id(name)?),
            None => String::new(),
        },
        kind: d.kind.clone(),
        msg_id: d.msg_id.as_deref().map(|s| lab.subst_str(s)).transpose()?,
        err_contains: d.err_contains.clone(),
        body: d.body.as_ref().map(|b| lab.subst(b)).transpose()?,
    };
    let what = want.describe(d.count);
    let (settled, quiet) = run_concerned(lab, want.run.as_deref());
    let label = d.run.as_deref().unwrap_or_default();
    let runs = RunsConcerned {
        settled: &settled,
        quiet: want
            .run
            .is_some()
            .then_some((label, &quiet as &dyn Fn() -> bool)),
    };
    let n = counted_until(
        lab,
        d.timeout,
        d.count,
        d.settle,
        &what,
        || {
            lab.em()
                .dlq()
                .into_iter()
                .filter(|r| want.matches(r))
                .collect::<Vec<_>>()
        },
        || want.account(lab),
        runs,
    )
    .await;
    // Entries that fell off the emulator's record ring are missing from any count.
    let dropped = lab.em().dropped_dlq_records();
    if dropped > 0 {
        return Err(format!(
            "{dropped} DLQ entr{} dropped off the emulator's record ring (emulator.max_records, \
             max_record_bytes), so a count of {what} is not a verdict; raise the scenario's \
             emulator.max_records{}",
            if dropped == 1 { "y was" } else { "ies were" },
            n.err()
                .map(|e| format!(" (the count itself: {e})"))
                .unwrap_or_default()
        ));
    }
    let n = n?;
    Ok(format!("{n} DLQ entr{}", if n == 1 { "y" } else { "ies" }))
}

pub(crate) async fn expect_registration(lab: &Lab<'_>, r: &ExpectRegistrationStep) -> StepResult {
    let mut w = lab.waiter(r.timeout);
    let what = format!(
        "a registration of {:?} {}{}",
        r.service,
        if r.accepted { "accepted" } else { "refused" },
        r.error_contains
            .as_ref()
            .map(|t| format!(" with an error containing {t:?}"))
            .unwrap_or_default()
    );
    loop {
        let (records, _) = lab.em().records();
        let found = records.iter().any(|rec| match &rec.kind {
            RecordKind::Registration {
                service,
                accepted,
                error,
                ..
            } => {
                *service == r.service
                    && *accepted == r.accepted
                    && r.error_contains
                        .as_ref()
                        .is_none_or(|t| error.as_deref().unwrap_or_default().contains(t.as_str()))
            }
            _ => false,
        });
        if found {
            break;
        }
        if !w.next().await {
            return Err(w.timeout(what, describe::registrations(lab.em())));
        }
    }
    let Some(fields) = &r.result_event else {
        return Ok(if r.accepted { "accepted" } else { "refused" }.into());
    };
    let services = lab.em().services();
    let Some(state) = services.get(&r.service) else {
        return Err(format!(
            "expected the manifest of {:?}; it is not registered",
            r.service
        ));
    };
    // The emulator keeps no catalog values parsed: its kept bytes have them.
    let manifest = state
        .manifest
        .full()
        .map_err(|e| format!("cannot read {:?}'s manifest: {e}", r.service))?;
    let mut problems = Vec::new();
    for (action, want) in fields {
        let Some(a) = manifest.actions.iter().find(|a| a.name == *action) else {
            problems.push(format!(
                "the manifest has no action {action:?} (it has {:?})",
                manifest
                    .actions
                    .iter()
                    .map(|a| a.name.as_str())
                    .collect::<Vec<_>>()
            ));
            continue;
        };
        let got: Vec<String> = match &a.result_event {
            None => Vec::new(),
            Some(map) => match ResultEvent::from_map(map) {
                Ok(ev) => ev.fields.into_iter().map(|f| f.name).collect(),
                Err(e) => {
                    problems.push(format!("action {action:?}: its result_event: {e}"));
                    continue;
                }
            },
        };
        let mut want_sorted = want.clone();
        want_sorted.sort();
        let mut got_sorted = got.clone();
        got_sorted.sort();
        if want_sorted != got_sorted {
            problems.push(format!(
                "action {action:?}: expected result_event fields {want:?}, the manifest declares {got:?} ({})",
                a.result_event
                    .as_ref()
                    .map(|m| Value::Object(m.clone()).to_string())
                    .unwrap_or_else(|| "no result_event".into())
            ));
        }
    }
    if problems.is_empty() {
        Ok("accepted; result_event as expected".into())
    } else {
        Err(problems.join("\n"))
    }
}

pub(crate) async fn expect_broadcast(
    lab: &Lab<'_>,
    b: &crate::model::ExpectBroadcastStep,
) -> StepResult {
    let Some(dep) = lab.deployed.get(&b.flow) else {
        return Err(format!(
            "flow {:?} has not been deployed (deploy it in an earlier step)",
            b.flow
        ));
    };
    if let Some(s) = &b.subject
        && *s != dep.broadcast_subject
    {
        return Err(format!(
            "expected flow {} to be broadcast on {s}; it was broadcast on {}",
            b.flow, dep.broadcast_subject
        ));
    }
    let version = dep.flow.version;
    let involved = dep.flow.services();
    let services: Vec<&String> = lab
        .scripted
        .keys()
        .filter(|name| match &b.service {
            Some(s) => *s == **name,
            None => involved.contains(name.as_str()),
        })
        .collect();
    if services.is_empty() {
        return Err(format!(
            "no running scripted service of flow {} to ask (its services: {involved:?})",
            b.flow
        ));
    }
    let lacking = || {
        let mut out = Vec::new();
        for name in &services {
            for (i, r) in lab.scripted[*name].replicas.iter().enumerate() {
                let held = r.flows().get(&b.flow).map(|f| f.version);
                if held.is_none_or(|v| v < version) {
                    out.push(format!(
                        "replica {i} of {name} holds {}",
                        held.map(|v| format!("v{v}"))
                            .unwrap_or_else(|| "nothing of it".into())
                    ));
                }
            }
        }
        out
    };
    let mut w = lab.waiter(b.timeout);
    loop {
        let missing = lacking();
        if missing.is_empty() {
            let n: usize = services
                .iter()
                .map(|s| lab.scripted[*s].replicas.len())
                .sum();
            return Ok(format!(
                "v{version} held by {n} replica(s), broadcast on {}",
                dep.broadcast_subject
            ));
        }
        if !w.next().await {
            return Err(w.timeout(
                format!("every replica to hold flow {} v{version}", b.flow),
                missing.join("\n"),
            ));
        }
    }
}

pub(crate) async fn expect_calls(lab: &Lab<'_>, c: &ExpectCallsStep) -> StepResult {
    let run = c.run.as_deref().map(|r| lab.run_id(r)).transpose()?;
    let input = c.input.as_ref().map(|v| lab.subst(v)).transpose()?;
    let Some(service) = lab.scripted.get(&c.service) else {
        return Err(format!("service {:?} is not running", c.service));
    };
    let calls = service.calls.clone();
    let matching = || {
        calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|call| call.action == c.action)
            .filter(|call| run.as_ref().is_none_or(|r| call.run_id == *r))
            .filter(|call| input.as_ref().is_none_or(|i| json_eq(i, &call.input)))
            .cloned()
            .collect::<Vec<_>>()
    };
    let what = format!(
        "{} call(s) of {}.{}{}{}",
        c.count
            .map(|n| format!("exactly {n}"))
            .unwrap_or_else(|| "at least one".into()),
        c.service,
        c.action,
        c.run
            .as_ref()
            .map(|r| format!(" in run {r}"))
            .unwrap_or_default(),
        input
            .as_ref()
            .map(|i| format!(" with input {i}"))
            .unwrap_or_default()
    );
    let saw = || {
        let all = calls.lock().unwrap_or_else(|e| e.into_inner()).clone();
        describe::calls(&all, &lab.run_names())
    };
    // Calls come from runs: once the runs concerned have all settled, none can follow.
    let (run_settled, quiet) = run_concerned(lab, run.as_deref());
    let settled = || match &run {
        Some(_) => run_settled(),
        None => {
            let runs = lab.em().runs();
            !runs.is_empty() && runs.iter().all(|r| r.status.is_settled())
        }
    };
    let label = c.run.as_deref().unwrap_or_default();
    let runs = RunsConcerned {
        settled: &settled,
        quiet: run
            .is_some()
            .then_some((label, &quiet as &dyn Fn() -> bool)),
    };
    let n = counted_until(
        lab, c.timeout, c.count, c.settle, &what, matching, saw, runs,
    )
    .await?;
    Ok(format!("{n} call(s)"))
}

pub(crate) async fn expect_http(lab: &Lab<'_>, h: &ExpectHttpStep) -> StepResult {
    let Some((spec, server)) = lab.stubs.get(&h.stub) else {
        return Err(format!("no HTTP stub {:?}", h.stub));
    };
    let body = h.body.as_ref().map(|b| lab.subst(b)).transpose()?;
    let headers: Vec<(String, String)> = h
        .headers
        .iter()
        .map(|(k, v)| Ok((k.to_ascii_lowercase(), lab.subst_str(v)?)))
        .collect::<Result<_, String>>()?;
    let matches = |r: &wiremock::Request| {
        r.method.as_str().eq_ignore_ascii_case(&spec.method)
            && r.url.path() == spec.path
            && body.as_ref().is_none_or(|b| {
                serde_json::from_slice::<Value>(&r.body).is_ok_and(|got| json_eq(b, &got))
            })
            && headers.iter().all(|(name, value)| {
                r.headers
                    .get(name.as_str())
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|v| v == value)
            })
            && h.headers_absent
                .iter()
                .all(|name| !r.headers.contains_key(name.to_ascii_lowercase().as_str()))
    };
    let what = format!(
        "{} {} request(s) on stub {} ({}){}{}",
        h.count
            .map(|n| format!("exactly {n}"))
            .unwrap_or_else(|| "at least one".into()),
        spec.method,
        h.stub,
        spec.path,
        body.as_ref()
            .map(|b| format!(" with body {b}"))
            .unwrap_or_default(),
        if headers.is_empty() {
            String::new()
        } else {
            format!(
                " with headers {}",
                headers
                    .iter()
                    .map(|(k, v)| format!("{k}: {v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
    );
    let settle = h.settle.map_or(DEFAULT_SETTLE, |d| d.0);
    let want = h.count.unwrap_or(1);
    let mut w = lab.waiter(h.timeout);
    if want > 0 {
        loop {
            let all = server.received_requests().await.unwrap_or_default();
            if all.iter().filter(|r| matches(r)).count() >= want {
                break;
            }
            if !w.next().await {
                return Err(w.timeout(what, describe::requests(&all)));
            }
        }
    }
    let Some(exact) = h.count else {
        return Ok("received".into());
    };
    tokio::time::sleep(settle).await;
    let all = server.received_requests().await.unwrap_or_default();
    let n = all.iter().filter(|r| matches(r)).count();
    if n == exact {
        Ok(format!("{n} request(s)"))
    } else {
        Err(format!(
            "expected {what}, found {n} (after watching {} more); {}",
            crate::model::Dur(settle),
            describe::requests(&all)
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(node: &str, status: &str, service: &str) -> TimelineEntry {
        serde_json::from_value(json!({"seq": 1, "node_id": node, "node_type": "action",
            "service": service, "status": status, "started_at": "2026-01-01T00:00:00Z",
            "finished_at": "2026-01-01T00:00:00Z", "retries": 0}))
        .unwrap()
    }

    fn step(order: &str, events: Value) -> ExpectEventsStep {
        serde_json::from_value(json!({"run": "r", "order": order, "events": events})).unwrap()
    }

    #[test]
    fn event_orders() {
        let timeline = [
            entry("in", "triggered", "engine"),
            entry("a", "retrying", "s"),
            entry("a", "succeeded", "s"),
            entry("b", "succeeded", "s"),
        ];
        let both = json!([{"node": "a", "status": "succeeded"}, {"node": "b"}]);
        assert!(events_match(&step("in_order", both.clone()), &timeline));
        assert!(!events_match(&step("strict", both.clone()), &timeline));
        let all = json!([{"node": "a", "status": "retrying"}, {"node": "a", "status": "succeeded"}, {"node": "b"}]);
        assert!(events_match(&step("strict", all), &timeline));
        let reversed = json!([{"node": "b"}, {"node": "a", "status": "succeeded"}]);
        assert!(!events_match(
            &step("in_order", reversed.clone()),
            &timeline
        ));
        assert!(events_match(&step("any", reversed), &timeline));
        let engine = json!([{"node": "in", "status": "triggered"}, {"node": "a", "status": "retrying"}, {"node": "a", "status": "succeeded"}, {"node": "b"}]);
        assert!(events_match(&step("strict", engine), &timeline));
    }

    #[test]
    fn json_numbers_compare_as_numbers() {
        assert!(json_eq(&json!({"a": [1, 2.0]}), &json!({"a": [1.0, 2]})));
        assert!(!json_eq(&json!({"a": 1}), &json!({"a": 1, "b": 2})));
    }
}
