//! The envelope log of one remote ACP server: every JSON-RPC envelope the agent side sends
//! (responses, `session/update`s, requests to the client), in order, numbered from 1, in an
//! append-only file — the source of the server's SSE stream.
//!
//! It is the ACP door's output what the session log is to the engine: an envelope is appended
//! (written to the file) before any reader sees it, readers hold only a cursor, and a reader
//! that falls behind reads the file, so none is ever skipped and a `Last-Event-ID` resume
//! continues exactly, also after the daemon was killed and restarted. Memory stays bounded: a
//! tail of recent envelopes for live readers and one file offset per [`INDEX_EVERY`] envelopes.
//!
//! Line `n` of the file is envelope `n` (compact JSON holds no newline). A line cut short by a
//! crash is dropped when the log is opened again.
//!
//! The file is opened for each append and each read from it, never held: a daemon keeps many
//! servers, and an idle one costs no file descriptor.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use crate::sync::LockExt;

/// One file offset is kept per this many envelopes.
pub const INDEX_EVERY: u64 = 256;
/// Recent envelopes kept in memory for live readers (by count and by bytes; at least one).
/// Every server holds its own, for as long as it lives: a streamed answer's envelopes are
/// large (~16 KB, hundreds of deltas each), and at 8 MiB one 100,000-delta flood kept all
/// 2.5 MB of them (heaptrack). A reader more than this behind reads the file.
const TAIL_COUNT: usize = 2048;
const TAIL_BYTES: usize = 1024 * 1024;

/// An envelope as stored: its number and its compact JSON.
pub type Envelope = (u64, Arc<str>);

/// The log of one server.
pub struct EnvelopeLog {
    path: PathBuf,
    state: Mutex<State>,
    /// The number of the last envelope written; readers wait on it.
    written: watch::Sender<u64>,
    /// Set once the server is gone: readers end after what was written.
    closed: watch::Sender<bool>,
}

struct State {
    /// Bytes in the file.
    len: u64,
    /// The number of the last envelope.
    last: u64,
    /// `index[k]` is the offset of envelope `k * INDEX_EVERY + 1`.
    index: Vec<u64>,
    tail: VecDeque<Envelope>,
    tail_bytes: usize,
}

impl EnvelopeLog {
    /// Opens (or creates) the log at `path`, dropping a last line a crash cut short.
    pub fn open(path: &Path) -> std::io::Result<EnvelopeLog> {
        let mut file = crate::private_files::options()
            .create(true)
            .read(true)
            .append(true)
            .open(path)?;
        let (len, last, index) = scan(&mut file)?;
        if file.metadata()?.len() != len {
            file.set_len(len)?;
        }
        drop(file);
        Ok(EnvelopeLog {
            path: path.to_owned(),
            state: Mutex::new(State {
                len,
                last,
                index,
                tail: VecDeque::new(),
                tail_bytes: 0,
            }),
            written: watch::Sender::new(last),
            closed: watch::Sender::new(false),
        })
    }

    /// The number of the last envelope written.
    pub fn last(&self) -> u64 {
        *self.written.borrow()
    }

    /// Appends `lines` (compact JSON, no newline) with one write; returns their numbers. Readers
    /// see them once the write is done.
    pub fn append(&self, lines: &[String]) -> std::io::Result<Vec<u64>> {
        if lines.is_empty() {
            return Ok(Vec::new());
        }
        let mut st = self.state.lock_unpoisoned();
        let mut buf = Vec::with_capacity(lines.iter().map(|l| l.len() + 1).sum());
        for line in lines {
            buf.extend_from_slice(line.as_bytes());
            buf.push(b'\n');
        }
        crate::private_files::options()
            .append(true)
            .open(&self.path)?
            .write_all(&buf)?;
        let mut numbers = Vec::with_capacity(lines.len());
        let mut offset = st.len;
        for line in lines {
            let n = st.last + 1;
            if (n - 1).is_multiple_of(INDEX_EVERY) {
                st.index.push(offset);
            }
            offset += line.len() as u64 + 1;
            st.last = n;
            st.tail_bytes += line.len();
            st.tail.push_back((n, Arc::from(line.as_str())));
            numbers.push(n);
        }
        st.len = offset;
        while st.tail.len() > 1 && (st.tail.len() > TAIL_COUNT || st.tail_bytes > TAIL_BYTES) {
            if let Some((_, old)) = st.tail.pop_front() {
                st.tail_bytes -= old.len();
            }
        }
        let last = st.last;
        drop(st);
        self.written.send_replace(last);
        Ok(numbers)
    }

    /// Up to `max` envelopes after number `after`, from memory when they are recent, else from
    /// the file (blocking: call it off the async workers, see [`EnvelopeLog::read_after_async`]).
    pub fn read_after(&self, after: u64, max: usize) -> std::io::Result<Vec<Envelope>> {
        let offset = {
            let st = self.state.lock_unpoisoned();
            if after >= st.last {
                return Ok(Vec::new());
            }
            if let Some((first, _)) = st.tail.front() {
                if after + 1 >= *first {
                    let skip = (after + 1 - first) as usize;
                    return Ok(st.tail.iter().skip(skip).take(max).cloned().collect());
                }
            }
            let block = (after / INDEX_EVERY) as usize;
            match st.index.get(block) {
                Some(offset) => (*offset, block as u64 * INDEX_EVERY, st.last),
                None => return Ok(Vec::new()),
            }
        };
        let (start, first_before, last) = offset;
        let mut file = File::open(&self.path)?;
        file.seek(SeekFrom::Start(start))?;
        let mut reader = BufReader::new(file);
        let mut number = first_before;
        let mut out = Vec::new();
        let mut line = String::new();
        while out.len() < max && number < last {
            line.clear();
            if reader.read_line(&mut line)? == 0 {
                break;
            }
            number += 1;
            if number <= after {
                continue;
            }
            let text = line.strip_suffix('\n').unwrap_or(&line);
            out.push((number, Arc::from(text)));
        }
        Ok(out)
    }

