//! ACP over HTTP in sandbox-agent's dialect (`docs/acp-http.md`): `POST /v1/acp/{server_id}`
//! carries one JSON-RPC envelope, `GET` is the SSE stream of the agent side's envelopes,
//! `DELETE` ends the server, `GET /v1/acp` lists the servers. The servers themselves are
//! [`crate::acp::remote`]'s: this file maps them to statuses, headers and streams.
//!
//! Beyond the peer: the stream is read from the server's durable envelope log at the client's
//! cursor (a slow reader is never skipped; `Last-Event-ID` resumes exactly, also after a
//! restart), and a request's POST stays open as long as the request runs (a long prompt does
//! not time out): when its answer takes longer than the keep-alive interval, the 200 goes out
//! with a streamed body that carries a newline per interval (JSON allows leading whitespace),
//! then the answer.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use futures_util::stream::{self, Stream};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::extract::{ApiPath, ApiQuery};
use super::problem::Problem;
use crate::acp::remote::{EnvelopeLog, PostError, Posted, Reading, RegistryError, Server, Servers};
use crate::session::AgentKind;

/// Envelopes read from the log per SSE write at most.
const PAGE: usize = 256;
/// The SSE comment sent after the keep-alive interval without an envelope (the peer's).
const HEARTBEAT: &str = ":heartbeat\n\n";

/// What the routes share.
#[derive(Clone)]
pub struct AcpHttp {
    pub servers: Arc<Servers>,
    /// Idle time between SSE heartbeats, and between the newlines of a long POST.
    pub keep_alive: Duration,
    /// The largest `/acp` WebSocket message (`--max-body-bytes`, as for a POST).
    pub max_message_bytes: usize,
    /// An `/acp` WebSocket that sends nothing (not even a pong to the daemon's pings) for this
    /// long is closed (`--ws-heartbeat-timeout`).
    pub heartbeat_timeout: Duration,
}

/// The routes, for the `/v1` router.
pub fn routes<S>(state: AcpHttp) -> Router<S> {
    Router::new()
        .route("/v1/acp", get(list_servers))
        .route(
            "/v1/acp/{server_id}",
            get(stream_envelopes)
                .post(post_envelope)
                .delete(delete_server),
        )
        .with_state(state)
}

/// `GET /v1/acp`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AcpServerList {
    pub servers: Vec<AcpServerInfo>,
}

/// One live server.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AcpServerInfo {
    pub server_id: String,
    pub agent: String,
    pub created_at_ms: i64,
}

#[utoipa::path(get, path = "/v1/acp", tag = "acp",
    responses((status = 200, description = "The live ACP servers, by id", body = AcpServerList)))]
pub async fn list_servers(State(s): State<AcpHttp>) -> Json<AcpServerList> {
    Json(AcpServerList {
        servers: s
            .servers
            .list()
            .into_iter()
            .map(|i| AcpServerInfo {
                server_id: i.server_id,
                agent: i.agent.to_owned(),
                created_at_ms: i.created_at_ms,
            })
            .collect(),
    })
}

/// `?agent` of a POST.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AgentQuery {
    /// The server's agent (`codebuff`, `mock`); needed by the first POST, which creates it.
    pub agent: Option<String>,
}

#[utoipa::path(post, path = "/v1/acp/{server_id}", tag = "acp",
    params(("server_id" = String, Path), AgentQuery),
    request_body(content = Object, description = "One JSON-RPC 2.0 message", content_type = "application/json"),
    responses(
        (status = 200, description = "The request's response envelope (possibly after leading newlines)", body = Object),
        (status = 202, description = "A notification or response was delivered"),
        (status = 400, body = Problem), (status = 404, body = Problem), (status = 406, body = Problem),
        (status = 409, body = Problem), (status = 415, body = Problem),
        (status = 503, description = "`--max-acp-servers` servers live already", body = Problem)))]
