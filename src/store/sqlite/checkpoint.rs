//! WAL checkpoints on a thread of their own, so the writer never waits for one, except for a
//! short one of its own when the WAL would otherwise grow without end.
//!
//! A checkpoint copies the WAL back into the database file and syncs both. SQLite's automatic
//! checkpoint runs inside the commit that crosses its threshold: the writer then stood still
//! for the copy and two fsyncs while appends queued up behind it. Here the writer only counts
//! what it committed; past [`THRESHOLD`] bytes this thread runs a passive checkpoint (which
//! never blocks the writer or readers) on its own connection.
//!
//! **Catching up.** SQLite writes the WAL from its start again only when a transaction begins
//! after a checkpoint copied *all* of it. While events keep coming (a flood, or many sessions
//! at once), the writer commits during every checkpoint, none of them copies everything, and
//! the WAL only grows: a flood of 1,000,000 events left a 444 MB WAL beside a 350 MB database
//! (measured), on disk for good, every frame appended to a growing file. So once a checkpoint
//! of this thread finds the WAL past [`CATCH_UP_AT`], the writer, before its next transaction,
//! checkpoints what was committed during that one ([`Checkpointer::catch_up`]: the copy of a
//! few MiB and two fsyncs, on its own thread, so no wake-up of another thread on a busy
//! machine is added to it; this thread waits meanwhile), and that transaction starts the WAL
//! over. When it cannot (a reader still reads an old snapshot, another process writes or
//! checkpoints), the writer goes on; the next try waits until the WAL has grown by
//! [`CATCH_UP_AT`] again, or until a checkpoint copies all it sees.

use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use rusqlite::Connection;

use crate::store::StoreError;
use crate::sync::{unpoisoned, LockExt};

/// Bytes committed between checkpoints (SQLite's own default is 1000 pages, about 4 MiB).
const THRESHOLD: usize = 4 << 20;

/// WAL size from which the writer catches up (see the module's doc). Each catch-up holds the
/// appends back for a moment: rare enough not to show in the latency of a steady stream.
const CATCH_UP_AT: usize = 64 << 20;

struct State {
    /// Bytes committed since the last checkpoint began.
    written: usize,
    /// A checkpoint of this thread found the WAL long: the writer should catch up.
    asked: bool,
    /// WAL frames from which a checkpoint asks for a catch-up.
    ask_at_frames: i64,
    /// WAL frames the last checkpoint found (fewer now: the WAL started over meanwhile).
    last_frames: i64,
    /// Catch-ups the writer ran (tests count them).
    catch_ups: u64,
    stop: bool,
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    /// [`CATCH_UP_AT`] (smaller in tests) in frames of this database's page size.
    catch_up_frames: i64,
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
        Self::spawn_with(conn, CATCH_UP_AT)
    }

    fn spawn_with(conn: Connection, catch_up_at: usize) -> Result<Self, StoreError> {
        let page_size: i64 = conn
            .query_row("PRAGMA page_size", [], |r| r.get(0))
            .map_err(|e| StoreError::Backend(format!("SQLite: {e}")))?;
        let catch_up_frames = catch_up_at as i64 / page_size.max(512);
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                written: 0,
                asked: false,
                ask_at_frames: catch_up_frames,
                last_frames: 0,
                catch_ups: 0,
                stop: false,
            }),
            wake: Condvar::new(),
            catch_up_frames,
        });
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

    /// Called by the writer before each transaction, on its connection `conn`: when a
    /// checkpoint asked for it, checkpoints what is left of the WAL, so that the transaction
    /// starts the WAL over. Returns at once otherwise.
    pub fn catch_up(&self, conn: &Connection) {
        {
            let mut state = self.shared.state.lock_unpoisoned();
            if !state.asked {
                return;
            }
            state.asked = false;
            state.catch_ups += 1;
        }
        let started = std::time::Instant::now();
        let result = checkpoint(conn);
        let mut state = self.shared.state.lock_unpoisoned();
        self.shared.wake.notify_one();
        match result {
            // Another process's checkpoint runs: try again at the next transaction.
            Ok((-1, _)) => state.asked = true,
            Ok((frames, copied)) => {
                after_checkpoint(&mut state, &self.shared, frames, copied, true);
                tracing::debug!(frames, copied, took = ?started.elapsed(), "the WAL caught up");
            }
            Err(error) => tracing::warn!(%error, "checkpointing the SQLite WAL failed"),
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

/// A passive checkpoint: (frames in the WAL, frames copied), both -1 when another
/// checkpoint runs.
fn checkpoint(conn: &Connection) -> rusqlite::Result<(i64, i64)> {
    conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
        Ok((r.get(1)?, r.get(2)?))
    })
}

