//! The human view of a session's log, pure: universal events in, pieces of terminal output out
//! (streamed text, whole lines with a style, what is happening now for the spinner). No I/O,
//! no colour codes (`paint.rs` adds those), no terminal state (`view.rs` owns it).

use std::collections::HashMap;

use super::format::{
    diff_stats, failure_text, one_line, result_text, tool_preview, turn_summary, Style,
};
use crate::universal::{
    ContentPart, EventData, FileAction, Item, ItemKind, ItemRole, ItemStatus, PermissionStatus,
    QuestionStatus, UniversalEvent,
};

/// One piece of output.
#[derive(Debug, Clone, PartialEq)]
pub enum Piece {
    /// Assistant text as it streams (no line end of its own).
    Text(String),
    /// Reasoning as it streams (shown dimmed).
    Reasoning(String),
    /// The end of a streamed block: a line break when the cursor is not at a line start.
    Break,
    /// A whole line.
    Line(Style, String),
    /// What the agent is doing now (the spinner's message).
    Activity(String),
}

/// What is known of an item while it is open.
#[derive(Debug, Clone)]
struct Open {
    kind: ItemKind,
    role: Option<ItemRole>,
    depth: usize,
    reasoning: bool,
    /// The subagent's name, for a subagent's status item.
    subagent: Option<String>,
}

/// Turns a session's events into pieces, remembering what it needs across events.
#[derive(Debug, Default)]
pub struct Renderer {
    /// Show edits' diffs and tool results.
    pub verbose: bool,
    /// Show the user's prompts and each turn's end (a log replayed, not a turn just typed).
    pub history: bool,
    items: HashMap<String, Open>,
    /// Tool names by call id (for their results).
    calls: HashMap<String, String>,
}

impl Renderer {
    pub fn new(verbose: bool, history: bool) -> Renderer {
        Renderer {
            verbose,
            history,
            ..Renderer::default()
        }
    }

    /// The pieces `event` makes, appended to `out`.
    pub fn apply(&mut self, event: &UniversalEvent, out: &mut Vec<Piece>) {
        match &event.data {
            EventData::TurnStarted(_) => {
                out.push(Piece::Activity("thinking".into()));
            }
            EventData::TurnEnded(turn) => {
                out.push(Piece::Break);
                if self.history {
                    if let Some(meta) = &turn.metadata {
                        let (style, text) = turn_summary(meta.status, meta.cost, meta.session_cost);
                        out.push(Piece::Line(style, text));
                    }
                }
            }
            EventData::ItemStarted(d) => self.started(&d.item, out),
            EventData::ItemDelta(d) => match self.items.get(&*d.item_id) {
                Some(open) if open.depth == 0 && open.role == Some(ItemRole::Assistant) => {
                    if open.kind != ItemKind::Message {
                        return;
                    }
                    if open.reasoning {
                        out.push(Piece::Reasoning(d.delta.clone()));
                    } else {
                        out.push(Piece::Text(d.delta.clone()));
                    }
                }
                _ => {}
            },
            EventData::ItemCompleted(d) => self.completed(&d.item, out),
            EventData::Error(e) => {
                out.push(Piece::Break);
                let code = e
                    .code
                    .as_deref()
                    .map(|c| format!(" [{c}]"))
                    .unwrap_or_default();
                out.push(Piece::Line(
                    Style::Error,
                    format!("error{code}: {}", e.message),
                ));
            }
            EventData::PermissionResolved(p) => {
                let meta = p.metadata.as_ref();
                let by = meta.and_then(|m| m["decidedBy"].as_str()).unwrap_or("user");
                let title = meta
                    .and_then(|m| m["title"].as_str())
                    .unwrap_or(p.action.as_str());
                let (style, verdict) = match p.status {
                    PermissionStatus::Accept => (Style::Dim, "allowed"),
                    PermissionStatus::AcceptForSession => (Style::Dim, "allowed for the session"),
                    PermissionStatus::Reject => (Style::Warn, "rejected"),
                    PermissionStatus::Requested => return,
                };
                out.push(Piece::Break);
                out.push(Piece::Line(style, format!("  ⎿ {verdict} ({by}): {title}")));
            }
            EventData::QuestionResolved(q) => {
                out.push(Piece::Break);
                match (q.status, &q.answers) {
                    (QuestionStatus::Answered, Some(answers)) => {
                        let text: Vec<String> = answers
                            .iter()
                            .map(|a| {
                                if a.is_empty() {
                                    "-".to_owned()
                                } else {
                                    a.join(", ")
                                }
                            })
                            .collect();
                        out.push(Piece::Line(
                            Style::Dim,
                            format!("  ⎿ answered: {}", text.join(" · ")),
                        ));
                    }
                    (QuestionStatus::Answered, None) => {
                        let text = q.response.clone().unwrap_or_default();
                        out.push(Piece::Line(Style::Dim, format!("  ⎿ answered: {text}")));
                    }
                    _ => out.push(Piece::Line(Style::Warn, "  ⎿ question skipped".into())),
                }
            }
            EventData::SessionEnded(end) => {
                out.push(Piece::Break);
                let why = end.message.as_deref().unwrap_or_default();
                out.push(Piece::Line(
                    Style::Warn,
                    format!("session ended ({:?}) {why}", end.reason)
                        .to_lowercase()
                        .trim_end()
                        .to_owned(),
                ));
            }
            EventData::AgentUnparsed(u) if self.verbose => {
                out.push(Piece::Break);
                out.push(Piece::Line(
                    Style::Dim,
                    format!("unparsed agent output: {}", u.error),
                ));
            }
            EventData::SessionStarted(_)
            | EventData::PermissionRequested(_)
            | EventData::QuestionRequested(_)
            | EventData::AgentUnparsed(_) => {}
        }
    }

