//! `prompt-response.sessionState`: a Codebuff `SessionState` as `@codebuff/sdk` 0.3.13's
//! `SessionStateSchema` accepts it, plus codebuffd's own fields for generic clients. Pure:
//! built from plain data, tested on it.
//!
//! * `fileContext`: the one the prompt's `sessionState` carried (the client's project, echoed
//!   as is), else a minimal valid one for the session's directory.
//! * `mainAgentState`: the turn's message history in Codebuff's message shapes (the user's
//!   prompt, the top-level assistant messages and tool calls, the tool results), and
//!   codebuffd's session id as its `runId` — a field the client's schema keeps, so the state
//!   a client passes back (`run({previousRun})`) names the same session.
//! * ours, dropped by a client that parses with the schema: `sessionId`, `agent`,
//!   `agentMode`, `messages` (the turn's messages as `{role, content}` text), `cost` (the
//!   session's), `turns`, `remainingBalance` (only with a budget).
//!
//! The history is the turn's, not the session's: codebuffd keeps the conversation itself
//! (the whole log), so a state stays small however long the session gets.

use serde::Serialize;
use serde_json::{json, Map, Value};

use super::server::{ToolCall, ToolResult};
use crate::session::SessionInfo;

/// `mainAgentState.stepsRemaining` when the client's state does not say (Codebuff's default
/// `MAX_AGENT_STEPS_DEFAULT`).
const DEFAULT_STEPS: u64 = 25;
/// `mainAgentState.agentId` when the client's state does not name one (Codebuff's).
const MAIN_AGENT: &str = "main-agent";

/// One message of a turn as codebuffd's own `sessionState.messages` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Message {
    /// `user` or `assistant`.
    pub role: &'static str,
    pub content: String,
}

/// A turn's messages in both shapes: ours (`{role, content}`) and Codebuff's message history.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct History {
    /// The user's prompt and the top-level assistant messages, as text.
    pub messages: Vec<Message>,
    /// Codebuff messages (`messageSchema`): user, assistant (text or `tool-call` parts) and
    /// `tool` messages, in the order the turn completed them.
    pub codebuff: Vec<Value>,
}

impl History {
    /// A top-level user or assistant text message.
    pub fn text(&mut self, role: &'static str, text: String) {
        let codebuff = if role == "user" {
            json!({"role": "user", "content": text})
        } else {
            json!({"role": "assistant", "content": [{"type": "text", "text": text}]})
        };
        self.codebuff.push(codebuff);
        self.messages.push(Message {
            role,
            content: text,
        });
    }

    /// A top-level tool call: an assistant message with a `tool-call` part.
    pub fn tool_call(&mut self, call: &ToolCall) {
        self.codebuff.push(json!({"role": "assistant", "content": [{
            "type": "tool-call", "toolCallId": call.tool_call_id,
            "toolName": call.tool_name, "input": call.input,
        }]}));
    }

    /// A top-level tool result: a `tool` message.
    pub fn tool_result(&mut self, result: &ToolResult) {
        self.codebuff
            .push(json!({"role": "tool", "content": result}));
    }

    /// The text of the last assistant message (the turn's answer), or empty.
    pub fn answer(&self) -> String {
        self.messages
            .iter()
            .rev()
            .find(|m| m.role == "assistant")
            .map(|m| m.content.clone())
            .unwrap_or_default()
    }
}

