//! What every session needs from the daemon: the store, the launcher, limits, and the pieces of
//! the daemon's environment agents inherit. Built once at start, shared by all sessions.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::agent::Launcher;
use crate::store::EventStore;

/// Limits that apply to every turn.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Default per-turn timeout (a session may set its own).
    pub turn_timeout: Option<Duration>,
    /// A turn whose agent prints nothing for this long is stopped as timed out.
    pub inactivity_timeout: Option<Duration>,
    /// Longest accepted agent output line.
    pub max_line_bytes: usize,
    /// Grace between SIGTERM (terminate, timeout, shutdown) and SIGKILL.
    pub stop_grace: Duration,
    /// Grace between SIGINT (cancel) and SIGKILL.
    pub cancel_grace: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            turn_timeout: Some(Duration::from_secs(3600)),
            inactivity_timeout: Some(Duration::from_secs(900)),
            max_line_bytes: 8 * 1024 * 1024,
            stop_grace: Duration::from_secs(5),
            cancel_grace: Duration::from_secs(5),
        }
    }
}

/// The daemon-wide context of sessions.
pub struct SessionContext {
    pub store: Arc<dyn EventStore>,
    pub launcher: Arc<Launcher>,
    pub limits: Limits,
    /// The daemon's environment, filtered per spawn by the agent allowlist.
    pub parent_env: Vec<(OsString, OsString)>,
    /// `CODEBUFF_API_KEY` of the daemon's environment.
    pub env_api_key: Option<String>,
    /// The home directory searched for credential files.
    pub home: Option<PathBuf>,
    /// Where agent commands keep run state for `--continue` (`CODEBUFF_STATE_DIR`).
    pub agent_state_dir: PathBuf,
    /// The daemon's working directory (the default session directory).
    pub cwd: PathBuf,
    /// This daemon's instance id ([`crate::instance`]): the owner written into the records of
    /// its sessions, and the only owner (besides none) whose sessions it restores.
    pub instance_id: String,
}

impl SessionContext {
    /// A context reading the daemon's own environment.
    pub fn from_env(
        store: Arc<dyn EventStore>,
        launcher: Arc<Launcher>,
        limits: Limits,
        agent_state_dir: PathBuf,
        instance_id: String,
    ) -> Self {
        let parent_env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
        SessionContext {
            store,
            launcher,
            limits,
            env_api_key: std::env::var("CODEBUFF_API_KEY").ok(),
            home: std::env::var_os("HOME").map(PathBuf::from),
            parent_env,
            agent_state_dir,
            cwd: std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
            instance_id,
        }
    }
}
