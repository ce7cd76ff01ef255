//! The first checks, and the last: registration, heartbeats, the echo, mapping, condition,
//! lookup and output flows, then the service's conformance over the whole run and its shutdown.

use super::*;

pub(super) async fn register(ctx: &mut Ctx) -> Result<(), Failure> {
    let patience = ctx.timeout.max(Duration::from_secs(10));
    let state = match ctx
        .lab
        .with_wait_timeout(patience)
        .wait_for_registration(SERVICE)
        .await
    {
        Ok(state) => state,
        Err(_) => {
            let (records, _) = ctx.lab.records();
            let refused = records.iter().rev().find_map(|r| match &r.kind {
                RecordKind::Registration {
                    accepted: false,
                    error,
                    ..
                } => Some(error.clone().unwrap_or_default()),
                _ => None,
            });
            let arrived = match (refused, ctx.service.exited()) {
                (Some(error), _) => format!("the registration was refused: {error}"),
                (None, Some(status)) => {
                    format!("the service exited ({status}) without registering")
                }
                (None, None) => format!("no registration of {SERVICE:?} within {patience:?}"),
            };
            return fail(
                format!("{SERVICE} to register within {patience:?} and be accepted"),
                arrived,
            );
        }
    };
    let m = &state.manifest;
    let mut wrong = Vec::new();
    if m.service_version != "1.0.0" {
        wrong.push(format!(
            "service_version {:?}, not \"1.0.0\"",
            m.service_version
        ));
    }
    for (name, timeout_ms, attempts, initial, factor, max) in ACTIONS {
        let Some(a) = m.actions.iter().find(|a| a.name == name) else {
            wrong.push(format!("no action {name}"));
            continue;
        };
        let r = &a.retry;
        if a.timeout_ms != timeout_ms
            || r.max_attempts != attempts
            || r.initial_backoff_ms != initial
            || r.backoff_factor != factor
            || r.max_backoff_ms != max
        {
            wrong.push(format!(
                "{name}: timeout_ms {} retry ({}, {}, {}, {}), not {timeout_ms} ({attempts}, {initial}, {factor}, {max})",
                a.timeout_ms, r.max_attempts, r.initial_backoff_ms, r.backoff_factor, r.max_backoff_ms
            ));
        }
        let dlq = format!("triggers.v2.dlq.{SERVICE}.{name}");
        if a.dlq != dlq {
            wrong.push(format!("{name}: dlq {:?}, not {dlq:?}", a.dlq));
        }
    }
    if !m
        .service_sources
        .iter()
        .any(|s| s.transport == "nats" && s.default == INBOUND)
    {
        wrong.push(format!("no NATS source {INBOUND}"));
    }
    for node in ["condition", "lookup", "mapping"] {
        if !m.supports_nodes.iter().any(|n| n == node) {
            wrong.push(format!("supports_nodes lacks {node}"));
        }
    }
    if !m
        .runtime_capabilities
        .iter()
        .any(|c| c == triggers_sdk::runtime::DURABLE_TIMER_V1)
    {
        wrong.push("runtime_capabilities lacks durable_timer.v1".into());
    }
    if !m.runtime_lookups.iter().any(|l| l.name == "directory") {
        wrong.push("no runtime lookup directory".into());
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        fail(
            "the conformance service's manifest (docs/conform.md)",
            wrong.join("; "),
        )
    }
}

pub(super) async fn heartbeat(ctx: &mut Ctx) -> Result<(), Failure> {
    let Some(state) = ctx.lab.services().get(SERVICE).cloned() else {
        return fail("a registered service", "none");
    };
    let beat = ctx
        .lab
        .with_wait_timeout(Duration::from_secs(7).max(ctx.timeout))
        .wait_for_heartbeat(SERVICE, |h| !h.shutting_down)
        .await
        .map_err(|e| Failure {
            expected: "a heartbeat within 7 s of registering".into(),
            arrived: e.to_string(),
        })?;
    let m = &state.manifest;
    if beat.service_version != m.service_version || beat.manifest_hash != m.manifest_hash {
        return fail(
            format!(
                "service_version {:?} and manifest_hash {}, as registered",
                m.service_version, m.manifest_hash
            ),
            format!(
                "service_version {:?}, manifest_hash {}",
                beat.service_version, beat.manifest_hash
            ),
        );
    }
    Ok(())
}

