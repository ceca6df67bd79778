//! An event as the log holds it: serialized once when appended and served as text from then
//! on, so neither a reader nor a database round trip ever decodes an event to serve it.
//!
//! Only restart recovery needs the event itself ([`StoredEvent::decode`]).

use std::borrow::Cow;
use std::cell::RefCell;
use std::sync::{Arc, LazyLock};

use memchr::memmem::Finder;

use serde_json::value::RawValue;

use super::StoreError;
use crate::universal::{
    layout, Envelope, EventData, EventDraft, EventText, EventView, RawLine, TextBlocks,
    UniversalEvent,
};

/// The end of an event's JSON without its raw line (`raw` is the envelope's last key).
const NO_RAW_END: &str = "null}";

/// What [`StoredEvent::stamp_all`] keeps of a draft beside its text: its sequence, type and
/// raw line.
type StampHead = (u64, &'static str, Option<RawLine>);

thread_local! {
    /// The serialization buffer of [`StoredEvent::stamp_all`]: one per thread, kept between
    /// calls (an appender stamps a batch per agent read, the converter bench one per line).
    static STAMPED: RefCell<TextBlocks<StampHead>> = RefCell::default();
}

/// An event as stored: its sequence and type, its compact JSON without `raw`, and the raw
/// agent line apart (served only to readers that ask for it).
///
/// Cheap to clone (the texts are shared): the tail, the writer and every reader hold the same
/// event. Its JSON shares one allocation with the events appended (or read) with it
/// ([`EventText`]).
#[derive(Debug, Clone)]
pub struct StoredEvent {
    pub sequence: u64,
    pub event_type: &'static str,
    /// Compact JSON with `"raw":null` as its last member; never holds a line break.
    pub json: EventText,
    pub raw: Option<StoredRaw>,
}

/// The raw agent line of a stored event.
#[derive(Debug, Clone)]
pub enum StoredRaw {
    /// As the converter made it, shared by the events of one agent line.
    Line(RawLine),
    /// As read back from a database: JSON text (a line that was not JSON is a JSON string).
    Json(EventText),
}

impl StoredRaw {
    /// The raw line as JSON text.
    pub fn json(&self) -> Cow<'_, str> {
        match self {
            StoredRaw::Line(line) => match line {
                RawLine::Json(json) => json.as_str().into(),
                // Serializing a string cannot fail.
                RawLine::Text(text) => serde_json::to_string(text).unwrap_or_default().into(),
            },
            StoredRaw::Json(json) => (&**json).into(),
        }
    }

    /// True for a line that was not JSON (stored as a JSON string).
    pub fn is_text(&self) -> bool {
        match self {
            StoredRaw::Line(line) => matches!(line, RawLine::Text(_)),
            StoredRaw::Json(json) => json.starts_with('"'),
        }
    }

    fn to_line(&self) -> Result<RawLine, StoreError> {
        let json = match self {
            StoredRaw::Line(line) => return Ok(line.clone()),
            StoredRaw::Json(json) => json,
        };
        let invalid = |e: serde_json::Error| invalid(format!("a raw line: {e}"));
        Ok(if json.starts_with('"') {
            RawLine::Text(serde_json::from_str(json).map_err(invalid)?)
        } else {
            serde_json::from_str::<&RawValue>(json).map_err(invalid)?;
            RawLine::Json(json.clone())
        })
    }
}

impl StoredEvent {
    /// Serializes an event into `buf` (reused between events, so no buffer grows per event)
    /// and keeps the text at its exact size.
    pub fn from_event(event: UniversalEvent, buf: &mut Vec<u8>) -> Self {
        StoredEvent {
            sequence: event.sequence,
            event_type: event.event_type(),
            json: serialize(&event.view(false), buf),
            raw: event.raw.map(StoredRaw::Line),
        }
    }

    /// Serializes an event.
    pub fn new(event: UniversalEvent) -> Self {
        Self::from_event(event, &mut Vec::new())
    }

    /// Turns drafts into the events at sequences `first..`, stamped with the append's time,
    /// session and native session id: the one way events are made (by every store, and by
    /// `codebuffd convert`).
    pub fn stamp_all(
        drafts: &mut Vec<EventDraft>,
        first: u64,
        time: &Arc<str>,
        session_id: &Arc<str>,
        native_session_id: Option<&str>,
    ) -> Vec<StoredEvent> {
        // Written from the drafts as they are: the events themselves are never built.
        let envelope = Envelope::new(time, session_id, native_session_id);
        STAMPED.with_borrow_mut(|blocks| {
            for (draft, sequence) in drafts.drain(..).zip(first..) {
                envelope.write(blocks.buf(), sequence, &draft);
                blocks.end_text((sequence, draft.data.event_type(), draft.raw));
            }
            blocks
                .share()
                .map(|((sequence, event_type, raw), json)| StoredEvent {
                    sequence,
                    event_type,
                    // Compact JSON escapes every line break: the text is one line.
                    json,
                    raw: raw.map(StoredRaw::Line),
                })
                .collect()
        })
    }

