//! What the daemon sends over `/v1/ws` (`docs/ws.md`): `ack`, and `action` messages whose
//! `data` is one of the protocol's server actions (field names exactly as the Codebuff protocol
//! spells them, `next_quota_reset` included) or one of ours (`event`, `question`,
//! `permission`). Pure: serialization only.

use serde::Serialize;
use serde_json::Value;

use crate::universal::Cost;

/// A message to the client.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum ServerMessage {
    /// The answer to every client message: `success` false with the parser's `error` when it
    /// was not taken.
    Ack {
        txid: Option<i64>,
        success: bool,
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
        session_state: SessionState,
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
        error: Option<String>,
        /// Credits left of the session's budget; null without a budget.
        remaining_balance: Option<f64>,
        /// **(ours)** The session the prompt ran in.
        session_id: String,
    },
    /// The answer to `init`.
    InitResponse {
        message: Option<String>,
        #[serde(rename = "agentNames")]
        agent_names: Option<Value>,
        /// Credits the session has spent.
        usage: f64,
        /// Credits left of the session's budget; null without a budget.
        #[serde(rename = "remainingBalance")]
        remaining_balance: Option<f64>,
        next_quota_reset: Option<String>,
        /// **(ours)** The session.
        #[serde(rename = "sessionId")]
        session_id: String,
    },
    /// An action other than a prompt failed after its `ack`.
    #[serde(rename_all = "camelCase")]
    ActionError {
        message: String,
        error: Option<String>,
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

/// `prompt-response.sessionState`: what a client passes back in its next `prompt` to stay in
/// the session.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionState {
    pub session_id: String,
    pub agent: String,
    pub agent_mode: String,
    /// The turn's messages: the user's prompt, then each assistant message.
    pub messages: Vec<Message>,
    /// The session's cost so far.
    pub cost: Cost,
    /// Turns the session has run.
    pub turns: u64,
    /// Credits left of the session's budget; null without a budget.
    pub remaining_balance: Option<f64>,
}

/// One message of a turn.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Message {
    /// `user` or `assistant`.
    pub role: &'static str,
    pub content: String,
}

/// A tool call of a turn.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCall {
    pub tool_call_id: String,
    pub tool_name: String,
    /// The tool's input (JSON; a string when the agent's arguments were not JSON).
    pub input: Value,
}

/// A tool result of a turn.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolResult {
    pub tool_call_id: String,
    /// The name of the call it answers, when the turn holds it.
    pub tool_name: Option<String>,
    /// The result as the agent reported it (JSON text for structured results).
    pub output: String,
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
    fn acks_have_the_seeds_fields() {
        assert_eq!(
            json_of(&ServerMessage::ack(Some(1))),
            json!({"type": "ack", "txid": 1, "success": true, "error": null})
        );
        assert_eq!(
            json_of(&ServerMessage::nack(None, "invalid JSON: x")),
            json!({"type": "ack", "txid": null, "success": false, "error": "invalid JSON: x"})
        );
    }

    #[test]
    fn response_chunk_prompt_error_action_error_and_init_response_have_the_seeds_fields() {
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
        assert_eq!(
            action(ServerAction::ActionError {
                message: "Authentication failed".into(),
                error: Some("invalid_request".into()),
                remaining_balance: None,
            }),
            json!({"type": "action", "data": {"type": "action-error", "message": "Authentication failed",
                "error": "invalid_request", "remainingBalance": null}})
        );
        assert_eq!(
            action(ServerAction::InitResponse {
                message: Some("ready".into()),
                agent_names: None,
                usage: 2.5,
                remaining_balance: None,
                next_quota_reset: None,
                session_id: "s".into(),
            }),
            json!({"type": "action", "data": {"type": "init-response", "message": "ready",
                "agentNames": null, "usage": 2.5, "remainingBalance": null,
                "next_quota_reset": null, "sessionId": "s"}})
        );
    }

    #[test]
    fn prompt_response_has_the_seeds_fields_and_carries_session_and_cost() {
        let m = ServerMessage::Action {
            data: Box::new(ServerAction::PromptResponse {
                prompt_id: "p1".into(),
                session_state: SessionState {
                    session_id: "s".into(),
                    agent: "mock".into(),
                    agent_mode: "build".into(),
                    messages: vec![
                        Message {
                            role: "user",
                            content: "hi".into(),
                        },
                        Message {
                            role: "assistant",
                            content: "hello".into(),
                        },
                    ],
                    cost: Cost::from_credits(2.0),
                    turns: 1,
                    remaining_balance: None,
                },
                tool_calls: vec![ToolCall {
                    tool_call_id: "c1".into(),
                    tool_name: "write_file".into(),
                    input: json!({"path": "a"}),
                }],
                tool_results: vec![ToolResult {
                    tool_call_id: "c1".into(),
                    tool_name: Some("write_file".into()),
                    output: "ok".into(),
                }],
                output: PromptOutput {
                    kind: "lastMessage",
                    value: "hello".into(),
                    status: "completed".into(),
                    cost: Cost::from_credits(2.0),
                    cost_reported: true,
                    turn_id: Some("turn_1".into()),
                },
            }),
        };
        assert_eq!(
            json_of(&m),
            json!({"type": "action", "data": {"type": "prompt-response", "promptId": "p1",
                "sessionState": {"sessionId": "s", "agent": "mock", "agentMode": "build",
                    "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
                    "cost": {"credits": 2.0, "usd": 0.02}, "turns": 1, "remainingBalance": null},
                "toolCalls": [{"toolCallId": "c1", "toolName": "write_file", "input": {"path": "a"}}],
                "toolResults": [{"toolCallId": "c1", "toolName": "write_file", "output": "ok"}],
                "output": {"type": "lastMessage", "value": "hello", "status": "completed",
                    "cost": {"credits": 2.0, "usd": 0.02}, "costReported": true, "turnId": "turn_1"}}})
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
