//! [`EventText`]: an event's stored text (or an agent's line), a slice of a buffer that the
//! events appended (or read back, or read from one agent pipe) together share.
//!
//! Why: an event's JSON was one allocation of its own, made on the appender's thread and
//! freed on whichever thread let the event go last (the writer after its commit, the tail, a
//! reader's page). In a flood that was a malloc and a cross-thread free per event, and the
//! allocator's slow paths (its per-thread caches hold 7 blocks of a size) were ~20 % of the
//! daemon's CPU. The events of one append are now written into one buffer and cut into
//! blocks of about [`BLOCK_BYTES`]: one allocation per block, freed when the last event of
//! the block goes.
//!
//! The bound on a block bounds what an event that stays (the tail's last events, a reader's
//! page) keeps alive beside itself.

use std::fmt;
use std::ops::Deref;

use bytes::Bytes;

/// The bytes after which a block is cut (it holds at most this plus one event).
const BLOCK_BYTES: usize = 16 * 1024;

/// An event's text (or an agent's line): UTF-8 in a shared buffer. Cheap to clone (one
/// reference count).
#[derive(Clone)]
pub struct EventText(Bytes);

impl EventText {
    /// The text alone in a buffer of its own.
    pub fn new(text: &str) -> EventText {
        EventText(Bytes::copy_from_slice(text.as_bytes()))
    }

    /// The bytes as text, sharing their buffer; why not and the bytes back when they are not
    /// UTF-8.
    pub fn from_utf8(bytes: Bytes) -> Result<EventText, (std::str::Utf8Error, Bytes)> {
        match std::str::from_utf8(&bytes) {
            Ok(_) => Ok(EventText(bytes)),
            Err(e) => Err((e, bytes)),
        }
    }

    pub fn as_str(&self) -> &str {
        debug_assert!(std::str::from_utf8(&self.0).is_ok());
        // SAFETY: every constructor checks the bytes are UTF-8 (`cut` checks its blocks and
        // that each text ends on a character; `slice_ref` takes a part of a `&str`).
        unsafe { std::str::from_utf8_unchecked(&self.0) }
    }

    /// The text's bytes, sharing their buffer.
    pub fn into_bytes(self) -> Bytes {
        self.0
    }

    /// The part `sub` of this text (a slice of [`EventText::as_str`]), sharing the buffer.
    pub fn slice_ref(&self, sub: &str) -> EventText {
        EventText(self.0.slice_ref(sub.as_bytes()))
    }
}

impl Deref for EventText {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl From<&str> for EventText {
    fn from(text: &str) -> EventText {
        EventText::new(text)
    }
}

impl From<String> for EventText {
    /// Takes the string's buffer (no copy).
    fn from(text: String) -> EventText {
        EventText(Bytes::from(text.into_bytes()))
    }
}

impl PartialEq for EventText {
    fn eq(&self, other: &EventText) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for EventText {}

impl fmt::Debug for EventText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

/// Texts written one after the other into a buffer and shared in blocks: a block is cut once
/// its texts reach [`BLOCK_BYTES`] (so it holds at most that plus one text), so the buffer
/// stays about that size whatever the batch. Each text is handed out with what its writer
/// said it belongs to (`H`: an event's sequence and type, say). Kept by its owner between
/// batches so the buffers are reused.
pub struct TextBlocks<H> {
    buf: Vec<u8>,
    /// The texts not cut into a block yet: their ends in `buf`, with their heads.
    ends: Vec<(usize, H)>,
    /// The texts cut into blocks, not yet handed out.
    done: Vec<(H, EventText)>,
}

impl<H> Default for TextBlocks<H> {
    fn default() -> Self {
        TextBlocks {
            buf: Vec::new(),
            ends: Vec::new(),
            done: Vec::new(),
        }
    }
}

/// A buffer grown past this by one text (a huge event) is not kept for the next one.
const MAX_KEPT: usize = 256 * 1024;

impl<H> TextBlocks<H> {
    /// The buffer the next text is written to, after the texts written so far.
    pub fn buf(&mut self) -> &mut Vec<u8> {
        if self.buf.capacity() == 0 {
            self.buf.reserve(BLOCK_BYTES + BLOCK_BYTES / 4);
        }
        &mut self.buf
    }

    /// Ends the text written since the previous end (or the start), which belongs to `head`.
    pub fn end_text(&mut self, head: H) {
        self.ends.push((self.buf.len(), head));
        if self.buf.len() >= BLOCK_BYTES {
            self.cut();
        }
    }

    /// The texts ended so far, in order, with their heads; empties the buffer.
    pub fn share(&mut self) -> std::vec::Drain<'_, (H, EventText)> {
        self.cut();
        self.done.drain(..)
    }

    /// Forgets what was written (after an error), keeping the buffers.
    pub fn clear(&mut self) {
        self.ends.clear();
        self.done.clear();
        self.reset();
    }

