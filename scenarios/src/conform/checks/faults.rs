//! The fault checks of issue 31: the kit kills the service mid-action and starts it again, runs
//! two replicas at once and restarts the nats-server under the service. What a correct service
//! does under each is in docs/conform.md ("The faults the kit injects").

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Value, json};
use triggers_emulator::RunId;
use triggers_emulator::recorder::{RecordKind, RunStatus};
use triggers_sdk::wire::shapes::status;

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

pub(super) async fn replicas(ctx: &mut Ctx) -> Result<(), Failure> {
    let before = ctx.registrations();
    let mut second = ctx.spawn_service()?;
    let outcome = async {
        ctx.registered_again(before, "a second replica").await?;
        // Deployed once both hold their subscriptions: the broadcast must reach both.
        ctx.deploy(replicas_flow()).await?;
        let mut runs = Vec::new();
        for i in 0..REPLICA_RUNS {
            runs.push(
                ctx.trigger("conform-replicas", &json!({"replica": i}))
                    .await?,
            );
        }
        let mut wrong = Vec::new();
        for run in &runs {
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
            fail(
                format!(
                    "with two replicas, each of {REPLICA_RUNS} runs succeeded, echo once each \
                     (broadcasts reach both replicas; the deliveries are shared out)"
                ),
                wrong.join("; "),
            )
        }
    }
    .await;
    let _ = second.stop().await;
    outcome
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
    ctx.lab.nats_mut().restart().await.map_err(|e| Failure {
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
