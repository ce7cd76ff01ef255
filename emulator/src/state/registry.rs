//! What is registered and deployed: the services with their manifests, the inbound subjects
//! they own, the flows (the latest version of each), and the flows held for a service's next
//! registration. The conformance checker reads a snapshot of the services' side
//! ([`RegistryView`]), swapped whole at each registration so a check runs outside the lock.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use triggers_sdk::flow::Flow;
use triggers_sdk::wire::{GoTime, Heartbeat};

use crate::kept_manifest::KeptManifest;
use crate::recorder::ServiceState;

/// What is registered, as the conformance checker needs it.
#[derive(Debug, Default)]
pub(crate) struct RegistryView {
    /// Each registered service's current manifest.
    pub(crate) manifests: crate::conformance::Manifests,
    /// Inbound NATS subject -> the service that owns it.
    pub(crate) inbound: BTreeMap<String, String>,
}

/// Replicas remembered per service (one per distinct `started_at`).
const MAX_REPLICAS: usize = 1000;

#[derive(Default)]
pub(crate) struct Registry {
    services: BTreeMap<String, ServiceState>,
    /// The checker's snapshot: always the manifests of `services` and the subjects they own.
    view: Arc<RegistryView>,
    /// Deployed flows, the latest version of each.
    flows: BTreeMap<String, Arc<Flow>>,
    /// Flows to deploy at a service's next registration, by service.
    at_registration: HashMap<String, Flow>,
    /// Services whose consumers were read, with the registration they were read at.
    consumers_checked: HashMap<String, u32>,
}

impl Registry {
    /// Registered services, by name.
    pub(crate) fn services(&self) -> &BTreeMap<String, ServiceState> {
        &self.services
    }

    pub(crate) fn service(&self, name: &str) -> Option<&ServiceState> {
        self.services.get(name)
    }

    /// The checker's snapshot of the registered services.
    pub(crate) fn view(&self) -> Arc<RegistryView> {
        self.view.clone()
    }

    /// The service whose inbound subject `subject` is.
    pub(crate) fn owner_of(&self, subject: &str) -> Option<&String> {
        self.view.inbound.get(subject)
    }

    /// Registers `service` (again) with `manifest`, owning the inbound subjects `sources`;
    /// returns those no service owned before.
    pub(crate) fn register(
        &mut self,
        service: &str,
        manifest: &KeptManifest,
        sources: &[String],
        now: GoTime,
    ) -> Vec<String> {
        let entry = self
            .services
            .entry(service.to_owned())
            .or_insert_with(|| ServiceState {
                manifest: manifest.clone(),
                registered_at: now,
                registrations: 0,
                last_heartbeat: None,
                last_seen: None,
                heartbeats: 0,
                replicas: BTreeMap::new(),
            });
        entry.manifest = manifest.clone();
        entry.registered_at = now;
        entry.registrations += 1;
        let fresh: Vec<String> = sources
            .iter()
            .filter(|s| !self.view.inbound.contains_key(*s))
            .cloned()
            .collect();
        // A new snapshot for the checker: the old one may be in use outside the lock.
        let mut view = RegistryView {
            manifests: self.view.manifests.clone(),
            inbound: self.view.inbound.clone(),
        };
        view.manifests.insert(service.to_owned(), manifest.clone());
        for s in sources {
            view.inbound.insert(s.clone(), service.to_owned());
        }
        self.view = Arc::new(view);
        fresh
    }

    /// A heartbeat of a registered service (one not registered is only recorded).
    pub(crate) fn heartbeat(&mut self, hb: &Heartbeat, now: GoTime) {
        let Some(s) = self.services.get_mut(&hb.service) else {
            return;
        };
        s.last_seen = Some(now);
        s.heartbeats += 1;
        let started = hb.started_at.to_string();
        if s.replicas.len() < MAX_REPLICAS || s.replicas.contains_key(&started) {
            s.replicas.insert(started, hb.now);
        }
        s.last_heartbeat = Some(hb.clone());
    }

    /// Whether the consumers of `service` are to be read now: once per registration.
    pub(crate) fn consumers_due(&mut self, service: &str) -> bool {
        let Some(registrations) = self.services.get(service).map(|s| s.registrations) else {
            return false;
        };
        if self.consumers_checked.get(service) == Some(&registrations) {
            return false;
        }
        self.consumers_checked
            .insert(service.to_owned(), registrations);
        true
    }

    /// Deployed flows, the latest version of each, by id.
    pub(crate) fn flows(&self) -> &BTreeMap<String, Arc<Flow>> {
        &self.flows
    }

    pub(crate) fn flow(&self, id: &str) -> Option<&Arc<Flow>> {
        self.flows.get(id)
    }

    /// Stores a released flow, replacing an earlier version.
    pub(crate) fn deploy(&mut self, flow: Flow) {
        self.flows.insert(flow.id.clone(), Arc::new(flow));
    }

    /// Holds `flow` for `service`'s next registration (replacing one held before).
    pub(crate) fn hold_for(&mut self, service: &str, flow: Flow) {
        self.at_registration.insert(service.to_owned(), flow);
    }

    /// The flow held for `service`'s registration, taken.
    pub(crate) fn take_held(&mut self, service: &str) -> Option<Flow> {
        self.at_registration.remove(service)
    }
}
