//! The event envelope and the union of all 13 event types.
//!
//! The envelope is serialized by hand so its keys come in the spec's order and `raw` can be
//! left out (as `null`) when the client did not ask for it, without copying the event.

use std::sync::Arc;

use serde::de::Error as _;
use serde::ser::SerializeStruct;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;

use super::data::{
    AgentUnparsedData, ErrorData, ItemDeltaData, ItemEventData, PermissionData, QuestionData,
    SessionEndedData, SessionStartedData, TurnData,
};
use super::text::EventText;

/// One recorded event: the envelope of `docs/universal-events.md` §1 around an [`EventData`].
#[derive(Debug, Clone, PartialEq)]
pub struct UniversalEvent {
    /// Per session, dense, from 1 (`event_id` is `"evt_" + sequence`).
    pub sequence: u64,
    /// RFC 3339 UTC with sub-second precision (shared by the events of one agent line).
    pub time: Arc<str>,
    pub session_id: Arc<str>,
    /// The agent's conversation id once known (shared by the events of a session).
    pub native_session_id: Option<Arc<str>>,
    /// True when the daemon made the event up (`source` is then `daemon`).
    pub synthetic: bool,
    pub data: EventData,
    /// The agent line the event came from; served only when the client asks for it.
    pub raw: Option<RawLine>,
}

/// Who produced an event: `daemon` iff the event is synthetic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum EventSource {
    Agent,
    Daemon,
}

/// An event before the session has given it a place in its log: what converters produce.
#[derive(Debug, Clone, PartialEq)]
pub struct EventDraft {
    pub data: EventData,
    pub synthetic: bool,
    pub raw: Option<RawLine>,
}

impl EventDraft {
    /// An event the daemon made up (lifecycle events, synthesized deltas, forced completions).
    pub fn synthetic(data: EventData) -> Self {
        EventDraft {
            data,
            synthetic: true,
            raw: None,
        }
    }

    /// An event converted from an agent line.
    pub fn from_agent(data: EventData, raw: Option<RawLine>) -> Self {
        EventDraft {
            data,
            synthetic: false,
            raw,
        }
    }
}

/// The agent's original line: parsed JSON kept verbatim, or the text of a non-JSON line.
#[derive(Debug, Clone, PartialEq)]
pub enum RawLine {
    /// A JSON value's text, without the whitespace around it. Always valid JSON: made by
    /// [`RawLine::json_or_text`], or from a line that was just parsed whole (the agent's
    /// lines, kept as read: neither parsed a second time nor copied, a slice of the buffer
    /// the line was read into).
    Json(EventText),
    Text(String),
}

/// The whitespace JSON allows around a value.
const JSON_SPACE: [char; 4] = [' ', '\t', '\n', '\r'];

impl RawLine {
    /// `text` as JSON if it is one JSON value, else as text.
    pub fn json_or_text(text: String) -> RawLine {
        if serde_json::from_str::<&RawValue>(&text).is_ok() {
            RawLine::parsed(text.into())
        } else {
            RawLine::Text(text)
        }
    }

    /// `text`, which the caller has parsed whole as JSON, kept as JSON (sharing its buffer).
    pub(crate) fn parsed(text: EventText) -> RawLine {
        let value = text.trim_matches(JSON_SPACE);
        if value.len() == text.len() {
            RawLine::Json(text)
        } else {
            RawLine::Json(text.slice_ref(value))
        }
    }
}

impl Serialize for RawLine {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            // Checked once more here only: the stored and served forms are written as text.
            RawLine::Json(json) => serde_json::from_str::<&RawValue>(json.as_str())
                .map_err(serde::ser::Error::custom)?
                .serialize(serializer),
            RawLine::Text(text) => serializer.serialize_str(text),
        }
    }
}

/// The type and `data` of an event: one variant per type of `docs/universal-events.md` §2.
///
/// The payloads of the events a turn has only a few of (turns, sessions, errors, permissions,
/// questions) are boxed: an enum is as large as its largest variant, and the item events a
/// stream is made of (88 bytes at most) paid for a 192-byte turn in every draft; a session's
/// actor holds up to a batch of drafts at a time (`session/turn.rs`).
#[derive(Debug, Clone, PartialEq)]
pub enum EventData {
    /// The session was created (always event 1, always synthetic).
    SessionStarted(Box<SessionStartedData>),
    /// The session is over: terminated, or the agent failed fatally.
    SessionEnded(Box<SessionEndedData>),
    /// A message began a turn (synthetic, before the user item).
    TurnStarted(Box<TurnData>),
    /// The turn is over: from the agent's `finish`, or from the daemon when the run did not finish.
    TurnEnded(Box<TurnData>),
    /// An item opened (it may then get deltas).
    ItemStarted(ItemEventData),
    /// A piece of streamed content of an open item.
    ItemDelta(ItemDeltaData),
    /// An item closed with its final content and status.
    ItemCompleted(ItemEventData),
    /// The agent reported an error; the turn goes on unless the run then fails.
    Error(Box<ErrorData>),
    /// The agent asks permission to act.
    PermissionRequested(Box<PermissionData>),
    /// A permission request was answered.
    PermissionResolved(Box<PermissionData>),
    /// The agent asks the user a question (Codebuff's `ask_user`).
    QuestionRequested(Box<QuestionData>),
    /// A question was answered or rejected (exactly once per request).
    QuestionResolved(Box<QuestionData>),
    /// An agent line that could not be understood; the line is the event's `raw`.
    AgentUnparsed(AgentUnparsedData),
}

