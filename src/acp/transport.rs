//! The stdio transport: newline-delimited JSON-RPC on stdin and stdout, one thread each, handed
//! to the ACP crate as a [`Lines`] transport.
//!
//! * The writer thread takes every line queued since its last write and writes them with one
//!   `write(2)` (a flood of updates costs a system call per batch, not per line); stdout
//!   carries nothing else.
//! * [`Outbox`] is the backpressure: the door counts the updates it has handed to the
//!   connection and not yet written, and waits while more than [`HIGH_WATER`] are, so a client
//!   that reads slowly holds up the reader of the log (which can wait: the log keeps
//!   everything), never memory.
//! * The reader thread frames stdin into lines of at most [`MAX_LINE`] bytes (a longer one is
//!   replaced by a line that is not JSON: the client gets a parse error); stdin's end ends the
//!   incoming stream, and with it the connection.

use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

use agent_client_protocol::Lines;
use futures::channel::mpsc as fmpsc;
use futures::{Sink, SinkExt, Stream};
use tokio::sync::Notify;

/// Updates handed to the connection but not yet written, above which the door waits.
pub const HIGH_WATER: usize = 1024;
/// The longest line read from the client (a prompt with images can be large).
pub const MAX_LINE: usize = 128 * 1024 * 1024;
/// Bytes the writer gathers into one write at most.
const WRITE_BATCH: usize = 1024 * 1024;

/// The number of lines waiting to be written, and a wake-up for those waiting for room.
#[derive(Debug, Default)]
pub struct Outbox {
    pending: AtomicUsize,
    written: Notify,
    broken: AtomicBool,
}

impl Outbox {
    /// A new, empty outbox.
    pub fn new() -> Arc<Outbox> {
        Arc::new(Outbox::default())
    }

    /// Waits until fewer than [`HIGH_WATER`] lines are waiting, then counts one more.
    pub async fn reserve(&self) {
        loop {
            let notified = self.written.notified();
            if self.pending.load(Ordering::Acquire) < HIGH_WATER
                || self.broken.load(Ordering::Acquire)
            {
                self.pending.fetch_add(1, Ordering::AcqRel);
                return;
            }
            notified.await;
        }
    }

    /// `n` lines were written (or dropped). Lines the connection writes by itself (responses,
    /// requests) were never reserved, so the count stops at zero.
    pub fn written(&self, n: usize) {
        let _ = self
            .pending
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |p| {
                Some(p.saturating_sub(n))
            });
        self.written.notify_waiters();
    }

    /// The client stopped reading: nothing waits for room any more.
    fn break_down(&self) {
        self.broken.store(true, Ordering::Release);
        self.written.notify_waiters();
    }

    /// Lines reserved and not yet written.
    pub fn pending(&self) -> usize {
        self.pending.load(Ordering::Acquire)
    }
}

/// The stdio transport and its threads.
pub struct StdioTransport {
    writer: Option<JoinHandle<()>>,
    reader: Option<JoinHandle<()>>,
}

impl StdioTransport {
    /// Starts the reader and writer threads; returns the transport for the connection and the
    /// handle that waits for the writer at the end.
    #[allow(clippy::type_complexity)]
    pub fn start(
        outbox: Arc<Outbox>,
    ) -> std::io::Result<(
        Lines<
            impl Sink<String, Error = std::io::Error> + Send + 'static,
            impl Stream<Item = std::io::Result<String>> + Send + 'static,
        >,
        StdioTransport,
    )> {
        let (line_tx, line_rx) = mpsc::channel::<String>();
        let writer = std::thread::Builder::new()
            .name("acp-stdout".into())
            .spawn(move || write_lines(line_rx, &outbox))?;
        let (in_tx, in_rx) = fmpsc::channel::<std::io::Result<String>>(16);
        let reader = std::thread::Builder::new()
            .name("acp-stdin".into())
            .spawn(move || read_lines(in_tx))?;
        let sink = futures::sink::unfold(line_tx, |tx, line: String| async move {
            // The writer only goes away once this sink is dropped or stdout broke.
            let _ = tx.send(line);
            Ok::<_, std::io::Error>(tx)
        });
        Ok((
            Lines::new(sink, in_rx),
            StdioTransport {
                writer: Some(writer),
                reader: Some(reader),
            },
        ))
    }

    /// Waits (at most `limit`) for the writer to write what it was given; the connection must
    /// be over (its sink dropped). The reader thread is left alone: it may be blocked on a
    /// stdin that never closes.
    pub fn finish(mut self, limit: std::time::Duration) {
        let _ = self.reader.take();
        if let Some(writer) = self.writer.take() {
            let deadline = std::time::Instant::now() + limit;
            while !writer.is_finished() && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            if writer.is_finished() {
                let _ = writer.join();
            }
        }
    }
}

