//! `GET /v1/openapi.json`: the OpenAPI 3 document, generated from the route annotations.

use axum::Json;
use utoipa::OpenApi;

use super::{agents, events, questions, sessions};

/// The API description.
#[derive(OpenApi)]
#[openapi(
    info(title = "codebuffd", description = "The Codebuff coding agent behind the sandbox-agent /v1 universal-events API."),
    paths(
        super::health,
        agents::list_agents, agents::install_agent, agents::list_modes, agents::list_models,
        sessions::list_sessions, sessions::create_session, sessions::get_session,
        sessions::post_message, sessions::post_message_stream, sessions::terminate,
        sessions::cancel,
        events::poll_events, events::sse_events, events::transcript,
        questions::reply, questions::reject, questions::permission_reply,
        openapi_json,
    ),
    components(schemas(super::problem::Problem, super::Health)),
    tags((name = "agents"), (name = "sessions"), (name = "events"), (name = "questions"))
)]
pub struct ApiDoc;

#[utoipa::path(get, path = "/v1/openapi.json", tag = "agents",
    responses((status = 200, description = "This document", body = Object)))]
pub async fn openapi_json() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}