pub(super) async fn echo(ctx: &mut Ctx) -> Result<(), Failure> {
    let version = ctx.deploy(echo_flow()).await?;
    let mut out = ctx.listen("conform.out.echo").await?;
    let input = json!({"hello": "world", "n": [1, 2.5, null], "nested": {"ü": "<&>"}});
    let run = ctx.trigger("conform-echo", &input).await?;
    let msg = ctx
        .next(&mut out, "echo's output at conform.out.echo")
        .await?;
    let got: Value = serde_json::from_slice(&msg.payload).unwrap_or(Value::Null);
    if got != input {
        return fail(
            format!("echo's output to be its input, {input}"),
            String::from_utf8_lossy(&msg.payload).into_owned(),
        );
    }
    let settled = ctx.succeeded(&run).await?;
    expect_statuses(ctx, &run, "echo", &[status::SUCCEEDED])?;
    let event = &ctx.events(&run, "echo")[0];
    if event.node_type != "action"
        || event.service != SERVICE
        || event.trace_id != settled.trace_id
        || event.flow_version != version
    {
        return fail(
            format!(
                "node_type action, service {SERVICE}, trace_id {}, flow_version {version}",
                settled.trace_id
            ),
            format!(
                "node_type {}, service {}, trace_id {}, flow_version {}",
                event.node_type, event.service, event.trace_id, event.flow_version
            ),
        );
    }
    Ok(())
}

pub(super) async fn mapping_condition(ctx: &mut Ctx) -> Result<(), Failure> {
    ctx.deploy(line(
        "conform-mapping",
        vec![
            cin("in"),
            json!({"id": "map", "type": "mapping",
                   "config": {"fields": {"flag": "$.flag", "n": "$.n"}}}),
            json!({"id": "check", "type": "condition",
                   "config": {"path": "$.flag", "op": "eq", "value": true}}),
            action("echo", SERVICE, "echo"),
        ],
    ))
    .await?;
    let yes = ctx
        .trigger("conform-mapping", &json!({"flag": true, "n": 1, "drop": 2}))
        .await?;
    let no = ctx
        .trigger("conform-mapping", &json!({"flag": false, "n": 2}))
        .await?;
    ctx.succeeded(&yes).await?;
    expect_statuses(ctx, &yes, "map", &[status::SUCCEEDED])?;
    expect_statuses(ctx, &yes, "check", &[status::SUCCEEDED])?;
    expect_statuses(ctx, &yes, "echo", &[status::SUCCEEDED])?;
    // A false condition's run settles with `check` skipped; a service that reports it
    // `succeeded` leaves echo pending, so wait for the node rather than the run.
    let checked = ctx
        .patient(|lab| {
            let no = no.clone();
            async move { lab.wait_for_node(&no.0, "check").await }
        })
        .await
        .map_err(|e| Failure {
            expected: "check (a false condition) reported skipped".into(),
            arrived: e.to_string(),
        })?;
    if checked.status != status::SKIPPED {
        return fail(
            "a false condition is reported `skipped` (and what follows it never runs)",
            format!(
                "check (condition $.flag eq true, on flag false) reported {:?}",
                checked.status
            ),
        );
    }
    ctx.settled(&no).await?;
    expect_statuses(ctx, &no, "check", &[status::SKIPPED])?;
    expect_statuses(ctx, &no, "echo", &[])
}

pub(super) async fn lookup(ctx: &mut Ctx) -> Result<(), Failure> {
    ctx.deploy(line(
        "conform-lookup",
        vec![
            cin("in"),
            json!({"id": "find", "type": "lookup",
                   "config": {"lookup": "directory", "params": {"key": "$.key"}}}),
            output("out", "conform.out.lookup"),
        ],
    ))
    .await?;
    let mut out = ctx.listen("conform.out.lookup").await?;
    let run = ctx
        .trigger("conform-lookup", &json!({"key": "k1", "keep": 1}))
        .await?;
    let msg = ctx
        .next(&mut out, "the lookup's result at conform.out.lookup")
        .await?;
    let want = json!({"key": "k1", "keep": 1, "found": true, "value": "value-of-k1"});
    let got: Value = serde_json::from_slice(&msg.payload).unwrap_or(Value::Null);
    if got != want {
        return fail(
            want.to_string(),
            String::from_utf8_lossy(&msg.payload).into_owned(),
        );
    }
    ctx.succeeded(&run).await?;
    expect_statuses(ctx, &run, "find", &[status::SUCCEEDED])
}