    /// The event's JSON as a reader asked for it: with `raw` only when `include_raw`.
    pub fn json(&self, include_raw: bool) -> Cow<'_, str> {
        match (&self.raw, include_raw) {
            (Some(raw), true) => {
                let head = self.json.strip_suffix(NO_RAW_END).unwrap_or(&self.json);
                let raw = raw.json();
                let mut out = String::with_capacity(head.len() + raw.len() + 1);
                out.push_str(head);
                out.push_str(&raw);
                out.push('}');
                out.into()
            }
            _ => (&*self.json).into(),
        }
    }

    /// The event itself, raw line included (restart recovery; tests).
    pub fn decode(&self) -> Result<UniversalEvent, StoreError> {
        let mut event: UniversalEvent = serde_json::from_str(&self.json)
            .map_err(|e| invalid(format!("event {}: {e}", self.sequence)))?;
        event.raw = self.raw.as_ref().map(StoredRaw::to_line).transpose()?;
        Ok(event)
    }

    /// The event's payload, parsing only its `data` (found by [`StoredEvent::data_json`],
    /// else by parsing the envelope): what a reader that projects events needs.
    pub fn decode_data(&self) -> Result<EventData, serde_json::Error> {
        #[derive(serde::Deserialize)]
        struct DataOnly<'a> {
            #[serde(borrow)]
            data: &'a RawValue,
        }
        if let Some(data) = self.data_json() {
            return EventData::from_parts(self.event_type, data);
        }
        let envelope: DataOnly<'_> = serde_json::from_str(&self.json)?;
        EventData::from_parts(self.event_type, envelope.data.get())
    }

    /// An event read back from a database: its JSON must be one this daemon wrote for
    /// `sequence` (checked cheaply: its `event_id`, and a known type).
    pub fn from_stored(sequence: u64, json: &str, raw: Option<&str>) -> Result<Self, StoreError> {
        Ok(StoredEvent {
            sequence,
            event_type: Self::checked_type(sequence, json)?,
            json: json.into(),
            raw: raw.map(|raw| StoredRaw::Json(raw.into())),
        })
    }

    /// The type of an event's JSON read back from a database, checked as
    /// [`StoredEvent::from_stored`] checks it.
    pub fn checked_type(sequence: u64, json: &str) -> Result<&'static str, StoreError> {
        stored_type(json)
            .filter(|_| event_id_is(json, sequence))
            .ok_or_else(|| invalid(format!("event {sequence} is not an event this log wrote")))
    }

    /// The text of the envelope's `data`, found without parsing the envelope: it follows the
    /// envelope's own `,"type":"<type>","data":` (the first `,"type":"`, as [`stored_type`]
    /// explains) and ends where the stored text's closing `,"raw":null}` begins. `None` when
    /// the text is not laid out so; the caller then parses it whole. Readers that project
    /// every event (the ACP door) spend most of a decode skipping the envelope otherwise.
    pub fn data_json(&self) -> Option<&str> {
        let at = after_type_key(&self.json)?;
        let rest = self.json[at..]
            .strip_prefix(self.event_type)?
            .strip_prefix(layout::DATA)?;
        rest.strip_suffix(layout::NO_RAW)
    }

    /// True for the events that end a turn or the session (committed with a sync).
    pub fn ends_something(&self) -> bool {
        matches!(self.event_type, "turn.ended" | "session.ended")
    }

    /// True for the events whose appender waits for their commit: those a session's status
    /// and its clients' answers follow. The session's start (its creator is answered after
    /// it, and reads the log or the session's `eventCount` next: both must already hold it);
    /// a turn's start and end (`running` and `idle` are shown once they are in the log, so an
    /// engine that dies after saying `running` leaves a turn a survivor ends as interrupted);
    /// a question or permission request (`awaiting_input`) and its resolution (the answer
    /// goes to the agent, and its sender is answered, only once the log holds it); the
    /// session's end. Only the ends are synced ([`StoredEvent::ends_something`]).
    pub fn awaits_commit(&self) -> bool {
        matches!(
            self.event_type,
            "session.started"
                | "turn.started"
                | "question.requested"
                | "question.resolved"
                | "permission.requested"
                | "permission.resolved"
        ) || self.ends_something()
    }

    /// True for the event after which a session's log gets no more appends.
    pub fn ends_session(&self) -> bool {
        self.event_type == "session.ended"
    }
}

/// An envelope's compact JSON at its exact size, through `buf` (reused between events, so no
/// buffer grows per event).
fn serialize(view: &EventView<'_>, buf: &mut Vec<u8>) -> EventText {
    buf.clear();
    // Serializing plain data into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *buf, view);
    // serde_json writes UTF-8; checked anyway (faster than a lossy conversion).
    match std::str::from_utf8(buf) {
        Ok(text) => text.into(),
        Err(_) => String::from_utf8_lossy(buf).as_ref().into(),
    }
}

fn invalid(what: String) -> StoreError {
    StoreError::Backend(format!("a stored event is not valid: {what}"))
}

/// The key before the envelope's type.
const TYPE_KEY: &str = ",\"type\":\"";

