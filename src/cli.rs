//! The command line: every subcommand and its arguments (clap).

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::agent::AgentCommandArgs;

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

/// Arguments of `codebuffd server`; each also comes from `CODEBUFFD_*` or the TOML file.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ServerArgs {
    /// Address to listen on [default: 127.0.0.1; env CODEBUFFD_HOST].
    #[arg(long)]
    pub host: Option<String>,
    /// Port to listen on [default: 2468; env CODEBUFFD_PORT].
    #[arg(long)]
    pub port: Option<u16>,
    /// Require this token (`Authorization: Bearer|Token <T>`, or Basic with it as password)
    /// [env CODEBUFFD_TOKEN]. Prefer `CODEBUFFD_TOKEN` or `--token-file`: other processes of
    /// the machine can read a command line (the daemon blanks it once started, but not at once).
    #[arg(long, conflicts_with_all = ["no_token", "token_file"])]
    pub token: Option<String>,
    /// Read the token from this file (its first line; the file should be readable by the
    /// daemon's user only) [env CODEBUFFD_TOKEN_FILE].
    #[arg(long, conflicts_with = "no_token")]
    pub token_file: Option<std::path::PathBuf>,
    /// Run without authentication [env CODEBUFFD_NO_TOKEN=1].
    #[arg(long)]
    pub no_token: bool,
    /// Allow browser requests from this origin (repeatable; none by default)
    /// [env CODEBUFFD_CORS_ALLOW_ORIGIN, comma-separated].
    #[arg(long)]
    pub cors_allow_origin: Vec<String>,
    /// Also answer requests for this host name (repeatable; `*` for any). By default an open
    /// daemon answers only its loopback names and its address, against DNS rebinding; one
    /// with a token answers any [env CODEBUFFD_ALLOWED_HOST, comma-separated].
    #[arg(long)]
    pub allowed_host: Vec<String>,
    /// Where the daemon keeps its data [default: $XDG_DATA_HOME/codebuffd or
    /// ~/.local/share/codebuffd; env CODEBUFFD_DATA_DIR].
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// The codebuff agent command [default: the bundled adapter; env CODEBUFFD_AGENT_COMMAND].
    #[arg(long, value_name = "PATH")]
    pub agent_command: Option<PathBuf>,
    /// Default per-turn timeout in seconds, 0 for none [default: 3600; env CODEBUFFD_TURN_TIMEOUT].
    #[arg(long, value_name = "SECONDS")]
    pub turn_timeout: Option<f64>,
    /// Stop a turn whose agent prints nothing for this long, 0 for never [default: 900; env
    /// CODEBUFFD_INACTIVITY_TIMEOUT].
    #[arg(long, value_name = "SECONDS")]
    pub inactivity_timeout: Option<f64>,
    /// Longest accepted agent output line [default: 8 MiB; env CODEBUFFD_MAX_LINE_BYTES].
    #[arg(long, value_name = "BYTES")]
    pub max_line_bytes: Option<usize>,
    /// Largest accepted request body [default: 1 MiB; env CODEBUFFD_MAX_BODY_BYTES].
    #[arg(long, value_name = "BYTES")]
    pub max_body_bytes: Option<usize>,
    /// Where events and sessions are kept: `sqlite://PATH`, `postgres://…` (shared by many
    /// daemons), or `memory` (lost at exit) [default: sqlite in the data dir; env CODEBUFFD_STORE].
    #[arg(long, value_name = "SPEC")]
    pub store: Option<String>,
    /// Seconds between SSE keep-alive comments on idle streams [default: 15; env
    /// CODEBUFFD_SSE_KEEP_ALIVE].
    #[arg(long, value_name = "SECONDS")]
    pub sse_keep_alive: Option<f64>,
    /// Seconds a client may take to send a request's headers (also: to start its next request
    /// on a kept-alive connection) [default: 10; env CODEBUFFD_HEADER_READ_TIMEOUT].
    #[arg(long, value_name = "SECONDS")]
    pub header_read_timeout: Option<f64>,
    /// Serve at most this many connections at once [default: half the open-files limit
    /// left after a reserve; env CODEBUFFD_MAX_CONNECTIONS].
    #[arg(long, value_name = "N")]
    pub max_connections: Option<usize>,
    /// Keep at most this many ACP servers (`/v1/acp/{id}`, `/acp` WebSockets) at once; a client
    /// asking for one more gets 503 [default: 64; env CODEBUFFD_MAX_ACP_SERVERS].
    #[arg(long, value_name = "N")]
    pub max_acp_servers: Option<usize>,
    /// Retire (delete, ending its sessions) an ACP server over HTTP that no client posted to or
    /// read for this long while no request of it ran [default: 3600; env
    /// CODEBUFFD_ACP_IDLE_TIMEOUT].
    #[arg(long, value_name = "SECONDS")]
    pub acp_idle_timeout: Option<f64>,
    /// The permission mode of sessions that do not choose one: `bypass` (tools run without
    /// asking), `default` (every tool that changes files or runs code asks), `acceptEdits`
    /// (edits run, commands ask), `plan` (read-only) [default: bypass; env
    /// CODEBUFFD_PERMISSION_MODE].
    #[arg(long, value_name = "MODE")]
    pub permission_mode: Option<String>,
    /// Seconds a permission request waits for an answer before it is rejected [default: 600;
    /// env CODEBUFFD_PERMISSION_TIMEOUT].
    #[arg(long, value_name = "SECONDS")]
    pub permission_timeout: Option<f64>,
    /// The credit budget of sessions that do not set `maxCredits` [default: none; env
    /// CODEBUFFD_MAX_SESSION_CREDITS].
    #[arg(long, value_name = "CREDITS")]
    pub max_session_credits: Option<f64>,
    /// Start agents only when a turn needs them, instead of keeping one warm process per agent
    /// kind in use [env CODEBUFFD_NO_WARM_START=1].
    #[arg(long)]
    pub no_warm_start: bool,
    /// Let sessions set variables that change what programs load (`LD_*`, `NODE_OPTIONS`,
    /// `BASH_ENV`, …) in their `env`; refused by default [env CODEBUFFD_ALLOW_LOADER_ENV=1].
    #[arg(long)]
    pub allow_loader_env: bool,
    /// Close a `/v1/ws` connection that sends nothing for this long [default: 60; env
    /// CODEBUFFD_WS_HEARTBEAT_TIMEOUT].
    #[arg(long, value_name = "SECONDS")]
    pub ws_heartbeat_timeout: Option<f64>,
    /// The agent of the sessions `/v1/ws` creates for prompts that name none: `codebuff` or
    /// `mock` [default: codebuff; env CODEBUFFD_WS_DEFAULT_AGENT].
    #[arg(long, value_name = "AGENT")]
    pub ws_default_agent: Option<String>,
    /// The largest message a `/v1/ws` client may send, in bytes (64 KiB to 1 GiB); a larger one
    /// closes the connection (1009) [default: 16 MiB; env CODEBUFFD_WS_MAX_FRAME_BYTES].
    #[arg(long, value_name = "BYTES")]
    pub ws_max_frame_bytes: Option<usize>,
    /// Seconds a question of a `/v1/ws` prompt whose client does not take `question` actions
    /// waits for an answer from elsewhere before it is declined (skipped) [default: 60; env
    /// CODEBUFFD_WS_QUESTION_TIMEOUT].
    #[arg(long, value_name = "SECONDS")]
    pub ws_question_timeout: Option<f64>,
    /// The directory of sessions that do not name one [default: the daemon's working
    /// directory; env CODEBUFFD_WORKDIR]. Sessions may not work in the daemon's own
    /// installation or data directory.
    #[arg(long, value_name = "DIR")]
    pub workdir: Option<PathBuf>,
    /// Delete ended sessions (their records and events) once their last event is this many
    /// days old; checked in the background [default: keep them; env CODEBUFFD_RETENTION_DAYS].
    #[arg(long, value_name = "DAYS")]
    pub retention_days: Option<f64>,
    /// A TOML file with any of the settings above, keyed by the flags' names with `_`
    /// (`turn_timeout = 600`); read before the user's `~/.config/codebuffd/config.toml`
    /// [env CODEBUFFD_CONFIG].
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
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
    /// Where sessions are kept, as for `codebuffd server` [env CODEBUFFD_DATA_DIR].
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// The store: `sqlite://PATH`, `postgres://…` or `memory` [default: sqlite in the data dir;
    /// env CODEBUFFD_STORE].
    #[arg(long, value_name = "SPEC")]
    pub store: Option<String>,
    /// The codebuff agent command [default: the bundled adapter; env CODEBUFFD_AGENT_COMMAND].
    #[arg(long, value_name = "PATH")]
    pub agent_command: Option<PathBuf>,
    /// Per-turn timeout in seconds, 0 for none [default: 3600; env CODEBUFFD_TURN_TIMEOUT].
    #[arg(long, value_name = "SECONDS")]
    pub turn_timeout: Option<f64>,
    /// Stop a turn whose agent prints nothing for this long, 0 for never [default: 900; env
    /// CODEBUFFD_INACTIVITY_TIMEOUT].
    #[arg(long, value_name = "SECONDS")]
    pub inactivity_timeout: Option<f64>,
    /// Longest accepted agent output line [default: 8 MiB; env CODEBUFFD_MAX_LINE_BYTES].
    #[arg(long, value_name = "BYTES")]
    pub max_line_bytes: Option<usize>,
    /// `bypass`, `default`, `acceptEdits` or `plan`; with `default` and `acceptEdits` gated
    /// tools ask the client (`session/request_permission`) [default: bypass; env
    /// CODEBUFFD_PERMISSION_MODE].
    #[arg(long, value_name = "MODE")]
    pub permission_mode: Option<String>,
    /// Seconds a permission request waits before it is rejected [default: 600; env
    /// CODEBUFFD_PERMISSION_TIMEOUT].
    #[arg(long, value_name = "SECONDS")]
    pub permission_timeout: Option<f64>,
    /// The credit budget of each session [default: none; env CODEBUFFD_MAX_SESSION_CREDITS].
    #[arg(long, value_name = "CREDITS")]
    pub max_session_credits: Option<f64>,
    /// Start agents only when a turn needs them [env CODEBUFFD_NO_WARM_START=1].
    #[arg(long)]
    pub no_warm_start: bool,
    /// Let sessions set loader variables (`LD_*`, `NODE_OPTIONS`, …) [env
    /// CODEBUFFD_ALLOW_LOADER_ENV=1].
    #[arg(long)]
    pub allow_loader_env: bool,
    /// Delete ended sessions once their last event is this many days old [default: keep them;
    /// env CODEBUFFD_RETENTION_DAYS].
    #[arg(long, value_name = "DAYS")]
    pub retention_days: Option<f64>,
    /// The server's TOML config file [env CODEBUFFD_CONFIG].
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

impl AcpArgs {
    /// The same settings as `codebuffd server` arguments, to resolve them the server's way;
    /// there is no listener, so no token is asked for.
    pub fn server_args(&self) -> ServerArgs {
        ServerArgs {
            no_token: true,
            data_dir: self.data_dir.clone(),
            store: self.store.clone(),
            agent_command: self.agent_command.clone(),
            turn_timeout: self.turn_timeout,
            inactivity_timeout: self.inactivity_timeout,
            max_line_bytes: self.max_line_bytes,
            permission_mode: self.permission_mode.clone(),
            permission_timeout: self.permission_timeout,
            max_session_credits: self.max_session_credits,
            no_warm_start: self.no_warm_start,
            allow_loader_env: self.allow_loader_env,
            retention_days: self.retention_days,
            config: self.config.clone(),
            ..ServerArgs::default()
        }
    }
}
