//! Daemon settings: defaults < TOML file < `CODEBUFFD_*` environment < command-line flags.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::cli::ServerArgs;

/// Everything `codebuffd server` runs with, after merging all sources.
#[derive(Debug, Clone, PartialEq)]
pub struct DaemonConfig {
    pub host: IpAddr,
    pub port: u16,
    /// `None` = no authentication.
    pub token: Option<String>,
    pub cors_allow_origins: Vec<String>,
    /// Host names answered besides the loopback names and the bound address.
    pub allowed_hosts: Vec<String>,
    pub data_dir: PathBuf,
    /// The codebuff agent command; `None` = the bundled adapter.
    pub agent_command: Option<PathBuf>,
    pub turn_timeout: Option<Duration>,
    pub inactivity_timeout: Option<Duration>,
    pub max_line_bytes: usize,
    pub max_body_bytes: usize,
    pub sse_keep_alive: Duration,
    /// The store spec (`sqlite`, `sqlite://PATH`, `postgres://…`, `memory`).
    pub store: String,
    /// Sessions may set loader variables (`LD_PRELOAD`, `NODE_OPTIONS`, …) in their `env`.
    pub allow_loader_env: bool,
    /// Connections served at once; `None` = from the open-files limit.
    pub max_connections: Option<usize>,
    /// How long a client may take to send a request's headers.
    pub header_read_timeout: Duration,
    /// Keep a warm agent process per agent kind in use.
    pub warm_start: bool,
    /// The permission mode of sessions that do not choose one.
    pub permission_mode: String,
    /// How long a permission request waits for an answer.
    pub permission_timeout: Duration,
    /// The credit budget of sessions that do not set one.
    pub max_session_credits: Option<f64>,
    /// `/v1/ws`: a connection silent this long is closed.
    pub ws_heartbeat_timeout: Duration,
    /// `/v1/ws`: the agent of the sessions it creates for prompts that name none.
    pub ws_default_agent: String,
}

impl DaemonConfig {
    /// The engine's part of the settings.
    pub fn engine(&self) -> crate::engine::EngineConfig {
        crate::engine::EngineConfig {
            data_dir: self.data_dir.clone(),
            store: self.store.clone(),
            agent_command: self.agent_command.clone(),
            limits: crate::session::Limits {
                turn_timeout: self.turn_timeout,
                inactivity_timeout: self.inactivity_timeout,
                max_line_bytes: self.max_line_bytes,
                permission_timeout: self.permission_timeout,
                ..crate::session::Limits::default()
            },
            allow_loader_env: self.allow_loader_env,
            warm_start: self.warm_start,
            permission_mode: self.permission_mode.clone(),
            max_session_credits: self.max_session_credits,
        }
    }
}

/// The TOML file's keys (all optional).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    host: Option<String>,
    port: Option<u16>,
    token: Option<String>,
    no_token: Option<bool>,
    cors_allow_origins: Option<Vec<String>>,
    allowed_host: Option<Vec<String>>,
    data_dir: Option<PathBuf>,
    agent_command: Option<PathBuf>,
    turn_timeout_seconds: Option<f64>,
    inactivity_timeout_seconds: Option<f64>,
    max_line_bytes: Option<usize>,
    max_body_bytes: Option<usize>,
    sse_keep_alive_seconds: Option<f64>,
    store: Option<String>,
    allow_loader_env: Option<bool>,
    max_connections: Option<usize>,
    header_read_timeout: Option<f64>,
    no_warm_start: Option<bool>,
    permission_mode: Option<String>,
    permission_timeout: Option<f64>,
    max_session_credits: Option<f64>,
    ws_heartbeat_timeout: Option<f64>,
    ws_default_agent: Option<String>,
}

/// Why the settings are unusable.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

const DEFAULT_PORT: u16 = 2468;
const DEFAULT_MAX_LINE: usize = 8 * 1024 * 1024;
const DEFAULT_MAX_BODY: usize = 1024 * 1024;

