//! One prompt's turn as the Codebuff protocol shows it: the turn's universal events in, the
//! server actions out — a `response-chunk` per assistant text delta, `question` and
//! `permission` actions when the agent waits for the user, and at the end `prompt-response`
//! or `prompt-error`. How the turn ended (status, cause, reason, costs) is the engine's one
//! verdict ([`TurnTracker`]); this file only projects it. Pure: fed events, tested on plain
//! data.

use std::collections::{HashMap, HashSet};

use serde_json::{json, Map, Value};

use super::server::{PromptOutput, ServerAction, ToolCall, ToolResult};
use super::state::{session_state, History};
use crate::session::{SessionInfo, TurnEnd, TurnTracker};
use crate::universal::{ContentPart, EventData, Item, ItemKind, ItemRole, QuestionSpec};

/// The state of one prompt's turn while its events go by.
#[derive(Debug)]
pub struct TurnProjection {
    prompt_id: String,
    session_id: String,
    /// Top-level assistant text items: their deltas are the answer's chunks.
    text_items: HashSet<String>,
    /// The item whose delta was the last chunk.
    last_chunk_item: Option<std::sync::Arc<str>>,
    /// The turn's top-level messages and tools, in both shapes.
    history: History,
    tool_calls: Vec<ToolCall>,
    tool_results: Vec<ToolResult>,
    /// Call id → tool name, for naming results.
    tool_names: HashMap<String, String>,
    /// How the turn ends.
    tracker: TurnTracker,
}

impl TurnProjection {
    /// The projection of prompt `prompt_id`'s turn in session `session_id`.
    pub fn new(prompt_id: &str, session_id: &str) -> TurnProjection {
        TurnProjection {
            prompt_id: prompt_id.to_owned(),
            session_id: session_id.to_owned(),
            text_items: HashSet::new(),
            last_chunk_item: None,
            history: History::default(),
            tool_calls: Vec::new(),
            tool_results: Vec::new(),
            tool_names: HashMap::new(),
            tracker: TurnTracker::new(),
        }
    }

    /// Takes the turn's next event; pushes the actions it makes to `out`. Returns true once
    /// the turn is over (`turn.ended`, or `session.ended` without one).
    pub fn take(&mut self, data: &EventData, out: &mut Vec<ServerAction>) -> bool {
        match data {
            EventData::ItemStarted(d) if is_answer_text(&d.item) => {
                self.text_items.insert(d.item.item_id.clone());
            }
            EventData::ItemDelta(d)
                if self.text_items.contains(&*d.item_id) && !d.delta.is_empty() =>
            {
                // A later message of the turn starts on a paragraph of its own.
                let chunk = match &self.last_chunk_item {
                    Some(last) if *last != d.item_id => format!("\n\n{}", d.delta),
                    _ => d.delta.clone(),
                };
                self.last_chunk_item = Some(d.item_id.clone());
                out.push(ServerAction::ResponseChunk {
                    user_input_id: self.prompt_id.clone(),
                    chunk,
                });
            }
            EventData::ItemCompleted(d) => self.completed(&d.item),
            EventData::QuestionRequested(q) => out.push(ServerAction::Question {
                user_input_id: self.prompt_id.clone(),
                session_id: self.session_id.clone(),
                question_id: q.question_id.clone(),
                prompt: q.prompt.clone(),
                options: q.options.clone(),
                questions: q.specs().iter().map(question_json).collect(),
            }),
            EventData::PermissionRequested(p) => out.push(ServerAction::Permission {
                user_input_id: self.prompt_id.clone(),
                session_id: self.session_id.clone(),
                permission_id: p.permission_id.clone(),
                tool_name: p.action.clone(),
                metadata: p.metadata.clone(),
            }),
            _ => {}
        }
        self.tracker.take(data).is_some()
    }

    /// Records what a completed item adds to the turn's messages and tools.
    fn completed(&mut self, item: &Item) {
        let top = item.parent_id.is_none();
        match (item.kind, item.role) {
            (ItemKind::Message, Some(role @ (ItemRole::User | ItemRole::Assistant))) if top => {
                if let Some(text) = item.text() {
                    let role = if role == ItemRole::User {
                        "user"
                    } else {
                        "assistant"
                    };
                    self.history.text(role, text);
                }
            }
            (ItemKind::ToolCall, _) => {
                for part in item.content.iter() {
                    if let ContentPart::ToolCall {
                        name,
                        arguments,
                        call_id,
                    } = part
                    {
                        self.tool_names.insert(call_id.clone(), name.clone());
                        let call = ToolCall::new(call_id, name, arguments);
                        if top {
                            self.history.tool_call(&call);
                        }
                        self.tool_calls.push(call);
                    }
                }
            }
            (ItemKind::ToolResult, _) => {
                for part in item.content.iter() {
                    if let ContentPart::ToolResult { call_id, output } = part {
                        let name = self.tool_names.get(call_id).map(String::as_str);
                        let result = ToolResult::new(call_id, name, output);
                        if top {
                            self.history.tool_result(&result);
                        }
                        self.tool_results.push(result);
                    }
                }
            }
            _ => {}
        }
    }