    /// Up to `max` envelopes after `after` when they are all in memory (or there are none).
    fn read_recent(&self, after: u64, max: usize) -> Option<Vec<Envelope>> {
        let st = self.state.lock_unpoisoned();
        if after >= st.last {
            return Some(Vec::new());
        }
        let first = st.tail.front()?.0;
        let skip = usize::try_from((after + 1).checked_sub(first)?).ok()?;
        Some(st.tail.iter().skip(skip).take(max).cloned().collect())
    }

    /// [`EnvelopeLog::read_after`], on the blocking pool when the file must be read (a live
    /// reader is served from memory on its own task).
    pub async fn read_after_async(
        self: &Arc<Self>,
        after: u64,
        max: usize,
    ) -> std::io::Result<Vec<Envelope>> {
        if let Some(recent) = self.read_recent(after, max) {
            return Ok(recent);
        }
        let log = self.clone();
        match tokio::task::spawn_blocking(move || log.read_after(after, max)).await {
            Ok(result) => result,
            Err(e) => Err(std::io::Error::other(e.to_string())),
        }
    }

    /// A receiver of the last envelope's number.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.written.subscribe()
    }

    /// A receiver that turns true once the server is gone.
    pub fn subscribe_closed(&self) -> watch::Receiver<bool> {
        self.closed.subscribe()
    }

    /// The server is gone: readers end once they have read everything.
    pub fn close(&self) {
        self.closed.send_replace(true);
    }

    /// True once [`EnvelopeLog::close`] was called.
    pub fn is_closed(&self) -> bool {
        *self.closed.borrow()
    }

    /// Makes what was written durable against a crash of the machine.
    pub fn sync(&self) -> std::io::Result<()> {
        let _st = self.state.lock_unpoisoned();
        crate::private_files::options()
            .append(true)
            .open(&self.path)?
            .sync_data()
    }
}

/// Reads the whole file once: its complete length, the number of whole lines, and the index.
fn scan(file: &mut File) -> std::io::Result<(u64, u64, Vec<u64>)> {
    file.seek(SeekFrom::Start(0))?;
    let mut reader = BufReader::with_capacity(256 * 1024, &mut *file);
    let mut index = Vec::new();
    let mut len = 0u64;
    let mut last = 0u64;
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let n = reader.read_until(b'\n', &mut buf)?;
        if n == 0 || buf.last() != Some(&b'\n') {
            break;
        }
        if last.is_multiple_of(INDEX_EVERY) {
            index.push(len);
        }
        last += 1;
        len += n as u64;
    }
    // The file is opened to append: the next write goes after `len` (once the cut is dropped).
    Ok((len, last, index))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "codebuffd-envelopes-{name}-{}",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join("envelopes.jsonl")
    }

    fn lines(from: u64, to: u64) -> Vec<String> {
        (from..=to).map(|i| format!("{{\"n\":{i}}}")).collect()
    }

    #[test]
    fn envelopes_are_numbered_and_read_back_from_memory_and_from_the_file() {
        let path = temp("read");
        let log = EnvelopeLog::open(&path).unwrap();
        for chunk in 0..5 {
            let first = chunk * 1000 + 1;
            let numbers = log.append(&lines(first, first + 999)).unwrap();
            assert_eq!(numbers.first(), Some(&first));
        }
        assert_eq!(log.last(), 5000);
        // Old ones come from the file (outside the tail), recent ones from memory.
        for after in [0, 1, 255, 256, 257, 2999, 4500, 4999] {
            let got = log.read_after(after, 300).unwrap();
            let want: Vec<u64> = (after + 1..=(after + 300).min(5000)).collect();
            assert_eq!(
                got.iter().map(|e| e.0).collect::<Vec<_>>(),
                want,
                "after {after}"
            );
            for (n, text) in &got {
                assert_eq!(&**text, format!("{{\"n\":{n}}}"));
            }
        }
        assert!(log.read_after(5000, 10).unwrap().is_empty());
        assert_eq!(log.read_recent(4990, 5).unwrap()[0].0, 4991);
        assert!(
            log.read_recent(0, 5).is_none(),
            "old ones are not in memory"
        );
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }

    #[test]
    fn a_reopened_log_continues_its_numbers_and_drops_a_cut_line() {
        let path = temp("reopen");
        {
            let log = EnvelopeLog::open(&path).unwrap();
            log.append(&lines(1, 600)).unwrap();
        }
        // A crash in the middle of a write.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"{\"n\":60")
            .unwrap();
        let log = EnvelopeLog::open(&path).unwrap();
        assert_eq!(log.last(), 600);
        assert_eq!(log.append(&lines(601, 601)).unwrap(), [601]);
        let got = log.read_after(590, 100).unwrap();
        assert_eq!(got.len(), 11);
        assert_eq!(&*got[10].1, "{\"n\":601}");
        let got = log.read_after(0, 2).unwrap();
        assert_eq!(&*got[1].1, "{\"n\":2}");
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }
}