impl DaemonConfig {
    /// Merges flags, the environment (through `env`) and the config file they name.
    pub fn resolve(
        args: &ServerArgs,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<DaemonConfig, ConfigError> {
        let file_path = args
            .config
            .clone()
            .or_else(|| env("CODEBUFFD_CONFIG").map(PathBuf::from));
        let file = match &file_path {
            Some(p) => read_file(p)?,
            None => FileConfig::default(),
        };
        let env_parse = |name: &str| env(name).filter(|v| !v.is_empty());

        let host = match args
            .host
            .clone()
            .or_else(|| env_parse("CODEBUFFD_HOST"))
            .or(file.host)
        {
            Some(h) => parse_host(&h)?,
            None => IpAddr::from([127, 0, 0, 1]),
        };
        let port = match args.port {
            Some(p) => p,
            None => match env_parse("CODEBUFFD_PORT") {
                Some(p) => p
                    .parse()
                    .map_err(|_| ConfigError(format!("CODEBUFFD_PORT: `{p}` is not a port")))?,
                None => file.port.unwrap_or(DEFAULT_PORT),
            },
        };
        let no_token = args.no_token
            || env_parse("CODEBUFFD_NO_TOKEN").is_some_and(|v| truthy(&v))
            || (args.token.is_none()
                && env_parse("CODEBUFFD_TOKEN").is_none()
                && file.no_token.unwrap_or(false));
        let token = if args.no_token {
            None
        } else {
            args.token
                .clone()
                .or_else(|| env_parse("CODEBUFFD_TOKEN"))
                .or(file.token)
                .filter(|_| !no_token || args.token.is_some())
        };
        if let Some(t) = &token {
            if t.is_empty() {
                return Err(ConfigError("the token must not be empty".into()));
            }
        }
        if token.is_none() && !no_token && !host.is_loopback() {
            return Err(ConfigError(format!(
                "refusing to listen on {host} without authentication: give --token TOKEN, or --no-token to run open"
            )));
        }
        let cors_allow_origins = if !args.cors_allow_origin.is_empty() {
            args.cors_allow_origin.clone()
        } else if let Some(list) = env_parse("CODEBUFFD_CORS_ALLOW_ORIGIN") {
            list.split(',')
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .collect()
        } else {
            file.cors_allow_origins.unwrap_or_default()
        };
        let allowed_hosts = if !args.allowed_host.is_empty() {
            args.allowed_host.clone()
        } else if let Some(list) = env_parse("CODEBUFFD_ALLOWED_HOST") {
            list.split(',')
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .collect()
        } else {
            file.allowed_host.unwrap_or_default()
        };
        let data_dir = args
            .data_dir
            .clone()
            .or_else(|| env_parse("CODEBUFFD_DATA_DIR").map(PathBuf::from))
            .or(file.data_dir)
            .unwrap_or_else(|| default_data_dir(env));
        let agent_command = args
            .agent_command
            .clone()
            .or_else(|| env_parse("CODEBUFFD_AGENT_COMMAND").map(PathBuf::from))
            .or(file.agent_command);
        let turn_timeout = seconds(
            "turn timeout",
            args.turn_timeout
                .or(parse_num(
                    env_parse("CODEBUFFD_TURN_TIMEOUT"),
                    "CODEBUFFD_TURN_TIMEOUT",
                )?)
                .or(file.turn_timeout_seconds)
                .unwrap_or(3600.0),
        )?;
        let inactivity_timeout = seconds(
            "inactivity timeout",
            args.inactivity_timeout
                .or(parse_num(
                    env_parse("CODEBUFFD_INACTIVITY_TIMEOUT"),
                    "CODEBUFFD_INACTIVITY_TIMEOUT",
                )?)
                .or(file.inactivity_timeout_seconds)
                .unwrap_or(900.0),
        )?;
        let max_line_bytes = args
            .max_line_bytes
            .or(parse_num(
                env_parse("CODEBUFFD_MAX_LINE_BYTES"),
                "CODEBUFFD_MAX_LINE_BYTES",
            )?)
            .or(file.max_line_bytes)
            .unwrap_or(DEFAULT_MAX_LINE);
        let max_body_bytes = args
            .max_body_bytes
            .or(parse_num(
                env_parse("CODEBUFFD_MAX_BODY_BYTES"),
                "CODEBUFFD_MAX_BODY_BYTES",
            )?)
            .or(file.max_body_bytes)
            .unwrap_or(DEFAULT_MAX_BODY);
        let sse_keep_alive = seconds(
            "SSE keep-alive",
            args.sse_keep_alive
                .or(parse_num(
                    env_parse("CODEBUFFD_SSE_KEEP_ALIVE"),
                    "CODEBUFFD_SSE_KEEP_ALIVE",
                )?)
                .or(file.sse_keep_alive_seconds)
                .unwrap_or(15.0),
        )?
        .unwrap_or(Duration::from_secs(15));
        if max_line_bytes < 1024 || max_body_bytes < 1024 {
            return Err(ConfigError(
                "line and body limits must be at least 1024 bytes".into(),
            ));
        }
        let store = args
            .store
            .clone()
            .or_else(|| env_parse("CODEBUFFD_STORE"))
            .or(file.store)
            .unwrap_or_else(|| "sqlite".to_owned());
        let allow_loader_env = args.allow_loader_env
            || env_parse("CODEBUFFD_ALLOW_LOADER_ENV").is_some_and(|v| truthy(&v))
            || file.allow_loader_env.unwrap_or(false);
        let max_connections = args
            .max_connections
            .or(parse_num(
                env_parse("CODEBUFFD_MAX_CONNECTIONS"),
                "CODEBUFFD_MAX_CONNECTIONS",
            )?)
            .or(file.max_connections);
        if max_connections == Some(0) {
            return Err(ConfigError("max connections must be at least 1".into()));
        }
        let header_read_timeout = positive_seconds(
            "header read timeout",
            args.header_read_timeout
                .or(parse_num(
                    env_parse("CODEBUFFD_HEADER_READ_TIMEOUT"),
                    "CODEBUFFD_HEADER_READ_TIMEOUT",
                )?)
                .or(file.header_read_timeout)
                .unwrap_or(10.0),
        )?
        .unwrap_or(Duration::from_secs(10));
        let warm_start = !(args.no_warm_start
            || env_parse("CODEBUFFD_NO_WARM_START").is_some_and(|v| truthy(&v))
            || file.no_warm_start.unwrap_or(false));
        let permission_mode = args
            .permission_mode
            .clone()
            .or_else(|| env_parse("CODEBUFFD_PERMISSION_MODE"))
            .or(file.permission_mode)
            .unwrap_or_else(|| "bypass".to_owned());
        if !crate::session::PERMISSION_MODES.contains(&permission_mode.as_str()) {
            return Err(ConfigError(format!(
                "permission mode `{permission_mode}` is not one of {}",
                crate::session::PERMISSION_MODES.join(", ")
            )));
        }
        let permission_timeout = positive_seconds(
            "permission timeout",
            args.permission_timeout
                .or(parse_num(
                    env_parse("CODEBUFFD_PERMISSION_TIMEOUT"),
                    "CODEBUFFD_PERMISSION_TIMEOUT",
                )?)
                .or(file.permission_timeout)
                .unwrap_or(600.0),
        )?
        .unwrap_or(Duration::from_secs(600));
        let max_session_credits = args
            .max_session_credits
            .or(parse_num(
                env_parse("CODEBUFFD_MAX_SESSION_CREDITS"),
                "CODEBUFFD_MAX_SESSION_CREDITS",
            )?)
            .or(file.max_session_credits);
        if max_session_credits.is_some_and(|c| !c.is_finite() || c < 0.0) {
            return Err(ConfigError("max session credits must be ≥ 0".into()));
        }
        let ws_heartbeat_timeout = positive_seconds(
            "WebSocket heartbeat timeout",
            args.ws_heartbeat_timeout
                .or(parse_num(
                    env_parse("CODEBUFFD_WS_HEARTBEAT_TIMEOUT"),
                    "CODEBUFFD_WS_HEARTBEAT_TIMEOUT",
                )?)
                .or(file.ws_heartbeat_timeout)
                .unwrap_or(60.0),
        )?
        .unwrap_or(Duration::from_secs(60));
        let ws_default_agent = args
            .ws_default_agent
            .clone()
            .or_else(|| env_parse("CODEBUFFD_WS_DEFAULT_AGENT"))
            .or(file.ws_default_agent)
            .unwrap_or_else(|| "codebuff".to_owned());
        if crate::agent::AgentKind::parse(&ws_default_agent).is_none() {
            return Err(ConfigError(format!(
                "the WebSocket default agent `{ws_default_agent}` is not `codebuff` or `mock`"
            )));
        }
        Ok(DaemonConfig {
            ws_heartbeat_timeout,
            ws_default_agent,
            permission_mode,
            permission_timeout,
            max_session_credits,
            warm_start,
            header_read_timeout,
            max_connections,
            allowed_hosts,
            allow_loader_env,
            store,
            host,
            port,
            token,
            cors_allow_origins,
            data_dir,
            agent_command,
            turn_timeout,
            inactivity_timeout,
            max_line_bytes,
            max_body_bytes,
            sse_keep_alive,
        })
    }
}

fn read_file(path: &Path) -> Result<FileConfig, ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigError(format!("cannot read config file {}: {e}", path.display())))?;
    toml::from_str(&text).map_err(|e| ConfigError(format!("config file {}: {e}", path.display())))
}

