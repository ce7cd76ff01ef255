//! Random valid flows, an oracle for them, and a driver that runs them against the emulator with
//! SDK services: the property test of issue 9 ("every node that should run ran exactly once per
//! arrival, nothing distinct was deduplicated, every run settles").
//!
//! A generated flow is a DAG over a small pool of services (`s0`..`s3`, each with `durable_timer.v1`
//! and two actions: `ok` echoes its input, `stop` fails for good). Nodes are service-ins,
//! actions, mappings, conditions (one lets a run through, one stops it, by the trigger's `pass`
//! field, which every node carries through unchanged), and timers (delays of seconds to days,
//! repeats up to 3). Shapes: chains, branches (fan-out), joins without a join node (fan-in),
//! hops between services, timers after the entry, after actions, mappings and conditions, timers
//! in a row, timers with several resume branches.
//!
//! The oracle counts arrivals as the emulator does: each edge carries every output of the node it
//! leaves; a timer's output is its arrivals times its repeats; a failing action and a stopping
//! condition output nothing. An SDK-run node is owed one completion per arrival.

use std::collections::BTreeMap;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use triggers_emulator::recorder::{Run, RunStatus};
use triggers_emulator::{EmulatorConfig, Harness, RunId};
use triggers_sdk::flow::Flow;
use triggers_sdk::runtime::{
    ActionContext, ActionDef, ActionError, DURABLE_TIMER_V1, RunningService, RuntimeConfig, Service,
};

/// The services flows are generated over.
pub const SERVICES: [&str; 4] = ["s0", "s1", "s2", "s3"];

/// What a generated node is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    ServiceIn,
    Ok,
    Stop,
    Mapping,
    Pass,
    Block,
    Timer { repeat: u64 },
}

/// One generated flow, with what the oracle needs.
#[derive(Debug, Clone)]
pub struct Generated {
    /// The flow, ready to deploy.
    pub flow: Flow,
    kinds: Vec<(String, Kind)>,
    edges: Vec<(usize, usize)>,
}

/// Generates a random valid flow named `id` over `services` services (2 to 4).
#[must_use]
pub fn generate(rng: &mut StdRng, id: &str, services: usize) -> Generated {
    let services = services.clamp(2, SERVICES.len());
    let size = rng.random_range(3..=14);
    let mut kinds: Vec<(String, Kind)> = vec![("in".into(), Kind::ServiceIn)];
    let mut owner: Vec<Option<usize>> = vec![Some(0)];
    let mut edges: Vec<(usize, usize)> = Vec::new();
    let mut nodes: Vec<Value> = vec![service_in("in", 0)];
    for i in 1..size {
        let id = format!("n{i}");
        let preds = predecessors(rng, i, &kinds);
        let after_timer = preds
            .iter()
            .any(|p| matches!(kinds[*p].1, Kind::Timer { .. }));
        let (kind, node, own) = if after_timer {
            after_a_timer(rng, &id, services)
        } else {
            after_a_node(rng, &id, services, owner[preds[0]].unwrap_or(0))
        };
        nodes.push(node);
        kinds.push((id.clone(), kind));
        owner.push(own);
        for p in preds {
            edges.push((p, i));
        }
    }
    let edge_json: Vec<Value> = edges
        .iter()
        .enumerate()
        .map(|(k, (from, to))| {
            json!({"id": format!("e{k}"), "from": kinds[*from].0, "to": kinds[*to].0})
        })
        .collect();
    let flow: Flow = serde_json::from_value(json!({"id": id, "nodes": nodes, "edges": edge_json}))
        .expect("a generated flow decodes");
    Generated { flow, kinds, edges }
}

/// A service-in node of service number `s`, on its inbound subject.
fn service_in(id: &str, s: usize) -> Value {
    json!({"id": id, "type": "service-in", "service": SERVICES[s],
           "config": {"transport": "nats", "target": format!("{}.inbound", SERVICES[s])}})
}

/// Node `i`'s predecessors among the nodes before it: one, sometimes a second (a fan-in).
fn predecessors(rng: &mut StdRng, i: usize, kinds: &[(String, Kind)]) -> Vec<usize> {
    let first = rng.random_range(0..i);
    let mut preds = vec![first];
    if i > 2 && rng.random_bool(0.2) {
        let second = rng.random_range(0..i);
        if second != first {
            preds.push(second);
        }
    }
    let is_timer = |p: &usize| matches!(kinds[*p].1, Kind::Timer { .. });
    if preds.iter().any(is_timer) && !preds.iter().all(is_timer) {
        // A service-in is entered by the engine after a timer and run by a service after a
        // hop; the generator keeps the two apart (the oracle counts them apart).
        preds.retain(is_timer);
    }
    preds
}

/// What may follow a timer: another timer, or a service-in the engine enters. Returns the
/// node's kind, its JSON and the service it runs on.
fn after_a_timer(rng: &mut StdRng, id: &str, services: usize) -> (Kind, Value, Option<usize>) {
    if rng.random_bool(0.25) {
        let (kind, node) = timer(rng, id);
        (kind, node, None)
    } else {
        let s = rng.random_range(0..services);
        (Kind::ServiceIn, service_in(id, s), Some(s))
    }
}

