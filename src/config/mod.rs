//! The daemon's settings: each from its flag, `CODEBUFFD_*` variable or config file key (see
//! [`Layers`] for the precedence), checked once here.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

mod args;
mod keys;
mod layers;
mod token;
mod webhooks;

use std::collections::BTreeMap;

pub use args::{EngineArgs, ServerArgs};
pub use keys::{known_keys, CLIENT_KEYS, DEPRECATED_KEYS, SERVER_KEYS};
pub use layers::{user_config_file, ConfigError, Deprecated, Layers, Source};
pub use webhooks::WebhookArgs;

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
    /// A shared Postgres store's engine lease (heartbeat expiry).
    pub store_lease: Duration,
    /// Sessions may set loader variables (`LD_PRELOAD`, `NODE_OPTIONS`, …) in their `env`.
    pub allow_loader_env: bool,
    /// Connections served at once; `None` = from the open-files limit.
    pub max_connections: Option<usize>,
    /// ACP servers at most, and how long an idle one is kept.
    pub acp: crate::acp::remote::AcpLimits,
    /// How long a client may take to send a request's headers.
    pub header_read_timeout: Duration,
    /// Keep a warm agent process per agent kind in use.
    pub warm_start: bool,
    /// Retire a warm spare no turn took for this long; `None`: keep it.
    pub warm_spare_idle: Option<Duration>,
    /// The permission mode of sessions that do not choose one.
    pub permission_mode: String,
    /// How long a permission request waits for an answer.
    pub permission_timeout: Duration,
    /// The credit budget of sessions that do not set one.
    pub max_session_credits: Option<f64>,
    /// Ended sessions older than this are deleted (in the background).
    pub retention: Option<Duration>,
    /// The directory of sessions that do not name one; `None` = the daemon's working
    /// directory.
    pub workdir: Option<PathBuf>,
    /// `/v1/ws`: a connection silent this long is closed.
    pub ws_heartbeat_timeout: Duration,
    /// `/v1/ws`: the agent of the sessions it creates for prompts that name none.
    pub ws_default_agent: String,
    /// `/v1/ws`: the largest message a client may send.
    pub ws_max_frame_bytes: usize,
    /// `/v1/ws`: how long a question its client is not shown waits before it is declined.
    pub ws_question_timeout: Duration,
    /// Webhooks (`config/webhooks.rs`).
    pub webhooks: crate::webhooks::WebhookSettings,
    /// `GET /metrics` without the token.
    pub metrics_no_auth: bool,
    /// Where each setting came from (`codebuffd config show`).
    pub sources: BTreeMap<&'static str, Source>,
    /// Deprecated settings that were read, to log once logging is up.
    pub warnings: Vec<String>,
}

impl DaemonConfig {
    /// The engine's part of the settings.
    pub fn engine(&self) -> crate::engine::EngineConfig {
        crate::engine::EngineConfig {
            data_dir: self.data_dir.clone(),
            store: self.store.clone(),
            store_lease: self.store_lease,
            agent_command: self.agent_command.clone(),
            limits: crate::session::Limits {
                turn_timeout: self.turn_timeout,
                inactivity_timeout: self.inactivity_timeout,
                max_line_bytes: self.max_line_bytes,
                permission_timeout: self.permission_timeout,
                warm_spare_idle: self.warm_spare_idle,
                ..crate::session::Limits::default()
            },
            allow_loader_env: self.allow_loader_env,
            warm_start: self.warm_start,
            permission_mode: self.permission_mode.clone(),
            max_session_credits: self.max_session_credits,
            retention: self.retention,
            workdir: self.workdir.clone(),
            webhooks: self.webhooks.clone(),
        }
    }
}

const DEFAULT_PORT: u16 = 2468;
const DEFAULT_MAX_LINE: usize = 8 * 1024 * 1024;
const DEFAULT_MAX_BODY: usize = 1024 * 1024;
/// Ten minutes: a spare (~150 MiB) outlives a pause between prompts, not an idle afternoon.
const DEFAULT_WARM_SPARE_IDLE_SECS: f64 = 600.0;