    /// Makes the ended texts one block. A block that is not UTF-8, or a text that does not
    /// end on a character (the writers write whole JSON texts, so never), has its texts made
    /// valid one by one.
    fn cut(&mut self) {
        let Some(&(end, _)) = self.ends.last() else {
            return;
        };
        let block = std::str::from_utf8(&self.buf[..end])
            .ok()
            .filter(|block| self.ends.iter().all(|(to, _)| block.is_char_boundary(*to)))
            .map(|block| Bytes::copy_from_slice(block.as_bytes()));
        let mut from = 0;
        for (to, head) in self.ends.drain(..) {
            let text = match &block {
                Some(block) => EventText(block.slice(from..to)),
                None => String::from_utf8_lossy(&self.buf[from..to]).as_ref().into(),
            };
            self.done.push((head, text));
            from = to;
        }
        self.reset();
    }

    fn reset(&mut self) {
        if self.buf.capacity() > MAX_KEPT {
            self.buf = Vec::new();
        } else {
            self.buf.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(blocks: &mut TextBlocks<usize>, texts: &[&[u8]]) -> Vec<EventText> {
        for (i, t) in texts.iter().enumerate() {
            blocks.buf().extend_from_slice(t);
            blocks.end_text(i);
        }
        let shared: Vec<(usize, EventText)> = blocks.share().collect();
        // Each text with its own head, in order.
        let heads: Vec<usize> = shared.iter().map(|(i, _)| *i).collect();
        assert_eq!(heads, (0..texts.len()).collect::<Vec<_>>());
        shared.into_iter().map(|(_, text)| text).collect()
    }

    /// The byte lengths of the blocks `out` was cut into: texts of one block follow each
    /// other in memory (two allocations never touch: the allocator puts a header between).
    fn block_lengths(out: &[EventText]) -> Vec<usize> {
        let mut lengths: Vec<usize> = Vec::new();
        let mut end: Option<*const u8> = None;
        for t in out.iter().filter(|t| !t.is_empty()) {
            match lengths.last_mut() {
                Some(len) if end == Some(t.as_ptr()) => *len += t.len(),
                _ => lengths.push(t.len()),
            }
            end = Some(t.as_ptr().wrapping_add(t.len()));
        }
        lengths
    }

    #[test]
    fn texts_come_back_in_order_sharing_blocks_of_at_most_the_bound() {
        let mut blocks = TextBlocks::default();
        let texts: Vec<String> = (0..2000)
            .map(|n| format!("{{\"n\":{n}, \"é\":\"ü\"}}"))
            .collect();
        let raw: Vec<&[u8]> = texts.iter().map(|t| t.as_bytes()).collect();
        let out = write(&mut blocks, &raw);
        assert_eq!(out.len(), texts.len());
        for (got, want) in out.iter().zip(&texts) {
            assert_eq!(got.as_str(), want);
        }
        let lengths = block_lengths(&out);
        let total: usize = texts.iter().map(String::len).sum();
        assert_eq!(lengths.iter().sum::<usize>(), total);
        assert_eq!(lengths.len(), total.div_ceil(BLOCK_BYTES), "{lengths:?}");
        let longest = texts.iter().map(String::len).max().unwrap();
        for len in &lengths[..lengths.len() - 1] {
            assert!(
                (BLOCK_BYTES..BLOCK_BYTES + longest).contains(len),
                "{lengths:?}"
            );
        }
        // The buffer is empty for the next batch.
        assert_eq!(blocks.share().count(), 0);
        assert_eq!(write(&mut blocks, &[b"x"])[0].as_str(), "x");
    }

    #[test]
    fn a_text_over_the_bound_ends_its_block_and_empty_texts_stay_empty() {
        let mut blocks = TextBlocks::default();
        let huge = vec![b'a'; MAX_KEPT + 1];
        let out = write(&mut blocks, &[b"small", &huge, b"", b"after"]);
        assert_eq!(out[0].as_str(), "small");
        assert_eq!(out[1].len(), huge.len());
        assert_eq!(out[2].as_str(), "");
        assert_eq!(out[3].as_str(), "after");
        // Cut with the text before it, the texts after it in a block of their own.
        assert_eq!(block_lengths(&out), [huge.len() + 5, 5]);
        // The huge buffer is not kept.
        assert!(
            blocks.buf.capacity() < MAX_KEPT,
            "{}",
            blocks.buf.capacity()
        );
    }

    #[test]
    fn a_part_of_a_text_shares_its_buffer() {
        let text = EventText::from(" {\"a\":1}\r".to_owned());
        let part = text.slice_ref(text.trim());
        assert_eq!(part.as_str(), "{\"a\":1}");
        assert_eq!(part.as_ptr(), text[1..].as_ptr());
        assert!(EventText::from_utf8(bytes::Bytes::from_static(b"\xff")).is_err());
        assert_eq!(EventText::from_utf8("é".into()).unwrap().as_str(), "é");
    }

    #[test]
    fn a_block_that_is_not_utf8_is_made_valid_text_by_text() {
        let mut blocks = TextBlocks::default();
        let out = write(&mut blocks, &[b"ok", b"bad \xff end", b"fine"]);
        let got: Vec<&str> = out.iter().map(EventText::as_str).collect();
        assert_eq!(got, ["ok", "bad \u{fffd} end", "fine"]);
        // Valid as a block, but a character split between two texts.
        let e_acute = "\u{e9}".as_bytes();
        let out = write(&mut blocks, &[b"a", &e_acute[..1], &e_acute[1..], b"z"]);
        let got: Vec<&str> = out.iter().map(EventText::as_str).collect();
        assert_eq!(got, ["a", "\u{fffd}", "\u{fffd}", "z"]);
    }
}
