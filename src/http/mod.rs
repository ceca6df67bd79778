//! The `/v1` HTTP API: routes, SSE, auth, CORS, body limits and problem documents
//! (`docs/http-api.md`), and the inspector page at `/ui/` (`ui.rs`, a `/v1` client). The only
//! HTTP server; the terminal client's `--url` transport (`term/remote.rs`) is an HTTP client of
//! it, and nothing below the doors knows about HTTP.

mod acp;
mod acp_ws;
mod agents;
mod auth;
mod engines;
mod events;
mod extract;
mod guard;
mod metrics;
mod openapi;
mod problem;
mod questions;
mod serve;
mod sessions;
mod ui;
mod webhooks;

use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::extract::State;
use axum::http::{HeaderValue, Method, StatusCode};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Serialize;
use tower_http::cors::{AllowOrigin, CorsLayer};

use crate::session::SessionManager;

pub use openapi::ApiDoc;
pub use problem::Problem;
pub use serve::{default_max_connections, serve, ServeOptions};
pub use ui::{
    file_names as inspector_files, total_bytes as inspector_bytes,
    CONTENT_SECURITY_POLICY as INSPECTOR_CSP,
};

/// What every handler gets.
#[derive(Clone)]
pub struct AppState {
    pub manager: Arc<SessionManager>,
    /// The required token; `None` = open.
    pub token: Option<Arc<str>>,
    /// Idle time between SSE keep-alive comments.
    pub keep_alive: std::time::Duration,
    /// The remote ACP servers (`/v1/acp`), for `GET /v1/agents`' `serverStatus`.
    pub acp_servers: Arc<crate::acp::remote::Servers>,
    /// The engine's webhooks (`GET /v1/webhooks/deliveries`, `/metrics`).
    pub webhooks: Option<Arc<crate::webhooks::Webhooks>>,
}

/// HTTP-level settings.
#[derive(Debug, Clone, Default)]
pub struct HttpOptions {
    pub token: Option<String>,
    pub cors_allow_origins: Vec<String>,
    /// Host names answered besides the loopback names and `bind` (`*`: any); see
    /// [`guard`].
    pub allowed_hosts: Vec<String>,
    /// The address the daemon listens on.
    pub bind: Option<std::net::IpAddr>,
    pub max_body_bytes: usize,
    pub sse_keep_alive: std::time::Duration,
    /// The Codebuff WebSocket door at `/v1/ws`.
    pub ws: crate::ws::WsOptions,
    /// How many ACP servers (`/v1/acp`, `/acp`) may live, and how long an idle one is kept.
    pub acp: crate::acp::remote::AcpLimits,
    /// The daemon's data directory: ACP servers (`/v1/acp`) keep their logs under it (`None`:
    /// a scratch directory of this process).
    pub data_dir: Option<std::path::PathBuf>,
    /// The engine's webhooks, for `GET /v1/webhooks/deliveries`.
    pub webhooks: Option<Arc<crate::webhooks::Webhooks>>,
    /// `GET /metrics` without the token.
    pub metrics_no_auth: bool,
}

/// `GET /v1/health`: `ok`, or `degraded` with the cause while the event log cannot be written
/// (503 then: sessions cannot take new turns until it can).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Health {
    /// `ok` or `degraded`.
    #[schema(schema_with = openapi::health_status)]
    pub status: &'static str,
    /// Why the daemon is degraded.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub cause: Option<String>,
}

#[utoipa::path(get, path = "/v1/health", tag = "agents",
    responses((status = 200, body = Health), (status = 503, body = Health)))]
pub async fn health(State(state): State<AppState>) -> (StatusCode, Json<Health>) {
    match state.manager.store_trouble() {
        None => (
            StatusCode::OK,
            Json(Health {
                status: "ok",
                cause: None,
            }),
        ),
        Some(cause) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(Health {
                status: "degraded",
                cause: Some(format!("the event log cannot be written: {cause}")),
            }),
        ),
    }
}

async fn not_found() -> Problem {
    Problem::new("not_found", StatusCode::NOT_FOUND, "no such route")
}

async fn method_not_allowed() -> Problem {
    Problem::new(
        "method_not_allowed",
        StatusCode::METHOD_NOT_ALLOWED,
        "this route does not take that method",
    )
}

