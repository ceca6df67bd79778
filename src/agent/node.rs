//! Node.js and npm, which the Codebuff adapter needs: finding them on `PATH`, checking their
//! versions (Node ≥ 20), and installing the adapter's packages with `npm ci`, saying how it goes.
//!
//! Every program run here is registered as one of the daemon's own children while it lives
//! ([`super::reaper::OwnedChildren`]), so the orphan reaper never takes it for a turn's orphan.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

/// Why an install (of the adapter, of its packages, of an agent) failed: what to do about it,
/// in a sentence for the user.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct InstallError(pub String);

/// The oldest Node.js major version the adapter runs on (its `engines.node`).
pub const MIN_NODE_MAJOR: u32 = 20;

/// How long `npm ci` may take before the install gives up.
const INSTALL_TIMEOUT: Duration = Duration::from_secs(600);

/// How long `node --version` and `npm --version` may take.
const VERSION_TIMEOUT: Duration = Duration::from_secs(30);

/// How often a running `npm ci` says it is still at work.
const PROGRESS_EVERY: Duration = Duration::from_secs(15);

/// A program found on `PATH` and the version it reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub path: PathBuf,
    /// `v20.20.2` for node, `11.19.1` for npm; `None` when it did not say.
    pub version: Option<String>,
}

/// What was found of Node.js and npm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeTools {
    pub node: Option<Found>,
    pub npm: Option<Found>,
}

impl NodeTools {
    /// Looks for `node` and `npm` on `PATH` and asks each for its version.
    pub async fn probe() -> NodeTools {
        let node = match find_in_path("node") {
            Some(path) => Some(Found {
                version: version_of(&path).await,
                path,
            }),
            None => None,
        };
        let npm = match find_in_path("npm") {
            Some(path) => Some(Found {
                version: version_of(&path).await,
                path,
            }),
            None => None,
        };
        NodeTools { node, npm }
    }

    /// Why the adapter cannot run (`node` missing or older than 20), if it cannot.
    pub fn node_problem(&self) -> Option<String> {
        let Some(node) = &self.node else {
            return Some(format!(
                "Node.js {MIN_NODE_MAJOR} or newer is required to run the Codebuff adapter, and \
                 `node` is not on PATH: install Node.js {MIN_NODE_MAJOR}+ (with npm)"
            ));
        };
        match node.version.as_deref().and_then(major) {
            Some(m) if m >= MIN_NODE_MAJOR => None,
            Some(_) => Some(format!(
                "Node.js {MIN_NODE_MAJOR} or newer is required to run the Codebuff adapter; {} is {}: install Node.js {MIN_NODE_MAJOR}+",
                node.path.display(),
                node.version.as_deref().unwrap_or("?")
            )),
            None => Some(format!(
                "cannot tell the version of {} (`node --version` failed): Node.js {MIN_NODE_MAJOR} or newer is required",
                node.path.display()
            )),
        }
    }

    /// Why the adapter's packages cannot be installed (no npm, or no usable node), if not.
    pub fn install_problem(&self) -> Option<String> {
        if let Some(problem) = self.node_problem() {
            return Some(problem);
        }
        match &self.npm {
            None => Some(
                "npm is required to install the Codebuff adapter's packages, and `npm` is not on \
                 PATH: install npm (it comes with Node.js)"
                    .to_owned(),
            ),
            Some(npm) if npm.version.is_none() => Some(format!(
                "{} does not run (`npm --version` failed): npm is required to install the Codebuff adapter's packages",
                npm.path.display()
            )),
            Some(_) => None,
        }
    }
}

/// The major version in `v20.20.2` or `20.1`.
pub fn major(version: &str) -> Option<u32> {
    version
        .trim()
        .trim_start_matches('v')
        .split('.')
        .next()?
        .parse()
        .ok()
}