pub async fn post_envelope(
    State(s): State<AcpHttp>,
    ApiPath(server_id): ApiPath<String>,
    ApiQuery(q): ApiQuery<AgentQuery>,
    headers: HeaderMap,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Response, Problem> {
    let body = body.map_err(|rejection| {
        let status = rejection.status();
        let kind = if status == StatusCode::PAYLOAD_TOO_LARGE {
            "payload_too_large"
        } else {
            "invalid_request"
        };
        Problem::new(kind, status, rejection.body_text())
    })?;
    if !content_type_is(&headers, "application/json") {
        return Err(Problem::new(
            "unsupported_media_type",
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "content-type must be application/json",
        ));
    }
    if !accept_allows(&headers, "application/json") {
        return Err(Problem::new(
            "not_acceptable",
            StatusCode::NOT_ACCEPTABLE,
            "accept must allow application/json",
        ));
    }
    let envelope: Value = serde_json::from_slice(&body)
        .map_err(|e| Problem::invalid(format!("invalid JSON body: {e}")))?;
    // Checked before a server is made for it (the peer makes the server first).
    if !envelope.is_object() {
        return Err(Problem::invalid(PostError::NotAnObject.to_string()));
    }
    let agent = match q.agent.as_deref() {
        None => None,
        Some(a) => Some(AgentKind::parse(a).ok_or_else(|| {
            let mut p = Problem::new(
                "unsupported_agent",
                StatusCode::BAD_REQUEST,
                format!("unknown agent `{a}`: codebuff or mock"),
            );
            p.agent = Some(a.to_owned());
            p
        })?),
    };
    let server = s
        .servers
        .get_or_create(&server_id, agent)
        .await
        .map_err(registry_problem)?;
    let id = envelope.get("id").cloned().unwrap_or(Value::Null);
    match server.post(envelope).await {
        Ok(Posted::Accepted) => Ok(StatusCode::ACCEPTED.into_response()),
        Ok(Posted::Answer(rx)) => Ok(answer(rx, id, s.keep_alive).await),
        Err(e @ (PostError::NotAnObject | PostError::Invalid(_))) => {
            Err(Problem::invalid(e.to_string()))
        }
        Err(PostError::Closed) => Err(not_found(&server_id)),
    }
}

/// The answer of a request: at once when it comes within `keep_alive`, else a 200 whose body
/// carries a newline per `keep_alive` until it comes.
async fn answer(
    mut rx: tokio::sync::oneshot::Receiver<Arc<str>>,
    id: Value,
    keep_alive: Duration,
) -> Response {
    let closed = move || -> Arc<str> {
        Arc::from(
            serde_json::json!({
                "jsonrpc": "2.0",
                "id": id,
                "error": {"code": -32603, "message": "the ACP server was closed before it answered"},
            })
            .to_string(),
        )
    };
    let first = tokio::time::timeout(keep_alive, &mut rx).await;
    let body = match first {
        Ok(Ok(line)) => Body::from(line.to_string()),
        Ok(Err(_)) => Body::from(closed().to_string()),
        Err(_) => {
            // Still running: the status goes out now, the answer when it comes.
            let body = stream::unfold(Some((rx, closed)), move |state| async move {
                let (mut rx, closed) = state?;
                match tokio::time::timeout(keep_alive, &mut rx).await {
                    Err(_) => Some((
                        Ok::<_, Infallible>(Bytes::from_static(b"\n")),
                        Some((rx, closed)),
                    )),
                    Ok(Ok(line)) => Some((Ok(Bytes::from(line.to_string())), None)),
                    Ok(Err(_)) => Some((Ok(Bytes::from(closed().to_string())), None)),
                }
            });
            Body::from_stream(body)
        }
    };
    let mut resp = Response::new(body);
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp.headers_mut()
        .insert("x-accel-buffering", HeaderValue::from_static("no"));
    resp
}

#[utoipa::path(get, path = "/v1/acp/{server_id}", tag = "acp",
    params(("server_id" = String, Path),
        ("Last-Event-ID" = Option<u64>, Header, description = "Resume after this envelope")),
    responses(
        (status = 200, description = "SSE: `id: <n>`, `event: message`, `data: <envelope>` per envelope the agent side sent, from the first (or after `Last-Event-ID`), then live; ends when the server is deleted", content_type = "text/event-stream"),
        (status = 400, body = Problem), (status = 404, body = Problem), (status = 406, body = Problem)))]
pub async fn stream_envelopes(
    State(s): State<AcpHttp>,
    ApiPath(server_id): ApiPath<String>,
    headers: HeaderMap,
) -> Result<Response, Problem> {
    if !accept_allows(&headers, "text/event-stream") {
        return Err(Problem::new(
            "not_acceptable",
            StatusCode::NOT_ACCEPTABLE,
            "accept must allow text/event-stream",
        ));
    }
    let after = match headers
        .get("last-event-id")
        .map(|v| v.to_str().unwrap_or("x").trim())
    {
        None | Some("") => 0,
        Some(v) => v
            .parse::<u64>()
            .map_err(|_| Problem::invalid("Last-Event-ID must be a positive integer"))?,
    };
    let server = s.servers.get(&server_id).map_err(registry_problem)?;
    server.touch();
    let stream = envelope_stream(server, after, s.keep_alive);
    let mut resp = Response::new(Body::from_stream(stream));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(resp)
}

#[utoipa::path(delete, path = "/v1/acp/{server_id}", tag = "acp",
    params(("server_id" = String, Path)),
    responses((status = 204, description = "The server is gone (also when there was none): its connection ended, the sessions it created ended, their agents stopped")))]
pub async fn delete_server(
    State(s): State<AcpHttp>,
    ApiPath(server_id): ApiPath<String>,
) -> StatusCode {
    // On its own task: a client that gives up waiting (the SDK's DELETE times out after 2 s)
    // must not cut the deletion short.
    let servers = s.servers.clone();
    let _ = tokio::spawn(async move { servers.delete(&server_id).await }).await;
    StatusCode::NO_CONTENT
}

