//! A session's settings: validated once at creation, then fixed for the session's life.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use super::SessionError;
use crate::agent::{is_loader_variable, AgentKind};
use crate::universal::{EventData, EventDraft, SessionMetadata, SessionStartedData};
use crate::webhooks::{SessionWebhook, SessionWebhookPolicy, SessionWebhookSpec};

/// Agent modes both agents accept (`docs/http-api.md`): `build` is the default.
pub const AGENT_MODES: &[&str] = &["build", "free", "max", "plan"];
/// Permission modes: `bypass` (tools run without asking), `default` (every tool that changes
/// files or runs code asks), `acceptEdits` (edits run, commands ask), `plan` (read-only).
pub const PERMISSION_MODES: &[&str] = &["bypass", "default", "acceptEdits", "plan"];

/// The longest value an agent's argument or environment variable can have (Linux's
/// `MAX_ARG_STRLEN`, 128 KiB, less room for the variable's name).
const MAX_ENV_VALUE: usize = 128 * 1024 - 4096;

/// What the daemon allows when sessions are created (from its configuration).
#[derive(Debug, Clone)]
pub struct CreatePolicy {
    /// The default session directory, against which relative directories resolve.
    pub cwd: PathBuf,
    /// Sessions may set loader variables (`LD_PRELOAD`, `NODE_OPTIONS`, …) in `env`.
    pub allow_loader_env: bool,
    /// The permission mode of sessions that do not choose one.
    pub default_permission_mode: String,
    /// The credit budget of sessions that do not set one.
    pub default_max_credits: Option<f64>,
    /// Directories no session may work in or under (canonical paths), each with what it is
    /// ("the daemon's data directory"): an agent there could edit the daemon itself.
    pub protected: Vec<(PathBuf, &'static str)>,
    /// Whether and where sessions may name webhooks of their own.
    pub webhooks: SessionWebhookPolicy,
}

impl CreatePolicy {
    /// The policy of a daemon running in `cwd` with the defaults.
    pub fn new(cwd: PathBuf) -> CreatePolicy {
        CreatePolicy {
            cwd,
            allow_loader_env: false,
            default_permission_mode: "bypass".to_owned(),
            default_max_credits: None,
            protected: Vec::new(),
            webhooks: SessionWebhookPolicy::default(),
        }
    }

    /// The real path a turn of a session in `directory` runs in, checked again (a symbolic
    /// link may have been repointed since the session was created): `Err` with what the
    /// protected directory is when the real path is inside one. A directory that does not
    /// resolve is returned as it is (the spawn reports it missing).
    pub fn turn_directory(&self, directory: &std::path::Path) -> Result<PathBuf, &'static str> {
        let Ok(real) = directory.canonicalize() else {
            return Ok(directory.to_owned());
        };
        match self
            .protected
            .iter()
            .find(|(root, _)| real.starts_with(root))
        {
            Some((_, what)) => Err(what),
            None => Ok(real),
        }
    }

    /// Refuses a session directory inside a protected one. The message names what the
    /// directory is, never the protected path (clients must not learn the host's layout).
    fn check_allowed(&self, directory: &std::path::Path, asked: &str) -> Result<(), SessionError> {
        let Ok(real) = directory.canonicalize() else {
            return Ok(());
        };
        for (root, what) in &self.protected {
            if real.starts_with(root) {
                return Err(SessionError::InvalidRequest(format!(
                    "directory `{asked}` is inside {what}; sessions may not work there (an agent \
                     could change the daemon itself): pass another `directory`, or start the \
                     daemon with --workdir DIR"
                )));
            }
        }
        Ok(())
    }
}

// What a client asks for when creating a session, one type for every door: decoded by the HTTP
// door (served as the schema `CreateSession`), sent by the terminal client over `--url`, built
// by the ACP and WebSocket doors. Absent keys are left out when it is sent. The line below is
// the schema's description.
/// `POST /v1/sessions/{id}` body; unknown keys are ignored.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = CreateSession)]
pub struct CreateRequest {
    pub agent: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_mode: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub permission_mode: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_version: Option<String>,
    /// The agent's working directory (must exist); default: the daemon's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub directory: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// (ours) Per-turn timeout.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<f64>,
    /// (ours) Extra environment for the agent.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// (ours) A Codebuff API key for this session only; never echoed or logged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
    /// (ours) The credits the session may spend; further messages are refused (402
    /// `budget_exhausted`) once it has, and a turn that reaches it mid-way is stopped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_credits: Option<f64>,
    /// (ours) Endpoints that get this session's events, signed with the daemon's secret
    /// (`docs/webhooks.md`); refused unless the daemon runs with `--allow-session-webhooks`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub webhooks: Vec<SessionWebhookSpec>,
}

