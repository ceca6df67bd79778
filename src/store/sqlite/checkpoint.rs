//! WAL checkpoints on a thread of their own, so the writer never waits for one.
//!
//! A checkpoint copies the WAL back into the database file and syncs both. SQLite's automatic
//! checkpoint runs inside the commit that crosses its threshold: the writer then stood still
//! for the copy and two fsyncs while appends queued up behind it. Here the writer only counts
//! what it committed; past [`THRESHOLD`] bytes this thread runs a passive checkpoint (which
//! never blocks the writer or readers) on its own connection.

use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use rusqlite::Connection;

use crate::store::StoreError;
use crate::sync::{unpoisoned, LockExt};

/// Bytes committed between checkpoints (SQLite's own default is 1000 pages, about 4 MiB).
const THRESHOLD: usize = 4 << 20;

#[derive(Default)]
struct State {
    /// Bytes committed since the last checkpoint began.
    written: usize,
    stop: bool,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

/// The checkpoint thread; dropping it stops the thread (the last connection to close then
/// checkpoints what is left).
pub(super) struct Checkpointer {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Checkpointer {
    /// Starts the thread around a connection to the database.
    pub fn spawn(conn: Connection) -> Result<Self, StoreError> {
        let shared = Arc::new(Shared::default());
        let thread = std::thread::Builder::new()
            .name("codebuffd-sqlite-checkpoint".into())
            .spawn({
                let shared = shared.clone();
                move || run(&conn, &shared)
            })
            .map_err(|e| StoreError::Backend(format!("cannot start the checkpoint thread: {e}")))?;
        Ok(Checkpointer {
            shared,
            thread: Some(thread),
        })
    }

    /// Counts `bytes` the writer just committed, waking the thread past the threshold.
    pub fn committed(&self, bytes: usize) {
        let mut state = self.shared.state.lock_unpoisoned();
        let before = state.written;
        state.written = before.saturating_add(bytes);
        if before < THRESHOLD && state.written >= THRESHOLD {
            self.shared.wake.notify_one();
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.shared.state.lock_unpoisoned().stop = true;
        self.shared.wake.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn run(conn: &Connection, shared: &Shared) {
    loop {
        {
            let mut state = shared.state.lock_unpoisoned();
            while !state.stop && state.written < THRESHOLD {
                state = unpoisoned(shared.wake.wait(state));
            }
            if state.stop {
                return;
            }
            state.written = 0;
        }
        // (busy, frames in the WAL, frames copied): nothing to act on either way; a busy or
        // partial checkpoint is simply taken up again by the next one.
        if let Err(error) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
            tracing::warn!(%error, "checkpointing the SQLite WAL failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wal_frames(conn: &Connection) -> (i64, i64) {
        conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
            Ok((r.get(1)?, r.get(2)?))
        })
        .unwrap()
    }

    #[test]
    fn the_thread_checkpoints_once_enough_was_committed() {
        let dir = std::env::temp_dir().join(format!("codebuffd-ckpt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.db");
        let writer = Connection::open(&path).unwrap();
        writer
            .execute_batch(
                "PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0; CREATE TABLE t (x BLOB);",
            )
            .unwrap();
        let checkpointer = Checkpointer::spawn(Connection::open(&path).unwrap()).unwrap();
        let blob = vec![7u8; 64 * 1024];
        for _ in 0..80 {
            writer
                .execute("INSERT INTO t VALUES (?1)", [&blob])
                .unwrap();
            checkpointer.committed(blob.len());
        }
        // 5 MiB committed: the thread checkpoints on its own, without the writer.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let probe = Connection::open(&path).unwrap();
        loop {
            let db_pages: i64 = probe
                .query_row("SELECT page_count FROM pragma_page_count", [], |r| r.get(0))
                .unwrap();
            let on_disk = std::fs::metadata(&path).unwrap().len();
            if on_disk >= 4 << 20 && db_pages > 0 {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "no checkpoint ran");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        drop(checkpointer);
        let (frames, copied) = wal_frames(&writer);
        assert_eq!(frames, copied);
        drop((writer, probe));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
