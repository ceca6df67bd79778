//! Starting one agent turn: which program, its environment, the turn it is handed (with the
//! credential), behind one typed error; and the warm spares that take the agent's start-up off
//! the turn's critical path.
//!
//! [`AgentHost`] is what the daemon knows about running agents (the launcher, the daemon's
//! environment, where credentials and run state live); [`TurnLaunch`] is what one turn asks
//! for. A failure says what went wrong in words fit for a client (no host paths: those go to
//! the daemon's log) and has a stable code for the turn's `error` event.
//!
//! **Warm spares.** Every agent is started as `--stream-json --stdin-turn`: it loads what it
//! needs (the Codebuff adapter: the SDK, ~0.7 s), then waits for its turn line on stdin. The
//! host keeps one such process per agent kind in use whose start is slow enough to be worth it
//! (not the `mock`, which starts in ~2 ms); a turn takes it (if it is still silent
//! and alive), writes the turn line, and a fresh spare starts for the next turn. A spare holds
//! no credential (the key comes in the turn line) and no session's environment; it is its own
//! process group from the start, so a turn's group, cancel, timeout and kill are exactly those
//! of a process started for the turn. A spare that died is replaced; spares are killed at
//! shutdown, and one left by a crashed daemon exits when its stdin closes.
//!
//! A spare holds ~150 MiB (Node and the SDK) while it waits, so one that no turn took for
//! [`AgentHost::spare_idle`] (`--warm-spare-idle`) is retired (killed); the next session
//! created, or the next turn (which then starts cold), brings one back.

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::Duration;

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::time::Instant;

use super::command::{TurnCommand, TurnImage, TurnLine, STDIN_TURN_ARGS};
use super::credentials;
use super::environment::agent_env;
use super::launcher::{AgentKind, Launcher};
use super::process::{AgentProcess, SpawnError, SpawnSpec};
use crate::sync::LockExt;

/// An agent process started for a turn and not yet handed it (see [`AgentHost::start`]).
pub struct StartedAgent {
    process: AgentProcess,
    /// The turn line it gets on [`StartedAgent::begin`].
    line: String,
}

/// Shows the process, never the turn line (it carries the credential).
impl std::fmt::Debug for StartedAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StartedAgent")
            .field("pid", &self.process.pid())
            .finish_non_exhaustive()
    }
}

impl StartedAgent {
    /// The agent's pid (also its process group's id).
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// Hands the agent its turn; the process to supervise. Writing the line fails only when
    /// the agent is gone already, which its supervision then reports as its exit.
    pub fn begin(mut self) -> AgentProcess {
        if let Err(error) = self.process.queue_line(&self.line) {
            tracing::warn!(%error, pid = self.process.pid(), "the agent could not be handed its turn");
        }
        self.process
    }
}

/// What one turn asks of its agent.
#[derive(Debug, Clone, Copy)]
pub struct TurnLaunch<'a> {
    pub kind: AgentKind,
    pub agent_mode: &'a str,
    pub model: Option<&'a str>,
    /// The conversation to resume, if any.
    pub continue_session: Option<&'a str>,
    pub timeout: Option<Duration>,
    pub cwd: &'a Path,
    pub prompt: &'a str,
    /// The session's extra environment.
    pub env: &'a [(String, String)],
    /// The session's own credential, if it has one.
    pub api_key: Option<&'a str>,
    /// `bypass`, or `ask` (mutating tools ask first).
    pub permission_mode: &'a str,
    /// Images sent with the prompt.
    pub images: &'a [TurnImage],
}

/// Why an agent turn could not start. Its `Display` is fit for clients: no host paths.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("no Codebuff credential: set CODEBUFF_API_KEY for the daemon, pass `apiKey` when creating the session, or log in with the Codebuff CLI")]
    NoCredential,
    #[error("the agent program is missing (is the agent installed?)")]
    ProgramMissing,
    #[error("the agent program cannot be executed")]
    NotExecutable,
    #[error("the session's directory does not exist (any more)")]
    DirectoryMissing,
    /// The directory (a symbolic link repointed since the session was created, say) now
    /// resolves inside a directory sessions may not work in; the field says which kind.
    #[error("the session's directory now resolves inside {0}; sessions may not work there (an agent could change the daemon itself)")]
    DirectoryProtected(&'static str),
    #[error("the daemon has run out of resources to start the agent (open files or processes); try again later")]
    ResourcesExhausted,
    #[error("the agent's command line or environment is too long")]
    TooLong,
    #[error("the agent command could not start ({0})")]
    Other(io::ErrorKind),
}

