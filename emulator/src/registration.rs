//! Registration (`triggers.v2.manifest.register`) and manifest fetches: validation, the
//! protocol-major check, the hash policy, the service's inbound stream, and the reply.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use futures::StreamExt;
use serde_json::Value;
use triggers_sdk::transport;
use triggers_sdk::wire::manifest::DURABLE_TIMER_V1;
use triggers_sdk::wire::subject;
use triggers_sdk::wire::{FlowEnvelope, GoTime, Manifest, RegisterReply, json};

use crate::emulator::{Emulator, HashMismatchPolicy, Shared};
use crate::kept_manifest::KeptManifest;
use crate::recorder::{Body, RecordKind};
use crate::release;

/// A flow to broadcast after a register reply: its subject, envelope and bytes.
type Later = (String, FlowEnvelope, Vec<u8>);

/// A registration refused: the reply's error, and the service and hash the manifest named (empty
/// when it did not decode).
struct Refusal {
    error: String,
    service: String,
    hash: String,
}

/// Splits the flows of a register reply into those its JSON holds within `max` bytes (the
/// server's `max_payload`: a larger reply is never delivered, and the service would take the
/// orchestrator for absent) and the rest, each with its bytes for a broadcast of its own.
/// A release never holds a flow whose broadcast exceeds `max`, so each of the rest fits alone.
fn fit_reply(
    flows: Vec<FlowEnvelope>,
    max: usize,
) -> (Vec<FlowEnvelope>, Vec<(FlowEnvelope, Vec<u8>)>) {
    // `{"flows":[` and `]}`; the error is empty and left out.
    let mut size = br#"{"flows":[]}"#.len();
    let mut fitted = Vec::new();
    let mut rest = Vec::new();
    for flow in flows {
        let bytes = flow.to_json().unwrap_or_default();
        let needs = bytes.len() + usize::from(!fitted.is_empty());
        if size + needs <= max {
            size += needs;
            fitted.push(flow);
        } else {
            rest.push((flow, bytes));
        }
    }
    (fitted, rest)
}

impl Emulator {
    pub(crate) async fn serve_register(emulator: Emulator, mut sub: async_nats::Subscriber) {
        let shared = emulator.shared.clone();
        while let Some(msg) = sub.next().await {
            let (reply, later) = shared.register(&msg).await;
            if reply.error.is_empty() {
                emulator.deploy_held_for(&msg).await;
            }
            if let Some(reply_to) = msg.reply {
                let bytes = reply.to_json().unwrap_or_default();
                if let Err(e) = shared.client.publish(reply_to, bytes.into()).await {
                    tracing::warn!("cannot reply to a registration: {e}");
                }
            }
            // The flows the reply had no room for, each as a broadcast to the service (the
            // SDK listens there before it registers): after the reply, so they update it.
            for (subject, envelope, bytes) in later {
                if let Err(e) = shared.broadcast(subject, &envelope, bytes).await {
                    tracing::warn!(
                        flow = envelope.id,
                        "cannot broadcast a flow after a registration: {e}"
                    );
                }
            }
        }
    }

    /// The flow held for the service registering with `msg` ([`Emulator::deploy_at_registration`]),
    /// deployed now: its broadcast goes out before the reply.
    async fn deploy_held_for(&self, msg: &async_nats::Message) {
        let service = serde_json::from_slice::<Value>(&msg.payload)
            .ok()
            .and_then(|v| v.get("service").and_then(Value::as_str).map(str::to_owned));
        let Some(flow) = service.and_then(|s| self.lock().registry.take_held(&s)) else {
            return;
        };
        let id = flow.id.clone();
        if let Err(e) = self.deploy(flow).await {
            tracing::warn!(
                flow = id,
                "the flow held for a registration was not deployed: {e}"
            );
        }
    }

