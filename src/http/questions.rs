//! Answering the agent: question replies and rejections, permission replies.

use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;

use super::extract::{ApiJson, ApiPath, OptionalJson};
use super::problem::Problem;
use super::AppState;

/// `POST …/questions/{qid}/reply` body: one list of answers per question; a value that
/// matches no option label is free text.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct QuestionReply {
    pub answers: Vec<Vec<String>>,
}

#[utoipa::path(post, path = "/v1/sessions/{id}/questions/{question_id}/reply", tag = "questions",
    params(("id" = String, Path), ("question_id" = String, Path)), request_body = QuestionReply,
    responses((status = 204), (status = 400, body = Problem), (status = 404, body = Problem)))]
pub async fn reply(
    State(state): State<AppState>,
    ApiPath((id, question_id)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<QuestionReply>,
) -> Result<StatusCode, Problem> {
    state
        .manager
        .answer(&id, &question_id, body.answers)
        .await
        .map_err(|e| Problem::from(e).session(&id))?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(post, path = "/v1/sessions/{id}/questions/{question_id}/reject", tag = "questions",
    params(("id" = String, Path), ("question_id" = String, Path)),
    responses((status = 204), (status = 400, body = Problem), (status = 404, body = Problem)))]
pub async fn reject(
    State(state): State<AppState>,
    ApiPath((id, question_id)): ApiPath<(String, String)>,
) -> Result<StatusCode, Problem> {
    state
        .manager
        .reject(&id, &question_id)
        .await
        .map_err(|e| Problem::from(e).session(&id))?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST …/permissions/{pid}/reply` body.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
pub struct PermissionReply {
    /// `once`, `always` or `reject`.
    pub reply: Option<String>,
}

#[utoipa::path(post, path = "/v1/sessions/{id}/permissions/{permission_id}/reply", tag = "questions",
    params(("id" = String, Path), ("permission_id" = String, Path)), request_body = PermissionReply,
    responses((status = 204), (status = 400, body = Problem), (status = 404, body = Problem)))]
pub async fn permission_reply(
    State(state): State<AppState>,
    ApiPath((id, permission_id)): ApiPath<(String, String)>,
    OptionalJson(body): OptionalJson<PermissionReply>,
) -> Result<StatusCode, Problem> {
    state.manager.info(&id)?;
    let Some(answer) = body
        .reply
        .as_deref()
        .and_then(crate::session::PermissionReply::parse)
    else {
        return Err(Problem::invalid("`reply` must be `once`, `always` or `reject`").session(&id));
    };
    state
        .manager
        .reply_permission(&id, &permission_id, answer)
        .await
        .map_err(|e| Problem::from(e).session(&id))?;
    Ok(StatusCode::NO_CONTENT)
}