    fn depth_of(&self, parent: Option<&String>) -> usize {
        parent
            .and_then(|p| self.items.get(p))
            .map_or(0, |p| p.depth + usize::from(p.subagent.is_some()))
    }

    fn started(&mut self, item: &Item, out: &mut Vec<Piece>) {
        let depth = self.depth_of(item.parent_id.as_ref());
        let reasoning = item
            .content
            .iter()
            .any(|p| matches!(p, ContentPart::Reasoning { .. }));
        let mut open = Open {
            kind: item.kind,
            role: item.role,
            depth,
            reasoning,
            subagent: None,
        };
        let indent = "  ".repeat(depth);
        match item.kind {
            ItemKind::Message if item.role == Some(ItemRole::User) => {
                if self.history {
                    out.push(Piece::Break);
                    out.push(Piece::Line(
                        Style::Bold,
                        format!("› {}", item.text().unwrap_or_default()),
                    ));
                }
            }
            ItemKind::Message => {
                let what = if reasoning { "thinking" } else { "writing" };
                out.push(Piece::Activity(what.into()));
            }
            ItemKind::ToolCall => {
                for part in item.content.iter() {
                    if let ContentPart::ToolCall {
                        name,
                        arguments,
                        call_id,
                    } = part
                    {
                        self.calls.insert(call_id.clone(), name.clone());
                        let (line, activity) = tool_preview(name, arguments);
                        out.push(Piece::Break);
                        out.push(Piece::Line(Style::Tool, format!("{indent}⏺ {line}")));
                        out.push(Piece::Activity(activity));
                    }
                }
            }
            ItemKind::Status => {
                for part in item.content.iter() {
                    if let ContentPart::Status { label, detail } = part {
                        if label == "subagent" {
                            let name = detail.clone().unwrap_or_else(|| "subagent".into());
                            out.push(Piece::Break);
                            out.push(Piece::Line(
                                Style::Tool,
                                format!("{indent}⤷ subagent {name}"),
                            ));
                            out.push(Piece::Activity(format!("subagent {name}")));
                            open.subagent = Some(name);
                        } else if self.verbose {
                            let detail = detail.as_deref().unwrap_or_default();
                            out.push(Piece::Break);
                            out.push(Piece::Line(
                                Style::Dim,
                                format!("{indent}· {label} {detail}"),
                            ));
                        }
                    }
                }
            }
            ItemKind::ToolResult | ItemKind::System | ItemKind::Unknown => {}
        }
        self.items.insert(item.item_id.clone(), open);
    }