    pub(crate) async fn serve_fetch(shared: Arc<Shared>, mut sub: async_nats::Subscriber) {
        while let Some(msg) = sub.next().await {
            let asked = serde_json::from_slice::<Value>(&msg.payload)
                .ok()
                .and_then(|v| v.get("service").and_then(Value::as_str).map(str::to_owned))
                .unwrap_or_else(|| String::from_utf8_lossy(&msg.payload).trim().to_owned());
            let manifest = shared
                .lock()
                .registry
                .service(&asked)
                .map(|s| s.manifest.clone());
            let bytes = match &manifest {
                Some(m) => m.bytes().to_vec(),
                None => json::to_vec(&RegisterReply {
                    // Clipped: a request of any size gets a reply NATS can carry.
                    error: format!(
                        "unknown service {:?}: it has not registered (send {{\"service\": \"<name>\"}})",
                        crate::conformance::clip(&asked, 200)
                    ),
                    flows: vec![],
                })
                .unwrap_or_default(),
            };
            shared.push(
                &msg.subject,
                &transport::from_nats(msg.headers.as_ref()),
                Body::from(msg.payload.clone()),
                RecordKind::Fetch {
                    service: asked,
                    found: manifest.is_some(),
                },
            );
            if let Some(reply_to) = msg.reply
                && let Err(e) = shared.client.publish(reply_to, bytes.into()).await
            {
                tracing::warn!("cannot answer a manifest.fetch: {e}");
            }
        }
    }
}

impl Shared {
    /// Handles one registration request; returns the reply, and the flows to broadcast to the
    /// service after it (those the reply had no room for within the server's `max_payload`).
    async fn register(self: &Arc<Self>, msg: &async_nats::Message) -> (RegisterReply, Vec<Later>) {
        let headers = transport::from_nats(msg.headers.as_ref());
        let refuse = |refusal: Refusal| {
            self.push(
                &msg.subject,
                &headers,
                Body::from(msg.payload.clone()),
                RecordKind::Registration {
                    service: refusal.service,
                    accepted: false,
                    error: Some(refusal.error.clone()),
                    manifest_hash: refusal.hash,
                },
            );
            self.notify();
            let reply = RegisterReply {
                error: refusal.error,
                flows: vec![],
            };
            (reply, Vec::new())
        };
        let (manifest, sources) = match self.admit(&msg.payload) {
            Ok(admitted) => admitted,
            Err(refusal) => return refuse(refusal),
        };
        let service = manifest.service.clone();
        let hash = manifest.manifest_hash.clone();
        if !sources.is_empty()
            && let Err(error) = self.ensure_stream(&service, &sources).await
        {
            return refuse(Refusal {
                error,
                service,
                hash,
            });
        }
        // Kept once, as its bytes and an outline without schemas: the service table and the
        // checker's registry share it.
        let manifest = KeptManifest::received(manifest, &msg.payload);
        self.take_in(&service, &manifest, &sources).await;
        self.push(
            &msg.subject,
            &headers,
            Body::from(msg.payload.clone()),
            RecordKind::Registration {
                service: service.clone(),
                accepted: true,
                error: None,
                manifest_hash: hash,
            },
        );
        let (flows, later) = self.flows_for(&msg.subject, &headers, &service, &manifest);
        self.notify();
        let reply = RegisterReply {
            error: String::new(),
            flows,
        };
        (reply, later)
    }

    /// Whether a registration is taken, before anything is made for it: the manifest decodes,
    /// speaks protocol major 1, is valid, hashes as it says (or the policy lets it pass), its
    /// NATS sources fit one stream request, and there is room for a new service. Returns the
    /// manifest and its NATS sources.
    fn admit(&self, payload: &[u8]) -> Result<(Manifest, Vec<String>), Refusal> {
        let manifest = Manifest::from_json(payload).map_err(|e| Refusal {
            error: format!("invalid manifest: {e}"),
            service: String::new(),
            hash: String::new(),
        })?;
        let refusal = |error: String| Refusal {
            error,
            service: manifest.service.clone(),
            hash: manifest.manifest_hash.clone(),
        };
        match manifest.protocol_major() {
            Some(1) => {}
            Some(major) => {
                return Err(refusal(format!(
                    "protocol major {major} is not supported (protocol_version {:?}); this orchestrator speaks major 1",
                    manifest.protocol_version
                )));
            }
            None => {
                return Err(refusal(format!(
                    "protocol_version {:?} is not MAJOR.MINOR.PATCH",
                    manifest.protocol_version
                )));
            }
        }
        // What Go's SDK can produce (a null schema, an empty service_version) is accepted: the
        // conformance checker reports it as a warning.
        let issues: Vec<String> = manifest
            .validate()
            .into_iter()
            .filter(|i| !i.lenient && i.path != "manifest_hash" && i.path != "protocol_version")
            .map(|i| i.to_string())
            .collect();
        if !issues.is_empty() {
            return Err(refusal(format!("invalid manifest: {}", issues.join("; "))));
        }
        let computed = manifest.compute_hash().unwrap_or_default();
        if manifest.manifest_hash != computed
            && self.config.hash_mismatch == HashMismatchPolicy::Reject
        {
            return Err(refusal(format!(
                "manifest_hash mismatch: the manifest says {:?}, its contents hash to {computed}",
                manifest.manifest_hash
            )));
        }
        let service = &manifest.service;
        let sources: Vec<String> = release::nats_sources(&manifest)
            .into_iter()
            .map(str::to_owned)
            .collect();
        // The sources' own shape and the reserved subjects are checked with the manifest
        // (`subject::check_source`); what is left is their sum: the stream's config carries
        // every one in one request, which must fit the server's max_payload.
        let config_bytes: usize = sources.iter().map(|s| s.len() + 3).sum::<usize>() + 1024;
        let max_payload = self.client.server_info().max_payload;
        if config_bytes > max_payload {
            return Err(refusal(format!(
                "invalid manifest: service_sources: its {} NATS sources take {config_bytes} \
                 bytes in the inbound stream's configuration, more than the server's \
                 max_payload ({max_payload} bytes) carries in one request; declare fewer \
                 sources (a wildcard like \"{service}.>\" captures many subjects)",
                sources.len()
            )));
        }
        // Registrations are handled one at a time, so the count cannot move under this check.
        let (held, known) = {
            let state = self.lock();
            (
                state.registry.services().len(),
                state.registry.service(service).is_some(),
            )
        };
        if held >= self.config.max_services && !known {
            return Err(refusal(format!(
                "the emulator holds {held} services, the most it takes \
                 (EmulatorConfig::max_services, `up --max-services`): a service that registers \
                 under a new name at every start (a process id or a random suffix in its name) \
                 fills it; give the service a fixed name, or raise the bound"
            )));
        }
        Ok((manifest, sources))
    }