/// What may follow any other node: an action (on its predecessor's service or another), a
/// mapping, a condition, a hop to a service-in, or a timer. Returns the node's kind, its JSON
/// and the service it runs on.
fn after_a_node(
    rng: &mut StdRng,
    id: &str,
    services: usize,
    pred_owner: usize,
) -> (Kind, Value, Option<usize>) {
    match rng.random_range(0..100) {
        0..=34 => {
            let s = if rng.random_bool(0.4) {
                rng.random_range(0..services)
            } else {
                pred_owner
            };
            let stop = rng.random_bool(0.08);
            let action = if stop { "stop" } else { "ok" };
            (
                if stop { Kind::Stop } else { Kind::Ok },
                json!({"id": id, "type": "action", "service": SERVICES[s], "action": action}),
                Some(s),
            )
        }
        35..=49 => (
            Kind::Mapping,
            json!({"id": id, "type": "mapping",
                   "config": {"fields": {"pass": "$.pass", "n": "$.n", "via": id}}}),
            Some(pred_owner),
        ),
        50..=64 => {
            let block = rng.random_bool(0.25);
            (
                if block { Kind::Block } else { Kind::Pass },
                json!({"id": id, "type": "condition",
                       "config": {"path": "$.pass", "op": if block { "falsy" } else { "truthy" }}}),
                Some(pred_owner),
            )
        }
        65..=79 => {
            let s = rng.random_range(0..services);
            (Kind::ServiceIn, service_in(id, s), Some(s))
        }
        _ => {
            let (kind, node) = timer(rng, id);
            (kind, node, None)
        }
    }
}

fn timer(rng: &mut StdRng, id: &str) -> (Kind, Value) {
    let repeat = if rng.random_bool(0.3) {
        rng.random_range(2..=3)
    } else {
        1
    };
    let delay = [1_000u64, 60_000, 3_600_000, 86_400_000][rng.random_range(0..4)];
    (
        Kind::Timer { repeat },
        json!({"id": id, "type": "timer", "config": {"delay_ms": delay, "repeat": repeat}}),
    )
}

/// What a run of a generated flow must show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    /// Completions owed per node run by a service (nodes with none are left out).
    pub executions: BTreeMap<String, u32>,
    /// Whether the run fails (a failing action ran).
    pub failed: bool,
}

impl Generated {
    /// The oracle: what a run triggered with `pass` must show.
    #[must_use]
    pub fn expect(&self, pass: bool) -> Expected {
        let n = self.kinds.len();
        let mut arrivals = vec![0u32; n];
        let mut outputs = vec![0u32; n];
        let mut executions = BTreeMap::new();
        let mut failed = false;
        // Nodes were generated in topological order: every edge goes from a lower index.
        for i in 0..n {
            let a: u32 = if i == 0 {
                1
            } else {
                self.edges
                    .iter()
                    .filter(|(_, to)| *to == i)
                    .map(|(from, _)| outputs[*from])
                    .sum()
            };
            arrivals[i] = a;
            let (id, kind) = &self.kinds[i];
            let from_timer = self
                .edges
                .iter()
                .any(|(from, to)| *to == i && matches!(self.kinds[*from].1, Kind::Timer { .. }));
            let engine_entered = i == 0 || (*kind == Kind::ServiceIn && from_timer);
            outputs[i] = match kind {
                Kind::Timer { repeat } => a * u32::try_from(*repeat).unwrap_or(u32::MAX),
                Kind::Stop => 0,
                // `truthy` on `$.pass`; `Block` is `falsy` on it.
                Kind::Pass => {
                    if pass {
                        a
                    } else {
                        0
                    }
                }
                Kind::Block => {
                    if pass {
                        0
                    } else {
                        a
                    }
                }
                Kind::Ok | Kind::Mapping | Kind::ServiceIn => a,
            };
            if *kind == Kind::Stop && a > 0 {
                failed = true;
            }
            let run_by_service = !engine_entered && !matches!(kind, Kind::Timer { .. });
            if run_by_service && a > 0 {
                executions.insert(id.clone(), a);
            }
        }
        Expected { executions, failed }
    }
}

