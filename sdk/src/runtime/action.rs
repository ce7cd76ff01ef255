//! Actions: typed handlers with their schema, timeout, retry policy and catalog metadata.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::wire::{Envelope, ResultEventConfig, Retry};

/// What a handler gets besides its input.
#[derive(Debug, Clone)]
pub struct ActionContext {
    /// The message's envelope, without the Durable Timer triplet; `retry_count` is this
    /// attempt's (0 on the first).
    pub envelope: Envelope,
    /// The attempt, from 1.
    pub attempt: u32,
    /// How many attempts the retry policy allows.
    pub max_attempts: u32,
    /// When this attempt is cut off.
    pub deadline: tokio::time::Instant,
    /// The node of the flow being run.
    pub node_id: String,
    /// The service running it.
    pub service: String,
    /// A span for the attempt (`action`, with service, action, run, node and attempt).
    pub span: tracing::Span,
}

impl ActionContext {
    /// Whether this is the last attempt the retry policy allows.
    #[must_use]
    pub fn is_last_attempt(&self) -> bool {
        self.attempt >= self.max_attempts
    }

    /// Time left before the deadline.
    #[must_use]
    pub fn remaining(&self) -> Duration {
        self.deadline
            .saturating_duration_since(tokio::time::Instant::now())
    }
}

/// A handler's failure: a message, and whether another attempt may help.
///
/// Any `std::error::Error` converts into it, as a retryable failure, so `?` works in handlers;
/// build one from text with [`ActionError::retryable`] or [`ActionError::permanent`]. It does not
/// implement `std::error::Error` itself, which is what makes that blanket conversion possible (as
/// with `anyhow::Error`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionError {
    message: String,
    retryable: bool,
}

impl ActionError {
    /// A failure worth retrying.
    #[must_use]
    pub fn retryable(message: impl Into<String>) -> Self {
        ActionError {
            message: message.into(),
            retryable: true,
        }
    }

    /// A failure no retry can fix: the input goes to the DLQ at once.
    #[must_use]
    pub fn permanent(message: impl Into<String>) -> Self {
        ActionError {
            message: message.into(),
            retryable: false,
        }
    }

    /// The message.
    #[must_use]
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether another attempt may help.
    #[must_use]
    pub fn is_retryable(&self) -> bool {
        self.retryable
    }
}

impl std::fmt::Display for ActionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl<E: std::error::Error + Send + Sync + 'static> From<E> for ActionError {
    fn from(e: E) -> Self {
        ActionError::retryable(e.to_string())
    }
}

/// The boxed future an erased handler returns.
pub(crate) type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// How one call of a handler ended, before retries are decided.
#[derive(Debug)]
pub(crate) enum CallError {
    /// The body is not the action's input type: no retry helps.
    InvalidInput(String),
    /// The handler said so.
    Failed(ActionError),
    /// The output could not be written as JSON.
    BadOutput(String),
}

/// A handler with its input and output types erased: JSON in, JSON out.
pub(crate) type ErasedHandler =
    Arc<dyn Fn(Value, ActionContext) -> BoxFuture<Result<Value, CallError>> + Send + Sync>;

/// An async function usable as an action handler: `async fn(Input, ActionContext) -> Result<Output, E>`.
pub trait Handler<I, O>: Send + Sync + 'static {
    /// Calls it.
    fn call(&self, input: I, ctx: ActionContext) -> BoxFuture<Result<O, ActionError>>;
}

impl<F, Fut, I, O, E> Handler<I, O> for F
where
    F: Fn(I, ActionContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<O, E>> + Send + 'static,
    E: Into<ActionError>,
{
    fn call(&self, input: I, ctx: ActionContext) -> BoxFuture<Result<O, ActionError>> {
        let fut = (self)(input, ctx);
        Box::pin(async move { fut.await.map_err(Into::into) })
    }
}

/// An action: a name, a typed handler and its settings. Build with [`ActionDef::new`] and the
/// setters; give it to [`crate::runtime::ServiceBuilder::action`].
#[derive(Clone)]
pub struct ActionDef {
    pub(crate) name: String,
    pub(crate) handler: ErasedHandler,
    pub(crate) input_schema: Result<Map<String, Value>, String>,
    pub(crate) result_schema: Result<Map<String, Value>, String>,
    pub(crate) timeout: Duration,
    pub(crate) retry: Retry,
    pub(crate) display_name: String,
    pub(crate) description: String,
    pub(crate) version: String,
    pub(crate) lifecycle: String,
    pub(crate) result_event: ResultEventConfig,
}

impl std::fmt::Debug for ActionDef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ActionDef")
            .field("name", &self.name)
            .field("timeout", &self.timeout)
            .field("retry", &self.retry)
            .finish_non_exhaustive()
    }
}

/// The retry policy of a new action: 3 attempts, 100 ms doubling up to 5 s (the spec's example).
pub const DEFAULT_RETRY: Retry = Retry {
    max_attempts: 3,
    initial_backoff_ms: 100,
    backoff_factor: 2.0,
    max_backoff_ms: 5_000,
};

/// The per-attempt timeout of a new action.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

