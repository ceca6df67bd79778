//! The command-line arguments the settings are resolved from ([`DaemonConfig::resolve`]): the
//! engine's ([`EngineArgs`], shared by `codebuffd server` and `codebuffd acp`, and the base of
//! the terminal client's in-process engine) and the server's ([`ServerArgs`]: the listener, the
//! doors, and the engine's). `cli.rs` composes them into commands; each also comes from its
//! `CODEBUFFD_*` variable or config file key (precedence in [`Layers`](super::Layers)).
//!
//! [`DaemonConfig::resolve`]: super::DaemonConfig::resolve

use std::path::PathBuf;

/// The engine's settings: where sessions are kept, how agents run, the permission policy,
/// budgets and retention. The same flags, variables and config keys for every command that
/// runs an engine.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct EngineArgs {
    /// Where the daemon keeps its data [default: $XDG_DATA_HOME/codebuffd or
    /// ~/.local/share/codebuffd; env CODEBUFFD_DATA_DIR].
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Where events and sessions are kept: `sqlite://PATH`, `postgres://…` (shared by many
    /// daemons), or `memory` (lost at exit) [default: sqlite in the data dir; env CODEBUFFD_STORE].
    #[arg(long, value_name = "SPEC")]
    pub store: Option<String>,
    /// With a shared Postgres store: how long an engine that stops heartbeating keeps its
    /// sessions before a survivor interrupts their turns (2–3600 s) [default: 30; env
    /// CODEBUFFD_STORE_LEASE]. SQLite engines need none: the OS releases a dead one's lock.
    #[arg(long, value_name = "SECONDS")]
    pub store_lease: Option<f64>,
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
    /// The permission mode of sessions that do not choose one: `bypass` (tools run without
    /// asking), `default` (every tool that changes files or runs code asks: a `/v1` client, or
    /// the ACP client through `session/request_permission`), `acceptEdits` (edits run, commands
    /// ask), `plan` (read-only) [default: bypass; env CODEBUFFD_PERMISSION_MODE].
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
    /// Retire (kill) a warm agent process that no turn took for this many seconds, 0 to keep
    /// it for as long as the engine runs; the next session or turn starts a new one [default:
    /// 600; env CODEBUFFD_WARM_SPARE_IDLE].
    #[arg(long, value_name = "SECONDS")]
    pub warm_spare_idle: Option<f64>,
    /// Let sessions set variables that change what programs load (`LD_*`, `NODE_OPTIONS`,
    /// `BASH_ENV`, …) in their `env`; refused by default [env CODEBUFFD_ALLOW_LOADER_ENV=1].
    #[arg(long)]
    pub allow_loader_env: bool,
    /// Delete ended sessions (their records and events) once their last event is this many
    /// days old; checked in the background [default: keep them; env CODEBUFFD_RETENTION_DAYS].
    #[arg(long, value_name = "DAYS")]
    pub retention_days: Option<f64>,
    /// A TOML file with any of these settings (of `codebuffd server`), keyed by the flags'
    /// names with `_` (`turn_timeout = 600`); read before the user's
    /// `~/.config/codebuffd/config.toml` [env CODEBUFFD_CONFIG].
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// Arguments of `codebuffd server`: its listener and doors, then the engine's settings.
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
    /// Largest accepted request body [default: 1 MiB; env CODEBUFFD_MAX_BODY_BYTES].
    #[arg(long, value_name = "BYTES")]
    pub max_body_bytes: Option<usize>,
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
    /// Webhooks and metrics (`config/webhooks.rs`).
    #[command(flatten)]
    pub webhooks: super::WebhookArgs,
    // The engine's settings (their help lines come after this command's own).
    #[command(flatten)]
    pub engine: EngineArgs,
}

impl ServerArgs {
    /// The arguments of an engine without a listener (`codebuffd acp`): the engine's settings
    /// resolved the server's way, no token asked for.
    pub fn without_listener(engine: EngineArgs) -> ServerArgs {
        ServerArgs {
            no_token: true,
            engine,
            ..ServerArgs::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Server {
        #[command(flatten)]
        args: ServerArgs,
    }

    #[derive(Parser)]
    struct EngineOnly {
        #[command(flatten)]
        engine: EngineArgs,
    }

    const ENGINE_FLAGS: [&str; 13] = [
        "--data-dir=/d",
        "--store=memory",
        "--agent-command=/bin/agent",
        "--turn-timeout=5",
        "--inactivity-timeout=6",
        "--max-line-bytes=2048",
        "--permission-mode=plan",
        "--permission-timeout=7",
        "--max-session-credits=8",
        "--no-warm-start",
        "--allow-loader-env",
        "--retention-days=9",
        "--config=/c.toml",
    ];

    fn parse<P: Parser>(flags: &[&str]) -> P {
        P::try_parse_from(std::iter::once("codebuffd").chain(flags.iter().copied())).unwrap()
    }

    #[test]
    fn the_engine_flags_mean_the_same_with_or_without_the_server() {
        let flags = &ENGINE_FLAGS;
        let server: Server = parse(flags);
        let alone: EngineOnly = parse(flags);
        assert_eq!(
            format!("{:?}", server.args.engine),
            format!("{:?}", alone.engine)
        );
        let e = alone.engine;
        assert_eq!(e.data_dir.as_deref(), Some(std::path::Path::new("/d")));
        assert_eq!(e.store.as_deref(), Some("memory"));
        assert_eq!(
            e.agent_command.as_deref(),
            Some(std::path::Path::new("/bin/agent"))
        );
        assert_eq!(
            (e.turn_timeout, e.inactivity_timeout),
            (Some(5.0), Some(6.0))
        );
        assert_eq!(e.max_line_bytes, Some(2048));
        assert_eq!(e.permission_mode.as_deref(), Some("plan"));
        assert_eq!(e.permission_timeout, Some(7.0));
        assert_eq!(e.max_session_credits, Some(8.0));
        assert!(e.no_warm_start && e.allow_loader_env);
        assert_eq!(e.retention_days, Some(9.0));
        assert_eq!(e.config.as_deref(), Some(std::path::Path::new("/c.toml")));
    }

    #[test]
    fn server_only_flags_are_not_engine_flags() {
        assert!(EngineOnly::try_parse_from(["codebuffd", "--port=1"]).is_err());
        let server: Server = parse(&["--port=1", "--turn-timeout=2"]);
        assert_eq!(server.args.port, Some(1));
        assert_eq!(server.args.engine.turn_timeout, Some(2.0));
        assert!(Server::try_parse_from(["codebuffd", "--token=t", "--no-token"]).is_err());
    }

    #[test]
    fn an_engine_without_a_listener_asks_for_no_token() {
        let engine: EngineOnly = parse(&["--store=memory"]);
        let args = ServerArgs::without_listener(engine.engine);
        assert!(args.no_token);
        assert_eq!(args.token, None);
        assert_eq!(args.engine.store.as_deref(), Some("memory"));
    }
}
