//! The mock agent's conversations: one small state file per session id, so `--continue ID`
//! reports how many messages the conversation already holds (`start.messageHistoryLength`).
//!
//! Files live under `$CODEBUFF_STATE_DIR` (else `<temp dir>/codebuffd-mock`) as
//! `<session id>.json` = `{"version":1,"sessionId":"…","messageHistoryLength":N}` and are
//! replaced atomically (temporary file + rename). State problems are logged, never fatal.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

const FORMAT_VERSION: u64 = 1;

/// The conversation a run belongs to.
#[derive(Debug, Clone)]
pub(super) struct Session {
    /// Announced in `start.sessionId`; a new UUID unless continued.
    pub id: String,
    /// Messages already in the conversation before this run.
    pub history: u64,
    /// Whether the run resumes an earlier conversation (`--continue`).
    pub continued: bool,
    /// Where the state lives; `None` when the id is unsafe as a file name.
    file: Option<PathBuf>,
}

impl Session {
    /// The conversation to use: a fresh one, or `continue_id` with its saved history (0 when it
    /// has no state file).
    pub(super) fn open(continue_id: Option<&str>) -> Session {
        let dir = state_dir();
        match continue_id {
            None => {
                let id = uuid::Uuid::new_v4().to_string();
                let file = Some(dir.join(format!("{id}.json")));
                Session {
                    id,
                    history: 0,
                    continued: false,
                    file,
                }
            }
            Some(id) => {
                let file = if is_valid_session_id(id) {
                    Some(dir.join(format!("{id}.json")))
                } else {
                    eprintln!(
                        "mock-agent: session id {id:?} is not a safe file name; not saving state"
                    );
                    None
                };
                let history = file.as_deref().map_or(0, load_history);
                Session {
                    id: id.to_owned(),
                    history,
                    continued: true,
                    file,
                }
            }
        }
    }

    /// Records that this run added `added` messages (the prompt, and the reply if it finished).
    pub(super) fn save(&self, added: u64) {
        let Some(file) = &self.file else { return };
        let record = json!({
            "version": FORMAT_VERSION,
            "sessionId": self.id,
            "messageHistoryLength": self.history.saturating_add(added),
        });
        if let Err(e) = write_atomically(file, record.to_string().as_bytes()) {
            eprintln!("mock-agent: could not save state {}: {e}", file.display());
        }
    }
}

/// `$CODEBUFF_STATE_DIR`, else `<temp dir>/codebuffd-mock`.
fn state_dir() -> PathBuf {
    match std::env::var_os("CODEBUFF_STATE_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => std::env::temp_dir().join("codebuffd-mock"),
    }
}

/// Session ids become file names: a safe alphabet only (UUIDs pass), as in the real adapter.
pub(super) fn is_valid_session_id(id: &str) -> bool {
    let mut chars = id.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphanumeric());
    first_ok
        && id.len() <= 128
        && !id.contains("..")
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// The saved history length; 0 for a missing or unreadable file.
fn load_history(file: &Path) -> u64 {
    let text = match fs::read_to_string(file) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return 0,
        Err(e) => {
            eprintln!("mock-agent: cannot read state {}: {e}", file.display());
            return 0;
        }
    };
    let history = serde_json::from_str::<Value>(&text)
        .ok()
        .and_then(|v| v.get("messageHistoryLength").and_then(Value::as_u64));
    if history.is_none() {
        eprintln!(
            "mock-agent: unrecognised state file {}; starting over",
            file.display()
        );
    }
    history.unwrap_or(0)
}

/// Writes `bytes` to `file` via a temporary file in the same directory and a rename.
fn write_atomically(file: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = file.parent() {
        fs::create_dir_all(dir)?;
    }
    let mut tmp = file.as_os_str().to_owned();
    tmp.push(format!(".tmp-{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let result = (|| {
        // Run state quotes the conversation: readable by its owner only.
        let mut f = {
            use std::os::unix::fs::OpenOptionsExt;
            fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)?
        };
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, file)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_must_be_safe_file_names() {
        assert!(is_valid_session_id("147cb464-9fdb-45e8-a00a-b676c8b75214"));
        assert!(is_valid_session_id("a.b_c-1"));
        for bad in [
            "",
            "../x",
            "a/b",
            ".hidden",
            "a..b",
            "x y",
            &"a".repeat(129),
        ] {
            assert!(!is_valid_session_id(bad), "{bad:?}");
        }
    }

    #[test]
    fn history_round_trips_through_the_state_file() {
        let dir =
            std::env::temp_dir().join(format!("codebuffd-mock-test-{}", uuid::Uuid::new_v4()));
        let file = dir.join("s.json");
        assert_eq!(load_history(&file), 0);
        let session = Session {
            id: "s".into(),
            history: 3,
            continued: true,
            file: Some(file.clone()),
        };
        session.save(2);
        assert_eq!(load_history(&file), 5);
        fs::write(&file, "{corrupt").unwrap();
        assert_eq!(load_history(&file), 0);
        fs::remove_dir_all(&dir).unwrap();
    }
}