/// The validated settings of a session.
#[derive(Clone)]
pub struct SessionSettings {
    pub agent: AgentKind,
    pub agent_mode: String,
    pub permission_mode: String,
    pub model: Option<String>,
    pub variant: Option<String>,
    pub directory: PathBuf,
    pub title: Option<String>,
    /// Per-turn limit; `None` uses the daemon's default.
    pub turn_timeout: Option<Duration>,
    pub env: Vec<(String, String)>,
    /// The session's own Codebuff credential; never echoed or logged.
    pub api_key: Option<String>,
    /// The credits the session may spend; none = no budget.
    pub max_credits: Option<f64>,
    /// The session's own webhook endpoints, checked.
    pub webhooks: Vec<SessionWebhook>,
}

impl std::fmt::Debug for SessionSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionSettings")
            .field("agent", &self.agent)
            .field("agent_mode", &self.agent_mode)
            .field("permission_mode", &self.permission_mode)
            .field("model", &self.model)
            .field("directory", &self.directory)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .finish_non_exhaustive()
    }
}

/// Checks an agent mode (`build`, `free`, `max`, `plan`).
pub fn validate_agent_mode(mode: &str) -> Result<(), SessionError> {
    if !AGENT_MODES.contains(&mode) {
        return Err(SessionError::ModeNotSupported(format!(
            "agentMode `{mode}` is not supported; use one of {}",
            AGENT_MODES.join(", ")
        )));
    }
    Ok(())
}

impl SessionSettings {
    /// Validates a create request under the daemon's policy.
    pub fn validate(req: CreateRequest, policy: &CreatePolicy) -> Result<Self, SessionError> {
        let cwd = policy.cwd.as_path();
        for (field, value) in [
            ("model", req.model.as_deref()),
            ("variant", req.variant.as_deref()),
            ("title", req.title.as_deref()),
            ("directory", req.directory.as_deref()),
            ("apiKey", req.api_key.as_deref()),
        ] {
            if value.is_some_and(|v| v.contains('\0')) {
                return Err(SessionError::InvalidRequest(format!(
                    "`{field}` must not contain a NUL character"
                )));
            }
        }
        let agent = AgentKind::parse(&req.agent)
            .ok_or_else(|| SessionError::UnsupportedAgent(req.agent.clone()))?;
        let webhooks = policy
            .webhooks
            .check(&req.webhooks)
            .map_err(SessionError::InvalidRequest)?;
        let agent_mode = req.agent_mode.unwrap_or_else(|| "build".to_owned());
        validate_agent_mode(&agent_mode)?;
        let permission_mode = req
            .permission_mode
            .unwrap_or_else(|| policy.default_permission_mode.clone());
        if !PERMISSION_MODES.contains(&permission_mode.as_str()) {
            return Err(SessionError::ModeNotSupported(format!(
                "permissionMode `{permission_mode}` is not supported; use one of {}",
                PERMISSION_MODES.join(", ")
            )));
        }
        let max_credits = match req.max_credits.or(policy.default_max_credits) {
            Some(c) if !c.is_finite() || c < 0.0 => {
                return Err(SessionError::InvalidRequest(format!(
                    "maxCredits must be a number of credits ≥ 0, got {c}"
                )))
            }
            other => other,
        };
        let directory = match req.directory.as_deref() {
            None | Some("") => cwd.to_path_buf(),
            Some(d) => {
                let path = PathBuf::from(d);
                let path = if path.is_absolute() {
                    path
                } else {
                    cwd.join(path)
                };
                if !path.is_dir() {
                    return Err(SessionError::InvalidRequest(format!(
                        "directory `{d}` does not exist or is not a directory"
                    )));
                }
                path
            }
        };
        let asked = req.directory.as_deref().filter(|d| !d.is_empty());
        policy.check_allowed(&directory, asked.unwrap_or("(the daemon's default)"))?;
        let turn_timeout = match req.timeout_seconds {
            None => None,
            Some(s) if s.is_finite() && s > 0.0 && s <= 7.0 * 86400.0 => {
                Some(Duration::from_secs_f64(s))
            }
            Some(s) => {
                return Err(SessionError::InvalidRequest(format!(
                    "timeoutSeconds must be a positive number of seconds (at most a week), got {s}"
                )))
            }
        };
        for (name, value) in &req.env {
            if name.is_empty() || name.contains(['=', '\0']) {
                return Err(SessionError::InvalidRequest(format!(
                    "env: `{}` is not a valid variable name",
                    name.escape_debug()
                )));
            }
            if value.contains('\0') {
                return Err(SessionError::InvalidRequest(format!(
                    "env: the value of `{name}` must not contain a NUL character"
                )));
            }
            if name.len() + value.len() > MAX_ENV_VALUE {
                return Err(SessionError::InvalidRequest(format!(
                    "env: `{name}` is too long ({} bytes; at most {MAX_ENV_VALUE})",
                    value.len()
                )));
            }
            if !policy.allow_loader_env && is_loader_variable(name) {
                return Err(SessionError::InvalidRequest(format!(
                    "env: `{name}` changes what programs load; the daemon refuses it unless started with --allow-loader-env"
                )));
            }
        }
        Ok(SessionSettings {
            agent,
            agent_mode,
            permission_mode,
            model: req.model.filter(|m| !m.is_empty()),
            variant: req.variant,
            directory,
            title: req.title,
            turn_timeout,
            env: req.env.into_iter().collect(),
            api_key: req.api_key.filter(|k| !k.trim().is_empty()),
            max_credits,
            webhooks,
        })
    }