/// The wire name of every event type, in `docs/universal-events.md` §2 order.
pub const EVENT_TYPES: [&str; 13] = [
    "session.started",
    "session.ended",
    "turn.started",
    "turn.ended",
    "item.started",
    "item.delta",
    "item.completed",
    "error",
    "permission.requested",
    "permission.resolved",
    "question.requested",
    "question.resolved",
    "agent.unparsed",
];

/// The static wire name equal to `name`, when it names an event type (for text read back
/// from a database).
pub fn known_event_type(name: &str) -> Option<&'static str> {
    EVENT_TYPES.iter().copied().find(|t| *t == name)
}

impl EventData {
    /// The wire name of this event's type.
    pub fn event_type(&self) -> &'static str {
        match self {
            EventData::SessionStarted(_) => "session.started",
            EventData::SessionEnded(_) => "session.ended",
            EventData::TurnStarted(_) => "turn.started",
            EventData::TurnEnded(_) => "turn.ended",
            EventData::ItemStarted(_) => "item.started",
            EventData::ItemDelta(_) => "item.delta",
            EventData::ItemCompleted(_) => "item.completed",
            EventData::Error(_) => "error",
            EventData::PermissionRequested(_) => "permission.requested",
            EventData::PermissionResolved(_) => "permission.resolved",
            EventData::QuestionRequested(_) => "question.requested",
            EventData::QuestionResolved(_) => "question.resolved",
            EventData::AgentUnparsed(_) => "agent.unparsed",
        }
    }

    /// The payload alone, serialized as the envelope's `data`.
    pub fn payload(&self) -> Payload<'_> {
        Payload(self)
    }

    /// Rebuilds the payload from its wire type name and `data` JSON.
    pub fn from_parts(event_type: &str, data: &str) -> Result<EventData, serde_json::Error> {
        use serde_json::from_str as p;
        Ok(match event_type {
            "session.started" => EventData::SessionStarted(p(data)?),
            "session.ended" => EventData::SessionEnded(p(data)?),
            "turn.started" => EventData::TurnStarted(p(data)?),
            "turn.ended" => EventData::TurnEnded(p(data)?),
            "item.started" => EventData::ItemStarted(p(data)?),
            "item.delta" => EventData::ItemDelta(p(data)?),
            "item.completed" => EventData::ItemCompleted(p(data)?),
            "error" => EventData::Error(p(data)?),
            "permission.requested" => EventData::PermissionRequested(p(data)?),
            "permission.resolved" => EventData::PermissionResolved(p(data)?),
            "question.requested" => EventData::QuestionRequested(p(data)?),
            "question.resolved" => EventData::QuestionResolved(p(data)?),
            "agent.unparsed" => EventData::AgentUnparsed(p(data)?),
            other => {
                return Err(serde_json::Error::custom(format!(
                    "unknown event type `{other}`"
                )))
            }
        })
    }
}

impl UniversalEvent {
    /// Places a draft in a session's log at `sequence`.
    pub fn from_draft(
        draft: EventDraft,
        sequence: u64,
        time: Arc<str>,
        session_id: Arc<str>,
        native_session_id: Option<Arc<str>>,
    ) -> Self {
        UniversalEvent {
            sequence,
            time,
            session_id,
            native_session_id,
            synthetic: draft.synthetic,
            data: draft.data,
            raw: draft.raw,
        }
    }

    /// `"evt_" + sequence`.
    pub fn event_id(&self) -> String {
        format!("evt_{}", self.sequence)
    }

    /// `daemon` iff synthetic.
    pub fn source(&self) -> EventSource {
        if self.synthetic {
            EventSource::Daemon
        } else {
            EventSource::Agent
        }
    }