impl ActionDef {
    /// An action named `name` run by `handler`; the input and output schemas come from the
    /// types (schemars), normalised as the wire contract says.
    pub fn new<I, O, H>(name: impl Into<String>, handler: H) -> Self
    where
        I: DeserializeOwned + JsonSchema + Send + 'static,
        O: Serialize + JsonSchema + Send + 'static,
        H: Handler<I, O>,
    {
        let handler = Arc::new(handler);
        let erased: ErasedHandler = Arc::new(move |input: Value, ctx: ActionContext| {
            let handler = handler.clone();
            Box::pin(async move {
                let input: I = serde_json::from_value(input)
                    .map_err(|e| CallError::InvalidInput(e.to_string()))?;
                let output = handler.call(input, ctx).await.map_err(CallError::Failed)?;
                serde_json::to_value(output).map_err(|e| CallError::BadOutput(e.to_string()))
            })
        });
        let schema =
            |r: Result<Map<String, Value>, crate::error::SchemaError>| r.map_err(|e| e.to_string());
        ActionDef {
            name: name.into(),
            handler: erased,
            input_schema: schema(crate::wire::schema::schema_for::<I>()),
            result_schema: schema(crate::wire::schema::schema_for::<O>()),
            timeout: DEFAULT_TIMEOUT,
            retry: DEFAULT_RETRY,
            display_name: String::new(),
            description: String::new(),
            version: String::new(),
            lifecycle: String::new(),
            result_event: ResultEventConfig::Auto,
        }
    }

    /// An action whose input and output are any JSON, with schemas given as data (normalised as
    /// the contract says): for services whose shapes are not Rust types, such as scripted ones
    /// or a gateway. A value that does not match the input schema is not refused by the SDK; the
    /// schema is what the manifest declares.
    ///
    /// # Errors
    /// Never here: a schema that cannot be normalised makes [`ServiceBuilder::build`] fail,
    /// naming the action.
    ///
    /// [`ServiceBuilder::build`]: crate::runtime::ServiceBuilder::build
    pub fn dynamic<F, Fut, E>(
        name: impl Into<String>,
        input_schema: &Value,
        result_schema: &Value,
        handler: F,
    ) -> Self
    where
        F: Fn(Value, ActionContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, E>> + Send + 'static,
        E: Into<ActionError>,
    {
        let handler = Arc::new(handler);
        let erased: ErasedHandler = Arc::new(move |input: Value, ctx: ActionContext| {
            let fut = handler(input, ctx);
            Box::pin(async move { fut.await.map_err(|e| CallError::Failed(e.into())) })
        });
        let schema = |v: &Value| crate::wire::schema::normalize(v).map_err(|e| e.to_string());
        ActionDef {
            name: name.into(),
            handler: erased,
            input_schema: schema(input_schema),
            result_schema: schema(result_schema),
            timeout: DEFAULT_TIMEOUT,
            retry: DEFAULT_RETRY,
            display_name: String::new(),
            description: String::new(),
            version: String::new(),
            lifecycle: String::new(),
            result_event: ResultEventConfig::Auto,
        }
    }

    /// Refuses the inputs `check` rejects, before the handler runs: such a message is
    /// dead-lettered as `invalid_input` with `check`'s reason, and not retried, as an input that
    /// does not fit a typed action's input type is. For [`ActionDef::dynamic`] actions, whose
    /// input is any JSON: check it against the schema they declare.
    #[must_use]
    pub fn check_input<F>(mut self, check: F) -> Self
    where
        F: Fn(&Value) -> Result<(), String> + Send + Sync + 'static,
    {
        let inner = self.handler;
        self.handler = Arc::new(
            move |input: Value, ctx: ActionContext| match check(&input) {
                Ok(()) => inner(input, ctx),
                Err(reason) => Box::pin(async move { Err(CallError::InvalidInput(reason)) }),
            },
        );
        self
    }

    /// The per-attempt timeout (default 30 s).
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The retry policy (default [`DEFAULT_RETRY`]).
    #[must_use]
    pub fn retry(mut self, retry: Retry) -> Self {
        self.retry = retry;
        self
    }

    /// Attempts in all, keeping the rest of the policy.
    #[must_use]
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.retry.max_attempts = i64::from(attempts.max(1));
        self
    }

    /// Catalog: a human name.
    #[must_use]
    pub fn display_name(mut self, name: impl Into<String>) -> Self {
        self.display_name = name.into();
        self
    }

    /// Catalog: what it does.
    #[must_use]
    pub fn description(mut self, text: impl Into<String>) -> Self {
        self.description = text.into();
        self
    }

    /// Catalog: the action's version.
    #[must_use]
    pub fn version(mut self, version: impl Into<String>) -> Self {
        self.version = version.into();
        self
    }

    /// Catalog: `stable`, `beta`, `deprecated`...
    #[must_use]
    pub fn lifecycle(mut self, lifecycle: impl Into<String>) -> Self {
        self.lifecycle = lifecycle.into();
        self
    }

    /// The `result_event` declaration: derived (default), off, or your own.
    #[must_use]
    pub fn result_event(mut self, config: ResultEventConfig) -> Self {
        self.result_event = config;
        self
    }
}