pub(super) async fn output_nats(ctx: &mut Ctx) -> Result<(), Failure> {
    ctx.deploy(line(
        "conform-output",
        vec![
            cin("in"),
            action("echo", SERVICE, "echo"),
            output("out", "conform.out.output"),
        ],
    ))
    .await?;
    let mut out = ctx.listen("conform.out.output").await?;
    let run = ctx.trigger("conform-output", &json!({"a": 1})).await?;
    let msg = ctx
        .next(&mut out, "the output at conform.out.output")
        .await?;
    let headers = transport::from_nats(msg.headers.as_ref());
    let envelope = Envelope::from_headers(&headers).map_err(|e| Failure {
        expected: "the output to carry the envelope headers".into(),
        arrived: e.to_string(),
    })?;
    let settled = ctx.succeeded(&run).await?;
    let msg_id = headers.get(names::NATS_MSG_ID).unwrap_or_default();
    let root = idempotency::root(&run.0, "in");
    let mut wrong = Vec::new();
    if envelope.flow_run_id != run.0 {
        wrong.push(format!("flow_run_id {}", envelope.flow_run_id));
    }
    if envelope.source_node_id != "out" {
        wrong.push(format!("source_node_id {:?}", envelope.source_node_id));
    }
    if envelope.trace_id != settled.trace_id {
        wrong.push(format!("trace_id {:?}", envelope.trace_id));
    }
    if msg_id != envelope.idempotency_key {
        wrong.push(format!(
            "Nats-Msg-Id {msg_id:?} differs from the idempotency key {:?}",
            envelope.idempotency_key
        ));
    }
    if envelope.idempotency_key == root {
        wrong.push(format!(
            "the idempotency key is the inbound delivery's ({root}), not one of its own"
        ));
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        fail(
            format!(
                "the run's envelope, source_node_id \"out\", trace_id {}, Nats-Msg-Id = a key of its own",
                settled.trace_id
            ),
            wrong.join("; "),
        )
    }
}

pub(super) async fn conformant(ctx: &mut Ctx) -> Result<(), Failure> {
    // Run alone (`--only conformant`), nothing but the registration would have been judged:
    // wait for a heartbeat too.
    let _ = ctx
        .lab
        .with_wait_timeout(Duration::from_secs(7).max(ctx.timeout))
        .wait_for_heartbeat(SERVICE, |_| true)
        .await;
    let errors: Vec<String> = ctx
        .lab
        .violations()
        .into_iter()
        .filter(|v| v.severity == Severity::Error)
        .map(|v| format!("{} on {}: {}", v.rule, v.subject, v.message))
        .collect();
    if errors.is_empty() {
        if ctx.strict {
            let warnings = ctx.warnings();
            if !warnings.is_empty() {
                ctx.strict_only = true;
                return fail(
                    "no conformance warning either (--strict: bytes identical to Go's)",
                    format!("{} warning(s): {}", warnings.len(), warnings.join(" | ")),
                );
            }
        }
        return Ok(());
    }
    let shown: Vec<&String> = errors.iter().take(5).collect();
    fail(
        "no conformance error in what the service sent",
        format!(
            "{} error(s): {}",
            errors.len(),
            shown
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(" | ")
        ),
    )
}

pub(super) async fn shutdown(ctx: &mut Ctx) -> Result<(), Failure> {
    ctx.service.terminate();
    // Nothing is in flight by now, so a correct service is gone in well under its grace period.
    let patience = ctx.timeout.saturating_mul(3);
    ctx.lab
        .with_wait_timeout(patience)
        .wait_for_heartbeat(SERVICE, |h| h.shutting_down)
        .await
        .map_err(|e| Failure {
            expected: "a heartbeat with shutting_down true after SIGTERM".into(),
            arrived: e.to_string(),
        })?;
    match ctx.service.wait_exit(patience).await {
        Some(_) => Ok(()),
        None => fail(
            format!("the process to exit within {patience:?} of SIGTERM"),
            "still running",
        ),
    }
}
