//! Releases: a flow checked against the registered services, stored with its next version and
//! broadcast to them.

use triggers_sdk::flow::Flow;
use triggers_sdk::wire::Headers;
use triggers_sdk::wire::subject;

use crate::emulator::{Deployment, Emulator};
use crate::error::EmulatorError;
use crate::recorder::{Body, RecordKind};
use crate::release::{self, ReleaseCode, ReleaseProblem};

impl Emulator {
    // ---- releases --------------------------------------------------------------------------

    /// Deploys `flow` when `service` next registers, accepted: after the register reply is made
    /// (so the reply lacks the flow) and before it is sent, so the flow's broadcast reaches the
    /// service before its reply, as a deploy made while a service registers may. A service
    /// that subscribes to the broadcasts only after the reply misses it (docs/protocol.md §2);
    /// the conformance kit's `broadcast_before_reply` is this. One flow per service: a second
    /// call replaces the first. A flow refused then is logged, not deployed.
    pub fn deploy_at_registration(&self, service: &str, flow: Flow) {
        self.lock().registry.hold_for(service, flow);
    }

    /// Checks a flow against the registered services without deploying it.
    ///
    /// # Errors
    /// Every problem found, each with its stable code.
    pub fn check_release(&self, flow: &Flow) -> Result<Flow, Vec<ReleaseProblem>> {
        let registry = self.lock().registry.view();
        release::check_release(flow, &registry.manifests)
    }

    /// Releases a flow: checks it, stores it (a redeploy of the same id gets the next version),
    /// and broadcasts it: on `triggers.v2.flow.broadcast.<service>` when one service is involved,
    /// on `triggers.v2.flow.broadcast.all` when several are.
    ///
    /// # Errors
    /// [`EmulatorError::Release`] with every problem, or a NATS error from the broadcast.
    pub async fn deploy(&self, flow: Flow) -> Result<Deployment, EmulatorError> {
        let mut resolved = match self.check_release(&flow) {
            Ok(resolved) => resolved,
            Err(problems) => return Err(self.refused(&flow.id, problems)),
        };
        let (subject, envelope, bytes) = {
            let mut state = self.lock();
            if let Some(previous) = state.registry.flow(&resolved.id) {
                let next = previous.version.checked_add(1);
                let next = next.ok_or_else(|| EmulatorError::no_next_version(previous))?;
                resolved.version = resolved.version.max(next);
            }
            let services = resolved.services();
            let subject = match services.iter().next() {
                Some(only) if services.len() == 1 => subject::flow_broadcast(only)
                    .unwrap_or_else(|_| subject::FLOW_BROADCAST_ALL.to_owned()),
                _ => subject::FLOW_BROADCAST_ALL.to_owned(),
            };
            let envelope = resolved.to_envelope();
            let bytes = envelope.to_json().map_err(EmulatorError::Encode)?;
            // A flow no message can carry would be held but reach no service: refused whole.
            let max = self.shared.client.server_info().max_payload;
            if bytes.len() > max {
                drop(state);
                let problems = vec![ReleaseProblem {
                    code: ReleaseCode::FlowTooLarge,
                    node: None,
                    service: None,
                    message: format!(
                        "its broadcast is {} bytes, more than the NATS server carries in one message ({max} bytes, its max_payload): no service could receive it; split the flow, or start the server with a larger max_payload",
                        bytes.len()
                    ),
                }];
                return Err(self.refused(&resolved.id, problems));
            }
            state.registry.deploy(resolved.clone());
            (subject, envelope, bytes)
        };
        self.shared.push(
            "",
            &Headers::new(),
            Body::default(),
            RecordKind::Deploy {
                flow_id: resolved.id.clone(),
                version: resolved.version,
                flow: Some(Box::new(resolved.clone())),
            },
        );
        self.shared
            .broadcast(subject.clone(), &envelope, bytes)
            .await?;
        self.shared.notify();
        Ok(Deployment {
            flow: resolved,
            broadcast_subject: subject,
        })
    }

    /// Records a refused deploy of `flow_id`; the error to return.
    fn refused(&self, flow_id: &str, problems: Vec<ReleaseProblem>) -> EmulatorError {
        self.shared.push(
            "",
            &Headers::new(),
            Body::default(),
            RecordKind::DeployRefused {
                flow_id: flow_id.to_owned(),
                problems: problems.iter().map(ToString::to_string).collect(),
            },
        );
        EmulatorError::Release(problems)
    }
}