fn parse_host(h: &str) -> Result<IpAddr, ConfigError> {
    if h == "localhost" {
        return Ok(IpAddr::from([127, 0, 0, 1]));
    }
    h.trim_matches(['[', ']'])
        .parse()
        .map_err(|_| ConfigError(format!("host `{h}` is not an IP address")))
}

fn parse_num<T: std::str::FromStr>(
    v: Option<String>,
    name: &str,
) -> Result<Option<T>, ConfigError> {
    v.map(|v| {
        v.parse()
            .map_err(|_| ConfigError(format!("{name}: `{v}` is not a number")))
    })
    .transpose()
}

/// A timeout in seconds; 0 disables it.
/// Like [`seconds`], but 0 is refused too.
fn positive_seconds(what: &str, s: f64) -> Result<Option<Duration>, ConfigError> {
    if s == 0.0 {
        return Err(ConfigError(format!("{what} must be more than 0 seconds")));
    }
    seconds(what, s)
}

fn seconds(what: &str, s: f64) -> Result<Option<Duration>, ConfigError> {
    if !s.is_finite() || s < 0.0 {
        return Err(ConfigError(format!("{what} must be ≥ 0 seconds")));
    }
    Ok((s > 0.0).then(|| Duration::from_secs_f64(s)))
}