    /// The final action: `prompt-response` for a completed turn, else `prompt-error` with the
    /// verdict's cause and reason. `info` is the session (its budget, mode, turns; its cost is
    /// the verdict's `session_cost` when the log carries it); `client` the `sessionState` the
    /// prompt carried.
    pub fn finish(self, info: &SessionInfo, client: Option<&Map<String, Value>>) -> ServerAction {
        let Some(end) = self.tracker.end() else {
            return ServerAction::PromptError {
                user_input_id: self.prompt_id,
                message: "the turn's events could not be read to its end".into(),
                error: Some("stream_error".into()),
                remaining_balance: info.remaining,
                session_id: self.session_id,
            };
        };
        let info = after(info, end);
        if !end.completed() {
            return ServerAction::PromptError {
                user_input_id: self.prompt_id,
                message: end.reason(),
                error: Some(end.cause()),
                remaining_balance: info.remaining,
                session_id: self.session_id,
            };
        }
        let output = PromptOutput {
            kind: "lastMessage",
            value: self.history.answer(),
            status: end.status.as_str().to_owned(),
            cost: end.turn_cost,
            cost_reported: end.cost_reported,
            turn_id: end.turn_id.clone(),
        };
        ServerAction::PromptResponse {
            prompt_id: self.prompt_id,
            session_state: session_state(client, &info, self.history, end.turn_cost.credits),
            tool_calls: self.tool_calls,
            tool_results: self.tool_results,
            output,
        }
    }
}

/// The session as the verdict leaves it: its cost the turn's `session_cost` (what the log says
/// at that point, whatever happened since), its balance what that leaves of its budget.
fn after(info: &SessionInfo, end: &TurnEnd) -> SessionInfo {
    let mut info = info.clone();
    if let Some(cost) = end.session_cost {
        info.cost = cost;
        info.remaining = info.budget.map(|b| (b - cost.credits).max(0.0));
    }
    info
}

/// True for an item whose deltas are the answer: a top-level assistant message of text.
fn is_answer_text(item: &Item) -> bool {
    item.kind == ItemKind::Message
        && item.role == Some(ItemRole::Assistant)
        && item.parent_id.is_none()
        && matches!(item.content.first(), Some(ContentPart::Text { .. }))
}

