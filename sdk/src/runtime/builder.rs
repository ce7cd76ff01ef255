//! Defining a service: its actions, sources, lookups and capabilities; the manifest it registers.

use std::collections::BTreeSet;

use crate::error::BuildError;
use crate::runtime::action::ActionDef;
use crate::runtime::config::RuntimeConfig;
use crate::runtime::limits;
use crate::runtime::lookup::LookupDef;
use crate::wire::manifest::{LOCAL_NODE_TYPES, PROTOCOL_VERSION, TRANSPORT_NATS};
use crate::wire::{Action, Lookup, Manifest, ServiceSource, subject};

/// Builds a [`Service`]: name and version, then actions, sources, lookups, capabilities.
#[derive(Debug, Clone)]
#[must_use]
pub struct ServiceBuilder {
    name: String,
    version: String,
    actions: Vec<ActionDef>,
    sources: Vec<ServiceSource>,
    lookups: Vec<LookupDef>,
    capabilities: Vec<String>,
    supports_nodes: Vec<String>,
    supports_rate_limit: bool,
    display_name: String,
    description: String,
    owner: String,
    tags: Vec<String>,
    config: RuntimeConfig,
}

/// A defined service, ready to start.
#[derive(Debug, Clone)]
pub struct Service {
    pub(crate) manifest: Manifest,
    pub(crate) actions: Vec<ActionDef>,
    pub(crate) lookups: Vec<LookupDef>,
    pub(crate) config: RuntimeConfig,
}

impl Service {
    /// Starts a definition.
    pub fn builder(name: impl Into<String>, version: impl Into<String>) -> ServiceBuilder {
        ServiceBuilder {
            name: name.into(),
            version: version.into(),
            actions: Vec::new(),
            sources: Vec::new(),
            lookups: Vec::new(),
            capabilities: Vec::new(),
            supports_nodes: LOCAL_NODE_TYPES.iter().map(|s| (*s).to_owned()).collect(),
            supports_rate_limit: false,
            display_name: String::new(),
            description: String::new(),
            owner: String::new(),
            tags: Vec::new(),
            config: RuntimeConfig::default(),
        }
    }

    /// The manifest the service registers (sealed: `manifest_hash` set).
    #[must_use]
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The service name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.manifest.service
    }
}

impl ServiceBuilder {
    /// Adds an action.
    pub fn action(mut self, action: ActionDef) -> Self {
        self.actions.push(action);
        self
    }

    /// Adds a NATS service source: messages published to `subject` reach the service.
    pub fn nats_source(mut self, name: impl Into<String>, subject: impl Into<String>) -> Self {
        self.sources.push(ServiceSource {
            name: name.into(),
            transport: TRANSPORT_NATS.into(),
            default: subject.into(),
        });
        self
    }

    /// Adds a runtime lookup.
    pub fn lookup(mut self, lookup: LookupDef) -> Self {
        self.lookups.push(lookup);
        self
    }

    /// Declares a runtime capability, such as `durable_timer.v1`. The manifest lists them sorted,
    /// each once.
    pub fn capability(mut self, capability: impl Into<String>) -> Self {
        self.capabilities.push(capability.into());
        self
    }

    /// The node types the SDK evaluates for this service (default: condition, lookup, mapping).
    pub fn supports_nodes<S: Into<String>>(mut self, nodes: impl IntoIterator<Item = S>) -> Self {
        self.supports_nodes = nodes.into_iter().map(Into::into).collect();
        self
    }

    /// Declares that the service honours rate-limit nodes.
    pub fn supports_rate_limit(mut self, yes: bool) -> Self {
        self.supports_rate_limit = yes;
        self
    }

    /// Catalog fields of the manifest (not hashed).
    pub fn catalog(mut self, display_name: &str, description: &str, owner: &str) -> Self {
        self.display_name = display_name.into();
        self.description = description.into();
        self.owner = owner.into();
        self
    }

    /// Catalog tags (not hashed).
    pub fn tags<S: Into<String>>(mut self, tags: impl IntoIterator<Item = S>) -> Self {
        self.tags = tags.into_iter().map(Into::into).collect();
        self
    }

    /// Runtime settings (URL, intervals, concurrency...); unset ones come from the environment.
    pub fn config(mut self, config: RuntimeConfig) -> Self {
        self.config = config;
        self
    }