    /// Takes an admitted service into the registry, and observes (and taps) the inbound
    /// subjects nobody owned before.
    async fn take_in(self: &Arc<Self>, service: &str, manifest: &KeptManifest, sources: &[String]) {
        // Subjects under triggers.v2. reach the catch-all subscription already.
        let new_subjects: Vec<String> = self
            .lock()
            .registry
            .register(service, manifest, sources, GoTime::now())
            .into_iter()
            .filter(|s| !s.starts_with(subject::PREFIX))
            .collect();
        for s in new_subjects {
            if let Some(tap) = &self.tap {
                tap.subscribe(&s);
            }
            match self.client.subscribe(s.clone()).await {
                Ok(sub) => {
                    let handle = tokio::spawn(Emulator::observe_inbound(self.clone(), sub));
                    self.tasks
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(handle);
                }
                Err(e) => tracing::warn!("cannot observe inbound subject {s}: {e}"),
            }
        }
    }

    /// The deployed flows a registering service takes part in: those its register reply holds,
    /// and those to broadcast to it after the reply (no room within the server's
    /// `max_payload`). Durable Timer flows are withheld from a service without
    /// `durable_timer.v1`; what is withheld or sent later is recorded, with why.
    fn flows_for(
        &self,
        register_subject: &str,
        headers: &triggers_sdk::wire::Headers,
        service: &str,
        manifest: &KeptManifest,
    ) -> (Vec<FlowEnvelope>, Vec<Later>) {
        // The capability gate holds on this path too: a service that registers without
        // durable_timer.v1 gets no Durable Timer flow, whatever was deployed before.
        let gated = !manifest.has_capability(DURABLE_TIMER_V1);
        let (flows, withheld): (Vec<_>, Vec<_>) = {
            let state = self.lock();
            state
                .registry
                .flows()
                .values()
                .filter(|f| f.services().contains(service))
                .map(|f| (f.to_envelope(), gated && f.has_timer()))
                .partition(|(_, withhold)| !withhold)
        };
        let withheld: Vec<String> = withheld.into_iter().map(|(f, _)| f.id).collect();
        let withhold = |flows: Vec<String>, reason: String| {
            self.push(
                register_subject,
                headers,
                Body::default(),
                RecordKind::FlowsWithheld {
                    service: service.to_owned(),
                    flows,
                    reason,
                },
            );
        };
        let max_payload = self.client.server_info().max_payload;
        let (flows, later) = fit_reply(flows.into_iter().map(|(f, _)| f).collect(), max_payload);
        if !withheld.is_empty() {
            tracing::warn!(
                service,
                "Durable Timer flows {withheld:?} withheld from the register reply: the service does not declare {DURABLE_TIMER_V1}"
            );
            withhold(
                withheld,
                format!("Durable Timer flows, and the service does not declare {DURABLE_TIMER_V1}"),
            );
        }
        if later.is_empty() {
            return (flows, Vec::new());
        }
        let ids: Vec<String> = later.iter().map(|(f, _)| f.id.clone()).collect();
        tracing::warn!(
            service,
            "flows {ids:?} left out of the register reply (it would be larger than the server's max_payload); broadcast to the service after it"
        );
        withhold(
            ids,
            format!(
                "the register reply would be larger than the server's max_payload ({max_payload} bytes); each is broadcast to the service after the reply"
            ),
        );
        let subject = subject::flow_broadcast(service)
            .unwrap_or_else(|_| subject::FLOW_BROADCAST_ALL.to_owned());
        let later = later
            .into_iter()
            .map(|(envelope, bytes)| (subject.clone(), envelope, bytes))
            .collect();
        (flows, later)
    }

