//! A hostile client beside the soak's services (issue 35): what any client of the server may do
//! with no credentials, while the runs are checked as usual. Before the runs it registers what the
//! emulator must refuse (sources over the server's and the emulator's own subjects, names and
//! sources over the bounds that keep the emulator's requests within the server's limits); with
//! each batch it publishes completion events for made-up runs in volume, each saying `retrying`
//! (so each would hold a followed run open), past `max_followed_runs`. Neither may cost the soak a
//! run: a trigger refused, or a run lost, fails it as usual.

use std::time::Duration;

use serde_json::{Value, json};
use triggers_emulator::Harness;
use triggers_sdk::wire::{CompletionEvent, GoTime, Manifest, RegisterReply, subject};

use super::SoakReport;

/// The made-up flow the fake events name.
const FAKE_FLOW: &str = "soak-fake";
/// How the made-up runs' ids begin.
pub(super) const FAKE_RUN_PREFIX: &str = "fake-";

/// Registrations the emulator must refuse, each made from `k0`'s manifest: one problem per one
/// accepted (or not answered).
pub(super) async fn refused_registrations(
    lab: &Harness,
    client: &async_nats::Client,
    report: &mut SoakReport,
) {
    let Some(base) = lab
        .services()
        .get("k0")
        .and_then(|s| serde_json::to_value(&s.manifest).ok())
    else {
        report
            .problems
            .push("hostile: k0 is not registered: nothing to copy".into());
        return;
    };
    let long = |c: &str| c.repeat(4_100);
    let attacks: [(&str, String, Option<String>); 6] = [
        (
            "a source over the KV API",
            "evil-kv".into(),
            Some("$KV.>".into()),
        ),
        (
            "a source over the emulator's inbox",
            "evil-inbox".into(),
            Some("_TRIGGERS_LAB_INBOX.>".into()),
        ),
        (
            "a source over the control API",
            "evil-control".into(),
            Some("triggerslab.>".into()),
        ),
        (
            "a source of everything",
            "evil-all".into(),
            Some(">".into()),
        ),
        ("a service name of 4 100 bytes", long("s"), None),
        (
            "a source of 4 100 bytes",
            "evil-long".into(),
            Some(format!("evil.{}", long("l"))),
        ),
    ];
    for (what, service, source) in attacks {
        let mut m = base.clone();
        m["service"] = json!(service);
        if let Some(source) = source
            && let Some(s) = m["service_sources"].get_mut(0)
        {
            s["default"] = Value::String(source);
        }
        let bytes = match serde_json::from_value::<Manifest>(m) {
            Ok(mut manifest) => manifest.seal().ok().and_then(|()| manifest.to_json().ok()),
            Err(_) => None,
        };
        let Some(bytes) = bytes else {
            report
                .problems
                .push(format!("hostile: {what}: the manifest cannot be written"));
            continue;
        };
        let reply = tokio::time::timeout(
            Duration::from_secs(20),
            client.request(subject::MANIFEST_REGISTER, bytes.into()),
        )
        .await;
        match reply.map(|r| r.map(|m| RegisterReply::from_json(&m.payload))) {
            Ok(Ok(Ok(reply))) if !reply.error.is_empty() => report.refused_registrations += 1,
            Ok(Ok(Ok(_))) => report
                .problems
                .push(format!("hostile: {what}: the registration was accepted")),
            Ok(Ok(Err(e))) => report.problems.push(format!(
                "hostile: {what}: the reply is not a RegisterReply: {e}"
            )),
            Ok(Err(e)) => report
                .problems
                .push(format!("hostile: {what}: the request failed: {e}")),
            Err(_) => report
                .problems
                .push(format!("hostile: {what}: no reply within 20 s")),
        }
    }
}

/// Publishes `count` completion events for made-up runs of batch `batch`, each `retrying`.
pub(super) async fn fake_events(
    client: &async_nats::Client,
    batch: usize,
    count: usize,
    report: &mut SoakReport,
) {
    let Ok(subject) = subject::flow_events(FAKE_FLOW) else {
        return;
    };
    for i in 0..count {
        let now = GoTime::now();
        let event = CompletionEvent {
            flow_run_id: format!("{FAKE_RUN_PREFIX}{batch}-{i}"),
            flow_id: FAKE_FLOW.into(),
            flow_version: 1,
            node_id: "a".into(),
            node_type: "action".into(),
            service: "k0".into(),
            started_at: now,
            finished_at: now,
            status: "retrying".into(),
            error: "made up".into(),
            // Never all zeros (not a trace id).
            trace_id: format!("{:032x}", ((batch as u128 + 1) << 64) | i as u128),
        };
        let Ok(bytes) = event.to_json() else {
            continue;
        };
        // Best effort: a publish while the server is down is lost, as anyone's would be.
        if client.publish(subject.clone(), bytes.into()).await.is_ok() {
            report.fake_events += 1;
        }
    }
    let _ = client.flush().await;
}
