//! Runtime lookups: reads the engine (and the flow's lookup nodes) may issue to the service.

use std::future::Future;
use std::sync::Arc;

use serde_json::Value;

use crate::runtime::action::{ActionError, BoxFuture};
use crate::wire::InputField;

pub(crate) type LookupHandler =
    Arc<dyn Fn(Value) -> BoxFuture<Result<Value, ActionError>> + Send + Sync>;

/// A runtime lookup: its name, declared params and result fields, and the function that answers.
#[derive(Clone)]
pub struct LookupDef {
    pub(crate) name: String,
    pub(crate) display_name: String,
    pub(crate) description: String,
    pub(crate) params: Vec<InputField>,
    pub(crate) result_fields: Vec<InputField>,
    pub(crate) handler: LookupHandler,
}

impl std::fmt::Debug for LookupDef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LookupDef")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl LookupDef {
    /// A lookup answered by `handler`, which gets the params object and returns the result
    /// object (merged into the payload by a lookup node).
    pub fn new<F, Fut, E>(name: impl Into<String>, handler: F) -> Self
    where
        F: Fn(Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, E>> + Send + 'static,
        E: Into<ActionError>,
    {
        let handler = Arc::new(handler);
        LookupDef {
            name: name.into(),
            display_name: String::new(),
            description: String::new(),
            params: Vec::new(),
            result_fields: Vec::new(),
            handler: Arc::new(move |params| {
                let fut = handler(params);
                Box::pin(async move { fut.await.map_err(Into::into) })
            }),
        }
    }

    /// Declares a parameter.
    #[must_use]
    pub fn param(mut self, name: &str, field_type: &str, required: bool) -> Self {
        self.params.push(InputField {
            name: name.into(),
            field_type: field_type.into(),
            required,
        });
        self
    }

    /// Declares a result field.
    #[must_use]
    pub fn result_field(mut self, name: &str, field_type: &str, required: bool) -> Self {
        self.result_fields.push(InputField {
            name: name.into(),
            field_type: field_type.into(),
            required,
        });
        self
    }

    /// Catalog: a human name (not hashed).
    #[must_use]
    pub fn display_name(mut self, name: impl Into<String>) -> Self {
        self.display_name = name.into();
        self
    }

    /// Catalog: what it reads (not hashed).
    #[must_use]
    pub fn description(mut self, text: impl Into<String>) -> Self {
        self.description = text.into();
        self
    }
}
