//! `restart_nats`, and `stop_nats_node`, `kill_nats_node` and `restart_nats_node` on a cluster:
//! the steps that take a server down (so the scenario gets a server of its own).

use std::ops::{Deref, DerefMut};

use futures::FutureExt;
use futures::future::LocalBoxFuture;
use serde::Deserialize;
use tokio::time::Instant;

use super::{CheckCx, StepFailure, StepKind, StepOutcome, mean};
use crate::model::Nothing;
use crate::runner::Lab;

/// Which node of a cluster a `*_nats_node` step acts on.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum NodeRef {
    /// Node N, 1-based (node 1 is the one clients connect to first).
    Number(usize),
    /// The node that leads a service's inbound stream when the step runs:
    /// `{leader_of: shop}`. Killing it forces a leader election.
    LeaderOf {
        /// The service.
        leader_of: String,
    },
}

impl std::fmt::Display for NodeRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NodeRef::Number(n) => write!(f, "{n}"),
            NodeRef::LeaderOf { leader_of } => write!(f, "(leader of {leader_of})"),
        }
    }
}

/// `restart_nats`: it takes no settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(transparent)]
pub struct RestartNatsStep(pub Nothing);

/// `stop_nats_node`: the node to stop gracefully.
#[derive(Debug, Clone, Deserialize)]
#[serde(transparent)]
pub struct StopNatsNodeStep(pub NodeRef);

/// `kill_nats_node`: the node to kill.
#[derive(Debug, Clone, Deserialize)]
#[serde(transparent)]
pub struct KillNatsNodeStep(pub NodeRef);

/// `restart_nats_node`: the node to start again.
#[derive(Debug, Clone, Deserialize)]
#[serde(transparent)]
pub struct RestartNatsNodeStep(pub NodeRef);

macro_rules! node_step {
    ($($step:ident => $op:expr, $word:literal;)*) => {$(
        impl Deref for $step {
            type Target = NodeRef;
            fn deref(&self) -> &NodeRef {
                &self.0
            }
        }

        impl DerefMut for $step {
            fn deref_mut(&mut self) -> &mut NodeRef {
                &mut self.0
            }
        }

        impl StepKind for $step {
            fn label(&self) -> String {
                format!(concat!($word, " {}"), self.0)
            }

            fn check(&self, cx: &mut CheckCx<'_>) -> Result<(), String> {
                check_node(&self.0, $op, cx)
            }

            fn run<'a>(&'a self, lab: &'a mut Lab<'_>) -> LocalBoxFuture<'a, StepOutcome> {
                nats_node(lab, $op, &self.0).boxed_local()
            }

            fn disturbs_the_server(&self) -> bool {
                true
            }
        }
    )*};
}

node_step! {
    StopNatsNodeStep => NodeOp::Stop, "stop_nats_node";
    KillNatsNodeStep => NodeOp::Kill, "kill_nats_node";
    RestartNatsNodeStep => NodeOp::Restart, "restart_nats_node";
}

impl StepKind for RestartNatsStep {
    fn label(&self) -> String {
        "restart_nats".into()
    }

    fn check(&self, _: &mut CheckCx<'_>) -> Result<(), String> {
        Ok(())
    }

    fn run<'a>(&'a self, lab: &'a mut Lab<'_>) -> LocalBoxFuture<'a, StepOutcome> {
        restart_nats(lab).boxed_local()
    }

    fn disturbs_the_server(&self) -> bool {
        true
    }
}

/// What a `*_nats_node` step does to its node.
#[derive(Clone, Copy, PartialEq, Eq)]
enum NodeOp {
    Stop,
    Kill,
    Restart,
}

/// A `*_nats_node` step needs a cluster, a node of it, and, to restart the leader of a stream,
/// an earlier step that took that leader down.
fn check_node(node: &NodeRef, op: NodeOp, cx: &mut CheckCx<'_>) -> Result<(), String> {
    if cx.nats_nodes < 2 {
        return Err(
            "a `*_nats_node` step needs a cluster: add `nats: {cluster: 3}` to the scenario".into(),
        );
    }
    match node {
        NodeRef::Number(n) if !(1..=cx.nats_nodes).contains(n) => Err(format!(
            "no nats node {n}: the cluster has nodes 1 to {}",
            cx.nats_nodes
        )),
        NodeRef::Number(_) => Ok(()),
        NodeRef::LeaderOf { leader_of }
            if !cx.services.iter().any(|s| &s.name == leader_of)
                && !cx.elided.contains(leader_of) =>
        {
            Err(format!(
                "`leader_of: {leader_of}` names no service of the scenario{}",
                mean(leader_of, cx.service_names())
            ))
        }
        NodeRef::LeaderOf { leader_of } if op == NodeOp::Restart => {
            if cx.downed.contains(leader_of) {
                return Ok(());
            }
            Err(format!(
                "`restart_nats_node: {{leader_of: {leader_of}}}` brings back the node an earlier \
                 `stop_nats_node` or `kill_nats_node` with `leader_of: {leader_of}` took down, \
                 and none did; name the node instead (restart_nats_node: N)"
            ))
        }
        NodeRef::LeaderOf { leader_of } => {
            cx.downed.insert(leader_of.clone());
            Ok(())
        }
    }
}

