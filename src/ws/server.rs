//! What the daemon sends over `/v1/ws` (`docs/ws.md`): `ack`, and `action` messages whose
//! `data` is one of the protocol's server actions (field names exactly as the Codebuff protocol
//! spells them, `next_quota_reset` included) or one of ours (`event`, `question`,
//! `permission`). Pure: serialization only.
//!
//! The shapes are those `@codebuff/sdk` 0.3.13's own schemas accept (`SERVER_ACTION_SCHEMA`,
//! `PromptResponseSchema` in its `dist`): optional fields are absent, never null, except
//! `next_quota_reset`, which that schema requires (nullable).

use serde::Serialize;
use serde_json::{Map, Value};

use crate::universal::Cost;

/// A message to the client.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum ServerMessage {
    /// The answer to every client message: `success` false with the parser's `error` when it
    /// was not taken. `txid` is absent when the frame had no usable one.
    Ack {
        #[serde(skip_serializing_if = "Option::is_none")]
        txid: Option<i64>,
        success: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// A server action.
    Action { data: Box<ServerAction> },
}

impl ServerMessage {
    /// A successful `ack`.
    pub fn ack(txid: Option<i64>) -> ServerMessage {
        ServerMessage::Ack {
            txid,
            success: true,
            error: None,
        }
    }

    /// A failed `ack`.
    pub fn nack(txid: Option<i64>, error: impl Into<String>) -> ServerMessage {
        ServerMessage::Ack {
            txid,
            success: false,
            error: Some(error.into()),
        }
    }

    /// The message as JSON text.
    pub fn to_text(&self) -> String {
        // Plain data: serializing cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// The `data` of a server `action`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum ServerAction {
    /// A piece of the assistant's answer: one per streamed text delta.
    #[serde(rename_all = "camelCase")]
    ResponseChunk {
        user_input_id: String,
        chunk: String,
    },
    /// The prompt's turn completed.
    #[serde(rename_all = "camelCase")]
    PromptResponse {
        prompt_id: String,
        /// A Codebuff `SessionState` (`fileContext`, `mainAgentState`) plus ours; built by
        /// [`super::state`].
        session_state: Value,
        /// The tool calls the agent made in the turn (the daemon ran them).
        tool_calls: Vec<ToolCall>,
        /// Their results.
        tool_results: Vec<ToolResult>,
        output: PromptOutput,
    },
    /// The prompt failed: before its turn started, or its turn did not complete.
    #[serde(rename_all = "camelCase")]
    PromptError {
        user_input_id: String,
        message: String,
        /// The typed cause: the turn's code (`backend_error`, `auth_failed`, …), its status
        /// (`cancelled`, `timed_out`, …), or the request's (`budget_exhausted`, …).
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        /// Credits left of the session's budget; absent without a budget.
        #[serde(skip_serializing_if = "Option::is_none")]
        remaining_balance: Option<f64>,
        /// **(ours)** The session the prompt ran in.
        session_id: String,
    },
    /// The answer to `init`.
    InitResponse {
        #[serde(skip_serializing_if = "Option::is_none")]
        message: Option<String>,
        #[serde(rename = "agentNames", skip_serializing_if = "Option::is_none")]
        agent_names: Option<Value>,
        /// Credits the session has spent.
        usage: f64,
        /// Credits left of the session's budget; without a budget (the protocol requires a
        /// number here) the session's usage, like `usage`.
        #[serde(rename = "remainingBalance")]
        remaining_balance: f64,
        /// Always null (the protocol requires the key; codebuffd has no quota periods).
        next_quota_reset: Option<String>,
        /// **(ours)** The session.
        #[serde(rename = "sessionId")]
        session_id: String,
    },
    /// An action other than a prompt failed after its `ack`.
    #[serde(rename_all = "camelCase")]
    ActionError {
        message: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        /// Credits left of the session's budget; absent without a budget (or a session).
        #[serde(skip_serializing_if = "Option::is_none")]
        remaining_balance: Option<f64>,
    },
    /// **(ours)** The agent asks the user; answer with the `answer` action.
    #[serde(rename_all = "camelCase")]
    Question {
        user_input_id: String,
        session_id: String,
        question_id: String,
        /// The first question (compatibility with one-question clients).
        prompt: String,
        options: Vec<String>,
        /// Every question: `{question, header, options: [{label, description}],
        /// multiSelect}`.
        questions: Vec<Value>,
    },
    /// **(ours)** The agent asks to run a tool; answer with the `permission-reply` action.
    #[serde(rename_all = "camelCase")]
    Permission {
        user_input_id: String,
        session_id: String,
        permission_id: String,
        tool_name: String,
        /// `{toolCallId, toolName, kind, title, command, paths, input, options}`.
        metadata: Option<Value>,
    },
}

/// A tool call of a turn, as the protocol's `toolCallSchema` has it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCall {
    pub tool_call_id: String,
    pub tool_name: String,
    /// The tool's input: a JSON object (arguments that are not one are wrapped as
    /// `{"arguments": …}`).
    pub input: Map<String, Value>,
}

