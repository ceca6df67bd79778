//! Events as SQLite holds them: a session's events committed together go into chunk rows,
//! each holding up to [`CHUNK_EVENTS`] events as a JSON array with one event per line (and
//! their raw lines the same way), because one insert per event cost more than everything
//! else an event costs. Each event is a compact line (`compact.rs`: what the row says of it
//! left out) where it can be, else its whole JSON. The view `events` shows one row per event,
//! whole, for queries.

use super::compact;
use crate::store::{StoreError, StoredEvent, StoredRaw};
use crate::universal::{json_string, TextBlocks};

/// The most events one chunk row holds: a read starting inside a chunk reads it whole.
const CHUNK_EVENTS: usize = 256;
/// The most bytes of event JSON one chunk row holds (a chunk has at least one event).
const CHUNK_BYTES: usize = 256 * 1024;

/// A batch's events gathered per session, in order, to be written as chunks.
#[derive(Default)]
pub(super) struct Chunks<'a> {
    sessions: Vec<(&'a str, Vec<&'a StoredEvent>)>,
}

impl<'a> Chunks<'a> {
    pub fn add(&mut self, session_id: &'a str, events: &'a [StoredEvent]) {
        let at = match self.sessions.iter().position(|(id, _)| *id == session_id) {
            Some(at) => at,
            None => {
                self.sessions.push((session_id, Vec::new()));
                self.sessions.len() - 1
            }
        };
        self.sessions[at].1.extend(events);
    }

    /// Drops what was gathered for a session that the batch deletes.
    pub fn forget(&mut self, session_id: &str) {
        self.sessions.retain(|(id, _)| *id != session_id);
    }

    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    /// Calls `write` with each chunk: a session's consecutive events, at most
    /// [`CHUNK_EVENTS`] and (unless one event is larger) [`CHUNK_BYTES`] of JSON.
    pub fn write(
        &self,
        mut write: impl FnMut(&str, &[&StoredEvent]) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        for (session_id, events) in &self.sessions {
            let mut start = 0;
            while start < events.len() {
                let mut end = start;
                let mut bytes = 0;
                while end < events.len()
                    && end - start < CHUNK_EVENTS
                    && (end == start || bytes + events[end].json.len() <= CHUNK_BYTES)
                {
                    bytes += events[end].json.len();
                    end += 1;
                }
                write(session_id, &events[start..end])?;
                start = end;
            }
        }
        Ok(())
    }
}

/// Buffers the writer encodes chunks into, reused from chunk to chunk: the writer thread then
/// allocates nothing per chunk but the session id's JSON.
#[derive(Default)]
pub(super) struct ChunkBuffers {
    events: String,
    raws: String,
    session: String,
}

/// Encodes consecutive events of `session_id` as a chunk: `[`, one event per line separated
/// by `,`, `]`; each event as a compact line (`compact.rs`) when it can be, else whole.
pub(super) fn encode_chunk<'r>(
    session_id: &str,
    events: &[&'r StoredEvent],
    buf: &'r mut ChunkBuffers,
) -> ChunkRow<'r> {
    buf.session = json_string(session_id);
    // The parts of the last compact line: its native session id is every compact line's.
    let mut previous: Option<compact::Parts<'r>> = None;
    let text = &mut buf.events;
    text.clear();
    text.push('[');
    for (i, &e) in events.iter().enumerate() {
        text.push_str(if i == 0 { "\n" } else { ",\n" });
        match compact::parts(e, &buf.session, previous.as_ref()) {
            // A chunk's compact lines share one native session id: the first one's.
            Some(parts) if previous.as_ref().is_none_or(|p| p.native == parts.native) => {
                compact::write_line(text, &parts);
                previous = Some(parts);
            }
            _ => text.push_str(&e.json),
        }
    }
    text.push_str("\n]");
    let has_raws = events.iter().any(|e| e.raw.is_some());
    let raws = &mut buf.raws;
    raws.clear();
    if has_raws {
        raws.push('[');
        for (i, e) in events.iter().enumerate() {
            raws.push_str(if i == 0 { "\n" } else { ",\n" });
            match &e.raw {
                Some(raw) => raws.push_str(&raw.json()),
                None => raws.push_str("null"),
            }
        }
        raws.push_str("\n]");
    }
    ChunkRow {
        first: events.first().map_or(0, |e| e.sequence),
        last: events.last().map_or(0, |e| e.sequence),
        events: &buf.events,
        raws: has_raws.then_some(buf.raws.as_str()),
        native: previous.map(|p| p.native),
    }
}

