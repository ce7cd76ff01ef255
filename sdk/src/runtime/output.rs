//! Output nodes: deliver the payload out of the flow, to a NATS subject or an HTTP endpoint, with
//! the canonical envelope headers (and never the Durable Timer triplet).

use serde_json::Value;

use crate::flow::Node;
use crate::runtime::dispatch::Payload;
use crate::runtime::outcome::Failure;
use crate::runtime::outcome::Target;
use crate::runtime::service::Runtime;
use crate::wire::header::names;
use crate::wire::{Envelope, idempotency, subject};

impl Runtime {
    pub(crate) async fn deliver_output(
        &self,
        node: &Node,
        payload: &Payload,
        envelope: &Envelope,
        trail: &[&str],
    ) -> Result<(), Failure> {
        let transport = node
            .config
            .get("transport")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let target = node
            .config
            .get("target")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let out = Envelope {
            source_node_id: node.id.clone(),
            idempotency_key: idempotency::output(
                &envelope.flow_run_id,
                &envelope.idempotency_key,
                trail,
                &node.id,
            ),
            ..envelope.clone()
        };
        let mut headers = out.to_headers();
        if super::breaks::on(super::breaks::ProtocolBreak::TimerTripletOnOutputs) {
            // As if the timer delivery's triplet were forwarded (any values do: it must not be
            // there at all).
            for name in names::DURABLE_TIMER_TRIPLET {
                headers.insert(name, envelope.flow_run_id.clone());
            }
        }
        match transport {
            "nats" => {
                // Release refuses a locked target; a forged broadcast must not get past us either.
                subject::check_output_target(target)
                    .map_err(|e| Failure::node(format!("output to NATS: {e}")))?;
                let mut headers = headers;
                headers.insert(names::NATS_MSG_ID, out.nats_msg_id());
                self.publish(target, &headers, payload.bytes().to_vec(), Target::Auto)
                    .await
                    .map_err(|e| Failure::node(format!("output to NATS {target}: {e}")))
            }
            "http" => {
                let mut request = self
                    .http()
                    .map_err(|e| Failure::node(format!("output to HTTP {target}: {e}")))?
                    .post(target)
                    .header("Content-Type", "application/json")
                    .body(payload.bytes().to_vec());
                for (name, value) in headers.iter() {
                    request = request.header(name, value);
                }
                let response = request
                    .send()
                    .await
                    .map_err(|e| Failure::node(format!("output to HTTP {target}: {e}")))?;
                if response.status().is_success() {
                    Ok(())
                } else {
                    Err(Failure::node(format!(
                        "output to HTTP {target}: the endpoint answered {}",
                        response.status()
                    )))
                }
            }
            other => Err(Failure::node(format!(
                "output transport {other:?} is neither nats nor http"
            ))),
        }
    }
}
