//! Which program each agent kind runs, whether it is installed, and installing it.
//!
//! `codebuff` runs the bundled Node adapter (`adapters/codebuff/bin/codebuff-agent.mjs`, on
//! `@codebuff/sdk`) unless `--agent-command` names another program honouring the contract;
//! `mock` runs this very executable as `codebuffd mock-agent`, through the same spawn path.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::Mutex;

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

/// Why an install failed.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct InstallError(pub String);

/// Resolves agent programs (decided once, at daemon start).
#[derive(Debug)]
pub struct Launcher {
    custom_codebuff: Option<PathBuf>,
    adapter_dir: PathBuf,
    self_exe: PathBuf,
    installing: Mutex<()>,
}

/// How long `npm ci` may take before install gives up.
const INSTALL_TIMEOUT: Duration = Duration::from_secs(600);

impl Launcher {
    /// A launcher; `agent_command` overrides the codebuff program, `adapter_dir` the bundled
    /// adapter's directory (else it is looked for next to the executable and in the source tree).
    pub fn new(agent_command: Option<PathBuf>, adapter_dir: Option<PathBuf>) -> Launcher {
        let self_exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("codebuffd"));
        let adapter_dir = adapter_dir.unwrap_or_else(|| find_adapter_dir(&self_exe));
        Launcher {
            custom_codebuff: agent_command,
            adapter_dir,
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

    /// The bundled adapter's directory.
    pub fn adapter_dir(&self) -> &Path {
        &self.adapter_dir
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
        let sdk = self
            .adapter_dir
            .join("node_modules/@codebuff/sdk/package.json");
        let version = std::fs::read_to_string(&sdk).ok().and_then(|text| {
            let v: serde_json::Value = serde_json::from_str(&text).ok()?;
            v["version"].as_str().map(str::to_owned)
        });
        let node = find_in_path("node");
        let how = if node.is_none() {
            "install Node.js 20 or newer (`node` must be on PATH), then run `npm ci` in the adapter directory"
                .to_owned()
        } else {
            format!(
                "run `npm ci` in {} (or POST /v1/agents/codebuff/install)",
                self.adapter_dir.display()
            )
        };
        Installation {
            installed: node.is_some() && version.is_some(),
            version: version.map(|v| format!("@codebuff/sdk {v}")),
            path: Some(self.adapter_dir.join("bin/codebuff-agent.mjs")),
            how: Some(how),
        }
    }

    /// Installs the agent's dependencies if missing (or always, with `reinstall`): `npm ci` in
    /// the adapter directory. The custom command and `mock` need nothing.
    pub async fn install(&self, kind: AgentKind, reinstall: bool) -> Result<(), InstallError> {
        if kind == AgentKind::Mock || self.custom_codebuff.is_some() {
            return match self.installation(kind) {
                i if i.installed => Ok(()),
                i => Err(InstallError(i.how.unwrap_or_default())),
            };
        }
        let _one_at_a_time = self.installing.lock().await;
        let before = self.adapter_installation();
        if before.installed && !reinstall {
            return Ok(());
        }
        if find_in_path("node").is_none() || find_in_path("npm").is_none() {
            return Err(InstallError(before.how.unwrap_or_default()));
        }
        if !self.adapter_dir.join("package-lock.json").is_file() {
            return Err(InstallError(format!(
                "the Codebuff adapter is missing: no package-lock.json in {}",
                self.adapter_dir.display()
            )));
        }
        tracing::info!(dir = %self.adapter_dir.display(), "installing the Codebuff adapter (npm ci)");
        let mut cmd = tokio::process::Command::new("npm");
        cmd.args(["ci", "--omit=dev", "--no-audit", "--no-fund"])
            .current_dir(&self.adapter_dir)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        let child = {
            let mut owned = super::reaper::OwnedChildren::lock();
            let child = cmd
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .map_err(|e| InstallError(format!("cannot run npm: {e}")))?;
            if let Some(pid) = child.id() {
                owned.insert(pid);
            }
            child
        };
        let pid = child.id();
        let output = tokio::time::timeout(INSTALL_TIMEOUT, child.wait_with_output()).await;
        if let Some(pid) = pid {
            super::reaper::disown(pid);
        }
        let output = output
            .map_err(|_| InstallError("`npm ci` timed out".into()))?
            .map_err(|e| InstallError(format!("cannot run npm: {e}")))?;
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
            return Err(InstallError(format!(
                "`npm ci` failed in {}: {}",
                self.adapter_dir.display(),
                tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
            )));
        }
        match self.adapter_installation() {
            i if i.installed => Ok(()),
            i => Err(InstallError(i.how.unwrap_or_default())),
        }
    }
}

fn find_adapter_dir(exe: &Path) -> PathBuf {
    let rel = Path::new("adapters/codebuff");
    let mut candidates = Vec::new();
    if let Some(dir) = exe.parent() {
        candidates.push(dir.join(rel));
        candidates.push(dir.join("../share/codebuffd").join(rel));
        // target/{debug,release}/codebuffd inside the source tree.
        candidates.push(dir.join("../..").join(rel));
    }
    candidates.push(Path::new(env!("CARGO_MANIFEST_DIR")).join(rel));
    candidates
        .iter()
        .find(|c| c.join("package.json").is_file())
        .cloned()
        .unwrap_or_else(|| candidates.pop().unwrap_or_else(|| rel.to_path_buf()))
        .canonicalize()
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join(rel))
}

fn find_in_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| is_executable(p))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
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

    #[test]
    fn mock_runs_this_executable_and_codebuff_the_adapter() {
        let launcher = Launcher::new(None, None);
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
        let launcher = Launcher::new(Some("/bin/true".into()), None);
        assert_eq!(
            launcher.program(AgentKind::Codebuff),
            (PathBuf::from("/bin/true"), vec![])
        );
        assert!(launcher.installation(AgentKind::Codebuff).installed);
        let missing = Launcher::new(Some("/nonexistent/agent".into()), None);
        assert!(!missing.installation(AgentKind::Codebuff).installed);
    }
}
