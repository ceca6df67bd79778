//! What Codebuff's tools look like in ACP: their kind, a title, the files they touch
//! (`locations`), and what their results show (`diff` content for edits, the output of commands,
//! the error of a failed call); Codebuff's todo list as an ACP plan. Pure: tool names, inputs and
//! outputs in, ACP types out (`docs/acp.md`).

use std::path::{Path, PathBuf};

use agent_client_protocol::v1::schema::{
    Diff, Plan, PlanEntry, PlanEntryPriority, PlanEntryStatus, ToolCallContent, ToolCallLocation,
    ToolKind,
};
use serde_json::Value;

use super::diff;
use crate::universal::{ContentPart, FileAction};

/// The tool whose calls become the session's plan rather than tool calls.
pub const TODO_TOOL: &str = "write_todos";

/// Tools not shown at all: markers of the agent's own control flow.
pub fn hidden(tool: &str) -> bool {
    matches!(tool, "end_turn" | "task_completed" | TODO_TOOL)
}

/// True for the tools that start subagents.
pub fn spawns_agents(tool: &str) -> bool {
    matches!(tool, "spawn_agents" | "spawn_agent_inline")
}

/// The ACP kind of a Codebuff tool.
pub fn kind(tool: &str, input: &Value) -> ToolKind {
    match tool {
        "read_files" | "read_subtree" | "list_directory" | "read_file" => ToolKind::Read,
        "write_file" | "str_replace" | "propose_write_file" | "propose_str_replace" => {
            ToolKind::Edit
        }
        "apply_patch" => match patch_operation(input) {
            Some("delete_file") => ToolKind::Delete,
            _ => ToolKind::Edit,
        },
        "code_search" | "glob" | "find_files" | "grep" => ToolKind::Search,
        "run_terminal_command" => ToolKind::Execute,
        "web_search" | "read_url" | "read_docs" | "fetch" => ToolKind::Fetch,
        "think_deeply" => ToolKind::Think,
        _ => ToolKind::Other,
    }
}

fn patch_operation(input: &Value) -> Option<&str> {
    input
        .get("operation")
        .unwrap_or(input)
        .get("type")
        .and_then(Value::as_str)
}

fn str_of<'a>(input: &'a Value, key: &str) -> Option<&'a str> {
    input.get(key).and_then(Value::as_str)
}

/// The paths a `read_files` call names (strings or `{path}` objects).
fn read_paths(input: &Value) -> Vec<&str> {
    input
        .get("paths")
        .and_then(Value::as_array)
        .map(|paths| {
            paths
                .iter()
                .filter_map(|p| p.as_str().or_else(|| p.get("path")?.as_str()))
                .collect()
        })
        .unwrap_or_default()
}

/// A one-line title for a tool call, as a person would say it.
pub fn title(tool: &str, input: &Value) -> String {
    let or_tool = |s: Option<String>| s.unwrap_or_else(|| tool.to_owned());
    match tool {
        "read_files" => {
            let paths = read_paths(input);
            if paths.is_empty() {
                "Read files".to_owned()
            } else {
                format!("Read {}", paths.join(", "))
            }
        }
        "write_file" => or_tool(str_of(input, "path").map(|p| format!("Write {p}"))),
        "str_replace" => or_tool(str_of(input, "path").map(|p| format!("Edit {p}"))),
        "propose_write_file" | "propose_str_replace" => {
            or_tool(str_of(input, "path").map(|p| format!("Propose an edit of {p}")))
        }
        "apply_patch" => {
            let op = input.get("operation").unwrap_or(input);
            let verb = match patch_operation(input) {
                Some("create_file") => "Create",
                Some("delete_file") => "Delete",
                _ => "Patch",
            };
            or_tool(str_of(op, "path").map(|p| format!("{verb} {p}")))
        }
        "run_terminal_command" => or_tool(str_of(input, "command").map(|c| format!("Run `{c}`"))),
        "code_search" | "grep" => or_tool(
            str_of(input, "pattern")
                .or_else(|| str_of(input, "query"))
                .map(|p| format!("Search `{p}`")),
        ),
        "glob" | "find_files" => or_tool(
            str_of(input, "pattern")
                .or_else(|| str_of(input, "prompt"))
                .map(|p| format!("Find {p}")),
        ),
        "list_directory" => or_tool(str_of(input, "path").map(|p| format!("List {p}"))),
        "web_search" => or_tool(str_of(input, "query").map(|q| format!("Search the web: {q}"))),
        "read_url" => or_tool(str_of(input, "url").map(|u| format!("Fetch {u}"))),
        "read_docs" => or_tool(
            str_of(input, "libraryTitle")
                .or_else(|| str_of(input, "topic"))
                .map(|t| format!("Read the docs of {t}")),
        ),
        "think_deeply" => "Think".to_owned(),
        "spawn_agents" | "spawn_agent_inline" => {
            let agents: Vec<&str> = input
                .get("agents")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(|x| str_of(x, "agent_type")).collect())
                .or_else(|| str_of(input, "agent_type").map(|t| vec![t]))
                .unwrap_or_default();
            if agents.is_empty() {
                "Spawn agents".to_owned()
            } else {
                format!("Spawn {}", agents.join(", "))
            }
        }
        "ask_user" => input
            .get("questions")
            .and_then(Value::as_array)
            .and_then(|q| q.first())
            .and_then(|q| str_of(q, "question"))
            .map_or_else(|| "Ask the user".to_owned(), |q| format!("Ask: {q}")),
        _ => tool.to_owned(),
    }
}

