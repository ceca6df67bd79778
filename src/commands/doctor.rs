//! `codebuffd doctor`: what the daemon would find on this machine — Node.js and npm, the
//! Codebuff adapter, credentials (where from, never the key), the data directory and the store —
//! and what to do about each problem. Reads the same flags, environment and config file as
//! `codebuffd server` (through [`DaemonConfig::resolve`]); creates and installs nothing.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::agent::adapter::{self, AdapterSource};
use crate::agent::credentials::{self, CredentialSource};
use crate::agent::node::{is_executable, NodeTools, MIN_NODE_MAJOR};
use crate::cli::DoctorArgs;
use crate::config::DaemonConfig;
use crate::config::{EngineArgs, ServerArgs};
use crate::store::{open_store, redact_spec, DEFAULT_DATABASE};

/// How a finding stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// As it should be.
    Ok,
    /// Worth knowing, needs nothing now.
    Note,
    /// Something will not work until it is fixed.
    Problem,
}

/// One finding: what was looked at, what was found, and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub status: Status,
    pub subject: &'static str,
    pub found: String,
    pub fix: Option<String>,
}

impl Check {
    fn new(status: Status, subject: &'static str, found: impl Into<String>) -> Check {
        Check {
            status,
            subject,
            found: found.into(),
            fix: None,
        }
    }

    fn fix(mut self, fix: impl Into<String>) -> Check {
        self.fix = Some(fix.into());
        self
    }
}

/// Everything `doctor` found, in the order it prints it.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub checks: Vec<Check>,
}

impl Report {
    /// How many findings are problems.
    pub fn problems(&self) -> usize {
        self.checks
            .iter()
            .filter(|c| c.status == Status::Problem)
            .count()
    }

    /// Writes the report for a person: one line per finding, then what to do.
    pub fn render(&self, out: &mut dyn Write) -> io::Result<()> {
        writeln!(out, "codebuffd {} doctor", env!("CARGO_PKG_VERSION"))?;
        writeln!(out)?;
        for check in &self.checks {
            let status = match check.status {
                Status::Ok => "ok",
                Status::Note => "note",
                Status::Problem => "PROBLEM",
            };
            writeln!(out, "{status:<8} {:<12} {}", check.subject, check.found)?;
            if let Some(fix) = &check.fix {
                writeln!(out, "{:<8} {:<12} → {fix}", "", "")?;
            }
        }
        writeln!(out)?;
        match self.problems() {
            0 => writeln!(out, "All good."),
            1 => writeln!(out, "1 problem: see the → line under it."),
            n => writeln!(out, "{n} problems: see the → lines under them."),
        }
    }
}

/// Looks at everything; `env` reads the environment (as for the server).
pub async fn examine(args: &DoctorArgs, env: &dyn Fn(&str) -> Option<String>) -> Report {
    let mut report = Report::default();
    let server_args = ServerArgs {
        engine: EngineArgs {
            data_dir: args.data_dir.clone(),
            store: args.store.clone(),
            config: args.config.clone(),
            agent_command: args.agent_command.clone(),
            ..EngineArgs::default()
        },
        ..ServerArgs::default()
    };
    let config = match DaemonConfig::resolve(&server_args, env) {
        Ok(config) => Some(config),
        Err(error) => {
            report.checks.push(
                Check::new(Status::Problem, "settings", error.to_string()).fix(
                    "correct the flag, CODEBUFFD_* variable or config file it names; the data \
                     directory, store and adapter are not checked until then",
                ),
            );
            None
        }
    };

    let tools = NodeTools::probe().await;
    let custom = config.as_ref().and_then(|c| c.agent_command.clone());
    let adapter = config
        .as_ref()
        .map(|c| AdapterSource::locate(&c.data_dir, env));
    let adapter_ready = adapter
        .as_ref()
        .is_some_and(|a| adapter::packages_installed(&a.dir()));
    report.checks.push(node_check(&tools, custom.is_some()));
    report
        .checks
        .push(npm_check(&tools, custom.is_some() || adapter_ready));
    match (&custom, &adapter) {
        (Some(command), _) => report.checks.push(agent_command_check(command)),
        (None, Some(adapter)) => report.checks.push(adapter_check(adapter)),
        (None, None) => {}
    }
    report.checks.push(credentials_check(env));
    if let Some(config) = &config {
        report.checks.push(data_dir_check(&config.data_dir));
        report
            .checks
            .push(store_check(&config.store, &config.data_dir));
    }
    report
}

