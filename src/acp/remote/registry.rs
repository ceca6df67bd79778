//! The remote ACP servers of a daemon, by the clients' ids: created by the first envelope
//! posted with an agent, listed, deleted, and restored from their records when the daemon
//! starts again (`<data-dir>/acp-http/`).
//!
//! Bounded: at most `--max-acp-servers` live at once (a client asking for one more gets
//! [`RegistryError::TooMany`]; a restart restores the most recently created ones up to the cap
//! and retires the rest), and a server nobody posted to or read for `--acp-idle-timeout`, with
//! no request running, is retired by a sweep: deleted as by `DELETE` (its sessions end).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use super::record::{server_dirs, ServerRecord};
use super::restore::{self, Found, RestoreLock};
use super::server::Server;
use crate::session::AgentKind;
use crate::session::SessionManager;
use crate::sync::{LockExt, RwLockExt};

/// The directory of the servers' records and logs under the data directory.
pub const SERVERS_DIR: &str = "acp-http";

/// Why a server cannot be had.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("no ACP server `{0}`")]
    NotFound(String),
    #[error("the first message to an ACP server names its agent: add `?agent=codebuff` or `?agent=mock`")]
    AgentMissing,
    #[error("the ACP server `{id}` runs the agent `{existing}`, not `{requested}`")]
    Conflict {
        id: String,
        existing: &'static str,
        requested: &'static str,
    },
    #[error("cannot keep the ACP server's log: {0}")]
    Io(#[from] std::io::Error),
    #[error("the daemon already runs {0} ACP servers (--max-acp-servers): delete one (`DELETE /v1/acp/{{server_id}}`) or wait for idle ones to be retired")]
    TooMany(usize),
}

/// How many servers may live, and how long an idle one is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcpLimits {
    /// Live servers at most (`--max-acp-servers`).
    pub max_servers: usize,
    /// A server unused this long, with no request running, is retired (`--acp-idle-timeout`).
    pub idle_timeout: std::time::Duration,
}

impl Default for AcpLimits {
    fn default() -> Self {
        AcpLimits {
            max_servers: 64,
            idle_timeout: std::time::Duration::from_secs(3600),
        }
    }
}

/// What `GET /v1/acp` lists of a server.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerInfo {
    pub server_id: String,
    pub agent: &'static str,
    pub created_at_ms: i64,
}

/// The servers.
pub struct Servers {
    manager: Arc<SessionManager>,
    data_dir: PathBuf,
    root: PathBuf,
    servers: RwLock<HashMap<String, Arc<Server>>>,
    /// Held while a server is created, so two first posts make one server.
    creating: tokio::sync::Mutex<()>,
    /// The directories of records another live engine served when last looked at.
    waiting: Mutex<HashSet<PathBuf>>,
    /// Directories looked at and not to be served by this daemon, ever (a record of an id it
    /// serves already, one that cannot be read, one removed).
    passed_over: Mutex<HashSet<PathBuf>>,
    limits: AcpLimits,
}

impl Servers {
    /// The servers kept under `data_dir`, those recorded by an earlier run started again
    /// (within a tokio runtime: each gets its connection task). Records another live engine
    /// serves wait, and are taken up once it is gone ([`restore`]).
    pub fn start(manager: Arc<SessionManager>, data_dir: &Path, limits: AcpLimits) -> Arc<Servers> {
        let root = data_dir.join(SERVERS_DIR);
        let servers = Arc::new(Servers {
            manager,
            data_dir: data_dir.to_owned(),
            root,
            servers: RwLock::new(HashMap::new()),
            creating: tokio::sync::Mutex::new(()),
            waiting: Mutex::new(HashSet::new()),
            passed_over: Mutex::new(HashSet::new()),
            limits,
        });
        let dirs = server_dirs(&servers.root);
        if !dirs.is_empty() {
            servers.take_up(dirs, true);
        }
        let weak = Arc::downgrade(&servers);
        tokio::spawn(sweep(weak, limits.idle_timeout));
        servers
    }

