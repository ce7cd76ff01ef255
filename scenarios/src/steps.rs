//! What the steps that act or wait do (deploy, trigger, advance, the `wait_*` steps, register,
//! publish, restart, stop); the `expect_*` steps are in `expect.rs`. A step returns a short detail
//! for the report (a run id, a version) or a failure message: what was expected, what arrived.

use futures::FutureExt;
use futures::future::LocalBoxFuture;
use tokio::time::Instant;
use triggers_emulator::recorder::{RunStatus, TimelineEntry};
use triggers_emulator::{EmulatorError, TriggerOptions};
use triggers_sdk::flow::Flow;
use triggers_sdk::wire::{Manifest, RegisterReply, json, subject};

use crate::expect;
use crate::model::{
    DeployStep, NodeRef, PublishStep, RegisterStep, Short, Step, TriggerStep, WaitNodeStep,
    WaitRunStep,
};
use crate::runner::{IDLE_GRACE, Lab};

pub(crate) type StepResult = Result<String, String>;

/// Runs one step. (Boxed, to keep the scenario's future small.)
pub(crate) fn run<'a>(lab: &'a mut Lab<'_>, step: &'a Step) -> LocalBoxFuture<'a, StepResult> {
    match step {
        Step::Deploy(Short(d)) => deploy(lab, d).boxed_local(),
        Step::Trigger(t) => trigger(lab, t).boxed_local(),
        Step::Advance(d) => advance(lab, d.0).boxed_local(),
        Step::Sleep(d) => async move {
            tokio::time::sleep(d.0).await;
            Ok(String::new())
        }
        .boxed_local(),
        Step::WaitNode(w) => wait_node(lab, w).boxed_local(),
        Step::WaitSettled(Short(w)) => wait_run(lab, w, true).boxed_local(),
        Step::WaitIdle(Short(w)) => wait_run(lab, w, false).boxed_local(),
        Step::ExpectEvents(e) => expect::expect_events(lab, e).boxed_local(),
        Step::ExpectDlq(d) => expect::expect_dlq(lab, d).boxed_local(),
        Step::ExpectRegistration(r) => expect::expect_registration(lab, r).boxed_local(),
        Step::Register(r) => register(lab, r).boxed_local(),
        Step::ExpectHeartbeat(h) => expect::expect_heartbeat(lab, h).boxed_local(),
        Step::ExpectService(x) => expect::expect_service(lab, x).boxed_local(),
        Step::ExpectBroadcast(Short(b)) => expect::expect_broadcast(lab, b).boxed_local(),
        Step::ExpectCalls(c) => expect::expect_calls(lab, c).boxed_local(),
        Step::ExpectHttp(h) => expect::expect_http(lab, h).boxed_local(),
        Step::ExpectViolation(Short(v)) => expect::expect_violation(lab, v).boxed_local(),
        Step::Publish(p) => publish(lab, p).boxed_local(),
        Step::RestartNats(_) => restart_nats(lab).boxed_local(),
        Step::StopNatsNode(n) => nats_node(lab, NodeOp::Stop, n).boxed_local(),
        Step::KillNatsNode(n) => nats_node(lab, NodeOp::Kill, n).boxed_local(),
        Step::RestartNatsNode(n) => nats_node(lab, NodeOp::Restart, n).boxed_local(),
        Step::StopService(name) => stop_service(lab, name).boxed_local(),
        Step::Fuzz(f) => fuzz(lab, f).boxed_local(),
        Step::Load(l) => load(lab, l).boxed_local(),
    }
}

async fn advance(lab: &Lab<'_>, by: std::time::Duration) -> StepResult {
    let fired = lab.em().advance(by).await.map_err(|e| e.to_string())?;
    Ok(format!(
        "the clock is at {}; {} timer(s) fired",
        lab.em().now(),
        fired.len()
    ))
}

async fn restart_nats(lab: &mut Lab<'_>) -> StepResult {
    let started = Instant::now();
    own_server(lab)?
        .restart()
        .await
        .map_err(|e| format!("cannot restart the nats-server: {e}"))?;
    Ok(format!(
        "restarted in {}",
        crate::report::seconds(started.elapsed())
    ))
}

/// The node (1-based) that leads `service`'s inbound stream, from the stream's cluster info.
/// Asked again for a few seconds: just after a node loss the stream may have no leader yet.
async fn stream_leader(lab: &Lab<'_>, service: &str) -> Result<usize, String> {
    let name =
        triggers_sdk::wire::subject::stream_name(service, None).map_err(|e| e.to_string())?;
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
    Err(format!("cannot tell which node leads {name}: {last}"))
}

