//! The mock agent's real tool effects in the working directory (the `tools` and `subagent`
//! scenarios): writing and patching files, reading them, running a shell command. Each returns
//! the `tool_result` value Codebuff 0.10.7 produces (`docs/codebuff-events.md` §1.2), failures as
//! `{"errorMessage": …}`.

use std::fs;
use std::io::ErrorKind;
use std::process::{Command, Stdio};

use serde_json::{json, Value};

use crate::universal::unified_diff;

/// `write_file`: creates or replaces `path` with `content`.
pub(super) fn write_file(path: &str, content: &str) -> Value {
    let old = match fs::read_to_string(path) {
        Ok(old) => Some(old),
        Err(e) if e.kind() == ErrorKind::NotFound => None,
        Err(e) => return json!({"file": path, "errorMessage": format!("Cannot read {path}: {e}")}),
    };
    if old.as_deref() == Some(content) {
        return json!({"file": path, "message": "No changes", "unifiedDiff": ""});
    }
    if let Err(e) = fs::write(path, content) {
        return json!({"file": path, "errorMessage": format!("Cannot write {path}: {e}")});
    }
    let message = if old.is_some() {
        "Updated file"
    } else {
        "Created new file"
    };
    let diff = unified_diff(old.as_deref().unwrap_or(""), content);
    json!({"file": path, "message": message, "unifiedDiff": diff})
}

/// `str_replace`: replaces the first `old` in `path` by `new`. Like Codebuff, it refuses a file
/// that does not exist.
pub(super) fn str_replace(path: &str, old: &str, new: &str) -> Value {
    let before = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            return json!({"file": path, "errorMessage":
                "The file does not exist, skipping. Please use the write_file tool to create the file."});
        }
        Err(e) => return json!({"file": path, "errorMessage": format!("Cannot read {path}: {e}")}),
    };
    if !before.contains(old) {
        return json!({"file": path, "errorMessage": format!("The old string {old:?} was not found in {path}.")});
    }
    let after = before.replacen(old, new, 1);
    if let Err(e) = fs::write(path, &after) {
        return json!({"file": path, "errorMessage": format!("Cannot write {path}: {e}")});
    }
    json!({"file": path, "message": "Updated file", "unifiedDiff": unified_diff(&before, &after)})
}

/// `read_files`: one `{path, content}` per path (`errorMessage` for unreadable ones).
pub(super) fn read_files(paths: &[&str]) -> Value {
    let files: Vec<Value> = paths
        .iter()
        .map(|path| match fs::read_to_string(path) {
            Ok(content) => json!({"path": path, "content": content, "referencedBy": {}}),
            Err(e) => json!({"path": path, "errorMessage": format!("Could not read {path}: {e}")}),
        })
        .collect();
    Value::Array(files)
}

/// `run_terminal_command` (SYNC): runs `command` with `sh -c` in the working directory.
pub(super) fn run_command(command: &str) -> Value {
    let output = Command::new("sh")
        .arg("-c")
        .arg(command)
        .stdin(Stdio::null())
        .output();
    match output {
        Ok(output) => {
            let mut value = json!({
                "command": command,
                "stdout": String::from_utf8_lossy(&output.stdout),
            });
            if !output.stderr.is_empty() {
                value["stderr"] = String::from_utf8_lossy(&output.stderr).into();
            }
            // A command killed by a signal has no exit code; report it as the shell would.
            let code = output.status.code().unwrap_or(128);
            value["exitCode"] = code.into();
            value
        }
        Err(e) => {
            json!({"command": command, "errorMessage": format!("Could not run the command: {e}")})
        }
    }
}
