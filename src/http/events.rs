//! Reading a session's log over HTTP: polling, SSE (replay then live), and the turn stream.
//!
//! Every reader reads the log at its own cursor, so a slow or paused client loses nothing and
//! holds nothing but its cursor and one page; a client that disconnects drops its stream.

use std::pin::Pin;
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
use crate::session::{Follow, LoggedEvent};
use crate::universal::Digits;

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
    let limit = q.limit.unwrap_or(DEFAULT_LIMIT).clamp(1, MAX_LIMIT);
    let after = q.offset.unwrap_or(0);
    let include_raw = q.include_raw.unwrap_or(false);
    let mut follow = state.manager.follow(&id, after)?.with_raw(include_raw);
    let events = follow.poll_at_most(limit)?;
    let has_more = follow.position() < follow.last_sequence()?;
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
    responses((status = 200, description = "SSE: `id: <sequence>` and `data: <event>` per event; replay then live; closes by itself only after an `event: error` message (a problem document, e.g. `store_unavailable` while the event log cannot be written; resume with `Last-Event-ID`)", content_type = "text/event-stream"),
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
        state.manager.follow(&id, after)?,
        q.include_raw.unwrap_or(false),
        false,
        state.keep_alive,
    );
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
        state.manager.follow(id, after)?,
        include_raw,
        true,
        state.keep_alive,
    );
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
    follow: Follow,
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
fn closes_turn(event: &LoggedEvent) -> bool {
    matches!(
        event.event_type,
        "turn.ended" | "session.ended" | "question.requested" | "permission.requested"
    )
}

/// Appends one event as SSE: `id: <sequence>`, `data: <json>` (compact JSON has no newline).
///
/// The id's digits are written by hand: `write!` spent more on the formatting machinery than
/// on copying the event's JSON (2 % of a 20-session flood's daemon CPU).
fn push_sse(out: &mut String, event: &LoggedEvent, include_raw: bool) {
    out.push_str("id: ");
    out.push_str(Digits::default().of(event.sequence));
    out.push_str("\ndata: ");
    out.push_str(&event.json(include_raw));
    out.push_str("\n\n");
}

/// The last message of a stream that cannot go on: `event: error` and the problem document as
/// its data, without an `id` (it is not an event of the log, so `Last-Event-ID` stays at the
/// last event sent).
fn error_sse(problem: &Problem) -> String {
    let json = serde_json::to_string(problem).unwrap_or_else(|_| "{}".to_owned());
    format!("event: error\ndata: {json}\n\n")
}

/// Replays the log after `after`, then follows it live (no gap, no duplicate: one cursor).
///
/// Each item is the SSE text of every event one read of the log returned (up to [`PAGE`]), so
/// a reader that is behind gets large writes, and a live one each event as soon as it is
/// appended; after `keep_alive` without an event, a keep-alive comment. When nothing can
/// follow (the store cannot be written: [`Follow::next`]), an `error` message ([`error_sse`])
/// ends the stream.
fn log_stream(
    follow: Follow,
    include_raw: bool,
    until_turn_end: bool,
    keep_alive: Duration,
) -> impl Stream<Item = Result<String, std::convert::Infallible>> + Send + 'static {
    let follow = follow.streaming().with_raw(include_raw);
    let cursor = Cursor {
        follow,
        include_raw,
        until_turn_end,
        keep_alive,
        keep_alive_timer: Box::pin(tokio::time::sleep(keep_alive)),
        last_sent: Instant::now(),
        done: false,
    };
    stream::unfold(cursor, |mut c| async move {
        loop {
            if c.done {
                return None;
            }
            let page = tokio::select! {
                // Cancel-safe: a keep-alive that fires first leaves the cursor where it was.
                page = c.follow.next() => match page {
                    Ok(Some(page)) => page,
                    Ok(None) => return None,
                    // Nothing can follow now (the store cannot be written, or the log cannot be
                    // read): say why, then close; the client resumes with `Last-Event-ID`.
                    Err(error) => {
                        c.done = true;
                        let problem = Problem::from(error).session(c.follow.session_id());
                        return Some((Ok(error_sse(&problem)), c));
                    }
                },
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
            };
            let mut text = String::with_capacity(page.iter().map(|e| e.json.len() + 32).sum());
            for e in &page {
                push_sse(&mut text, e, c.include_raw);
                if c.until_turn_end && closes_turn(e) {
                    c.done = true;
                    break;
                }
            }
            c.last_sent = Instant::now();
            return Some((Ok(text), c));
        }
    })
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
    let include_raw = q.include_raw();
    let follow = state
        .manager
        .follow(&id, 0)?
        .streaming()
        .with_raw(include_raw);
    let end = follow.last_sequence()?;
    // Pages are read one at a time as the client consumes them: never the whole log in memory.
    let body = stream::unfold(Some(follow), move |follow| async move {
        let mut follow = follow?;
        match follow.poll_until(end) {
            Ok(page) if !page.is_empty() => {
                let mut chunk = String::new();
                for e in &page {
                    chunk.push_str(&e.json(include_raw));
                    chunk.push('\n');
                }
                Some((Ok::<_, std::io::Error>(chunk), Some(follow)))
            }
            Ok(_) => None,
            Err(e) => Some((Err(std::io::Error::other(e.to_string())), None)),
        }
    });
    Ok((
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        axum::body::Body::from_stream(body),
    )
        .into_response())
}
