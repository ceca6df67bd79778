//! Starting one agent turn: which program, its arguments, its environment (with the
//! credential), and the spawn itself, behind one typed error.
//!
//! [`AgentHost`] is what the daemon knows about running agents (the launcher, the daemon's
//! environment, where credentials and run state live); [`TurnLaunch`] is what one turn asks
//! for. A failure says what went wrong in words fit for a client (no host paths: those go to
//! the daemon's log) and has a stable code for the turn's `error` event.

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::command::{agent_args, TurnCommand};
use super::credentials;
use super::environment::agent_env;
use super::launcher::{AgentKind, Launcher};
use super::process::{AgentProcess, SpawnError, SpawnSpec};

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

/// Everything the daemon knows about running agents; built once at start.
#[derive(Debug)]
pub struct AgentHost {
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

    /// The complete command of a turn.
    pub fn spawn_spec(&self, turn: &TurnLaunch) -> Result<SpawnSpec, LaunchError> {
        let credential = credentials::resolve(
            turn.api_key,
            self.env_api_key.as_deref(),
            self.home.as_deref(),
        );
        if turn.kind == AgentKind::Codebuff && credential.is_none() {
            return Err(LaunchError::NoCredential);
        }
        let (program, mut args) = self.launcher.program(turn.kind);
        args.extend(agent_args(&TurnCommand {
            agent_mode: Some(turn.agent_mode),
            model: turn.model,
            continue_session: turn.continue_session,
            timeout: turn.timeout,
            cwd: turn.cwd,
            prompt: turn.prompt,
        }));
        let mut env = agent_env(
            self.parent_env.iter().cloned(),
            turn.env,
            credential.as_ref(),
        );
        env.retain(|(k, _)| k != "CODEBUFF_STATE_DIR");
        env.push(("CODEBUFF_STATE_DIR".into(), self.state_dir.clone().into()));
        Ok(SpawnSpec {
            program,
            args,
            cwd: turn.cwd.to_path_buf(),
            env,
            max_line_bytes: self.max_line_bytes,
        })
    }

    /// Starts a turn's agent process.
    pub fn start(&self, turn: &TurnLaunch) -> Result<AgentProcess, LaunchError> {
        let spec = self.spawn_spec(turn)?;
        AgentProcess::spawn(spec).map_err(|error| {
            // The host's details (paths) stay in the daemon's log.
            tracing::warn!(%error, "the agent command could not start");
            LaunchError::from_spawn(error)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(launcher: Launcher) -> AgentHost {
        AgentHost {
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
        let host = host(Launcher::new(Some("/bin/true".into()), None));
        let tmp = std::env::temp_dir();
        let err = host
            .spawn_spec(&turn(AgentKind::Codebuff, &tmp, None))
            .unwrap_err();
        assert!(matches!(err, LaunchError::NoCredential));
        assert_eq!(err.code(), "credentials_missing");
        assert!(!host.has_credential(AgentKind::Codebuff, None));
        assert!(host.has_credential(AgentKind::Mock, None));
    }

    #[test]
    fn the_spec_carries_the_key_and_the_state_dir_in_the_environment() {
        let host = host(Launcher::new(Some("/bin/true".into()), None));
        let tmp = std::env::temp_dir();
        let spec = host
            .spawn_spec(&turn(AgentKind::Codebuff, &tmp, Some("sk-1")))
            .unwrap();
        assert_eq!(spec.program, PathBuf::from("/bin/true"));
        assert_eq!(spec.args.last(), Some(&OsString::from("hi")));
        let get = |name: &str| spec.env.iter().find(|(k, _)| k == name).map(|(_, v)| v);
        assert_eq!(get("CODEBUFF_API_KEY"), Some(&OsString::from("sk-1")));
        assert_eq!(
            get("CODEBUFF_STATE_DIR"),
            Some(&OsString::from("/tmp/state"))
        );
    }

    #[tokio::test]
    async fn start_failures_name_no_host_paths() {
        let host = host(Launcher::new(
            Some("/nonexistent/secret-dir/agent".into()),
            None,
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