    /// The settings `codebuffd convert` describes its one session with: a new `codebuff`
    /// session with every default.
    pub fn for_convert() -> SessionSettings {
        SessionSettings {
            agent: AgentKind::Codebuff,
            agent_mode: "build".to_owned(),
            permission_mode: "bypass".to_owned(),
            model: None,
            variant: None,
            directory: PathBuf::from("."),
            title: None,
            turn_timeout: None,
            env: Vec::new(),
            api_key: None,
            max_credits: None,
            webhooks: Vec::new(),
        }
    }

    /// The settings as stored with the session record: everything but the API key, which is
    /// never written anywhere.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "agent": self.agent.id(),
            "agentMode": self.agent_mode,
            "permissionMode": self.permission_mode,
            "model": self.model,
            "variant": self.variant,
            "directory": self.directory,
            "title": self.title,
            "timeoutSeconds": self.turn_timeout.map(|t| t.as_secs_f64()),
            "env": self.env.iter().cloned().collect::<BTreeMap<String, String>>(),
            "maxCredits": self.max_credits,
            "webhooks": self.webhooks.iter().map(SessionWebhook::to_spec).collect::<Vec<_>>(),
        })
    }

    /// Settings read back from a stored record (restart); `None` if the record is unusable.
    pub fn from_json(v: &serde_json::Value) -> Option<SessionSettings> {
        let text = |k: &str| v.get(k).and_then(|x| x.as_str()).map(str::to_owned);
        Some(SessionSettings {
            agent: AgentKind::parse(v.get("agent")?.as_str()?)?,
            agent_mode: text("agentMode")?,
            permission_mode: text("permissionMode")?,
            model: text("model"),
            variant: text("variant"),
            directory: PathBuf::from(v.get("directory")?.as_str()?),
            title: text("title"),
            turn_timeout: v
                .get("timeoutSeconds")
                .and_then(|t| t.as_f64())
                .filter(|s| s.is_finite() && *s > 0.0)
                .map(Duration::from_secs_f64),
            env: v
                .get("env")
                .and_then(|e| e.as_object())
                .map(|m| {
                    m.iter()
                        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                        .collect()
                })
                .unwrap_or_default(),
            api_key: None,
            max_credits: v
                .get("maxCredits")
                .and_then(|c| c.as_f64())
                .filter(|c| c.is_finite() && *c >= 0.0),
            // Checked when the session was created; the URL and types only are kept.
            webhooks: v
                .get("webhooks")
                .and_then(|w| serde_json::from_value::<Vec<SessionWebhookSpec>>(w.clone()).ok())
                .map(|specs| SessionWebhook::restore(&specs))
                .unwrap_or_default(),
        })
    }

    /// The session's `session.started` draft (always event 1).
    pub fn started_event(&self) -> EventDraft {
        EventDraft::synthetic(EventData::SessionStarted(Box::new(SessionStartedData {
            metadata: self.metadata(),
        })))
    }

    /// The `session.started` metadata.
    pub fn metadata(&self) -> SessionMetadata {
        SessionMetadata {
            agent: Some(self.agent.id().to_owned()),
            agent_mode: Some(self.agent_mode.clone()),
            model: self.model.clone(),
            permission_mode: Some(self.permission_mode.clone()),
            variant: self.variant.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> CreatePolicy {
        CreatePolicy::new(std::env::temp_dir())
    }

    fn req(agent: &str) -> CreateRequest {
        CreateRequest {
            agent: agent.into(),
            ..CreateRequest::default()
        }
    }

    #[test]
    fn defaults_are_build_bypass_and_the_daemon_directory() {
        let cwd = std::env::temp_dir();
        let s = SessionSettings::validate(req("mock"), &CreatePolicy::new(cwd.clone())).unwrap();
        assert_eq!(s.agent, AgentKind::Mock);
        assert_eq!(s.agent_mode, "build");
        assert_eq!(s.permission_mode, "bypass");
        assert_eq!(s.directory, cwd);
    }

    #[test]
    fn protected_directories_and_their_insides_are_refused_without_naming_them() {
        let root = std::env::temp_dir().join(format!("codebuffd-protected-{}", std::process::id()));
        std::fs::create_dir_all(root.join("inside")).unwrap();
        let mut p = CreatePolicy::new(root.clone());
        p.protected = vec![(root.canonicalize().unwrap(), "the daemon's data directory")];
        let Err(SessionError::InvalidRequest(m)) = SessionSettings::validate(req("mock"), &p)
        else {
            panic!("the default directory is protected");
        };
        assert!(
            m.contains("the daemon's data directory") && m.contains("--workdir"),
            "{m}"
        );
        assert!(!m.contains(&root.display().to_string()), "{m}");
        let mut r = req("mock");
        r.directory = Some("inside/..//inside".into());
        assert!(matches!(
            SessionSettings::validate(r, &p),
            Err(SessionError::InvalidRequest(_))
        ));
        let mut r = req("mock");
        r.directory = Some(std::env::temp_dir().display().to_string());
        assert!(SessionSettings::validate(r, &p).is_ok());
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn bad_values_are_rejected_with_the_right_kind() {
        assert!(matches!(
            SessionSettings::validate(req("claude"), &policy()),
            Err(SessionError::UnsupportedAgent(_))
        ));
        let mut r = req("codebuff");
        r.agent_mode = Some("turbo".into());
        assert!(matches!(
            SessionSettings::validate(r, &policy()),
            Err(SessionError::ModeNotSupported(_))
        ));
        let mut r = req("codebuff");
        r.permission_mode = Some("yolo".into());
        assert!(matches!(
            SessionSettings::validate(r, &policy()),
            Err(SessionError::ModeNotSupported(_))
        ));
        let mut r = req("mock");
        r.max_credits = Some(-1.0);
        assert!(matches!(
            SessionSettings::validate(r, &policy()),
            Err(SessionError::InvalidRequest(_))
        ));
        let mut r = req("codebuff");
        r.directory = Some("/definitely/not/here".into());
        assert!(matches!(
            SessionSettings::validate(r, &policy()),
            Err(SessionError::InvalidRequest(_))
        ));
        let mut r = req("mock");
        r.timeout_seconds = Some(-1.0);
        assert!(matches!(
            SessionSettings::validate(r, &policy()),
            Err(SessionError::InvalidRequest(_))
        ));
    }

    #[test]
    fn nul_characters_are_refused_wherever_they_would_reach_the_agent() {
        let mut r = req("mock");
        r.model = Some("m\0x".into());
        let err = SessionSettings::validate(r, &policy()).unwrap_err();
        assert!(err.to_string().contains("`model`"), "{err}");
        let mut r = req("mock");
        r.env.insert("A".into(), "b\0c".into());
        let err = SessionSettings::validate(r, &policy()).unwrap_err();
        assert!(err.to_string().contains("NUL"), "{err}");
    }

    #[test]
    fn env_values_too_long_for_a_process_are_refused() {
        let mut r = req("mock");
        r.env.insert("BIG".into(), "x".repeat(200 * 1024));
        let err = SessionSettings::validate(r, &policy()).unwrap_err();
        assert!(matches!(err, SessionError::InvalidRequest(_)), "{err}");
        let mut r = req("mock");
        r.env.insert("OK".into(), "x".repeat(64 * 1024));
        assert!(SessionSettings::validate(r, &policy()).is_ok());
    }

    #[test]
    fn loader_variables_need_the_daemons_opt_in() {
        let mut r = req("mock");
        r.env.insert("LD_PRELOAD".into(), "/tmp/evil.so".into());
        let err = SessionSettings::validate(r.clone(), &policy()).unwrap_err();
        assert!(err.to_string().contains("--allow-loader-env"), "{err}");
        let open = CreatePolicy {
            allow_loader_env: true,
            ..policy()
        };
        assert!(SessionSettings::validate(r, &open).is_ok());
    }

    #[test]
    fn stored_settings_round_trip_without_the_key() {
        let mut r = req("codebuff");
        r.api_key = Some("sk-secret".into());
        r.model = Some("m".into());
        r.timeout_seconds = Some(12.5);
        r.env.insert("A".into(), "b".into());
        let s = SessionSettings::validate(r, &policy()).unwrap();
        let json = s.to_json();
        assert!(!json.to_string().contains("sk-secret"));
        let back = SessionSettings::from_json(&json).unwrap();
        assert_eq!(back.to_json(), json);
        assert_eq!(back.api_key, None);
    }

    #[test]
    fn debug_never_shows_the_api_key() {
        let mut r = req("mock");
        r.api_key = Some("sk-secret".into());
        let s = SessionSettings::validate(r, &policy()).unwrap();
        assert!(!format!("{s:?}").contains("sk-secret"));
    }
}
