//! Splits an agent's byte stream into lines with a maximum length.
//!
//! Pure: the caller feeds whatever chunks its reader produced. A line longer than the limit is
//! not buffered whole: its first bytes are kept as a prefix for the report, the rest is skipped
//! up to its terminator, and framing goes on with the next line. Invalid UTF-8 is passed through
//! as bytes; deciding what it means is the converter's job.

/// Bytes of an oversized line kept for its report.
const PREFIX_BYTES: usize = 1024;

/// One framed unit of output.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    /// A complete line without its `\n` (or the unterminated last line at the end).
    Line(&'a [u8]),
    /// A line longer than the limit, skipped; `length` counts all its bytes.
    Oversized { length: usize, prefix: &'a [u8] },
}

/// Incremental line splitter with a per-line byte limit.
#[derive(Debug)]
pub struct LineFramer {
    max: usize,
    buf: Vec<u8>,
    /// While skipping an oversized line: its length so far.
    skipping: Option<usize>,
}

impl LineFramer {
    /// A framer that accepts lines of at most `max` bytes (terminator excluded).
    pub fn new(max: usize) -> Self {
        LineFramer {
            max: max.max(1),
            buf: Vec::new(),
            skipping: None,
        }
    }

    /// Feeds a chunk, calling `emit` for every line it completes.
    pub fn push(&mut self, mut chunk: &[u8], emit: &mut dyn FnMut(Frame<'_>)) {
        while !chunk.is_empty() {
            let newline = memchr::memchr(b'\n', chunk);
            if let Some(len) = self.skipping {
                match newline {
                    Some(i) => {
                        emit(Frame::Oversized {
                            length: len + i,
                            prefix: &self.buf,
                        });
                        self.buf.clear();
                        self.skipping = None;
                        chunk = &chunk[i + 1..];
                    }
                    None => {
                        self.skipping = Some(len + chunk.len());
                        return;
                    }
                }
                continue;
            }
            match newline {
                Some(i) if self.buf.len() + i <= self.max => {
                    if self.buf.is_empty() {
                        emit(Frame::Line(&chunk[..i]));
                    } else {
                        self.buf.extend_from_slice(&chunk[..i]);
                        emit(Frame::Line(&self.buf));
                        self.buf.clear();
                    }
                    chunk = &chunk[i + 1..];
                }
                _ => {
                    let take = newline.unwrap_or(chunk.len());
                    if self.buf.len() + take > self.max {
                        // Over the limit: keep a prefix, skip the rest of the line.
                        let total = self.buf.len();
                        self.buf.truncate(PREFIX_BYTES);
                        let room = PREFIX_BYTES.saturating_sub(self.buf.len());
                        self.buf.extend_from_slice(&chunk[..room.min(take)]);
                        self.skipping = Some(total);
                        continue;
                    }
                    self.buf.extend_from_slice(chunk);
                    return;
                }
            }
        }
    }

    /// Ends the stream: emits the unterminated last line (or the oversized report), if any.
    pub fn finish(&mut self, emit: &mut dyn FnMut(Frame<'_>)) {
        if let Some(len) = self.skipping.take() {
            emit(Frame::Oversized {
                length: len,
                prefix: &self.buf,
            });
        } else if !self.buf.is_empty() {
            emit(Frame::Line(&self.buf));
        }
        self.buf.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    enum Got {
        Line(String),
        Big(usize, usize),
    }

    fn frame(max: usize, chunks: &[&[u8]]) -> Vec<Got> {
        let mut f = LineFramer::new(max);
        let mut got = Vec::new();
        let mut emit = |fr: Frame<'_>| {
            got.push(match fr {
                Frame::Line(l) => Got::Line(String::from_utf8_lossy(l).into_owned()),
                Frame::Oversized { length, prefix } => Got::Big(length, prefix.len()),
            })
        };
        for c in chunks {
            f.push(c, &mut emit);
        }
        f.finish(&mut emit);
        got
    }

    #[test]
    fn splits_lines_across_chunks() {
        assert_eq!(
            frame(100, &[b"ab", b"c\nde", b"\n\nf"]),
            vec![
                Got::Line("abc".into()),
                Got::Line("de".into()),
                Got::Line("".into()),
                Got::Line("f".into())
            ]
        );
    }

    #[test]
    fn oversized_lines_are_reported_and_skipped() {
        let big = vec![b'x'; 5000];
        let mut input = big.clone();
        input.extend_from_slice(b"\nok\n");
        let got = frame(2000, &[&input[..1500], &input[1500..3000], &input[3000..]]);
        assert_eq!(got, vec![Got::Big(5000, 1024), Got::Line("ok".into())]);
    }

    #[test]
    fn a_line_exactly_at_the_limit_passes() {
        assert_eq!(
            frame(3, &[b"abc\nabcd\n"]),
            vec![Got::Line("abc".into()), Got::Big(4, 4)]
        );
    }

    #[test]
    fn an_unterminated_oversized_tail_is_reported() {
        assert_eq!(frame(2, &[b"abcdef"]), vec![Got::Big(6, 6)]);
    }
}
