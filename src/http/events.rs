//! Reading a session's log over HTTP: polling, SSE (replay then live), and the turn stream.
//!
//! Every reader reads the log at its own cursor, so a slow or paused client loses nothing and
//! holds nothing but its cursor and one page; a client that disconnects drops its stream.

use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::time::Sleep;

use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, Stream};
use serde::Deserialize;

use super::extract::{ApiPath, ApiQuery};
use super::problem::Problem;
use super::AppState;
use crate::store::{wait_after, EventStore, StoreError, StoredEvent};

/// Events read from the log per page.
const PAGE: usize = 256;
/// Default and largest `limit` of a poll.
const DEFAULT_LIMIT: usize = 1000;
const MAX_LIMIT: usize = 10_000;

/// `?includeRaw`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct RawQuery {
    /// Include each event's original agent line in `raw`.
    pub include_raw: Option<bool>,
}

impl RawQuery {
    pub fn include_raw(&self) -> bool {
        self.include_raw.unwrap_or(false)
    }
}

/// `?offset&limit&includeRaw` of a poll.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct PollQuery {
    /// Return events with `sequence > offset`.
    pub offset: Option<u64>,
    /// At most this many events (default 1000, at most 10000).
    pub limit: Option<usize>,
    pub include_raw: Option<bool>,
}

/// `GET …/events` answer. Described only: [`poll_events`] writes this JSON itself, from each
/// event's stored text.
#[allow(dead_code)]
#[derive(utoipa::ToSchema)]
pub struct EventPage {
    /// The events with `sequence > offset`, in order.
    events: Vec<crate::universal::UniversalEvent>,
    /// True when more events follow the last one returned.
    #[schema(rename = "hasMore")]
    has_more: bool,
}

#[utoipa::path(get, path = "/v1/sessions/{id}/events", tag = "events",
    params(("id" = String, Path), PollQuery),
    responses((status = 200, body = EventPage),
        (status = 400, body = Problem), (status = 404, body = Problem)))]
pub async fn poll_events(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<PollQuery>,
) -> Result<Response, Problem> {
    state.manager.info(&id)?;
    let store = state.manager.store();
    let limit = q.limit.unwrap_or(DEFAULT_LIMIT).clamp(1, MAX_LIMIT);
    let after = q.offset.unwrap_or(0);
    let include_raw = q.include_raw.unwrap_or(false);
    let events = store.read(&id, after, limit).map_err(store_problem)?;
    let last = store.last_sequence(&id).map_err(store_problem)?;
    let has_more = events.last().map_or(after, |e| e.sequence) < last;
    let mut body =
        String::with_capacity(events.iter().map(|e| e.json.len() + 1).sum::<usize>() + 32);
    body.push_str("{\"events\":[");
    for (i, e) in events.iter().enumerate() {
        if i > 0 {
            body.push(',');
        }
        body.push_str(&e.json(include_raw));
    }
    body.push_str("],\"hasMore\":");
    body.push_str(if has_more { "true" } else { "false" });
    body.push('}');
    Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
}

fn store_problem(e: StoreError) -> Problem {
    Problem::from(crate::session::SessionError::Store(e))
}

/// `?offset&includeRaw` of the SSE stream.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct SseQuery {
    /// Start after this sequence; without it, after `Last-Event-ID` (else from the start).
    pub offset: Option<u64>,
    pub include_raw: Option<bool>,
}

#[utoipa::path(get, path = "/v1/sessions/{id}/events/sse", tag = "events",
    params(("id" = String, Path), SseQuery),
    responses((status = 200, description = "SSE: `id: <sequence>` and `data: <event>` per event; replay then live; never closes by itself", content_type = "text/event-stream"),
        (status = 400, body = Problem), (status = 404, body = Problem)))]
pub async fn sse_events(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
    headers: HeaderMap,
    ApiQuery(q): ApiQuery<SseQuery>,
) -> Result<Response, Problem> {
    state.manager.info(&id)?;
    let after = match q.offset {
        Some(offset) => offset,
        None => match headers.get("last-event-id") {
            Some(v) => v
                .to_str()
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .ok_or_else(|| {
                    Problem::invalid("Last-Event-ID must be an event sequence number")
                })?,
            None => 0,
        },
    };
    let stream = log_stream(
        state.manager.store().clone(),
        &id,
        after,
        q.include_raw.unwrap_or(false),
        false,
        state.keep_alive,
    )
    .map_err(store_problem)?;
    Ok(sse_response(stream))
}

/// The SSE response of one turn, starting after `after`; it closes after the turn's end or
/// when the agent waits for the client (a question or permission request).
pub fn turn_stream(
    state: &AppState,
    id: &str,
    after: u64,
    include_raw: bool,
) -> Result<Response, crate::session::SessionError> {
    let stream = log_stream(
        state.manager.store().clone(),
        id,
        after,
        include_raw,
        true,
        state.keep_alive,
    )?;
    Ok(sse_response(stream))
}