/// Where the envelope's type begins: after its first `,"type":"`, which is the envelope's own
/// because the envelope writes `type` before `data`, and a quote inside a JSON string is
/// always escaped. Every event read back from a database is searched so (and again by
/// [`StoredEvent::data_json`] for the ACP door), so the searcher is built once: `str::find`
/// built one per call, 2.5 % of the daemon's CPU in a 20-session flood with readers behind
/// (perf).
fn after_type_key(json: &str) -> Option<usize> {
    static FINDER: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(TYPE_KEY));
    // The key is ASCII, so the index after it is a character boundary.
    FINDER.find(json.as_bytes()).map(|at| at + TYPE_KEY.len())
}

/// The envelope's `type` (see [`after_type_key`]).
fn stored_type(json: &str) -> Option<&'static str> {
    let start = after_type_key(json)?;
    let len = json[start..].find('"')?;
    crate::universal::known_event_type(&json[start..start + len])
}

/// True when the JSON starts with `{"event_id":"evt_<sequence>"`.
fn event_id_is(json: &str, sequence: u64) -> bool {
    json.strip_prefix(layout::EVENT_ID)
        .and_then(|rest| rest.split_once('"'))
        .is_some_and(|(n, _)| n.parse() == Ok(sequence))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::universal::{EventData, EventDraft, ItemDeltaData};

    fn event(sequence: u64, raw: Option<RawLine>) -> UniversalEvent {
        let mut draft = EventDraft::synthetic(EventData::ItemDelta(ItemDeltaData {
            item_id: "itm_1".into(),
            native_item_id: None,
            delta: "a \"type\":\"turn.ended\" b\nc".into(),
        }));
        draft.raw = raw;
        UniversalEvent::from_draft(draft, sequence, "t".into(), "ses".into(), None)
    }

    #[test]
    fn json_with_and_without_raw_matches_a_full_serialization() {
        for raw in [
            None,
            Some(RawLine::Json(r#"{"type":"text","text":"x"}"#.into())),
            Some(RawLine::Text("not json \"at all\"".into())),
        ] {
            let e = event(7, raw);
            let stored = StoredEvent::new(e.clone());
            assert_eq!(stored.json(false), e.to_json(false));
            assert_eq!(stored.json(true), e.to_json(true));
            assert_eq!(stored.sequence, 7);
            assert_eq!(stored.event_type, "item.delta");
            assert_eq!(stored.decode().unwrap(), e);
        }
    }

    #[test]
    fn an_event_read_back_keeps_its_type_raw_and_text() {
        let e = event(12, Some(RawLine::Text("plain".into())));
        let written = StoredEvent::new(e.clone());
        let raw = written.raw.as_ref().unwrap().json().into_owned();
        let read = StoredEvent::from_stored(12, &written.json, Some(&raw)).unwrap();
        assert_eq!(read.event_type, "item.delta");
        assert_eq!(read.json(true), e.to_json(true));
        assert!(read.raw.as_ref().unwrap().is_text());
        assert_eq!(read.decode().unwrap(), e);
    }

    #[test]
    fn data_json_is_the_envelopes_data_written_or_read_back() {
        for raw in [None, Some(RawLine::Text("plain".into()))] {
            let e = event(5, raw);
            let written = StoredEvent::new(e.clone());
            let read = StoredEvent::from_stored(5, &written.json, None).unwrap();
            for stored in [&written, &read] {
                let data: serde_json::Value =
                    serde_json::from_str(stored.data_json().unwrap()).unwrap();
                let whole: serde_json::Value = serde_json::from_str(&e.to_json(true)).unwrap();
                assert_eq!(data, whole["data"]);
                // The delta's own text holds `"type":"turn.ended"`: the envelope's is found.
                assert_eq!(data["delta"], "a \"type\":\"turn.ended\" b\nc");
            }
        }
        // Text laid out otherwise is left to a full parse.
        let mut odd = StoredEvent::new(event(6, None));
        odd.json = odd.json.replace(",\"raw\":null}", "}").into();
        assert_eq!(odd.data_json(), None);
    }

    #[test]
    fn what_a_status_follows_waits_for_its_commit_and_only_the_ends_sync() {
        for (event_type, awaits, syncs) in [
            ("session.started", true, false),
            ("turn.started", true, false),
            ("question.requested", true, false),
            ("question.resolved", true, false),
            ("permission.requested", true, false),
            ("permission.resolved", true, false),
            ("turn.ended", true, true),
            ("session.ended", true, true),
            ("item.started", false, false),
            ("item.delta", false, false),
            ("item.completed", false, false),
            ("error", false, false),
        ] {
            let mut stored = StoredEvent::new(event(1, None));
            stored.event_type = event_type;
            assert_eq!(
                (stored.awaits_commit(), stored.ends_something()),
                (awaits, syncs),
                "{event_type}"
            );
        }
    }

    #[test]
    fn json_of_another_sequence_or_no_event_is_refused() {
        let json = StoredEvent::new(event(3, None)).json;
        assert!(StoredEvent::from_stored(4, &json, None).is_err());
        assert!(StoredEvent::from_stored(3, "{}", None).is_err());
        assert!(StoredEvent::from_stored(3, &json, None).is_ok());
    }
}
