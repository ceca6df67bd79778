//! The config files' vocabulary: every key a file may hold (the server's, the webhooks', the
//! terminal client's) and the old names still read with a warning. One list, so the server and
//! the terminal client refuse the same unknown keys.

use super::{webhooks, Deprecated};

/// Every setting of `codebuffd server`, as its file key (the flag's name with `_`).
pub const SERVER_KEYS: &[&str] = &[
    "host",
    "port",
    "token",
    "token_file",
    "no_token",
    "cors_allow_origin",
    "allowed_host",
    "data_dir",
    "workdir",
    "agent_command",
    "turn_timeout",
    "inactivity_timeout",
    "max_line_bytes",
    "max_body_bytes",
    "store",
    "store_lease",
    "sse_keep_alive",
    "header_read_timeout",
    "max_connections",
    "max_acp_servers",
    "acp_idle_timeout",
    "permission_mode",
    "permission_timeout",
    "max_session_credits",
    "retention_days",
    "no_warm_start",
    "warm_spare_idle",
    "allow_loader_env",
    "ws_heartbeat_timeout",
    "ws_default_agent",
    "ws_max_frame_bytes",
    "ws_question_timeout",
];

/// The terminal client's own settings (`term/settings.rs`), also accepted in the files the
/// server reads: one user config file serves both.
pub const CLIENT_KEYS: &[&str] = &["url", "agent", "mode", "model", "color", "timeout"];

/// Every key a config file may hold: the server's and the terminal client's.
pub fn known_keys() -> Vec<&'static str> {
    SERVER_KEYS
        .iter()
        .chain(webhooks::KEYS)
        .chain(CLIENT_KEYS)
        .copied()
        .collect()
}

/// File keys renamed to their flag's name (read with a warning).
pub const DEPRECATED_KEYS: &[Deprecated] = &[
    Deprecated {
        old: "cors_allow_origins",
        new: "cors_allow_origin",
    },
    Deprecated {
        old: "turn_timeout_seconds",
        new: "turn_timeout",
    },
    Deprecated {
        old: "inactivity_timeout_seconds",
        new: "inactivity_timeout",
    },
    Deprecated {
        old: "sse_keep_alive_seconds",
        new: "sse_keep_alive",
    },
];
