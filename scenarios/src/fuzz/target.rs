//! What a campaign drives: the in-process emulator, or a running `up` through its control API.

use std::collections::BTreeMap;
use std::time::Duration;

use triggers_emulator::conformance::Severity;
use triggers_emulator::control::ControlClient;
use triggers_emulator::recorder::{RecordKind, Run};
use triggers_emulator::{Emulator, TriggerOptions};
use triggers_sdk::flow::Flow;
use triggers_sdk::wire::Manifest;

/// What a fuzz campaign drives: an emulator in this process ([`Emulator`]), or a running
/// `triggers-lab up` through its control API ([`ControlClient`]). Errors are messages for the
/// user.
#[allow(async_fn_in_trait)] // the campaign runs on the caller's task: no `Send` bound needed
pub trait FuzzTarget {
    /// Every registered service's manifest, by name.
    async fn manifests(&self) -> Result<BTreeMap<String, Manifest>, String>;
    /// Deploys the campaign's flow.
    async fn deploy(&self, flow: Flow) -> Result<(), String>;
    /// Starts a run with exactly these JSON bytes; its id.
    async fn trigger(&self, flow_id: &str, payload: Vec<u8>) -> Result<String, String>;
    /// The run once settled; `None` when it has not within `timeout`.
    async fn settled(&self, run_id: &str, timeout: Duration) -> Option<Run>;
    /// The run's first DLQ entry (kind, error), waiting up to `timeout` for one.
    async fn dead_letter(&self, run_id: &str, timeout: Duration) -> Option<(String, String)>;
    /// The run in a line or two, for a failure's reason.
    async fn describe_run(&self, run_id: &str) -> String;
    /// Every conformance error so far (`rule: message`).
    async fn errors(&self) -> Vec<String>;
}

impl FuzzTarget for Emulator {
    async fn manifests(&self) -> Result<BTreeMap<String, Manifest>, String> {
        // The whole manifests: the payloads are made from their schemas, which the emulator
        // keeps as bytes only.
        self.services()
            .into_iter()
            .map(|(name, s)| Ok((name, s.manifest.full().map_err(|e| e.to_string())?)))
            .collect()
    }

    async fn deploy(&self, flow: Flow) -> Result<(), String> {
        Emulator::deploy(self, flow)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    async fn trigger(&self, flow_id: &str, payload: Vec<u8>) -> Result<String, String> {
        self.trigger_bytes(flow_id, payload, TriggerOptions::default())
            .await
            .map(|r| r.0)
            .map_err(|e| e.to_string())
    }

    async fn settled(&self, run_id: &str, timeout: Duration) -> Option<Run> {
        self.with_wait_timeout(timeout)
            .wait_run_settled(run_id)
            .await
            .ok()
    }

    async fn dead_letter(&self, run_id: &str, timeout: Duration) -> Option<(String, String)> {
        self.with_wait_timeout(timeout)
            .wait_dlq(triggers_emulator::DlqFilter::run(run_id))
            .await
            .ok()
            .and_then(|r| r.entry)
            .map(|e| (e.kind, e.err_msg))
    }

    async fn describe_run(&self, run_id: &str) -> String {
        Emulator::describe_run(self, run_id).replace('\n', "; ")
    }

    async fn errors(&self) -> Vec<String> {
        self.violations()
            .into_iter()
            .filter(|v| v.severity == Severity::Error)
            .map(|v| format!("{}: {}", v.rule, v.message))
            .collect()
    }
}

/// How often a running `up` is asked whether a run has settled.
const POLL: Duration = Duration::from_millis(50);

impl FuzzTarget for ControlClient {
    async fn manifests(&self) -> Result<BTreeMap<String, Manifest>, String> {
        self.services()
            .await
            .map_err(|e| e.to_string())?
            .into_iter()
            .map(|(name, s)| Ok((name, s.manifest.full().map_err(|e| e.to_string())?)))
            .collect()
    }

    async fn deploy(&self, flow: Flow) -> Result<(), String> {
        ControlClient::deploy(self, &flow)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    async fn trigger(&self, flow_id: &str, payload: Vec<u8>) -> Result<String, String> {
        let text = String::from_utf8(payload).map_err(|e| e.to_string())?;
        self.trigger_json(flow_id, &text)
            .await
            .map_err(|e| e.to_string())
    }

    async fn settled(&self, run_id: &str, timeout: Duration) -> Option<Run> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Ok(run) = self.run(run_id).await
                && run.status.is_settled()
            {
                return Some(run);
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(POLL).await;
        }
    }

    async fn dead_letter(&self, run_id: &str, timeout: Duration) -> Option<(String, String)> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Ok(run) = self.run(run_id).await
                && let Some(&seq) = run.dlq.first()
            {
                let records = self.records(seq.saturating_sub(1), 1).await.ok()?;
                return records.into_iter().find_map(|r| match r.kind {
                    RecordKind::Dlq { entry: Some(e), .. } if r.seq == seq => {
                        Some((e.kind, e.err_msg))
                    }
                    _ => None,
                });
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(POLL).await;
        }
    }

    async fn describe_run(&self, run_id: &str) -> String {
        match self.run(run_id).await {
            Ok(run) => {
                let steps: Vec<String> = run.timeline.iter().map(ToString::to_string).collect();
                format!(
                    "run {run_id} {:?}, pending {:?}; {}",
                    run.status,
                    run.pending.keys().collect::<Vec<_>>(),
                    steps.join("; ")
                )
            }
            Err(e) => format!("run {run_id}: {e}"),
        }
    }

    async fn errors(&self) -> Vec<String> {
        self.violations()
            .await
            .unwrap_or_default()
            .into_iter()
            .filter(|v| v.severity == Severity::Error)
            .map(|v| format!("{}: {}", v.rule, v.message))
            .collect()
    }
}
