//! What a client sends over `/v1/ws` (`docs/ws.md`): the messages of the Codebuff WebSocket
//! protocol with their exact field names, and the parser that turns a text frame into one of
//! them or into the error text its `ack` carries. Pure: no I/O, tested on plain strings.
//!
//! Every message is a JSON object with a `type` and (optionally) an integer `txid`, echoed by
//! the `ack`. `action` messages carry a `data` object whose own `type` says which action.
//! Unknown fields are ignored; wrong types of known fields are errors.

use serde::Deserialize;
use serde_json::{Map, Value};

/// A client message, parsed.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientMessage {
    /// `identify {txid, clientSessionId}`: the connection's session from now on.
    Identify {
        txid: Option<i64>,
        client_session_id: String,
    },
    /// `ping {txid}`: a heartbeat.
    Ping { txid: Option<i64> },
    /// `subscribe {txid, topics}`: follow these sessions' events.
    Subscribe {
        txid: Option<i64>,
        topics: Vec<Topic>,
    },
    /// `unsubscribe {txid, topics}`: stop following them.
    Unsubscribe {
        txid: Option<i64>,
        topics: Vec<Topic>,
    },
    /// `action {txid, data}`.
    Action {
        txid: Option<i64>,
        action: ClientAction,
    },
}

/// The `data` of an `action` message.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientAction {
    /// `prompt`: run a turn.
    Prompt(Box<PromptAction>),
    /// `init`: make sure the session exists and report its usage.
    Init(Box<InitAction>),
    /// **(ours)** `answer`: answer a question the agent asked.
    Answer(AnswerAction),
    /// `cancel-user-input` (the protocol's, from `@codebuff/sdk`), or **(ours)** `cancel`:
    /// stop the running prompt.
    Cancel(CancelAction),
    /// **(ours)** `permission-reply`: allow or refuse a tool the agent wants to run.
    PermissionReply(PermissionReplyAction),
    /// An action of an older generation of the protocol (the `codebuff` CLI 1.0's
    /// `user-input`, `usage`, …): answered with an `action-error` naming the generation served.
    Unsupported { kind: String },
}

/// The `prompt` action (field names as the protocol spells them).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptAction {
    pub prompt_id: String,
    #[serde(default)]
    pub prompt: Option<String>,
    /// Structured content: `text` parts (`{"type":"text","text":…}`) are joined by newlines.
    #[serde(default)]
    pub content: Option<Vec<Value>>,
    #[serde(default)]
    pub prompt_params: Option<Value>,
    #[serde(default)]
    pub fingerprint_id: Option<String>,
    /// A Codebuff credential: becomes the `apiKey` of a codebuff session this prompt creates.
    #[serde(default)]
    pub auth_token: Option<String>,
    /// `free`, `normal`, `max`, `ask`, `plan`, …: the agent mode of this and later turns.
    #[serde(default)]
    pub cost_mode: Option<String>,
    /// The `sessionState` of an earlier `prompt-response`: its `sessionId` picks the session.
    #[serde(default)]
    pub session_state: Option<Map<String, Value>>,
    /// Results of client-side tools: codebuffd runs tools itself, so they are not used.
    #[serde(default)]
    pub tool_results: Option<Vec<Value>>,
    /// The model of a session this prompt creates.
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub repo_url: Option<String>,
    /// `codebuff` or `mock` picks the agent of a session this prompt creates.
    #[serde(default)]
    pub agent_id: Option<String>,
    /// **(ours)** The session to run in (before `sessionState` and `identify`).
    #[serde(default)]
    pub session_id: Option<String>,
    /// **(ours)** The extension actions this prompt's client takes: `question` (then it
    /// answers them; else the door declines an unanswered question after its question
    /// timeout) and `permission`.
    #[serde(default)]
    pub extensions: Vec<String>,
}