/// The whole API.
pub fn router(manager: Arc<SessionManager>, options: &HttpOptions) -> Router {
    let data_dir = options.data_dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("codebuffd-acp-{}", std::process::id()))
    });
    let state = AppState {
        acp_servers: crate::acp::remote::Servers::start(manager.clone(), &data_dir, options.acp),
        manager,
        token: options.token.as_deref().map(Arc::from),
        keep_alive: options.sse_keep_alive,
        webhooks: options.webhooks.clone(),
    };
    let s = "/v1/sessions/{id}";
    let acp_state = acp::AcpHttp {
        servers: state.acp_servers.clone(),
        keep_alive: options.sse_keep_alive,
        max_message_bytes: options.max_body_bytes.max(64 * 1024),
        heartbeat_timeout: options.ws.heartbeat_timeout,
    };
    let acp = acp::routes(acp_state.clone()).merge(acp_ws::route(acp_state));
    let open_metrics = Router::new()
        .route("/metrics", get(metrics::serve_metrics))
        .with_state(state.clone());
    let api = Router::new()
        .route("/v1/health", get(health))
        .route("/v1/webhooks/deliveries", get(webhooks::list_deliveries))
        .route("/v1/openapi.json", get(openapi::openapi_json))
        .route("/v1/agents", get(agents::list_agents))
        .route("/v1/agents/{agent}/install", post(agents::install_agent))
        .route("/v1/agents/{agent}/modes", get(agents::list_modes))
        .route("/v1/agents/{agent}/models", get(agents::list_models))
        .route("/v1/engines", get(engines::list_engines))
        .route("/v1/sessions", get(sessions::list_sessions))
        .route(
            s,
            post(sessions::create_session)
                .get(sessions::get_session)
                .delete(sessions::delete_session),
        )
        .route(&format!("{s}/messages"), post(sessions::post_message))
        .route(
            &format!("{s}/messages/stream"),
            post(sessions::post_message_stream),
        )
        .route(&format!("{s}/terminate"), post(sessions::terminate))
        .route(&format!("{s}/cancel"), post(sessions::cancel))
        .route(&format!("{s}/events"), get(events::poll_events))
        .route(&format!("{s}/events/sse"), get(events::sse_events))
        .route(&format!("{s}/events.jsonl"), get(events::transcript))
        .route(
            &format!("{s}/questions/{{question_id}}/reply"),
            post(questions::reply),
        )
        .route(
            &format!("{s}/questions/{{question_id}}/reject"),
            post(questions::reject),
        )
        .route(
            &format!("{s}/permissions/{{permission_id}}/reply"),
            post(questions::permission_reply),
        )
        .route(
            "/v1/ws",
            crate::ws::route(state.manager.clone(), &options.ws),
        )
        .merge(acp);
    // Behind the token unless `--metrics-no-auth` (then merged below, after the token check).
    let api = if options.metrics_no_auth {
        api
    } else {
        api.route("/metrics", get(metrics::serve_metrics))
    };
    let api = api
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(options.max_body_bytes))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::require_token,
        ))
        .with_state(state)
        // The inspector's files need no token (the page asks for it); the guard still applies.
        .merge(ui::routes());
    let api = if options.metrics_no_auth {
        api.merge(open_metrics)
    } else {
        api
    };
    let api = match cors(&options.cors_allow_origins) {
        Some(layer) => api.layer(layer),
        None => api,
    };
    let browser = guard::BrowserGuard::new(
        options.bind,
        &options.allowed_hosts,
        &options.cors_allow_origins,
        options.token.is_some(),
    );
    api.layer(axum::middleware::from_fn_with_state(browser, guard::guard))
        .layer(axum::middleware::from_fn(metrics::count_requests))
}

/// CORS for the configured origins; closed (no layer) when there are none.
fn cors(origins: &[String]) -> Option<CorsLayer> {
    if origins.is_empty() {
        return None;
    }
    let allow = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        AllowOrigin::list(origins.iter().filter_map(|o| HeaderValue::from_str(o).ok()))
    };
    Some(
        CorsLayer::new()
            .allow_origin(allow)
            .allow_methods([Method::GET, Method::POST, Method::DELETE, Method::OPTIONS])
            .allow_headers([
                axum::http::header::AUTHORIZATION,
                axum::http::header::CONTENT_TYPE,
                axum::http::HeaderName::from_static("last-event-id"),
            ]),
    )
}
