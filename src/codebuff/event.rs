//! `PrintModeEvent`: one line of a Codebuff agent command's output (`docs/codebuff-events.md` §1).
//!
//! Known types are parsed into typed structs (lenient about optional fields and legacy shapes);
//! fork types and unknown types are accepted and kept whole as [`OtherEvent`]. Fields a typed
//! struct does not name are not lost: the converter keeps every line verbatim as the event's `raw`.

use serde::de::{IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// Types added by the Openbuff fork; recorded as `status` items labelled with the type.
pub const FORK_TYPES: &[&str] = &[
    "provider_status",
    "tool_start",
    "phase",
    "context_window",
    "context_compaction",
    "context_compaction_start",
    "context_compaction_end",
    "memory_reuse",
    "job_update",
];

/// One Codebuff event, by `type`.
///
/// Each line's event is moved several times between parsing and conversion, so the events a
/// turn has few of are boxed: the enum is as large as a streamed delta (profile of a flood:
/// copying a 240-byte enum was a quarter of parsing a line).
#[derive(Debug, Clone)]
pub enum PrintModeEvent {
    /// Once per run, first. `sessionId` is our shim's extension (the id for `--continue`).
    Start(Box<StartEvent>),
    /// A consolidated segment of assistant text.
    Text(TextEvent),
    /// (ours) A streamed chunk of assistant text preceding the `text` segment.
    TextDelta(TextEvent),
    /// A tool invocation.
    ToolCall(Box<ToolCallEvent>),
    /// A tool's result.
    ToolResult(Box<ToolResultEvent>),
    /// Partial tool output (seed-listed; in no known Codebuff version).
    ToolProgress(Box<ToolProgressEvent>),
    /// A subagent began.
    SubagentStart(Box<SubagentEvent>),
    /// A subagent ended.
    SubagentFinish(Box<SubagentEvent>),
    /// A chunk of model reasoning.
    ReasoningDelta(ReasoningDeltaEvent),
    /// An error; most are not fatal.
    Error(Box<ErrorEvent>),
    /// The run is over; carries its cost in credits.
    Finish(Box<FinishEvent>),
    /// Legacy launcher download progress.
    Download(Box<DownloadEvent>),
    /// (ours) The agent asks before a tool that changes files or runs code.
    PermissionRequest(Box<PermissionRequestEvent>),
    /// (ours) The run's cost so far, in credits, as it grows.
    Cost(CostEvent),
    /// A fork type ([`FORK_TYPES`]) or a type nobody knows: kept whole.
    Other(Box<OtherEvent>),
}

/// Fields of `start`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StartEvent {
    pub agent_id: Option<String>,
    pub message_history_length: Option<u64>,
    pub session_id: Option<String>,
    pub model: Option<String>,
}

/// Fields of `text` and `text_delta`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TextEvent {
    pub text: String,
    pub agent_id: Option<String>,
}

/// Fields of `tool_call` (legacy streams call `input` `args`). `input` is kept as the agent
/// wrote it: it becomes the item's `arguments` text unchanged, and is parsed only for the tools
/// whose input the daemon reads (file tools, `ask_user`).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallEvent {
    pub tool_call_id: String,
    pub tool_name: String,
    #[serde(default, alias = "args")]
    pub input: Option<Box<RawValue>>,
    pub agent_id: Option<String>,
    pub parent_agent_id: Option<String>,
    pub include_tool_call: Option<bool>,
}

/// Fields of `tool_result`: `output` is `ToolResultOutput[]`; legacy streams send `result` text.
/// Both are kept as written (the item's `output` text) and parsed only when needed.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolResultEvent {
    pub tool_call_id: String,
    pub tool_name: Option<String>,
    pub output: Option<Box<RawValue>>,
    pub result: Option<Box<RawValue>>,
    pub agent_id: Option<String>,
    pub parent_agent_id: Option<String>,
}

/// Fields of `tool_progress`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolProgressEvent {
    pub tool_call_id: String,
    pub tool_name: Option<String>,
    #[serde(default)]
    pub output: Value,
    pub agent_id: Option<String>,
    pub parent_agent_id: Option<String>,
}

/// Fields of `subagent_start` and `subagent_finish`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubagentEvent {
    pub agent_id: String,
    pub agent_type: Option<String>,
    pub display_name: Option<String>,
    pub only_child: Option<bool>,
    pub parent_agent_id: Option<String>,
    pub params: Option<Value>,
    pub prompt: Option<String>,
    pub model: Option<String>,
}

/// Fields of `reasoning_delta`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReasoningDeltaEvent {
    pub text: String,
    pub run_id: Option<String>,
    #[serde(default)]
    pub ancestor_run_ids: Vec<String>,
    pub agent_id: Option<String>,
}