async fn restart_nats(lab: &mut Lab<'_>) -> StepOutcome {
    let started = Instant::now();
    own_server(lab)?.restart().await.map_err(|e| {
        StepFailure::environment(format!("cannot restart the nats-server: {e}")).caused_by(e)
    })?;
    Ok(format!(
        "restarted in {}",
        crate::report::seconds(started.elapsed())
    ))
}

/// The node (1-based) that leads `service`'s inbound stream, from the stream's cluster info.
/// Asked again for a few seconds: just after a node loss the stream may have no leader yet.
async fn stream_leader(lab: &Lab<'_>, service: &str) -> Result<usize, StepFailure> {
    let name = triggers_sdk::wire::subject::stream_name(service, None)
        .map_err(|e| StepFailure::invalid(e.to_string()))?;
    let js = async_nats::jetstream::new(lab.hand.clone());
    let deadline = Instant::now() + std::time::Duration::from_secs(10);
    let mut last = String::new();
    while Instant::now() < deadline {
        match js.get_stream(&name).await {
            Ok(mut stream) => match stream.info().await {
                Ok(info) => {
                    let leader = info.cluster.as_ref().and_then(|c| c.leader.clone());
                    // The nodes are named n1, n2, ... by the cluster backend.
                    if let Some(n) = leader
                        .as_deref()
                        .and_then(|l| l.strip_prefix('n'))
                        .and_then(|n| n.parse().ok())
                    {
                        return Ok(n);
                    }
                    last = format!("stream {name} has no leader ({leader:?})");
                }
                Err(e) => last = format!("stream {name}: {e}"),
            },
            Err(e) => last = format!("stream {name}: {e}"),
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    Err(StepFailure::environment(format!(
        "cannot tell which node leads {name}: {last}"
    )))
}

/// The scenario's nats-server, which the runner gives it of its own when a step restarts, stops
/// or kills it.
fn own_server<'l>(
    lab: &'l mut Lab<'_>,
) -> Result<&'l mut triggers_emulator::NatsServer, StepFailure> {
    lab.harness.nats_mut().ok_or_else(|| {
        StepFailure::invalid(
            "this scenario runs on an account of a shared nats-server, which no step may \
             restart, stop or kill; run it with --isolation server",
        )
    })
}

async fn nats_node(lab: &mut Lab<'_>, op: NodeOp, node: &NodeRef) -> StepOutcome {
    let started = Instant::now();
    let number = match (node, op) {
        (NodeRef::Number(n), _) => *n,
        // The leader it was: the node an earlier step took down as the stream's leader (another
        // node leads the stream by now, and restarting that one would take a second node down).
        (NodeRef::LeaderOf { leader_of }, NodeOp::Restart) => {
            *lab.downed_leaders.get(leader_of).ok_or_else(|| {
                StepFailure::invalid(format!(
                    "no earlier stop_nats_node or kill_nats_node took down the leader of \
                     {leader_of}'s stream, so there is no node to bring back; name the node \
                     (restart_nats_node: N)"
                ))
            })?
        }
        (NodeRef::LeaderOf { leader_of }, NodeOp::Stop | NodeOp::Kill) => {
            let n = stream_leader(lab, leader_of).await?;
            lab.downed_leaders.insert(leader_of.clone(), n);
            n
        }
    };
    let nats = own_server(lab)?;
    let (done, outcome) = match op {
        NodeOp::Stop => ("stopped", nats.stop_node(number).await),
        NodeOp::Kill => ("killed", nats.kill_node(number).await),
        NodeOp::Restart => ("restarted", nats.restart_node(number).await),
    };
    outcome
        .map_err(|e| StepFailure::environment(format!("nats node {number}: {e}")).caused_by(e))?;
    Ok(format!(
        "node {number} {done} in {}",
        crate::report::seconds(started.elapsed())
    ))
}