impl LaunchError {
    /// The stable code of the turn's `error` event.
    pub fn code(&self) -> &'static str {
        match self {
            LaunchError::NoCredential => "credentials_missing",
            LaunchError::ProgramMissing | LaunchError::NotExecutable => "agent_not_installed",
            LaunchError::DirectoryMissing => "directory_missing",
            LaunchError::DirectoryProtected(_) => "directory_protected",
            LaunchError::ResourcesExhausted => "resources_exhausted",
            LaunchError::TooLong => "input_too_long",
            LaunchError::Other(_) => "agent_start_failed",
        }
    }

    fn from_spawn(error: SpawnError) -> LaunchError {
        match error {
            SpawnError::NotFound(_) => LaunchError::ProgramMissing,
            SpawnError::NotExecutable(_) => LaunchError::NotExecutable,
            SpawnError::CwdMissing(_) => LaunchError::DirectoryMissing,
            SpawnError::Io { source, .. } => match source.raw_os_error() {
                Some(libc_errno::EMFILE | libc_errno::ENFILE | libc_errno::EAGAIN) => {
                    LaunchError::ResourcesExhausted
                }
                Some(libc_errno::E2BIG) => LaunchError::TooLong,
                _ => LaunchError::Other(source.kind()),
            },
        }
    }
}

/// The errno values a spawn failure is told apart by.
mod libc_errno {
    use nix::errno::Errno;
    pub const EMFILE: i32 = Errno::EMFILE as i32;
    pub const ENFILE: i32 = Errno::ENFILE as i32;
    pub const EAGAIN: i32 = Errno::EAGAIN as i32;
    pub const E2BIG: i32 = Errno::E2BIG as i32;
}

/// The warm spares waiting, and whether a task watches them for retirement.
#[derive(Debug, Default)]
struct Spares {
    by_kind: HashMap<AgentKind, Spare>,
    /// True while the retirement task runs (it ends when no spare is left to watch).
    watched: bool,
}

/// A warm spare and when it started waiting.
#[derive(Debug)]
struct Spare {
    process: AgentProcess,
    since: Instant,
}

/// Everything the daemon knows about running agents; built once at start.
#[derive(Debug)]
pub struct AgentHost {
    /// One warm process per agent kind in use, waiting for its turn.
    spares: Arc<Mutex<Spares>>,
    /// Whether to keep spares at all.
    pub warm_start: bool,
    /// A spare that waited this long without a turn is retired; `None`: kept for as long as
    /// the daemon runs.
    pub spare_idle: Option<Duration>,
    pub launcher: Arc<Launcher>,
    /// The daemon's environment, filtered per spawn by the agent allowlist.
    pub parent_env: Vec<(OsString, OsString)>,
    /// `CODEBUFF_API_KEY` of the daemon's environment.
    pub env_api_key: Option<String>,
    /// The home directory searched for credential files.
    pub home: Option<PathBuf>,
    /// Where agent commands keep run state for `--continue` (`CODEBUFF_STATE_DIR`).
    pub state_dir: PathBuf,
    /// Longest accepted agent output line.
    pub max_line_bytes: usize,
}

impl AgentHost {
    /// A host reading the daemon's own environment.
    pub fn from_env(launcher: Arc<Launcher>, state_dir: PathBuf, max_line_bytes: usize) -> Self {
        AgentHost {
            spares: Arc::default(),
            warm_start: true,
            spare_idle: None,
            launcher,
            parent_env: std::env::vars_os().collect(),
            env_api_key: std::env::var("CODEBUFF_API_KEY").ok(),
            home: std::env::var_os("HOME").map(PathBuf::from),
            state_dir,
            max_line_bytes,
        }
    }

    /// Whether a credential for `kind` can be found (a session's own key, or the daemon's).
    pub fn has_credential(&self, kind: AgentKind, session_key: Option<&str>) -> bool {
        kind != AgentKind::Codebuff
            || credentials::resolve(
                session_key,
                self.env_api_key.as_deref(),
                self.home.as_deref(),
            )
            .is_some()
    }