impl PromptAction {
    /// The text of the turn: `prompt`, else the `text` parts of `content` joined by newlines.
    pub fn text(&self) -> String {
        if let Some(p) = self.prompt.as_deref().filter(|p| !p.trim().is_empty()) {
            return p.to_owned();
        }
        self.content
            .iter()
            .flatten()
            .filter_map(|part| part.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The session `sessionState` names, if it names one: its `sessionId`, else its
    /// `mainAgentState.runId` (see [`super::state`]).
    pub fn state_session(&self) -> Option<&str> {
        super::state::named_session(self.session_state.as_ref()?)
    }

    /// True when the client takes extension action `name` (`question`, `permission`).
    pub fn takes(&self, name: &str) -> bool {
        self.extensions.iter().any(|e| e == name)
    }

    /// Checks what serde cannot: a text to send, and content made of text parts.
    fn check(&self) -> Result<(), String> {
        for (i, part) in self.content.iter().flatten().enumerate() {
            let kind = part.get("type").and_then(Value::as_str);
            let text = part.get("text").and_then(Value::as_str);
            match (kind, text) {
                (Some("text"), Some(_)) => {}
                (Some("text"), None) => {
                    return Err(format!(
                        "content part {i} is `text` without a string `text`"
                    ))
                }
                (Some(other), _) => {
                    return Err(format!(
                        "content part {i} has type `{other}`; only `text` parts are supported"
                    ))
                }
                (None, _) => return Err(format!("content part {i} has no `type`")),
            }
        }
        if self.prompt_id.is_empty() {
            return Err("`promptId` must not be empty".into());
        }
        if let Some(other) = self
            .extensions
            .iter()
            .find(|e| !EXTENSIONS.contains(&e.as_str()))
        {
            return Err(format!(
                "unknown extension `{other}`; expected `question` or `permission`"
            ));
        }
        if self.text().trim().is_empty() {
            return Err("a prompt needs a non-empty `prompt` or text `content`".into());
        }
        Ok(())
    }
}

/// The `init` action.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InitAction {
    #[serde(default)]
    pub fingerprint_id: Option<String>,
    /// A Codebuff credential: becomes the `apiKey` of a codebuff session this creates.
    #[serde(default)]
    pub auth_token: Option<String>,
    /// The project's files: the agent reads the working directory itself, so not used.
    #[serde(default)]
    pub file_context: Option<Value>,
    #[serde(default)]
    pub repo_url: Option<String>,
    /// **(ours)** The session to initialise (before `identify`).
    #[serde(default)]
    pub session_id: Option<String>,
}

/// **(ours)** The `answer` action: one list of answers per question of the request.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AnswerAction {
    pub question_id: String,
    pub answers: Vec<Vec<String>>,
    /// The question's session; default: where this connection saw the question, else the
    /// connection's session.
    #[serde(default)]
    pub session_id: Option<String>,
}

/// The `cancel-user-input` action (`{promptId, authToken}`; the token is not needed: the
/// connection was authenticated at its upgrade), or **(ours)** `cancel`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CancelAction {
    /// The prompt to stop (its session's running turn).
    #[serde(default)]
    pub prompt_id: Option<String>,
    /// The session whose running turn to stop.
    #[serde(default)]
    pub session_id: Option<String>,
}

/// **(ours)** The `permission-reply` action.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PermissionReplyAction {
    pub permission_id: String,
    /// `once`, `always` or `reject`.
    pub reply: String,
    #[serde(default)]
    pub session_id: Option<String>,
}

/// A subscription topic: `<session id>`, `<session id>@<sequence>` or `*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topic {
    /// The topic's name without the sequence: a session id, or `*`.
    pub name: String,
    /// Replay the events after this sequence first (`id@sequence`); none = live from now.
    pub after: Option<u64>,
}

