//! Output batching: each reader task frames one pipe into lines and sends them a read chunk at a
//! time ([`Batch`]: the frames' bytes back to back, one allocation per chunk), over the bounded
//! channel that [`AgentProcess::next_event`](super::AgentProcess::next_event) hands out one
//! event at a time through a [`Cursor`].

use std::io;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::{mpsc, watch};
use tokio::time::{timeout_at, Instant};

use super::{ExitInfo, OutputStream, ProcessEvent};
use crate::agent::framing::{Frame, LineFramer};

/// Bytes asked for per read of the agent's stdout (a pipe holds 64 KiB by default). A read's
/// lines keep its buffer alive until their events are committed, so a smaller read holds less
/// in flight: with 8 KiB rather than 32, twenty flooding sessions peaked 1.2 MiB lower and
/// their events reached readers sooner (p99 270 → 184 ms), for 2–5 % more CPU per event (a
/// flood is read four times as often; `load`, 100 rounds each; benches/README, nineteenth
/// session).
const READ_CHUNK: usize = 8 * 1024;
/// Bytes asked for per read of its stderr: a few diagnostics, not a stream; each running agent
/// holds its read buffers for its whole turn.
const STDERR_READ_CHUNK: usize = 4 * 1024;

/// What travels from the background tasks to [`AgentProcess::next_event`].
pub(super) enum Message {
    Output(Batch),
    Exited(ExitInfo),
}

/// The frames of one read chunk of one pipe, their bytes stored back to back.
pub(super) struct Batch {
    pub(super) stream: OutputStream,
    bytes: Vec<u8>,
    /// Each frame's byte count in `bytes`, with [`OVERSIZED`] set for the kept prefix of a line
    /// over the limit, whose whole length is the next of `oversized`. Four bytes a line: a read
    /// holds hundreds of lines, and the agents' batches in flight are much of a flood's memory.
    frames: Vec<u32>,
    oversized: Vec<usize>,
}

/// Marks a frame of [`Batch::frames`] as an oversized line's prefix.
const OVERSIZED: u32 = 1 << 31;
/// The longest line a batch holds whole (longer ones are oversized whatever the limit).
const MAX_LINE: usize = (OVERSIZED - 1) as usize;

impl Batch {
    /// A batch for about `bytes` bytes in about `lines` lines. Its buffer is what the lines of
    /// one read keep alive (they are slices of it), so it is not made larger than they need;
    /// its frames get their room up front (grown one line at a time, a read of a flood's short
    /// lines reallocated them seven times).
    fn new(stream: OutputStream, bytes: usize, lines: usize) -> Batch {
        Batch {
            stream,
            bytes: Vec::with_capacity(bytes),
            frames: Vec::with_capacity(lines),
            oversized: Vec::new(),
        }
    }

    fn push(&mut self, frame: Frame<'_>) {
        match frame {
            // Lines are at most MAX_LINE long (the framer's limit), prefixes 1 KiB.
            Frame::Line(line) => {
                self.bytes.extend_from_slice(line);
                self.frames.push(line.len() as u32);
            }
            Frame::Oversized { length, prefix } => {
                self.bytes.extend_from_slice(prefix);
                self.frames.push(prefix.len() as u32 | OVERSIZED);
                self.oversized.push(length);
            }
        }
    }
}

/// The consumer's position in the batch it is handing out. Its lines are slices of the
/// batch's buffer (no allocation per line): an agent's line becomes its events' raw line
/// as it is.
pub(super) struct Cursor {
    stream: OutputStream,
    bytes: Bytes,
    frames: Vec<u32>,
    oversized: std::vec::IntoIter<usize>,
    frame: usize,
    offset: usize,
}

impl Cursor {
    pub(super) fn new(batch: Batch) -> Cursor {
        Cursor {
            stream: batch.stream,
            bytes: Bytes::from(batch.bytes),
            frames: batch.frames,
            oversized: batch.oversized.into_iter(),
            frame: 0,
            offset: 0,
        }
    }

    pub(super) fn next(&mut self) -> Option<ProcessEvent> {
        let frame = *self.frames.get(self.frame)?;
        self.frame += 1;
        let stream = self.stream;
        let start = self.offset;
        self.offset += (frame & !OVERSIZED) as usize;
        Some(if frame & OVERSIZED == 0 {
            ProcessEvent::Line {
                stream,
                line: self.bytes.slice(start..self.offset),
            }
        } else {
            ProcessEvent::Oversized {
                stream,
                length: self.oversized.next().unwrap_or(0),
                prefix: self.bytes[start..self.offset].to_vec(),
            }
        })
    }
}

/// Reads one pipe to EOF (or until it stays silent past the deadline set when the leader
/// exited), sending one batch per read chunk.
pub(super) async fn read_output<R: AsyncRead + Unpin>(
    mut pipe: R,
    stream: OutputStream,
    max_line_bytes: usize,
    events: mpsc::Sender<Message>,
    mut eof_deadline: watch::Receiver<Option<Instant>>,
) {
    let mut framer = LineFramer::new(max_line_bytes.min(MAX_LINE));
    let chunk = match stream {
        OutputStream::Stdout => READ_CHUNK,
        OutputStream::Stderr => STDERR_READ_CHUNK,
    };
    let mut buf = vec![0u8; chunk];
    // The lines of the last read: the next one's are about as many (a flood's reads are alike).
    let mut lines = 0;
    loop {
        let deadline = *eof_deadline.borrow_and_update();
        let result = match deadline {
            // The leader has exited: data still in the pipe is read at once, an empty pipe is
            // waited for only until the deadline.
            Some(at) => match timeout_at(at, pipe.read(&mut buf)).await {
                Ok(result) => result,
                Err(_) => {
                    tracing::debug!(
                        ?stream,
                        "agent output pipe still open after its exit; giving up on it"
                    );
                    break;
                }
            },
            None => tokio::select! {
                result = pipe.read(&mut buf) => result,
                changed = eof_deadline.changed() => {
                    if changed.is_err() {
                        break; // the supervisor is gone
                    }
                    continue;
                }
            },
        };
        match result {
            Ok(0) => break,
            Ok(n) => {
                let mut batch = Batch::new(stream, n, lines);
                framer.push(&buf[..n], &mut |frame| batch.push(frame));
                lines = batch.frames.len();
                if !batch.frames.is_empty() && events.send(Message::Output(batch)).await.is_err() {
                    return; // nobody listens any more
                }
            }
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => {
                tracing::debug!(?stream, %error, "reading agent output failed");
                break;
            }
        }
    }
    let mut batch = Batch::new(stream, 0, 1);
    framer.finish(&mut |frame| batch.push(frame));
    if !batch.frames.is_empty() {
        let _ = events.send(Message::Output(batch)).await;
    }
}
