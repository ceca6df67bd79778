//! The mock agent's stdin after its turn line: one reader thread for the whole run hands the
//! lines (answers to questions, replies to permission requests) to whoever waits for one, so
//! several waits in one run never compete for the stream.

use std::io::{self, BufRead};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Mutex, OnceLock};
use std::thread;
use std::time::Instant;

use crate::sync::LockExt;

/// Longest stdin line considered; longer ones are ignored.
const MAX_LINE_BYTES: usize = 1024 * 1024;

/// What a wait for a line got.
pub(super) enum Next {
    Line(Vec<u8>),
    TimedOut,
    Closed,
}

/// The lines the reader thread has read, in order.
fn lines() -> &'static Mutex<Receiver<Line>> {
    static LINES: OnceLock<Mutex<Receiver<Line>>> = OnceLock::new();
    LINES.get_or_init(|| {
        let (tx, rx) = mpsc::channel();
        // It may stay blocked in `read` after the run is over; it ends with the process.
        let spawned = thread::Builder::new()
            .name("mock-stdin".into())
            .spawn(move || {
                let stdin = io::stdin();
                let mut input = stdin.lock();
                while let Ok(Some(line)) = read_bounded_line(&mut input, MAX_LINE_BYTES) {
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
        if let Err(e) = spawned {
            eprintln!("mock-agent: cannot read stdin ({e})");
        }
        Mutex::new(rx)
    })
}

/// The next stdin line, waiting until `deadline` (`None`: for ever); oversized lines are
/// skipped with a note.
pub(super) fn next_line(deadline: Option<Instant>) -> Next {
    let rx = lines().lock_unpoisoned();
    loop {
        let received = match deadline {
            Some(deadline) => rx.recv_timeout(deadline.saturating_duration_since(Instant::now())),
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        match received {
            Ok(Line::Text(bytes)) => return Next::Line(bytes),
            Ok(Line::TooLong) => eprintln!("mock-agent: ignoring an oversized stdin line"),
            Err(RecvTimeoutError::Timeout) => return Next::TimedOut,
            Err(RecvTimeoutError::Disconnected) => return Next::Closed,
        }
    }
}

/// One line read from stdin.
#[derive(Debug, PartialEq)]
enum Line {
    /// The line's bytes, without the `\n`.
    Text(Vec<u8>),
    /// A line longer than the limit (its bytes were skipped).
    TooLong,
}

/// Reads one line of at most `max` bytes; `None` at end of input. Never buffers more than `max`.
fn read_bounded_line(input: &mut impl BufRead, max: usize) -> io::Result<Option<Line>> {
    let mut line = Vec::new();
    let mut too_long = false;
    let mut started = false;
    loop {
        let chunk = match input.fill_buf() {
            Ok(chunk) => chunk,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if chunk.is_empty() {
            return Ok(started.then(|| finished(line, too_long)));
        }
        started = true;
        let newline = chunk.iter().position(|&b| b == b'\n');
        let part = &chunk[..newline.unwrap_or(chunk.len())];
        if !too_long && line.len() + part.len() > max {
            too_long = true;
            line = Vec::new();
        }
        if !too_long {
            line.extend_from_slice(part);
        }
        let used = newline.map_or(chunk.len(), |i| i + 1);
        input.consume(used);
        if newline.is_some() {
            return Ok(Some(finished(line, too_long)));
        }
    }
}

fn finished(line: Vec<u8>, too_long: bool) -> Line {
    if too_long {
        Line::TooLong
    } else {
        Line::Text(line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stdin_lines_are_bounded() {
        let mut input = io::Cursor::new(b"short\nthis one is too long\n\nlast".to_vec());
        let mut read = || read_bounded_line(&mut input, 8).unwrap();
        assert_eq!(read(), Some(Line::Text(b"short".to_vec())));
        assert_eq!(read(), Some(Line::TooLong));
        assert_eq!(read(), Some(Line::Text(Vec::new())));
        assert_eq!(read(), Some(Line::Text(b"last".to_vec())));
        assert_eq!(read(), None);
    }
}
