//! WAL checkpoints on a thread of their own, so the writer never waits for one, except
//! briefly when the WAL would otherwise grow without end.
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
//! (measured), on disk for good, and every frame appended to a growing file costs the kernel
//! about twice what overwriting one does (block allocation). So once a checkpoint finds the WAL
//! past [`CATCH_UP_AT`], the writer waits before its next
//! transaction ([`Checkpointer::let_catch_up`]) while this thread copies the rest (a few
//! milliseconds: most of it was copied already); that transaction then starts the WAL over.
//! When it cannot (a reader still reads an old snapshot, another process writes), the writer
//! goes on and the next try waits until the WAL has grown by [`CATCH_UP_AT`] again.

use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::Connection;

use crate::store::StoreError;
use crate::sync::{unpoisoned, LockExt};

/// Bytes committed between checkpoints (SQLite's own default is 1000 pages, about 4 MiB).
const THRESHOLD: usize = 4 << 20;

/// WAL size from which the writer lets a checkpoint catch up (see the module's doc).
const CATCH_UP_AT: usize = 4 * THRESHOLD;

/// The longest the writer waits for a catch-up: past it (a checkpoint slowed by a busy disk),
/// it writes on beside the checkpoint, as it does without one.
const CATCH_UP_WAIT: Duration = Duration::from_millis(500);

/// Where the writer and this thread are with a catch-up.
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
enum CatchUp {
    #[default]
    No,
    /// A checkpoint could not copy a WAL past [`CATCH_UP_AT`]: the writer should wait.
    Asked,
    /// The writer waits until this thread has run a checkpoint.
    WriterWaits,
}

struct State {
    /// Bytes committed since the last checkpoint began.
    written: usize,
    catch_up: CatchUp,
    /// WAL frames from which a checkpoint asks for a catch-up.
    ask_at_frames: i64,
    /// WAL frames the last checkpoint found (fewer now: the WAL started over meanwhile).
    last_frames: i64,
    /// Catch-ups the writer waited for (tests count them).
    waits: u64,
    stop: bool,
}

struct Shared {
    state: Mutex<State>,
    /// Wakes this thread: enough written, a writer waiting, or stop.
    wake: Condvar,
    /// Wakes the writer waiting for a catch-up.
    caught_up: Condvar,
    /// [`CATCH_UP_AT`] in frames of this database's page size.
    catch_up_frames: i64,
    /// [`CATCH_UP_WAIT`] (longer in tests, whose debug-built checkpoints on a loaded machine
    /// can take longer).
    catch_up_wait: Duration,
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
        Self::spawn_with(conn, CATCH_UP_WAIT)
    }

    fn spawn_with(conn: Connection, catch_up_wait: Duration) -> Result<Self, StoreError> {
        let page_size: i64 = conn
            .query_row("PRAGMA page_size", [], |r| r.get(0))
            .map_err(|e| StoreError::Backend(format!("SQLite: {e}")))?;
        let catch_up_frames = CATCH_UP_AT as i64 / page_size.max(512);
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                written: 0,
                catch_up: CatchUp::No,
                ask_at_frames: catch_up_frames,
                last_frames: 0,
                waits: 0,
                stop: false,
            }),
            wake: Condvar::new(),
            caught_up: Condvar::new(),
            catch_up_frames,
            catch_up_wait,
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

    /// Called by the writer before each transaction: when a checkpoint asked for it, waits
    /// (at most [`CATCH_UP_WAIT`]) while this thread copies what is left of the WAL, so that
    /// the transaction starts the WAL over. Returns at once otherwise.
    pub fn let_catch_up(&self) {
        let mut state = self.shared.state.lock_unpoisoned();
        if state.catch_up != CatchUp::Asked {
            return;
        }
        state.catch_up = CatchUp::WriterWaits;
        state.waits += 1;
        self.shared.wake.notify_one();
        let started = std::time::Instant::now();
        let (mut state, _) = unpoisoned(self.shared.caught_up.wait_timeout_while(
            state,
            self.shared.catch_up_wait,
            |s| s.catch_up == CatchUp::WriterWaits && !s.stop,
        ));
        let waited = started.elapsed();
        if state.catch_up == CatchUp::WriterWaits {
            // Too slow: write on; the checkpoint under way goes on beside the writer.
            state.catch_up = CatchUp::No;
            tracing::debug!(?waited, "the WAL's checkpoint did not catch up in time");
        } else {
            tracing::debug!(?waited, "the WAL's checkpoint caught up");
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.shared.state.lock_unpoisoned().stop = true;
        self.shared.wake.notify_one();
        self.shared.caught_up.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn run(conn: &Connection, shared: &Shared) {
    loop {
        let catching_up = {
            let mut state = shared.state.lock_unpoisoned();
            while !state.stop && state.written < THRESHOLD && state.catch_up != CatchUp::WriterWaits
            {
                state = unpoisoned(shared.wake.wait(state));
            }
            if state.stop {
                return;
            }
            state.written = 0;
            state.catch_up == CatchUp::WriterWaits
        };
        // (busy, frames in the WAL, frames copied); a busy or partial checkpoint is simply
        // taken up again by the next one.
        let result = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
            Ok((r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))
        });
        let mut state = shared.state.lock_unpoisoned();
        match result {
            Ok((frames, copied)) => {
                after_checkpoint(&mut state, shared, frames, copied, catching_up)
            }
            Err(error) => {
                tracing::warn!(%error, "checkpointing the SQLite WAL failed");
                if catching_up {
                    state.catch_up = CatchUp::No;
                }
            }
        }
        if catching_up {
            shared.caught_up.notify_all();
        }
    }
}

