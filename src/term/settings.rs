//! The terminal client's settings: flag > `CODEBUFFD_*` > `--config` file > the user's config
//! file > default, with the server's precedence rules (`config::Layers`), and where each value
//! came from (`codebuffd config show`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::args::{ClientArgs, SessionArgs};
use crate::config::{
    known_keys, ConfigError, DaemonConfig, EngineArgs, Layers, ServerArgs, Source, DEPRECATED_KEYS,
};

/// When to colour stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColorChoice {
    Auto,
    Always,
    Never,
}

impl ColorChoice {
    fn parse(text: &str) -> Result<ColorChoice, ConfigError> {
        match text {
            "auto" => Ok(ColorChoice::Auto),
            "always" => Ok(ColorChoice::Always),
            "never" => Ok(ColorChoice::Never),
            other => Err(ConfigError(format!(
                "colour `{other}` is not `auto`, `always` or `never`"
            ))),
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            ColorChoice::Auto => "auto",
            ColorChoice::Always => "always",
            ColorChoice::Never => "never",
        }
    }
}

/// Everything the client runs with.
#[derive(Debug, Clone)]
pub struct Settings {
    /// A running daemon to use; `None` = the engine in-process.
    pub url: Option<String>,
    pub token: Option<String>,
    pub color: ColorChoice,
    pub agent: String,
    pub mode: Option<String>,
    pub model: Option<String>,
    /// The permission mode new sessions ask for; `None`: none was set (flag, environment,
    /// file), and the client decides (`default` at a terminal, else the engine's).
    pub permission_mode: Option<String>,
    pub timeout: Option<f64>,
    /// The credit budget of new sessions (`--max-credits`).
    pub max_credits: Option<f64>,
    /// The arguments the in-process engine is resolved from, as `codebuffd server` would.
    pub engine_args: ServerArgs,
    /// Where each of the above came from.
    pub sources: BTreeMap<&'static str, Source>,
}

