//! The event log's copy of an event, written by hand: the text every reader is served, made
//! once per event when it is appended (`store::StoredEvent::stamp_all`), so its cost is paid
//! for every event an agent prints.
//!
//! The envelope's keys and type names are constants and the values shared by one append's
//! events (time, session id, native session id) are escaped once per append ([`Envelope`]);
//! only `data` goes through serde. The result is byte for byte what serializing the event
//! ([`super::EventView`], `raw` left out) gives: the tests compare them.

use super::event::{EventData, EventDraft};

/// The envelope's text between its values, in order: written by [`Envelope::write`], and
/// found again by what reads stored events without parsing them (`store::StoredEvent`,
/// SQLite's compact lines, which take an envelope apart and put it back byte for byte).
pub mod layout {
    pub const EVENT_ID: &str = "{\"event_id\":\"evt_";
    pub const SEQUENCE: &str = "\",\"sequence\":";
    pub const TIME: &str = ",\"time\":";
    pub const SESSION: &str = ",\"session_id\":";
    pub const NATIVE: &str = ",\"native_session_id\":";
    /// Up to the type name, for a synthetic event (the daemon's)…
    pub const BY_DAEMON: &str = ",\"synthetic\":true,\"source\":\"daemon\",\"type\":\"";
    /// …and for the agent's.
    pub const BY_AGENT: &str = ",\"synthetic\":false,\"source\":\"agent\",\"type\":\"";
    pub const DATA: &str = "\",\"data\":";
    /// The end: `raw` is left out of the stored text (served apart).
    pub const NO_RAW: &str = ",\"raw\":null}";
}

/// The parts of the envelope shared by the events of one append, as JSON.
pub struct Envelope {
    time: String,
    session_id: String,
    native_session_id: String,
}

impl Envelope {
    /// The shared parts of events appended at `time` to `session_id`.
    pub fn new(time: &str, session_id: &str, native_session_id: Option<&str>) -> Envelope {
        Envelope {
            time: json_string(time),
            session_id: json_string(session_id),
            native_session_id: native_session_id.map_or_else(|| "null".to_owned(), json_string),
        }
    }

    /// Appends the compact JSON of `draft` placed at `sequence`, ending with `"raw":null}`.
    pub fn write(&self, out: &mut Vec<u8>, sequence: u64, draft: &EventDraft) {
        let mut digits = Digits::default();
        let n = digits.of(sequence).as_bytes();
        out.extend_from_slice(layout::EVENT_ID.as_bytes());
        out.extend_from_slice(n);
        out.extend_from_slice(layout::SEQUENCE.as_bytes());
        out.extend_from_slice(n);
        out.extend_from_slice(layout::TIME.as_bytes());
        out.extend_from_slice(self.time.as_bytes());
        out.extend_from_slice(layout::SESSION.as_bytes());
        out.extend_from_slice(self.session_id.as_bytes());
        out.extend_from_slice(layout::NATIVE.as_bytes());
        out.extend_from_slice(self.native_session_id.as_bytes());
        out.extend_from_slice(if draft.synthetic {
            layout::BY_DAEMON.as_bytes()
        } else {
            layout::BY_AGENT.as_bytes()
        });
        // Type names are plain ASCII: nothing to escape.
        out.extend_from_slice(draft.data.event_type().as_bytes());
        out.extend_from_slice(layout::DATA.as_bytes());
        write_data(out, &draft.data);
        out.extend_from_slice(layout::NO_RAW.as_bytes());
    }
}

/// `data`'s JSON; serializing plain data into a Vec cannot fail.
fn write_data(out: &mut Vec<u8>, data: &EventData) {
    let _ = serde_json::to_writer(&mut *out, &data.payload());
}

/// A string as JSON (quoted, escaped as serde_json escapes it): how the envelope writes its
/// time, session id and native session id.
pub fn json_string(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_owned())
}

/// A number's decimal digits, without allocating: two digits per division (run for every
/// event's sequence in its envelope, its SSE id and its compact stored line, the loop of one
/// digit per division was 1.3 % of a 20-session flood's daemon CPU).
#[derive(Default)]
pub struct Digits([u8; 20]);

/// "00" to "99", back to back.
const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

