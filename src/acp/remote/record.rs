//! What is kept on disk about a remote ACP server, so a restarted daemon serves it again:
//! `<data-dir>/acp-http/<uuid>/server.json` beside its envelope log (`envelopes.jsonl`).
//!
//! The directory's name is a UUID (server ids are the client's strings, not file names); the
//! record names the server. It is replaced whole (written beside, then renamed), so a crash
//! leaves the old record or the new one.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The record's file name in a server's directory.
pub const RECORD_FILE: &str = "server.json";
/// The envelope log's file name in a server's directory.
pub const LOG_FILE: &str = "envelopes.jsonl";

/// One server as recorded.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ServerRecord {
    /// The client's id of the server (the path segment of `/v1/acp/{server_id}`).
    pub server_id: String,
    /// The agent of the sessions it creates (`codebuff`, `mock`).
    pub agent: String,
    /// When it was created (Unix milliseconds).
    pub created_at_ms: i64,
    /// The parameters of the client's `initialize`, replayed to the new connection after a
    /// restart (the client does not initialize again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialize: Option<serde_json::Value>,
    /// The sessions it created (`session/new`): deleting the server ends them.
    #[serde(default)]
    pub sessions: Vec<String>,
    /// A WebSocket connection's server: it ends with its socket, so a daemon that starts again
    /// ends its sessions and forgets it instead of serving it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub websocket: bool,
    /// The engine (codebuffd process) serving it: several may share the data directory, and
    /// one that starts leaves the servers of another live one alone (two writers of one
    /// envelope log would interleave it). Absent in records of older versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
}

impl ServerRecord {
    /// Reads the record in `dir`.
    pub fn load(dir: &Path) -> std::io::Result<ServerRecord> {
        let text = std::fs::read(dir.join(RECORD_FILE))?;
        serde_json::from_slice(&text).map_err(std::io::Error::other)
    }

    /// Writes the record into `dir` (atomically).
    pub fn save(&self, dir: &Path) -> std::io::Result<()> {
        let tmp = dir.join(format!("{RECORD_FILE}.tmp"));
        let text = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        crate::private_files::write(&tmp, &text)?;
        std::fs::rename(&tmp, dir.join(RECORD_FILE))
    }
}

/// The directories of the recorded servers under `root`.
pub fn server_dirs(root: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut dirs: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.join(RECORD_FILE).is_file())
        .collect();
    dirs.sort();
    dirs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_as_written() {
        let dir = std::env::temp_dir().join(format!(
            "codebuffd-record-{}",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let record = ServerRecord {
            server_id: "sdk-mock-1".into(),
            agent: "mock".into(),
            created_at_ms: 1,
            initialize: Some(serde_json::json!({"protocolVersion": 1})),
            sessions: vec!["a".into()],
            websocket: false,
            engine: Some("e-1".into()),
        };
        record.save(&dir).unwrap();
        assert_eq!(ServerRecord::load(&dir).unwrap(), record);
        assert!(server_dirs(dir.parent().unwrap()).contains(&dir));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
