//! Which program each agent kind runs, whether it is installed, and installing it.
//!
//! `codebuff` runs the Node adapter (`bin/codebuff-agent.mjs` on `@codebuff/sdk`, from where
//! [`AdapterSource`] says: the copy this binary carries, unpacked into the data directory, or a
//! directory used as it is) unless `--agent-command` names another program honouring the contract;
//! `mock` runs this very executable as `codebuffd mock-agent`, through the same spawn path.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use tokio::sync::Mutex;

use super::adapter::{self, AdapterSource};
use super::node::{self, find_in_path, is_executable, InstallError, NodeTools, MIN_NODE_MAJOR};

/// The agents the daemon serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AgentKind {
    Codebuff,
    Mock,
}

impl AgentKind {
    /// Parses an agent id (`codebuff`, `mock`).
    pub fn parse(id: &str) -> Option<AgentKind> {
        match id {
            "codebuff" => Some(AgentKind::Codebuff),
            "mock" => Some(AgentKind::Mock),
            _ => None,
        }
    }

    /// The agent's id.
    pub fn id(self) -> &'static str {
        match self {
            AgentKind::Codebuff => "codebuff",
            AgentKind::Mock => "mock",
        }
    }

    /// Whether a warm spare of this agent is worth what it holds while it waits. `codebuff`:
    /// yes, Node and the SDK take ~0.6 s to load (a spare starts a turn in ~56 ms instead) and
    /// a program named by `--agent-command` may be as slow. `mock`: no, it is this executable,
    /// its first line comes ~2 ms after the spawn (measured, `benches/README.md`), and a spare
    /// held ~5 MB to save about that much per turn.
    pub fn keeps_a_warm_spare(self) -> bool {
        match self {
            AgentKind::Codebuff => true,
            AgentKind::Mock => false,
        }
    }

    /// Every agent, in the order `GET /v1/agents` lists them.
    pub const ALL: [AgentKind; 2] = [AgentKind::Codebuff, AgentKind::Mock];
}

/// What `GET /v1/agents` reports about an agent's installation.
#[derive(Debug, Clone, PartialEq)]
pub struct Installation {
    pub installed: bool,
    pub version: Option<String>,
    pub path: Option<PathBuf>,
    /// How to install it when it is not.
    pub how: Option<String>,
}

/// Resolves agent programs (decided once, at daemon start).
#[derive(Debug)]
pub struct Launcher {
    custom_codebuff: Option<PathBuf>,
    adapter: AdapterSource,
    /// Where the adapter runs from (`adapter.dir()`).
    adapter_dir: PathBuf,
    self_exe: PathBuf,
    installing: Mutex<()>,
}

impl Launcher {
    /// A launcher; `agent_command` overrides the codebuff program, `adapter` says where the
    /// Codebuff adapter comes from ([`AdapterSource::locate`]).
    pub fn new(agent_command: Option<PathBuf>, adapter: AdapterSource) -> Launcher {
        let self_exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("codebuffd"));
        Launcher {
            custom_codebuff: agent_command,
            adapter_dir: adapter.dir(),
            adapter,
            self_exe,
            installing: Mutex::new(()),
        }
    }

    /// The same launcher running `program` as the mock agent (`program mock-agent …`): for an
    /// engine hosted by another executable than `codebuffd` (in-process tests).
    pub fn with_mock_program(mut self, program: PathBuf) -> Launcher {
        self.self_exe = program;
        self
    }

    /// The directory the Codebuff adapter runs from.
    pub fn adapter_dir(&self) -> &Path {
        &self.adapter_dir
    }

    /// Where the Codebuff adapter comes from.
    pub fn adapter(&self) -> &AdapterSource {
        &self.adapter
    }

    /// The codebuff agent command that replaces the adapter, if any.
    pub fn custom_command(&self) -> Option<&Path> {
        self.custom_codebuff.as_deref()
    }

    /// The program and the arguments that precede the contract's arguments.
    pub fn program(&self, kind: AgentKind) -> (PathBuf, Vec<OsString>) {
        match kind {
            AgentKind::Mock => (self.self_exe.clone(), vec!["mock-agent".into()]),
            AgentKind::Codebuff => match &self.custom_codebuff {
                Some(cmd) => (cmd.clone(), Vec::new()),
                None => (
                    PathBuf::from("node"),
                    vec![self.adapter_dir.join("bin/codebuff-agent.mjs").into()],
                ),
            },
        }
    }

    /// Whether the agent can run now.
    pub fn installation(&self, kind: AgentKind) -> Installation {
        match kind {
            AgentKind::Mock => Installation {
                installed: true,
                version: Some(env!("CARGO_PKG_VERSION").to_owned()),
                path: Some(self.self_exe.clone()),
                how: None,
            },
            AgentKind::Codebuff => match &self.custom_codebuff {
                Some(cmd) => Installation {
                    installed: is_executable(cmd),
                    version: None,
                    path: Some(cmd.clone()),
                    how: Some(format!(
                        "make {} an executable agent command",
                        cmd.display()
                    )),
                },
                None => self.adapter_installation(),
            },
        }
    }

    fn adapter_installation(&self) -> Installation {
        let dir = &self.adapter_dir;
        let version = adapter::installed_sdk_version(dir);
        let node = find_in_path("node");
        let how = if node.is_none() {
            format!(
                "install Node.js {MIN_NODE_MAJOR} or newer with npm (`node` and `npm` on PATH); \
                 then the first codebuff session installs the adapter's packages"
            )
        } else {
            match &self.adapter {
                AdapterSource::Embedded { .. } => format!(
                    "the first codebuff session unpacks the adapter this binary carries into {} \
                     and installs its Node packages (npm ci, from the npm registry); \
                     POST /v1/agents/codebuff/install or `codebuffd install-adapter` does it now",
                    dir.display()
                ),
                _ if !dir.join("package.json").is_file() => format!(
                    "{} holds no Codebuff adapter (no package.json): point {} at one, or unset it \
                     to use the adapter this binary carries",
                    dir.display(),
                    adapter::ADAPTER_DIR_ENV
                ),
                _ => format!(
                    "run `npm ci` in {} (or POST /v1/agents/codebuff/install)",
                    dir.display()
                ),
            }
        };
        Installation {
            installed: node.is_some() && version.is_some(),
            version: version.map(|v| format!("@codebuff/sdk {v}")),
            path: Some(dir.join("bin/codebuff-agent.mjs")),
            how: Some(how),
        }
    }

    /// Installs the agent if missing (or always, with `reinstall`): the embedded adapter is
    /// unpacked into the data directory with its Node packages; an adapter directory used as
    /// it is gets `npm ci`. Fails naming what is missing (Node.js ≥ 20, npm). The custom
    /// command and `mock` need nothing.
    pub async fn install(&self, kind: AgentKind, reinstall: bool) -> Result<(), InstallError> {
        if kind == AgentKind::Mock || self.custom_codebuff.is_some() {
            return match self.installation(kind) {
                i if i.installed => Ok(()),
                i => Err(InstallError(i.how.unwrap_or_default())),
            };
        }
        let _one_at_a_time = self.installing.lock().await;
        if self.adapter_installation().installed && !reinstall {
            return Ok(());
        }
        if let Some(problem) = NodeTools::probe().await.install_problem() {
            return Err(InstallError(problem));
        }
        let dir = &self.adapter_dir;
        match &self.adapter {
            AdapterSource::Embedded { root } => {
                if reinstall && dir.exists() {
                    set_aside(dir)?;
                }
                adapter::unpack_and_install(dir, true).await?;
                adapter::remove_others(root, adapter::hash());
            }
            AdapterSource::Override(_) | AdapterSource::Checkout(_) => {
                if !dir.join("package-lock.json").is_file() {
                    return Err(InstallError(format!(
                        "the Codebuff adapter is missing: no package-lock.json in {}",
                        dir.display()
                    )));
                }
                node::npm_ci(dir).await?;
            }
        }
        match self.adapter_installation() {
            i if i.installed => Ok(()),
            i => Err(InstallError(i.how.unwrap_or_default())),
        }
    }
}

