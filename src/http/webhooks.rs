//! `GET /v1/webhooks/deliveries`: the webhook deliveries, newest first (`docs/webhooks.md`).

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};

use super::extract::ApiQuery;
use super::problem::Problem;
use super::AppState;
use crate::webhooks::{Delivery, DeliveryQuery};

/// The default page size.
const DEFAULT_LIMIT: usize = 100;

/// The listing's query.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct DeliveriesQuery {
    /// `pending`, `delivered` or `failed`.
    pub status: Option<String>,
    /// Only this session's deliveries.
    pub session_id: Option<String>,
    /// Only deliveries with a smaller `id` (the last `id` of the previous page).
    pub before: Option<i64>,
    /// At most this many (1 to 500; default 100).
    pub limit: Option<usize>,
}

/// A page of deliveries.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeliveriesPage {
    pub deliveries: Vec<Delivery>,
    /// Pass as `before` for the next page; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub next_before: Option<i64>,
}

#[utoipa::path(get, path = "/v1/webhooks/deliveries", tag = "webhooks", params(DeliveriesQuery),
    responses((status = 200, body = DeliveriesPage), (status = 400, body = Problem)))]
pub async fn list_deliveries(
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<DeliveriesQuery>,
) -> Result<Json<DeliveriesPage>, Problem> {
    let limit = q.limit.unwrap_or(DEFAULT_LIMIT);
    if limit == 0 || limit > crate::webhooks::MAX_PAGE {
        return Err(Problem::new(
            "invalid_request",
            StatusCode::BAD_REQUEST,
            format!("limit must be 1 to {}", crate::webhooks::MAX_PAGE),
        ));
    }
    let Some(webhooks) = &state.webhooks else {
        return Ok(Json(DeliveriesPage {
            deliveries: Vec::new(),
            next_before: None,
        }));
    };
    let bad = q
        .status
        .as_deref()
        .is_some_and(|s| !["pending", "delivered", "failed"].contains(&s));
    if bad {
        return Err(Problem::new(
            "invalid_request",
            StatusCode::BAD_REQUEST,
            "status must be pending, delivered or failed",
        ));
    }
    let deliveries = webhooks
        .deliveries(DeliveryQuery {
            status: q.status,
            session_id: q.session_id,
            before: q.before,
            limit,
        })
        .await
        .map_err(|e| {
            Problem::new(
                "store_unavailable",
                StatusCode::SERVICE_UNAVAILABLE,
                format!("the deliveries cannot be read now: {e}"),
            )
        })?;
    let next_before = (deliveries.len() == limit)
        .then(|| deliveries.last().map(|d| d.id))
        .flatten();
    Ok(Json(DeliveriesPage {
        deliveries,
        next_before,
    }))
}
