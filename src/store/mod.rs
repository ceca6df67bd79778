//! The event log: every event the daemon emits is appended here before anyone sees it, and
//! polling, SSE replay, live SSE and turn streams all read it at their own cursor.
//!
//! One trait, [`EventStore`], with an in-memory implementation ([`MemoryStore`]) and two
//! durable ones on a shared batching core ([`SqliteStore`], the default, and [`PostgresStore`]
//! for fleets); [`open_store`] picks one from the `--store` spec.

mod batched;
mod coordination;
mod memory;
mod memory_outbox;
pub mod outbox;
mod postgres;
mod postgres_conn;
mod postgres_outbox;
mod postgres_shared;
mod row;
mod sqlite;
mod stored;
mod tail;
mod writer;

use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::universal::EventDraft;

pub use crate::universal::EventText;
pub use batched::{DurableStore, StoreOptions};
pub use coordination::{Coordination, EngineEntry, InboxRequest, InboxState, Lease, SessionQuery};
pub use memory::MemoryStore;
pub use postgres::PostgresStore;
pub use sqlite::SqliteStore;
pub use stored::{StoredEvent, StoredRaw};

/// The file name of the default SQLite database inside the data directory.
pub const DEFAULT_DATABASE: &str = "codebuffd.db";

/// Why a store operation failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    #[error("session `{0}` has no log")]
    UnknownSession(String),
    #[error("session `{0}` already has a log")]
    AlreadyExists(String),
    #[error("storage failure: {0}")]
    Backend(String),
    /// The store cannot write now (a full disk, a lost database); it tries again by itself.
    #[error("the event log cannot be written now: {0}")]
    Unavailable(String),
}

/// What the store keeps about a session besides its events: everything `SessionInfo` shows,
/// the settings it was created with, and the agent process of a running turn (for restart
/// recovery).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionRecord {
    pub session_id: String,
    pub agent: String,
    /// Epoch milliseconds.
    pub created_at: u64,
    pub updated_at: u64,
    /// The validated settings as JSON (never the session's API key).
    pub settings: serde_json::Value,
    pub native_session_id: Option<String>,
    /// `idle`, `running`, `awaiting_input` or `ended`.
    pub status: String,
    pub ended: bool,
    /// `terminated`, or the error that ended the session.
    pub end_reason: Option<String>,
    pub end_message: Option<String>,
    pub cost_credits: f64,
    pub turns: u64,
    pub event_count: u64,
    /// The agent process of the turn that is running, if one is.
    pub running: Option<RunningProcess>,
    /// The instance id of the daemon that runs the session (see [`crate::instance`]); empty
    /// in records written before sessions had owners. A daemon restores only its own sessions
    /// and unowned ones (which it then adopts), never another daemon's sharing the store.
    #[serde(default)]
    pub owner: String,
}

impl SessionRecord {
    /// The record of a session just created: idle, no events yet, nothing spent.
    pub fn new(
        session_id: &str,
        agent: &str,
        settings: serde_json::Value,
        owner: &str,
        created_at: u64,
    ) -> SessionRecord {
        SessionRecord {
            session_id: session_id.to_owned(),
            agent: agent.to_owned(),
            created_at,
            updated_at: created_at,
            settings,
            native_session_id: None,
            status: "idle".into(),
            ended: false,
            end_reason: None,
            end_message: None,
            cost_credits: 0.0,
            turns: 0,
            event_count: 0,
            running: None,
            owner: owner.to_owned(),
        }
    }
}

/// The agent process of a running turn, recorded so a restarted daemon can kill it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunningProcess {
    pub pid: u32,
    /// Its process group (the agent leads its own group, so this is its pid).
    pub pgid: u32,
    /// Its start time in clock ticks since boot (`/proc/<pid>/stat` field 22): a pid reused by
    /// another process has another start time.
    pub start_ticks: u64,
}