/// An absolute path for `path` (as the agent wrote it, relative to the session's directory).
pub fn absolute(cwd: &Path, path: &str) -> PathBuf {
    let p = Path::new(path);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        cwd.join(p)
    }
}

/// The files a call touches: its `file_ref` parts (every path once, in order).
pub fn locations(cwd: &Path, parts: &[ContentPart]) -> Vec<ToolCallLocation> {
    let mut seen: Vec<&str> = Vec::new();
    for part in parts {
        if let ContentPart::FileRef { path, .. } = part {
            if !seen.contains(&path.as_str()) {
                seen.push(path);
            }
        }
    }
    seen.into_iter()
        .map(|p| ToolCallLocation::new(absolute(cwd, p)))
        .collect()
}

/// The `diff` content of a call or result: one per `file_ref` that carries a diff of a write
/// or a patch.
pub fn diffs(cwd: &Path, parts: &[ContentPart]) -> Vec<ToolCallContent> {
    parts
        .iter()
        .filter_map(|part| match part {
            ContentPart::FileRef {
                path,
                action: FileAction::Write | FileAction::Patch,
                diff: Some(text),
            } => diff::sides(text).map(|s| {
                ToolCallContent::Diff(
                    Diff::new(absolute(cwd, path), s.new_text).old_text(s.old_text),
                )
            }),
            _ => None,
        })
        .collect()
}

/// What a finished call shows besides diffs: the output of a command (stdout, then stderr, and
/// the exit code when it is not 0), or the error of a failed call; nothing for other tools
/// (their output is the update's `rawOutput`).
pub fn result_text(tool: &str, output: &Value) -> Option<String> {
    let value = first_value(output)?;
    if let Some(error) = value.get("errorMessage").and_then(Value::as_str) {
        return Some(error.to_owned());
    }
    if tool != "run_terminal_command" {
        return None;
    }
    let mut text = String::new();
    for key in ["stdout", "stderr"] {
        if let Some(s) = str_of(value, key).filter(|s| !s.is_empty()) {
            text.push_str(s);
            if !s.ends_with('\n') {
                text.push('\n');
            }
        }
    }
    if let Some(code) = value
        .get("exitCode")
        .and_then(Value::as_i64)
        .filter(|c| *c != 0)
    {
        text.push_str(&format!("exit code {code}\n"));
    }
    if text.is_empty() {
        return None;
    }
    // A fence longer than any backtick run in the output keeps it verbatim in Markdown.
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest.max(2) + 1);
    Some(format!("{fence}\n{text}{fence}"))
}

/// The first `{type:"json"}` value of a `ToolResultOutput[]` (or the output itself when it is
/// not in that shape).
fn first_value(output: &Value) -> Option<&Value> {
    match output {
        Value::Array(parts) => {
            parts
                .iter()
                .find_map(|p| match p.get("type").and_then(Value::as_str) {
                    Some("json") => p.get("value"),
                    Some(_) => None,
                    None => Some(p),
                })
        }
        other => Some(other),
    }
}

