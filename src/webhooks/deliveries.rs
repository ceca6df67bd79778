//! The deliveries as `GET /v1/webhooks/deliveries` shows them: what was sent where, how it
//! went, and when it is tried again. Never a secret: endpoints lose their credentials and
//! query, bodies and signatures are not shown.

use serde::Serialize;

use super::redact_url;
use crate::store::outbox::{OutboxQuery, OutboxRow};
use crate::store::EventStore;

/// The most deliveries one page holds.
pub const MAX_PAGE: usize = 500;

/// Which deliveries to list.
#[derive(Debug, Clone, Default)]
pub struct DeliveryQuery {
    /// `pending`, `delivered` or `failed`.
    pub status: Option<String>,
    pub session_id: Option<String>,
    /// Only deliveries older than this id (the last of the previous page).
    pub before: Option<i64>,
    pub limit: usize,
}

/// One delivery (of one event to one endpoint).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Delivery {
    /// The row's id in the outbox (order of recording; pass as `before` for the next page).
    pub id: i64,
    /// The `webhook-id` header: the same at every attempt.
    pub webhook_id: String,
    pub session_id: String,
    /// The event's sequence in the session's log.
    pub sequence: u64,
    /// The event's type.
    #[serde(rename = "type")]
    pub event_type: String,
    /// The endpoint, without credentials or query.
    pub endpoint: String,
    /// True when the session named the endpoint.
    pub session_scoped: bool,
    /// `pending`, `delivered` or `failed` (given up after the retry horizon).
    pub status: String,
    /// Attempts made.
    pub attempts: u32,
    /// When the event was recorded (epoch ms).
    pub created_at: u64,
    /// For a pending delivery, when it is tried next; otherwise when it was settled (epoch ms).
    pub next_attempt_at: u64,
    /// The HTTP status of the last attempt, when there was an answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub last_status: Option<u16>,
    /// Why the last attempt failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub last_error: Option<String>,
}

impl From<OutboxRow> for Delivery {
    fn from(r: OutboxRow) -> Self {
        Delivery {
            id: r.id,
            webhook_id: r.webhook_id,
            session_id: r.session_id,
            sequence: r.sequence,
            event_type: r.event_type,
            endpoint: redact_url(&r.endpoint),
            session_scoped: r.session_scoped,
            status: r.status,
            attempts: r.attempts,
            created_at: r.created_at,
            next_attempt_at: r.next_attempt_at,
            last_status: r.last_status,
            last_error: r.last_error,
        }
    }
}

/// Lists deliveries (blocking: call it from a blocking thread).
pub(super) fn list(store: &dyn EventStore, query: &DeliveryQuery) -> Result<Vec<Delivery>, String> {
    let Some(outbox) = store.outbox() else {
        return Ok(Vec::new());
    };
    let rows = outbox
        .list(&OutboxQuery {
            status: query.status.clone(),
            session_id: query.session_id.clone(),
            before: query.before,
            limit: query.limit.clamp(1, MAX_PAGE),
        })
        .map_err(|e| e.to_string())?;
    Ok(rows.into_iter().map(Delivery::from).collect())
}