    /// Checks the definition and builds the manifest.
    ///
    /// # Errors
    /// A [`BuildError`] naming what is wrong and how to fix it.
    pub fn build(self) -> Result<Service, BuildError> {
        subject::check_service(&self.name)?;
        if !self.sources.iter().any(|s| s.transport == TRANSPORT_NATS) {
            return Err(BuildError::NoNatsSource(self.name));
        }
        let mut seen = BTreeSet::new();
        let mut actions = Vec::with_capacity(self.actions.len());
        for a in &self.actions {
            subject::check_action(&a.name)?;
            limits::check_action(a.timeout, &a.retry).map_err(|error| BuildError::Action {
                action: a.name.clone(),
                error,
            })?;
            if !seen.insert(a.name.clone()) {
                return Err(BuildError::Duplicate {
                    what: "action",
                    name: a.name.clone(),
                });
            }
            let schema = |r: &Result<_, String>| {
                r.clone().map_err(|reason| BuildError::Schema {
                    action: a.name.clone(),
                    reason,
                })
            };
            let input_schema = schema(&a.input_schema)?;
            let result_schema = schema(&a.result_schema)?;
            let result_event = a
                .result_event
                .resolve(&self.name, &a.name, &result_schema)?
                .map(|ev| ev.to_map());
            actions.push(Action {
                name: a.name.clone(),
                display_name: a.display_name.clone(),
                description: a.description.clone(),
                version: a.version.clone(),
                lifecycle: a.lifecycle.clone(),
                input_schema: Some(input_schema),
                result_schema: Some(result_schema),
                // In range: check_action bounds it to 100 years.
                timeout_ms: i64::try_from(a.timeout.as_millis()).unwrap_or(i64::MAX),
                retry: a.retry,
                dlq: subject::dlq_action(&self.name, &a.name)?,
                action_env: None,
                result_event,
                compatibility: None,
            });
        }
        let mut names = BTreeSet::new();
        for l in &self.lookups {
            if !names.insert(l.name.clone()) {
                return Err(BuildError::Duplicate {
                    what: "lookup",
                    name: l.name.clone(),
                });
            }
        }
        let mut source_names = BTreeSet::new();
        for s in &self.sources {
            if !source_names.insert(s.name.clone()) {
                return Err(BuildError::Duplicate {
                    what: "source",
                    name: s.name.clone(),
                });
            }
        }
        let mut manifest = Manifest {
            protocol_version: PROTOCOL_VERSION.into(),
            service: self.name.clone(),
            service_version: self.version,
            manifest_hash: String::new(),
            display_name: self.display_name,
            description: self.description,
            owner: self.owner,
            tags: self.tags,
            actions,
            service_sources: self.sources,
            supports_nodes: self.supports_nodes,
            supports_rate_limit: self.supports_rate_limit,
            // Sorted and without repeats on the wire, as the hash sees them.
            runtime_capabilities: {
                let mut caps = self.capabilities;
                caps.sort();
                caps.dedup();
                caps
            },
            runtime_lookups: self
                .lookups
                .iter()
                .map(|l| Lookup {
                    name: l.name.clone(),
                    display_name: l.display_name.clone(),
                    description: l.description.clone(),
                    params: l.params.clone(),
                    result_fields: l.result_fields.clone(),
                })
                .collect(),
        };
        manifest.seal().map_err(|e| BuildError::Schema {
            action: String::new(),
            reason: e.to_string(),
        })?;
        let issues = manifest.validate();
        if !issues.is_empty() {
            return Err(BuildError::Manifest(issues));
        }
        Ok(Service {
            manifest,
            actions: self.actions,
            lookups: self.lookups,
            config: self.config,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::{Value, json};

    use super::*;
    use crate::runtime::{ActionError, DEFAULT_RETRY};
    use crate::wire::Retry;

    fn echo(name: &str) -> ActionDef {
        ActionDef::dynamic(name, &json!({}), &json!({}), |v: Value, _| async move {
            Ok::<_, ActionError>(v)
        })
    }

    fn build(action: ActionDef) -> Result<Service, BuildError> {
        Service::builder("shop", "1.0.0")
            .action(action)
            .nats_source("nats", "shop.inbound")
            .build()
    }

    #[test]
    fn out_of_range_timeouts_and_retries_are_refused_naming_action_and_field() {
        let cases = [
            (
                echo("charge").retry(Retry {
                    max_attempts: 5_000_000_000,
                    ..DEFAULT_RETRY
                }),
                "action \"charge\": retry.max_attempts: is 5000000000, must be from 1 to 4294967295",
            ),
            (
                echo("charge").retry(Retry {
                    backoff_factor: f64::NAN,
                    ..DEFAULT_RETRY
                }),
                "action \"charge\": retry.backoff_factor: is NaN",
            ),
            (
                echo("charge").retry(Retry {
                    initial_backoff_ms: -5,
                    ..DEFAULT_RETRY
                }),
                "action \"charge\": retry.initial_backoff_ms: is -5",
            ),
            (
                echo("charge").timeout(Duration::MAX),
                "action \"charge\": timeout: is",
            ),
            (
                echo("charge").timeout(Duration::ZERO),
                "must be at least 1 ms",
            ),
        ];
        for (action, says) in cases {
            let e = build(action).expect_err(says);
            assert!(matches!(e, BuildError::Action { .. }), "{e:?}");
            assert!(e.to_string().contains(says), "{e}");
        }
        assert!(build(echo("charge").timeout(Duration::from_millis(1))).is_ok());
    }
}