/// The plan a `write_todos` input describes (`{todos:[{task, completed}]}`): one entry per
/// todo, completed or pending (Codebuff does not say which one is being worked on).
pub fn plan(input: &Value) -> Option<Plan> {
    let todos = input.get("todos")?.as_array()?;
    Some(Plan::new(
        todos
            .iter()
            .filter_map(|todo| {
                let task = str_of(todo, "task")
                    .or_else(|| str_of(todo, "content"))
                    .or_else(|| todo.as_str())?;
                let done = todo
                    .get("completed")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                Some(PlanEntry::new(
                    task,
                    PlanEntryPriority::Medium,
                    if done {
                        PlanEntryStatus::Completed
                    } else {
                        PlanEntryStatus::Pending
                    },
                ))
            })
            .collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn kinds_follow_what_the_tool_does() {
        let none = json!({});
        assert_eq!(kind("read_files", &none), ToolKind::Read);
        assert_eq!(kind("write_file", &none), ToolKind::Edit);
        assert_eq!(kind("str_replace", &none), ToolKind::Edit);
        assert_eq!(
            kind(
                "apply_patch",
                &json!({"operation":{"type":"delete_file","path":"a"}})
            ),
            ToolKind::Delete
        );
        assert_eq!(kind("code_search", &none), ToolKind::Search);
        assert_eq!(kind("run_terminal_command", &none), ToolKind::Execute);
        assert_eq!(kind("web_search", &none), ToolKind::Fetch);
        assert_eq!(kind("think_deeply", &none), ToolKind::Think);
        assert_eq!(kind("spawn_agents", &none), ToolKind::Other);
        assert_eq!(kind("my_mcp_tool", &none), ToolKind::Other);
    }

    #[test]
    fn titles_name_the_files_and_commands() {
        assert_eq!(
            title("read_files", &json!({"paths":["a", {"path":"b"}]})),
            "Read a, b"
        );
        assert_eq!(
            title("write_file", &json!({"path":"hello.txt"})),
            "Write hello.txt"
        );
        assert_eq!(
            title("run_terminal_command", &json!({"command":"ls -l"})),
            "Run `ls -l`"
        );
        assert_eq!(
            title(
                "spawn_agents",
                &json!({"agents":[{"agent_type":"file-picker"}]})
            ),
            "Spawn file-picker"
        );
        assert_eq!(
            title("ask_user", &json!({"questions":[{"question":"Which?"}]})),
            "Ask: Which?"
        );
        assert_eq!(title("custom", &json!(null)), "custom");
    }

    #[test]
    fn locations_are_absolute_and_unique() {
        let parts = vec![
            ContentPart::FileRef {
                path: "a.txt".into(),
                action: FileAction::Read,
                diff: None,
            },
            ContentPart::FileRef {
                path: "/abs/b".into(),
                action: FileAction::Write,
                diff: None,
            },
            ContentPart::FileRef {
                path: "a.txt".into(),
                action: FileAction::Write,
                diff: None,
            },
        ];
        let locs = locations(Path::new("/work"), &parts);
        let paths: Vec<_> = locs.iter().map(|l| l.path.clone()).collect();
        assert_eq!(
            paths,
            vec![PathBuf::from("/work/a.txt"), PathBuf::from("/abs/b")]
        );
    }

    #[test]
    fn diffs_come_from_file_refs_with_a_diff() {
        let parts = vec![
            ContentPart::ToolResult {
                call_id: "c".into(),
                output: "[]".into(),
            },
            ContentPart::FileRef {
                path: "hello.txt".into(),
                action: FileAction::Write,
                diff: Some("@@ -0,0 +1,1 @@\n+hi\n".into()),
            },
            ContentPart::FileRef {
                path: "read.txt".into(),
                action: FileAction::Read,
                diff: Some("x".into()),
            },
        ];
        let content = diffs(Path::new("/w"), &parts);
        assert_eq!(content.len(), 1);
        let json = serde_json::to_value(&content[0]).unwrap();
        assert_eq!(
            json,
            json!({"type":"diff","path":"/w/hello.txt","newText":"hi\n"})
        );
    }

    #[test]
    fn command_output_is_fenced_text_and_errors_are_shown() {
        let out = json!([{"type":"json","value":{"command":"x","stdout":"ok\n","stderr":"warn","exitCode":3}}]);
        assert_eq!(
            result_text("run_terminal_command", &out).unwrap(),
            "```\nok\nwarn\nexit code 3\n```"
        );
        let ticks = json!({"stdout":"a ``` b"});
        assert!(result_text("run_terminal_command", &ticks)
            .unwrap()
            .starts_with("````\n"));
        let failed = json!([{"type":"json","value":{"errorMessage":"no such file"}}]);
        assert_eq!(
            result_text("str_replace", &failed).as_deref(),
            Some("no such file")
        );
        assert_eq!(
            result_text("read_files", &json!([{"type":"json","value":{}}])),
            None
        );
    }

    #[test]
    fn todos_become_plan_entries() {
        let plan =
            plan(&json!({"todos":[{"task":"a","completed":true},{"task":"b","completed":false}]}))
                .unwrap();
        let json = serde_json::to_value(&plan).unwrap();
        assert_eq!(
            json,
            json!({"entries":[
                {"content":"a","priority":"medium","status":"completed"},
                {"content":"b","priority":"medium","status":"pending"}
            ]})
        );
    }
}
