//! The outbox: rows the store writes in the same transaction as the events they are about, so
//! that whatever must be told about an event (a webhook delivery) is recorded exactly when the
//! event is, and survives whatever the event survives (`kill -9`, a restart, a receiver that
//! is down for a day).
//!
//! Who wants which events is said by [`OutboxRoutes`]: the daemon's own endpoints for every
//! session and a session's own endpoints for its events, each with a set of event types. The
//! writer checks each event it commits against them (one atomic load per batch while nobody
//! subscribes; a bit test per event otherwise) and adds one [`NewOutboxRow`] per (event,
//! endpoint) that wants it.
//!
//! Rows are then *claimed* by a delivering process ([`Outbox::claim`]) with a lease, which is
//! safe with any number of processes on one store (SQLite serialises the claiming write,
//! Postgres claims with `FOR UPDATE SKIP LOCKED`); a lease that runs out (its holder died)
//! lets another process claim the row again, so every row is delivered at least once by the
//! whole fleet. Rows are never found by a "last id delivered" cursor: ids are not committed in
//! order on Postgres. A row carries its own copy of the event, so deleting a session does not
//! stop its deliveries.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde::Serialize;

use super::{StoreError, StoredEvent};
use crate::sync::RwLockExt;
use crate::universal::EVENT_TYPES;

/// A row waits for delivery (or for its next attempt).
pub const PENDING: &str = "pending";
/// A row was delivered (a 2xx answer).
pub const DELIVERED: &str = "delivered";
/// A row was given up (its retry horizon passed).
pub const FAILED: &str = "failed";

/// A set of event types, one bit per entry of [`EVENT_TYPES`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TypeMask(u16);

impl TypeMask {
    /// The set of the named types; an unknown name is returned as the error.
    pub fn from_names<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<Self, String> {
        let mut mask = 0u16;
        for name in names {
            match type_bit(name) {
                Some(bit) => mask |= bit,
                None => return Err(name.to_owned()),
            }
        }
        Ok(TypeMask(mask))
    }

    /// Whether the set holds `event_type`.
    pub fn contains(self, event_type: &str) -> bool {
        type_bit(event_type).is_some_and(|bit| self.0 & bit != 0)
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The names in the set, in [`EVENT_TYPES`] order.
    pub fn names(self) -> Vec<&'static str> {
        EVENT_TYPES
            .iter()
            .enumerate()
            .filter(|(i, _)| self.0 & (1 << i) != 0)
            .map(|(_, t)| *t)
            .collect()
    }
}

fn type_bit(event_type: &str) -> Option<u16> {
    EVENT_TYPES
        .iter()
        .position(|t| *t == event_type)
        .map(|i| 1 << i)
}

/// An endpoint that wants some event types.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxRoute {
    /// The endpoint's URL.
    pub endpoint: Arc<str>,
    /// True for an endpoint a session named at its creation, false for the daemon's own.
    pub session_scoped: bool,
    pub types: TypeMask,
}

/// Who wants which events: read by the store's writer at every commit, changed rarely (at
/// start, when a session with endpoints of its own is created, restored or deleted).
#[derive(Default)]
pub struct OutboxRoutes {
    /// True once any route exists: the writer's whole cost while nobody subscribes.
    any: AtomicBool,
    daemon: RwLock<Arc<[OutboxRoute]>>,
    sessions: RwLock<HashMap<String, Arc<[OutboxRoute]>>>,
    /// Told after every commit that wrote rows, so a dispatcher in this process need not
    /// wait for its next poll.
    committed: tokio::sync::Notify,
}