/// What a checkpoint that found `frames` frames in the WAL and copied `copied` of them means
/// for catching up (see the module's doc). The WAL's length, not whether the checkpoint copied
/// all it saw, says whether the WAL has started over lately: the writer commits while a
/// checkpoint runs, so one that copies all of its snapshot still leaves newer frames behind.
fn after_checkpoint(
    state: &mut State,
    shared: &Shared,
    frames: i64,
    copied: i64,
    catching_up: bool,
) {
    if frames < 0 {
        // Busy: another process's checkpoint runs; it copies for this one.
        if catching_up {
            state.catch_up = CatchUp::No;
        }
        return;
    }
    if frames < state.last_frames {
        // The WAL started over since the last checkpoint.
        state.ask_at_frames = shared.catch_up_frames;
    }
    state.last_frames = frames;
    if catching_up {
        state.catch_up = CatchUp::No;
        // If the next transaction cannot start the WAL over (a reader holds it, another
        // process wrote first), the next try waits until it has grown as much again, or
        // until a checkpoint copies all it sees.
        state.ask_at_frames = frames.saturating_add(shared.catch_up_frames);
        tracing::debug!(frames, copied, "catch-up checkpoint");
    } else if frames >= shared.catch_up_frames
        && (copied >= frames || frames >= state.ask_at_frames)
        && state.catch_up == CatchUp::No
    {
        // Past the size, and either nobody holds the WAL (this checkpoint copied all it saw:
        // a catch-up will very likely start it over) or it is time to try again anyway.
        tracing::debug!(
            frames,
            copied,
            "the WAL grows: asking the writer to let it catch up"
        );
        state.catch_up = CatchUp::Asked;
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

    /// A database with a checkpoint thread, as the store opens it (WAL, no automatic
    /// checkpoints; the WAL file cut back whenever it starts over, so its length shows when).
    fn scratch(tag: &str) -> (std::path::PathBuf, Connection, Checkpointer) {
        let dir = std::env::temp_dir().join(format!("codebuffd-ckpt-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.db");
        let writer = Connection::open(&path).unwrap();
        writer
            .execute_batch(
                "PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0; PRAGMA synchronous=NORMAL; \
                 PRAGMA journal_size_limit=0; CREATE TABLE t (x BLOB);",
            )
            .unwrap();
        // The writer waits for each catch-up however slow a loaded machine makes it: what is
        // tested is when it asks, not how fast a debug build copies.
        let checkpointer =
            Checkpointer::spawn_with(Connection::open(&path).unwrap(), Duration::from_secs(60))
                .unwrap();
        (dir, writer, checkpointer)
    }

    /// Writes `mib` MiB in 64 KiB transactions back to back, as the writer thread does;
    /// returns the longest the WAL file was meanwhile.
    fn write_on(
        dir: &std::path::Path,
        writer: &Connection,
        checkpointer: &Checkpointer,
        mib: usize,
    ) -> u64 {
        let blob = vec![7u8; 64 * 1024];
        let mut longest = 0;
        for _ in 0..mib * 16 {
            checkpointer.let_catch_up();
            writer
                .execute("INSERT INTO t VALUES (?1)", [&blob])
                .unwrap();
            checkpointer.committed(blob.len());
            longest = longest.max(wal_len(dir));
        }
        longest
    }

    fn wal_len(dir: &std::path::Path) -> u64 {
        std::fs::metadata(dir.join("t.db-wal")).unwrap().len()
    }

    /// What the WAL may reach with catching up: [`CATCH_UP_AT`], the threshold's granularity,
    /// and what the writer adds while a (debug-built, loaded) checkpoint runs; well under the
    /// 106 MiB that 96 MiB of rows make without.
    const BOUND: u64 = 64 << 20;

    #[test]
    fn a_writer_that_never_pauses_still_gets_its_wal_started_over() {
        let (dir, writer, checkpointer) = scratch("catch-up");
        // 96 MiB without a pause: no checkpoint beside the writer could ever copy all of it,
        // so without catching up the WAL would hold all of it.
        let longest = write_on(&dir, &writer, &checkpointer, 96);
        assert!(
            longest < BOUND,
            "the WAL grew to {longest} bytes while 96 MiB were written"
        );
        drop((checkpointer, writer));
        let _ = std::fs::remove_dir_all(&dir);
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
        let held = write_on(&dir, &writer, &checkpointer, 56);
        assert!(
            held > 56 << 20,
            "the WAL was started over under a reader: {held}"
        );
        // A failed catch-up is tried again only once the WAL grew by CATCH_UP_AT: the writer
        // waited about every 16 MiB, not before each of its 896 transactions.
        let waits = checkpointer.shared.state.lock_unpoisoned().waits;
        assert!(
            (1..=4).contains(&waits),
            "{waits} catch-ups beside a held WAL"
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
        let longest = write_on(&dir, &writer, &checkpointer, 40);
        assert!(
            longest < BOUND,
            "the WAL grew to {longest} bytes after the reader let go"
        );
        drop((checkpointer, writer, reader));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
