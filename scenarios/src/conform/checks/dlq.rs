//! The retry and DLQ checks: an action that fails, times out or panics, and each fallback kind
//! (an input, envelope, JSON, flow or node the service cannot use).

use super::*;

pub(super) async fn retry(ctx: &mut Ctx) -> Result<(), Failure> {
    ctx.deploy(flaky_flow()).await?;
    let run = ctx
        .trigger("conform-flaky", &json!({"failures": 2}))
        .await?;
    ctx.succeeded(&run).await?;
    expect_statuses(
        ctx,
        &run,
        "flaky",
        &[status::RETRYING, status::RETRYING, status::SUCCEEDED],
    )?;
    let dead = ctx.lab.dlq().into_iter().filter(|r| {
        matches!(&r.kind, RecordKind::Dlq { entry: Some(e), .. } if e.envelope.flow_run_id == run.0)
    });
    match dead.count() {
        0 => Ok(()),
        n => fail("no DLQ entry", format!("{n} DLQ entries for the run")),
    }
}

/// The checks every action DLQ entry must pass: subject, kind, body, Msg-Id.
pub(super) fn check_entry(
    record: &triggers_emulator::DlqRecord,
    subject: &str,
    kind: &str,
    body: &Value,
) -> Result<triggers_sdk::wire::DlqEntry, Failure> {
    let Some(entry) = record.entry.clone() else {
        return fail(
            "a DLQ entry that decodes",
            record.payload.chars().take(200).collect::<String>(),
        );
    };
    let mut wrong = Vec::new();
    if record.subject != subject {
        wrong.push(format!("subject {}", record.subject));
    }
    if entry.kind != kind {
        wrong.push(format!("kind {}", entry.kind));
    }
    let got: Value = serde_json::from_str(&entry.body.to_string()).unwrap_or(Value::Null);
    if &got != body {
        wrong.push(format!("body {}", entry.body));
    }
    let msg_id = format!(
        "{}:dlq:{}",
        entry.envelope.idempotency_key,
        entry.occurred_at.unix_nanos()
    );
    if record.msg_id != msg_id {
        wrong.push(format!("Nats-Msg-Id {:?}", record.msg_id));
    }
    if wrong.is_empty() {
        Ok(entry)
    } else {
        fail(
            format!(
                "on {subject}: kind {kind}, body {body}, Nats-Msg-Id <key>:dlq:<occurred_at in ns> ({msg_id})"
            ),
            wrong.join("; "),
        )
    }
}

pub(super) async fn dlq_action_failed(ctx: &mut Ctx) -> Result<(), Failure> {
    ctx.deploy(flaky_flow()).await?;
    let input = json!({"failures": 9});
    let run = ctx.trigger("conform-flaky", &input).await?;
    let record = ctx
        .dlq(
            DlqFilter::run(&run.0).with_kind("action_failed"),
            "an action_failed DLQ entry for the run",
        )
        .await?;
    let entry = check_entry(
        &record,
        &format!("triggers.v2.dlq.{SERVICE}.flaky"),
        "action_failed",
        &input,
    )?;
    if entry.envelope.retry_count != 2 {
        return fail(
            "envelope.retry_count 2 (the third attempt's)",
            entry.envelope.retry_count.to_string(),
        );
    }
    ctx.settled(&run).await?;
    expect_statuses(
        ctx,
        &run,
        "flaky",
        &[status::RETRYING, status::RETRYING, status::FAILED],
    )
}

pub(super) async fn action_dlq(
    ctx: &mut Ctx,
    flow: &str,
    name: &str,
    input: Value,
    kind: &str,
) -> Result<(), Failure> {
    ctx.deploy(line(flow, vec![cin("in"), action(name, SERVICE, name)]))
        .await?;
    let run = ctx.trigger(flow, &input).await?;
    let record = ctx
        .dlq(
            DlqFilter::run(&run.0).with_kind(kind),
            &format!("a DLQ entry of kind {kind} for the run"),
        )
        .await?;
    check_entry(
        &record,
        &format!("triggers.v2.dlq.{SERVICE}.{name}"),
        kind,
        &input,
    )?;
    ctx.settled(&run).await?;
    expect_statuses(ctx, &run, name, &[status::FAILED])
}

pub(super) async fn dlq_invalid_input(ctx: &mut Ctx) -> Result<(), Failure> {
    ctx.deploy(echo_flow()).await?;
    let run = ctx
        .lab
        .trigger_bytes(
            "conform-echo",
            b"\"text\"".to_vec(),
            TriggerOptions::default(),
        )
        .await
        .map_err(|e| Failure {
            expected: "a run of conform-echo to start".into(),
            arrived: e.to_string(),
        })?;
    let record = ctx
        .dlq(
            DlqFilter::run(&run.0).with_kind("invalid_input"),
            "an invalid_input DLQ entry for the run",
        )
        .await?;
    check_entry(
        &record,
        &format!("triggers.v2.dlq.{SERVICE}.echo"),
        "invalid_input",
        &json!("text"),
    )?;
    ctx.settled(&run).await?;
    expect_statuses(ctx, &run, "echo", &[status::FAILED])
}

