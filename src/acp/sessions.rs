//! The session methods: `session/new`, `session/load`, `session/resume`, `session/list`,
//! `session/close`, `session/set_mode`, `session/cancel`. Every ACP session is an ordinary
//! session of the engine (same store, same turns, visible to the other doors), with a UUID for
//! an id.

use std::path::PathBuf;
use std::sync::Arc;

use agent_client_protocol::v1::schema::{
    CloseSessionRequest, CloseSessionResponse, CurrentModeUpdate, ListSessionsRequest,
    ListSessionsResponse, LoadSessionRequest, LoadSessionResponse, Meta, NewSessionRequest,
    NewSessionResponse, ResumeSessionRequest, ResumeSessionResponse, SessionId,
    SessionInfo as AcpSessionInfo, SessionMode, SessionModeState, SessionNotification,
    SessionUpdate, SetSessionModeRequest, SetSessionModeResponse,
};
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::{Client, Error};
use serde_json::json;

use super::door::Door;
use super::errors::{invalid_params, session_error};
use super::project::META_KEY;
use super::replay::replay;
use crate::session::{Cancel, CreateRequest, SessionInfo, AGENT_MODES};
use crate::universal::{format_time, ContentPart, EventData, ItemKind, ItemRole};

/// Sessions per `session/list` page.
pub const LIST_PAGE: usize = 100;

/// The session modes: Codebuff's agent modes.
pub fn modes(current: &str) -> SessionModeState {
    fn describe(mode: &str) -> (&str, &'static str) {
        match mode {
            "build" => (
                "Build",
                "Codebuff's default agent: reads, edits and runs what the task needs",
            ),
            "free" => ("Free", "The lite agent: faster and cheaper"),
            "max" => ("Max", "The strongest models: slower, costs more"),
            "plan" => ("Plan", "Plans the work without changing files"),
            other => (other, ""),
        }
    }
    SessionModeState::new(
        current.to_owned(),
        AGENT_MODES
            .iter()
            .map(|m| {
                let (name, description) = describe(m);
                SessionMode::new(*m, name).description(description.to_owned())
            })
            .collect(),
    )
}

/// `session/new`: a session of the door's agent working in `cwd`.
pub async fn new_session(door: &Door, req: NewSessionRequest) -> Result<NewSessionResponse, Error> {
    if !req.cwd.is_absolute() {
        return Err(invalid_params("cwd must be an absolute path"));
    }
    if !req.mcp_servers.is_empty() {
        tracing::info!(
            servers = req.mcp_servers.len(),
            "MCP servers given to session/new are ignored: the Codebuff agent takes none"
        );
    }
    let id = uuid::Uuid::new_v4().to_string();
    let info = door
        .manager
        .create(
            &id,
            CreateRequest {
                agent: door.options.agent.id().to_owned(),
                directory: Some(req.cwd.display().to_string()),
                ..CreateRequest::default()
            },
        )
        .await
        .map_err(session_error)?;
    Ok(NewSessionResponse::new(SessionId::new(id)).modes(modes(&info.agent_mode)))
}

/// `session/load`: the whole conversation replayed, then the session's modes. The next prompt
/// continues the Codebuff conversation.
pub async fn load_session(
    door: &Door,
    cx: &ConnectionTo<Client>,
    req: LoadSessionRequest,
) -> Result<LoadSessionResponse, Error> {
    let id = req.session_id.to_string();
    let info = door.manager.info(&id).map_err(session_error)?;
    replay(door, cx, &id, PathBuf::from(&info.directory)).await?;
    Ok(LoadSessionResponse::new().modes(modes(&info.agent_mode)))
}

/// `session/resume`: the session again, without its history.
pub fn resume_session(
    door: &Door,
    req: &ResumeSessionRequest,
) -> Result<ResumeSessionResponse, Error> {
    let info = door
        .manager
        .info(&req.session_id.to_string())
        .map_err(session_error)?;
    Ok(ResumeSessionResponse::new().modes(modes(&info.agent_mode)))
}

/// `session/list`: every session of the store this engine runs, newest first, optionally only
/// those working in `cwd`; pages of [`LIST_PAGE`], the cursor is opaque.
pub fn list_sessions(
    door: &Door,
    req: &ListSessionsRequest,
) -> Result<ListSessionsResponse, Error> {
    let start = match req.cursor.as_deref() {
        None => 0,
        Some(c) => c
            .strip_prefix("o")
            .and_then(|n| n.parse::<usize>().ok())
            .ok_or_else(|| invalid_params("the cursor is not one session/list returned"))?,
    };
    let sessions: Vec<SessionInfo> = door
        .manager
        .list()
        .into_iter()
        .filter(|s| {
            req.cwd
                .as_ref()
                .is_none_or(|cwd| std::path::Path::new(&s.directory) == cwd)
        })
        .collect();
    let page: Vec<AcpSessionInfo> = sessions
        .iter()
        .skip(start)
        .take(LIST_PAGE)
        .map(|s| list_entry(door, s))
        .collect();
    let next = start + page.len();
    let mut response = ListSessionsResponse::new(page);
    if next < sessions.len() {
        response = response.next_cursor(format!("o{next}"));
    }
    Ok(response)
}

