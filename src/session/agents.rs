//! What the engine can say about each agent kind it runs: installed or not (and where), whether
//! a credential is at hand, and the warm spare waiting for its next turn (`GET /v1/agents`,
//! `doctor`).

use super::SessionManager;
use crate::agent::{procfs, AgentKind};

/// One agent kind, as the engine sees it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentStatus {
    pub kind: AgentKind,
    pub installed: bool,
    pub version: Option<String>,
    /// Where its program is.
    pub path: Option<String>,
    /// A credential the daemon could give it (always true for agents that need none).
    pub credentials_available: bool,
    /// The pre-started process waiting for this kind's next turn, if any, and its resident
    /// memory when readable.
    pub warm_spare: Option<(u32, Option<u64>)>,
}

impl SessionManager {
    /// The status of every agent kind.
    pub fn agents(&self) -> Vec<AgentStatus> {
        let agents = &self.context().agents;
        AgentKind::ALL
            .iter()
            .map(|&kind| {
                let install = agents.launcher.installation(kind);
                AgentStatus {
                    kind,
                    installed: install.installed,
                    version: install.version,
                    path: install.path.map(|p| p.display().to_string()),
                    credentials_available: agents.has_credential(kind, None),
                    warm_spare: agents
                        .spare_pid(kind)
                        .map(|pid| (pid, procfs::rss_bytes(pid))),
                }
            })
            .collect()
    }
}