/// Waits for a fallback DLQ entry of `kind` and checks its subject, kind and body.
pub(super) async fn fallback(
    ctx: &Ctx,
    kind: &str,
    body: &Value,
    run: Option<&str>,
) -> Result<triggers_sdk::wire::DlqEntry, Failure> {
    let subject = format!("triggers.v2.dlq.{SERVICE}.{kind}");
    let record = ctx
        .dlq(
            // The entry for the kit's own message: by its run where its envelope names one.
            match run {
                Some(run) => DlqFilter::run(run).with_kind(kind),
                None => DlqFilter::subject(subject.clone()).with_kind(kind),
            },
            &format!("a DLQ entry of kind {kind} on {subject}"),
        )
        .await?;
    if record.subject != subject {
        return fail(
            format!("the entry on {subject}"),
            format!("on {}", record.subject),
        );
    }
    let Some(entry) = record.entry.clone() else {
        return fail("a DLQ entry that decodes", record.payload);
    };
    let got: Value = serde_json::from_str(&entry.body.to_string()).unwrap_or(Value::Null);
    if &got != body {
        return fail(format!("body {body}"), format!("body {}", entry.body));
    }
    Ok(entry)
}

pub(super) async fn dlq_missing_envelope(ctx: &mut Ctx) -> Result<(), Failure> {
    let body = json!({"forged": "missing_envelope"});
    // A Nats-Msg-Id is no envelope header: it only marks the message as the kit's.
    let mut headers = Headers::new();
    headers.insert(names::NATS_MSG_ID, "conform-forged-missing-envelope");
    ctx.forge(&headers, body.to_string().as_bytes()).await?;
    fallback(ctx, "missing_envelope", &body, None)
        .await
        .map(|_| ())
}

pub(super) async fn dlq_invalid_envelope(ctx: &mut Ctx) -> Result<(), Failure> {
    let version = ctx.deploy(echo_flow()).await?;
    let run = "conform-forged-invalid-envelope";
    let mut headers = forged_envelope(run, "conform-echo", version, "in").to_headers();
    headers.insert(names::FLOW_VERSION, "x");
    let body = json!({"forged": "invalid_envelope"});
    ctx.forge(&headers, body.to_string().as_bytes()).await?;
    let entry = fallback(ctx, "invalid_envelope", &body, Some(run)).await?;
    if entry.envelope.flow_run_id != run {
        return fail(
            format!("envelope.flow_run_id {run:?} (the headers that could be read)"),
            format!("{:?}", entry.envelope.flow_run_id),
        );
    }
    Ok(())
}

pub(super) async fn dlq_invalid_json(ctx: &mut Ctx) -> Result<(), Failure> {
    let version = ctx.deploy(echo_flow()).await?;
    let envelope = forged_envelope("conform-forged-invalid-json", "conform-echo", version, "in");
    ctx.forge(&envelope.to_headers(), b"not json").await?;
    let entry = fallback(
        ctx,
        "invalid_json",
        &json!("not json"),
        Some(&envelope.flow_run_id),
    )
    .await?;
    if entry.envelope.flow_run_id != envelope.flow_run_id {
        return fail(
            "the message's envelope in the entry",
            format!("flow_run_id {:?}", entry.envelope.flow_run_id),
        );
    }
    Ok(())
}

pub(super) async fn dlq_unknown_flow(ctx: &mut Ctx) -> Result<(), Failure> {
    let envelope = forged_envelope("conform-forged-unknown-flow", "conform-nope", 1, "in");
    let body = json!({"forged": "unknown_flow"});
    ctx.forge(&envelope.to_headers(), body.to_string().as_bytes())
        .await?;
    fallback(ctx, "unknown_flow", &body, Some(&envelope.flow_run_id))
        .await
        .map(|_| ())
}

pub(super) async fn dlq_unknown_node(ctx: &mut Ctx) -> Result<(), Failure> {
    let version = ctx.deploy(echo_flow()).await?;
    let envelope = forged_envelope(
        "conform-forged-unknown-node",
        "conform-echo",
        version,
        "ghost",
    );
    let body = json!({"forged": "unknown_node"});
    ctx.forge(&envelope.to_headers(), body.to_string().as_bytes())
        .await?;
    fallback(ctx, "unknown_node", &body, Some(&envelope.flow_run_id))
        .await
        .map(|_| ())
}
