//! The mock agent's stdin after its turn line: one reader thread for the whole run hands the
//! lines (answers to questions, replies to permission requests) to whoever waits for one, so
//! several waits in one run never compete for the stream.

use crate::sync::LockExt;
use std::io;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Mutex, OnceLock};
use std::thread;
use std::time::Instant;

use super::ask::{read_bounded_line, Line};

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