impl Digits {
    pub fn of(&mut self, mut n: u64) -> &str {
        let mut at = self.0.len();
        while n >= 100 {
            let pair = (n % 100) as usize * 2;
            n /= 100;
            at -= 2;
            self.0[at..at + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
        }
        if n >= 10 {
            let pair = n as usize * 2;
            at -= 2;
            self.0[at..at + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
        } else {
            at -= 1;
            self.0[at] = b'0' + n as u8;
        }
        // ASCII digits.
        std::str::from_utf8(&self.0[at..]).unwrap_or("0")
    }
}

/// Drafts whose envelopes exercise the writer: escapes in every string, a line break, a
/// control character, text that looks like the envelope's own keys, both sources (shared by
/// the tests of what reads envelopes back, e.g. SQLite's compact lines).
#[cfg(test)]
pub(crate) fn sample_drafts() -> Vec<crate::universal::EventDraft> {
    use crate::universal::{
        ErrorData, EventData, EventDraft, ItemDeltaData, RawLine, TurnData, TurnPhase,
    };
    vec![
        EventDraft::from_agent(
            EventData::ItemDelta(ItemDeltaData {
                item_id: "itm_7".into(),
                native_item_id: Some("n\"1".into()),
                delta: "a \"type\":\"turn.ended\" ]\nline é \u{1} \\".into(),
            }),
            Some(RawLine::Text("raw".into())),
        ),
        EventDraft::synthetic(EventData::TurnStarted(Box::new(TurnData {
            phase: TurnPhase::Started,
            turn_id: Some("turn_1".into()),
            metadata: None,
        }))),
        EventDraft::synthetic(EventData::Error(Box::new(ErrorData {
            message: "boom".into(),
            code: None,
            details: Some(serde_json::json!({"k": [1, "two", null]})),
        }))),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::universal::{EventData, EventDraft, UniversalEvent};

    #[test]
    fn digits_are_the_decimal_form() {
        let mut digits = Digits::default();
        for n in [
            0,
            7,
            9,
            10,
            42,
            99,
            100,
            101,
            999,
            1_000,
            12_345,
            1 << 40,
            u64::MAX,
        ] {
            assert_eq!(digits.of(n), n.to_string());
        }
        for n in 0..10_000u64 {
            assert_eq!(digits.of(n), n.to_string());
        }
    }

    #[test]
    fn the_written_envelope_is_the_serialized_event() {
        let drafts = sample_drafts();
        for (time, session, native) in [
            ("2026-01-01T00:00:00.000000Z", "ses", None),
            ("t\"1", "s\\é\n", Some("nat\"ive")),
        ] {
            let envelope = Envelope::new(time, session, native);
            for (i, draft) in drafts.iter().enumerate() {
                for sequence in [1u64, 10, 999, u64::MAX, i as u64] {
                    let mut out = Vec::new();
                    envelope.write(&mut out, sequence, draft);
                    let event = UniversalEvent::from_draft(
                        draft.clone(),
                        sequence,
                        time.into(),
                        session.into(),
                        native.map(Into::into),
                    );
                    assert_eq!(String::from_utf8(out).unwrap(), event.to_json(false));
                }
            }
        }
    }

    /// Every event of the golden files, and the types they lack, written by hand and by serde.
    #[test]
    fn every_event_type_is_written_as_serde_writes_it() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/universal");
        let mut events: Vec<UniversalEvent> = Vec::new();
        for entry in std::fs::read_dir(&dir).unwrap() {
            let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                events.push(serde_json::from_str(line).unwrap());
            }
        }
        let made = [
            (
                "session.ended",
                r#"{"reason":"terminated","terminated_by":"daemon","message":"m\u2028\"","exit_code":-9,"cost":{"credits":0.5,"usd":0.005}}"#,
            ),
            (
                "permission.requested",
                r#"{"permission_id":"perm_1","action":"run_terminal_command","status":"requested","metadata":{"command":"ls\n-la","n":1.25e-7}}"#,
            ),
            (
                "permission.resolved",
                r#"{"permission_id":"perm_1","action":"write_file","status":"accept_for_session","metadata":null}"#,
            ),
        ];
        for (ty, data) in made {
            events.push(UniversalEvent::from_draft(
                EventDraft::synthetic(EventData::from_parts(ty, data).unwrap()),
                3,
                "2026-01-01T00:00:00Z".into(),
                "ses_x".into(),
                Some("native".into()),
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        for event in &events {
            seen.insert(event.event_type());
            let draft = EventDraft {
                data: event.data.clone(),
                synthetic: event.synthetic,
                raw: event.raw.clone(),
            };
            let envelope = Envelope::new(
                &event.time,
                &event.session_id,
                event.native_session_id.as_deref(),
            );
            let mut out = Vec::new();
            envelope.write(&mut out, event.sequence, &draft);
            assert_eq!(String::from_utf8(out).unwrap(), event.to_json(false));
        }
        let all: std::collections::BTreeSet<&str> =
            crate::universal::EVENT_TYPES.into_iter().collect();
        assert_eq!(seen, all, "every event type is compared");
    }

    #[test]
    fn numbers_are_written_in_decimal() {
        for n in [0u64, 7, 10, 12345, u64::MAX] {
            let mut out = Vec::new();
            out.extend_from_slice(Digits::default().of(n).as_bytes());
            assert_eq!(String::from_utf8(out).unwrap(), n.to_string());
        }
    }
}