impl std::fmt::Debug for OutboxRoutes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutboxRoutes")
            .field("any", &self.any.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl OutboxRoutes {
    /// Sets the daemon's endpoints (for every session's events).
    pub fn set_daemon(&self, routes: Vec<OutboxRoute>) {
        *self.daemon.write_unpoisoned() = routes.into();
        self.refresh();
    }

    /// Sets a session's own endpoints (before its first event is appended).
    pub fn set_session(&self, session_id: &str, routes: Vec<OutboxRoute>) {
        let mut sessions = self.sessions.write_unpoisoned();
        if routes.is_empty() {
            sessions.remove(session_id);
        } else {
            sessions.insert(session_id.to_owned(), routes.into());
        }
        drop(sessions);
        self.refresh();
    }

    fn refresh(&self) {
        let daemon = !self.daemon.read_unpoisoned().is_empty();
        let sessions = !self.sessions.read_unpoisoned().is_empty();
        self.any.store(daemon || sessions, Ordering::Release);
    }

    /// Whether any route exists (one atomic load).
    pub(crate) fn active(&self) -> bool {
        self.any.load(Ordering::Acquire)
    }

    /// Waits until rows were committed (or a poll interval passes: see the dispatcher).
    pub fn committed(&self) -> tokio::sync::futures::Notified<'_> {
        self.committed.notified()
    }

    /// Wakes a waiting dispatcher: rows were committed.
    pub(crate) fn notify(&self) {
        self.committed.notify_one();
    }

    /// Adds to `out` a row per (event, endpoint) that wants it, for events of `session_id`.
    pub(crate) fn rows_for(
        &self,
        session_id: &str,
        events: &[StoredEvent],
        now_ms: u64,
        out: &mut Vec<NewOutboxRow>,
    ) {
        if !self.active() {
            return;
        }
        let daemon = self.daemon.read_unpoisoned().clone();
        let own = self.sessions.read_unpoisoned().get(session_id).cloned();
        let routes = daemon.iter().chain(own.iter().flat_map(|r| r.iter()));
        let mut wanted = 0u16;
        for route in routes.clone() {
            wanted |= route.types.0;
        }
        if wanted == 0 {
            return;
        }
        for event in events {
            let Some(bit) = type_bit(event.event_type) else {
                continue;
            };
            if wanted & bit == 0 {
                continue;
            }
            for route in routes.clone().filter(|r| r.types.0 & bit != 0) {
                out.push(NewOutboxRow {
                    webhook_id: format!("msg_{}", uuid::Uuid::new_v4().simple()),
                    session_id: session_id.to_owned(),
                    sequence: event.sequence,
                    event_type: event.event_type,
                    endpoint: route.endpoint.clone(),
                    session_scoped: route.session_scoped,
                    payload: event.json.to_string(),
                    created_at: now_ms,
                });
            }
        }
    }
}

/// A row to insert with the events it is about.
#[derive(Debug, Clone)]
pub struct NewOutboxRow {
    /// The delivery's id (`webhook-id`), made once here: stable across retries and restarts.
    pub webhook_id: String,
    pub session_id: String,
    pub sequence: u64,
    pub event_type: &'static str,
    pub endpoint: Arc<str>,
    pub session_scoped: bool,
    /// The event's compact JSON (without its raw line).
    pub payload: String,
    /// Epoch milliseconds.
    pub created_at: u64,
}

/// A row as stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OutboxRow {
    pub id: i64,
    pub webhook_id: String,
    pub session_id: String,
    pub sequence: u64,
    pub event_type: String,
    pub endpoint: String,
    pub session_scoped: bool,
    pub payload: String,
    /// [`PENDING`], [`DELIVERED`] or [`FAILED`].
    pub status: String,
    pub attempts: u32,
    /// Epoch milliseconds.
    pub created_at: u64,
    /// When the next attempt is due (epoch ms); for a settled row, when it was settled.
    pub next_attempt_at: u64,
    /// The HTTP status of the last attempt, when it got one.
    pub last_status: Option<u16>,
    /// Why the last attempt failed (never a secret: no header, no body sent).
    pub last_error: Option<String>,
}

/// What a process claims.
#[derive(Debug, Clone)]
pub struct Claim<'a> {
    /// The claiming process (its instance id).
    pub owner: &'a str,
    /// Epoch milliseconds.
    pub now: u64,
    /// How long the claim holds if the process says nothing more.
    pub lease: Duration,
    pub limit: usize,
    /// The daemon endpoints this process delivers to.
    pub endpoints: &'a [String],
    /// Whether it delivers to endpoints sessions named.
    pub session_scoped: bool,
}

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Settlement {
    Delivered {
        status: u16,
    },
    /// Try again at `at` (epoch ms).
    Retry {
        at: u64,
        status: Option<u16>,
        error: String,
    },
    /// Given up.
    Failed {
        status: Option<u16>,
        error: String,
    },
}