/// Fields of `error`; `code`, `statusCode` and `fatal` are the agent command's extensions on
/// failed runs (`docs/agent-command.md` §2.1).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorEvent {
    pub message: String,
    pub source: Option<String>,
    pub code: Option<String>,
    pub status_code: Option<Value>,
    /// True on the one error that ends a failed run.
    #[serde(default)]
    pub fatal: bool,
}

/// Fields of `finish`: `totalCost` is this run's cost in credits.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FinishEvent {
    pub agent_id: Option<String>,
    pub total_cost: Option<f64>,
}

/// Fields of `permission_request` (`docs/agent-command.md` §5).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PermissionRequestEvent {
    pub request_id: String,
    pub tool_call_id: Option<String>,
    pub tool_name: String,
    pub kind: Option<String>,
    pub title: Option<String>,
    pub command: Option<String>,
    #[serde(default)]
    pub paths: Vec<String>,
    #[serde(default)]
    pub input: Value,
}

/// Fields of `cost`: the run's cost so far.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CostEvent {
    pub total_cost: f64,
}

/// Fields of `download`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DownloadEvent {
    pub version: Option<String>,
    pub status: Option<String>,
}

/// A fork or unknown event, kept whole (including its `type`).
#[derive(Debug, Clone, PartialEq)]
pub struct OtherEvent {
    pub event_type: String,
    pub fields: Map<String, Value>,
}

impl OtherEvent {
    /// True for the Openbuff fork's types.
    pub fn is_fork_type(&self) -> bool {
        FORK_TYPES.contains(&self.event_type.as_str())
    }
}

/// Why a line is not a `PrintModeEvent`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ParseError {
    #[error("not JSON: {0}")]
    NotJson(String),
    #[error("JSON without a string `type`")]
    NoType,
    #[error("invalid `{event_type}` event: {message}")]
    BadShape { event_type: String, message: String },
}

impl PrintModeEvent {
    /// Parses one line (without its terminator).
    ///
    /// Single pass when `type` is the first key, as every known producer writes it; otherwise the
    /// object is buffered once and re-read.
    pub fn parse(line: &str) -> Result<PrintModeEvent, ParseError> {
        let mut de = serde_json::Deserializer::from_str(line);
        let parsed = de.deserialize_any(EventVisitor);
        let parsed = parsed.and_then(|p| de.end().map(|()| p));
        match parsed {
            Ok(Parsed::Event(event)) => Ok(event),
            Ok(Parsed::NoType) => Err(ParseError::NoType),
            Ok(Parsed::Buffered(fields)) => from_map(fields),
            Err(err) => Err(classify_error(line, err)),
        }
    }

    /// The event's `type` as written on the wire.
    pub fn event_type(&self) -> &str {
        match self {
            PrintModeEvent::Start(_) => "start",
            PrintModeEvent::Text(_) => "text",
            PrintModeEvent::TextDelta(_) => "text_delta",
            PrintModeEvent::ToolCall(_) => "tool_call",
            PrintModeEvent::ToolResult(_) => "tool_result",
            PrintModeEvent::ToolProgress(_) => "tool_progress",
            PrintModeEvent::SubagentStart(_) => "subagent_start",
            PrintModeEvent::SubagentFinish(_) => "subagent_finish",
            PrintModeEvent::ReasoningDelta(_) => "reasoning_delta",
            PrintModeEvent::Error(_) => "error",
            PrintModeEvent::Finish(_) => "finish",
            PrintModeEvent::Download(_) => "download",
            PrintModeEvent::PermissionRequest(_) => "permission_request",
            PrintModeEvent::Cost(_) => "cost",
            PrintModeEvent::Other(o) => &o.event_type,
        }
    }
}

/// A typed shape failure is carried out of serde as this marker prefix so it can be told apart
/// from a syntax error.
const SHAPE_MARKER: &str = "\u{0}shape:";

enum Parsed {
    Event(PrintModeEvent),
    NoType,
    Buffered(Map<String, Value>),
}

struct EventVisitor;