/// A tool result of a turn, as the protocol's `toolResultPartSchema` has it:
/// `{"type": "tool-result", toolCallId, toolName, output: [{"type": "json", value}]}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolResult {
    /// Always `tool-result`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub tool_call_id: String,
    /// The name of the call it answers (`unknown` when the turn does not hold the call).
    pub tool_name: String,
    /// One `{"type": "json", "value": …}` part: the result parsed when it is JSON, else its
    /// text.
    pub output: Vec<Value>,
}

impl ToolCall {
    /// The call `call_id` of tool `name` with the agent's `arguments` (JSON text).
    pub fn new(call_id: &str, name: &str, arguments: &str) -> ToolCall {
        let input = match serde_json::from_str::<Value>(arguments) {
            Ok(Value::Object(input)) => input,
            Ok(other) => Map::from_iter([("arguments".to_owned(), other)]),
            Err(_) => {
                Map::from_iter([("arguments".to_owned(), Value::String(arguments.to_owned()))])
            }
        };
        ToolCall {
            tool_call_id: call_id.to_owned(),
            tool_name: name.to_owned(),
            input,
        }
    }
}

impl ToolResult {
    /// The result of call `call_id` (of tool `name`, when known) with the agent's `output`.
    pub fn new(call_id: &str, name: Option<&str>, output: &str) -> ToolResult {
        let value = serde_json::from_str::<Value>(output)
            .unwrap_or_else(|_| Value::String(output.to_owned()));
        ToolResult {
            kind: "tool-result",
            tool_call_id: call_id.to_owned(),
            tool_name: name.unwrap_or("unknown").to_owned(),
            output: vec![serde_json::json!({"type": "json", "value": value})],
        }
    }
}

/// `prompt-response.output`: Codebuff's `lastMessage` output, with the turn's status and cost.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptOutput {
    /// Always `lastMessage`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The final answer: the text of the turn's last assistant message.
    pub value: String,
    /// `completed`.
    pub status: String,
    /// The turn's cost.
    pub cost: Cost,
    /// False when the agent never reported the turn's cost.
    pub cost_reported: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<String>,
}