impl Settlement {
    /// The row's status after it.
    pub fn status(&self) -> &'static str {
        match self {
            Settlement::Delivered { .. } => DELIVERED,
            Settlement::Retry { .. } => PENDING,
            Settlement::Failed { .. } => FAILED,
        }
    }

    /// (when next due or settled, HTTP status, error).
    pub(crate) fn columns(&self, now: u64) -> (u64, Option<u16>, Option<&str>) {
        match self {
            Settlement::Delivered { status } => (now, Some(*status), None),
            Settlement::Retry { at, status, error } => (*at, *status, Some(error)),
            Settlement::Failed { status, error } => (now, *status, Some(error)),
        }
    }
}

/// Which rows a listing wants, newest first.
#[derive(Debug, Clone, Default)]
pub struct OutboxQuery {
    pub status: Option<String>,
    pub session_id: Option<String>,
    /// Only rows with an id below this (the previous page's last).
    pub before: Option<i64>,
    pub limit: usize,
}

/// The outbox of a store: claiming, settling and listing rows. Every call may block on the
/// database: call it from a blocking thread.
pub trait Outbox: Send + Sync {
    /// The routes the store's writer applies.
    fn routes(&self) -> &Arc<OutboxRoutes>;

    /// Claims up to `claim.limit` pending rows that are due and not leased (or whose lease
    /// ran out), leasing them to `claim.owner`.
    fn claim(&self, claim: &Claim<'_>) -> Result<Vec<OutboxRow>, StoreError>;

    /// Records an attempt's outcome, if `owner` still holds the row's lease. Returns whether
    /// it did.
    fn settle(
        &self,
        id: i64,
        owner: &str,
        now: u64,
        settlement: &Settlement,
    ) -> Result<bool, StoreError>;

    /// Gives up every lease `owner` holds (at shutdown, and at start for leases a killed
    /// process of the same instance left behind). Returns how many.
    fn release(&self, owner: &str) -> Result<u64, StoreError>;

    /// The processes that hold claims now (to release those of engines that died: see the
    /// dispatcher).
    fn lease_owners(&self) -> Result<Vec<String>, StoreError>;

    /// Rows, newest first.
    fn list(&self, query: &OutboxQuery) -> Result<Vec<OutboxRow>, StoreError>;

    /// How many rows are pending.
    fn pending(&self) -> Result<u64, StoreError>;
}

/// Milliseconds since the epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(sequence: u64, event_type: &'static str) -> StoredEvent {
        StoredEvent {
            sequence,
            event_type,
            json: format!("{{\"sequence\":{sequence}}}").into(),
            raw: None,
        }
    }

    fn route(endpoint: &str, types: &[&str], session_scoped: bool) -> OutboxRoute {
        OutboxRoute {
            endpoint: endpoint.into(),
            session_scoped,
            types: TypeMask::from_names(types.iter().copied()).unwrap(),
        }
    }

    #[test]
    fn rows_are_made_per_wanted_event_and_endpoint() {
        let routes = OutboxRoutes::default();
        let events = [
            event(1, "session.started"),
            event(2, "turn.ended"),
            event(3, "question.requested"),
        ];
        let mut out = Vec::new();
        routes.rows_for("s", &events, 5, &mut out);
        assert!(out.is_empty(), "no route, no row");
        routes.set_daemon(vec![
            route("http://a", &["turn.ended"], false),
            route("http://b", &["turn.ended", "question.requested"], false),
        ]);
        routes.set_session("s", vec![route("http://c", &["session.started"], true)]);
        routes.rows_for("s", &events, 5, &mut out);
        let made: Vec<(u64, &str)> = out.iter().map(|r| (r.sequence, &*r.endpoint)).collect();
        assert_eq!(
            made,
            [
                (1, "http://c"),
                (2, "http://a"),
                (2, "http://b"),
                (3, "http://b")
            ]
        );
        assert!(out[0].session_scoped && !out[1].session_scoped);
        assert_ne!(out[1].webhook_id, out[2].webhook_id);
        assert!(out[1].webhook_id.starts_with("msg_"));
        out.clear();
        routes.rows_for("other", &events, 5, &mut out);
        assert_eq!(
            out.len(),
            3,
            "another session gets the daemon's routes only"
        );
    }

    #[test]
    fn type_masks_name_known_types_only() {
        let mask = TypeMask::from_names(["turn.ended", "session.ended"]).unwrap();
        assert!(mask.contains("turn.ended") && !mask.contains("item.delta"));
        assert_eq!(mask.names(), ["session.ended", "turn.ended"]);
        assert_eq!(
            TypeMask::from_names(["turn.ended", "turn.over"]),
            Err("turn.over".to_owned())
        );
    }
}