    /// The event's wire type name.
    pub fn event_type(&self) -> &'static str {
        self.data.event_type()
    }

    /// A serializable view that writes `raw` only when `include_raw` (else `null`).
    pub fn view(&self, include_raw: bool) -> EventView<'_> {
        EventView {
            sequence: self.sequence,
            time: &self.time,
            session_id: &self.session_id,
            native_session_id: self.native_session_id.as_deref(),
            synthetic: self.synthetic,
            data: &self.data,
            raw: if include_raw { self.raw.as_ref() } else { None },
        }
    }

    /// Compact JSON, as served over HTTP and SSE.
    pub fn to_json(&self, include_raw: bool) -> String {
        // Serializing plain data into a String cannot fail.
        serde_json::to_string(&self.view(include_raw)).unwrap_or_default()
    }
}

/// A borrowed envelope serialization, `raw` written only when the reader asked for it (else
/// `null`). The log's own copy is written by [`super::envelope`], byte for byte the same.
pub struct EventView<'a> {
    sequence: u64,
    time: &'a str,
    session_id: &'a str,
    native_session_id: Option<&'a str>,
    synthetic: bool,
    data: &'a EventData,
    raw: Option<&'a RawLine>,
}

impl Serialize for EventView<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let source = if self.synthetic {
            EventSource::Daemon
        } else {
            EventSource::Agent
        };
        let mut st = serializer.serialize_struct("UniversalEvent", 10)?;
        st.serialize_field("event_id", &EventId(self.sequence))?;
        st.serialize_field("sequence", &self.sequence)?;
        st.serialize_field("time", self.time)?;
        st.serialize_field("session_id", self.session_id)?;
        st.serialize_field("native_session_id", &self.native_session_id)?;
        st.serialize_field("synthetic", &self.synthetic)?;
        st.serialize_field("source", &source)?;
        st.serialize_field("type", self.data.event_type())?;
        st.serialize_field("data", &self.data.payload())?;
        st.serialize_field("raw", &self.raw)?;
        st.end()
    }
}

/// [`EventData::payload`]: the variant's own struct, serialized as it is in the envelope.
pub struct Payload<'a>(&'a EventData);

impl Serialize for Payload<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            EventData::SessionStarted(d) => d.serialize(serializer),
            EventData::SessionEnded(d) => d.serialize(serializer),
            EventData::TurnStarted(d) | EventData::TurnEnded(d) => d.serialize(serializer),
            EventData::ItemStarted(d) | EventData::ItemCompleted(d) => d.serialize(serializer),
            EventData::ItemDelta(d) => d.serialize(serializer),
            EventData::Error(d) => d.serialize(serializer),
            EventData::PermissionRequested(d) | EventData::PermissionResolved(d) => {
                d.serialize(serializer)
            }
            EventData::QuestionRequested(d) | EventData::QuestionResolved(d) => {
                d.serialize(serializer)
            }
            EventData::AgentUnparsed(d) => d.serialize(serializer),
        }
    }
}

/// Writes `evt_N` without allocating.
struct EventId(u64);

impl Serialize for EventId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&format_args!("evt_{}", self.0))
    }
}

impl Serialize for UniversalEvent {
    /// Serializes with `raw` included (storage and `--include-raw`).
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.view(true).serialize(serializer)
    }
}

#[derive(Deserialize)]
struct WireEvent {
    sequence: u64,
    time: Arc<str>,
    session_id: Arc<str>,
    native_session_id: Option<Arc<str>>,
    synthetic: bool,
    #[serde(rename = "type")]
    event_type: String,
    data: Box<RawValue>,
    raw: Option<Box<RawValue>>,
}

impl<'de> Deserialize<'de> for UniversalEvent {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let w = WireEvent::deserialize(deserializer)?;
        let data = EventData::from_parts(&w.event_type, w.data.get()).map_err(D::Error::custom)?;
        let raw = w
            .raw
            .filter(|r| r.get() != "null")
            .map(|r| RawLine::Json(Box::<str>::from(r).into_string().into()));
        Ok(UniversalEvent {
            sequence: w.sequence,
            time: w.time,
            session_id: w.session_id,
            native_session_id: w.native_session_id,
            synthetic: w.synthetic,
            data,
            raw,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_draft_is_no_larger_than_an_item_event_needs() {
        let item = std::mem::size_of::<ItemEventData>().max(std::mem::size_of::<ItemDeltaData>());
        // The item payload, the variant's tag, the raw line (a slice of the agent's read
        // buffer) and the synthetic flag.
        let raw = std::mem::size_of::<Option<RawLine>>();
        assert!(raw <= 40, "a raw line is {raw} bytes");
        assert!(
            std::mem::size_of::<EventDraft>() <= item + 16 + raw,
            "an EventDraft is {} bytes, its largest item payload {item}",
            std::mem::size_of::<EventDraft>()
        );
    }
}
