//! Every error type of the crate, each specific to one operation so callers can match on it.

use thiserror::Error;

/// Encoding a value as Go JSON failed.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum JsonError {
    /// NaN or an infinity: JSON has no text for it (Go's encoder refuses it too).
    #[error("{0} has no JSON form (Go's encoder refuses NaN and infinities)")]
    UnsupportedFloat(f64),
    /// A map key that is not a string or an integer.
    #[error("a JSON object key must be a string")]
    MapKeyNotString,
    /// Anything else a `Serialize` implementation reported.
    #[error("{0}")]
    Custom(String),
}

/// What kind of decoding failure a [`DecodeError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeErrorKind {
    /// Not JSON.
    Syntax,
    /// The input ended in the middle of a value.
    Eof,
    /// JSON, but a field is missing or has the wrong type or value.
    Data,
}

/// Decoding a wire shape failed. Says which shape, where (JSON path, line, column) and why.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{shape}: {}{message} (line {line}, column {column})", path_prefix(.path))]
pub struct DecodeError {
    /// The shape being decoded (`manifest`, `heartbeat`...).
    pub shape: &'static str,
    /// Syntax, end of input, or data.
    pub kind: DecodeErrorKind,
    /// The JSON path of the offending field (`actions[0].timeout_ms`), empty at the top.
    pub path: String,
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub column: usize,
    /// What was wrong.
    pub message: String,
}

fn path_prefix(path: &str) -> String {
    if path.is_empty() {
        String::new()
    } else {
        format!("at {path}: ")
    }
}

/// Reading Go time text failed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TimeError {
    /// Not RFC 3339.
    #[error("{text:?} is not an RFC 3339 time: {reason}")]
    Invalid {
        /// The text given.
        text: String,
        /// Why it was refused.
        reason: String,
    },
    /// Outside the years -9999..=9999.
    #[error("time out of range: {0}")]
    OutOfRange(String),
}

/// A name cannot become a subject token, or would make a subject outside the locked table.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SubjectError {
    /// Not a single valid token.
    #[error("{what} {value:?} cannot be a subject token: {reason}")]
    InvalidToken {
        /// Which name (`service`, `action`, `flow_id`...).
        what: &'static str,
        /// The name given.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A reserved name.
    #[error("{what} {value:?} is reserved: {reason}")]
    Reserved {
        /// Which name.
        what: &'static str,
        /// The name given.
        value: String,
        /// Why it is reserved.
        reason: &'static str,
    },
}

/// Reading the envelope from headers failed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EnvelopeError {
    /// No envelope header at all.
    #[error("the message carries no X-Triggers-* envelope headers")]
    Absent,
    /// A header that routing needs is missing or empty.
    #[error("envelope header {header} is missing")]
    Missing {
        /// Its canonical name.
        header: &'static str,
    },
    /// A header is present but malformed.
    #[error("envelope header {header} is {value:?}: {reason}")]
    Invalid {
        /// Its canonical name.
        header: &'static str,
        /// The value found.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// A W3C traceparent is malformed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum TraceparentError {
    /// Not `version-traceid-parentid-flags`.
    #[error("expected version-traceid-parentid-flags")]
    Shape,
    /// The version is not two lowercase hex digits, or is `ff`.
    #[error("the version must be two lowercase hex digits other than ff")]
    Version,
    /// The trace id is not 32 lowercase hex digits, or is all zeros.
    #[error("the trace id must be 32 lowercase hex digits, not all zero")]
    TraceId,
    /// The parent id is not 16 lowercase hex digits, or is all zeros.
    #[error("the parent id must be 16 lowercase hex digits, not all zero")]
    ParentId,
    /// The flags are not two lowercase hex digits.
    #[error("the flags must be two lowercase hex digits")]
    Flags,
}

/// One problem found by `Manifest::validate`.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{path}: {message}")]
pub struct ManifestIssue {
    /// The JSON path of the field.
    pub path: String,
    /// What is wrong.
    pub message: String,
    /// Whether the orchestrator accepts it anyway: Go's SDK can produce it (a null schema, an
    /// empty `service_version`). The emulator registers such a manifest and its conformance
    /// checker reports a warning; our SDK's builder still refuses it.
    pub lenient: bool,
}

/// Normalising a JSON Schema failed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SchemaError {
    /// A `$ref` that refers to itself: a recursive type cannot be inlined, as Go's cannot.
    #[error(
        "the schema is recursive through {0}; a manifest schema must be finite (inline a bounded shape or use serde_json::Value)"
    )]
    Recursive(String),
    /// A `$ref` that points nowhere.
    #[error("the schema refers to {0}, which it does not define")]
    DanglingRef(String),
    /// A schema (or subschema) that is neither an object nor a boolean.
    #[error("a schema must be an object or a boolean, found {0}")]
    NotAnObject(String),
}

/// A result event declaration is refused, or cannot be derived.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ResultEventError {
    /// v2 declarations must not carry `topic`.
    #[error(
        "result_event must not declare `topic` in protocol v2: remove it (results route through the flow graph)"
    )]
    TopicNotAllowed,
    /// Not a valid declaration.
    #[error("result_event is not a valid declaration: {0}")]
    Invalid(String),
    /// `Auto` cannot flatten this result.
    #[error(
        "action {action}: cannot derive result_event{}: {reason}; opt out with ResultEventConfig::Off or declare one with ResultEventConfig::Custom",
        if .field.is_empty() { String::new() } else { format!(" (field {:?})", .field) }
    )]
    NotDerivable {
        /// The action.
        action: String,
        /// The field that is not a scalar (empty when the whole output is not an object).
        field: String,
        /// Why.
        reason: String,
    },
}