/// The `sessionState` of a completed turn: `client` is the `sessionState` the prompt carried
/// (if any), `info` the session after the turn, `turn_credits` the turn's cost.
pub fn session_state(
    client: Option<&Map<String, Value>>,
    info: &SessionInfo,
    history: History,
    turn_credits: f64,
) -> Value {
    let file_context = client
        .and_then(|c| c.get("fileContext"))
        .filter(|f| f.is_object())
        .cloned()
        .unwrap_or_else(|| minimal_file_context(&info.directory));
    let agent = client
        .and_then(|c| c.get("mainAgentState"))
        .and_then(Value::as_object);
    let agent_id = agent
        .and_then(|a| a.get("agentId"))
        .and_then(Value::as_str)
        .filter(|a| !a.is_empty())
        .unwrap_or(MAIN_AGENT);
    let agent_type = agent
        .and_then(|a| a.get("agentType"))
        .filter(|t| t.is_string())
        .cloned()
        .unwrap_or(Value::Null);
    let steps = agent
        .and_then(|a| a.get("stepsRemaining"))
        .and_then(Value::as_f64)
        .filter(|s| s.is_finite())
        .map_or(json!(DEFAULT_STEPS), |s| json!(s));
    let mut state = json!({
        "fileContext": file_context,
        "mainAgentState": {
            "agentId": agent_id,
            "agentType": agent_type,
            "agentContext": {},
            "ancestorRunIds": [],
            "runId": info.session_id,
            "subagents": [],
            "childRunIds": [],
            "messageHistory": history.codebuff,
            "stepsRemaining": steps,
            "creditsUsed": info.cost.credits,
            "directCreditsUsed": turn_credits,
        },
        "sessionId": info.session_id,
        "agent": info.agent,
        "agentMode": info.agent_mode,
        "messages": history.messages,
        "cost": info.cost,
        "turns": info.turns,
    });
    if let Some(remaining) = info.remaining {
        state["remainingBalance"] = json!(remaining);
    }
    state
}

/// The session a `sessionState` names: codebuffd's `sessionId` (generic clients), else
/// `mainAgentState.runId` (what survives a Codebuff client's schema parse).
pub fn named_session(state: &Map<String, Value>) -> Option<&str> {
    fn non_empty(v: Option<&Value>) -> Option<&str> {
        v.and_then(Value::as_str).filter(|s| !s.is_empty())
    }
    non_empty(state.get("sessionId"))
        .or_else(|| non_empty(state.get("mainAgentState").and_then(|a| a.get("runId"))))
}

