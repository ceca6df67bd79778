//! What can go wrong with a session request; each door maps it to its protocol's error (a
//! problem document, a JSON-RPC error, an `action-error`, an exit status).

use crate::store::StoreError;

impl From<StoreError> for SessionError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Unavailable(why) => SessionError::StoreUnavailable(why),
            other => SessionError::Store(other),
        }
    }
}

/// Errors of the session layer.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("session `{0}` not found")]
    NotFound(String),
    #[error("session `{0}` already exists")]
    AlreadyExists(String),
    #[error("agent `{0}` is not supported; use `codebuff` or `mock`")]
    UnsupportedAgent(String),
    #[error("{0}")]
    ModeNotSupported(String),
    #[error("{0}")]
    InvalidRequest(String),
    #[error("agent `{agent}` is not installed: {how}")]
    AgentNotInstalled { agent: String, how: String },
    #[error(
        "no Codebuff credential: looked in {}; get a key at {} (and set CODEBUFF_API_KEY), or \
         try the mock agent, which needs none (`--agent mock`, or `\"agent\": \"mock\"` in a \
         request)",
        .places.join(", "),
        .get_one
    )]
    CredentialsMissing {
        places: Vec<String>,
        get_one: &'static str,
    },
    #[error("session terminated")]
    Terminated,
    #[error("the session's agent failed: {0}")]
    AgentExited(String),
    #[error("the daemon is shutting down")]
    ShuttingDown,
    /// The session has spent its credit budget.
    #[error("the session has spent {spent} of its budget of {budget} credits; it takes no more messages")]
    BudgetExhausted { spent: f64, budget: f64 },
    /// The session already holds as many waiting messages as it takes.
    #[error("the session already holds {0} messages waiting for their turn; send more once some have run")]
    QueueFull(usize),
    /// A waiting message was dropped by a cancel before its turn started.
    #[error("the message was cancelled before its turn started")]
    Cancelled,
    /// The event log cannot be written now; the daemon retries by itself.
    #[error("the event log cannot be written now ({0}); try again when GET /v1/health says ok")]
    StoreUnavailable(String),
    #[error(transparent)]
    Store(StoreError),
}

impl SessionError {
    /// The stable, machine-readable name of this refusal, for doors that report errors as a
    /// code (the WebSocket door's `prompt-error`/`action-error`, logs). The HTTP door keeps the
    /// problem types of the API it is compatible with, which differ for a few of these.
    pub fn code(&self) -> &'static str {
        match self {
            SessionError::NotFound(_) => "session_not_found",
            SessionError::AlreadyExists(_) => "session_already_exists",
            SessionError::UnsupportedAgent(_) => "unsupported_agent",
            SessionError::ModeNotSupported(_) => "mode_not_supported",
            SessionError::InvalidRequest(_) => "invalid_request",
            SessionError::AgentNotInstalled { .. } => "agent_not_installed",
            SessionError::CredentialsMissing { .. } => "credentials_missing",
            SessionError::Terminated => "session_terminated",
            SessionError::AgentExited(_) => "agent_process_exited",
            SessionError::ShuttingDown => "shutting_down",
            SessionError::BudgetExhausted { .. } => "budget_exhausted",
            SessionError::QueueFull(_) => "queue_full",
            SessionError::Cancelled => "cancelled",
            SessionError::StoreUnavailable(_) => "store_unavailable",
            SessionError::Store(_) => "store_error",
        }
    }
}