/// The server action carrying one universal event of a subscribed topic:
/// `{"type":"action","data":{"type":"event","topic":…,"event":{…}}}`. `event_json` is the
/// event's stored JSON, embedded as is.
pub fn event_action(topic: &str, event_json: &str) -> String {
    let topic = serde_json::to_string(topic).unwrap_or_default();
    let mut out = String::with_capacity(event_json.len() + topic.len() + 64);
    out.push_str(r#"{"type":"action","data":{"type":"event","topic":"#);
    out.push_str(&topic);
    out.push_str(r#","event":"#);
    out.push_str(event_json);
    out.push_str("}}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn json_of(m: &ServerMessage) -> Value {
        serde_json::from_str(&m.to_text()).unwrap()
    }

    #[test]
    fn acks_carry_no_nulls() {
        assert_eq!(
            json_of(&ServerMessage::ack(Some(1))),
            json!({"type": "ack", "txid": 1, "success": true})
        );
        assert_eq!(
            json_of(&ServerMessage::nack(None, "invalid JSON: x")),
            json!({"type": "ack", "success": false, "error": "invalid JSON: x"})
        );
    }

    #[test]
    fn response_chunk_prompt_error_action_error_and_init_response_have_the_protocols_fields() {
        let action = |data| {
            json_of(&ServerMessage::Action {
                data: Box::new(data),
            })
        };
        assert_eq!(
            action(ServerAction::ResponseChunk {
                user_input_id: "p1".into(),
                chunk: "def fibonacci(n):\n".into()
            }),
            json!({"type": "action", "data": {"type": "response-chunk", "userInputId": "p1", "chunk": "def fibonacci(n):\n"}})
        );
        assert_eq!(
            action(ServerAction::PromptError {
                user_input_id: "p1".into(),
                message: "Backend unavailable".into(),
                error: Some("backend_error".into()),
                remaining_balance: Some(5.5),
                session_id: "s".into(),
            }),
            json!({"type": "action", "data": {"type": "prompt-error", "userInputId": "p1",
                "message": "Backend unavailable", "error": "backend_error", "remainingBalance": 5.5,
                "sessionId": "s"}})
        );
        // Without a budget the balance is absent, not null.
        assert_eq!(
            action(ServerAction::ActionError {
                message: "Authentication failed".into(),
                error: Some("invalid_request".into()),
                remaining_balance: None,
            }),
            json!({"type": "action", "data": {"type": "action-error", "message": "Authentication failed",
                "error": "invalid_request"}})
        );
        assert_eq!(
            action(ServerAction::InitResponse {
                message: Some("ready".into()),
                agent_names: None,
                usage: 2.5,
                remaining_balance: 2.5,
                next_quota_reset: None,
                session_id: "s".into(),
            }),
            json!({"type": "action", "data": {"type": "init-response", "message": "ready",
                "usage": 2.5, "remainingBalance": 2.5, "next_quota_reset": null, "sessionId": "s"}})
        );
    }

    #[test]
    fn prompt_response_has_the_protocols_tool_shapes_and_output() {
        let m = ServerMessage::Action {
            data: Box::new(ServerAction::PromptResponse {
                prompt_id: "p1".into(),
                session_state: json!({"sessionId": "s"}),
                tool_calls: vec![ToolCall::new("c1", "write_file", r#"{"path": "a"}"#)],
                tool_results: vec![ToolResult::new("c1", Some("write_file"), "ok")],
                output: PromptOutput {
                    kind: "lastMessage",
                    value: "hello".into(),
                    status: "completed".into(),
                    cost: Cost::from_credits(2.0),
                    cost_reported: true,
                    turn_id: None,
                },
            }),
        };
        assert_eq!(
            json_of(&m),
            json!({"type": "action", "data": {"type": "prompt-response", "promptId": "p1",
                "sessionState": {"sessionId": "s"},
                "toolCalls": [{"toolCallId": "c1", "toolName": "write_file", "input": {"path": "a"}}],
                "toolResults": [{"type": "tool-result", "toolCallId": "c1", "toolName": "write_file",
                    "output": [{"type": "json", "value": "ok"}]}],
                "output": {"type": "lastMessage", "value": "hello", "status": "completed",
                    "cost": {"credits": 2.0, "usd": 0.02}, "costReported": true}}})
        );
    }

    #[test]
    fn question_and_permission_actions_are_camel_case() {
        let q = json_of(&ServerMessage::Action {
            data: Box::new(ServerAction::Question {
                user_input_id: "p".into(),
                session_id: "s".into(),
                question_id: "q".into(),
                prompt: "Which?".into(),
                options: vec!["a".into()],
                questions: vec![json!({"question": "Which?"})],
            }),
        });
        assert_eq!(
            q["data"],
            json!({"type": "question", "userInputId": "p", "sessionId": "s", "questionId": "q",
                "prompt": "Which?", "options": ["a"], "questions": [{"question": "Which?"}]})
        );
        let p = json_of(&ServerMessage::Action {
            data: Box::new(ServerAction::Permission {
                user_input_id: "p".into(),
                session_id: "s".into(),
                permission_id: "perm".into(),
                tool_name: "write_file".into(),
                metadata: None,
            }),
        });
        assert_eq!(
            p["data"],
            json!({"type": "permission", "userInputId": "p", "sessionId": "s",
                "permissionId": "perm", "toolName": "write_file", "metadata": null})
        );
    }

    #[test]
    fn event_actions_embed_the_stored_event() {
        let text = event_action("s\"1", r#"{"sequence":3,"type":"turn.started"}"#);
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            v,
            json!({"type": "action", "data": {"type": "event", "topic": "s\"1",
                "event": {"sequence": 3, "type": "turn.started"}}})
        );
    }
}
