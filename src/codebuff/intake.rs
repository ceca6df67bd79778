//! Line intake: what each line an agent printed is, before it is converted.
//!
//! A stdout line is an event, nothing (blank), or `agent.unparsed` (not JSON, no `type`, not
//! UTF-8); a stderr line is an event only when it is a JSON event (the legacy Codebuff CLI wrote
//! its `error` events there), else a diagnostic the caller keeps; a line longer than the
//! reader's limit was skipped and is reported. Locations (`stdout:N`) count the lines of each
//! stream that carried something.

use bytes::Bytes;
use sha2::{Digest, Sha256};

use super::event::{ParseError, PrintModeEvent};
use crate::universal::{AgentUnparsedData, EventData, EventDraft, EventText, RawLine};

/// Which output stream of the agent a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    fn name(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// What a line turned out to be.
#[derive(Debug)]
pub(crate) enum Intake {
    /// An event, with its line kept verbatim.
    Event(PrintModeEvent, RawLine),
    /// A stdout line that is not an event: its `agent.unparsed`.
    Unparsed(EventDraft),
    /// A blank stdout line: carries nothing.
    Blank,
    /// A stderr line that is not an event: a diagnostic for the caller.
    Diagnostic,
}

/// Reads lines of both streams and counts them for locations.
#[derive(Debug, Default)]
pub(crate) struct LineIntake {
    lines: [u64; 2],
}

impl LineIntake {
    /// Takes one stdout line (without its terminator): it becomes the event's raw line as it
    /// is, sharing the line's buffer.
    pub(crate) fn stdout(&mut self, line: Bytes) -> Intake {
        if line.iter().all(u8::is_ascii_whitespace) {
            return Intake::Blank;
        }
        let n = self.count(Stream::Stdout);
        // Hashed before the line moves into the parser, only when it is not an event.
        match parse_line(line) {
            Ok((event, raw)) => Intake::Event(event, raw),
            Err((error, raw, bytes)) => {
                Intake::Unparsed(unparsed(error, format!("stdout:{n}"), &bytes, raw))
            }
        }
    }

    /// Takes one stderr line: an event if it is a JSON event, else a diagnostic.
    pub(crate) fn stderr(&mut self, line: &[u8]) -> Intake {
        self.count(Stream::Stderr);
        let looks_like_json = line.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
        if !looks_like_json {
            return Intake::Diagnostic;
        }
        match parse_line(Bytes::copy_from_slice(line)) {
            Ok((event, raw)) => Intake::Event(event, raw),
            Err(_) => Intake::Diagnostic,
        }
    }

    /// Reports a line of `length` bytes that was over the reader's `limit` and skipped;
    /// `prefix` is its beginning.
    pub(crate) fn oversized(
        &mut self,
        stream: Stream,
        length: usize,
        limit: usize,
        prefix: &[u8],
    ) -> EventDraft {
        let n = self.count(stream);
        let shown = String::from_utf8_lossy(&prefix[..prefix.len().min(1024)]).into_owned();
        unparsed(
            format!("line of {length} bytes exceeds the limit of {limit} bytes; skipped"),
            format!("{}:{n}", stream.name()),
            prefix,
            RawLine::Text(shown),
        )
    }

    fn count(&mut self, stream: Stream) -> u64 {
        let n = &mut self.lines[stream as usize];
        *n += 1;
        *n
    }
}

/// Parses a line into an event and its verbatim raw form (the line itself: it parsed whole,
/// so it is JSON), or says why it is not one, with the raw form and the line's bytes.
#[allow(clippy::type_complexity)]
fn parse_line(line: Bytes) -> Result<(PrintModeEvent, RawLine), (String, RawLine, Bytes)> {
    let text = match EventText::from_utf8(line) {
        Ok(text) => text,
        Err((e, bytes)) => {
            let raw = RawLine::Text(String::from_utf8_lossy(&bytes).into_owned());
            return Err((format!("invalid UTF-8: {e}"), raw, bytes));
        }
    };
    let trimmed = text.trim_end_matches('\r');
    match PrintModeEvent::parse(trimmed) {
        // The raw form leaves out the space around the value, a trailing `\r` included.
        Ok(event) => Ok((event, RawLine::parsed(text))),
        Err(err) => {
            let raw = match err {
                ParseError::NotJson(_) => RawLine::Text(trimmed.to_owned()),
                _ => RawLine::json_or_text(trimmed.to_owned()),
            };
            Err((err.to_string(), raw, text.into_bytes()))
        }
    }
}