/// How a page is read ([`EventStore::read_page`]); [`PageRead::EXACT`] is [`EventStore::read`].
///
/// A reader far behind a flood reads the database, a page at a time (profile of 20 flooding
/// sessions: 13 % of the daemon's CPU): what it does not need there costs the most.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageRead {
    /// With the agent's raw lines (`StoredEvent::raw`). Without (a reader that never serves
    /// them: SSE without `includeRaw`, the ACP and WebSocket doors), the events may come with
    /// `raw: None`, and SQLite does not read them: a third of a streamed answer's chunk bytes.
    pub raw: bool,
    /// `limit` events whenever the log has them. Otherwise (a reader that streams page after
    /// page) a page read from the database may end early where one of its chunks ends (never
    /// empty while events follow), so that the next page does not read that chunk again.
    pub exact: bool,
}

impl PageRead {
    /// Every field of every event, `limit` of them when the log has them.
    pub const EXACT: PageRead = PageRead {
        raw: true,
        exact: true,
    };
}

/// The append-only, per-session event log, and the session records beside it.
///
/// A session has exactly one writer (its actor), so `append` is never raced for a session;
/// readers are many and never block the writer for long. Durable implementations batch their
/// writes but commit a batch holding `session.started`, `turn.ended` or `session.ended` before
/// any reader can see it (syncing the ends), and everything durable before `flush` returns.
pub trait EventStore: Send + Sync + 'static {
    /// The store's side of the engines that share it: leases, owners, the inbox, changes.
    fn coordination(&self) -> &dyn Coordination;

    /// Creates a session: its record and its empty log.
    fn create(&self, record: &SessionRecord) -> Result<(), StoreError>;

    /// Replaces a session's record (status, cost, running process …).
    fn put_session(&self, record: &SessionRecord) -> Result<(), StoreError>;

    /// Removes a session: its record and its whole log (durably, once this returns). Its
    /// subscribers see the log end. Returns false when there was no such session.
    fn delete_session(&self, session_id: &str) -> Result<bool, StoreError>;

    /// Every session's record (at start, for recovery), oldest first, whichever daemon owns it.
    fn load_sessions(&self) -> Result<Vec<SessionRecord>, StoreError>;

    /// Makes everything appended or put so far durable.
    fn flush(&self) -> Result<(), StoreError>;

    /// Appends drafts at the next sequences (dense, from 1), stamping them with `time` and the
    /// native session id; returns the last sequence. Subscribers are woken after the append.
    fn append(
        &self,
        session_id: &str,
        drafts: &mut Vec<EventDraft>,
        time: Arc<str>,
        native_session_id: Option<&str>,
    ) -> Result<u64, StoreError>;

    /// [`EventStore::append`] for an appender on an async runtime: never waits for the disk.
    /// When the batch must be committed before it is visible (it holds an event a session's
    /// status follows, see [`StoredEvent::awaits_commit`]), the answer carries a [`Durable`]
    /// to await instead; until it resolves readers do not see the batch. Stores that never wait
    /// (memory) need not override it.
    fn append_deferred(
        &self,
        session_id: &str,
        drafts: &mut Vec<EventDraft>,
        time: Arc<str>,
        native_session_id: Option<&str>,
    ) -> Result<Appended, StoreError> {
        let last = self.append(session_id, drafts, time, native_session_id)?;
        Ok(Appended {
            last,
            durable: None,
        })
    }

    /// Up to `limit` events with `sequence > after`, in order.
    fn read(
        &self,
        session_id: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StoreError>;

    /// [`EventStore::read`] as `how` asks: without the agent's raw lines, or a page that may
    /// end early (see [`PageRead`]). A store that keeps everything in memory reads the same.
    fn read_page(
        &self,
        session_id: &str,
        after: u64,
        limit: usize,
        _how: PageRead,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        self.read(session_id, after, limit)
    }

    /// The sequence of the last event (0 for an empty log).
    fn last_sequence(&self, session_id: &str) -> Result<u64, StoreError>;

    /// A receiver of the last sequence, changed after every append.
    fn subscribe(&self, session_id: &str) -> Result<watch::Receiver<u64>, StoreError>;

    /// For a store whose `append` can wait (a durable store bounds what is queued for its
    /// writer): a receiver of whether it has room. An appender on an async runtime waits for
    /// `true` first, so a full queue holds up its task, not a runtime thread.
    fn room(&self) -> Option<watch::Receiver<bool>> {
        None
    }

    /// For a store that can fail and recover (a durable one): a receiver of its health,
    /// `None` while it writes, else why it cannot (it is then *degraded*: appends and creates
    /// are refused with [`StoreError::Unavailable`] until it writes again, by itself).
    fn health(&self) -> Option<watch::Receiver<Option<Arc<str>>>> {
        None
    }

    /// The store's outbox (`store/outbox.rs`): rows written with the events they are about,
    /// for the webhook dispatcher. `None` for a store that keeps none.
    fn outbox(&self) -> Option<&dyn outbox::Outbox> {
        None
    }
}

