//! `expect_violation`: conformance violations of a rule, on a subject, counted; what it
//! expects is excused from the scenario's final conformance check.

use futures::FutureExt;
use futures::future::LocalBoxFuture;
use serde::Deserialize;
use triggers_emulator::conformance::RULES;

use super::count::counted;
use super::{CheckCx, StepKind, StepOutcome};
use crate::model::Dur;
use crate::runner::Lab;

/// `expect_violation`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectViolationStep {
    /// The rule (`triggers_emulator::conformance::RULES`).
    pub rule: String,
    /// Only on this subject.
    #[serde(default)]
    pub subject: Option<String>,
    /// Exactly this many; without it, at least one.
    #[serde(default)]
    pub count: Option<usize>,
    /// How long to watch for more after the count is reached (default 250ms).
    #[serde(default)]
    pub settle: Option<Dur>,
    /// This step's time limit.
    #[serde(default)]
    pub timeout: Option<Dur>,
}

impl From<String> for ExpectViolationStep {
    fn from(rule: String) -> Self {
        ExpectViolationStep {
            rule,
            subject: None,
            count: None,
            settle: None,
            timeout: None,
        }
    }
}

impl StepKind for ExpectViolationStep {
    fn label(&self) -> String {
        format!("expect_violation {}", self.rule)
    }

    fn check(&self, _: &mut CheckCx<'_>) -> Result<(), String> {
        if RULES.iter().any(|(r, _, _)| *r == self.rule) {
            return Ok(());
        }
        Err(format!(
            "{:?} is not a conformance rule; the rules are {}",
            self.rule,
            RULES
                .iter()
                .map(|(r, _, _)| *r)
                .collect::<Vec<_>>()
                .join(", ")
        ))
    }

    fn run<'a>(&'a self, lab: &'a mut Lab<'_>) -> LocalBoxFuture<'a, StepOutcome> {
        expect_violation(lab, self).boxed_local()
    }
}

async fn expect_violation(lab: &mut Lab<'_>, v: &ExpectViolationStep) -> StepOutcome {
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
