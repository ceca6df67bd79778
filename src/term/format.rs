//! Text of the terminal client's lines, pure: one-line previews, tool-call previews, edit
//! stats, costs, durations, the closing line. Used by the renderer (`render.rs`) and by the
//! commands that print a session's state (`sessions.rs`, `repl.rs`, `exec.rs`).

use std::time::Duration;

use serde_json::Value;

use crate::universal::{Cost, TurnStatus};

/// How a line looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    Plain,
    Dim,
    Tool,
    Error,
    Warn,
    Ok,
    Bold,
}

/// `text` on one line, at most `max` characters.
pub fn one_line(text: &str, max: usize) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= max {
        return flat;
    }
    let cut: String = flat.chars().take(max.saturating_sub(1)).collect();
    format!("{cut}…")
}

/// A tool call's line and the spinner's activity for it.
pub fn tool_preview(name: &str, arguments: &str) -> (String, String) {
    let input: Value = serde_json::from_str(arguments).unwrap_or(Value::Null);
    let s = |key: &str| input[key].as_str().unwrap_or_default().to_owned();
    match name {
        "run_terminal_command" => {
            let command = one_line(&s("command"), 120);
            (
                format!("$ {command}"),
                format!("running `{}`", one_line(&command, 40)),
            )
        }
        "write_file" => (
            format!("write {}", s("path")),
            format!("editing {}", s("path")),
        ),
        "str_replace" => (
            format!("edit {}", s("path")),
            format!("editing {}", s("path")),
        ),
        "apply_patch" => {
            let path = input["operation"]["path"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            (format!("patch {path}"), format!("editing {path}"))
        }
        "read_files" => {
            let paths: Vec<&str> = input["paths"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let paths = one_line(&paths.join(" "), 100);
            (
                format!("read {paths}"),
                format!("reading {}", one_line(&paths, 40)),
            )
        }
        "spawn_agents" => {
            let agents: Vec<&str> = input["agents"]
                .as_array()
                .map(|a| a.iter().filter_map(|x| x["agent_type"].as_str()).collect())
                .unwrap_or_default();
            let agents = agents.join(", ");
            (format!("spawn {agents}"), format!("subagent {agents}"))
        }
        "ask_user" => ("ask_user".into(), "waiting for your answer".into()),
        "code_search" => (
            format!("search {}", one_line(&s("pattern"), 100)),
            "searching".into(),
        ),
        _ => {
            let args = if input.is_object() {
                one_line(&input.to_string(), 80)
            } else {
                String::new()
            };
            (
                format!("{name} {args}").trim_end().to_owned(),
                format!("running {name}"),
            )
        }
    }
}

/// Lines added and removed by a unified diff.
pub fn diff_stats(diff: &str) -> (usize, usize) {
    let mut added = 0;
    let mut removed = 0;
    for line in diff.lines() {
        if line.starts_with("+++") || line.starts_with("---") {
            continue;
        }
        if line.starts_with('+') {
            added += 1;
        } else if line.starts_with('-') {
            removed += 1;
        }
    }
    (added, removed)
}

/// What a tool result's output says went wrong.
pub(super) fn failure_text(output: &str) -> String {
    let value: Value = serde_json::from_str(output).unwrap_or(Value::Null);
    let first = value.get(0).and_then(|v| v.get("value")).unwrap_or(&value);
    for key in ["errorMessage", "error", "message", "stderr"] {
        if let Some(text) = first[key].as_str() {
            return text.to_owned();
        }
    }
    output.to_owned()
}

/// A tool result's output as readable text (a command's stdout, else the JSON).
pub(super) fn result_text(output: &str) -> String {
    let value: Value = serde_json::from_str(output).unwrap_or(Value::Null);
    let first = value.get(0).and_then(|v| v.get("value")).unwrap_or(&value);
    if let Some(stdout) = first["stdout"].as_str() {
        return stdout.to_owned();
    }
    output.to_owned()
}

/// A turn's ending in a few words, and how it looks.
pub fn turn_summary(status: TurnStatus, cost: Cost, session: Option<Cost>) -> (Style, String) {
    let (style, word) = status_word(status);
    (style, format!("{word} · {}", costs_text(cost, session)))
}

/// The word and style of a turn status.
pub fn status_word(status: TurnStatus) -> (Style, &'static str) {
    match status {
        TurnStatus::Completed => (Style::Ok, "✓ completed"),
        TurnStatus::Failed => (Style::Error, "✗ failed"),
        TurnStatus::TimedOut => (Style::Error, "✗ timed out"),
        TurnStatus::Cancelled => (Style::Warn, "⊘ cancelled"),
        TurnStatus::Interrupted => (Style::Error, "✗ interrupted"),
        TurnStatus::BudgetExhausted => (Style::Error, "✗ budget exhausted"),
    }
}

/// `7.50 credits ($0.08)`.
pub fn cost_text(cost: Cost) -> String {
    format!("{:.2} credits (${:.2})", cost.credits, cost.usd)
}

/// A turn's cost and, when the log says it, the session's after it:
/// `1.25 credits ($0.01), 2.50 in the session`.
pub fn costs_text(turn: Cost, session: Option<Cost>) -> String {
    match session {
        Some(session) => format!("{}, {:.2} in the session", cost_text(turn), session.credits),
        None => cost_text(turn),
    }
}

/// The closing line of a turn run from the terminal.
pub fn closing_line(
    status: TurnStatus,
    elapsed: Duration,
    cost: Cost,
    session_cost: Option<Cost>,
    session_id: &str,
) -> (Style, String) {
    let (style, word) = status_word(status);
    (
        style,
        format!(
            "{word} in {} · {} · resume with: codebuffd resume {session_id}",
            duration_text(elapsed),
            costs_text(cost, session_cost)
        ),
    )
}

/// `850ms`, `12.3s`, `2m05s`.
pub fn duration_text(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{:.1}s", d.as_secs_f64())
    } else {
        format!("{}m{:02}s", d.as_secs() / 60, d.as_secs() % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closing_lines_say_status_time_cost_and_how_to_resume() {
        let (style, line) = closing_line(
            TurnStatus::Completed,
            Duration::from_millis(1234),
            Cost::from_credits(7.5),
            Some(Cost::from_credits(20.0)),
            "abc",
        );
        assert_eq!(style, Style::Ok);
        assert_eq!(
            line,
            "✓ completed in 1.2s · 7.50 credits ($0.07), 20.00 in the session · resume with: \
             codebuffd resume abc"
        );
        let (_, line) = turn_summary(TurnStatus::Cancelled, Cost::from_credits(1.0), None);
        assert_eq!(line, "⊘ cancelled · 1.00 credits ($0.01)");
        assert_eq!(duration_text(Duration::from_secs(125)), "2m05s");
        assert_eq!(diff_stats("--- a\n+++ b\n+x\n-y\n-z\n"), (1, 2));
    }
}