/// The Durable Timer private context is invalid; each way it can fail has its variant.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DurableTimerError {
    /// Part of the triplet is there, this header is not.
    #[error("durable timer header {0} is missing (the triplet must be complete)")]
    MissingHeader(&'static str),
    /// A triplet header appears more than once.
    #[error("durable timer header {0} appears more than once")]
    RepeatedHeader(&'static str),
    /// The context header is not JSON.
    #[error("the durable timer context is not JSON: {0}")]
    ContextNotJson(String),
    /// The context header is JSON but not an object.
    #[error("the durable timer context is not a JSON object")]
    ContextNotObject,
    /// `v` is not a version this SDK knows.
    #[error("durable timer context version {0} is not supported (expected 1)")]
    UnsupportedVersion(i64),
    /// `kind` is neither `root` nor `elapsed`.
    #[error("durable timer context kind {0:?} is neither root nor elapsed")]
    UnknownKind(String),
    /// A key of the kind is missing.
    #[error("durable timer context lacks key {0:?}")]
    MissingKey(String),
    /// A key the kind does not have.
    #[error("durable timer context has unexpected key {0:?}")]
    ExtraKey(String),
    /// A key has the wrong type or an empty value.
    #[error("durable timer context key {key:?} must be {expected}")]
    WrongType {
        /// The key.
        key: String,
        /// What it must be.
        expected: &'static str,
    },
    /// The execution id header differs from `root_execution_id`.
    #[error(
        "execution id {execution_id:?} differs from the context's root_execution_id {root_execution_id:?}"
    )]
    ExecutionIdMismatch {
        /// The header's value.
        execution_id: String,
        /// The context's.
        root_execution_id: String,
    },
    /// The payload hash header is not 64 lowercase hex digits.
    #[error("durable timer payload hash {0:?} is not 64 lowercase hex digits")]
    PayloadHashMalformed(String),
    /// The payload hash header does not match the payload bytes.
    #[error("durable timer payload hash {header} does not match the payload (sha256 {actual})")]
    PayloadHashMismatch {
        /// The header's value.
        header: String,
        /// The hash of the bytes received.
        actual: String,
    },
}

/// A configuration value (from the environment) is not understood.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{setting}={value:?} is not valid: expected {expected}")]
pub struct ConfigError {
    /// The variable or field.
    pub setting: &'static str,
    /// The value found.
    pub value: String,
    /// What would be accepted.
    pub expected: &'static str,
}

/// An action's timeout or retry policy is out of range (`runtime::check_action`).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{field}: {message}")]
pub struct ActionSettingError {
    /// The setting: `timeout`, `retry.max_attempts`, `retry.backoff_factor`...
    pub field: &'static str,
    /// Its value, and what would be accepted.
    pub message: String,
}

/// A service definition is refused by `ServiceBuilder::build`.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum BuildError {
    /// A name cannot become a subject token.
    #[error(transparent)]
    Name(#[from] SubjectError),
    /// Two actions, lookups or sources share a name.
    #[error("{what} {name:?} is defined twice")]
    Duplicate {
        /// `action`, `lookup` or `source`.
        what: &'static str,
        /// The name.
        name: String,
    },
    /// An action's input or output type has no finite JSON Schema.
    #[error("action {action:?}: {reason}")]
    Schema {
        /// The action.
        action: String,
        /// Why.
        reason: String,
    },
    /// The result event cannot be derived (or is invalid).
    #[error(transparent)]
    ResultEvent(#[from] ResultEventError),
    /// The manifest would not pass the orchestrator's validation.
    #[error("the manifest is not valid: {}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Manifest(Vec<ManifestIssue>),
    /// An action's timeout or retry policy is out of range.
    #[error("action {action:?}: {error}")]
    Action {
        /// The action.
        action: String,
        /// Which setting, and what would be accepted.
        #[source]
        error: ActionSettingError,
    },
    /// The service declares no NATS source, so nothing can reach it.
    #[error("service {0:?} has no NATS source: add one with .nats_source(name, subject)")]
    NoNatsSource(String),
}

/// Starting a service failed. Each variant says what to do.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum StartError {
    /// A configuration value is not understood.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// No connection to NATS.
    #[error(
        "cannot connect to NATS at {url}: {reason}; is the server running (triggers-lab up), and is TRIGGERS_NATS_URL right?"
    )]
    Connect {
        /// The URL tried.
        url: String,
        /// Why.
        reason: String,
    },
    /// Nobody answered the registration in time.
    #[error(
        "registration timed out after {0:?}: an orchestrator listens on triggers.v2.manifest.register but did not answer"
    )]
    RegisterTimeout(std::time::Duration),
    /// Nobody listens on the registration subject.
    #[error(
        "no orchestrator listens on triggers.v2.manifest.register: start one (triggers-lab up) or check TRIGGERS_NATS_URL"
    )]
    NoResponders,
    /// The orchestrator refused the registration.
    #[error("the orchestrator refused the registration: {0}")]
    Refused(String),
    /// The reply is not a RegisterReply.
    #[error("the registration reply is not a RegisterReply: {0}")]
    BadReply(String),
    /// A NATS or JetStream call failed.
    #[error("cannot {action}: {reason}")]
    Nats {
        /// What the runtime was doing.
        action: &'static str,
        /// Why.
        reason: String,
    },
}