impl Settings {
    /// Merges the flags with the environment (through `env`) and the config files.
    pub fn resolve(
        client: &ClientArgs,
        session: &SessionArgs,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Settings, ConfigError> {
        let known = known_keys();
        let mut l = Layers::new(client.config.as_deref(), env, &known, DEPRECATED_KEYS)?;
        let url = l.value::<String>("url", client.url.clone())?;
        if let Some(url) = &url {
            if url.starts_with("https://") {
                return Err(ConfigError(format!(
                    "the URL `{url}`: this build speaks plain http:// only (the daemon serves \
                     loopback; reach a remote one through an SSH tunnel or a local TLS proxy)"
                )));
            }
            if !url.starts_with("http://") {
                return Err(ConfigError(format!(
                    "the URL `{url}` must start with http://"
                )));
            }
        }
        let token = l
            .value::<String>("token", client.token.clone())?
            .filter(|t| !t.is_empty());
        let color = match l.value::<String>("color", client.color.clone())? {
            Some(text) => ColorChoice::parse(&text)?,
            None => ColorChoice::Auto,
        };
        let agent = l
            .value::<String>("agent", session.agent.clone())?
            .unwrap_or_else(|| "codebuff".to_owned());
        if crate::session::AgentKind::parse(&agent).is_none() {
            return Err(ConfigError(format!(
                "the agent `{agent}` is not `codebuff` or `mock`"
            )));
        }
        let mode = l.value::<String>("mode", session.mode.clone())?;
        let model = l.value::<String>("model", session.model.clone())?;
        let flag_mode = match (session.yolo, session.permission_mode.as_deref()) {
            (true, Some(mode)) if mode != "bypass" => {
                return Err(ConfigError(format!(
                    "--yolo is --permission-mode bypass, not `{mode}`: give one of them"
                )))
            }
            (true, _) => Some("bypass".to_owned()),
            (false, mode) => mode.map(str::to_owned),
        };
        let permission_mode = l.value::<String>("permission_mode", flag_mode)?;
        let max_credits = session.max_credits;
        if max_credits.is_some_and(|c| !c.is_finite() || c < 0.0) {
            return Err(ConfigError("--max-credits must be ≥ 0".into()));
        }
        let timeout = l.value::<f64>("timeout", session.timeout)?;
        if timeout.is_some_and(|t| !t.is_finite() || t < 0.0) {
            return Err(ConfigError("the timeout must be ≥ 0 seconds".into()));
        }
        let engine_args = ServerArgs {
            engine: EngineArgs {
                data_dir: client.data_dir.clone(),
                config: client.config.clone(),
                ..EngineArgs::default()
            },
            ..ServerArgs::default()
        };
        Ok(Settings {
            url,
            token,
            color,
            agent,
            mode,
            model,
            permission_mode,
            timeout,
            max_credits,
            engine_args,
            sources: l.sources().clone(),
        })
    }

    /// The in-process engine's settings: exactly `codebuffd server`'s, from the same sources.
    pub fn engine(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<DaemonConfig, ConfigError> {
        DaemonConfig::resolve(&self.engine_args, env)
    }

    /// `codebuffd config show`: one line per setting, its value and its source; the token is
    /// never shown, only whether there is one.
    pub fn describe(&self, engine: Option<&DaemonConfig>) -> Vec<(String, String, String)> {
        let source = |key: &str| {
            self.sources
                .get(key)
                .map_or_else(|| "default".to_owned(), ToString::to_string)
        };
        let opt = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".to_owned());
        let mut rows = vec![
            (
                "url".to_owned(),
                self.url
                    .clone()
                    .unwrap_or_else(|| "- (the engine runs in-process)".to_owned()),
                source("url"),
            ),
            (
                "token".to_owned(),
                if self.token.is_some() { "(set)" } else { "-" }.to_owned(),
                source("token"),
            ),
            ("agent".into(), self.agent.clone(), source("agent")),
            ("mode".into(), opt(&self.mode), source("mode")),
            ("model".into(), opt(&self.model), source("model")),
            (
                "permission_mode".into(),
                self.permission_mode
                    .clone()
                    .unwrap_or_else(|| "- (default at a terminal, else the engine's)".to_owned()),
                source("permission_mode"),
            ),
            (
                "timeout".into(),
                self.timeout
                    .map_or_else(|| "-".to_owned(), |t| t.to_string()),
                source("timeout"),
            ),
            (
                "color".into(),
                self.color.as_str().to_owned(),
                source("color"),
            ),
        ];
        if let Some(engine) = engine {
            let s = |key: &str| {
                engine
                    .sources
                    .get(key)
                    .map_or_else(|| "default".to_owned(), ToString::to_string)
            };
            rows.push((
                "data_dir".into(),
                engine.data_dir.display().to_string(),
                s("data_dir"),
            ));
            rows.push((
                "store".into(),
                crate::engine::redact_spec(&engine.store).to_string(),
                s("store"),
            ));
        }
        rows
    }

    /// The data directory of the in-process engine, when it can be resolved.
    pub fn data_dir(&self, env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
        self.engine(env).ok().map(|c| c.data_dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn flags_beat_env_beat_files_beat_defaults() {
        let dir = std::env::temp_dir().join(format!("codebuffd-term-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("c.toml");
        // A file shared with the server: its keys are accepted too.
        std::fs::write(
            &file,
            "agent = \"mock\"\nmode = \"max\"\nport = 9\nurl = \"http://file\"\n",
        )
        .unwrap();
        let client = ClientArgs {
            config: Some(file.clone()),
            ..ClientArgs::default()
        };
        let s = Settings::resolve(&client, &SessionArgs::default(), &env(&[])).unwrap();
        assert_eq!((s.agent.as_str(), s.mode.as_deref()), ("mock", Some("max")));
        assert_eq!(s.sources["agent"], Source::File(file.clone()));
        assert_eq!(s.color, ColorChoice::Auto);
        let e = env(&[("CODEBUFFD_MODE", "free"), ("CODEBUFFD_URL", "http://env")]);
        let s = Settings::resolve(&client, &SessionArgs::default(), &e).unwrap();
        assert_eq!(s.mode.as_deref(), Some("free"));
        assert_eq!(s.url.as_deref(), Some("http://env"));
        let session = SessionArgs {
            mode: Some("plan".into()),
            ..SessionArgs::default()
        };
        let s = Settings::resolve(&client, &session, &e).unwrap();
        assert_eq!(s.mode.as_deref(), Some("plan"));
        assert_eq!(s.sources["mode"], Source::Flag);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_values_are_refused() {
        let bad_agent = SessionArgs {
            agent: Some("claude".into()),
            ..SessionArgs::default()
        };
        assert!(Settings::resolve(&ClientArgs::default(), &bad_agent, &env(&[])).is_err());
        let bad_color = ClientArgs {
            color: Some("sometimes".into()),
            ..ClientArgs::default()
        };
        assert!(Settings::resolve(&bad_color, &SessionArgs::default(), &env(&[])).is_err());
        let bad_url = env(&[("CODEBUFFD_URL", "localhost:2468")]);
        assert!(
            Settings::resolve(&ClientArgs::default(), &SessionArgs::default(), &bad_url).is_err()
        );
    }

    #[test]
    fn the_token_is_never_shown() {
        let e = env(&[("CODEBUFFD_TOKEN", "s3cret")]);
        let s = Settings::resolve(&ClientArgs::default(), &SessionArgs::default(), &e).unwrap();
        let rows = s.describe(None);
        assert!(
            rows.iter().all(|(_, v, _)| !v.contains("s3cret")),
            "{rows:?}"
        );
        assert!(rows
            .iter()
            .any(|(k, v, src)| k == "token" && v == "(set)" && src.contains("CODEBUFFD_TOKEN")));
    }
}