/// Moves an unpacked adapter out of the way (removed by the next [`adapter::remove_others`]).
fn set_aside(dir: &Path) -> Result<(), InstallError> {
    let aside = dir.with_file_name(format!(
        ".old-{}-{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::rename(dir, &aside)
        .map_err(|e| InstallError(format!("cannot move {} aside: {e}", dir.display())))?;
    let _ = std::fs::remove_dir_all(&aside);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_ids_round_trip() {
        for kind in AgentKind::ALL {
            assert_eq!(AgentKind::parse(kind.id()), Some(kind));
        }
        assert_eq!(AgentKind::parse("claude"), None);
    }

    /// What a test binary finds: the checkout's adapter.
    fn checkout() -> AdapterSource {
        AdapterSource::locate(Path::new("/nonexistent"), &|_| None)
    }

    #[test]
    fn mock_runs_this_executable_and_codebuff_the_adapter() {
        let launcher = Launcher::new(None, checkout());
        let (program, args) = launcher.program(AgentKind::Mock);
        assert_eq!(program, std::env::current_exe().unwrap());
        assert_eq!(args, vec![OsString::from("mock-agent")]);
        let (program, args) = launcher.program(AgentKind::Codebuff);
        assert_eq!(program, PathBuf::from("node"));
        assert!(Path::new(&args[0]).ends_with("adapters/codebuff/bin/codebuff-agent.mjs"));
        assert!(launcher.adapter_dir().join("package.json").is_file());
    }

    #[test]
    fn a_custom_command_replaces_the_adapter() {
        let launcher = Launcher::new(Some("/bin/true".into()), checkout());
        assert_eq!(
            launcher.program(AgentKind::Codebuff),
            (PathBuf::from("/bin/true"), vec![])
        );
        assert!(launcher.installation(AgentKind::Codebuff).installed);
        let missing = Launcher::new(Some("/nonexistent/agent".into()), checkout());
        assert!(!missing.installation(AgentKind::Codebuff).installed);
    }

    #[test]
    fn an_embedded_adapter_not_yet_unpacked_says_where_it_will_go() {
        let data =
            std::env::temp_dir().join(format!("codebuffd-launcher-{}", uuid::Uuid::new_v4()));
        let launcher = Launcher::new(None, AdapterSource::embedded(&data));
        assert_eq!(
            launcher.adapter_dir(),
            data.join("adapter").join(adapter::hash())
        );
        let (_, args) = launcher.program(AgentKind::Codebuff);
        assert_eq!(
            PathBuf::from(&args[0]),
            launcher.adapter_dir().join("bin/codebuff-agent.mjs")
        );
        let installation = launcher.installation(AgentKind::Codebuff);
        assert!(!installation.installed);
        let how = installation.how.unwrap();
        assert!(
            how.contains(&launcher.adapter_dir().display().to_string()),
            "{how}"
        );
        assert!(!data.exists(), "looking installs nothing");
    }
}
