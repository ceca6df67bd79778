//! Events as SQLite holds them: a session's events committed together go into chunk rows,
//! each holding up to [`CHUNK_EVENTS`] events as a JSON array with one event per line (and
//! their raw lines the same way), because one insert per event cost more than everything
//! else an event costs. The view `events` shows one row per event for queries.

use crate::store::{StoreError, StoredEvent};

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
/// allocates nothing per chunk.
#[derive(Default)]
pub(super) struct ChunkBuffers {
    events: String,
    raws: String,
}

/// A chunk's columns.
pub(super) struct EncodedChunk<'b> {
    pub first: u64,
    pub last: u64,
    pub events: &'b str,
    pub raws: Option<&'b str>,
}

/// Encodes consecutive events as a chunk: `[`, one event per line separated by `,`, `]`.
pub(super) fn encode_chunk<'b>(
    events: &[&StoredEvent],
    buf: &'b mut ChunkBuffers,
) -> EncodedChunk<'b> {
    let text = &mut buf.events;
    text.clear();
    text.push('[');
    for (i, e) in events.iter().enumerate() {
        text.push_str(if i == 0 { "\n" } else { ",\n" });
        text.push_str(&e.json);
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
    EncodedChunk {
        first: events.first().map_or(0, |e| e.sequence),
        last: events.last().map_or(0, |e| e.sequence),
        events: &buf.events,
        raws: has_raws.then_some(buf.raws.as_str()),
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

/// Decodes the events of one chunk with `after < sequence <= upto` into `out`.
pub(super) fn decode_chunk(
    first: u64,
    last: u64,
    events: &str,
    raws: Option<&str>,
    after: u64,
    upto: u64,
    out: &mut Vec<StoredEvent>,
) -> Result<(), StoreError> {
    let bad = || {
        StoreError::Backend(format!(
            "the stored chunk of events {first}..={last} is not valid"
        ))
    };
    let mut raws = raws.map(chunk_lines);
    let mut count = 0;
    for (line, sequence) in chunk_lines(events).zip(first..) {
        count += 1;
        let raw = match raws.as_mut() {
            Some(raws) => Some(raws.next().ok_or_else(bad)?).filter(|r| *r != "null"),
            None => None,
        };
        if sequence > after && sequence <= upto {
            out.push(StoredEvent::from_stored(sequence, line, raw)?);
        }
    }
    if first + count - 1 != last || count == 0 {
        return Err(bad());
    }
    Ok(())
}
