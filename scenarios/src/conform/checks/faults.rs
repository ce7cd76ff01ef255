//! The fault checks of issue 31: the kit kills the service mid-action and starts it again, runs
//! two replicas at once, restarts the nats-server under the service, drops an ack on its way
//! to the server (a proxy in between) and broadcasts a flow while the service registers. What a correct service
//! does under each is in docs/conform.md ("The faults the kit injects").

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Value, json};
use triggers_emulator::RunId;
use triggers_emulator::recorder::{RecordKind, RunStatus};
use triggers_sdk::wire::shapes::status;

use futures::StreamExt;
use natsbox::FaultProxy;

use super::{Ctx, Failure, SERVICE, action, cin, fail, line};
use crate::external::External;

impl Ctx {
    /// Starts another process of the service under test, as the kit started the first.
    fn spawn_service(&self) -> Result<External, Failure> {
        External::spawn(
            SERVICE,
            &self.launch.command,
            &self.launch.env,
            &self.launch.cwd,
            self.lab.url(),
        )
        .map_err(|e| Failure {
            expected: "the service to start again".into(),
            arrived: e,
        })
    }

    /// How many registrations of the service the emulator accepted so far.
    fn registrations(&self) -> usize {
        let (records, _) = self.lab.records();
        records
            .iter()
            .filter(|r| {
                matches!(&r.kind, RecordKind::Registration { service, accepted: true, .. }
                    if service == SERVICE)
            })
            .count()
    }