    fn completed(&mut self, item: &Item, out: &mut Vec<Piece>) {
        let open = self.items.remove(&item.item_id);
        let depth = open
            .as_ref()
            .map_or_else(|| self.depth_of(item.parent_id.as_ref()), |o| o.depth);
        let indent = "  ".repeat(depth);
        match item.kind {
            ItemKind::Message if item.role == Some(ItemRole::Assistant) => {
                if depth > 0 {
                    let text = one_line(&item.text().unwrap_or_default(), 160);
                    if !text.is_empty() {
                        out.push(Piece::Break);
                        out.push(Piece::Line(Style::Dim, format!("{indent}│ {text}")));
                    }
                } else {
                    out.push(Piece::Break);
                }
                out.push(Piece::Activity("thinking".into()));
            }
            ItemKind::ToolResult => {
                let name = item.content.iter().find_map(|p| match p {
                    ContentPart::ToolResult { call_id, .. } => self.calls.get(call_id).cloned(),
                    _ => None,
                });
                let name = name.unwrap_or_else(|| "tool".into());
                for part in item.content.iter() {
                    match part {
                        ContentPart::FileRef {
                            path,
                            action: FileAction::Write | FileAction::Patch,
                            diff: Some(diff),
                        } => {
                            let (added, removed) = diff_stats(diff);
                            out.push(Piece::Line(
                                Style::Dim,
                                format!("{indent}  ⎿ {path} +{added} −{removed}"),
                            ));
                            if self.verbose {
                                for line in diff.lines() {
                                    let style = if line.starts_with('+') {
                                        Style::Ok
                                    } else if line.starts_with('-') {
                                        Style::Error
                                    } else {
                                        Style::Dim
                                    };
                                    out.push(Piece::Line(style, format!("{indent}    {line}")));
                                }
                            }
                        }
                        ContentPart::ToolResult { output, .. } => {
                            if item.status == ItemStatus::Failed {
                                let why = failure_text(output);
                                out.push(Piece::Line(
                                    Style::Error,
                                    format!("{indent}  ⎿ {name} failed: {}", one_line(&why, 160)),
                                ));
                            } else if self.verbose {
                                for line in result_text(output).lines().take(20) {
                                    out.push(Piece::Line(
                                        Style::Dim,
                                        format!("{indent}  │ {line}"),
                                    ));
                                }
                            }
                        }
                        _ => {}
                    }
                }
                out.push(Piece::Activity("thinking".into()));
            }
            ItemKind::Status if open.as_ref().is_some_and(|o| o.subagent.is_some()) => {
                out.push(Piece::Activity("thinking".into()));
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(lines: &[&str]) -> Vec<UniversalEvent> {
        lines
            .iter()
            .enumerate()
            .map(|(i, data)| {
                let (kind, data) = data.split_once(' ').unwrap();
                serde_json::from_str(&format!(
                    r#"{{"sequence":{},"time":"t","session_id":"s","native_session_id":null,"synthetic":false,"type":"{kind}","data":{data},"raw":null}}"#,
                    i + 1
                ))
                .unwrap()
            })
            .collect()
    }

    fn render(r: &mut Renderer, lines: &[&str]) -> Vec<Piece> {
        let mut out = Vec::new();
        for e in events(lines) {
            r.apply(&e, &mut out);
        }
        out
    }

    const ITEM: &str = r#""native_item_id":null,"parent_id":null"#;

    #[test]
    fn streamed_text_then_the_answer() {
        let mut r = Renderer::new(false, false);
        let out = render(
            &mut r,
            &[
                r#"turn.started {"phase":"started"}"#,
                &format!(
                    r#"item.started {{"item":{{"item_id":"itm_1",{ITEM},"kind":"message","role":"assistant","content":[{{"type":"text","text":""}}],"status":"in_progress"}}}}"#
                ),
                r#"item.delta {"item_id":"itm_1","native_item_id":null,"delta":"Hel"}"#,
                r#"item.delta {"item_id":"itm_1","native_item_id":null,"delta":"lo"}"#,
                &format!(
                    r#"item.completed {{"item":{{"item_id":"itm_1",{ITEM},"kind":"message","role":"assistant","content":[{{"type":"text","text":"Hello"}}],"status":"completed"}}}}"#
                ),
            ],
        );
        let texts: Vec<&Piece> = out.iter().filter(|p| matches!(p, Piece::Text(_))).collect();
        assert_eq!(
            texts,
            [&Piece::Text("Hel".into()), &Piece::Text("lo".into())]
        );
        assert!(out.contains(&Piece::Break));
    }

    #[test]
    fn reasoning_streams_dimmed() {
        let mut r = Renderer::new(false, false);
        let out = render(
            &mut r,
            &[
                &format!(
                    r#"item.started {{"item":{{"item_id":"itm_1",{ITEM},"kind":"message","role":"assistant","content":[{{"type":"reasoning","text":"","visibility":"public"}}],"status":"in_progress"}}}}"#
                ),
                r#"item.delta {"item_id":"itm_1","native_item_id":null,"delta":"hmm"}"#,
                &format!(
                    r#"item.completed {{"item":{{"item_id":"itm_1",{ITEM},"kind":"message","role":"assistant","content":[{{"type":"reasoning","text":"hmm","visibility":"public"}}],"status":"completed"}}}}"#
                ),
            ],
        );
        assert!(out.contains(&Piece::Reasoning("hmm".into())));
        assert!(!out.iter().any(|p| matches!(p, Piece::Text(_))));
    }

    #[test]
    fn one_line_per_tool_call_with_edit_stats() {
        let mut r = Renderer::new(false, false);
        let out = render(
            &mut r,
            &[
                &format!(
                    r#"item.started {{"item":{{"item_id":"itm_1",{ITEM},"kind":"tool_call","role":"assistant","content":[{{"type":"tool_call","name":"run_terminal_command","arguments":"{{\"command\":\"npm test\"}}","call_id":"c1"}}],"status":"in_progress"}}}}"#
                ),
                &format!(
                    r#"item.started {{"item":{{"item_id":"itm_2",{ITEM},"kind":"tool_call","role":"assistant","content":[{{"type":"tool_call","name":"write_file","arguments":"{{\"path\":\"a.txt\"}}","call_id":"c2"}}],"status":"in_progress"}}}}"#
                ),
                &format!(
                    r#"item.completed {{"item":{{"item_id":"itm_3",{ITEM},"kind":"tool_result","role":"tool","content":[{{"type":"tool_result","call_id":"c2","output":"ok"}},{{"type":"file_ref","path":"a.txt","action":"write","diff":"@@ -1 +1,2 @@\n-a\n+b\n+c\n"}}],"status":"completed"}}}}"#
                ),
            ],
        );
        let lines: Vec<String> = out
            .iter()
            .filter_map(|p| match p {
                Piece::Line(_, l) => Some(l.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(lines, ["⏺ $ npm test", "⏺ write a.txt", "  ⎿ a.txt +2 −1"]);
        assert!(out.contains(&Piece::Activity("running `npm test`".into())));
        assert!(out.contains(&Piece::Activity("editing a.txt".into())));
    }
}