/// An SSE response over `stream`, whose items are already SSE text (see [`log_stream`]).
fn sse_response(
    stream: impl Stream<Item = Result<String, std::convert::Infallible>> + Send + 'static,
) -> Response {
    let mut resp = Response::new(axum::body::Body::from_stream(stream));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    *resp.status_mut() = StatusCode::OK;
    resp
}

/// The comment sent after `keep_alive` without an event.
const KEEP_ALIVE: &str = ": keep-alive\n\n";

struct Cursor {
    store: Arc<dyn EventStore>,
    id: String,
    after: u64,
    rx: tokio::sync::watch::Receiver<u64>,
    include_raw: bool,
    until_turn_end: bool,
    keep_alive: Duration,
    /// Fires at the latest when a keep-alive is due; armed once, re-armed when it fires
    /// early (no timer registered per event, which a steady trickle would pay for each).
    keep_alive_timer: Pin<Box<Sleep>>,
    /// When the stream last sent something.
    last_sent: Instant,
    done: bool,
}

/// True for the events that end a turn stream.
fn closes_turn(event: &StoredEvent) -> bool {
    matches!(
        event.event_type,
        "turn.ended" | "session.ended" | "question.requested" | "permission.requested"
    )
}

/// Appends one event as SSE: `id: <sequence>`, `data: <json>` (compact JSON has no newline).
fn push_sse(out: &mut String, event: &StoredEvent, include_raw: bool) {
    use std::fmt::Write;
    let _ = write!(out, "id: {}\ndata: ", event.sequence);
    out.push_str(&event.json(include_raw));
    out.push_str("\n\n");
}

/// Replays the log after `after`, then follows it live (no gap, no duplicate: one cursor).
///
/// Each item is the SSE text of every event one read of the log returned (up to [`PAGE`]), so
/// a reader that is behind gets large writes, and a live one each event as soon as it is
/// appended; after `keep_alive` without an event, a keep-alive comment.
fn log_stream(
    store: Arc<dyn EventStore>,
    id: &str,
    after: u64,
    include_raw: bool,
    until_turn_end: bool,
    keep_alive: Duration,
) -> Result<impl Stream<Item = Result<String, std::convert::Infallible>> + Send + 'static, StoreError>
{
    let rx = store.subscribe(id)?;
    let cursor = Cursor {
        store,
        id: id.to_owned(),
        after,
        rx,
        include_raw,
        until_turn_end,
        keep_alive,
        keep_alive_timer: Box::pin(tokio::time::sleep(keep_alive)),
        last_sent: Instant::now(),
        done: false,
    };
    Ok(stream::unfold(cursor, |mut c| async move {
        loop {
            if c.done {
                return None;
            }
            let page = match c.store.read(&c.id, c.after, PAGE) {
                Ok(page) => page,
                Err(_) => return None,
            };
            if page.is_empty() {
                tokio::select! {
                    more = wait_after(&mut c.rx, c.after) => {
                        if more {
                            continue;
                        }
                        return None;
                    }
                    () = &mut c.keep_alive_timer => {
                        let due = c.last_sent + c.keep_alive;
                        let now = Instant::now();
                        if due > now {
                            c.keep_alive_timer.as_mut().reset(due.into());
                            continue;
                        }
                        c.last_sent = now;
                        c.keep_alive_timer.as_mut().reset((now + c.keep_alive).into());
                        return Some((Ok(KEEP_ALIVE.to_owned()), c));
                    }
                }
            }
            let mut text = String::with_capacity(page.iter().map(|e| e.json.len() + 32).sum());
            for e in &page {
                push_sse(&mut text, e, c.include_raw);
                c.after = e.sequence;
                if c.until_turn_end && closes_turn(e) {
                    c.done = true;
                    break;
                }
            }
            c.last_sent = Instant::now();
            return Some((Ok(text), c));
        }
    }))
}

#[utoipa::path(get, path = "/v1/sessions/{id}/events.jsonl", tag = "events",
    params(("id" = String, Path), RawQuery),
    responses((status = 200, description = "The whole transcript, one event per line, streamed", content_type = "application/x-ndjson"),
        (status = 404, body = Problem)))]
pub async fn transcript(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<RawQuery>,
) -> Result<Response, Problem> {
    state.manager.info(&id)?;
    let store = state.manager.store().clone();
    let end = store.last_sequence(&id).map_err(store_problem)?;
    let include_raw = q.include_raw();
    // Pages are read one at a time as the client consumes them: never the whole log in memory.
    let body = stream::unfold(0u64, move |after| {
        let store = store.clone();
        let id = id.clone();
        async move {
            if after >= end {
                return None;
            }
            let page = match store.read(&id, after, PAGE) {
                Ok(page) if !page.is_empty() => page,
                Ok(_) => return None,
                Err(e) => return Some((Err(std::io::Error::other(e.to_string())), end)),
            };
            let mut chunk = String::new();
            let mut last = after;
            for e in page.iter().take_while(|e| e.sequence <= end) {
                chunk.push_str(&e.json(include_raw));
                chunk.push('\n');
                last = e.sequence;
            }
            Some((Ok::<_, std::io::Error>(chunk), last.max(after + 1)))
        }
    });
    Ok((
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        axum::body::Body::from_stream(body),
    )
        .into_response())
}
