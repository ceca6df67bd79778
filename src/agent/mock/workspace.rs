//! The mock agent's real tool effects in the working directory (the `tools` and `subagent`
//! scenarios): writing and patching files, reading them, running a shell command. Each returns
//! the `tool_result` value Codebuff 0.10.7 produces (`docs/codebuff-events.md` §1.2), failures as
//! `{"errorMessage": …}`.

use std::fs;
use std::io::ErrorKind;
use std::process::{Command, Stdio};

use serde_json::{json, Value};

/// Context lines around a change in a unified diff.
const CONTEXT_LINES: usize = 3;

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

/// A unified diff from `old` to `new`, hunks only (no `---`/`+++` header, as in Codebuff's
/// results): one hunk spanning the changed region with up to three context lines. Empty when
/// the texts are equal.
pub(super) fn unified_diff(old: &str, new: &str) -> String {
    let a: Vec<&str> = old.split_inclusive('\n').collect();
    let b: Vec<&str> = new.split_inclusive('\n').collect();
    if a == b {
        return String::new();
    }
    let prefix = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let max_suffix = a.len().min(b.len()) - prefix;
    let suffix = a
        .iter()
        .rev()
        .zip(b.iter().rev())
        .take(max_suffix)
        .take_while(|(x, y)| x == y)
        .count();
    let start = prefix.saturating_sub(CONTEXT_LINES);
    let tail = suffix.min(CONTEXT_LINES);
    let (a_end, b_end) = (a.len() - suffix + tail, b.len() - suffix + tail);

    let mut out = format!(
        "@@ -{} +{} @@\n",
        hunk_range(start, a_end - start),
        hunk_range(start, b_end - start)
    );
    let mut push = |mark: char, line: &str| {
        out.push(mark);
        out.push_str(line);
        if !line.ends_with('\n') {
            out.push_str("\n\\ No newline at end of file\n");
        }
    };
    for line in &a[start..prefix] {
        push(' ', line);
    }
    for line in &a[prefix..a.len() - suffix] {
        push('-', line);
    }
    for line in &b[prefix..b.len() - suffix] {
        push('+', line);
    }
    for line in &a[a.len() - suffix..a_end] {
        push(' ', line);
    }
    out
}

/// `start,count` of a hunk side; an empty side names the line before it (`0,0` at the top).
fn hunk_range(start: usize, count: usize) -> String {
    if count == 0 {
        format!("{start},0")
    } else {
        format!("{},{count}", start + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_of_a_new_file_adds_every_line() {
        assert_eq!(unified_diff("", "a\nb\n"), "@@ -0,0 +1,2 @@\n+a\n+b\n");
    }

    #[test]
    fn diff_keeps_three_context_lines_around_a_change() {
        let old = "1\n2\n3\n4\n5\n6\n7\n8\n9\n";
        let new = "1\n2\n3\n4\nfive\n6\n7\n8\n9\n";
        assert_eq!(
            unified_diff(old, new),
            "@@ -2,7 +2,7 @@\n 2\n 3\n 4\n-5\n+five\n 6\n 7\n 8\n"
        );
    }

    #[test]
    fn diff_marks_a_missing_final_newline_and_is_empty_for_equal_texts() {
        assert_eq!(
            unified_diff("x\n", "x\ny"),
            "@@ -1,1 +1,2 @@\n x\n+y\n\\ No newline at end of file\n"
        );
        assert_eq!(unified_diff("same\n", "same\n"), "");
        assert_eq!(unified_diff("gone\n", ""), "@@ -1,1 +0,0 @@\n-gone\n");
    }
}