fn truthy(v: &str) -> bool {
    matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on")
}

fn default_data_dir(env: &dyn Fn(&str) -> Option<String>) -> PathBuf {
    if let Some(xdg) = env("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(xdg).join("codebuffd");
    }
    match env("HOME").filter(|v| !v.is_empty()) {
        Some(home) => PathBuf::from(home).join(".local/share/codebuffd"),
        None => std::env::temp_dir().join("codebuffd"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use std::collections::HashMap;

    fn args(argv: &[&str]) -> ServerArgs {
        #[derive(Parser)]
        struct T {
            #[command(flatten)]
            a: ServerArgs,
        }
        T::parse_from(std::iter::once("x").chain(argv.iter().copied())).a
    }

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn defaults_listen_on_loopback_2468() {
        let c = DaemonConfig::resolve(&args(&[]), &env(&[("HOME", "/h")])).unwrap();
        assert_eq!(c.host, IpAddr::from([127, 0, 0, 1]));
        assert_eq!(c.port, 2468);
        assert_eq!(c.token, None);
        assert_eq!(c.data_dir, PathBuf::from("/h/.local/share/codebuffd"));
        assert_eq!(c.turn_timeout, Some(Duration::from_secs(3600)));
    }

    #[test]
    fn flags_beat_env_beat_file() {
        let dir = std::env::temp_dir().join(format!("codebuffd-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("c.toml");
        std::fs::write(
            &file,
            "port = 1111\ntoken = \"file\"\nmax_line_bytes = 4096\n",
        )
        .unwrap();
        let f = file.to_str().unwrap();
        let c = DaemonConfig::resolve(&args(&["--config", f]), &env(&[])).unwrap();
        assert_eq!(
            (c.port, c.token.as_deref(), c.max_line_bytes),
            (1111, Some("file"), 4096)
        );
        let e = env(&[("CODEBUFFD_PORT", "2222"), ("CODEBUFFD_TOKEN", "env")]);
        let c = DaemonConfig::resolve(&args(&["--config", f]), &e).unwrap();
        assert_eq!((c.port, c.token.as_deref()), (2222, Some("env")));
        let c = DaemonConfig::resolve(
            &args(&["--config", f, "--port", "3333", "--token", "flag"]),
            &e,
        )
        .unwrap();
        assert_eq!((c.port, c.token.as_deref()), (3333, Some("flag")));
        let c = DaemonConfig::resolve(&args(&["--config", f, "--no-token"]), &e).unwrap();
        assert_eq!(c.token, None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn open_non_loopback_needs_an_explicit_no_token() {
        assert!(DaemonConfig::resolve(&args(&["--host", "0.0.0.0"]), &env(&[])).is_err());
        assert!(
            DaemonConfig::resolve(&args(&["--host", "0.0.0.0", "--no-token"]), &env(&[])).is_ok()
        );
        assert!(
            DaemonConfig::resolve(&args(&["--host", "0.0.0.0", "--token", "t"]), &env(&[])).is_ok()
        );
    }

    #[test]
    fn websocket_settings_default_and_refuse_unknown_agents() {
        let c = DaemonConfig::resolve(&args(&[]), &env(&[])).unwrap();
        assert_eq!(c.ws_heartbeat_timeout, Duration::from_secs(60));
        assert_eq!(c.ws_default_agent, "codebuff");
        let c = DaemonConfig::resolve(
            &args(&["--ws-heartbeat-timeout", "1.5"]),
            &env(&[("CODEBUFFD_WS_DEFAULT_AGENT", "mock")]),
        )
        .unwrap();
        assert_eq!(c.ws_heartbeat_timeout, Duration::from_millis(1500));
        assert_eq!(c.ws_default_agent, "mock");
        assert!(
            DaemonConfig::resolve(&args(&["--ws-default-agent", "claude"]), &env(&[])).is_err()
        );
        assert!(DaemonConfig::resolve(&args(&["--ws-heartbeat-timeout", "0"]), &env(&[])).is_err());
    }

    #[test]
    fn bad_values_are_clear_errors() {
        let e = DaemonConfig::resolve(&args(&[]), &env(&[("CODEBUFFD_PORT", "http")])).unwrap_err();
        assert!(e.0.contains("CODEBUFFD_PORT"));
        assert!(DaemonConfig::resolve(&args(&["--host", "nowhere"]), &env(&[])).is_err());
    }
}