    /// The command of an agent waiting for its turn on stdin: the program, the contract's
    /// stdin-turn arguments, the daemon's allowlisted environment with the run-state directory;
    /// no credential, no session's variables (those come with the turn).
    fn spare_spec(&self, kind: AgentKind, cwd: &Path) -> SpawnSpec {
        let (program, mut args) = self.launcher.program(kind);
        args.extend(STDIN_TURN_ARGS.iter().map(OsString::from));
        let mut env = agent_env(self.parent_env.iter().cloned(), &[], None);
        env.retain(|(k, _)| k != "CODEBUFF_STATE_DIR");
        env.push(("CODEBUFF_STATE_DIR".into(), self.state_dir.clone().into()));
        SpawnSpec {
            program,
            args,
            cwd: cwd.to_path_buf(),
            env,
            max_line_bytes: self.max_line_bytes,
        }
    }

    /// The turn line of a turn: what it asks, with the credential it runs with.
    pub fn turn_line(&self, turn: &TurnLaunch) -> Result<TurnLine, LaunchError> {
        let credential = credentials::resolve(
            turn.api_key,
            self.env_api_key.as_deref(),
            self.home.as_deref(),
        );
        if turn.kind == AgentKind::Codebuff && credential.is_none() {
            return Err(LaunchError::NoCredential);
        }
        let cmd = TurnCommand {
            agent_mode: Some(turn.agent_mode),
            model: turn.model,
            continue_session: turn.continue_session,
            timeout: turn.timeout,
            cwd: turn.cwd,
            prompt: turn.prompt,
        };
        let key = match turn.kind {
            AgentKind::Codebuff => credential.as_ref().map(|c| c.key.as_str()),
            AgentKind::Mock => None,
        };
        let mut line = TurnLine::new(&cmd, turn.env, key);
        line.permission_mode = turn.permission_mode.to_owned();
        line.images = turn.images.to_vec();
        Ok(line)
    }

    /// Starts a turn's agent: a warm spare when one waits (else a new process). The next spare
    /// is the caller's to start ([`AgentHost::prewarm`]) once this agent has spoken: one
    /// started now would load beside an agent that may itself still be loading (a spare taken
    /// young, or a cold start), on the same cores. The agent is not given its turn yet: the caller records its pid
    /// durably first and then calls [`StartedAgent::begin`], so an engine killed in between
    /// leaves only a process that reads end-of-file before any turn line and exits by itself
    /// (`docs/agent-command.md` §1.1), never a working agent nobody knows to kill.
    pub fn start(&self, turn: &TurnLaunch) -> Result<StartedAgent, LaunchError> {
        let line = self.turn_line(turn)?;
        if !turn.cwd.is_dir() {
            return Err(LaunchError::DirectoryMissing);
        }
        let process = match self.take_spare(turn.kind) {
            Some(spare) => spare,
            None => AgentProcess::spawn(self.spare_spec(turn.kind, turn.cwd)).map_err(|error| {
                // The host's details (paths) stay in the daemon's log.
                tracing::warn!(%error, "the agent command could not start");
                LaunchError::from_spawn(error)
            })?,
        };
        Ok(StartedAgent {
            process,
            line: line.to_line(),
        })
    }

    /// Makes sure a spare of `kind` waits (when warm starts are on, the kind is worth one
    /// ([`AgentKind::keeps_a_warm_spare`]) and the agent can run).
    pub fn prewarm(&self, kind: AgentKind) {
        if !self.warm_start || !kind.keeps_a_warm_spare() {
            return;
        }
        let mut spares = self.spares.lock_unpoisoned();
        if let Some(spare) = spares.by_kind.get_mut(&kind) {
            if spare.process.untouched() {
                return;
            }
            // It died (or spoke out of turn): replace it.
            spares.by_kind.remove(&kind);
        }
        if !self.launcher.installation(kind).installed {
            return;
        }
        // A spare waits in the run-state directory; its turn says where to work.
        match AgentProcess::spawn(self.spare_spec(kind, &self.state_dir)) {
            Ok(process) => {
                tracing::debug!(agent = kind.id(), pid = process.pid(), "warm spare started");
                let since = Instant::now();
                spares.by_kind.insert(kind, Spare { process, since });
                if let Some(idle) = self.spare_idle {
                    if !spares.watched {
                        spares.watched = watch_idle_spares(Arc::downgrade(&self.spares), idle);
                    }
                }
            }
            Err(error) => tracing::warn!(agent = kind.id(), %error, "cannot start a warm spare"),
        }
    }