/// Runs `npm ci --omit=dev` in `dir` (which holds `package.json` and `package-lock.json`),
/// logging a line when it starts, every 15 s while it runs, and when it is done. The error
/// carries the last lines npm printed.
pub async fn npm_ci(dir: &Path) -> Result<(), InstallError> {
    tracing::info!(
        dir = %dir.display(),
        "installing the Codebuff adapter's Node packages (npm ci, from the npm registry)"
    );
    let started = Instant::now();
    let mut cmd = tokio::process::Command::new("npm");
    cmd.args(["ci", "--omit=dev", "--no-audit", "--no-fund"])
        .current_dir(dir)
        .env("npm_config_update_notifier", "false");
    let run = run_owned(&mut cmd, INSTALL_TIMEOUT);
    let mut run = std::pin::pin!(run);
    let mut tick =
        tokio::time::interval_at(tokio::time::Instant::now() + PROGRESS_EVERY, PROGRESS_EVERY);
    let output = loop {
        tokio::select! {
            output = &mut run => break output,
            _ = tick.tick() => tracing::info!(
                seconds = started.elapsed().as_secs(),
                "still installing the Codebuff adapter's Node packages (npm ci)"
            ),
        }
    };
    let output = output.map_err(|e| InstallError(format!("`npm ci` in {}: {e}", dir.display())))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: Vec<&str> = stderr
            .lines()
            .filter(|l| !l.trim().is_empty())
            .rev()
            .take(5)
            .collect();
        return Err(InstallError(format!(
            "`npm ci` failed in {} ({}): {}",
            dir.display(),
            output.status,
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        )));
    }
    tracing::info!(
        dir = %dir.display(),
        seconds = format!("{:.1}", started.elapsed().as_secs_f64()),
        "the Codebuff adapter's Node packages are installed"
    );
    Ok(())
}

/// `program --version`, trimmed; `None` when it does not run or fails.
async fn version_of(program: &Path) -> Option<String> {
    let mut cmd = tokio::process::Command::new(program);
    cmd.arg("--version");
    let output = run_owned(&mut cmd, VERSION_TIMEOUT).await.ok()?;
    let version = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    (output.status.success() && !version.is_empty()).then_some(version)
}

/// Runs `cmd` to its end (stdin closed, output captured) as one of this process's own
/// children; killed after `limit`.
async fn run_owned(cmd: &mut tokio::process::Command, limit: Duration) -> Result<Output, String> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let child = {
        let mut owned = super::reaper::OwnedChildren::lock();
        let child = cmd.spawn().map_err(|e| format!("cannot run it: {e}"))?;
        if let Some(pid) = child.id() {
            owned.insert(pid);
        }
        child
    };
    let pid = child.id();
    let output = tokio::time::timeout(limit, child.wait_with_output()).await;
    if let Some(pid) = pid {
        super::reaper::disown(pid);
    }
    output
        .map_err(|_| format!("timed out after {} s", limit.as_secs()))?
        .map_err(|e| format!("cannot run it: {e}"))
}

/// The first executable called `name` in a directory of `PATH`.
pub fn find_in_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| is_executable(p))
}

/// Whether `path` is a file someone may execute.
pub fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn majors_are_read_from_node_and_npm_versions() {
        assert_eq!(major("v20.20.2"), Some(20));
        assert_eq!(major("18.19.1\n"), Some(18));
        assert_eq!(major("v"), None);
    }

    fn found(version: &str) -> Option<Found> {
        Some(Found {
            path: PathBuf::from("/usr/bin/x"),
            version: Some(version.to_owned()),
        })
    }

    #[test]
    fn each_missing_requirement_is_named() {
        let none = NodeTools {
            node: None,
            npm: None,
        };
        assert!(none
            .node_problem()
            .unwrap()
            .contains("`node` is not on PATH"));
        let old = NodeTools {
            node: found("v18.19.1"),
            npm: found("9.2.0"),
        };
        let problem = old.install_problem().unwrap();
        assert!(problem.contains("Node.js 20 or newer"), "{problem}");
        assert!(problem.contains("v18.19.1"), "{problem}");
        let no_npm = NodeTools {
            node: found("v22.1.0"),
            npm: None,
        };
        assert_eq!(no_npm.node_problem(), None);
        assert!(no_npm
            .install_problem()
            .unwrap()
            .contains("`npm` is not on PATH"));
        let good = NodeTools {
            node: found("v20.0.0"),
            npm: found("10.0.0"),
        };
        assert_eq!(good.install_problem(), None);
    }

    #[tokio::test]
    async fn this_machine_has_node_20_and_npm() {
        let tools = NodeTools::probe().await;
        assert_eq!(tools.install_problem(), None, "{tools:?}");
    }
}
