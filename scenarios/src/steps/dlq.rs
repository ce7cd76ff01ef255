//! `expect_dlq`: DLQ entries as stored, by subject, run, kind, message id, error and body,
//! counted.

use futures::FutureExt;
use futures::future::LocalBoxFuture;
use serde::Deserialize;
use serde_json::Value;
use triggers_emulator::recorder::{Record, RecordKind};
use triggers_sdk::wire::header::parse_dlq_msg_id;
use triggers_sdk::wire::subject;

use super::count::{RunsConcerned, counted_until, json_eq, run_concerned};
use super::{CheckCx, StepFailure, StepKind, StepOutcome};
use crate::describe;
use crate::model::{Dur, ServiceSpec, present};
use crate::runner::Lab;

/// `expect_dlq`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectDlqStep {
    /// The exact subject.
    #[serde(default)]
    pub subject: Option<String>,
    /// The run's name (the entry's `envelope.flow_run_id`).
    #[serde(default)]
    pub run: Option<String>,
    /// The entry's `kind`.
    #[serde(default)]
    pub kind: Option<String>,
    /// `dlq_form` (`<idempotency_key>:dlq:<unix_ns>`, key matching the entry) or an exact id.
    #[serde(default)]
    pub msg_id: Option<String>,
    /// Text the entry's `err_msg` contains.
    #[serde(default)]
    pub err_contains: Option<String>,
    /// The entry's `body`, as JSON.
    #[serde(default, deserialize_with = "present")]
    pub body: Option<Value>,
    /// Exactly this many match (checked after `settle`); without it, at least one.
    #[serde(default)]
    pub count: Option<usize>,
    /// How long to watch for more after the count is reached (default 250ms).
    #[serde(default)]
    pub settle: Option<Dur>,
    /// This step's time limit.
    #[serde(default)]
    pub timeout: Option<Dur>,
}

impl StepKind for ExpectDlqStep {
    fn label(&self) -> String {
        let mut parts = vec!["expect_dlq".to_owned()];
        if let Some(s) = &self.subject {
            parts.push(s.clone());
        }
        if let Some(k) = &self.kind {
            parts.push(format!("kind={k}"));
        }
        if let Some(r) = &self.run {
            parts.push(format!("run={r}"));
        }
        if let Some(c) = self.count {
            parts.push(format!("count={c}"));
        }
        parts.join(" ")
    }

    fn check(&self, cx: &mut CheckCx<'_>) -> Result<(), String> {
        if let Some(r) = &self.run {
            cx.run(r)?;
        }
        // A misspelt filter matches nothing: with `count: 0` the step could never fail.
        match dlq_filter_problem(self, cx.services) {
            Some(problem) => Err(format!("expect_dlq: {problem}")),
            None => Ok(()),
        }
    }

    fn run<'a>(&'a self, lab: &'a mut Lab<'_>) -> LocalBoxFuture<'a, StepOutcome> {
        expect_dlq(lab, self).boxed_local()
    }
}

/// What is wrong with an `expect_dlq` step's `kind` or `subject`, when it names a kind no SDK
/// writes, or an action a scripted service of the scenario does not have.
fn dlq_filter_problem(d: &ExpectDlqStep, services: &[ServiceSpec]) -> Option<String> {
    use triggers_sdk::wire::shapes::dlq_kind;
    use triggers_sdk::wire::subject::FallbackKind;
    let kinds: Vec<&str> = dlq_kind::ALL
        .into_iter()
        .chain(FallbackKind::ALL.map(FallbackKind::as_str))
        .collect();
    if let Some(kind) = &d.kind
        && !kinds.contains(&kind.as_str())
    {
        let hint = crate::flowfile::did_you_mean(kind, &kinds)
            .map(|k| format!(" (did you mean `{k}`?)"))
            .unwrap_or_default();
        return Some(format!(
            "kind `{kind}` is no DLQ kind{hint}; the kinds are {}",
            kinds.join(", ")
        ));
    }
    let subject = d.subject.as_deref()?;
    if subject.contains("${") {
        return None;
    }
    let rest = subject.strip_prefix(subject::DLQ_PREFIX)?;
    let (service, last) = rest.split_once('.')?;
    // `triggers.v2.dlq.source.<id>` is the orchestrator's, not a service's.
    if service == "*" || service == ">" || service == "source" {
        return None;
    }
    // A misspelt service segment matches nothing either: only the services of the file publish.
    if !services.iter().any(|s| s.name == service) {
        let names: Vec<&str> = services.iter().map(|s| s.name.as_str()).collect();
        let hint = crate::flowfile::did_you_mean(service, &names)
            .map(|n| format!(" (did you mean `{}{n}.{last}`?)", subject::DLQ_PREFIX))
            .unwrap_or_default();
        return Some(format!(
            "subject `{subject}` names service {service:?}, which is not in `services`{hint}: no entry can arrive there"
        ));
    }
    let spec = services
        .iter()
        .find(|s| s.name == service && !s.is_external())?;
    let mut names: Vec<&str> = spec.actions.iter().map(|a| a.value.name.as_str()).collect();
    names.extend(FallbackKind::ALL.map(FallbackKind::as_str));
    if names.contains(&last) {
        return None;
    }
    let hint = crate::flowfile::did_you_mean(last, &names)
        .map(|n| format!(" (did you mean `{}{service}.{n}`?)", subject::DLQ_PREFIX))
        .unwrap_or_default();
    Some(format!(
        "subject `{subject}` names neither an action of {service} nor a fallback kind{hint}: no entry can arrive there"
    ))
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

async fn expect_dlq(lab: &Lab<'_>, d: &ExpectDlqStep) -> StepOutcome {
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
        return Err(StepFailure::environment(format!(
            "{dropped} DLQ entr{} dropped off the emulator's record ring (emulator.max_records, \
             max_record_bytes), so a count of {what} is not a verdict; raise the scenario's \
             emulator.max_records{}",
            if dropped == 1 { "y was" } else { "ies were" },
            n.err()
                .map(|e| format!(" (the count itself: {e})"))
                .unwrap_or_default()
        )));
    }
    let n = n?;
    Ok(format!("{n} DLQ entr{}", if n == 1 { "y" } else { "ies" }))
}
