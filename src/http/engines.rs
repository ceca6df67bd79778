//! `GET /v1/engines`: the codebuffd processes sharing this daemon's log (see
//! `session/engines.rs`).

use axum::extract::State;
use axum::Json;

use super::problem::Problem;
use super::AppState;
use crate::session::EngineList;

#[utoipa::path(get, path = "/v1/engines", tag = "sessions",
    responses((status = 200, body = EngineList), (status = 503, body = Problem)))]
pub async fn list_engines(State(state): State<AppState>) -> Result<Json<EngineList>, Problem> {
    // One indexed read, like the session list's.
    Ok(Json(EngineList {
        engines: state.manager.engines()?,
    }))
}