    /// Serves the records in `dirs` whose engine is gone, up to the cap, and keeps those of a
    /// live engine waiting. `at_start` (a restart): the most recent first, and those over the
    /// cap are retired. Later (a dead engine's, taken up by a survivor) those over the cap are
    /// left as they are, as are records of an id this daemon serves already and records that
    /// cannot be served: none is looked at again.
    fn take_up(&self, dirs: Vec<PathBuf>, at_start: bool) {
        let _lock = match RestoreLock::take(&self.root) {
            Ok(lock) => lock,
            Err(error) => {
                tracing::warn!(%error, "cannot lock the ACP servers' records; none restored");
                return;
            }
        };
        let mut records = Vec::new();
        for dir in dirs {
            let waited = self.waiting.lock_unpoisoned().remove(&dir);
            match restore::classify(&self.manager, dir.clone()) {
                Found::Serve(dir, record) => records.push((dir, record)),
                Found::Wait(dir, record) => {
                    if !waited {
                        tracing::info!(server = %record.server_id, engine = record.engine.as_deref().unwrap_or_default(), "an ACP server a live engine serves: taken up once that engine is gone");
                    }
                    self.waiting.lock_unpoisoned().insert(dir);
                }
                Found::Forget(dir, record) => forget_websocket(&self.manager, &dir, record),
                Found::Nothing => {
                    self.passed_over.lock_unpoisoned().insert(dir);
                }
            }
        }
        if at_start {
            records.sort_by_key(|(_, r)| std::cmp::Reverse(r.created_at_ms));
        }
        for (dir, record) in records {
            // Ids are a daemon's: one this daemon serves already (its own server of that id,
            // or a newer record) leaves this record as it is, for the daemon it belongs to
            // when that one starts again.
            if self.get(&record.server_id).is_ok() {
                tracing::info!(server = %record.server_id, dir = %dir.display(), "a recorded ACP server of an id this daemon serves already: left as it is");
                self.passed_over.lock_unpoisoned().insert(dir);
                continue;
            }
            if self.servers.read_unpoisoned().len() >= self.limits.max_servers {
                if at_start {
                    tracing::warn!(server = %record.server_id, max = self.limits.max_servers, "more recorded ACP servers than --max-acp-servers: retired");
                    forget_websocket(&self.manager, &dir, record);
                } else {
                    tracing::warn!(server = %record.server_id, max = self.limits.max_servers, "a stopped engine's ACP server, and no room under --max-acp-servers: left as it is");
                    self.passed_over.lock_unpoisoned().insert(dir);
                }
                continue;
            }
            match Server::start(self.manager.clone(), &self.data_dir, dir.clone(), record) {
                Ok(server) => {
                    tracing::info!(server = %server.id, envelopes = server.log.last(), "ACP server restored");
                    self.servers
                        .write_unpoisoned()
                        .insert(server.id.clone(), server);
                }
                Err(error) => {
                    tracing::warn!(%error, dir = %dir.display(), "an ACP server's record cannot be read; skipped");
                    self.passed_over.lock_unpoisoned().insert(dir);
                }
            }
        }
    }

    /// Takes up the waiting records whose engine is gone now, and with `new_records` those
    /// other daemons recorded since this one last looked (on a blocking thread: it waits for
    /// the locks, as a first post creating a server would).
    fn take_up_waiting(&self, new_records: bool) {
        let _creating = self.creating.blocking_lock();
        let mut dirs: Vec<PathBuf> = self.waiting.lock_unpoisoned().iter().cloned().collect();
        if new_records {
            let found = server_dirs(&self.root);
            let served: HashSet<PathBuf> = self
                .servers
                .read_unpoisoned()
                .values()
                .map(|s| s.dir().to_owned())
                .collect();
            let passed_over = self.passed_over.lock_unpoisoned();
            let waiting = self.waiting.lock_unpoisoned();
            dirs.extend(found.into_iter().filter(|d| {
                !served.contains(d) && !passed_over.contains(d) && !waiting.contains(d)
            }));
        }
        if !dirs.is_empty() {
            self.take_up(dirs, false);
        }
    }

    fn has_waiting(&self) -> bool {
        !self.waiting.lock_unpoisoned().is_empty()
    }

    /// Retires the servers idle for `idle_timeout` (WebSocket servers end with their socket).
    async fn retire_idle(&self, idle_timeout: std::time::Duration) {
        let idle: Vec<String> = self
            .servers
            .read_unpoisoned()
            .values()
            .filter(|s| !s.websocket() && s.idle_for().is_some_and(|d| d >= idle_timeout))
            .map(|s| s.id.clone())
            .collect();
        for id in idle {
            tracing::info!(server = %id, "retiring an idle ACP server (--acp-idle-timeout)");
            self.delete(&id).await;
        }
    }

    /// The server `id`.
    pub fn get(&self, id: &str) -> Result<Arc<Server>, RegistryError> {
        self.servers
            .read_unpoisoned()
            .get(id)
            .cloned()
            .ok_or_else(|| RegistryError::NotFound(id.to_owned()))
    }

    /// The server `id`, created for `agent` when there is none (the agent must then be given;
    /// when given, it must be the server's).
    pub async fn get_or_create(
        &self,
        id: &str,
        agent: Option<AgentKind>,
    ) -> Result<Arc<Server>, RegistryError> {
        self.get_or_create_as(id, agent, false).await
    }

    /// A new server for a WebSocket connection (see [`ServerRecord::websocket`]).
    pub async fn create_for_websocket(
        &self,
        id: &str,
        agent: AgentKind,
    ) -> Result<Arc<Server>, RegistryError> {
        self.get_or_create_as(id, Some(agent), true).await
    }

