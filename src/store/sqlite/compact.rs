//! The compact line form of an event in a SQLite chunk (schema 7): what the chunk row already
//! says is left out, and put back, byte for byte, when the line is read.
//!
//! Why: an item delta of ~20 bytes of text was ~310 bytes of envelope JSON, written twice to
//! the disk (the WAL, then the checkpoint), and the storage's writes were a third of the
//! daemon's CPU in a flood. Of an envelope (`universal/envelope.rs`, laid out as
//! `{"event_id":"evt_<n>","sequence":<n>,"time":<t>,"session_id":<s>,"native_session_id":<v>,
//! "synthetic":<b>,"source":<x>,"type":"<type>","data":<data>,"raw":null}`), the sequence is
//! the line's place in its chunk, the session is the chunk's, the native session id is
//! the chunk's `native` column and the source follows from `synthetic`. A compact line keeps the
//! rest, as a JSON array (so the chunk stays a JSON array and the view `events` can show it):
//!
//! `[<t>,<b>,"<type>",<data>]`
//!
//! with `<t>` and `<data>` the envelope's own text. An event whose text is not laid out so, or
//! whose native session id is not the chunk's, is stored whole (a line starting with `{`, as
//! schema 6 stored every event), so a chunk may mix the two and old chunks need no rewrite.

use crate::store::StoredEvent;
use crate::universal::layout::{
    BY_AGENT, BY_DAEMON, DATA, EVENT_ID, NATIVE, NO_RAW, SEQUENCE, SESSION, TIME,
};
use crate::universal::Digits;

/// What an event's text holds beyond what its chunk row says.
#[derive(Debug, PartialEq)]
pub(super) struct Parts<'a> {
    /// The `time` member's JSON string, quotes included.
    pub time: &'a str,
    /// The `native_session_id` member's JSON (`null` or a string).
    pub native: &'a str,
    pub synthetic: bool,
    pub event_type: &'static str,
    /// The `data` member's JSON.
    pub data: &'a str,
}

/// The parts of a stored event's text, when it is the envelope of its sequence and type in
/// the session whose id is the JSON string `session`; `None` for text laid out otherwise.
/// `previous`, the parts of the event before it, spares scanning a time and native session id
/// that repeat (an append stamps all its events with one time; a session's id rarely changes).
pub(super) fn parts<'a>(
    event: &'a StoredEvent,
    session: &str,
    previous: Option<&Parts<'a>>,
) -> Option<Parts<'a>> {
    let mut digits = Digits::default();
    let n = digits.of(event.sequence);
    let rest = event
        .json
        .strip_prefix(EVENT_ID)?
        .strip_prefix(n)?
        .strip_prefix(SEQUENCE)?
        .strip_prefix(n)?
        .strip_prefix(TIME)?;
    // A JSON string ends at its first unescaped quote: text that starts with a whole JSON
    // string holds that string, and what follows it is checked as usual.
    let (time, rest) = match previous.and_then(|p| Some((p.time, rest.strip_prefix(p.time)?))) {
        Some(repeated) => repeated,
        None => split_json_string(rest)?,
    };
    let rest = rest
        .strip_prefix(SESSION)?
        .strip_prefix(session)?
        .strip_prefix(NATIVE)?;
    let repeated = previous.and_then(|p| Some((p.native, rest.strip_prefix(p.native)?)));
    let (native, rest) = match (repeated, rest.strip_prefix("null")) {
        (Some(repeated), _) => repeated,
        (None, Some(rest)) => ("null", rest),
        (None, None) => split_json_string(rest)?,
    };
    let (synthetic, rest) = match rest.strip_prefix(BY_DAEMON) {
        Some(rest) => (true, rest),
        None => (false, rest.strip_prefix(BY_AGENT)?),
    };
    // The type is the event's own (a known one, as the reader requires).
    let data = rest
        .strip_prefix(event.event_type)?
        .strip_prefix(DATA)?
        .strip_suffix(NO_RAW)?;
    // Data that is something (the reader checks no more).
    (!data.is_empty()).then_some(Parts {
        time,
        native,
        synthetic,
        event_type: event.event_type,
        data,
    })
}

/// Appends the compact line of `parts` to `out`.
pub(super) fn write_line(out: &mut String, parts: &Parts<'_>) {
    out.push('[');
    out.push_str(parts.time);
    out.push_str(if parts.synthetic {
        ",true,\""
    } else {
        ",false,\""
    });
    out.push_str(parts.event_type);
    out.push_str("\",");
    out.push_str(parts.data);
    out.push(']');
}

/// Appends to `out` the event's text from its compact `line` at `sequence` in a chunk of the
/// session whose id is the JSON string `session`, with the chunk's `native` session id (JSON);
/// returns its type. `None` (and nothing appended) when the line is not a compact line.
pub(super) fn read_line(
    line: &str,
    sequence: u64,
    session: &str,
    native: &str,
    out: &mut Vec<u8>,
) -> Option<&'static str> {
    let (time, rest) = split_json_string(line.strip_prefix('[')?)?;
    let (synthetic, rest) = match rest.strip_prefix(",true,\"") {
        Some(rest) => (true, rest),
        None => (false, rest.strip_prefix(",false,\"")?),
    };
    let (event_type, rest) = rest.split_once('"')?;
    let event_type = crate::universal::known_event_type(event_type)?;
    let data = rest.strip_prefix(',')?.strip_suffix(']')?;
    if data.is_empty() {
        return None;
    }
    let mut digits = Digits::default();
    let n = digits.of(sequence);
    for piece in [
        EVENT_ID,
        n,
        SEQUENCE,
        n,
        TIME,
        time,
        SESSION,
        session,
        NATIVE,
        native,
        if synthetic { BY_DAEMON } else { BY_AGENT },
        event_type,
        DATA,
        data,
        NO_RAW,
    ] {
        out.extend_from_slice(piece.as_bytes());
    }
    Some(event_type)
}

