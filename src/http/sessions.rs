//! `/v1/sessions…`: create, list, inspect, message, cancel and terminate sessions.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};

use super::events::{turn_stream, RawQuery};
use super::extract::{ApiJson, ApiPath, ApiQuery};
use super::problem::Problem;
use super::AppState;
use crate::session::TurnImage;
use crate::session::{CreateRequest, SessionInfo, SessionStatus, UserMessage};

/// `POST /v1/sessions/{id}` answer.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreateSessionResponse {
    pub healthy: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub native_session_id: Option<String>,
}

#[utoipa::path(post, path = "/v1/sessions/{id}", tag = "sessions",
    params(("id" = String, Path)), request_body = CreateRequest,
    responses((status = 200, body = CreateSessionResponse), (status = 400, body = Problem),
        (status = 404, body = Problem), (status = 409, body = Problem)))]
pub async fn create_session(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
    ApiJson(req): ApiJson<CreateRequest>,
) -> Result<Json<CreateSessionResponse>, Problem> {
    let info = state
        .manager
        .create(&id, req)
        .await
        .map_err(|e| Problem::from(e).session(&id))?;
    Ok(Json(CreateSessionResponse {
        healthy: true,
        native_session_id: info.native_session_id,
    }))
}

/// `GET /v1/sessions` answer.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionList {
    pub sessions: Vec<SessionInfo>,
    /// (ours) Present when more sessions follow: pass it as `cursor` for the next page.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub next_cursor: Option<String>,
}

/// `GET /v1/sessions` query: without any of these, every session (as 0.1.x clients expect).
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// (ours) At most this many sessions (1–1000).
    pub limit: Option<usize>,
    /// (ours) Continue after the page that returned this `nextCursor`.
    pub cursor: Option<String>,
    /// (ours) Only sessions in these states, comma-separated (`idle`, `running`,
    /// `awaiting_input`, `ended`, `failed`).
    pub status: Option<String>,
    /// (ours) Only sessions held by this engine (an `engineId` of `GET /v1/engines`); empty:
    /// only sessions no engine holds.
    pub owner: Option<String>,
}

/// Largest page `limit` accepts.
const MAX_PAGE: usize = 1000;
/// The page size when a cursor is given without a limit.
const DEFAULT_PAGE: usize = 100;

#[utoipa::path(get, path = "/v1/sessions", tag = "sessions", params(ListQuery),
    responses((status = 200, body = SessionList), (status = 400, body = Problem)))]
pub async fn list_sessions(
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> Result<Json<SessionList>, Problem> {
    let limit = match (q.limit, &q.cursor) {
        (Some(n), _) if n == 0 || n > MAX_PAGE => {
            return Err(Problem::invalid(format!(
                "limit must be between 1 and {MAX_PAGE}"
            )))
        }
        (Some(n), _) => n,
        (None, Some(_)) => DEFAULT_PAGE,
        (None, None) => usize::MAX,
    };
    let mut statuses = Vec::new();
    for name in q.status.iter().flat_map(|s| s.split(',')) {
        let name = name.trim();
        let status = SessionStatus::parse(name).ok_or_else(|| {
            Problem::invalid(format!(
                "unknown status `{name}` (known: idle, running, awaiting_input, ended, failed)"
            ))
        })?;
        statuses.push(status);
    }
    let (sessions, next_cursor) =
        state
            .manager
            .page_owned_by(limit, q.cursor.as_deref(), &statuses, q.owner.as_deref())?;
    Ok(Json(SessionList {
        sessions,
        next_cursor,
    }))
}

/// `DELETE /v1/sessions/{id}`: ends the session if it runs and removes it and its events.
#[utoipa::path(delete, path = "/v1/sessions/{id}", tag = "sessions",
    params(("id" = String, Path)),
    responses((status = 204, description = "Deleted"), (status = 404, body = Problem),
        (status = 503, body = Problem)))]