/// The services flows are generated over, started on `lab`: `replicas` replicas each. Each action
/// is `ok` (echoes its input) or `stop` (fails for good).
///
/// # Panics
/// When a service cannot start.
pub async fn start_services(lab: &Harness, replicas: usize) -> Vec<RunningService> {
    let mut running = Vec::new();
    for name in SERVICES {
        for _ in 0..replicas.max(1) {
            let service = Service::builder(name, "1.0.0")
                .action(ActionDef::dynamic(
                    "ok",
                    &json!({"type": "object"}),
                    &json!({"type": "object"}),
                    |input: Value, _ctx: ActionContext| async move { Ok::<_, ActionError>(input) },
                ))
                .action(ActionDef::dynamic(
                    "stop",
                    &json!({"type": "object"}),
                    &json!({"type": "object"}),
                    |_input: Value, _ctx: ActionContext| async move {
                        Err::<Value, _>(ActionError::permanent("stops here"))
                    },
                ))
                .nats_source("nats", format!("{name}.inbound"))
                .capability(DURABLE_TIMER_V1)
                .config(RuntimeConfig {
                    nats_url: Some(lab.url().to_owned()),
                    heartbeat_interval: Some(Duration::from_millis(500)),
                    shutdown_grace: Some(Duration::from_secs(5)),
                    flow_wait: Some(Duration::from_secs(5)),
                    ..Default::default()
                })
                .build()
                .expect("a valid service");
            running.push(service.start().await.expect("the service starts"));
        }
    }
    running
}

/// The emulator settings the driver needs: auto-advance (timers elapse whenever every run is
/// idle), room for every run.
#[must_use]
pub fn emulator_config() -> EmulatorConfig {
    EmulatorConfig {
        auto_advance: true,
        wait_timeout: Duration::from_secs(
            std::env::var("TRIGGERS_SHAPES_WAIT_S")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(60),
        ),
        max_runs: 1_000_000,
        ..Default::default()
    }
}

/// What a batch of runs showed.
#[derive(Debug, Default, Clone)]
pub struct Tally {
    /// Flows deployed.
    pub flows: usize,
    /// Runs triggered.
    pub runs: usize,
    /// Node executions checked.
    pub executions: u64,
    /// Runs that did not settle.
    pub hung: usize,
    /// Node executions owed and missing (lost work).
    pub lost: u64,
    /// Node executions beyond what was owed (duplicates).
    pub duplicated: u64,
    /// Runs whose status was not the expected one.
    pub wrong_status: usize,
    /// Every problem, one line each, with the flow to reproduce it.
    pub problems: Vec<String>,
}

/// Deploys `flows`, triggers each once with `pass` true and once with false, waits for every run
/// to settle, and checks each against the oracle.
///
/// # Panics
/// When a deploy or a trigger fails (a bug in the generator or the emulator, reported as such).
pub async fn run_batch(lab: &Harness, flows: &[Generated], tally: &mut Tally) {
    let mut runs: Vec<(RunId, &Generated, bool)> = Vec::new();
    for g in flows {
        lab.deploy(g.flow.clone())
            .await
            .unwrap_or_else(|e| panic!("generated flow {} refused: {e}", g.flow.id));
        tally.flows += 1;
    }
    for g in flows {
        for pass in [true, false] {
            let run = lab
                .trigger(&g.flow.id, &json!({"pass": pass, "n": tally.runs}))
                .await
                .unwrap_or_else(|e| panic!("cannot trigger {}: {e}", g.flow.id));
            tally.runs += 1;
            runs.push((run, g, pass));
        }
    }
    for (run, g, pass) in runs {
        let expected = g.expect(pass);
        let settled = lab.wait_run_settled(&run).await;
        let Ok(got) = settled else {
            tally.hung += 1;
            tally.problems.push(format!(
                "run {run} of {} (pass={pass}) did not settle: {}\n  flow: {}",
                g.flow.id,
                lab.describe_run(&run.0),
                serde_json::to_string(&g.flow).unwrap_or_default()
            ));
            continue;
        };
        check_run(&got, g, pass, &expected, tally);
    }
}

fn check_run(got: &Run, g: &Generated, pass: bool, expected: &Expected, tally: &mut Tally) {
    let want = if expected.failed {
        RunStatus::Failed
    } else {
        RunStatus::Succeeded
    };
    let mut problems = Vec::new();
    if got.status != want {
        tally.wrong_status += 1;
        problems.push(format!("status {:?}, expected {want:?}", got.status));
    }
    for (node, owed) in &expected.executions {
        let ran = got.executions(node);
        tally.executions += u64::from(ran.min(*owed));
        if ran < *owed {
            tally.lost += u64::from(owed - ran);
            problems.push(format!("{node} ran {ran} times, owed {owed}"));
        }
    }
    for node in g.kinds.iter().map(|(id, _)| id) {
        let ran = got.executions(node);
        let owed = expected.executions.get(node).copied().unwrap_or(0);
        if ran > owed {
            tally.duplicated += u64::from(ran - owed);
            problems.push(format!("{node} ran {ran} times, owed {owed}"));
        }
    }
    if !got.unexpected.is_empty() {
        tally.duplicated += got.unexpected.len() as u64;
        problems.push(format!("unexpected completions {:?}", got.unexpected));
    }
    if !problems.is_empty() {
        tally.problems.push(format!(
            "run {} of {} (pass={pass}): {}\n  flow: {}",
            got.id,
            g.flow.id,
            problems.join("; "),
            serde_json::to_string(&g.flow).unwrap_or_default()
        ));
    }
}

/// A seeded generator.
#[must_use]
pub fn rng(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed)
}