    /// Waits until more than `before` registrations were accepted (a process started again).
    async fn registered_again(&self, before: usize, what: &str) -> Result<(), Failure> {
        let patience = self.timeout.max(Duration::from_secs(10));
        let started = tokio::time::Instant::now();
        while self.registrations() <= before {
            if started.elapsed() > patience {
                return fail(
                    format!("{what} to register within {patience:?}"),
                    "no new registration",
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }
}

fn crash_flow() -> Value {
    line(
        "conform-crash-redelivery",
        vec![cin("in"), action("slow", SERVICE, "slow")],
    )
}

/// How long the action runs, and when the kit kills the process (into the action).
const SLOW_MS: u64 = 250;
const KILL_AFTER: Duration = Duration::from_millis(120);

pub(super) async fn crash_redelivery(ctx: &mut Ctx) -> Result<(), Failure> {
    ctx.deploy(crash_flow()).await?;
    let before = ctx.registrations();
    let run = ctx
        .trigger("conform-crash-redelivery", &json!({"ms": SLOW_MS}))
        .await?;
    tokio::time::sleep(KILL_AFTER).await;
    ctx.service.kill();
    if ctx
        .service
        .wait_exit(Duration::from_secs(10))
        .await
        .is_none()
    {
        return fail("the service to die of SIGKILL", "it is still running");
    }
    let restarted = ctx.spawn_service()?;
    let mut dead = std::mem::replace(&mut ctx.service, restarted);
    let _ = dead.stop().await;
    ctx.registered_again(before, "the restarted service")
        .await?;
    // JetStream redelivers the unacked delivery after ack_wait (2 s, TRIGGERS_ACK_WAIT_MS).
    let settled = ctx.settled(&run).await;
    let slow = ctx.statuses(&run, "slow");
    match settled {
        Ok(r) if r.status == RunStatus::Succeeded && slow == [status::SUCCEEDED] => Ok(()),
        Ok(r) => fail(
            "the delivery run to completion exactly once across the kill: slow succeeded once",
            format!("run {:?}; slow reported {slow:?}", r.status),
        ),
        Err(_) if slow.is_empty() => fail(
            format!(
                "the delivery killed {KILL_AFTER:?} into slow redelivered after the restart and run to completion"
            ),
            "slow never reported: the delivery was lost (acked before it was done?) or a \
             redelivery was taken for work already done",
        ),
        Err(e) => Err(e),
    }
}

fn replicas_flow() -> Value {
    line(
        "conform-replicas",
        vec![cin("in"), action("echo", SERVICE, "echo")],
    )
}

/// Runs triggered while two replicas share the consumer: enough that both take some.
const REPLICA_RUNS: usize = 10;

/// Flows deployed while both replicas run, each run once after the first replica stopped: a
/// broadcast shared out in a queue group reaches only one replica, so the second lacks about
/// half of them (all of them held by chance once in 2^6).
const REPLICA_FLOWS: usize = 6;

fn replica_flow(i: usize) -> Value {
    line(
        &format!("conform-replicas-{i}"),
        vec![cin("in"), action("echo", SERVICE, "echo")],
    )
}

pub(super) async fn replicas(ctx: &mut Ctx) -> Result<(), Failure> {
    let before = ctx.registrations();
    let second = ctx.spawn_service()?;
    // The second replica is the service from now on; the first is stopped halfway.
    let mut first = std::mem::replace(&mut ctx.service, second);
    let shared = async {
        ctx.registered_again(before, "a second replica").await?;
        // Deployed once both hold their subscriptions: the broadcasts must reach both.
        ctx.deploy(replicas_flow()).await?;
        for i in 0..REPLICA_FLOWS {
            ctx.deploy(replica_flow(i)).await?;
        }
        let mut runs = Vec::new();
        for i in 0..REPLICA_RUNS {
            runs.push(
                ctx.trigger("conform-replicas", &json!({"replica": i}))
                    .await?,
            );
        }
        each_ran_once(
            ctx,
            &runs,
            &format!(
                "with two replicas, each of {REPLICA_RUNS} runs succeeded, echo once each \
                 (broadcasts reach both replicas; the deliveries are shared out)"
            ),
        )
        .await
    }
    .await;
    let _ = first.stop().await;
    shared?;
    // The second alone: it must hold every flow broadcast while both ran.
    let mut runs = Vec::new();
    for i in 0..REPLICA_FLOWS {
        runs.push(
            ctx.trigger(&format!("conform-replicas-{i}"), &json!({"alone": i}))
                .await?,
        );
    }
    each_ran_once(
        ctx,
        &runs,
        &format!(
            "the second replica, alone once the first stopped, holding each of the \
             {REPLICA_FLOWS} flows deployed while both ran (a broadcast reaches every replica: \
             plain subscriptions, not a queue group)"
        ),
    )
    .await
}

/// Fails unless each of `runs` succeeded with one `echo` event.
async fn each_ran_once(ctx: &Ctx, runs: &[RunId], expected: &str) -> Result<(), Failure> {
    let mut wrong = Vec::new();
    for run in runs {
        let settled = ctx.settled(run).await;
        let echo = ctx.statuses(run, "echo");
        let ok = matches!(&settled, Ok(r) if r.status == RunStatus::Succeeded)
            && echo == [status::SUCCEEDED];
        if !ok {
            wrong.push(describe(ctx, run, &echo));
        }
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        fail(expected, wrong.join("; "))
    }
}

fn describe(ctx: &Ctx, run: &RunId, echo: &[String]) -> String {
    let dlq: BTreeSet<String> = ctx
        .lab
        .dlq()
        .into_iter()
        .filter_map(|r| match r.kind {
            RecordKind::Dlq { entry: Some(e), .. } if e.envelope.flow_run_id == run.0 => {
                Some(e.kind)
            }
            _ => None,
        })
        .collect();
    if dlq.is_empty() {
        format!("{}: echo {echo:?}", run.0)
    } else {
        format!(
            "{}: echo {echo:?}, dead-lettered as {} (a replica without the flow?)",
            run.0,
            dlq.into_iter().collect::<Vec<_>>().join(", ")
        )
    }
}

pub(super) async fn server_restart(ctx: &mut Ctx) -> Result<(), Failure> {
    ctx.deploy(super::echo_flow()).await?;
    let Some(server) = ctx.lab.nats_mut() else {
        return fail(
            "the kit to restart the nats-server",
            "the kit runs on an account of a shared server, which it may not restart",
        );
    };
    server.restart().await.map_err(|e| Failure {
        expected: "the kit to restart the nats-server".into(),
        arrived: e.to_string(),
    })?;
    // After the restart the service must still take work: a run on the same streams and
    // consumer succeeds.
    // The kit's own connection reconnects too: a trigger may fail while it does.
    let started = tokio::time::Instant::now();
    let run = loop {
        match ctx
            .trigger("conform-echo", &json!({"after": "restart"}))
            .await
        {
            Ok(run) => break run,
            Err(f) if started.elapsed() > ctx.timeout => return Err(f),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    };
    let settled = ctx.settled(&run).await.map_err(|f| Failure {
        expected: "a run after the nats-server restarted to succeed (the service reconnects; its \
                   consumer survives)"
            .into(),
        arrived: f.arrived,
    })?;
    if settled.status != RunStatus::Succeeded {
        return fail(
            "a run after the nats-server restarted to succeed",
            format!("{:?}", settled.status),
        );
    }
    Ok(())
}

impl Ctx {
    /// Stops the service (SIGTERM, as an operator would) and starts it again, connected to
    /// `url` (the server's, or a proxy's in front of it); returns once the new process
    /// registered.
    async fn restart_service(&mut self, url: &str, what: &str) -> Result<(), Failure> {
        let before = self.registrations();
        let _ = self.service.stop().await;
        let restarted = External::spawn(
            SERVICE,
            &self.launch.command,
            &self.launch.env,
            &self.launch.cwd,
            url,
        )
        .map_err(|e| Failure {
            expected: "the service to start again".into(),
            arrived: e,
        })?;
        self.service = restarted;
        self.registered_again(before, what).await
    }

    /// The `ack_wait` the service was given (`TRIGGERS_ACK_WAIT_MS`).
    fn ack_wait(&self) -> Duration {
        self.launch
            .env
            .get("TRIGGERS_ACK_WAIT_MS")
            .and_then(|ms| ms.parse().ok())
            .map_or(
                Duration::from_millis(super::super::ACK_WAIT_MS),
                Duration::from_millis,
            )
    }
}

fn ack_lost_flow() -> Value {
    line(
        "conform-ack-lost",
        vec![cin("in"), action("echo", SERVICE, "echo")],
    )
}

pub(super) async fn ack_lost(ctx: &mut Ctx) -> Result<(), Failure> {
    let proxy = FaultProxy::start(ctx.lab.url())
        .await
        .map_err(|e| Failure {
            expected: "the kit to start a proxy in front of the nats-server".into(),
            arrived: e.to_string(),
        })?;
    let url = proxy.url().to_owned();
    // Kept to the end of the battery: the service restarted behind it stays connected to it.
    ctx.proxy = Some(proxy);
    ctx.restart_service(&url, "the service restarted behind the kit's proxy")
        .await?;
    ctx.deploy(ack_lost_flow()).await?;
    // Every publish of the flow's events, as sent: the stream keeps one of each Nats-Msg-Id,
    // so a second execution of echo shows only here.
    let mut events = ctx
        .listen("triggers.v2.flow.events.conform-ack-lost")
        .await?;
    let Some(proxy) = ctx.proxy.as_ref() else {
        return fail("the kit's proxy", "none");
    };
    let before = proxy.acks();
    proxy.drop_acks(1);
    let run = ctx
        .trigger("conform-ack-lost", &json!({"ack": "lost"}))
        .await?;
    ctx.succeeded(&run).await?;
    // The delivery's ack is dropped; JetStream redelivers it after ack_wait; the service acks
    // the redelivery. Once the consumer has nothing pending, the server read all the service
    // sent before that ack (one connection, in order): its events are routed to the kit.
    let patience = ctx.ack_wait() + ctx.timeout;
    let started = tokio::time::Instant::now();
    loop {
        let acks = ctx.proxy.as_ref().map(FaultProxy::acks).unwrap_or_default();
        let pending = consumer_pending(ctx).await;
        if acks.dropped > before.dropped && acks.passed > before.passed && pending == Some(0) {
            break;
        }
        if started.elapsed() > patience {
            return fail(
                format!(
                    "the delivery's ack lost, its redelivery (after ack_wait, {:?}) acked",
                    ctx.ack_wait()
                ),
                format!(
                    "{} ack(s) dropped, {} passed since; the consumer has {} unacked",
                    acks.dropped - before.dropped,
                    acks.passed - before.passed,
                    pending.map_or("?".to_owned(), |n| n.to_string())
                ),
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = ctx.client.flush().await;
    let mut executions = BTreeSet::new();
    while let Ok(Some(msg)) = tokio::time::timeout(Duration::ZERO, events.next()).await {
        if let Ok(e) = triggers_sdk::wire::CompletionEvent::from_json(&msg.payload)
            && e.flow_run_id == run.0
            && e.node_id == "echo"
            && e.status == status::SUCCEEDED
        {
            executions.insert(e.started_at.to_string());
        }
    }
    if executions.len() > 1 {
        return fail(
            "echo run once: a redelivery whose idempotency key was handled already (only its ack \
             was lost) is acked, or its kept outcome handed on, without running the action \
             again (protocol.md §10)",
            format!(
                "echo ran {} times (succeeded events started at {})",
                executions.len(),
                executions.into_iter().collect::<Vec<_>>().join(", ")
            ),
        );
    }
    Ok(())
}

/// The messages the service's durable consumer has delivered and not had acked, when it can
/// be read.
async fn consumer_pending(ctx: &Ctx) -> Option<usize> {
    let js = async_nats::jetstream::new(ctx.client.clone());
    let inbound = super::INBOUND;
    let stream = js.stream_by_subject(inbound).await.ok()?;
    let name = triggers_sdk::wire::subject::consumer_name(SERVICE, inbound).ok()?;
    let stream = js.get_stream(stream).await.ok()?;
    let info = stream.consumer_info(name).await.ok()?;
    Some(info.num_ack_pending)
}

fn early_flow() -> Value {
    line(
        "conform-early",
        vec![cin("in"), action("echo", SERVICE, "echo")],
    )
}

pub(super) async fn broadcast_before_reply(ctx: &mut Ctx) -> Result<(), Failure> {
    if ctx.versions.contains_key("conform-early") {
        return fail("conform-early not deployed yet", "it was");
    }
    let flow: triggers_sdk::flow::Flow =
        serde_json::from_value(early_flow()).map_err(|e| Failure {
            expected: "the kit's flow conform-early to decode".into(),
            arrived: e.to_string(),
        })?;
    // Deployed when the service registers again: after its reply was made (the reply lacks
    // it), before the reply is sent, so its broadcast reaches the service first.
    ctx.lab.deploy_at_registration(SERVICE, flow);
    let url = ctx.lab.url().to_owned();
    ctx.restart_service(&url, "the restarted service").await?;
    // The registration is recorded before the reply is sent, and the flow deployed between.
    let started = tokio::time::Instant::now();
    let version = loop {
        if let Some(f) = ctx.lab.flows().get("conform-early") {
            break f.version;
        }
        if started.elapsed() > ctx.timeout {
            return fail(
                "conform-early deployed as the service registered",
                "the emulator did not deploy it",
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    ctx.versions.insert("conform-early".into(), version);
    let run = ctx
        .trigger("conform-early", &json!({"early": true}))
        .await?;
    let settled = ctx.settled(&run).await;
    let echo = ctx.statuses(&run, "echo");
    match settled {
        Ok(r) if r.status == RunStatus::Succeeded && echo == [status::SUCCEEDED] => Ok(()),
        _ => fail(
            "a flow broadcast while the service registered (before its register reply) held: \
             the broadcasts are subscribed to before the registration is sent (protocol.md §2), \
             so its run succeeds",
            describe(ctx, &run, &echo),
        ),
    }
}