impl DaemonConfig {
    /// Merges flags, the environment (through `env`) and the config files (see [`Layers`]).
    pub fn resolve(
        args: &ServerArgs,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<DaemonConfig, ConfigError> {
        let known = known_keys();
        let mut l = Layers::new(args.engine.config.as_deref(), env, &known, DEPRECATED_KEYS)?;
        let host = match l.value::<String>("host", args.host.clone())? {
            Some(h) => parse_host(&h)?,
            None => IpAddr::from([127, 0, 0, 1]),
        };
        let port = l.value("port", args.port)?.unwrap_or(DEFAULT_PORT);
        let token = token::resolve_token(&mut l, args)?;
        let no_token = l.switch("no_token", args.no_token)?;
        if token.is_none() && !no_token && !host.is_loopback() {
            return Err(ConfigError(format!(
                "refusing to listen on {host} without authentication: give --token TOKEN, or --no-token to run open"
            )));
        }
        let cors_allow_origins = l.list("cors_allow_origin", &args.cors_allow_origin)?;
        let allowed_hosts = l.list("allowed_host", &args.allowed_host)?;
        let data_dir = l
            .value::<PathBuf>("data_dir", args.engine.data_dir.clone())?
            .unwrap_or_else(|| default_data_dir(env));
        let workdir = l.value::<PathBuf>("workdir", args.workdir.clone())?;
        let agent_command =
            l.value::<PathBuf>("agent_command", args.engine.agent_command.clone())?;
        let turn_timeout = seconds(
            "turn timeout",
            l.value("turn_timeout", args.engine.turn_timeout)?
                .unwrap_or(3600.0),
        )?;
        let inactivity_timeout = seconds(
            "inactivity timeout",
            l.value("inactivity_timeout", args.engine.inactivity_timeout)?
                .unwrap_or(900.0),
        )?;
        let max_line_bytes = l
            .value("max_line_bytes", args.engine.max_line_bytes)?
            .unwrap_or(DEFAULT_MAX_LINE);
        let max_body_bytes = l
            .value("max_body_bytes", args.max_body_bytes)?
            .unwrap_or(DEFAULT_MAX_BODY);
        let sse_keep_alive = seconds(
            "SSE keep-alive",
            l.value("sse_keep_alive", args.sse_keep_alive)?
                .unwrap_or(15.0),
        )?
        .unwrap_or(Duration::from_secs(15));
        if max_line_bytes < 1024 || max_body_bytes < 1024 {
            return Err(ConfigError(
                "line and body limits must be at least 1024 bytes".into(),
            ));
        }
        let store = l
            .value::<String>("store", args.engine.store.clone())?
            .unwrap_or_else(|| "sqlite".to_owned());
        let allow_loader_env = l.switch("allow_loader_env", args.engine.allow_loader_env)?;
        let max_connections = l.value("max_connections", args.max_connections)?;
        if max_connections == Some(0) {
            return Err(ConfigError("max connections must be at least 1".into()));
        }
        let defaults = crate::acp::remote::AcpLimits::default();
        let max_acp_servers = l
            .value("max_acp_servers", args.max_acp_servers)?
            .unwrap_or(defaults.max_servers);
        if max_acp_servers == 0 {
            return Err(ConfigError("max ACP servers must be at least 1".into()));
        }
        let acp_idle_timeout = positive_seconds(
            "ACP idle timeout",
            l.value("acp_idle_timeout", args.acp_idle_timeout)?
                .unwrap_or(defaults.idle_timeout.as_secs_f64()),
        )?
        .unwrap_or(defaults.idle_timeout);
        let acp = crate::acp::remote::AcpLimits {
            max_servers: max_acp_servers,
            idle_timeout: acp_idle_timeout,
        };
        let header_read_timeout = positive_seconds(
            "header read timeout",
            l.value("header_read_timeout", args.header_read_timeout)?
                .unwrap_or(10.0),
        )?
        .unwrap_or(Duration::from_secs(10));
        let warm_start = !l.switch("no_warm_start", args.engine.no_warm_start)?;
        let warm_spare_idle = seconds(
            "warm spare idle time",
            l.value("warm_spare_idle", args.engine.warm_spare_idle)?
                .unwrap_or(DEFAULT_WARM_SPARE_IDLE_SECS),
        )?;
        let permission_mode = l
            .value::<String>("permission_mode", args.engine.permission_mode.clone())?
            .unwrap_or_else(|| "bypass".to_owned());
        if !crate::session::PERMISSION_MODES.contains(&permission_mode.as_str()) {
            return Err(ConfigError(format!(
                "permission mode `{permission_mode}` is not one of {}",
                crate::session::PERMISSION_MODES.join(", ")
            )));
        }
        let permission_timeout = positive_seconds(
            "permission timeout",
            l.value("permission_timeout", args.engine.permission_timeout)?
                .unwrap_or(600.0),
        )?
        .unwrap_or(Duration::from_secs(600));
        let max_session_credits =
            l.value::<f64>("max_session_credits", args.engine.max_session_credits)?;
        if max_session_credits.is_some_and(|c| !c.is_finite() || c < 0.0) {
            return Err(ConfigError("max session credits must be ≥ 0".into()));
        }
        let retention = match l.value::<f64>("retention_days", args.engine.retention_days)? {
            None => None,
            Some(d) if d.is_finite() && d > 0.0 && d <= 100.0 * 365.0 => {
                Some(Duration::from_secs_f64(d * 86_400.0))
            }
            Some(d) => {
                return Err(ConfigError(format!(
                    "retention days must be a positive number of days, got {d}"
                )))
            }
        };
        let ws_heartbeat_timeout = positive_seconds(
            "WebSocket heartbeat timeout",
            l.value("ws_heartbeat_timeout", args.ws_heartbeat_timeout)?
                .unwrap_or(60.0),
        )?
        .unwrap_or(Duration::from_secs(60));
        let ws_default_agent = l
            .value::<String>("ws_default_agent", args.ws_default_agent.clone())?
            .unwrap_or_else(|| "codebuff".to_owned());
        if crate::agent::AgentKind::parse(&ws_default_agent).is_none() {
            return Err(ConfigError(format!(
                "the WebSocket default agent `{ws_default_agent}` is not `codebuff` or `mock`"
            )));
        }
        let ws_max_frame_bytes = l
            .value("ws_max_frame_bytes", args.ws_max_frame_bytes)?
            .unwrap_or(crate::ws::DEFAULT_MAX_FRAME_BYTES);
        if !(crate::ws::MIN_FRAME_BYTES..=crate::ws::MAX_FRAME_BYTES).contains(&ws_max_frame_bytes)
        {
            return Err(ConfigError(format!(
                "the WebSocket frame limit must be between {} and {} bytes, got {ws_max_frame_bytes}",
                crate::ws::MIN_FRAME_BYTES,
                crate::ws::MAX_FRAME_BYTES
            )));
        }
        let ws_question_timeout = positive_seconds(
            "WebSocket question timeout",
            l.value("ws_question_timeout", args.ws_question_timeout)?
                .unwrap_or(crate::ws::DEFAULT_QUESTION_TIMEOUT_SECS),
        )?
        .unwrap_or(Duration::from_secs(60));
        let store_lease = match l.value::<f64>("store_lease", args.engine.store_lease)? {
            None => Duration::from_secs(30),
            Some(s) if s.is_finite() && (2.0..=3600.0).contains(&s) => Duration::from_secs_f64(s),
            Some(s) => {
                return Err(ConfigError(format!(
                    "the store lease must be between 2 and 3600 seconds, got {s}"
                )))
            }
        };
        let webhooks = webhooks::resolve(&mut l, &args.webhooks)?;
        let metrics_no_auth = webhooks::metrics_no_auth(&mut l, &args.webhooks)?;
        Ok(DaemonConfig {
            webhooks,
            metrics_no_auth,
            ws_heartbeat_timeout,
            ws_default_agent,
            ws_max_frame_bytes,
            ws_question_timeout,
            permission_mode,
            permission_timeout,
            max_session_credits,
            retention,
            warm_start,
            warm_spare_idle,
            header_read_timeout,
            max_connections,
            acp,
            allowed_hosts,
            allow_loader_env,
            store,
            store_lease,
            host,
            port,
            token,
            cors_allow_origins,
            data_dir,
            workdir,
            agent_command,
            turn_timeout,
            inactivity_timeout,
            max_line_bytes,
            max_body_bytes,
            sse_keep_alive,
            sources: l.sources().clone(),
            warnings: l.warnings().to_vec(),
        })
    }
}

fn parse_host(h: &str) -> Result<IpAddr, ConfigError> {
    if h == "localhost" {
        return Ok(IpAddr::from([127, 0, 0, 1]));
    }
    h.trim_matches(['[', ']'])
        .parse()
        .map_err(|_| ConfigError(format!("host `{h}` is not an IP address")))
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
    fn file_keys_are_the_flag_names_and_old_keys_still_work() {
        let dir = std::env::temp_dir().join(format!("codebuffd-keys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("c.toml");
        std::fs::write(
            &file,
            "turn_timeout = 60\ninactivity_timeout = 0\ncors_allow_origin = [\"https://a\"]\n\
             retention_days = 0.5\nworkdir = \"/srv\"\n",
        )
        .unwrap();
        let c =
            DaemonConfig::resolve(&args(&["--config", file.to_str().unwrap()]), &env(&[])).unwrap();
        assert_eq!(c.turn_timeout, Some(Duration::from_secs(60)));
        assert_eq!(c.inactivity_timeout, None);
        assert_eq!(c.cors_allow_origins, ["https://a"]);
        assert_eq!(c.retention, Some(Duration::from_secs(43_200)));
        assert_eq!(c.workdir, Some(PathBuf::from("/srv")));
        assert_eq!(c.sources["turn_timeout"], Source::File(file.clone()));
        assert_eq!(c.sources["port"], Source::Default);
        assert!(c.warnings.is_empty());
        std::fs::write(
            &file,
            "turn_timeout_seconds = 61\nsse_keep_alive_seconds = 3\ncors_allow_origins = [\"https://b\"]\n",
        )
        .unwrap();
        let c =
            DaemonConfig::resolve(&args(&["--config", file.to_str().unwrap()]), &env(&[])).unwrap();
        assert_eq!(c.turn_timeout, Some(Duration::from_secs(61)));
        assert_eq!(c.sse_keep_alive, Duration::from_secs(3));
        assert_eq!(c.cors_allow_origins, ["https://b"]);
        assert_eq!(c.warnings.len(), 3, "{:?}", c.warnings);
        let bad = DaemonConfig::resolve(&args(&["--retention-days=-1"]), &env(&[]));
        assert!(bad.is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_warm_spare_idle_time_defaults_to_ten_minutes_and_0_keeps_spares() {
        let c = DaemonConfig::resolve(&args(&[]), &env(&[])).unwrap();
        assert_eq!(c.warm_spare_idle, Some(Duration::from_secs(600)));
        assert_eq!(
            c.engine().limits.warm_spare_idle,
            Some(Duration::from_secs(600))
        );
        let e = env(&[("CODEBUFFD_WARM_SPARE_IDLE", "90")]);
        let c = DaemonConfig::resolve(&args(&[]), &e).unwrap();
        assert_eq!(c.warm_spare_idle, Some(Duration::from_secs(90)));
        let c = DaemonConfig::resolve(&args(&["--warm-spare-idle", "0"]), &e).unwrap();
        assert_eq!(c.warm_spare_idle, None);
        assert_eq!(c.engine().limits.warm_spare_idle, None);
        let bad = DaemonConfig::resolve(&args(&["--warm-spare-idle=-5"]), &env(&[]));
        assert!(bad
            .unwrap_err()
            .to_string()
            .contains("warm spare idle time"));
    }

    #[test]
    fn token_precedence_follows_the_sources() {
        let dir = std::env::temp_dir().join(format!("codebuffd-tok-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("c.toml");
        std::fs::write(&file, "no_token = true\n").unwrap();
        let f = file.to_str().unwrap();
        let with_env_token = env(&[("CODEBUFFD_TOKEN", "e")]);
        let c = DaemonConfig::resolve(&args(&["--config", f]), &with_env_token).unwrap();
        assert_eq!(c.token.as_deref(), Some("e"));
        let both = env(&[("CODEBUFFD_TOKEN", "e"), ("CODEBUFFD_NO_TOKEN", "1")]);
        assert_eq!(
            DaemonConfig::resolve(&args(&[]), &both).unwrap().token,
            None
        );
        let c = DaemonConfig::resolve(&args(&["--token", "f"]), &both).unwrap();
        assert_eq!(c.token.as_deref(), Some("f"));
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
    fn websocket_frame_limit_and_question_timeout_default_and_are_bounded() {
        let c = DaemonConfig::resolve(&args(&[]), &env(&[])).unwrap();
        assert_eq!(c.ws_max_frame_bytes, 16 * 1024 * 1024);
        assert_eq!(c.ws_question_timeout, Duration::from_secs(60));
        let c = DaemonConfig::resolve(
            &args(&["--ws-question-timeout", "0.5"]),
            &env(&[("CODEBUFFD_WS_MAX_FRAME_BYTES", "65536")]),
        )
        .unwrap();
        assert_eq!(c.ws_max_frame_bytes, 65_536);
        assert_eq!(c.ws_question_timeout, Duration::from_millis(500));
        for bad in ["1000", "2000000000"] {
            let e = DaemonConfig::resolve(&args(&["--ws-max-frame-bytes", bad]), &env(&[]))
                .unwrap_err();
            assert!(e.0.contains("frame limit"), "{}", e.0);
        }
        assert!(DaemonConfig::resolve(&args(&["--ws-question-timeout", "0"]), &env(&[])).is_err());
    }

    #[test]
    fn bad_values_are_clear_errors() {
        let e = DaemonConfig::resolve(&args(&[]), &env(&[("CODEBUFFD_PORT", "http")])).unwrap_err();
        assert!(e.0.contains("CODEBUFFD_PORT"));
        assert!(DaemonConfig::resolve(&args(&["--host", "nowhere"]), &env(&[])).is_err());
    }
}