pub async fn delete_session(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<StatusCode, Problem> {
    state
        .manager
        .delete(&id)
        .await
        .map_err(|e| Problem::from(e).session(&id))?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(get, path = "/v1/sessions/{id}", tag = "sessions",
    params(("id" = String, Path)),
    responses((status = 200, body = SessionInfo), (status = 404, body = Problem)))]
pub async fn get_session(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<SessionInfo>, Problem> {
    Ok(Json(state.manager.info(&id)?))
}

/// A file attached to a message.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Attachment {
    pub path: String,
    pub mime: Option<String>,
    pub filename: Option<String>,
}

/// `POST /v1/sessions/{id}/messages[/stream]` body.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct MessageRequest {
    pub message: String,
    #[serde(default)]
    pub attachments: Vec<Attachment>,
}

impl MessageRequest {
    /// What the agent gets: the message, image attachments as images for the model, and the
    /// other attached files' paths after the text.
    fn prompt(self) -> Result<UserMessage, Problem> {
        if self.message.trim().is_empty() && self.attachments.is_empty() {
            return Err(Problem::invalid("`message` must not be empty"));
        }
        let mut prompt = self.message;
        let (images, files): (Vec<Attachment>, Vec<Attachment>) = self
            .attachments
            .into_iter()
            .partition(|a| image_type(a).is_some());
        let images = images
            .into_iter()
            .filter_map(|a| {
                let mime = image_type(&a)?;
                Some(TurnImage { path: a.path, mime })
            })
            .collect();
        if !files.is_empty() {
            prompt.push_str("\n\nAttached files:");
            for a in &files {
                prompt.push_str("\n- ");
                prompt.push_str(&a.path);
                let about: Vec<&str> = [a.filename.as_deref(), a.mime.as_deref()]
                    .into_iter()
                    .flatten()
                    .collect();
                if !about.is_empty() {
                    prompt.push_str(&format!(" ({})", about.join(", ")));
                }
            }
        }
        Ok(UserMessage {
            text: prompt,
            images,
        })
    }
}

/// The media type of an attachment that is an image (by its `mime`, else its extension).
fn image_type(a: &Attachment) -> Option<String> {
    if let Some(mime) = &a.mime {
        return mime.starts_with("image/").then(|| mime.clone());
    }
    let name = a
        .filename
        .as_deref()
        .unwrap_or(&a.path)
        .to_ascii_lowercase();
    let ext = name.rsplit_once('.')?.1;
    let mime = match ext {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        _ => return None,
    };
    Some(mime.to_owned())
}

#[utoipa::path(post, path = "/v1/sessions/{id}/messages", tag = "sessions",
    params(("id" = String, Path)), request_body = MessageRequest,
    responses((status = 204), (status = 400, body = Problem), (status = 404, body = Problem),
        (status = 500, body = Problem)))]
pub async fn post_message(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<MessageRequest>,
) -> Result<StatusCode, Problem> {
    let prompt = body.prompt()?;
    state
        .manager
        .send_message(&id, prompt)
        .await
        .map_err(|e| Problem::from(e).session(&id))?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(post, path = "/v1/sessions/{id}/messages/stream", tag = "sessions",
    params(("id" = String, Path), RawQuery), request_body = MessageRequest,
    responses((status = 200, description = "SSE of this turn's events; closes after turn.ended, session.ended, question.requested or permission.requested", content_type = "text/event-stream"),
        (status = 400, body = Problem), (status = 404, body = Problem)))]
pub async fn post_message_stream(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(query): ApiQuery<RawQuery>,
    ApiJson(body): ApiJson<MessageRequest>,
) -> Result<Response, Problem> {
    let prompt = body.prompt()?;
    let first = state
        .manager
        .send_message_and_wait(&id, prompt)
        .await
        .map_err(|e| Problem::from(e).session(&id))?;
    Ok(turn_stream(&state, &id, first - 1, query.include_raw())
        .map_err(|e| Problem::from(e).session(&id))?
        .into_response())
}

#[utoipa::path(post, path = "/v1/sessions/{id}/terminate", tag = "sessions",
    params(("id" = String, Path)),
    responses((status = 204), (status = 404, body = Problem)))]
pub async fn terminate(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<StatusCode, Problem> {
    state.manager.terminate(&id).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(post, path = "/v1/sessions/{id}/cancel", tag = "sessions",
    params(("id" = String, Path)),
    responses((status = 204), (status = 404, body = Problem)))]
pub async fn cancel(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<StatusCode, Problem> {
    state.manager.cancel(&id).await?;
    Ok(StatusCode::NO_CONTENT)
}