/// The JSON string at the start of `text` (quotes included) and what follows it.
fn split_json_string(text: &str) -> Option<(&str, &str)> {
    let bytes = text.as_bytes();
    if bytes.first() != Some(&b'"') {
        return None;
    }
    let mut at = 1;
    while let Some(found) = memchr::memchr2(b'"', b'\\', &bytes[at..]) {
        at += found;
        if bytes[at] == b'"' {
            // ASCII: the split is at a character boundary.
            return Some(text.split_at(at + 1));
        }
        // A backslash escapes the byte after it.
        at += 2;
        if at >= bytes.len() {
            return None;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::universal::{json_string as session_json, sample_drafts as drafts};

    #[test]
    fn a_compact_line_reads_back_as_the_envelope_byte_for_byte() {
        for (time, session, native) in [
            ("2026-01-01T00:00:00.000000Z", "ses_1", None),
            ("t\"1\\", "s\\é\n\"", Some("nat\"ive")),
        ] {
            for first in [0u64, 1, 9, 10, 999, u64::MAX - 3] {
                let mut drafts = drafts();
                let time: Arc<str> = time.into();
                let id: Arc<str> = session.into();
                let stored = StoredEvent::stamp_all(&mut drafts, first, &time, &id, native);
                let session = session_json(session);
                for event in &stored {
                    let parts = parts(event, &session, None).unwrap();
                    assert_eq!(parts.event_type, event.event_type);
                    let mut line = String::new();
                    write_line(&mut line, &parts);
                    assert!(line.len() < event.json.len());
                    let value: serde_json::Value = serde_json::from_str(&line).unwrap();
                    assert_eq!(value[2], event.event_type, "{line}");
                    // Appended after what the buffer holds.
                    let mut buf = b"before".to_vec();
                    let event_type =
                        read_line(&line, event.sequence, &session, parts.native, &mut buf).unwrap();
                    assert_eq!(event_type, event.event_type);
                    assert_eq!(&buf[..6], b"before");
                    assert_eq!(std::str::from_utf8(&buf[6..]).unwrap(), &*event.json);
                }
            }
        }
    }

    #[test]
    fn text_laid_out_otherwise_has_no_parts() {
        let mut drafts = drafts();
        let stored = StoredEvent::stamp_all(&mut drafts, 5, &"t".into(), &"ses".into(), Some("n"));
        let json = &stored[0].json;
        // The first event (an item delta) with another text or sequence.
        let event = |json: &str, sequence| StoredEvent {
            sequence,
            json: json.into(),
            ..stored[0].clone()
        };
        let session = session_json("ses");
        assert!(parts(&event(json, 5), &session, None).is_some());
        // Another sequence or session, or text that is not the envelope.
        assert!(parts(&event(json, 6), &session, None).is_none());
        assert!(parts(&event(json, 50), &session, None).is_none());
        assert!(parts(&event(json, 5), &session_json("other"), None).is_none());
        let no_raw = json.replace(",\"raw\":null}", "}");
        assert!(parts(&event(&no_raw, 5), &session, None).is_none());
        let unknown = json.replace("item.delta", "item.unknown");
        assert!(parts(&event(&unknown, 5), &session, None).is_none());
        assert!(parts(&event("{}", 5), &session, None).is_none());
        assert!(parts(&event(&json[..json.len() - 1], 5), &session, None).is_none());
    }

    #[test]
    fn the_previous_events_parts_are_taken_only_where_they_repeat() {
        let stamp = |first, time: &str, native: Option<&str>| {
            let mut drafts = drafts();
            StoredEvent::stamp_all(&mut drafts, first, &time.into(), &"s".into(), native)
        };
        let session = session_json("s");
        let a = stamp(1, "t\"1", Some("n\"1"));
        let before = parts(&a[0], &session, None).unwrap();
        let same = parts(&a[1], &session, Some(&before)).unwrap();
        assert_eq!(same, parts(&a[1], &session, None).unwrap());
        for (time, native) in [
            ("t\"12", Some("n\"1")),
            ("t\"1", Some("n\"12")),
            ("t\"1", None),
        ] {
            let b = stamp(9, time, native);
            let hinted = parts(&b[0], &session, Some(&before)).unwrap();
            assert_eq!(hinted, parts(&b[0], &session, None).unwrap());
            assert_eq!(hinted.time, serde_json::to_string(time).unwrap());
        }
    }

    #[test]
    fn a_line_that_is_not_compact_is_refused() {
        let mut buf = Vec::new();
        for line in [
            "",
            "[",
            "[\"t\",true,\"item.delta\",]",
            "[\"t\",maybe,\"item.delta\",{}]",
            "[\"t\",true,\"no.such.type\",{}]",
            "[\"t,true,\"item.delta\",{}]",
            "{\"event_id\":\"evt_1\"}",
        ] {
            assert!(
                read_line(line, 1, "\"s\"", "null", &mut buf).is_none(),
                "{line}"
            );
            assert!(buf.is_empty(), "{line}");
        }
        assert!(read_line(
            "[\"t\",true,\"item.delta\",{}]",
            1,
            "\"s\"",
            "null",
            &mut buf
        )
        .is_some());
    }
}