    /// Creates the service's inbound stream, or updates its subjects. A stream that already
    /// captures every source (a service started with `TRIGGERS_NATS_SOURCE_STREAM` names its own)
    /// is used as it is.
    async fn ensure_stream(&self, service: &str, sources: &[String]) -> Result<(), String> {
        let name = subject::stream_name(service, None).map_err(|e| e.to_string())?;
        let config = jetstream::stream::Config {
            name: name.clone(),
            subjects: sources.to_vec(),
            duplicate_window: Duration::from_secs(120).min(self.config.stream_max_age),
            max_age: self.config.stream_max_age,
            max_bytes: self.config.stream_max_bytes,
            // A delivery leaves the stream once handled (acked), so the stream holds only what
            // is waiting and max_bytes bounds that, not everything that passed through in
            // max_age. Full, it refuses a new message (its publisher is told) rather than let an
            // unhandled one go unseen.
            retention: jetstream::stream::RetentionPolicy::WorkQueue,
            discard: jetstream::stream::DiscardPolicy::New,
            num_replicas: self.config.stream_replicas.max(1),
            ..Default::default()
        };
        // A service registering for the first time, the usual case, gets its stream in one round
        // trip (creating a stream that exists with this very configuration changes nothing).
        // Anything else (the stream exists otherwise, another stream captures the subjects, the
        // storage asked for cannot be had) is settled below as before.
        if self.js.create_stream(config.clone()).await.is_ok() {
            return Ok(());
        }
        match self.js.get_stream(&name).await {
            Ok(mut stream) => {
                let current = stream
                    .info()
                    .await
                    .map_err(|e| format!("cannot read stream {name}: {e}"))?;
                let mut have = current.config.subjects.clone();
                let mut want = sources.to_vec();
                have.sort();
                want.sort();
                if have != want {
                    // Only the subjects change: the size it was given stays.
                    let config = jetstream::stream::Config {
                        subjects: sources.to_vec(),
                        ..current.config.clone()
                    };
                    self.js.update_stream(config).await.map_err(|e| {
                        format!("cannot update stream {name} to subjects {sources:?}: {e}")
                    })?;
                }
                Ok(())
            }
            Err(_) => {
                // Another service's sources are its own, whatever stream holds them.
                let taken = {
                    let state = self.lock();
                    sources.iter().find_map(|s| {
                        state
                            .registry
                            .owner_of(s)
                            .filter(|owner| *owner != service)
                            .map(|owner| (s.clone(), owner.clone()))
                    })
                };
                // ... and so are the emulator's own streams.
                let foreign = |stream: &str| {
                    stream == crate::DLQ_STREAM
                        || stream == crate::EVENTS_STREAM
                        || stream
                            .strip_prefix("triggers-sources-")
                            .is_some_and(|owner| owner != service)
                };
                if let Some(other) = self.stream_capturing(sources).await
                    && taken.is_none()
                    && !foreign(&other)
                {
                    tracing::info!(
                        service,
                        "the inbound subjects {sources:?} are captured by stream {other}; using it"
                    );
                    return Ok(());
                }
                transport::reserving(&format!("the inbound subjects of {service}"), config, |c| {
                    self.js.create_stream(c)
                })
                .await
                .map(|_| ())
                .map_err(|e| format!("cannot create stream {name} for subjects {sources:?}: {e}"))
            }
        }
    }

    /// The one stream that captures every subject of `sources`, if there is one.
    async fn stream_capturing(&self, sources: &[String]) -> Option<String> {
        let mut found: Option<String> = None;
        for s in sources {
            let name = self.js.stream_by_subject(s.as_str()).await.ok()?;
            match &found {
                Some(f) if *f != name => return None,
                _ => found = Some(name),
            }
        }
        found
    }
}
