//! What the engines sharing one store (several processes on one SQLite file, a fleet of daemons
//! on one Postgres) need from it besides the log: who is alive, who owns which session, the
//! inbox that carries a request to a session's owner, and a signal that something changed.
//!
//! * **Engines and leases.** Each engine process registers itself ([`Coordination::register`])
//!   and holds the returned [`Lease`] for its life. The lease ends when the process ends,
//!   however it ends: SQLite uses an `flock` on a per-engine lock file beside the database (the
//!   kernel releases it at exit, `kill -9` included); Postgres a heartbeat row that expires.
//! * **Owners.** A session's record names the engine that runs its turn (`owner`), or nobody
//!   (`""`) while it is idle. Ownership changes only by compare-and-swap ([`Coordination::claim`]):
//!   of several engines claiming one session, exactly one wins.
//! * **The inbox.** A request for a session another live engine owns is written here; that
//!   engine takes it (once: a request is taken at most once), executes it and writes the reply.
//!   Requests are rows: they survive restarts.
//! * **Changes.** [`Coordination::changes`] moves whenever any engine committed something, so
//!   inbox readers and repliers wait instead of polling the tables; the store also raises the
//!   visible watermark of logs other engines append to, so followers in any process see them.

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::{SessionRecord, StoreError};

/// An engine process working on the store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineEntry {
    /// Unique per process start.
    pub engine_id: String,
    /// The data directory's instance id (a fleet's sandbox).
    pub instance_id: String,
    pub pid: u32,
    /// The subcommand it runs (`server`, `acp`, `exec`, …).
    pub command: String,
    /// The `/v1` base URL, for a server once it listens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Epoch milliseconds.
    pub started_at: u64,
}

/// An engine's registration, held for the engine's life; dropping it unregisters.
pub trait Lease: Send + Sync {
    /// Records the URL the engine serves (a terminal client can use it).
    fn announce_url(&self, url: &str) -> Result<(), StoreError>;
}

/// A request in the inbox.
#[derive(Debug, Clone, PartialEq)]
pub struct InboxRequest {
    pub id: u64,
    pub session_id: String,
    /// The request, as the session layer wrote it.
    pub body: serde_json::Value,
}

/// Where an inbox request is.
#[derive(Debug, Clone, PartialEq)]
pub enum InboxState {
    /// Waiting for the session's owner.
    Pending,
    /// Taken by an owner, being executed.
    Taken,
    /// Executed; the owner's reply.
    Done(serde_json::Value),
    /// Withdrawn by its sender before anyone took it.
    Withdrawn,
    /// No such request (deleted with its session).
    Gone,
}

/// Which sessions a page of the list holds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SessionQuery {
    pub limit: usize,
    /// After this position (`created_at`, `session_id`) in newest-first order.
    pub before: Option<(u64, String)>,
    /// Only sessions in one of these record statuses (any when empty).
    pub statuses: Vec<String>,
    /// Only sessions this engine owns (`Some("")`: owned by nobody).
    pub owner: Option<String>,
}

/// The shared-store side of [`super::EventStore`].
pub trait Coordination: Send + Sync {
    /// Registers an engine: it is alive while the returned lease is held.
    fn register(&self, engine: &EngineEntry) -> Result<Box<dyn Lease>, StoreError>;

    /// True while engine `engine_id` holds its lease. An engine found dead is forgotten.
    fn engine_alive(&self, engine_id: &str) -> Result<bool, StoreError>;

    /// The engines alive now.
    fn engines(&self) -> Result<Vec<EngineEntry>, StoreError>;

    /// Sets session `session_id`'s owner to `to` if it is `from` now (compare-and-swap).
    /// Returns whether it did; false also for an unknown session.
    fn claim(&self, session_id: &str, from: &str, to: &str) -> Result<bool, StoreError>;

    /// Every session that has an owner, with it.
    fn owned_sessions(&self) -> Result<Vec<(String, String)>, StoreError>;

    /// One session's record as stored now (`None`: no such session).
    fn load_session(&self, session_id: &str) -> Result<Option<SessionRecord>, StoreError>;

    /// A page of session records, newest first.
    fn query_sessions(&self, query: &SessionQuery) -> Result<Vec<SessionRecord>, StoreError>;

    /// Writes a request for the owner of `session_id`; returns its id.
    fn inbox_send(&self, session_id: &str, body: &serde_json::Value) -> Result<u64, StoreError>;

    /// Takes the pending requests of the sessions `owner` owns (each is taken once, by one
    /// engine), oldest first.
    fn inbox_take(&self, owner: &str) -> Result<Vec<InboxRequest>, StoreError>;

    /// Records the reply to a taken request.
    fn inbox_answer(&self, id: u64, reply: &serde_json::Value) -> Result<(), StoreError>;

    /// Where request `id` is (its reply once done).
    fn inbox_state(&self, id: u64) -> Result<InboxState, StoreError>;

    /// Withdraws a request nobody took yet; false when it was taken (or is gone).
    fn inbox_withdraw(&self, id: u64) -> Result<bool, StoreError>;

    /// Removes a finished request (its sender read the reply).
    fn inbox_forget(&self, id: u64) -> Result<(), StoreError>;

    /// A receiver that changes whenever an engine (this one included) committed something.
    fn changes(&self) -> watch::Receiver<u64>;
}
