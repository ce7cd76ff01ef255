//! Each run's plan: what each action does on each attempt, and what the run must then show.

use rand::Rng;
use rand::rngs::StdRng;
use serde_json::{Value, json};
use triggers_emulator::recorder::RunStatus;

use super::{Faults, MAX_ATTEMPTS, NODES, SoakConfig};

/// What an action does for a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Plan {
    Ok,
    /// Fails retryably on the first `n` attempts.
    Flaky(u32),
    /// Panics on the first `n` attempts.
    Panic(u32),
    /// Runs past its timeout on the first `n` attempts.
    Timeout(u32),
    /// Fails for good.
    Permanent,
    /// Fails retryably on every attempt.
    Exhaust,
    /// Panics on every attempt.
    AlwaysPanic,
}

impl Plan {
    fn text(self) -> String {
        match self {
            Plan::Ok => "ok".into(),
            Plan::Flaky(n) => format!("flaky:{n}"),
            Plan::Panic(n) => format!("panic:{n}"),
            Plan::Timeout(n) => format!("timeout:{n}"),
            Plan::Permanent => "permanent".into(),
            Plan::Exhaust => "exhaust".into(),
            Plan::AlwaysPanic => "always_panic".into(),
        }
    }

    fn is_final(self) -> bool {
        matches!(self, Plan::Permanent | Plan::Exhaust | Plan::AlwaysPanic)
    }
}

/// One run's plan.
#[derive(Debug, Clone)]
pub(super) struct RunPlan {
    poison: bool,
    nodes: [Plan; 3],
}

impl RunPlan {
    pub(super) fn generate(rng: &mut StdRng, config: &SoakConfig, faults: &mut Faults) -> Self {
        if rng.random_bool(config.poison_rate.clamp(0.0, 1.0)) {
            faults.poison += 1;
            return RunPlan {
                poison: true,
                nodes: [Plan::Ok; 3],
            };
        }
        let mut nodes = [Plan::Ok; 3];
        for plan in &mut nodes {
            if !rng.random_bool(config.fault_rate.clamp(0.0, 1.0)) {
                continue;
            }
            let recovering = rng.random_range(1..MAX_ATTEMPTS);
            *plan = match rng.random_range(0..100) {
                0..=3 => {
                    faults.permanent += 1;
                    Plan::Permanent
                }
                4..=6 => {
                    faults.exhausted += 1;
                    Plan::Exhaust
                }
                7..=9 => {
                    faults.always_panics += 1;
                    Plan::AlwaysPanic
                }
                10..=49 => {
                    faults.flaky += 1;
                    Plan::Flaky(recovering)
                }
                50..=84 => {
                    faults.panics += 1;
                    Plan::Panic(recovering)
                }
                _ => {
                    faults.timeouts += 1;
                    Plan::Timeout(1)
                }
            };
        }
        RunPlan {
            poison: false,
            nodes,
        }
    }

    pub(super) fn payload(&self, n: usize) -> Vec<u8> {
        if self.poison {
            return format!("poison {n} {{ not json").into_bytes();
        }
        let plan: serde_json::Map<String, Value> = NODES
            .iter()
            .zip(self.nodes)
            .map(|(node, p)| ((*node).to_owned(), Value::String(p.text())))
            .collect();
        serde_json::to_vec(&json!({"n": n, "plan": plan})).unwrap_or_default()
    }

    /// The node that fails the run, if one does.
    fn failing(&self) -> Option<usize> {
        self.nodes.iter().position(|p| p.is_final())
    }

    /// What the run must show: its status, executions per node, DLQ entries.
    pub(super) fn expect(&self) -> (RunStatus, [u32; 3], u64) {
        if self.poison {
            return (RunStatus::Failed, [0; 3], 1);
        }
        match self.failing() {
            None => (RunStatus::Succeeded, [1; 3], 0),
            Some(i) => {
                let mut runs = [0; 3];
                for r in runs.iter_mut().take(i + 1) {
                    *r = 1;
                }
                (RunStatus::Failed, runs, 1)
            }
        }
    }
}

pub(super) fn plan_of(input: &Value, node: &str) -> Plan {
    let text = input["plan"][node].as_str().unwrap_or("ok");
    let (kind, n) = text.split_once(':').unwrap_or((text, "0"));
    let n: u32 = n.parse().unwrap_or(0);
    match kind {
        "flaky" => Plan::Flaky(n),
        "panic" => Plan::Panic(n),
        "timeout" => Plan::Timeout(n),
        "permanent" => Plan::Permanent,
        "exhaust" => Plan::Exhaust,
        "always_panic" => Plan::AlwaysPanic,
        _ => Plan::Ok,
    }
}