/// Reader state of one SSE stream: a cursor, nothing else.
struct Reader {
    /// Kept in use (`touch`) while the stream is read.
    server: Arc<Server>,
    _reading: Reading,
    log: Arc<EnvelopeLog>,
    after: u64,
    written: tokio::sync::watch::Receiver<u64>,
    closed: tokio::sync::watch::Receiver<bool>,
    keep_alive: Duration,
}

/// The envelopes after `after`, then live ones as they are written, as SSE text; a heartbeat
/// comment after `keep_alive` without one; ends after the last one once the server is gone.
fn envelope_stream(
    server: Arc<Server>,
    after: u64,
    keep_alive: Duration,
) -> impl Stream<Item = Result<String, Infallible>> + Send + 'static {
    let log = server.log.clone();
    let reader = Reader {
        _reading: server.reading(),
        server,
        written: log.subscribe(),
        closed: log.subscribe_closed(),
        log,
        after,
        keep_alive,
    };
    stream::unfold(reader, |mut r| async move {
        loop {
            let page = r.log.read_after_async(r.after, PAGE).await.ok()?;
            r.server.touch();
            if !page.is_empty() {
                let mut text = String::with_capacity(page.iter().map(|e| e.1.len() + 40).sum());
                for (n, envelope) in &page {
                    push_event(&mut text, *n, envelope);
                    r.after = *n;
                }
                return Some((Ok(text), r));
            }
            if r.log.is_closed() {
                return None;
            }
            let after = r.after;
            let idle = tokio::select! {
                more = r.written.wait_for(|n| *n > after) => {
                    more.ok()?;
                    false
                }
                _ = r.closed.wait_for(|c| *c) => false,
                () = tokio::time::sleep(r.keep_alive) => true,
            };
            if idle {
                return Some((Ok(HEARTBEAT.to_owned()), r));
            }
        }
    })
}

/// One envelope as an SSE event.
fn push_event(out: &mut String, n: u64, envelope: &str) {
    use std::fmt::Write;
    let _ = write!(out, "event: message\nid: {n}\ndata: ");
    out.push_str(envelope);
    out.push_str("\n\n");
}

fn not_found(id: &str) -> Problem {
    Problem::new(
        "session_not_found",
        StatusCode::NOT_FOUND,
        format!("no ACP server `{id}`"),
    )
}

fn registry_problem(e: RegistryError) -> Problem {
    let detail = e.to_string();
    match e {
        RegistryError::NotFound(id) => not_found(&id),
        RegistryError::AgentMissing => Problem::invalid(detail),
        RegistryError::Conflict { .. } => Problem::new("conflict", StatusCode::CONFLICT, detail),
        RegistryError::Io(_) => {
            Problem::new("stream_error", StatusCode::INTERNAL_SERVER_ERROR, detail)
        }
        RegistryError::TooMany(_) => Problem::new(
            "too_many_acp_servers",
            StatusCode::SERVICE_UNAVAILABLE,
            detail,
        ),
    }
}

/// True when the content type is `expected` (parameters aside).
fn content_type_is(headers: &HeaderMap, expected: &str) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(media_type)
        .is_some_and(|m| m == expected)
}

/// True when `Accept` is absent or allows `expected` (exactly, `type/*` or `*/*`).
fn accept_allows(headers: &HeaderMap, expected: &str) -> bool {
    let mut values = headers.get_all(header::ACCEPT).iter().peekable();
    if values.peek().is_none() {
        return true;
    }
    let (kind, _) = expected.split_once('/').unwrap_or((expected, ""));
    values
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(media_type)
        .any(|m| m == expected || m == "*/*" || m.strip_suffix("/*").is_some_and(|t| t == kind))
}

/// The lower-case media type of a header value, without parameters.
fn media_type(value: &str) -> Option<String> {
    let media = value.split(';').next()?.trim().to_ascii_lowercase();
    (!media.is_empty()).then_some(media)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn accept_and_content_type_are_matched_as_the_peer_does() {
        assert!(accept_allows(&headers(&[]), "text/event-stream"));
        assert!(accept_allows(
            &headers(&[("accept", "text/*")]),
            "text/event-stream"
        ));
        assert!(accept_allows(
            &headers(&[("accept", "application/json, */*;q=0.1")]),
            "text/event-stream"
        ));
        assert!(!accept_allows(
            &headers(&[("accept", "application/json")]),
            "text/event-stream"
        ));
        assert!(content_type_is(
            &headers(&[("content-type", "Application/JSON; charset=utf-8")]),
            "application/json"
        ));
        assert!(!content_type_is(
            &headers(&[("content-type", "text/plain")]),
            "application/json"
        ));
        assert!(!content_type_is(&headers(&[]), "application/json"));
    }

    #[test]
    fn an_envelope_is_one_sse_event_with_its_number() {
        let mut out = String::new();
        push_event(&mut out, 7, r#"{"jsonrpc":"2.0","method":"x"}"#);
        assert_eq!(
            out,
            "event: message\nid: 7\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"x\"}\n\n"
        );
    }
}
