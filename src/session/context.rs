//! What every session needs from the daemon: the store, the launcher, limits, and the pieces of
//! the daemon's environment agents inherit. Built once at start, shared by all sessions.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::settings::CreatePolicy;
use crate::agent::{AgentHost, Launcher};
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
    /// How long a permission request waits for an answer before it is rejected.
    pub permission_timeout: Duration,
    /// A warm agent spare that no turn took for this long is retired; `None`: kept.
    pub warm_spare_idle: Option<Duration>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            turn_timeout: Some(Duration::from_secs(3600)),
            inactivity_timeout: Some(Duration::from_secs(900)),
            max_line_bytes: 8 * 1024 * 1024,
            stop_grace: Duration::from_secs(5),
            cancel_grace: Duration::from_secs(5),
            permission_timeout: Duration::from_secs(600),
            warm_spare_idle: Some(Duration::from_secs(600)),
        }
    }
}

/// The daemon-wide context of sessions.
pub struct SessionContext {
    pub store: Arc<dyn EventStore>,
    /// How agents are started.
    pub agents: AgentHost,
    pub limits: Limits,
    /// What new sessions may ask for.
    pub policy: CreatePolicy,
    /// The data directory's instance id ([`crate::instance`]).
    pub instance_id: String,
    /// This engine process's id (new at every start): the owner the store records for the
    /// sessions it runs, alive while the engine holds its lease ([`crate::store::Lease`]).
    pub engine_id: String,
}

impl SessionContext {
    /// A context reading the daemon's own environment.
    pub fn from_env(
        store: Arc<dyn EventStore>,
        launcher: Arc<Launcher>,
        limits: Limits,
        agent_state_dir: PathBuf,
        instance_id: String,
        allow_loader_env: bool,
    ) -> Self {
        let mut agents = AgentHost::from_env(launcher, agent_state_dir, limits.max_line_bytes);
        agents.spare_idle = limits.warm_spare_idle;
        SessionContext {
            agents,
            store,
            limits,
            policy: CreatePolicy {
                allow_loader_env,
                ..CreatePolicy::new(std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")))
            },
            instance_id,
            engine_id: uuid::Uuid::new_v4().hyphenated().to_string(),
        }
    }
}