fn run(conn: &Connection, shared: &Shared) {
    loop {
        {
            let mut state = shared.state.lock_unpoisoned();
            // While the writer is to catch up, it checkpoints: one of this thread's would hold
            // the lock it needs (a flood keeps this thread checkpointing back to back).
            while !state.stop && (state.written < THRESHOLD || state.asked) {
                state = unpoisoned(shared.wake.wait(state));
            }
            if state.stop {
                return;
            }
            state.written = 0;
        }
        // A busy or partial checkpoint is simply taken up again by the next one.
        match checkpoint(conn) {
            Ok((frames, copied)) => {
                let mut state = shared.state.lock_unpoisoned();
                after_checkpoint(&mut state, shared, frames, copied, false);
            }
            Err(error) => tracing::warn!(%error, "checkpointing the SQLite WAL failed"),
        }
    }
}

/// What a checkpoint that found `frames` frames in the WAL and copied `copied` of them means
/// for catching up (see the module's doc); `caught_up` for the writer's own. The WAL's length,
/// not whether the checkpoint copied all it saw, says whether the WAL has started over lately:
/// the writer commits while this thread's checkpoint runs, so one that copies all of its
/// snapshot still leaves newer frames behind.
fn after_checkpoint(state: &mut State, shared: &Shared, frames: i64, copied: i64, caught_up: bool) {
    if frames < 0 {
        // Busy: another process's checkpoint runs; it copies for this one.
        return;
    }
    if frames < state.last_frames {
        // The WAL started over since the last checkpoint.
        state.ask_at_frames = shared.catch_up_frames;
    }
    state.last_frames = frames;
    if caught_up {
        // If the next transaction cannot start the WAL over (a reader holds it, another
        // process wrote first), the next try waits until it has grown as much again, or
        // until a checkpoint copies all it sees.
        state.ask_at_frames = frames.saturating_add(shared.catch_up_frames);
    } else if frames >= shared.catch_up_frames
        && (copied >= frames || frames >= state.ask_at_frames)
    {
        // Past the size, and either nobody holds the WAL (this checkpoint copied all it saw:
        // a catch-up will very likely start it over) or it is time to try again anyway.
        tracing::debug!(frames, copied, "the WAL grows: the writer is to catch up");
        state.asked = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_thread_checkpoints_once_enough_was_committed() {
        let (dir, writer, checkpointer) = scratch("threshold");
        let path = dir.join("t.db");
        // 5 MiB committed (far below a catch-up's 16 MiB): the thread checkpoints on its own,
        // without the writer.
        write_on(&dir, &writer, &checkpointer, 5);
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
        let (frames, copied) = checkpoint(&writer).unwrap();
        assert_eq!(frames, copied);
        drop((writer, probe));
    }

    /// A scratch directory, removed when dropped: also when a test fails.
    struct ScratchDir(std::path::PathBuf);

    impl std::ops::Deref for ScratchDir {
        type Target = std::path::Path;
        fn deref(&self) -> &std::path::Path {
            &self.0
        }
    }

    impl Drop for ScratchDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// A database with a checkpoint thread, as the store opens it (WAL, no automatic
    /// checkpoints; the WAL file cut back whenever it starts over, so its length shows when).
    /// Bound as `let (dir, writer, checkpointer)`, the directory goes last.
    fn scratch(tag: &str) -> (ScratchDir, Connection, Checkpointer) {
        let dir = ScratchDir(
            std::env::temp_dir().join(format!("codebuffd-ckpt-{tag}-{}", std::process::id())),
        );
        let _ = std::fs::remove_dir_all(&*dir);
        std::fs::create_dir_all(&*dir).unwrap();
        let path = dir.join("t.db");
        let writer = Connection::open(&path).unwrap();
        writer
            .execute_batch(
                "PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0; PRAGMA synchronous=NORMAL; \
                 PRAGMA journal_size_limit=0; CREATE TABLE t (x BLOB);",
            )
            .unwrap();
        // Catching up from 16 MiB keeps the tests' writes small.
        let checkpointer =
            Checkpointer::spawn_with(Connection::open(&path).unwrap(), TEST_CATCH_UP_AT).unwrap();
        (dir, writer, checkpointer)
    }

    /// What writing showed of the WAL file.
    #[derive(Default)]
    struct Seen {
        /// The longest the file was.
        longest: u64,
        /// How often it started over (its file is cut back then, so it got shorter).
        restarts: usize,
    }

    /// Writes `mib` MiB in 64 KiB transactions back to back, as the writer thread does, over
    /// the same 64 rows (the database stays small; the WAL gets every write).
    fn write_on(
        dir: &std::path::Path,
        writer: &Connection,
        checkpointer: &Checkpointer,
        mib: usize,
    ) -> Seen {
        let blob = vec![7u8; 64 * 1024];
        let mut seen = Seen::default();
        let mut last = wal_len(dir);
        for row in 0..mib * 16 {
            checkpointer.catch_up(writer);
            writer
                .execute(
                    "INSERT OR REPLACE INTO t (rowid, x) VALUES (?1, ?2)",
                    rusqlite::params![(row % 64) as i64, &blob],
                )
                .unwrap();
            checkpointer.committed(blob.len());
            let len = wal_len(dir);
            if len < last {
                seen.restarts += 1;
            }
            last = len;
            seen.longest = seen.longest.max(len);
        }
        seen
    }

    /// Writes until the WAL started over `times` times; fails past `most` MiB.
    fn write_until_restarted(
        dir: &std::path::Path,
        writer: &Connection,
        checkpointer: &Checkpointer,
        times: usize,
        most: usize,
    ) {
        let (mut restarts, mut longest, mut written) = (0, 0, 0);
        while restarts < times {
            assert!(
                written < most,
                "the WAL started over {restarts} times in {written} MiB (longest {longest} bytes)"
            );
            let seen = write_on(dir, writer, checkpointer, 8);
            restarts += seen.restarts;
            longest = longest.max(seen.longest);
            written += 8;
        }
    }

    fn wal_len(dir: &std::path::Path) -> u64 {
        std::fs::metadata(dir.join("t.db-wal")).map_or(0, |m| m.len())
    }

    const TEST_CATCH_UP_AT: usize = 16 << 20;

    /// How far the WAL grows before it starts over depends on how long a checkpoint takes
    /// beside the writer (the disk's fsyncs, a loaded machine: a CI run saw 73 MiB where a
    /// quiet one sees 20); the tests assert that it keeps starting over, which without
    /// catching up it does not do at all (checked: both tests then fail, the first with a
    /// 641 MB WAL after 512 MiB written).
    #[test]
    fn a_writer_that_never_pauses_still_gets_its_wal_started_over() {
        let (dir, writer, checkpointer) = scratch("catch-up");
        // No checkpoint beside a writer that never pauses can copy all of the WAL.
        write_until_restarted(&dir, &writer, &checkpointer, 3, 512);
        drop((checkpointer, writer));
    }

    #[test]
    fn a_reader_holding_the_wal_delays_the_restart_without_stopping_the_writer() {
        let (dir, writer, checkpointer) = scratch("held");
        // A read transaction open on an early snapshot: no checkpoint can copy what came
        // after it, so no catch-up can succeed while it is open.
        write_on(&dir, &writer, &checkpointer, 1);
        let reader = Connection::open(dir.join("t.db")).unwrap();
        reader.execute_batch("BEGIN").unwrap();
        let _: i64 = reader
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap();
        let seen = write_on(&dir, &writer, &checkpointer, 56);
        let held = seen.longest;
        assert!(
            seen.restarts == 0 && held > 56 << 20,
            "the WAL was started over under a reader: {held}"
        );
        // A failed catch-up is tried again only once the WAL grew by 16 MiB again: the writer
        // caught up about every 16 MiB, not before each of its 896 transactions.
        let catch_ups = checkpointer.shared.state.lock_unpoisoned().catch_ups;
        assert!(
            (1..=4).contains(&catch_ups),
            "{catch_ups} catch-ups beside a held WAL"
        );
        // Once the reader lets go, the WAL starts over (and its file is cut back) as soon as
        // a checkpoint copies all the WAL holds, without waiting for the next 16 MiB.
        reader.execute_batch("COMMIT").unwrap();
        let mut written = 0;
        while wal_len(&dir) >= held {
            assert!(written < 256, "the WAL did not start over in {written} MiB");
            write_on(&dir, &writer, &checkpointer, 1);
            written += 1;
        }
        // And from then on it keeps starting over.
        write_until_restarted(&dir, &writer, &checkpointer, 2, 512);
        drop((checkpointer, writer, reader));
    }
}