impl<'de> Visitor<'de> for EventVisitor {
    type Value = Parsed;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Parsed, A::Error> {
        // A `Cow` key would always be owned (serde's `Cow` never borrows): `Key` borrows it.
        let Some(Key(first)) = map.next_key::<Key<'de>>()? else {
            return Ok(Parsed::NoType);
        };
        if first == "type" {
            // Borrowed from the line unless it holds an escape: no allocation per line.
            let ty: TypeValue<'de> = map.next_value()?;
            let TypeValue::Name(ty) = ty else {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                return Ok(Parsed::NoType);
            };
            let rest = serde::de::value::MapAccessDeserializer::new(map);
            return typed(&ty, rest).map(Parsed::Event);
        }
        // `type` is not first: buffer the object and decide afterwards.
        let mut fields = Map::new();
        let value: Value = map.next_value()?;
        fields.insert(first.into_owned(), value);
        while let Some((k, v)) = map.next_entry::<String, Value>()? {
            fields.insert(k, v);
        }
        Ok(Parsed::Buffered(fields))
    }

    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Parsed, E> {
        Ok(Parsed::NoType)
    }
    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Parsed, E> {
        Ok(Parsed::NoType)
    }
    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Parsed, E> {
        Ok(Parsed::NoType)
    }
    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Parsed, E> {
        Ok(Parsed::NoType)
    }
    fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Parsed, E> {
        Ok(Parsed::NoType)
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<Parsed, E> {
        Ok(Parsed::NoType)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Parsed, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Parsed::NoType)
    }
}

/// An object's key, borrowed from the line unless it holds an escape.
struct Key<'de>(std::borrow::Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a key")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Key(v.into()))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Key(v.to_owned().into()))
            }
            fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
                Ok(Key(v.into()))
            }
        }
        deserializer.deserialize_str(V)
    }
}

/// The value of a first `type` key: a name, or anything else (not an event).
enum TypeValue<'de> {
    Name(std::borrow::Cow<'de, str>),
    Other,
}

impl<'de> Deserialize<'de> for TypeValue<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = TypeValue<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(TypeValue::Name(v.into()))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(TypeValue::Name(v.to_owned().into()))
            }
            fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
                Ok(TypeValue::Name(v.into()))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
                Ok(TypeValue::Other)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
                Ok(TypeValue::Other)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
                Ok(TypeValue::Other)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
                Ok(TypeValue::Other)
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(TypeValue::Other)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Self::Value, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(TypeValue::Other)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(TypeValue::Other)
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// Deserializes the rest of an object whose `type` is `ty` into the matching typed event.
fn typed<'de, D>(ty: &str, rest: D) -> Result<PrintModeEvent, D::Error>
where
    D: Deserializer<'de>,
{
    fn shape<T, E: serde::de::Error>(ty: &str, r: Result<T, E>) -> Result<T, E> {
        r.map_err(|e| E::custom(format!("{SHAPE_MARKER}{ty}:{e}")))
    }
    Ok(match ty {
        "start" => PrintModeEvent::Start(Box::new(shape(ty, StartEvent::deserialize(rest))?)),
        "text" => PrintModeEvent::Text(shape(ty, TextEvent::deserialize(rest))?),
        "text_delta" => PrintModeEvent::TextDelta(shape(ty, TextEvent::deserialize(rest))?),
        "tool_call" => {
            PrintModeEvent::ToolCall(Box::new(shape(ty, ToolCallEvent::deserialize(rest))?))
        }
        "tool_result" => {
            PrintModeEvent::ToolResult(Box::new(shape(ty, ToolResultEvent::deserialize(rest))?))
        }
        "tool_progress" => {
            PrintModeEvent::ToolProgress(Box::new(shape(ty, ToolProgressEvent::deserialize(rest))?))
        }
        "subagent_start" => {
            PrintModeEvent::SubagentStart(Box::new(shape(ty, SubagentEvent::deserialize(rest))?))
        }
        "subagent_finish" => {
            PrintModeEvent::SubagentFinish(Box::new(shape(ty, SubagentEvent::deserialize(rest))?))
        }
        "reasoning_delta" => {
            PrintModeEvent::ReasoningDelta(shape(ty, ReasoningDeltaEvent::deserialize(rest))?)
        }
        "error" => PrintModeEvent::Error(Box::new(shape(ty, ErrorEvent::deserialize(rest))?)),
        "finish" => PrintModeEvent::Finish(Box::new(shape(ty, FinishEvent::deserialize(rest))?)),
        "download" => {
            PrintModeEvent::Download(Box::new(shape(ty, DownloadEvent::deserialize(rest))?))
        }
        "permission_request" => PrintModeEvent::PermissionRequest(Box::new(shape(
            ty,
            PermissionRequestEvent::deserialize(rest),
        )?)),
        "cost" => PrintModeEvent::Cost(shape(ty, CostEvent::deserialize(rest))?),
        other => {
            let mut fields = Map::new();
            fields.insert("type".to_owned(), Value::String(other.to_owned()));
            let rest: Map<String, Value> = Map::deserialize(rest)?;
            fields.extend(rest);
            PrintModeEvent::Other(Box::new(OtherEvent {
                event_type: other.to_owned(),
                fields,
            }))
        }
    })
}