fn node_check(tools: &NodeTools, custom: bool) -> Check {
    let needed = if custom {
        Status::Note
    } else {
        Status::Problem
    };
    match (&tools.node, tools.node_problem()) {
        (Some(node), None) => Check::new(
            Status::Ok,
            "Node.js",
            format!(
                "{} ({}): ≥ {MIN_NODE_MAJOR}, as the Codebuff adapter needs",
                node.version.as_deref().unwrap_or("?"),
                node.path.display()
            ),
        ),
        (_, Some(problem)) => Check::new(needed, "Node.js", problem).fix(format!(
            "install Node.js {MIN_NODE_MAJOR} or newer with npm (your distribution's `nodejs` and \
             `npm` packages if they are recent enough, or nodejs.org) so that `node` is on the \
             daemon's PATH"
        )),
        (None, None) => Check::new(needed, "Node.js", "not found"),
    }
}

fn npm_check(tools: &NodeTools, adapter_ready: bool) -> Check {
    match &tools.npm {
        Some(npm) if npm.version.is_some() => Check::new(
            Status::Ok,
            "npm",
            format!(
                "{} ({})",
                npm.version.as_deref().unwrap_or("?"),
                npm.path.display()
            ),
        ),
        _ if adapter_ready => Check::new(
            Status::Note,
            "npm",
            "not found; not needed while the adapter's packages are installed",
        ),
        _ => Check::new(
            Status::Problem,
            "npm",
            "not found (or does not run): the Codebuff adapter's packages cannot be installed",
        )
        .fix("install npm (it comes with Node.js; Debian: `apt-get install npm`)"),
    }
}

fn agent_command_check(command: &Path) -> Check {
    if is_executable(command) {
        Check::new(
            Status::Ok,
            "agent",
            format!(
                "{} (--agent-command, instead of the Codebuff adapter)",
                command.display()
            ),
        )
    } else {
        Check::new(
            Status::Problem,
            "agent",
            format!(
                "--agent-command {} is not an executable file",
                command.display()
            ),
        )
        .fix("make it executable, or drop --agent-command to use the Codebuff adapter")
    }
}

fn adapter_check(source: &AdapterSource) -> Check {
    let dir = source.dir();
    let described = source.describe();
    let same = match source {
        AdapterSource::Embedded { .. } => String::new(),
        _ if adapter::matches_embedded(&dir) => {
            format!("; the same as the embedded {}", adapter::hash())
        }
        _ => format!(
            "; differs from the embedded {} ({})",
            adapter::hash(),
            adapter::describe_version()
        ),
    };
    if let Some(sdk) = adapter::installed_sdk_version(&dir) {
        let place = match source {
            AdapterSource::Embedded { .. } => format!(": unpacked in {}", dir.display()),
            _ => String::new(),
        };
        return Check::new(
            Status::Ok,
            "adapter",
            format!("{described}{place}; @codebuff/sdk {sdk} installed{same}"),
        );
    }
    match source {
        AdapterSource::Embedded { .. } => Check::new(
            Status::Note,
            "adapter",
            format!("{described}: not unpacked yet"),
        )
        .fix(format!(
            "nothing to do: the first codebuff session unpacks it into {} and installs its Node \
             packages (npm ci, from the npm registry; seconds to a minute); `codebuffd \
             install-adapter` does it now",
            dir.display()
        )),
        _ if !dir.join("package.json").is_file() => Check::new(
            Status::Problem,
            "adapter",
            format!("{described}: no Codebuff adapter there (no package.json)"),
        )
        .fix(format!(
            "point {} at an adapter directory (`codebuffd install-adapter --into DIR` makes one), \
             or unset it to use the adapter this binary carries",
            adapter::ADAPTER_DIR_ENV
        )),
        _ => Check::new(
            Status::Note,
            "adapter",
            format!("{described}: its Node packages are not installed{same}"),
        )
        .fix(format!(
            "nothing to do: the first codebuff session runs `npm ci` in {}; `codebuffd \
             install-adapter` does it now",
            dir.display()
        )),
    }
}

