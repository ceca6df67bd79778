//! `GET /metrics`: the Prometheus text exposition (`docs/metrics.md`), behind the token like
//! `/v1` unless the daemon runs with `--metrics-no-auth`; and the count of every HTTP response
//! by its matched route template (never the raw path: ids would become label values).

use axum::extract::{MatchedPath, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::AppState;
use crate::metrics::{metrics, CONTENT_TYPE};

/// Serves the metrics, sampling the gauges the engine keeps first.
pub async fn serve_metrics(State(state): State<AppState>) -> Response {
    crate::session::observe::sample(&state.manager);
    if let Some(webhooks) = &state.webhooks {
        if let Some(pending) = webhooks.pending().await {
            metrics()
                .webhook_outbox_pending
                .set(i64::try_from(pending).unwrap_or(i64::MAX));
        }
    }
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], metrics().encode()).into_response()
}

/// Counts the response of every request by route template and status.
pub async fn count_requests(req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned());
    let response = next.run(req).await;
    metrics().http_request(
        route.as_deref().unwrap_or("unmatched"),
        response.status().as_u16(),
    );
    response
}