/// The slow path: an object whose `type` was not its first key.
fn from_map(mut fields: Map<String, Value>) -> Result<PrintModeEvent, ParseError> {
    let Some(Value::String(ty)) = fields.get("type").cloned() else {
        return Err(ParseError::NoType);
    };
    if !is_known(&ty) {
        return Ok(PrintModeEvent::Other(Box::new(OtherEvent {
            event_type: ty,
            fields,
        })));
    }
    fields.remove("type");
    typed(&ty, Value::Object(fields)).map_err(|e| shape_error(&ty, e.to_string()))
}

fn is_known(ty: &str) -> bool {
    matches!(
        ty,
        "start"
            | "text"
            | "text_delta"
            | "tool_call"
            | "tool_result"
            | "tool_progress"
            | "subagent_start"
            | "subagent_finish"
            | "reasoning_delta"
            | "error"
            | "finish"
            | "download"
            | "permission_request"
            | "cost"
    )
}

fn classify_error(_line: &str, err: serde_json::Error) -> ParseError {
    let msg = err.to_string();
    match msg.find(SHAPE_MARKER) {
        Some(at) => {
            let rest = &msg[at + SHAPE_MARKER.len()..];
            let (ty, message) = rest.split_once(':').unwrap_or(("?", rest));
            shape_error(ty, message.to_owned())
        }
        None => ParseError::NotJson(msg),
    }
}

fn shape_error(ty: &str, message: String) -> ParseError {
    let message = match message.find(SHAPE_MARKER) {
        Some(at) => message[at + SHAPE_MARKER.len()..]
            .split_once(':')
            .map(|(_, m)| m.to_owned())
            .unwrap_or(message),
        None => message,
    };
    ParseError::BadShape {
        event_type: ty.to_owned(),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_is_no_larger_than_a_streamed_delta() {
        let delta = std::mem::size_of::<ReasoningDeltaEvent>();
        assert!(std::mem::size_of::<PrintModeEvent>() <= delta + 8);
    }

    #[test]
    fn parses_known_types_with_type_first() {
        let e = PrintModeEvent::parse(r#"{"type":"text","text":"hi","agentId":"a1"}"#).unwrap();
        let PrintModeEvent::Text(t) = e else {
            panic!("not text")
        };
        assert_eq!(
            t,
            TextEvent {
                text: "hi".into(),
                agent_id: Some("a1".into())
            }
        );
    }

    #[test]
    fn parses_known_types_with_type_later() {
        let e = PrintModeEvent::parse(r#"{"totalCost":3.5,"type":"finish"}"#).unwrap();
        let PrintModeEvent::Finish(f) = e else {
            panic!("not finish")
        };
        assert_eq!(
            *f,
            FinishEvent {
                agent_id: None,
                total_cost: Some(3.5)
            }
        );
        let e = PrintModeEvent::parse(
            r#"{"toolCallId":"c","type":"tool_result","output":[{"type":"json","value":1}]}"#,
        )
        .unwrap();
        let PrintModeEvent::ToolResult(r) = e else {
            panic!("not a result")
        };
        assert_eq!(r.output.unwrap().get(), r#"[{"type":"json","value":1}]"#);
    }

    #[test]
    fn legacy_tool_call_args_are_input() {
        let e = PrintModeEvent::parse(
            r#"{"type":"tool_call","toolCallId":"c","toolName":"read_files","args":{"paths":["a"]}}"#,
        )
        .unwrap();
        let PrintModeEvent::ToolCall(call) = e else {
            panic!("not a tool call")
        };
        assert_eq!(call.input.unwrap().get(), r#"{"paths":["a"]}"#);
    }

    #[test]
    fn unknown_types_are_kept_whole() {
        let e = PrintModeEvent::parse(r#"{"type":"phase","phase":"plan","n":1}"#).unwrap();
        let PrintModeEvent::Other(o) = e else {
            panic!("not other")
        };
        assert!(o.is_fork_type());
        assert_eq!(o.fields["type"], "phase");
        assert_eq!(o.fields["n"], 1);
    }

    #[test]
    fn errors_are_classified() {
        let err = |line: &str| PrintModeEvent::parse(line).err();
        assert!(matches!(err("hello"), Some(ParseError::NotJson(_))));
        assert_eq!(err(r#"{"text":"x"}"#), Some(ParseError::NoType));
        assert_eq!(err(r#"{"type":7}"#), Some(ParseError::NoType));
        assert_eq!(err("[1,2]"), Some(ParseError::NoType));
        assert!(matches!(
            err(r#"{"type":"text"}"#),
            Some(ParseError::BadShape { event_type, .. }) if event_type == "text"
        ));
        assert!(matches!(
            err(r#"{"type":"text","text":"a"} x"#),
            Some(ParseError::NotJson(_))
        ));
    }
}