fn credentials_check(env: &dyn Fn(&str) -> Option<String>) -> Check {
    let home = env("HOME").filter(|h| !h.is_empty()).map(PathBuf::from);
    let key = env("CODEBUFF_API_KEY");
    match credentials::resolve(None, key.as_deref(), home.as_deref()) {
        Some(found) => {
            let source = match &found.source {
                CredentialSource::Env => "CODEBUFF_API_KEY (the daemon's environment)".to_owned(),
                CredentialSource::ManicodeCredentials(p)
                | CredentialSource::CodebuffConfig(p)
                | CredentialSource::CodebuffAuth(p) => p.display().to_string(),
                CredentialSource::Session => "the session".to_owned(),
            };
            Check::new(
                Status::Ok,
                "credentials",
                format!("a Codebuff API key from {source}"),
            )
        }
        None => {
            let looked: Vec<String> = credentials::places(home.as_deref())
                .into_iter()
                .skip(1) // the session's own `apiKey`: not the daemon's to have
                .collect();
            Check::new(
                Status::Problem,
                "credentials",
                format!("no Codebuff API key; looked in {}", looked.join(", ")),
            )
            .fix(format!(
                "get a key at {} and set CODEBUFF_API_KEY in the daemon's environment (or write \
                 it to one of those files); until then only sessions that pass their own \
                 `apiKey` can run codebuff",
                credentials::GET_A_KEY
            ))
        }
    }
}

fn data_dir_check(dir: &Path) -> Check {
    let fix = "give the daemon's user write access to it, or choose another with --data-dir \
               (CODEBUFFD_DATA_DIR)";
    if dir.is_dir() {
        let probe = dir.join(format!(".doctor-{}", std::process::id()));
        return match std::fs::write(&probe, b"") {
            Ok(()) => {
                let _ = std::fs::remove_file(&probe);
                Check::new(
                    Status::Ok,
                    "data dir",
                    format!("{} (exists, writable)", dir.display()),
                )
            }
            Err(e) => Check::new(
                Status::Problem,
                "data dir",
                format!("{} is not writable: {e}", dir.display()),
            )
            .fix(fix),
        };
    }
    if dir.exists() {
        return Check::new(
            Status::Problem,
            "data dir",
            format!("{} exists and is not a directory", dir.display()),
        )
        .fix("remove it, or choose another with --data-dir (CODEBUFFD_DATA_DIR)");
    }
    // The server creates it: the nearest existing ancestor must let it.
    let Some(ancestor) = dir.ancestors().skip(1).find(|a| a.is_dir()) else {
        return Check::new(
            Status::Problem,
            "data dir",
            format!("{}: no parent directory exists", dir.display()),
        )
        .fix(fix);
    };
    let writable = nix::unistd::access(ancestor, nix::unistd::AccessFlags::W_OK).is_ok();
    if writable {
        Check::new(
            Status::Ok,
            "data dir",
            format!("{} (not created yet: the server creates it)", dir.display()),
        )
    } else {
        Check::new(
            Status::Problem,
            "data dir",
            format!(
                "{} does not exist and cannot be created: {} is not writable",
                dir.display(),
                ancestor.display()
            ),
        )
        .fix(fix)
    }
}