impl Topic {
    /// Parses a topic. The part after the last `@` is a sequence when it is a number; an
    /// empty one (`id@`) just ends the id (for ids that themselves end in `@<digits>`).
    pub fn parse(topic: &str) -> Result<Topic, String> {
        let (name, after) = match topic.rsplit_once('@') {
            Some((name, "")) => (name, None),
            Some((name, seq)) if seq.bytes().all(|b| b.is_ascii_digit()) => {
                let after = seq
                    .parse::<u64>()
                    .map_err(|_| format!("topic `{topic}`: the sequence is too large"))?;
                (name, Some(after))
            }
            _ => (topic, None),
        };
        if name.is_empty() {
            return Err(format!("topic `{topic}` names no session"));
        }
        if name == "*" && after.is_some() {
            return Err("`*` follows every session live; it takes no sequence".into());
        }
        Ok(Topic {
            name: name.to_owned(),
            after,
        })
    }

    /// True for `*`.
    pub fn is_all(&self) -> bool {
        self.name == "*"
    }
}

/// Why a frame is not a message we take; `message` is what the `ack` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// The frame's `txid`, when it had a usable one.
    pub txid: Option<i64>,
    pub message: String,
}

/// The message types a client may send.
const MESSAGE_TYPES: &str = "identify, ping, subscribe, unsubscribe, action";
/// The action types a client may send.
const ACTION_TYPES: &str = "prompt, init, cancel-user-input, answer, cancel, permission-reply";
/// The extension actions a prompt may ask for.
const EXTENSIONS: [&str; 2] = ["question", "permission"];
/// Actions of the protocol's older generation only (the `codebuff` CLI 1.0.x, e.g. 1.0.115:
/// its `CLIENT_ACTION_SCHEMA` less what `@codebuff/sdk` 0.3 also sends), not served.
const OLDER_GENERATION: [&str; 6] = [
    "user-input",
    "usage",
    "login-code-request",
    "login-status-request",
    "clear-auth-token",
    "generate-commit-message",
];

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct IdentifyFields {
    client_session_id: String,
}

#[derive(Deserialize)]
struct TopicFields {
    topics: Vec<String>,
}

/// Parses one text frame.
pub fn parse(text: &str) -> Result<ClientMessage, ParseError> {
    let value: Value = serde_json::from_str(text).map_err(|e| ParseError {
        txid: None,
        message: format!("invalid JSON: {e}"),
    })?;
    let Value::Object(mut object) = value else {
        return Err(ParseError {
            txid: None,
            message: "a message must be a JSON object".into(),
        });
    };
    let txid = match object.get("txid") {
        None | Some(Value::Null) => None,
        Some(v) => Some(v.as_i64().ok_or_else(|| ParseError {
            txid: None,
            message: format!("`txid` must be an integer, got {v}"),
        })?),
    };
    let fail = |message: String| ParseError { txid, message };
    let kind = match object.get("type") {
        None | Some(Value::Null) => return Err(fail("missing `type`".into())),
        Some(Value::String(kind)) => kind.clone(),
        Some(other) => return Err(fail(format!("`type` must be a string, got {other}"))),
    };
    let fields = |object: Map<String, Value>| Value::Object(object);
    match kind.as_str() {
        "identify" => {
            let f: IdentifyFields = serde_json::from_value(fields(object))
                .map_err(|e| fail(format!("bad `identify` message: {e}")))?;
            if f.client_session_id.is_empty() {
                return Err(fail("`clientSessionId` must not be empty".into()));
            }
            Ok(ClientMessage::Identify {
                txid,
                client_session_id: f.client_session_id,
            })
        }
        "ping" => Ok(ClientMessage::Ping { txid }),
        "subscribe" | "unsubscribe" => {
            let f: TopicFields = serde_json::from_value(fields(object))
                .map_err(|e| fail(format!("bad `{kind}` message: {e}")))?;
            if f.topics.is_empty() {
                return Err(fail(format!("`{kind}` needs at least one topic")));
            }
            let topics = f
                .topics
                .iter()
                .map(|t| Topic::parse(t))
                .collect::<Result<Vec<_>, _>>()
                .map_err(&fail)?;
            Ok(if kind == "subscribe" {
                ClientMessage::Subscribe { txid, topics }
            } else {
                ClientMessage::Unsubscribe { txid, topics }
            })
        }
        "action" => {
            let data = match object.remove("data") {
                Some(Value::Object(data)) => data,
                None | Some(Value::Null) => {
                    return Err(fail("an `action` message needs a `data` object".into()))
                }
                Some(other) => return Err(fail(format!("`data` must be an object, got {other}"))),
            };
            let action = parse_action(data).map_err(fail)?;
            Ok(ClientMessage::Action { txid, action })
        }
        other => Err(fail(format!(
            "unknown message type `{other}`; expected one of {MESSAGE_TYPES}"
        ))),
    }
}

