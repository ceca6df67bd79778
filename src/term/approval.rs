//! What a permission request shows before `approve?`: the whole command a tool wants to run
//! (every line of it, never cut), or the change a tool wants to make as a diff — a write
//! against the file as it is now, a replacement as its old and new text, a patch as it is.
//! Pure: the request's metadata and the file's current text in, styled lines out.

use serde_json::Value;

use super::format::Style;
use crate::universal::unified_diff;

/// Diff lines shown at most; the rest is counted.
const DIFF_LINES: usize = 60;

/// The lines of a request of `tool` (its `permission.requested` metadata). `current` reads a
/// file the agent named (relative to the session's directory): `None` when it does not exist.
pub fn request_lines(
    tool: &str,
    meta: &Value,
    current: &dyn Fn(&str) -> Option<String>,
) -> Vec<(Style, String)> {
    let input = &meta["input"];
    let path = input["path"]
        .as_str()
        .or_else(|| input["operation"]["path"].as_str())
        .or_else(|| meta["paths"][0].as_str())
        .unwrap_or_default();
    if let Some(command) = meta["command"].as_str() {
        let mut lines = vec![(Style::Warn, format!("⚠ {tool} wants to run:"))];
        for (i, line) in command.lines().enumerate() {
            let lead = if i == 0 { "$" } else { " " };
            lines.push((Style::Bold, format!("  {lead} {line}")));
        }
        return lines;
    }
    let diff = match tool {
        "write_file" => input["content"].as_str().map(|new| {
            let old = current(path);
            let diff = unified_diff(old.as_deref().unwrap_or(""), new);
            (diff, if old.is_none() { " (a new file)" } else { "" })
        }),
        "str_replace" => input["replacements"].as_array().map(|all| {
            let diff = all
                .iter()
                .map(|r| {
                    unified_diff(
                        r["old"].as_str().unwrap_or_default(),
                        r["new"].as_str().unwrap_or_default(),
                    )
                })
                .collect::<String>();
            (diff, "")
        }),
        "apply_patch" => input["operation"]["diff"]
            .as_str()
            .map(|d| (d.to_owned(), "")),
        _ => None,
    };
    let Some((diff, note)) = diff else {
        let what = meta["title"].as_str().unwrap_or(tool);
        return vec![(Style::Warn, format!("⚠ {tool} wants to: {what}"))];
    };
    let mut lines = vec![(
        Style::Warn,
        format!("⚠ {tool} wants to change {path}{note}:"),
    )];
    let all: Vec<&str> = diff.lines().collect();
    for line in all.iter().take(DIFF_LINES) {
        let style = match line.as_bytes().first() {
            Some(b'+') => Style::Ok,
            Some(b'-') => Style::Error,
            _ => Style::Dim,
        };
        lines.push((style, format!("    {line}")));
    }
    if all.len() > DIFF_LINES {
        lines.push((
            Style::Dim,
            format!("    … {} more lines", all.len() - DIFF_LINES),
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn texts(lines: &[(Style, String)]) -> Vec<&str> {
        lines.iter().map(|(_, l)| l.as_str()).collect()
    }

    #[test]
    fn a_command_is_shown_whole() {
        let meta = json!({"command": "npm test -- --grep 'a very long pattern'\necho done"});
        let lines = request_lines("run_terminal_command", &meta, &|_| None);
        assert_eq!(
            texts(&lines),
            [
                "⚠ run_terminal_command wants to run:",
                "  $ npm test -- --grep 'a very long pattern'",
                "    echo done"
            ]
        );
    }

    #[test]
    fn a_write_is_a_diff_against_the_file_as_it_is() {
        let meta = json!({"input": {"path": "a.txt", "content": "one\nTWO\n"}});
        let old = |p: &str| (p == "a.txt").then(|| "one\ntwo\n".to_owned());
        let lines = request_lines("write_file", &meta, &old);
        assert_eq!(
            texts(&lines),
            [
                "⚠ write_file wants to change a.txt:",
                "    @@ -1,2 +1,2 @@",
                "     one",
                "    -two",
                "    +TWO"
            ]
        );
        assert_eq!(lines[4].0, Style::Ok);
        let new = request_lines("write_file", &meta, &|_| None);
        assert_eq!(new[0].1, "⚠ write_file wants to change a.txt (a new file):");
        assert_eq!(new.len(), 4);
    }

    #[test]
    fn replacements_show_old_and_new_and_long_diffs_are_cut() {
        let meta =
            json!({"input": {"path": "b.rs", "replacements": [{"old": "x\n", "new": "y\n"}]}});
        let lines = request_lines("str_replace", &meta, &|_| None);
        assert_eq!(texts(&lines)[2..], ["    -x", "    +y"]);
        let big: String = (0..100).map(|i| format!("{i}\n")).collect();
        let meta = json!({"input": {"path": "c", "content": big}});
        let lines = request_lines("write_file", &meta, &|_| None);
        assert_eq!(lines.last().unwrap().1, "    … 41 more lines");
    }
}
