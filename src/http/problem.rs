//! Problem documents (`application/problem+json`): the only way the API reports an error.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::session::SessionError;

/// One error response: `{type, title, status, detail, agent?, sessionId?, details?}`.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Problem {
    /// The kind (`invalid_request`, …); serialized as `urn:sandbox-agent:error:<kind>`.
    #[serde(rename = "type", serialize_with = "urn")]
    #[schema(value_type = String, pattern = "^urn:sandbox-agent:error:[a-z_]+$",
        example = "urn:sandbox-agent:error:session_not_found")]
    pub kind: &'static str,
    pub title: &'static str,
    pub status: u16,
    pub detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub agent: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub session_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Object)]
    pub details: Option<Box<serde_json::Value>>,
}

fn urn<S: serde::Serializer>(kind: &&'static str, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&format_args!("urn:sandbox-agent:error:{kind}"))
}

impl Problem {
    /// A problem of `kind` (e.g. `invalid_request`) with the kind's status.
    pub fn new(kind: &'static str, status: StatusCode, detail: impl Into<String>) -> Self {
        Problem {
            kind,
            title: title(kind),
            status: status.as_u16(),
            detail: detail.into(),
            agent: None,
            session_id: None,
            details: None,
        }
    }

    /// 400 `invalid_request`.
    pub fn invalid(detail: impl Into<String>) -> Self {
        Problem::new("invalid_request", StatusCode::BAD_REQUEST, detail)
    }

    /// Names the session the problem is about.
    pub fn session(mut self, id: &str) -> Self {
        self.session_id = Some(id.to_owned());
        self
    }
}

fn title(kind: &str) -> &'static str {
    match kind {
        "invalid_request" => "Invalid request",
        "unsupported_agent" => "Unsupported agent",
        "mode_not_supported" => "Mode not supported",
        "token_invalid" => "Token invalid",
        "session_not_found" => "Session not found",
        "session_already_exists" => "Session already exists",
        "agent_not_installed" => "Agent not installed",
        "agent_process_exited" => "Agent process exited",
        "stream_error" => "Stream error",
        "timeout" => "Timeout",
        "not_found" => "Not found",
        "method_not_allowed" => "Method not allowed",
        "payload_too_large" => "Payload too large",
        "service_unavailable" => "Service unavailable",
        "store_unavailable" => "Event log unavailable",
        "queue_full" => "Too many waiting messages",
        "cancelled" => "Cancelled",
        "budget_exhausted" => "Budget exhausted",
        "credentials_missing" => "Credentials missing",
        "host_not_allowed" => "Host not allowed",
        "origin_not_allowed" => "Origin not allowed",
        "conflict" => "Conflict",
        "too_many_acp_servers" => "Too many ACP servers",
        "too_many_websockets" => "Too many WebSocket connections",
        "not_acceptable" => "Not acceptable",
        "unsupported_media_type" => "Unsupported media type",
        _ => "Error",
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::to_vec(&self).unwrap_or_default();
        let mut resp = (status, body).into_response();
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if status == StatusCode::PAYLOAD_TOO_LARGE {
            // The rest of the oversized body was never read, so the connection cannot carry
            // another request: say so, or a pooling client reuses it and loses its next request.
            resp.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        resp
    }
}

impl From<SessionError> for Problem {
    fn from(e: SessionError) -> Self {
        let detail = e.to_string();
        match e {
            SessionError::NotFound(id) => {
                Problem::new("session_not_found", StatusCode::NOT_FOUND, detail).session(&id)
            }
            SessionError::AlreadyExists(id) => {
                Problem::new("session_already_exists", StatusCode::CONFLICT, detail).session(&id)
            }
            SessionError::UnsupportedAgent(agent) => {
                let mut p = Problem::new("unsupported_agent", StatusCode::BAD_REQUEST, detail);
                p.agent = Some(agent);
                p
            }
            SessionError::ModeNotSupported(_) => {
                Problem::new("mode_not_supported", StatusCode::BAD_REQUEST, detail)
            }
            SessionError::InvalidRequest(_) | SessionError::Terminated => Problem::invalid(detail),
            SessionError::AgentNotInstalled { agent, .. } => {
                let mut p = Problem::new("agent_not_installed", StatusCode::NOT_FOUND, detail);
                p.agent = Some(agent);
                p
            }
            SessionError::AgentExited(_) => Problem::new(
                "agent_process_exited",
                StatusCode::INTERNAL_SERVER_ERROR,
                detail,
            ),
            SessionError::ShuttingDown => Problem::new(
                "service_unavailable",
                StatusCode::SERVICE_UNAVAILABLE,
                detail,
            ),
            SessionError::StoreUnavailable(_) => {
                Problem::new("store_unavailable", StatusCode::SERVICE_UNAVAILABLE, detail)
            }
            SessionError::QueueFull(_) => {
                Problem::new("queue_full", StatusCode::TOO_MANY_REQUESTS, detail)
            }
            SessionError::Cancelled => Problem::new("cancelled", StatusCode::CONFLICT, detail),
            SessionError::CredentialsMissing { places, get_one } => {
                let mut p = Problem::new("credentials_missing", StatusCode::BAD_REQUEST, detail);
                p.agent = Some("codebuff".into());
                p.details = Some(Box::new(serde_json::json!({
                    "lookedIn": places,
                    "getAKey": get_one,
                })));
                p
            }
            SessionError::BudgetExhausted { .. } => {
                Problem::new("budget_exhausted", StatusCode::PAYMENT_REQUIRED, detail)
            }
            SessionError::Store(_) => Problem::new("stream_error", StatusCode::BAD_GATEWAY, detail),
        }
    }
}