/// The writer thread: batches what is queued into single writes until the sender is dropped.
fn write_lines(rx: mpsc::Receiver<String>, outbox: &Outbox) {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut buf: Vec<u8> = Vec::with_capacity(64 * 1024);
    let mut broken = false;
    while let Ok(first) = rx.recv() {
        let mut lines = 1;
        push_line(&mut buf, &first);
        while buf.len() < WRITE_BATCH {
            match rx.try_recv() {
                Ok(line) => {
                    push_line(&mut buf, &line);
                    lines += 1;
                }
                Err(_) => break,
            }
        }
        if !broken {
            if let Err(error) = out.write_all(&buf).and_then(|()| out.flush()) {
                tracing::warn!(%error, "stdout is closed: the client stopped reading");
                broken = true;
                outbox.break_down();
            }
        }
        buf.clear();
        if buf.capacity() > 4 * WRITE_BATCH {
            buf.shrink_to(64 * 1024);
        }
        outbox.written(lines);
    }
}

fn push_line(buf: &mut Vec<u8>, line: &str) {
    buf.extend_from_slice(line.as_bytes());
    buf.push(b'\n');
}

/// The reader thread: frames stdin into lines until its end.
fn read_lines(mut tx: fmpsc::Sender<std::io::Result<String>>) {
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let mut line = Vec::with_capacity(64 * 1024);
    loop {
        line.clear();
        match read_line(&mut input, &mut line, MAX_LINE) {
            Ok(Framed::Eof) => break,
            Ok(Framed::Line) => {
                let text = match String::from_utf8(std::mem::take(&mut line)) {
                    Ok(text) => text,
                    Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
                };
                if text.trim().is_empty() {
                    continue;
                }
                if futures::executor::block_on(tx.send(Ok(text))).is_err() {
                    break;
                }
                if line.capacity() < 64 * 1024 {
                    line.reserve(64 * 1024);
                }
            }
            Ok(Framed::TooLong) => {
                tracing::warn!(
                    limit = MAX_LINE,
                    "a line from the client is too long; skipped"
                );
                // Not JSON: the connection answers a parse error (and echoes only this).
                let marker = format!("line longer than {MAX_LINE} bytes skipped");
                if futures::executor::block_on(tx.send(Ok(marker))).is_err() {
                    break;
                }
            }
            Err(error) => {
                tracing::warn!(%error, "cannot read stdin");
                break;
            }
        }
    }
}

/// What [`read_line`] read.
#[derive(Debug, PartialEq, Eq)]
enum Framed {
    /// A line (without its newline) in the buffer; the last one may lack its newline.
    Line,
    /// A line longer than the limit, skipped up to its newline.
    TooLong,
    /// The input is over.
    Eof,
}

/// Reads one line of at most `max` bytes into `line`.
fn read_line(input: &mut impl BufRead, line: &mut Vec<u8>, max: usize) -> std::io::Result<Framed> {
    let mut too_long = false;
    loop {
        let available = match input.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok(match (too_long, line.is_empty()) {
                (true, _) => Framed::TooLong,
                (false, true) => Framed::Eof,
                (false, false) => Framed::Line,
            });
        }
        let (chunk, found) = match available.iter().position(|b| *b == b'\n') {
            Some(i) => (&available[..i], Some(i + 1)),
            None => (available, None),
        };
        if !too_long {
            if line.len() + chunk.len() > max {
                too_long = true;
                line.clear();
            } else {
                line.extend_from_slice(chunk);
            }
        }
        let used = found.unwrap_or(available.len());
        input.consume(used);
        if found.is_some() {
            return Ok(if too_long {
                Framed::TooLong
            } else {
                Framed::Line
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_framed_and_long_ones_skipped() {
        let data = b"{\"a\":1}\n0123456789abcdef\nlast".to_vec();
        let mut input = std::io::BufReader::with_capacity(4, &data[..]);
        let mut line = Vec::new();
        let mut got = Vec::new();
        loop {
            line.clear();
            match read_line(&mut input, &mut line, 10).unwrap() {
                Framed::Eof => break,
                Framed::Line => got.push(String::from_utf8(line.clone()).unwrap()),
                Framed::TooLong => got.push("<too long>".into()),
            }
        }
        assert_eq!(got, ["{\"a\":1}", "<too long>", "last"]);
    }

    #[tokio::test]
    async fn the_outbox_holds_up_reservations_above_its_high_water() {
        let outbox = Outbox::new();
        for _ in 0..HIGH_WATER {
            outbox.reserve().await;
        }
        let waiting = {
            let outbox = outbox.clone();
            tokio::spawn(async move { outbox.reserve().await })
        };
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(!waiting.is_finished());
        outbox.written(10);
        waiting.await.unwrap();
        assert_eq!(outbox.pending(), HIGH_WATER - 9);
        // Lines the connection wrote by itself never take the count below zero.
        outbox.written(5 * HIGH_WATER);
        assert_eq!(outbox.pending(), 0);
    }
}
