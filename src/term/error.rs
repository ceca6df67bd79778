//! What can go wrong in the terminal client, sorted by the exit status it means.

use crate::session::SessionError;

/// The exit statuses of the client's commands.
pub mod exit {
    /// The turn completed (or the command did what it was asked).
    pub const OK: u8 = 0;
    /// The turn failed (timed out, interrupted), or the daemon refused the request.
    pub const FAILED: u8 = 1;
    /// Bad usage or configuration.
    pub const USAGE: u8 = 2;
    /// The budget is spent, or there is no credential.
    pub const BUDGET_OR_CREDENTIALS: u8 = 3;
    /// The turn was cancelled (Ctrl-C, or from elsewhere).
    pub const CANCELLED: u8 = 130;
    /// The turn was cancelled because the client got SIGTERM (128 + 15, as a process ended
    /// by it).
    pub const TERMINATED: u8 = 143;
}

/// Which sort of failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Flags, settings, a session id that does not exist.
    Usage,
    /// No credential for the agent.
    Credentials,
    /// The session's budget is spent.
    Budget,
    /// The daemon cannot be reached, or refused for another reason.
    Failed,
}

/// An error of the client, with the message shown on stderr.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct ClientError {
    pub kind: ErrorKind,
    pub message: String,
}

impl ClientError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> ClientError {
        ClientError {
            kind,
            message: message.into(),
        }
    }

    pub fn usage(message: impl Into<String>) -> ClientError {
        ClientError::new(ErrorKind::Usage, message)
    }

    pub fn failed(message: impl Into<String>) -> ClientError {
        ClientError::new(ErrorKind::Failed, message)
    }

    /// The exit status this error means.
    pub fn exit_code(&self) -> u8 {
        match self.kind {
            ErrorKind::Usage => exit::USAGE,
            ErrorKind::Credentials | ErrorKind::Budget => exit::BUDGET_OR_CREDENTIALS,
            ErrorKind::Failed => exit::FAILED,
        }
    }

    /// The kind of an HTTP problem document's `type` (`urn:sandbox-agent:error:<kind>`).
    pub fn from_problem(status: u16, kind: &str, detail: &str) -> ClientError {
        let kind = match kind.rsplit(':').next().unwrap_or(kind) {
            "credentials_missing" => ErrorKind::Credentials,
            "budget_exhausted" => ErrorKind::Budget,
            "invalid_request"
            | "unsupported_agent"
            | "mode_not_supported"
            | "session_not_found"
            | "session_already_exists"
            | "token_invalid" => ErrorKind::Usage,
            _ if status == 401 => ErrorKind::Usage,
            _ => ErrorKind::Failed,
        };
        ClientError::new(kind, detail)
    }
}

impl From<SessionError> for ClientError {
    fn from(e: SessionError) -> Self {
        let kind = match &e {
            SessionError::CredentialsMissing { .. } => ErrorKind::Credentials,
            SessionError::BudgetExhausted { .. } => ErrorKind::Budget,
            SessionError::NotFound(_)
            | SessionError::AlreadyExists(_)
            | SessionError::UnsupportedAgent(_)
            | SessionError::ModeNotSupported(_)
            | SessionError::InvalidRequest(_) => ErrorKind::Usage,
            _ => ErrorKind::Failed,
        };
        ClientError::new(kind, e.to_string())
    }
}

impl From<crate::config::ConfigError> for ClientError {
    fn from(e: crate::config::ConfigError) -> Self {
        ClientError::usage(e.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problems_map_to_exit_statuses() {
        let e = ClientError::from_problem(402, "urn:sandbox-agent:error:budget_exhausted", "x");
        assert_eq!(e.exit_code(), 3);
        let e = ClientError::from_problem(400, "urn:sandbox-agent:error:credentials_missing", "x");
        assert_eq!(e.exit_code(), 3);
        let e = ClientError::from_problem(404, "urn:sandbox-agent:error:session_not_found", "x");
        assert_eq!(e.exit_code(), 2);
        let e = ClientError::from_problem(503, "urn:sandbox-agent:error:store_unavailable", "x");
        assert_eq!(e.exit_code(), 1);
    }
}