/// Parses the `data` of an `action` message.
fn parse_action(data: Map<String, Value>) -> Result<ClientAction, String> {
    let kind = match data.get("type") {
        Some(Value::String(kind)) => kind.clone(),
        None | Some(Value::Null) => return Err("missing `data.type`".into()),
        Some(other) => return Err(format!("`data.type` must be a string, got {other}")),
    };
    fn typed<T: serde::de::DeserializeOwned>(
        kind: &str,
        data: Map<String, Value>,
    ) -> Result<T, String> {
        serde_json::from_value(Value::Object(data)).map_err(|e| format!("bad `{kind}` action: {e}"))
    }
    match kind.as_str() {
        "prompt" => {
            let prompt: PromptAction = typed(&kind, data)?;
            prompt
                .check()
                .map_err(|e| format!("bad `prompt` action: {e}"))?;
            Ok(ClientAction::Prompt(Box::new(prompt)))
        }
        "init" => Ok(ClientAction::Init(Box::new(typed(&kind, data)?))),
        "answer" => Ok(ClientAction::Answer(typed(&kind, data)?)),
        "cancel" | "cancel-user-input" => Ok(ClientAction::Cancel(typed(&kind, data)?)),
        old if OLDER_GENERATION.contains(&old) => Ok(ClientAction::Unsupported { kind }),
        "permission-reply" => {
            let reply: PermissionReplyAction = typed(&kind, data)?;
            if !matches!(reply.reply.as_str(), "once" | "always" | "reject") {
                return Err(format!(
                    "bad `permission-reply` action: `reply` must be `once`, `always` or `reject`, got `{}`",
                    reply.reply
                ));
            }
            Ok(ClientAction::PermissionReply(reply))
        }
        other => Err(format!(
            "unknown action type `{other}`; expected one of {ACTION_TYPES}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(text: &str) -> ClientMessage {
        parse(text).unwrap_or_else(|e| panic!("{text}: {}", e.message))
    }

    fn err(text: &str) -> ParseError {
        parse(text).expect_err(text)
    }

    #[test]
    fn the_seeds_identify_and_ping() {
        assert_eq!(
            ok(r#"{"type": "identify", "txid": 1, "clientSessionId": "session-abc123"}"#),
            ClientMessage::Identify {
                txid: Some(1),
                client_session_id: "session-abc123".into()
            }
        );
        assert_eq!(
            ok(r#"{"type": "ping", "txid": 42}"#),
            ClientMessage::Ping { txid: Some(42) }
        );
        assert_eq!(
            ok(r#"{"type": "ping"}"#),
            ClientMessage::Ping { txid: None }
        );
    }

    #[test]
    fn the_seeds_subscribe_and_unsubscribe() {
        let ClientMessage::Subscribe { txid, topics } =
            ok(r#"{"type": "subscribe", "txid": 5, "topics": ["updates", "s1@12", "*"]}"#)
        else {
            panic!("not a subscribe")
        };
        assert_eq!(txid, Some(5));
        assert_eq!(
            topics,
            vec![
                Topic {
                    name: "updates".into(),
                    after: None
                },
                Topic {
                    name: "s1".into(),
                    after: Some(12)
                },
                Topic {
                    name: "*".into(),
                    after: None
                },
            ]
        );
        assert!(matches!(
            ok(r#"{"type": "unsubscribe", "txid": 6, "topics": ["updates"]}"#),
            ClientMessage::Unsubscribe { txid: Some(6), topics } if topics[0].name == "updates"
        ));
    }

    #[test]
    fn the_seeds_prompt_action_with_every_field() {
        let msg = ok(r#"{
          "type": "action", "txid": 10,
          "data": {
            "type": "prompt", "promptId": "prompt-xyz789",
            "prompt": "Write a Python function to calculate fibonacci numbers",
            "content": null, "promptParams": {"x": 1}, "fingerprintId": "client-abc",
            "authToken": null, "costMode": "normal", "sessionState": {}, "toolResults": [],
            "model": "gpt-4", "repoUrl": "https://github.com/user/repo", "agentId": "mock"
          }}"#);
        let ClientMessage::Action {
            txid: Some(10),
            action: ClientAction::Prompt(p),
        } = msg
        else {
            panic!("not a prompt: {msg:?}")
        };
        assert_eq!(p.prompt_id, "prompt-xyz789");
        assert_eq!(
            p.text(),
            "Write a Python function to calculate fibonacci numbers"
        );
        assert_eq!(p.fingerprint_id.as_deref(), Some("client-abc"));
        assert_eq!(p.cost_mode.as_deref(), Some("normal"));
        assert_eq!(p.model.as_deref(), Some("gpt-4"));
        assert_eq!(p.repo_url.as_deref(), Some("https://github.com/user/repo"));
        assert_eq!(p.agent_id.as_deref(), Some("mock"));
        assert_eq!(p.prompt_params, Some(serde_json::json!({"x": 1})));
        assert_eq!(p.tool_results, Some(vec![]));
        assert_eq!(p.state_session(), None);
    }

    #[test]
    fn content_text_parts_make_the_prompt_and_session_state_names_the_session() {
        let msg = ok(
            r#"{"type":"action","txid":3,"data":{"type":"prompt","promptId":"p",
            "content":[{"type":"text","text":"one"},{"type":"text","text":"two"}],
            "sessionState":{"sessionId":"s-9","messages":[]}}}"#,
        );
        let ClientMessage::Action {
            action: ClientAction::Prompt(p),
            ..
        } = msg
        else {
            panic!("not a prompt")
        };
        assert_eq!(p.text(), "one\ntwo");
        assert_eq!(p.state_session(), Some("s-9"));
    }

    #[test]
    fn the_seeds_init_action() {
        let msg = ok(r#"{"type": "action", "txid": 15, "data": {"type": "init",
            "fingerprintId": "client-abc", "authToken": null,
            "fileContext": {"files": [{"path": "main.py", "content": "def main(): pass"}]},
            "repoUrl": "https://github.com/user/repo"}}"#);
        let ClientMessage::Action {
            txid: Some(15),
            action: ClientAction::Init(init),
        } = msg
        else {
            panic!("not an init")
        };
        assert_eq!(init.fingerprint_id.as_deref(), Some("client-abc"));
        assert_eq!(
            init.repo_url.as_deref(),
            Some("https://github.com/user/repo")
        );
        assert!(init.file_context.is_some());
    }

    #[test]
    fn our_answer_cancel_and_permission_reply_actions() {
        assert_eq!(
            ok(
                r#"{"type":"action","txid":7,"data":{"type":"answer","questionId":"q1","answers":[["vitest"],["unit","e2e"]]}}"#
            ),
            ClientMessage::Action {
                txid: Some(7),
                action: ClientAction::Answer(AnswerAction {
                    question_id: "q1".into(),
                    answers: vec![vec!["vitest".into()], vec!["unit".into(), "e2e".into()]],
                    session_id: None,
                })
            }
        );
        assert_eq!(
            ok(r#"{"type":"action","txid":8,"data":{"type":"cancel","promptId":"p1"}}"#),
            ClientMessage::Action {
                txid: Some(8),
                action: ClientAction::Cancel(CancelAction {
                    prompt_id: Some("p1".into()),
                    session_id: None
                })
            }
        );
        assert_eq!(
            ok(
                r#"{"type":"action","txid":9,"data":{"type":"cancel-user-input","authToken":"k","promptId":"p2"}}"#
            ),
            ClientMessage::Action {
                txid: Some(9),
                action: ClientAction::Cancel(CancelAction {
                    prompt_id: Some("p2".into()),
                    session_id: None
                })
            }
        );
        assert!(matches!(
            ok(r#"{"type":"action","data":{"type":"permission-reply","permissionId":"perm-1","reply":"always","sessionId":"s"}}"#),
            ClientMessage::Action { txid: None, action: ClientAction::PermissionReply(r) }
                if r.permission_id == "perm-1" && r.reply == "always" && r.session_id.as_deref() == Some("s")
        ));
    }

    #[test]
    fn the_older_generations_user_input_is_taken_to_be_refused_by_name() {
        assert_eq!(
            ok(r#"{"type":"action","txid":4,"data":{"type":"user-input","prompt":"hi"}}"#),
            ClientMessage::Action {
                txid: Some(4),
                action: ClientAction::Unsupported {
                    kind: "user-input".into()
                }
            }
        );
        assert!(matches!(
            ok(r#"{"type":"action","data":{"type":"generate-commit-message","stagedChanges":""}}"#),
            ClientMessage::Action { action: ClientAction::Unsupported { kind }, .. } if kind == "generate-commit-message"
        ));
    }

    #[test]
    fn prompts_name_the_extensions_they_take() {
        let ClientMessage::Action {
            action: ClientAction::Prompt(p),
            ..
        } = ok(
            r#"{"type":"action","data":{"type":"prompt","promptId":"p","prompt":"x","extensions":["question"]}}"#,
        )
        else {
            panic!("not a prompt")
        };
        assert!(p.takes("question") && !p.takes("permission"));
        assert_eq!(
            err(r#"{"type":"action","data":{"type":"prompt","promptId":"p","prompt":"x","extensions":["telepathy"]}}"#).message,
            "bad `prompt` action: unknown extension `telepathy`; expected `question` or `permission`"
        );
        let state = ok(
            r#"{"type":"action","data":{"type":"prompt","promptId":"p","prompt":"x","sessionState":{"mainAgentState":{"runId":"s-4"}}}}"#,
        );
        assert!(
            matches!(state, ClientMessage::Action { action: ClientAction::Prompt(p), .. }
            if p.state_session() == Some("s-4"))
        );
    }

    #[test]
    fn invalid_json_has_no_txid_and_says_where() {
        let e = err(r#"{"type": "ping", "txid": 4"#);
        assert_eq!(e.txid, None);
        assert!(e.message.starts_with("invalid JSON: "), "{}", e.message);
        assert!(e.message.contains("line 1"), "{}", e.message);
        assert_eq!(err("[1,2]").message, "a message must be a JSON object");
    }

    #[test]
    fn a_missing_or_unknown_type_keeps_the_txid() {
        assert_eq!(
            err(r#"{"txid": 3}"#),
            ParseError {
                txid: Some(3),
                message: "missing `type`".into()
            }
        );
        let e = err(r#"{"type": "hello", "txid": 9}"#);
        assert_eq!(e.txid, Some(9));
        assert_eq!(
            e.message,
            "unknown message type `hello`; expected one of identify, ping, subscribe, unsubscribe, action"
        );
        let e = err(r#"{"type": 5, "txid": 9}"#);
        assert_eq!(e.message, "`type` must be a string, got 5");
        let e = err(r#"{"type":"action","txid":2,"data":{"type":"dance"}}"#);
        assert_eq!(
            (e.txid, e.message.as_str()),
            (
                Some(2),
                "unknown action type `dance`; expected one of prompt, init, cancel-user-input, answer, cancel, permission-reply"
            )
        );
    }

    #[test]
    fn bad_fields_say_which_with_the_parsers_words() {
        assert_eq!(
            err(r#"{"type":"identify","txid":1}"#).message,
            "bad `identify` message: missing field `clientSessionId`"
        );
        assert_eq!(
            err(r#"{"type":"identify","txid":1,"clientSessionId":7}"#).message,
            "bad `identify` message: invalid type: integer `7`, expected a string"
        );
        assert_eq!(
            err(r#"{"type":"ping","txid":"one"}"#),
            ParseError {
                txid: None,
                message: "`txid` must be an integer, got \"one\"".into()
            }
        );
        assert_eq!(
            err(r#"{"type":"subscribe","txid":1,"topics":"s1"}"#).message,
            "bad `subscribe` message: invalid type: string \"s1\", expected a sequence"
        );
        assert_eq!(
            err(r#"{"type":"subscribe","txid":1,"topics":[]}"#).message,
            "`subscribe` needs at least one topic"
        );
        assert_eq!(
            err(r#"{"type":"action","txid":1}"#).message,
            "an `action` message needs a `data` object"
        );
        assert_eq!(
            err(r#"{"type":"action","txid":1,"data":{}}"#).message,
            "missing `data.type`"
        );
        assert_eq!(
            err(r#"{"type":"action","txid":1,"data":{"type":"prompt","prompt":"hi"}}"#).message,
            "bad `prompt` action: missing field `promptId`"
        );
        assert_eq!(
            err(r#"{"type":"action","txid":1,"data":{"type":"prompt","promptId":"p"}}"#).message,
            "bad `prompt` action: a prompt needs a non-empty `prompt` or text `content`"
        );
        assert_eq!(
            err(r#"{"type":"action","txid":1,"data":{"type":"prompt","promptId":"p","content":[{"type":"image","image":"…"}]}}"#).message,
            "bad `prompt` action: content part 0 has type `image`; only `text` parts are supported"
        );
        assert_eq!(
            err(r#"{"type":"action","txid":1,"data":{"type":"prompt","promptId":"p","prompt":"x","sessionState":[]}}"#).message,
            "bad `prompt` action: invalid type: sequence, expected a map"
        );
        assert_eq!(
            err(r#"{"type":"action","txid":1,"data":{"type":"answer","questionId":"q","answers":["a"]}}"#).message,
            "bad `answer` action: invalid type: string \"a\", expected a sequence"
        );
        assert_eq!(
            err(r#"{"type":"action","data":{"type":"permission-reply","permissionId":"p","reply":"yes"}}"#).message,
            "bad `permission-reply` action: `reply` must be `once`, `always` or `reject`, got `yes`"
        );
    }

    #[test]
    fn topics_carry_an_optional_sequence() {
        assert_eq!(
            Topic::parse("a@b@3"),
            Ok(Topic {
                name: "a@b".into(),
                after: Some(3)
            })
        );
        assert_eq!(
            Topic::parse("user@example"),
            Ok(Topic {
                name: "user@example".into(),
                after: None
            })
        );
        assert_eq!(
            Topic::parse("s@12@"),
            Ok(Topic {
                name: "s@12".into(),
                after: None
            })
        );
        assert!(Topic::parse("@4").is_err());
        assert!(Topic::parse("*@4").is_err());
        assert!(Topic::parse("s@99999999999999999999999").is_err());
        assert!(Topic::parse("*").is_ok_and(|t| t.is_all()));
    }
}