/// A valid `ProjectFileContext` that says only where the session works: for clients that
/// sent none (the agent reads the directory itself).
pub fn minimal_file_context(directory: &str) -> Value {
    json!({
        "projectRoot": directory,
        "cwd": directory,
        "fileTree": [],
        "fileTokenScores": {},
        "knowledgeFiles": {},
        "agentTemplates": {},
        "customToolDefinitions": {},
        "gitChanges": {"status": "", "diff": "", "diffCached": "", "lastCommitMessages": ""},
        "changesSinceLastChat": {},
        "shellConfigFiles": {},
        "systemInfo": {
            "platform": std::env::consts::OS,
            "shell": "bash",
            "nodeVersion": "",
            "arch": std::env::consts::ARCH,
            "homedir": "",
            "cpus": std::thread::available_parallelism().map_or(1, usize::from),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::SessionStatus;
    use crate::universal::Cost;

    fn info(remaining: Option<f64>) -> SessionInfo {
        SessionInfo {
            session_id: "s-1".into(),
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
            directory: "/work/p".into(),
            title: None,
            status: SessionStatus::Idle,
            budget: remaining.map(|r| r + 10.0),
            remaining,
            cost: Cost::from_credits(10.0),
            turns: 2,
            first_prompt: None,
            owner: None,
        }
    }

    fn history() -> History {
        let mut h = History::default();
        h.text("user", "tools".into());
        h.text("assistant", "I will write.".into());
        let call = ToolCall::new("c1", "write_file", r#"{"path":"a"}"#);
        h.tool_call(&call);
        h.tool_result(&ToolResult::new("c1", Some("write_file"), r#"{"ok":true}"#));
        h.text("assistant", "Done.".into());
        h
    }

    #[test]
    fn a_state_without_the_clients_has_a_minimal_file_context_and_the_turns_history() {
        let state = session_state(None, &info(None), history(), 7.5);
        assert_eq!(state["fileContext"]["projectRoot"], "/work/p");
        assert_eq!(state["fileContext"]["cwd"], "/work/p");
        assert_eq!(state["fileContext"]["gitChanges"]["diffCached"], "");
        assert!(state["fileContext"]["systemInfo"]["cpus"].as_u64() >= Some(1));
        let agent = &state["mainAgentState"];
        assert_eq!(agent["agentId"], "main-agent");
        assert_eq!(agent["agentType"], Value::Null);
        assert_eq!(agent["runId"], "s-1");
        assert_eq!(agent["stepsRemaining"], 25);
        assert_eq!(agent["creditsUsed"], 10.0);
        assert_eq!(agent["directCreditsUsed"], 7.5);
        assert_eq!(
            agent["messageHistory"],
            json!([
                {"role": "user", "content": "tools"},
                {"role": "assistant", "content": [{"type": "text", "text": "I will write."}]},
                {"role": "assistant", "content": [{"type": "tool-call", "toolCallId": "c1",
                    "toolName": "write_file", "input": {"path": "a"}}]},
                {"role": "tool", "content": {"type": "tool-result", "toolCallId": "c1",
                    "toolName": "write_file", "output": [{"type": "json", "value": {"ok": true}}]}},
                {"role": "assistant", "content": [{"type": "text", "text": "Done."}]},
            ])
        );
        assert_eq!(state["sessionId"], "s-1");
        assert_eq!(
            state["messages"],
            json!([{"role": "user", "content": "tools"},
                {"role": "assistant", "content": "I will write."},
                {"role": "assistant", "content": "Done."}])
        );
        assert_eq!(state["cost"], json!({"credits": 10.0, "usd": 0.1}));
        assert!(
            state.get("remainingBalance").is_none(),
            "no budget, no balance"
        );
    }

    #[test]
    fn the_clients_file_context_and_agent_fields_are_echoed() {
        let client = json!({"fileContext": {"projectRoot": "/mine", "anything": [1]},
            "mainAgentState": {"agentId": "a-7", "agentType": "base", "stepsRemaining": 12,
                "runId": "old", "messageHistory": [{"role": "user", "content": "old"}]}});
        let state = session_state(
            client.as_object(),
            &info(Some(4.0)),
            History::default(),
            0.0,
        );
        assert_eq!(
            state["fileContext"],
            json!({"projectRoot": "/mine", "anything": [1]})
        );
        assert_eq!(state["mainAgentState"]["agentId"], "a-7");
        assert_eq!(state["mainAgentState"]["agentType"], "base");
        assert_eq!(state["mainAgentState"]["stepsRemaining"], 12.0);
        assert_eq!(state["mainAgentState"]["runId"], "s-1");
        assert_eq!(state["mainAgentState"]["messageHistory"], json!([]));
        assert_eq!(state["remainingBalance"], 4.0);
    }

    #[test]
    fn the_session_is_named_by_session_id_else_by_the_main_agents_run_id() {
        let named = |v: Value| named_session(v.as_object().unwrap()).map(str::to_owned);
        assert_eq!(
            named(json!({"sessionId": "a", "mainAgentState": {"runId": "b"}})),
            Some("a".into())
        );
        assert_eq!(
            named(json!({"mainAgentState": {"runId": "b"}})),
            Some("b".into())
        );
        assert_eq!(
            named(json!({"sessionId": "", "mainAgentState": {"runId": ""}})),
            None
        );
        assert_eq!(
            named(json!({"mainAgentState": {"agentId": "main-agent"}})),
            None
        );
        // A state built here names its session again.
        let state = session_state(None, &info(None), History::default(), 0.0);
        let mut parsed = state.as_object().unwrap().clone();
        parsed.remove("sessionId");
        assert_eq!(named_session(&parsed), Some("s-1"));
    }

    #[test]
    fn tool_calls_and_results_take_the_protocols_shapes() {
        let call = ToolCall::new("c", "run_terminal_command", "not json");
        assert_eq!(
            serde_json::to_value(&call).unwrap(),
            json!({"toolCallId": "c", "toolName": "run_terminal_command",
                "input": {"arguments": "not json"}})
        );
        assert_eq!(
            ToolCall::new("c", "t", "[1]").input,
            Map::from_iter([("arguments".to_owned(), json!([1]))])
        );
        assert_eq!(
            serde_json::to_value(ToolResult::new("c", None, "plain text")).unwrap(),
            json!({"type": "tool-result", "toolCallId": "c", "toolName": "unknown",
                "output": [{"type": "json", "value": "plain text"}]})
        );
    }
}