/// Characters of a first prompt shown as a session's title.
const TITLE_CHARS: usize = 80;

/// A session's title: the one it was created with, else the first line of its first prompt
/// (ACP sessions are created without one), read from the start of its log.
fn title(door: &Door, s: &SessionInfo) -> Option<String> {
    if s.title.is_some() {
        return s.title.clone();
    }
    let events = door
        .manager
        .follow(&s.session_id, 0)
        .ok()?
        .with_raw(false)
        .poll_at_most(8)
        .ok()?;
    let text = events.iter().find_map(|e| match e.data().ok()? {
        EventData::ItemStarted(d) | EventData::ItemCompleted(d)
            if d.item.kind == ItemKind::Message && d.item.role == Some(ItemRole::User) =>
        {
            d.item.content.iter().find_map(|p| match p {
                ContentPart::Text { text } => Some(text.clone()),
                _ => None,
            })
        }
        _ => None,
    })?;
    let line = text.lines().map(str::trim).find(|l| !l.is_empty())?;
    Some(match line.char_indices().nth(TITLE_CHARS) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line.to_owned(),
    })
}

/// One session as `session/list` shows it; `_meta.codebuff` has the engine's view (agent,
/// mode, status, ended, cost, turns).
fn list_entry(door: &Door, s: &SessionInfo) -> AcpSessionInfo {
    let mut meta = Meta::new();
    meta.insert(
        META_KEY.to_owned(),
        json!({
            "agent": s.agent,
            "agentMode": s.agent_mode,
            "status": s.status.as_str(),
            "ended": s.ended,
            "turns": s.turns,
            "credits": s.cost.credits,
            "costUsd": s.cost.usd,
            "createdAt": rfc3339(s.created_at),
        }),
    );
    AcpSessionInfo::new(
        SessionId::new(s.session_id.clone()),
        PathBuf::from(&s.directory),
    )
    .title(title(door, s))
    .updated_at(rfc3339(s.updated_at))
    .meta(meta)
}

/// Epoch milliseconds as RFC 3339.
fn rfc3339(ms: u64) -> Option<String> {
    let nanos = i128::from(ms) * 1_000_000;
    time::OffsetDateTime::from_unix_timestamp_nanos(nanos)
        .ok()
        .map(format_time)
}

/// `session/close`: the session's prompts are cancelled and the session ends (it can still be
/// loaded, to be read; it takes no more prompts).
pub async fn close_session(
    door: &Door,
    req: &CloseSessionRequest,
) -> Result<CloseSessionResponse, Error> {
    let id = req.session_id.to_string();
    door.manager.info(&id).map_err(session_error)?;
    door.slot(&id).cancel();
    door.manager.terminate(&id).await.map_err(session_error)?;
    Ok(CloseSessionResponse::new())
}

/// `session/set_mode`: the agent mode of the session's next turns, confirmed with a
/// `current_mode_update` once the session has taken it.
pub async fn set_mode(
    door: &Door,
    cx: &ConnectionTo<Client>,
    req: &SetSessionModeRequest,
) -> Result<SetSessionModeResponse, Error> {
    let id = req.session_id.to_string();
    let mode = req.mode_id.to_string();
    door.manager.info(&id).map_err(session_error)?;
    if !AGENT_MODES.contains(&mode.as_str()) {
        return Err(invalid_params(format!(
            "unknown mode `{mode}`: use one of {}",
            AGENT_MODES.join(", ")
        )));
    }
    door.manager
        .set_agent_mode(&id, &mode)
        .await
        .map_err(session_error)?;
    // The session's actor takes the mode in its own time; answer once it has.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(2);
    while door.manager.info(&id).map_err(session_error)?.agent_mode != mode
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    cx.send_notification(SessionNotification::new(
        req.session_id.clone(),
        SessionUpdate::CurrentModeUpdate(CurrentModeUpdate::new(req.mode_id.clone())),
    ))?;
    Ok(SetSessionModeResponse::new())
}

/// `session/cancel`: cancels the session's running turn and its waiting prompts.
pub fn cancel(door: &Arc<Door>, session_id: &SessionId) {
    let id = session_id.to_string();
    if door.manager.info(&id).is_err() {
        return;
    }
    door.slot(&id).cancel();
    let door = door.clone();
    tokio::spawn(async move {
        if let Err(error) = door
            .manager
            .cancel_with(&id, Cancel::RunningAndQueued)
            .await
        {
            tracing::debug!(session = %id, %error, "cancel");
        }
    });
}
