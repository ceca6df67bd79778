//! The command line: every subcommand and its arguments (clap).

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::agent::AgentCommandArgs;
use crate::config::{EngineArgs, ServerArgs};

/// codebuffd: the Codebuff coding agent behind the sandbox-agent `/v1` universal-events API.
#[derive(Debug, Parser)]
#[command(name = "codebuffd", version, about)]
pub struct Cli {
    /// None: the REPL on a terminal (as `chat`).
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// The subcommands.
// Parsed once per process: the size of the server's arguments does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the daemon: the `/v1` HTTP API on `--host`:`--port`.
    #[command(alias = "serve")]
    Server(ServerArgs),
    /// Convert a Codebuff JSON-lines stream to universal events (one JSON per line on stdout),
    /// as a new session's single turn would record them.
    Convert(ConvertArgs),
    /// A scripted stand-in for the Codebuff agent command (the `mock` agent): honours the same
    /// contract (flags, JSON lines, stdin answers, exit codes); the prompt's first word picks
    /// the scenario.
    MockAgent(AgentCommandArgs),
    /// Check what the daemon needs — Node.js and npm, the Codebuff adapter, credentials (where
    /// from, never the key), the data directory, the store — and say what to do about each
    /// problem; exit status 1 when there is one.
    Doctor(DoctorArgs),
    /// Unpack the Codebuff adapter this binary carries and install its Node packages now
    /// (`npm ci`), as the first codebuff session would; prints the adapter's directory.
    InstallAdapter(InstallAdapterArgs),
    /// Print the OpenAPI 3.1 document of the `/v1` API (as `GET /v1/openapi.json` serves it).
    Openapi,
    /// Run one turn in a new session and exit: the answer on stdout (every event as JSON lines
    /// with `--json`), the progress on stderr. In-process on the daemon's data directory
    /// unless `--url` names a running daemon.
    #[command(alias = "run")]
    Exec(crate::term::ExecArgs),
    /// Continue a session: one more turn, or the REPL on it when no prompt is given on a
    /// terminal.
    Resume(crate::term::ResumeArgs),
    /// The REPL on a new session (also `codebuffd` alone on a terminal).
    Chat(crate::term::ChatArgs),
    /// List, show, follow and steer sessions.
    Sessions(crate::term::SessionsArgs),
    /// `config show`: the terminal client's effective settings and where each came from.
    Config(crate::term::ConfigArgs),
    /// Run as an Agent Client Protocol (v1) agent on stdin/stdout, for a client that launches
    /// it (an editor, `acpx`): the server's engine and store, JSON-RPC on stdout, logs on
    /// stderr (`docs/acp.md`).
    Acp(AcpArgs),
}

/// Arguments of `codebuffd convert`.
#[derive(Debug, clap::Args)]
pub struct ConvertArgs {
    /// The Codebuff stream to read; `-` or nothing for stdin.
    pub file: Option<PathBuf>,
    /// The user's prompt for the turn (records the user item).
    #[arg(long)]
    pub prompt: Option<String>,
    /// Keep each event's original agent line in `raw`.
    #[arg(long)]
    pub include_raw: bool,
    /// The session id the events carry.
    #[arg(long, default_value = "convert")]
    pub session_id: String,
    /// Longest accepted line, in bytes; longer lines are reported as `agent.unparsed`.
    #[arg(long, default_value_t = 16 * 1024 * 1024)]
    pub max_line_bytes: usize,
    /// Stamp every event with this time instead of the clock (reproducible output).
    #[arg(long, value_name = "RFC3339")]
    pub fixed_time: Option<String>,
}

/// Arguments of `codebuffd doctor`: the server's settings that it checks (also from
/// `CODEBUFFD_*` and the config file, as for the server).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct DoctorArgs {
    /// The data directory to check [default: as `codebuffd server`; env CODEBUFFD_DATA_DIR].
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// The store to open [default: as `codebuffd server`; env CODEBUFFD_STORE].
    #[arg(long, value_name = "SPEC")]
    pub store: Option<String>,
    /// The codebuff agent command to check instead of the adapter [env CODEBUFFD_AGENT_COMMAND].
    #[arg(long, value_name = "PATH")]
    pub agent_command: Option<PathBuf>,
    /// The server's TOML config file [env CODEBUFFD_CONFIG].
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// Arguments of `codebuffd install-adapter`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct InstallAdapterArgs {
    /// Install into this directory instead of the data directory (it must not exist, or be
    /// empty); run the daemon with `CODEBUFFD_ADAPTER_DIR` set to it.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["data_dir", "config"])]
    pub into: Option<PathBuf>,
    /// The data directory [default: as `codebuffd server`; env CODEBUFFD_DATA_DIR].
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// The server's TOML config file [env CODEBUFFD_CONFIG].
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// Arguments of `codebuffd acp`: the agent of its sessions and the engine settings of
/// `codebuffd server` (same flags, `CODEBUFFD_*` variables and config file keys).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct AcpArgs {
    /// The agent of the sessions `session/new` creates: `codebuff`, or `mock` (the scripted
    /// stand-in, for tests and demos).
    #[arg(long, value_name = "AGENT", value_parser = ["codebuff", "mock"], default_value = "codebuff")]
    pub agent: String,
    // The engine's settings (their help lines come after this command's own).
    #[command(flatten)]
    pub engine: EngineArgs,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn acp_and_server_take_the_same_engine_flags() {
        let engine = |argv: &[&str]| match Cli::try_parse_from(argv).unwrap().command {
            Some(Command::Acp(args)) => args.engine,
            Some(Command::Server(args)) => args.engine,
            other => panic!("{other:?}"),
        };
        let flags = ["--store=memory", "--turn-timeout=5", "--no-warm-start"];
        let acp = engine(&[&["codebuffd", "acp", "--agent=mock"][..], &flags].concat());
        let server = engine(&[&["codebuffd", "server", "--port=1"][..], &flags].concat());
        assert_eq!(format!("{acp:?}"), format!("{server:?}"));
        assert_eq!(acp.turn_timeout, Some(5.0));
        assert!(Cli::try_parse_from(["codebuffd", "acp", "--port=1"]).is_err());
    }
}