fn store_check(spec: &str, data_dir: &Path) -> Check {
    let shown = redact_spec(spec);
    let trimmed = spec.trim();
    if trimmed == "memory" {
        return Check::new(
            Status::Note,
            "store",
            "memory: sessions and events are lost when the daemon stops",
        );
    }
    let sqlite_file = if trimmed.is_empty() || trimmed == "sqlite" {
        Some(data_dir.join(DEFAULT_DATABASE))
    } else {
        trimmed.strip_prefix("sqlite://").map(PathBuf::from)
    };
    if let Some(file) = &sqlite_file {
        if !file.exists() {
            return Check::new(
                Status::Ok,
                "store",
                format!(
                    "{shown}: {} (not created yet: the server creates it)",
                    file.display()
                ),
            );
        }
    }
    let place = sqlite_file
        .as_ref()
        .map(|f| format!(": {}", f.display()))
        .unwrap_or_default();
    match open_store(spec, data_dir) {
        Ok(store) => {
            drop(store);
            Check::new(Status::Ok, "store", format!("{shown}{place} (opens)"))
        }
        Err(error) => Check::new(
            Status::Problem,
            "store",
            format!("{shown}{place} does not open: {error}"),
        )
        .fix("check the --store spec (CODEBUFFD_STORE), the file's permissions, or that the database is reachable"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_counts_and_renders_problems_with_their_fixes() {
        let report = Report {
            checks: vec![
                Check::new(Status::Ok, "npm", "11.0.0 (/usr/bin/npm)"),
                Check::new(Status::Problem, "credentials", "no Codebuff API key").fix("get a key"),
            ],
        };
        assert_eq!(report.problems(), 1);
        let mut out = Vec::new();
        report.render(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("ok       npm          11.0.0"), "{text}");
        assert!(
            text.contains("PROBLEM  credentials  no Codebuff API key"),
            "{text}"
        );
        assert!(text.contains("→ get a key"), "{text}");
        assert!(
            text.ends_with("1 problem: see the → line under it.\n"),
            "{text}"
        );
    }

    #[test]
    fn credentials_are_named_by_source_never_by_value() {
        let home = std::env::temp_dir().join(format!("codebuffd-doctor-{}", uuid::Uuid::new_v4()));
        let h = home.display().to_string();
        let env = |name: &str| match name {
            "HOME" => Some(h.clone()),
            "CODEBUFF_API_KEY" => Some("sk-secret".to_owned()),
            _ => None,
        };
        let check = credentials_check(&env);
        assert_eq!(check.status, Status::Ok);
        assert!(check.found.contains("CODEBUFF_API_KEY"), "{check:?}");
        assert!(!check.found.contains("sk-secret"));
        let none = credentials_check(&|name: &str| (name == "HOME").then(|| h.clone()));
        assert_eq!(none.status, Status::Problem);
        assert!(
            none.found
                .contains(&format!("{h}/.config/manicode/credentials.json")),
            "{none:?}"
        );
        assert!(none.fix.unwrap().contains(credentials::GET_A_KEY));
    }

    #[test]
    fn a_data_dir_not_created_yet_is_fine_when_its_parent_is_writable() {
        let parent = std::env::temp_dir();
        let dir = parent.join(format!("codebuffd-doctor-{}", uuid::Uuid::new_v4()));
        let check = data_dir_check(&dir);
        assert_eq!(check.status, Status::Ok, "{check:?}");
        assert!(check.found.contains("not created yet"));
        assert!(!dir.exists(), "doctor creates nothing");
        let store = store_check("sqlite", &dir);
        assert_eq!(store.status, Status::Ok, "{store:?}");
        assert!(!dir.exists(), "doctor creates nothing");
    }

    #[test]
    fn store_passwords_are_redacted() {
        let check = store_check(
            "postgres://u:hunter2@127.0.0.1:1/db?connect_timeout=1",
            Path::new("/tmp"),
        );
        assert_eq!(check.status, Status::Problem, "{check:?}");
        assert!(!check.found.contains("hunter2"), "{check:?}");
    }
}
