//! Reading one line of an agent command's output into a [`PrintModeEvent`]: one pass when
//! `type` is the line's first key (as every known producer writes it), else the object buffered
//! once and re-read; a line that is not an event says why ([`ParseError`]).

use serde::de::{IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

use super::*;

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