    /// The waiting spare of `kind`, if it is still fit for a turn.
    fn take_spare(&self, kind: AgentKind) -> Option<AgentProcess> {
        let mut spares = self.spares.lock_unpoisoned();
        let mut spare = spares.by_kind.remove(&kind)?.process;
        // One that died or printed something is dropped (and killed).
        spare.untouched().then_some(spare)
    }

    /// The pid of the spare of `kind` waiting now, if any.
    pub fn spare_pid(&self, kind: AgentKind) -> Option<u32> {
        let spares = self.spares.lock_unpoisoned();
        spares.by_kind.get(&kind).map(|s| s.process.pid())
    }

    /// Kills the spare of `kind`, if one waits (no session needs it any more).
    pub fn drop_spare(&self, kind: AgentKind) {
        let spare = {
            let mut spares = self.spares.lock_unpoisoned();
            spares.by_kind.remove(&kind)
        };
        drop(spare);
    }

    /// Kills every spare (shutdown).
    pub fn drop_spares(&self) {
        let spares: Vec<Spare> = {
            let mut spares = self.spares.lock_unpoisoned();
            spares.by_kind.drain().map(|(_, spare)| spare).collect()
        };
        drop(spares);
    }
}

/// Starts the task that retires spares that waited `idle` without a turn: it sleeps until the
/// oldest spare's time is up, retires what is due, and ends when no spare is left (the next
/// spare started starts it again). Returns false when there is no runtime to run it on (the
/// spares are then kept).
fn watch_idle_spares(spares: Weak<Mutex<Spares>>, idle: Duration) -> bool {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return false;
    };
    runtime.spawn(async move {
        loop {
            let next = {
                let Some(spares) = spares.upgrade() else {
                    return;
                };
                let mut spares = spares.lock_unpoisoned();
                let now = Instant::now();
                let due: Vec<AgentKind> = spares
                    .by_kind
                    .iter()
                    .filter(|(_, s)| now.duration_since(s.since) >= idle)
                    .map(|(kind, _)| *kind)
                    .collect();
                for kind in due {
                    if let Some(spare) = spares.by_kind.remove(&kind) {
                        tracing::info!(
                            agent = kind.id(),
                            pid = spare.process.pid(),
                            idle_seconds = idle.as_secs_f64(),
                            "warm spare retired: no turn took it"
                        );
                        // Dropping kills its group; the supervisor reaps it.
                        drop(spare);
                    }
                }
                match spares.by_kind.values().map(|s| s.since + idle).min() {
                    Some(next) => next,
                    None => {
                        spares.watched = false;
                        return;
                    }
                }
            };
            tokio::time::sleep_until(next).await;
        }
    });
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::adapter::AdapterSource;

    fn host(launcher: Launcher) -> AgentHost {
        AgentHost {
            spares: Arc::default(),
            warm_start: false,
            spare_idle: None,
            launcher: Arc::new(launcher),
            parent_env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            env_api_key: None,
            home: Some("/nonexistent-home".into()),
            state_dir: "/tmp/state".into(),
            max_line_bytes: 1024,
        }
    }

    fn turn<'a>(kind: AgentKind, cwd: &'a Path, key: Option<&'a str>) -> TurnLaunch<'a> {
        TurnLaunch {
            permission_mode: "bypass",
            images: &[],
            kind,
            agent_mode: "build",
            model: None,
            continue_session: None,
            timeout: None,
            cwd,
            prompt: "hi",
            env: &[],
            api_key: key,
        }
    }

    #[test]
    fn codebuff_without_a_credential_does_not_start() {
        let host = host(Launcher::new(
            Some("/bin/true".into()),
            AdapterSource::embedded(Path::new("/nonexistent")),
        ));
        let tmp = std::env::temp_dir();
        let err = host
            .turn_line(&turn(AgentKind::Codebuff, &tmp, None))
            .unwrap_err();
        assert!(matches!(err, LaunchError::NoCredential));
        assert_eq!(err.code(), "credentials_missing");
        assert!(!host.has_credential(AgentKind::Codebuff, None));
        assert!(host.has_credential(AgentKind::Mock, None));
    }

    #[test]
    fn the_key_travels_in_the_turn_line_never_in_the_environment() {
        let host = host(Launcher::new(
            Some("/bin/true".into()),
            AdapterSource::embedded(Path::new("/nonexistent")),
        ));
        let tmp = std::env::temp_dir();
        let line = host
            .turn_line(&turn(AgentKind::Codebuff, &tmp, Some("sk-1")))
            .unwrap();
        assert_eq!(line.api_key.as_deref(), Some("sk-1"));
        assert_eq!(line.prompt, "hi");
        let spec = host.spare_spec(AgentKind::Codebuff, &tmp);
        assert_eq!(spec.program, PathBuf::from("/bin/true"));
        assert_eq!(
            spec.args,
            ["--stream-json", "--stdin-turn"].map(OsString::from)
        );
        let get = |name: &str| spec.env.iter().find(|(k, _)| k == name).map(|(_, v)| v);
        assert_eq!(get("CODEBUFF_API_KEY"), None);
        assert_eq!(
            get("CODEBUFF_STATE_DIR"),
            Some(&OsString::from("/tmp/state"))
        );
        // The mock gets no key at all.
        let line = host
            .turn_line(&turn(AgentKind::Mock, &tmp, Some("sk-1")))
            .unwrap();
        assert_eq!(line.api_key, None);
    }

    #[tokio::test]
    async fn start_failures_name_no_host_paths() {
        let host = host(Launcher::new(
            Some("/nonexistent/secret-dir/agent".into()),
            AdapterSource::embedded(Path::new("/nonexistent")),
        ));
        let tmp = std::env::temp_dir();
        let err = host
            .start(&turn(AgentKind::Codebuff, &tmp, Some("k")))
            .unwrap_err();
        assert!(matches!(err, LaunchError::ProgramMissing), "{err:?}");
        assert!(!err.to_string().contains("secret-dir"));

        let gone = Path::new("/nonexistent/session-dir");
        let err = host
            .start(&turn(AgentKind::Codebuff, gone, Some("k")))
            .unwrap_err();
        assert!(matches!(err, LaunchError::DirectoryMissing), "{err:?}");
        assert!(!err.to_string().contains("session-dir"));
    }

    /// A state of `/proc/<pid>`: gone, or a zombie waiting for its reaper.
    fn process_is_over(pid: u32) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => true,
            Ok(stat) => stat
                .rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        }
    }

    #[tokio::test]
    async fn a_spare_no_turn_takes_is_retired_and_the_next_prewarm_brings_one_back() {
        let dir = std::env::temp_dir().join(format!("codebuffd-spare-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let agent = dir.join("agent.sh");
        std::fs::write(&agent, "#!/bin/sh\nexec sleep 60\n").unwrap();
        std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let mut host = host(Launcher::new(
            Some(agent),
            AdapterSource::embedded(Path::new("/nonexistent")),
        ));
        host.warm_start = true;
        host.state_dir = dir.clone();
        host.spare_idle = Some(Duration::from_millis(400));

        host.prewarm(AgentKind::Codebuff);
        let first = host.spare_pid(AgentKind::Codebuff).expect("a spare waits");
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(
            host.spare_pid(AgentKind::Codebuff),
            Some(first),
            "retired early"
        );

        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while host.spare_pid(AgentKind::Codebuff).is_some() {
            assert!(std::time::Instant::now() < deadline, "never retired");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        while !process_is_over(first) {
            assert!(
                std::time::Instant::now() < deadline,
                "the retired spare still runs"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }

        // The next session's prewarm starts a new one, watched again.
        host.prewarm(AgentKind::Codebuff);
        let second = host.spare_pid(AgentKind::Codebuff).expect("a spare again");
        assert_ne!(second, first);
        while host.spare_pid(AgentKind::Codebuff).is_some() {
            assert!(
                std::time::Instant::now() < deadline,
                "the new spare was never retired"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        while !process_is_over(second) {
            assert!(
                std::time::Instant::now() < deadline,
                "the second spare still runs"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn errno_values_are_told_apart() {
        let io = |errno: nix::errno::Errno| SpawnError::Io {
            program: "/x".into(),
            source: io::Error::from_raw_os_error(errno as i32),
        };
        assert!(matches!(
            LaunchError::from_spawn(io(nix::errno::Errno::EMFILE)),
            LaunchError::ResourcesExhausted
        ));
        assert!(matches!(
            LaunchError::from_spawn(io(nix::errno::Errno::E2BIG)),
            LaunchError::TooLong
        ));
        assert!(matches!(
            LaunchError::from_spawn(io(nix::errno::Errno::EIO)),
            LaunchError::Other(_)
        ));
    }
}