/// The lines of a chunk column between its `[` and `]`, each without its separating `,`.
fn chunk_lines(text: &str) -> impl Iterator<Item = &str> {
    let inner = text
        .strip_prefix("[\n")
        .and_then(|t| t.strip_suffix("\n]"))
        .unwrap_or("");
    inner
        .split('\n')
        .map(|line| line.strip_suffix(',').unwrap_or(line))
}

/// A chunk row's columns, as written or read.
pub(super) struct ChunkRow<'r> {
    pub first: u64,
    pub last: u64,
    pub events: &'r str,
    pub raws: Option<&'r str>,
    /// The native session id (JSON) of the chunk's compact lines; `None` when it has none.
    pub native: Option<&'r str>,
}

/// What a text a [`ChunkReader`] decodes is: an event's, or the raw line of the event before.
enum Decoded {
    Event(u64, &'static str),
    Raw,
}

/// Decodes the chunks of one session: its id's JSON and a buffer, made once per read.
pub(super) struct ChunkReader {
    session: String,
    texts: TextBlocks<Decoded>,
}

impl ChunkReader {
    pub fn new(session_id: &str) -> Self {
        ChunkReader {
            session: json_string(session_id),
            texts: TextBlocks::default(),
        }
    }

    /// Decodes the events of one chunk with `after < sequence <= upto` into `out`. Their
    /// texts (and raw lines) share blocks ([`crate::store::EventText`]).
    pub fn decode(
        &mut self,
        row: &ChunkRow<'_>,
        after: u64,
        upto: u64,
        out: &mut Vec<StoredEvent>,
    ) -> Result<(), StoreError> {
        if let Err(error) = self.gather(row, after, upto) {
            self.texts.clear();
            return Err(error);
        }
        for (decoded, text) in self.texts.share() {
            match decoded {
                Decoded::Event(sequence, event_type) => out.push(StoredEvent {
                    sequence,
                    event_type,
                    json: text,
                    raw: None,
                }),
                // `gather` ends a raw line right after its event.
                Decoded::Raw => {
                    if let Some(event) = out.last_mut() {
                        event.raw = Some(StoredRaw::Json(text));
                    }
                }
            }
        }
        Ok(())
    }

