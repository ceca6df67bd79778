//! The JSON-RPC errors the door answers with: session errors by kind, and failed turns with
//! their typed cause in `data` (`docs/acp.md` "Errors").

use agent_client_protocol::Error;
use serde_json::{json, Value};

use crate::session::{SessionError, TurnEnd};

/// `-32002`: the resource (here, a session) does not exist.
pub const RESOURCE_NOT_FOUND: i32 = -32002;

/// The error for an unknown session id: `-32002` with `data.sessionId`.
pub fn session_not_found(id: &str) -> Error {
    Error::new(RESOURCE_NOT_FOUND, "Resource not found").data(json!({ "sessionId": id }))
}

/// Invalid params (`-32602`) with a reason.
pub fn invalid_params(message: impl Into<String>) -> Error {
    Error::new(-32602, "Invalid params").data(json!({ "message": message.into() }))
}

/// The error for a request the session layer refused.
pub fn session_error(e: SessionError) -> Error {
    let (code, kind) = match &e {
        SessionError::NotFound(id) => return session_not_found(id),
        SessionError::InvalidRequest(_)
        | SessionError::ModeNotSupported(_)
        | SessionError::UnsupportedAgent(_) => {
            return Error::new(-32602, "Invalid params").data(json!({ "message": e.to_string() }))
        }
        SessionError::CredentialsMissing { places, get_one } => {
            return auth_required_because(&e).data(json!({
                "code": "credentials_missing",
                "message": e.to_string(),
                "lookedIn": places,
                "getAKey": get_one,
            }))
        }
        SessionError::BudgetExhausted { spent, budget } => {
            return Error::new(-32603, e.to_string()).data(json!({
                "code": "budget_exhausted",
                "spent": spent,
                "budget": budget,
            }))
        }
        SessionError::AlreadyExists(_) => (-32600, "session_already_exists"),
        SessionError::Terminated => (-32600, "session_terminated"),
        SessionError::AgentNotInstalled { .. } => (-32603, "agent_not_installed"),
        SessionError::AgentExited(_) => (-32603, "agent_process_exited"),
        SessionError::ShuttingDown => (-32603, "shutting_down"),
        SessionError::StoreUnavailable(_) => (-32603, "store_unavailable"),
        SessionError::QueueFull(_) => (-32603, "queue_full"),
        SessionError::Cancelled => (-32603, "cancelled"),
        SessionError::Store(_) => (-32603, "store_error"),
    };
    Error::new(code, e.to_string()).data(json!({ "code": kind }))
}

/// `-32000` "Authentication required", with the reason in the message itself: clients that
/// show only the message (acpx) say what to do.
pub fn auth_required_because(e: &SessionError) -> Error {
    Error::new(
        i32::from(agent_client_protocol::ErrorCode::AUTH_REQUIRED),
        format!("Authentication required: {e}"),
    )
}

/// The error a prompt whose turn did not complete answers with: the turn's `status`, `code`,
/// `message`, `exitCode`, `signal`, the last `error` the agent reported, the turn's cost, and
/// `stderrTail`: the last lines the agent wrote on stderr (`turn.ended.metadata.stderr_tail`). Credentials missing or refused are `-32000`
/// ("Authentication required"), everything else `-32603`.
pub fn turn_failed(end: &TurnEnd) -> Error {
    let code = end.cause();
    let message = end.reason();
    // The turn's own record of the agent's stderr, else what its last error carried.
    let stderr_tail = end.stderr_tail.clone().map(Value::String).or_else(|| {
        end.last_error
            .as_ref()
            .and_then(|e| e.details.as_ref())
            .and_then(|d| d.get("stderr"))
            .cloned()
    });
    let data = json!({
        "status": end.status,
        "code": code,
        "message": message,
        "turnId": end.turn_id,
        "exitCode": end.exit_code,
        "signal": end.signal,
        "error": end.last_error.as_ref().map(|e| json!({"message": e.message, "code": e.code})),
        "stderrTail": stderr_tail.unwrap_or(Value::Null),
        "credits": end.turn_cost.credits,
    });
    // A credential missing or refused is ACP's "authentication required" (`-32000`), so a
    // client can offer its sign-in.
    let rpc_code = if end.needs_credentials() {
        -32000
    } else {
        -32603
    };
    Error::new(rpc_code, message).data(data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::universal::{Cost, ErrorData, TurnStatus};

    fn end(code: Option<&str>, exit: Option<i32>) -> TurnEnd {
        TurnEnd {
            turn_id: Some("turn_2".into()),
            status: TurnStatus::Failed,
            code: code.map(Into::into),
            message: Some("Codebuff backend unreachable".into()),
            last_error: Some(ErrorData {
                message: "Codebuff backend unreachable".into(),
                code: Some("backend_error".into()),
                details: None,
            }),
            stderr_tail: Some("fetch failed\nECONNREFUSED".into()),
            exit_code: exit,
            signal: None,
            turn_cost: Cost::default(),
            cost_reported: false,
            session_cost: None,
            answer: None,
        }
    }

    #[test]
    fn a_failed_turn_carries_its_cause() {
        let e = turn_failed(&end(Some("backend_error"), Some(3)));
        let json = serde_json::to_value(&e).unwrap();
        assert_eq!(json["code"], -32603);
        assert_eq!(json["message"], "Codebuff backend unreachable");
        assert_eq!(json["data"]["status"], "failed");
        assert_eq!(json["data"]["code"], "backend_error");
        assert_eq!(json["data"]["exitCode"], 3);
        assert_eq!(json["data"]["turnId"], "turn_2");
        assert_eq!(json["data"]["stderrTail"], "fetch failed\nECONNREFUSED");
    }

    #[test]
    fn refused_credentials_ask_for_authentication() {
        let e = turn_failed(&end(Some("auth_failed"), Some(1)));
        assert_eq!(serde_json::to_value(&e).unwrap()["code"], -32000);
    }

    #[test]
    fn unknown_sessions_are_resource_not_found() {
        let json = serde_json::to_value(session_error(SessionError::NotFound("x".into()))).unwrap();
        assert_eq!(json["code"], -32002);
        assert_eq!(json["data"]["sessionId"], "x");
    }
}