/// `agent.unparsed` for a line: the error, where it was, and the hash of its bytes.
fn unparsed(error: String, location: String, bytes: &[u8], raw: RawLine) -> EventDraft {
    let hash = Sha256::digest(bytes);
    let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
    EventDraft::from_agent(
        EventData::AgentUnparsed(AgentUnparsedData {
            error,
            location,
            raw_hash: Some(format!("sha256:{hex}")),
        }),
        Some(raw),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unparsed_data(intake: Intake) -> AgentUnparsedData {
        match intake {
            Intake::Unparsed(EventDraft {
                data: EventData::AgentUnparsed(d),
                ..
            }) => d,
            other => panic!("expected agent.unparsed, got {other:?}"),
        }
    }

    #[test]
    fn an_event_line_is_parsed_and_kept_verbatim() {
        let mut intake = LineIntake::default();
        let line = br#"{"type":"text", "text":"hi"}"#;
        match intake.stdout(Bytes::copy_from_slice(line)) {
            Intake::Event(PrintModeEvent::Text(t), raw) => {
                assert_eq!(t.text, "hi");
                assert!(
                    matches!(&raw, RawLine::Json(j) if j.as_str() == r#"{"type":"text", "text":"hi"}"#)
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_raw_form_is_the_value_without_the_space_around_it() {
        let mut intake = LineIntake::default();
        for line in [
            &b" \t{\"type\":\"text\",\"text\":\"a\"}  \r"[..],
            b"{\"type\":\"text\",\"text\":\"a\"}\r\r",
        ] {
            match intake.stdout(Bytes::copy_from_slice(line)) {
                Intake::Event(_, raw) => {
                    assert_eq!(raw, RawLine::Json(r#"{"type":"text","text":"a"}"#.into()))
                }
                other => panic!("{other:?}"),
            }
        }
        // JSON that is not an event stays JSON; anything else is text.
        for (line, want) in [
            (
                &br#" {"no":"type"} "#[..],
                RawLine::Json(r#"{"no":"type"}"#.into()),
            ),
            (b"{broken\r", RawLine::Text("{broken".into())),
        ] {
            match intake.stdout(Bytes::copy_from_slice(line)) {
                Intake::Unparsed(draft) => assert_eq!(draft.raw.as_ref(), Some(&want)),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn an_unparsed_line_s_hash_is_of_its_bytes_as_read() {
        let mut intake = LineIntake::default();
        for line in [&b"not json\r\r"[..], b"{\"no\":\"type\"}\r", &[0xff, b'\r']] {
            let d = unparsed_data(intake.stdout(Bytes::copy_from_slice(line)));
            let want: String = Sha256::digest(line)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            assert_eq!(d.raw_hash.unwrap(), format!("sha256:{want}"));
        }
    }

    #[test]
    fn blank_lines_carry_nothing_and_are_not_counted() {
        let mut intake = LineIntake::default();
        assert!(matches!(
            intake.stdout(Bytes::copy_from_slice(b"  \t")),
            Intake::Blank
        ));
        assert!(matches!(
            intake.stdout(Bytes::copy_from_slice(b"")),
            Intake::Blank
        ));
        let d = unparsed_data(intake.stdout(Bytes::copy_from_slice(b"oops")));
        assert_eq!(d.location, "stdout:1");
    }

    #[test]
    fn lines_that_are_not_events_are_unparsed_with_their_location_and_hash() {
        let mut intake = LineIntake::default();
        let d = unparsed_data(intake.stdout(Bytes::copy_from_slice(b"not json")));
        assert_eq!(d.location, "stdout:1");
        assert!(d.raw_hash.unwrap().starts_with("sha256:"));
        let d = unparsed_data(intake.stdout(Bytes::copy_from_slice(br#"{"no":"type"}"#)));
        assert_eq!(d.location, "stdout:2");
        let d = unparsed_data(intake.stdout(Bytes::copy_from_slice(&[0xff, 0xfe])));
        assert!(d.error.starts_with("invalid UTF-8"), "{}", d.error);
    }

    #[test]
    fn stderr_lines_are_events_only_when_they_are_json_events() {
        let mut intake = LineIntake::default();
        assert!(matches!(intake.stderr(b"warning: x"), Intake::Diagnostic));
        assert!(matches!(intake.stderr(b"{broken"), Intake::Diagnostic));
        assert!(matches!(
            intake.stderr(br#" {"type":"error","message":"m"}"#),
            Intake::Event(PrintModeEvent::Error(_), _)
        ));
    }

    #[test]
    fn an_oversized_line_is_reported_with_its_size_and_a_bounded_prefix() {
        let mut intake = LineIntake::default();
        intake.stderr(b"one");
        let prefix = vec![b'x'; 4096];
        let draft = intake.oversized(Stream::Stderr, 9_000_000, 8_388_608, &prefix);
        let EventData::AgentUnparsed(d) = &draft.data else {
            panic!("{draft:?}")
        };
        assert_eq!(d.location, "stderr:2");
        assert!(d.error.contains("9000000") && d.error.contains("8388608"));
        match draft.raw.as_ref() {
            Some(RawLine::Text(t)) => assert_eq!(t.len(), 1024),
            other => panic!("{other:?}"),
        }
    }
}
