//! Starting runs (`trigger`) and moving the virtual clock (`advance`).

use std::time::Duration;

use serde_json::Value;
use triggers_sdk::flow::{self, IdKind, NodeType};
use triggers_sdk::transport;
use triggers_sdk::wire::durable_timer::{self, RootContext, TimerContext};
use triggers_sdk::wire::header::names;
use triggers_sdk::wire::{GoTime, Headers, idempotency, json};

use crate::clock::ClockMode;
use crate::emulator::{Emulator, FiredTimer, RunId, TriggerOptions};
use crate::error::EmulatorError;
use crate::recorder::{Body, RecordKind, Run};
use crate::shared::new_envelope;
use crate::state::Refused;

impl Emulator {
    // ---- runs ------------------------------------------------------------------------------

    /// Starts a run of a deployed flow with a JSON payload (written as Go writes JSON).
    ///
    /// # Errors
    /// An unknown flow, a flow without an entry point, or a publish that JetStream did not ack.
    pub async fn trigger(&self, flow_id: &str, payload: &Value) -> Result<RunId, EmulatorError> {
        let bytes = json::to_vec(&json::GoAny(payload)).map_err(EmulatorError::Encode)?;
        self.trigger_bytes(flow_id, bytes, TriggerOptions::default())
            .await
    }

    /// Starts a run with exact payload bytes (which need not be JSON: a poison message).
    ///
    /// The entry `service-in` is done at once (the engine's `triggered` step); what follows it is
    /// reached: the entry's service gets the payload (unless only timers follow the entry), and
    /// timers right after the entry are armed.
    ///
    /// # Errors
    /// As [`Emulator::trigger`], and a run id that is not usable or exists already.
    pub async fn trigger_bytes(
        &self,
        flow_id: &str,
        payload: Vec<u8>,
        options: TriggerOptions,
    ) -> Result<RunId, EmulatorError> {
        let run_id = match &options.run_id {
            Some(id) => {
                flow::check_id(IdKind::Run, id).map_err(EmulatorError::InvalidRunId)?;
                id.clone()
            }
            None => format!("run-{}", transport::random_hex(8)),
        };
        let payload = Body::from(payload);
        let (delivery, headers, entry_id) =
            self.start_locked(&run_id, flow_id, &payload, &options)?;
        if let Some(target) = delivery
            && let Err(e) = self
                .shared
                .publish_inbound(&target, headers, payload.to_vec())
                .await
        {
            // Taken back whole, records and all: the run never started.
            self.lock().remove_run(&run_id);
            tracing::debug!(run = %run_id, entry = %entry_id, "trigger not delivered: {e}");
            return Err(e);
        }
        self.shared.notify();
        Ok(RunId(run_id))
    }

    /// The run started under the lock: the run kept, its trigger recorded, the timers after its
    /// entry armed. Returns where its delivery goes (none when only timers follow the entry),
    /// the delivery's headers and the entry node.
    fn start_locked(
        &self,
        run_id: &str,
        flow_id: &str,
        payload: &Body,
        options: &TriggerOptions,
    ) -> Result<(Option<String>, Headers, String), EmulatorError> {
        let mut state = self.lock();
        if state.runs.contains(run_id) {
            return Err(EmulatorError::RunExists(run_id.to_owned()));
        }
        // Runs followed from events have a bound of their own: they never refuse a trigger.
        let open = state.runs.open_started();
        if open >= self.config().max_open_runs {
            return Err(EmulatorError::TooManyOpenRuns { open });
        }
        let flow = state
            .registry
            .flow(flow_id)
            .cloned()
            .ok_or_else(|| EmulatorError::UnknownFlow(flow_id.to_owned()))?;
        let entry = match &options.entry {
            Some(id) => flow
                .node(id)
                .filter(|n| n.node_type == NodeType::ServiceIn)
                .cloned(),
            None => flow.entry_points().next().cloned(),
        }
        .ok_or_else(|| EmulatorError::NoEntry {
            flow: flow_id.to_owned(),
            entry: options.entry.clone(),
        })?;
        let now = state.clock.now();
        let trace_id = transport::random_hex(16);
        let envelope = new_envelope(
            &flow,
            run_id,
            &entry.id,
            &trace_id,
            idempotency::root(run_id, &entry.id),
            now,
        );
        let mut headers = envelope.to_headers();
        headers.insert(names::NATS_MSG_ID, envelope.nats_msg_id());
        if flow.has_timer() {
            let root = TimerContext::Root(RootContext::new(&flow.id, flow.version, run_id));
            durable_timer::write_triplet(&mut headers, &root, payload);
        }
        // Run and timeline times are wall-clock, like the services' own steps; the
        // emulator's clock (virtual or not) rules envelopes and timers.
        let (run, to_arm) = Run::start(
            run_id.to_owned(),
            flow.clone(),
            &entry.id,
            trace_id,
            GoTime::now(),
            payload.clone(),
        );
        // Only timers after the entry: the engine's to arm; the service has nothing to run.
        let delivery = !Run::service_successors(&flow, &entry.id).is_empty();
        if delivery {
            state.own.remember(&envelope.idempotency_key);
        }
        match state.start_run(run, self.config().max_open_runs) {
            Ok(()) => {}
            Err(Refused::Exists) => return Err(EmulatorError::RunExists(run_id.to_owned())),
            Err(Refused::Full(open)) => return Err(EmulatorError::TooManyOpenRuns { open }),
        }
        let seq = self.shared.push_locked(
            &mut state,
            if delivery { &entry.inbound } else { "" },
            &headers,
            payload.clone(),
            RecordKind::Trigger {
                run_id: run_id.to_owned(),
                flow_id: flow_id.to_owned(),
                entry: entry.id.clone(),
            },
        );
        if let Some(run) = state.runs.get_mut(run_id) {
            run.engine_step(
                seq,
                &entry.id,
                NodeType::ServiceIn.as_str(),
                "triggered",
                GoTime::now(),
            );
        }
        for timer in to_arm {
            crate::timers::arm(&self.shared, &mut state, run_id, &timer, now);
        }
        self.shared.refresh_run(&mut state, run_id);
        Ok((
            delivery.then(|| entry.inbound.clone()),
            headers,
            entry.id.clone(),
        ))
    }

    /// Moves the virtual clock forward and fires every timer that falls due, in order.
    ///
    /// # Errors
    /// On the real clock, or when a delivery cannot be published.
    pub async fn advance(&self, by: Duration) -> Result<Vec<FiredTimer>, EmulatorError> {
        let target = {
            let state = self.lock();
            if state.clock.mode() == ClockMode::Real {
                return Err(EmulatorError::RealClock);
            }
            state.clock.now().saturating_add(by)
        };
        crate::timers::advance_to(self, target).await
    }

    /// The emulator's current time.
    #[must_use]
    pub fn now(&self) -> GoTime {
        self.lock().clock.now()
    }
}