    async fn get_or_create_as(
        &self,
        id: &str,
        agent: Option<AgentKind>,
        websocket: bool,
    ) -> Result<Arc<Server>, RegistryError> {
        let check = |server: Arc<Server>| match agent {
            Some(a) if a != server.agent => Err(RegistryError::Conflict {
                id: id.to_owned(),
                existing: server.agent.id(),
                requested: a.id(),
            }),
            _ => Ok(server),
        };
        if let Ok(server) = self.get(id) {
            return check(server);
        }
        let _creating = self.creating.lock().await;
        if let Ok(server) = self.get(id) {
            return check(server);
        }
        let agent = agent.ok_or(RegistryError::AgentMissing)?;
        let live = self.servers.read_unpoisoned().len();
        if live >= self.limits.max_servers {
            return Err(RegistryError::TooMany(self.limits.max_servers));
        }
        let dir = self.root.join(uuid::Uuid::new_v4().to_string());
        crate::private_files::create_dir_all(&dir)?;
        let record = ServerRecord {
            server_id: id.to_owned(),
            agent: agent.id().to_owned(),
            created_at_ms: now_ms(),
            initialize: None,
            sessions: Vec::new(),
            websocket,
            engine: None,
        };
        let server = Server::start(self.manager.clone(), &self.data_dir, dir, record)?;
        tracing::info!(server = %id, agent = agent.id(), "ACP server created");
        self.servers
            .write_unpoisoned()
            .insert(id.to_owned(), server.clone());
        Ok(server)
    }

    /// Deletes the server `id` (see [`Server::close`]) and its record and log. False when there
    /// was none.
    pub async fn delete(&self, id: &str) -> bool {
        let removed = self.servers.write_unpoisoned().remove(id);
        let Some(server) = removed else {
            return false;
        };
        server.close().await;
        if let Err(error) = std::fs::remove_dir_all(server.dir()) {
            tracing::warn!(%error, server = %id, "cannot remove an ACP server's log");
        }
        tracing::info!(server = %id, "ACP server deleted");
        true
    }

    /// The live servers, by id.
    pub fn list(&self) -> Vec<ServerInfo> {
        let mut list: Vec<ServerInfo> = self
            .servers
            .read_unpoisoned()
            .values()
            .map(|s| ServerInfo {
                server_id: s.id.clone(),
                agent: s.agent.id(),
                created_at_ms: s.created_at_ms,
            })
            .collect();
        list.sort_by(|a, b| a.server_id.cmp(&b.server_id));
        list
    }

    /// The number of live servers running `agent`, and when the oldest was created.
    pub fn of_agent(&self, agent: AgentKind) -> Vec<i64> {
        self.servers
            .read_unpoisoned()
            .values()
            .filter(|s| s.agent == agent)
            .map(|s| s.created_at_ms)
            .collect()
    }
}

/// Every so often (a quarter of the timeout, at least each second, at most each minute), the
/// servers idle that long are retired. Each second ([`LOOK_EVERY`]; the engine's reaper wakes
/// as often), while records wait for their engine to be gone or other engines share the store
/// (they may record servers in this data directory, and die), the records are looked at. Ends
/// with the registry.
async fn sweep(servers: std::sync::Weak<Servers>, idle_timeout: std::time::Duration) {
    let every = (idle_timeout / 4).clamp(
        std::time::Duration::from_secs(1),
        std::time::Duration::from_secs(60),
    );
    let mut retired = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(LOOK_EVERY).await;
        let Some(servers) = servers.upgrade() else {
            return;
        };
        let new_records = servers.manager.shares_the_store();
        if new_records || servers.has_waiting() {
            let looking = servers.clone();
            // File locks and reads: off the runtime's workers.
            let look = move || looking.take_up_waiting(new_records);
            let _ = tokio::task::spawn_blocking(look).await;
        }
        if retired.elapsed() >= every {
            retired = tokio::time::Instant::now();
            servers.retire_idle(idle_timeout).await;
        }
    }
}

/// How often the sweep wakes, and looks at the records when there is reason to.
const LOOK_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// A server that is not kept (a WebSocket connection's left by a daemon that stopped: its
/// socket is gone; or one over the cap at a restart): its sessions are ended (in the
/// background, once the engine runs) and its record removed.
fn forget_websocket(manager: &Arc<SessionManager>, dir: &Path, record: ServerRecord) {
    if let Err(error) = std::fs::remove_dir_all(dir) {
        tracing::warn!(%error, dir = %dir.display(), "cannot remove a WebSocket server's log");
    }
    let manager = manager.clone();
    tokio::spawn(async move {
        for id in &record.sessions {
            let _ = manager.terminate(id).await;
        }
    });
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