/// One question as the `question` action shows it (camelCase, like Codebuff's `ask_user`).
fn question_json(q: &QuestionSpec) -> Value {
    json!({
        "question": q.question,
        "header": q.header,
        "options": q.options.iter().map(|o| json!({"label": o.label, "description": o.description})).collect::<Vec<_>>(),
        "multiSelect": q.multi_select,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::SessionStatus;
    use crate::universal::{Cost, UniversalEvent};

    /// Events from their envelopes' JSON (as the log serves them).
    fn events(lines: &[Value]) -> Vec<UniversalEvent> {
        lines
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let mut e = json!({"event_id": format!("evt_{}", i + 1), "sequence": i + 1,
                    "time": "2026-01-01T00:00:00.000Z", "session_id": "s",
                    "native_session_id": null, "synthetic": false, "source": "agent", "raw": null});
                e["type"] = v["type"].clone();
                e["data"] = v["data"].clone();
                serde_json::from_value(e).unwrap()
            })
            .collect()
    }

    fn item(id: &str, kind: &str, role: &str, parent: Option<&str>, content: Value) -> Value {
        json!({"item_id": id, "native_item_id": null, "parent_id": parent, "kind": kind,
            "role": role, "content": content, "status": "completed"})
    }

    fn text(t: &str) -> Value {
        json!([{"type": "text", "text": t}])
    }

    fn info(cost: f64, remaining: Option<f64>) -> SessionInfo {
        SessionInfo {
            session_id: "s".into(),
            agent: "mock".into(),
            agent_mode: "build".into(),
            permission_mode: "bypass".into(),
            model: None,
            variant: None,
            native_session_id: None,
            ended: false,
            event_count: 10,
            created_at: 0,
            updated_at: 0,
            directory: "/".into(),
            title: None,
            status: SessionStatus::Idle,
            budget: remaining.map(|r| r + cost),
            remaining,
            cost: Cost::from_credits(cost),
            turns: 1,
            first_prompt: None,
            owner: None,
        }
    }

    fn run(lines: &[Value]) -> (TurnProjection, Vec<ServerAction>, bool) {
        let mut p = TurnProjection::new("p1", "s");
        let mut out = Vec::new();
        let mut done = false;
        for e in events(lines) {
            assert!(!done, "events after the end");
            done = p.take(&e.data, &mut out);
        }
        (p, out, done)
    }

    fn chunks(out: &[ServerAction]) -> Vec<String> {
        out.iter()
            .filter_map(|a| match a {
                ServerAction::ResponseChunk { chunk, .. } => Some(chunk.clone()),
                _ => None,
            })
            .collect()
    }

    fn streamed_turn() -> Vec<Value> {
        vec![
            json!({"type": "turn.started", "data": {"phase": "started", "turn_id": "turn_1"}}),
            json!({"type": "item.completed", "data": {"item": item("itm_1", "message", "user", None, text("stream a b"))}}),
            json!({"type": "item.started", "data": {"item": item("itm_2", "message", "assistant", None, json!([{"type": "reasoning", "text": "", "visibility": "public"}]))}}),
            json!({"type": "item.delta", "data": {"item_id": "itm_2", "native_item_id": null, "delta": "thinking"}}),
            json!({"type": "item.started", "data": {"item": item("itm_3", "message", "assistant", None, text(""))}}),
            json!({"type": "item.delta", "data": {"item_id": "itm_3", "native_item_id": null, "delta": "a"}}),
            json!({"type": "item.delta", "data": {"item_id": "itm_3", "native_item_id": null, "delta": " b"}}),
            json!({"type": "item.completed", "data": {"item": item("itm_3", "message", "assistant", None, text("a b"))}}),
            json!({"type": "item.started", "data": {"item": item("itm_4", "message", "assistant", Some("itm_9"), text(""))}}),
            json!({"type": "item.delta", "data": {"item_id": "itm_4", "native_item_id": null, "delta": "sub"}}),
            json!({"type": "item.completed", "data": {"item": item("itm_5", "tool_call", "assistant", None,
                json!([{"type": "tool_call", "name": "write_file", "arguments": "{\"path\":\"a\"}", "call_id": "c1"}]))}}),
            json!({"type": "item.completed", "data": {"item": item("itm_6", "tool_result", "tool", None,
                json!([{"type": "tool_result", "call_id": "c1", "output": "ok"}]))}}),
            json!({"type": "item.started", "data": {"item": item("itm_7", "message", "assistant", None, text(""))}}),
            json!({"type": "item.delta", "data": {"item_id": "itm_7", "native_item_id": null, "delta": "done"}}),
            json!({"type": "item.completed", "data": {"item": item("itm_7", "message", "assistant", None, text("done"))}}),
            json!({"type": "turn.ended", "data": {"phase": "ended", "turn_id": "turn_1", "metadata":
                {"status": "completed", "cost": {"credits": 2.5, "usd": 0.025}, "cost_reported": true,
                 "session_cost": {"credits": 9.0, "usd": 0.09}}}}),
        ]
    }

    #[test]
    fn only_top_level_assistant_text_deltas_become_chunks() {
        let (_, out, done) = run(&streamed_turn());
        assert!(done);
        // Reasoning and the subagent's text are not the answer; the second message starts a
        // paragraph.
        assert_eq!(chunks(&out), vec!["a", " b", "\n\ndone"]);
    }

    #[test]
    fn a_completed_turn_is_a_prompt_response_with_messages_tools_and_cost() {
        let (p, _, _) = run(&streamed_turn());
        let ServerAction::PromptResponse {
            prompt_id,
            session_state,
            tool_calls,
            tool_results,
            output,
        } = p.finish(&info(7.5, Some(2.5)), None)
        else {
            panic!("not a prompt-response")
        };
        assert_eq!(prompt_id, "p1");
        assert_eq!(session_state["sessionId"], "s");
        assert_eq!(session_state["mainAgentState"]["runId"], "s");
        // The session's cost as the turn's end says, whatever the info says since; the balance
        // is what that leaves of the budget (10).
        assert_eq!(session_state["cost"], json!({"credits": 9.0, "usd": 0.09}));
        assert_eq!(session_state["remainingBalance"], 1.0);
        assert_eq!(
            session_state["messages"],
            json!([{"role": "user", "content": "stream a b"},
                {"role": "assistant", "content": "a b"},
                {"role": "assistant", "content": "done"}])
        );
        // The subagent's message is not in the main agent's history; its tools are.
        let history = session_state["mainAgentState"]["messageHistory"]
            .as_array()
            .unwrap();
        assert_eq!(history.len(), 5, "{history:?}");
        assert_eq!(history[2]["content"][0]["type"], "tool-call");
        assert_eq!(history[3]["role"], "tool");
        assert_eq!(
            session_state["mainAgentState"]["directCreditsUsed"], 2.5,
            "the turn's cost"
        );
        assert_eq!(
            tool_calls[0].input,
            *json!({"path": "a"}).as_object().unwrap()
        );
        assert_eq!(tool_results[0].tool_name, "write_file");
        assert_eq!(
            tool_results[0].output,
            vec![json!({"type": "json", "value": "ok"})]
        );
        assert_eq!(output.value, "done");
        assert_eq!(output.status, "completed");
        assert_eq!(output.cost, Cost::from_credits(2.5));
        assert_eq!(output.turn_id.as_deref(), Some("turn_1"));
    }

    #[test]
    fn a_failed_turn_is_a_prompt_error_with_the_agents_error_code() {
        let (p, _, done) = run(&[
            json!({"type": "turn.started", "data": {"phase": "started", "turn_id": "turn_2"}}),
            json!({"type": "error", "data": {"message": "Codebuff backend unreachable", "code": "backend_error", "details": null}}),
            json!({"type": "turn.ended", "data": {"phase": "ended", "turn_id": "turn_2", "metadata":
                {"status": "failed", "cost": {"credits": 0, "usd": 0}, "cost_reported": false, "exit_code": 3,
                 "message": "the agent exited with status 3"}}}),
        ]);
        assert!(done);
        assert_eq!(
            p.finish(&info(1.0, Some(4.0)), None),
            ServerAction::PromptError {
                user_input_id: "p1".into(),
                // The engine's verdict: what the agent said (how the turn ended).
                message: "Codebuff backend unreachable (the agent exited with status 3)".into(),
                error: Some("backend_error".into()),
                remaining_balance: Some(4.0),
                session_id: "s".into(),
            }
        );
    }

    #[test]
    fn the_turns_own_code_wins_and_a_cancelled_turn_says_so() {
        let end = |meta: Value| {
            run(&[json!({"type": "turn.ended", "data": {"phase": "ended", "metadata": meta}})])
                .0
                .finish(&info(0.0, None), None)
        };
        let ServerAction::PromptError { error, message, .. } = end(json!({"status": "failed",
            "cost": {"credits": 0, "usd": 0}, "cost_reported": false, "code": "auth_failed", "message": "bad key"}))
        else {
            panic!()
        };
        assert_eq!(
            (error.as_deref(), message.as_str()),
            (Some("auth_failed"), "bad key")
        );
        let ServerAction::PromptError { error, message, .. } = end(json!({"status": "cancelled",
            "cost": {"credits": 0, "usd": 0}, "cost_reported": false}))
        else {
            panic!()
        };
        assert_eq!(
            (error.as_deref(), message.as_str()),
            (Some("cancelled"), "the turn was cancelled")
        );
    }

    #[test]
    fn questions_and_permissions_become_actions_and_the_turn_goes_on() {
        let (_, out, done) = run(&[
            json!({"type": "question.requested", "data": {"question_id": "q1", "prompt": "Which?",
                "options": ["a", "b"], "response": null, "status": "requested",
                "questions": [{"question": "Which?", "header": "H", "options": [{"label": "a", "description": null}], "multi_select": true}]}}),
            json!({"type": "permission.requested", "data": {"permission_id": "perm-1", "action": "write_file",
                "status": "requested", "metadata": {"title": "Write a"}}}),
        ]);
        assert!(!done);
        assert_eq!(
            out[0],
            ServerAction::Question {
                user_input_id: "p1".into(),
                session_id: "s".into(),
                question_id: "q1".into(),
                prompt: "Which?".into(),
                options: vec!["a".into(), "b".into()],
                questions: vec![
                    json!({"question": "Which?", "header": "H", "options": [{"label": "a", "description": null}], "multiSelect": true})
                ],
            }
        );
        assert!(
            matches!(&out[1], ServerAction::Permission { permission_id, tool_name, .. }
            if permission_id == "perm-1" && tool_name == "write_file")
        );
    }

    #[test]
    fn a_session_that_ends_mid_turn_ends_the_prompt() {
        let (p, _, done) = run(&[
            json!({"type": "session.ended", "data": {"reason": "terminated", "terminated_by": "daemon", "cost": {"credits": 0, "usd": 0}}}),
        ]);
        assert!(done);
        assert!(matches!(p.finish(&info(0.0, None), None),
            ServerAction::PromptError { error: Some(e), .. } if e == "session_ended"));
    }
}