/// What [`EventStore::append_deferred`] did: the last sequence appended, and the commit still
/// to await when the batch must be durable before anyone sees it.
pub struct Appended {
    pub last: u64,
    pub durable: Option<Durable>,
}

/// The commit of an appended batch, awaited by its appender (without parking a thread); the
/// batch becomes visible to readers when it resolves.
pub struct Durable(
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), StoreError>> + Send>>,
);

impl Durable {
    /// A commit that `wait` awaits.
    pub(crate) fn new(
        wait: impl std::future::Future<Output = Result<(), StoreError>> + Send + 'static,
    ) -> Durable {
        Durable(Box::pin(wait))
    }

    /// Waits for the commit; an error means the batch is not in the log.
    pub async fn wait(self) -> Result<(), StoreError> {
        self.0.await
    }
}

/// Waits until the log holds an event after `cursor`. Returns false when the log is gone.
pub async fn wait_after(rx: &mut watch::Receiver<u64>, cursor: u64) -> bool {
    rx.wait_for(|last| *last > cursor).await.is_ok()
}

/// Opens the store a `--store` spec names:
///
/// * `memory`: the in-memory log (nothing survives the process);
/// * `sqlite` (or empty): `<data_dir>/codebuffd.db`;
/// * `sqlite://PATH`: that SQLite file (`sqlite:///abs/path` or `sqlite://relative/path`);
/// * `postgres://…` or `postgresql://…`: a Postgres database (a libpq-style URL).
pub fn open_store(spec: &str, data_dir: &Path) -> Result<Arc<dyn EventStore>, StoreError> {
    open_store_with(spec, data_dir, StoreOptions::default())
}

/// [`open_store`] with explicit tuning of the durable stores.
pub fn open_store_with(
    spec: &str,
    data_dir: &Path,
    options: StoreOptions,
) -> Result<Arc<dyn EventStore>, StoreError> {
    let spec = spec.trim();
    if spec == "memory" {
        return Ok(Arc::new(MemoryStore::new()));
    }
    if spec.is_empty() || spec == "sqlite" {
        return Ok(Arc::new(SqliteStore::open_with(
            &data_dir.join(DEFAULT_DATABASE),
            options,
        )?));
    }
    if let Some(path) = spec.strip_prefix("sqlite://") {
        if path.is_empty() {
            return Err(StoreError::Backend(
                "the store `sqlite://` names no file: use sqlite://PATH".into(),
            ));
        }
        return Ok(Arc::new(SqliteStore::open_with(Path::new(path), options)?));
    }
    if spec.starts_with("postgres://") || spec.starts_with("postgresql://") {
        return Ok(Arc::new(PostgresStore::open_with(spec, options)?));
    }
    Err(StoreError::Backend(format!(
        "unknown store `{}`: use memory, sqlite, sqlite://PATH or postgres://USER@HOST/DB",
        redact_spec(spec)
    )))
}

/// A spec fit for an error message: any password in a URL is left out.
pub fn redact_spec(spec: &str) -> String {
    match (spec.find("://"), spec.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &spec[scheme + 3..at];
            match userinfo.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &spec[..scheme + 3], &spec[at..]),
                None => spec.to_owned(),
            }
        }
        _ => spec.to_owned(),
    }
}
