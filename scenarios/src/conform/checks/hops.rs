//! The checks of a service's place in a flow between others: hops out and in, and its durable
//! timer nodes (fired, and refused at release).

use super::*;

pub(super) async fn hop_out(ctx: &mut Ctx) -> Result<(), Failure> {
    ctx.deploy(line(
        "conform-hop-out",
        vec![
            cin("in"),
            action("echo", SERVICE, "echo"),
            pin("pin"),
            action("pecho", PEER, "echo"),
        ],
    ))
    .await?;
    let run = ctx.trigger("conform-hop-out", &json!({"x": 1})).await?;
    let settled = ctx.succeeded(&run).await?;
    let (records, _) = ctx.lab.records();
    let hop = records.iter().find(|r| {
        matches!(&r.kind, RecordKind::Hop { run_id, source_node_id, from_emulator: false }
            if run_id == &run.0 && source_node_id == "echo")
    });
    let Some(hop) = hop else {
        return fail("a hop from echo on peer.inbound", "none recorded");
    };
    let headers: Headers = hop
        .headers
        .iter()
        .map(|(n, v)| (n.clone(), v.clone()))
        .collect();
    let envelope = Envelope::from_headers(&headers).map_err(|e| Failure {
        expected: "the hop's envelope".into(),
        arrived: e.to_string(),
    })?;
    let root = idempotency::root(&run.0, "in");
    if hop.subject != "peer.inbound"
        || envelope.trace_id != settled.trace_id
        || envelope.idempotency_key == root
        || headers.get(names::NATS_MSG_ID) != Some(envelope.idempotency_key.as_str())
    {
        return fail(
            format!(
                "on peer.inbound, trace_id {}, a key of its own (not {root}) also as Nats-Msg-Id",
                settled.trace_id
            ),
            format!(
                "on {}, trace_id {}, key {:?}, Nats-Msg-Id {:?}",
                hop.subject,
                envelope.trace_id,
                envelope.idempotency_key,
                headers.get(names::NATS_MSG_ID)
            ),
        );
    }
    expect_statuses(ctx, &run, "pecho", &[status::SUCCEEDED])
}

pub(super) async fn hop_in(ctx: &mut Ctx) -> Result<(), Failure> {
    ctx.deploy(line(
        "conform-hop-in",
        vec![
            pin("pentry"),
            action("pecho", PEER, "echo"),
            cin("cin"),
            action("echo", SERVICE, "echo"),
        ],
    ))
    .await?;
    let run = ctx.trigger("conform-hop-in", &json!({"y": 2})).await?;
    let settled = ctx.succeeded(&run).await?;
    let seq = |node: &str| {
        settled
            .timeline
            .iter()
            .find(|e| e.node_id == node && e.status == status::SUCCEEDED)
            .map(|e| e.seq)
    };
    match (seq("cin"), seq("echo")) {
        (Some(a), Some(b)) if a < b => Ok(()),
        (a, b) => fail(
            "cin (the hop's service-in) reported succeeded by conformance, before echo",
            format!("cin at record {a:?}, echo at record {b:?}"),
        ),
    }
}

pub(super) async fn timer(ctx: &mut Ctx) -> Result<(), Failure> {
    ctx.deploy(timer_flow()).await?;
    let run = ctx.trigger("conform-timer", &json!({"t": 1})).await?;
    super::hard::wait_on_timer(
        ctx,
        &run,
        "the timer armed after echo succeeded (the root delivery accepted)",
    )
    .await?;
    ctx.lab
        .advance(Duration::from_secs(3600))
        .await
        .map_err(|e| Failure {
            expected: "the timer's delivery to be published".into(),
            arrived: e.to_string(),
        })?;
    ctx.succeeded(&run).await?;
    expect_statuses(ctx, &run, "echo2", &[status::SUCCEEDED])
}

pub(super) async fn timer_rejected(ctx: &mut Ctx) -> Result<(), Failure> {
    let version = ctx.deploy(timer_flow()).await?;
    let run = "conform-forged-bad-triplet";
    let body = json!({"t": 2});
    let bytes = body.to_string().into_bytes();
    let mut headers = forged_envelope(run, "conform-timer", version, "in").to_headers();
    let context = TimerContext::Root(RootContext::new("conform-timer", version, run));
    durable_timer::write_triplet(&mut headers, &context, &bytes);
    headers.insert(
        names::DURABLE_TIMER_PAYLOAD_SHA256,
        durable_timer::payload_sha256(b"other bytes"),
    );
    ctx.forge(&headers, &bytes).await?;
    let ran = |ctx: &Ctx| {
        ctx.lab
            .completions()
            .into_iter()
            .filter(|e| e.flow_run_id == run && e.status == status::SUCCEEDED)
            .map(|e| e.node_id)
            .collect::<Vec<_>>()
    };
    let record = match ctx
        .dlq(
            DlqFilter::run(run).with_kind("durable_timer_rejected"),
            "a durable_timer_rejected DLQ entry",
        )
        .await
    {
        Ok(record) => record,
        Err(failure) => {
            let nodes = ran(ctx);
            if nodes.is_empty() {
                return Err(failure);
            }
            return fail(
                "a durable_timer_rejected DLQ entry, and no node run for the delivery",
                format!(
                    "{} ran on a delivery whose payload hash did not match \
                     (X-Triggers-Durable-Timer-Payload-SHA256 is not the body's SHA-256)",
                    nodes.join(", ")
                ),
            );
        }
    };
    if record.subject != format!("triggers.v2.dlq.{SERVICE}.echo") {
        return fail(
            format!("on triggers.v2.dlq.{SERVICE}.echo (the action it was for)"),
            record.subject,
        );
    }
    let nodes = ran(ctx);
    if !nodes.is_empty() {
        return fail(
            "no node run for the rejected delivery",
            format!(
                "{} ran on a delivery whose payload hash did not match",
                nodes.join(", ")
            ),
        );
    }
    Ok(())
}