/// The scenario's nats-server, which the runner gives it of its own when a step restarts, stops
/// or kills it.
fn own_server<'l>(lab: &'l mut Lab<'_>) -> Result<&'l mut triggers_emulator::NatsServer, String> {
    lab.harness.nats_mut().ok_or_else(|| {
        "this scenario runs on an account of a shared nats-server, which no step may restart, \
         stop or kill; run it with --isolation server"
            .to_string()
    })
}

/// What a `*_nats_node` step does to its node.
#[derive(Clone, Copy)]
enum NodeOp {
    Stop,
    Kill,
    Restart,
}

async fn nats_node(lab: &mut Lab<'_>, op: NodeOp, node: &NodeRef) -> StepResult {
    let started = Instant::now();
    let number = match (node, op) {
        (NodeRef::Number(n), _) => *n,
        // The leader it was: the node an earlier step took down as the stream's leader (another
        // node leads the stream by now, and restarting that one would take a second node down).
        (NodeRef::LeaderOf { leader_of }, NodeOp::Restart) => {
            *lab.downed_leaders.get(leader_of).ok_or_else(|| {
                format!(
                    "no earlier stop_nats_node or kill_nats_node took down the leader of \
                     {leader_of}'s stream, so there is no node to bring back; name the node \
                     (restart_nats_node: N)"
                )
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
    outcome.map_err(|e| format!("nats node {number}: {e}"))?;
    Ok(format!(
        "node {number} {done} in {}",
        crate::report::seconds(started.elapsed())
    ))
}

async fn stop_service(lab: &mut Lab<'_>, name: &str) -> StepResult {
    if let Some(s) = lab.scripted.remove(name) {
        s.stop().await;
        Ok("stopped".into())
    } else if let Some(mut e) = lab.external.remove(name) {
        e.stop().await.map(|()| "stopped".into())
    } else {
        Err(format!(
            "service {name:?} is not running (stopped already?)"
        ))
    }
}

fn flow_of(lab: &Lab<'_>, id: &str) -> Result<Flow, String> {
    let def = lab
        .scenario
        .flows
        .iter()
        .find(|f| f.id == id)
        .ok_or_else(|| format!("no flow {id:?}"))?;
    let value = lab.subst(&def.value)?;
    serde_json::from_value(value).map_err(|e| format!("flow {id:?} ({}): {e}", def.origin))
}

async fn deploy(lab: &mut Lab<'_>, d: &DeployStep) -> StepResult {
    let flow = flow_of(lab, &d.flow)?;
    let result = lab.em().deploy(flow).await;
    match (&d.expect_error, result) {
        (None, Ok(dep)) => {
            let detail = format!(
                "v{}, broadcast on {}",
                dep.flow.version, dep.broadcast_subject
            );
            lab.deployed.insert(d.flow.clone(), dep);
            Ok(detail)
        }
        (None, Err(e)) => Err(format!("expected {} to deploy; {e}", d.flow)),
        (Some(codes), Ok(dep)) => {
            let detail = format!(
                "expected the release of {} to be refused with {}, but it was deployed as v{} (broadcast on {})",
                d.flow,
                codes.0.join(", "),
                dep.flow.version,
                dep.broadcast_subject
            );
            lab.deployed.insert(d.flow.clone(), dep);
            Err(detail)
        }
        (Some(codes), Err(EmulatorError::Release(problems))) => {
            let found: Vec<&str> = problems.iter().map(|p| p.code.as_str()).collect();
            let missing: Vec<&String> = codes
                .0
                .iter()
                .filter(|c| !found.contains(&c.as_str()))
                .collect();
            let listing = problems
                .iter()
                .map(|p| format!("  {p}"))
                .collect::<Vec<_>>()
                .join("\n");
            if missing.is_empty() {
                Ok(format!("refused: {}", found.join(", ")))
            } else {
                Err(format!(
                    "expected the release of {} to be refused with {}; it was refused with:\n{listing}",
                    d.flow,
                    missing
                        .iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            }
        }
        (Some(codes), Err(e)) => Err(format!(
            "expected the release of {} to be refused with {}; the deploy failed otherwise: {e}",
            d.flow,
            codes.0.join(", ")
        )),
    }
}

async fn trigger(lab: &mut Lab<'_>, t: &TriggerStep) -> StepResult {
    let bytes = match (&t.raw, &t.payload) {
        (Some(raw), _) => Some(lab.subst_str(raw)?.into_bytes()),
        (None, Some(p)) => {
            let p = lab.subst(p)?;
            Some(json::to_vec(&json::GoAny(&p)).map_err(|e| e.to_string())?)
        }
        (None, None) => None,
    };
    let bytes = bytes.unwrap_or_else(|| b"{}".to_vec());
    let run = lab
        .em()
        .trigger_bytes(
            &t.flow,
            bytes,
            TriggerOptions {
                entry: t.entry.clone(),
                run_id: t.run_id.clone(),
            },
        )
        .await
        .map_err(|e| format!("cannot trigger {}: {e}", t.flow))?;
    if let Some(name) = &t.name {
        lab.runs.insert(name.clone(), run.0.clone());
    }
    Ok(run.0)
}

fn status_word(s: RunStatus) -> String {
    format!("{s:?}").to_lowercase()
}

async fn wait_node(lab: &Lab<'_>, wn: &WaitNodeStep) -> StepResult {
    let id = lab.run_id(&wn.run)?;
    let want = wn.status.as_deref().unwrap_or("succeeded");
    let mut w = lab.waiter(wn.timeout);
    let mut idle_since: Option<Instant> = None;
    loop {
        if let Some(run) = lab.em().run(&id) {
            let finished: Vec<&TimelineEntry> = run
                .node_entries(&wn.node)
                .filter(|e| matches!(e.status.as_str(), "succeeded" | "failed" | "skipped"))
                .collect();
            if let Some(e) = finished.first() {
                return if want == "any" || e.status == want {
                    Ok(e.status.clone())
                } else {
                    Err(format!(
                        "expected node {} of run {} to finish {want}; it finished {}{}\n{}",
                        wn.node,
                        wn.run,
                        e.status,
                        if e.error.is_empty() {
                            String::new()
                        } else {
                            format!(": {}", e.error)
                        },
                        lab.account_run(&id)
                    ))
                };
            }
            if run.status.is_settled() {
                let since = *idle_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= IDLE_GRACE {
                    return Err(format!(
                        "expected node {} of run {} to finish {want}; the run settled without it\n{}",
                        wn.node,
                        wn.run,
                        lab.account_run(&id)
                    ));
                }
            }
        }
        if !w.next().await {
            return Err(w.timeout(
                format!("node {} of run {} to finish {want}", wn.node, wn.run),
                lab.account_run(&id),
            ));
        }
    }
}

async fn wait_run(lab: &Lab<'_>, wr: &WaitRunStep, settled: bool) -> StepResult {
    let id = lab.run_id(&wr.run)?;
    let want = wr
        .status
        .as_deref()
        .unwrap_or(if settled { "succeeded" } else { "any" });
    let what = if settled {
        format!("run {} to settle ({want})", wr.run)
    } else {
        format!("run {} to be idle ({want})", wr.run)
    };
    let mut w = lab.waiter(wr.timeout);
    loop {
        if let Some(run) = lab.em().run(&id) {
            let done = if settled {
                run.status.is_settled()
            } else {
                run.pending.is_empty()
            };
            if done {
                let got = status_word(run.status);
                return if want == "any" || got == want {
                    let path: Vec<String> = run
                        .timeline
                        .iter()
                        .map(|e| format!("{} {}", e.node_id, e.status))
                        .collect();
                    Ok(format!("{got}: {}", path.join(", ")))
                } else {
                    Err(format!(
                        "expected run {} to be {want}; it is {got}\n{}",
                        wr.run,
                        lab.account_run(&id)
                    ))
                };
            }
        }
        if !w.next().await {
            return Err(w.timeout(what, lab.account_run(&id)));
        }
    }
}

async fn register(lab: &Lab<'_>, r: &RegisterStep) -> StepResult {
    let value = lab.subst(&r.manifest)?;
    let mut manifest: Manifest =
        serde_json::from_value(value.clone()).map_err(|e| format!("not a manifest: {e}"))?;
    if value.get("manifest_hash").is_none() {
        manifest.seal().map_err(|e| e.to_string())?;
    }
    let bytes = manifest.to_json().map_err(|e| e.to_string())?;
    let limit = r.timeout.map_or(lab.scenario.step_timeout, |d| d.0);
    let reply = tokio::time::timeout(
        limit,
        lab.hand.request(subject::MANIFEST_REGISTER, bytes.into()),
    )
    .await
    .map_err(|_| format!("no reply to the registration within {limit:?}"))?
    .map_err(|e| format!("the registration request failed: {e}"))?;
    let reply = RegisterReply::from_json(&reply.payload)
        .map_err(|e| format!("the reply is not a register reply: {e}"))?;
    match (&r.expect_error, reply.error.is_empty()) {
        (None, true) => Ok("accepted".into()),
        (None, false) => Err(format!(
            "expected the registration of {:?} to be accepted; it was refused: {}",
            manifest.service, reply.error
        )),
        (Some(t), true) => Err(format!(
            "expected the registration of {:?} to be refused with an error containing {t:?}; it was accepted",
            manifest.service
        )),
        (Some(t), false) if reply.error.contains(t.as_str()) => {
            Ok(format!("refused: {}", reply.error))
        }
        (Some(t), false) => Err(format!(
            "expected the registration of {:?} to be refused with an error containing {t:?}; it was refused with: {}",
            manifest.service, reply.error
        )),
    }
}

async fn publish(lab: &Lab<'_>, p: &PublishStep) -> StepResult {
    let subject = lab.subst_str(&p.subject)?;
    let body: Vec<u8> = match (&p.body, &p.json) {
        (Some(text), _) => lab.subst_str(text)?.into_bytes(),
        (None, Some(v)) => json::to_vec(&json::GoAny(&lab.subst(v)?)).map_err(|e| e.to_string())?,
        (None, None) => Vec::new(),
    };
    let mut headers = async_nats::HeaderMap::new();
    for (name, value) in &p.headers {
        let value = lab.subst_str(value)?;
        // Checked when the file was read; a `${...}` could still bring a line break in.
        triggers_sdk::transport::check_header(name, &value).map_err(|e| e.to_string())?;
        headers.insert(name.as_str(), value.as_str());
    }
    let js = async_nats::jetstream::new(lab.hand.clone());
    // Through JetStream (and its ack) when a stream captures the subject, so the step ends
    // when the message is stored; a plain publish otherwise.
    let limit = lab.scenario.step_timeout;
    match js.stream_by_subject(subject.clone()).await {
        Ok(stream) => {
            let ack = tokio::time::timeout(limit, async {
                js.publish_with_headers(subject.clone(), headers, body.into())
                    .await
                    .map_err(|e| e.to_string())?
                    .await
                    .map_err(|e| e.to_string())
            })
            .await
            .map_err(|_| {
                format!("JetStream did not ack the publish on {subject} within {limit:?}")
            })?
            .map_err(|e| format!("cannot publish on {subject}: {e}"))?;
            Ok(if ack.duplicate {
                format!(
                    "a duplicate: stream {stream} kept the first (seq {})",
                    ack.sequence
                )
            } else {
                format!("stored in stream {stream} (seq {})", ack.sequence)
            })
        }
        Err(_) => {
            lab.hand
                .publish_with_headers(subject.clone(), headers, body.into())
                .await
                .map_err(|e| format!("cannot publish on {subject}: {e}"))?;
            lab.hand
                .flush()
                .await
                .map_err(|e| format!("cannot publish on {subject}: {e}"))?;
            Ok("published (no stream captures the subject)".into())
        }
    }
}

async fn fuzz(lab: &Lab<'_>, f: &crate::model::FuzzStep) -> StepResult {
    let config = crate::fuzz::FuzzConfig {
        service: f.service.clone(),
        action: f.action.clone(),
        runs: f.runs.unwrap_or(crate::model::DEFAULT_FUZZ_RUNS),
        seed: f.seed.unwrap_or(1),
        invalid: f.invalid,
        run_timeout: f.run_timeout.map_or(lab.scenario.step_timeout, |d| d.0),
        shrink_time: crate::fuzz::SHRINK_TIME,
    };
    let report = crate::fuzz::fuzz(lab.em(), &lab.hand, &config).await?;
    if report.failure.is_some() {
        Err(report.describe())
    } else {
        Ok(report.describe())
    }
}

async fn load(lab: &Lab<'_>, l: &crate::model::LoadStep) -> StepResult {
    use crate::loadgen::{LoadConfig, Payloads};
    let payloads = match (&l.payload, &l.payloads_file) {
        (_, Some(file)) => {
            let path = lab.scenario.base_dir.join(file);
            let text =
                crate::input::read_text_file(&path).map_err(|e| format!("payloads_file: {e}"))?;
            Payloads::from_text(&text)
                .map_err(|e| format!("payloads_file: {}, {e}", path.display()))?
        }
        (Some(p), None) => Payloads::Template(p.clone()),
        (None, None) => Payloads::Template(serde_json::json!({})),
    };
    let config = LoadConfig {
        flow: l.flow.clone(),
        runs: l.runs.unwrap_or(crate::model::DEFAULT_LOAD_RUNS),
        pace: crate::loadgen::Pace::of(l.rate, l.concurrency),
        payloads,
        run_timeout: l.run_timeout.map_or(lab.scenario.step_timeout, |d| d.0),
    };
    let report = crate::loadgen::run_load(lab.em(), &config, &mut |_, _| {}).await?;
    let table = report.table();
    let broken = crate::loadgen::unmet(&report, &l.expect);
    if broken.is_empty() {
        Ok(table)
    } else {
        Err(format!("{}\n{table}", broken.join("; ")))
    }
}
