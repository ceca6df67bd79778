//! The engines working on this store: every codebuffd process (server, `acp`, `exec`, a
//! terminal) that shares the log, for `GET /v1/engines` and `sessions list --owner`.
//!
//! Why: sessions move between engines (a turn is run by whichever engine takes it), so a
//! client that sees `owner` on a session needs to know which process that is and, for a
//! server, where it listens.

use serde::{Deserialize, Serialize};

use super::{SessionError, SessionManager};

/// One live engine process (`EngineInfo` of `docs/http-api.md`).
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EngineInfo {
    /// Unique per process start; sessions name it as their `owner`.
    pub engine_id: String,
    /// The data directory's instance id (in a fleet on one Postgres: the sandbox).
    pub instance_id: String,
    pub pid: u32,
    /// The command it runs: `server`, `acp`, `exec`, `repl`, …
    pub command: String,
    /// The `/v1` base URL, for a server once it listens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub url: Option<String>,
    /// Epoch milliseconds.
    pub started_at: u64,
    /// Whether it is the engine that answers this request.
    pub current: bool,
}

/// `GET /v1/engines`'s body.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct EngineList {
    pub engines: Vec<EngineInfo>,
}

impl SessionManager {
    /// True while other engines share the store (as the reaper last saw, each second).
    pub fn shares_the_store(&self) -> bool {
        self.others.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether engine `engine_id` (this one or another process on the store) still lives; a
    /// store that cannot say counts it alive (nothing of its is taken over on a guess).
    pub fn engine_alive(&self, engine_id: &str) -> bool {
        engine_id == self.engine_id()
            || self
                .context()
                .store
                .coordination()
                .engine_alive(engine_id)
                .unwrap_or(true)
    }

    /// The live engines on this store, oldest first.
    pub fn engines(&self) -> Result<Vec<EngineInfo>, SessionError> {
        let me = self.engine_id();
        let mut engines: Vec<EngineInfo> = self
            .context()
            .store
            .coordination()
            .engines()?
            .into_iter()
            .map(|e| EngineInfo {
                current: e.engine_id == me,
                engine_id: e.engine_id,
                instance_id: e.instance_id,
                pid: e.pid,
                command: e.command,
                url: e.url,
                started_at: e.started_at,
            })
            .collect();
        engines.sort_by(|a, b| (a.started_at, &a.engine_id).cmp(&(b.started_at, &b.engine_id)));
        Ok(engines)
    }
}