    /// Writes the texts of the chunk's events in range, each followed by its raw line if it
    /// has one, to `texts`.
    fn gather(&mut self, row: &ChunkRow<'_>, after: u64, upto: u64) -> Result<(), StoreError> {
        let (first, last) = (row.first, row.last);
        let bad = || {
            StoreError::Backend(format!(
                "the stored chunk of events {first}..={last} is not valid"
            ))
        };
        let mut raws = row.raws.map(chunk_lines);
        let mut count = 0;
        for (line, sequence) in chunk_lines(row.events).zip(first..) {
            count += 1;
            let raw = match raws.as_mut() {
                Some(raws) => Some(raws.next().ok_or_else(bad)?).filter(|r| *r != "null"),
                None => None,
            };
            if sequence <= after || sequence > upto {
                continue;
            }
            let event_type = if line.starts_with('[') {
                let native = row.native.ok_or_else(bad)?;
                compact::read_line(line, sequence, &self.session, native, self.texts.buf())
                    .ok_or_else(bad)?
            } else {
                let event_type = StoredEvent::checked_type(sequence, line)?;
                self.texts.buf().extend_from_slice(line.as_bytes());
                event_type
            };
            self.texts.end_text(Decoded::Event(sequence, event_type));
            if let Some(raw) = raw {
                self.texts.buf().extend_from_slice(raw.as_bytes());
                self.texts.end_text(Decoded::Raw);
            }
        }
        if first + count - 1 != last || count == 0 {
            return Err(bad());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::universal::{EventData, EventDraft, ItemDeltaData, RawLine};

    fn stamped(first: u64, count: usize, native: Option<&str>) -> Vec<StoredEvent> {
        let mut drafts = (0..count)
            .map(|n| {
                let data = EventData::ItemDelta(ItemDeltaData {
                    item_id: "itm_1".into(),
                    native_item_id: None,
                    delta: format!("delta {n} \"quoted\"\n"),
                });
                let raw = (n % 2 == 0).then(|| RawLine::Text(format!("line {n}")));
                EventDraft::from_agent(data, raw)
            })
            .collect();
        StoredEvent::stamp_all(&mut drafts, first, &"t".into(), &"ses \"x\"".into(), native)
    }

    /// Decodes what `encode_chunk` wrote for `events`, reading `after..=upto`.
    fn round_trip(events: &[StoredEvent], after: u64, upto: u64) -> (String, Vec<StoredEvent>) {
        let refs: Vec<&StoredEvent> = events.iter().collect();
        let mut buffers = ChunkBuffers::default();
        let chunk = encode_chunk("ses \"x\"", &refs, &mut buffers);
        let mut out = Vec::new();
        ChunkReader::new("ses \"x\"")
            .decode(&chunk, after, upto, &mut out)
            .unwrap();
        (chunk.events.to_owned(), out)
    }

    fn assert_same(read: &[StoredEvent], written: &[StoredEvent]) {
        assert_eq!(read.len(), written.len());
        for (got, want) in read.iter().zip(written) {
            assert_eq!(got.sequence, want.sequence);
            assert_eq!(got.event_type, want.event_type);
            assert_eq!(got.json(true), want.json(true), "event {}", want.sequence);
        }
    }

    #[test]
    fn a_chunk_reads_back_byte_for_byte_and_is_smaller() {
        let events = stamped(41, 10, Some("native-1"));
        let (text, read) = round_trip(&events, 0, u64::MAX);
        assert_same(&read, &events);
        let whole: usize = events.iter().map(|e| e.json.len()).sum();
        assert!(text.len() * 2 < whole, "{} of {whole} bytes", text.len());
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[1..lines.len() - 1].iter().all(|l| l.starts_with('[')),
            "{text}"
        );
        // A part of it.
        let (_, read) = round_trip(&events, 43, 47);
        assert_same(&read, &events[3..7]);
    }

    #[test]
    fn events_of_another_native_session_id_stay_whole() {
        // Written before and after the agent said its session id: one chunk, two ids.
        let mut events = stamped(1, 3, None);
        events.extend(stamped(4, 3, Some("native-1")));
        let (text, read) = round_trip(&events, 0, u64::MAX);
        assert_same(&read, &events);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[1..4].iter().all(|l| l.starts_with('[')), "{text}");
        assert!(lines[4..7].iter().all(|l| l.starts_with('{')), "{text}");
    }

    #[test]
    fn events_of_appends_at_other_times_keep_their_own() {
        // One time a prefix of the other's: each event keeps the time it was appended at.
        let stamp = |first, time: &str| {
            let mut drafts = (0..3)
                .map(|_| {
                    EventDraft::synthetic(EventData::ItemDelta(ItemDeltaData {
                        item_id: "itm_1".into(),
                        native_item_id: None,
                        delta: "d".into(),
                    }))
                })
                .collect();
            StoredEvent::stamp_all(&mut drafts, first, &time.into(), &"ses \"x\"".into(), None)
        };
        let mut events = stamp(1, "2026-01-01T00:00:00.1Z");
        events.extend(stamp(4, "2026-01-01T00:00:00.12Z"));
        events.extend(stamp(7, "2026-01-01T00:00:00.1Z"));
        let (text, read) = round_trip(&events, 0, u64::MAX);
        assert_same(&read, &events);
        assert_eq!(text.matches(".12Z").count(), 3, "{text}");
    }

    #[test]
    fn a_compact_line_without_the_chunks_native_id_is_an_error() {
        let events = stamped(1, 2, None);
        let refs: Vec<&StoredEvent> = events.iter().collect();
        let mut buffers = ChunkBuffers::default();
        let chunk = encode_chunk("ses \"x\"", &refs, &mut buffers);
        assert_eq!(chunk.native, Some("null"));
        let row = ChunkRow {
            native: None,
            ..chunk
        };
        let error = ChunkReader::new("ses \"x\"")
            .decode(&row, 0, 2, &mut Vec::new())
            .unwrap_err();
        assert!(error.to_string().contains("is not valid"), "{error}");
    }
}
