//! One session's log as a durable store holds it in memory: a small tail of recent events (so
//! live readers never touch the database) and two watermarks.
//!
//! * `committed`: the last sequence the writer has made durable. Only committed events may
//!   leave the tail, so everything before the tail is in the database.
//! * `visible`: the last sequence readers may see (`read`, `last_sequence`, `subscribe`).
//!   It runs ahead of `committed` for ordinary events (unless the store shows events only
//!   once committed), but never past an uncommitted `session.started`, `turn.ended` or
//!   `session.ended` (see [`super::batched`]).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::StoredEvent;
use crate::sync::LockExt;

/// How many capacities of committed events the tail may hold for readers behind it.
const READERS_KEPT: u64 = 2;
/// How long a read keeps the events after it from eviction (see [`Tail::evict`]): about
/// half of it to a whole of it.
const READ_WINDOW: Duration = Duration::from_millis(500);

/// A session's tail and watermarks.
pub(crate) struct SessionLog {
    pub session_id: Arc<str>,
    tail: Mutex<Tail>,
    visible: watch::Sender<u64>,
    /// The writer raises `visible` as it commits (see `StoreOptions::visible_after_commit`).
    visible_on_commit: bool,
    /// Held for a whole append, so a later append cannot become visible before an earlier
    /// one that waits for its commit.
    appending: Mutex<()>,
    /// The store's epoch at this log's last append (see [`SessionLog::rewind_unless`]).
    epoch: std::sync::atomic::AtomicU64,
    /// True while this process appends to the session (it created or claimed it); false
    /// while another engine may: readers then catch up from the database.
    appends_here: std::sync::atomic::AtomicBool,
}

/// The room a tail keeps however empty it gets (in events; 12 KiB).
const MIN_ROOM: usize = 256;
/// The room a tail grows by, and keeps over what it holds when it shrinks: a quarter.
const ROOM_STEP: usize = 4;

/// Recent events, contiguous, ending at `last`.
pub(crate) struct Tail {
    events: VecDeque<StoredEvent>,
    last: u64,
    committed: u64,
    /// The first sequence of the last commit: events from here on stay (see [`Tail::evict`]).
    last_commit_from: u64,
    /// The lowest sequence readers asked for since `read_since`, and in the half window
    /// before it (`u64::MAX`: no read); see [`Tail::evict`].
    read_from: [u64; 2],
    read_since: Instant,
    read_window: Duration,
    capacity: usize,
    /// Events from here on keep their raw agent line; the committed ones before it had theirs
    /// dropped (see [`Tail::evict`]): a reader that wants raw lines reads those from the
    /// database ([`Tail::first_with`]).
    raw_from: u64,
    /// The sequence of an appended `session.ended`: nothing more will be appended, so keep
    /// nothing once committed.
    closed_at: Option<u64>,
}

impl SessionLog {
    /// A log whose events up to `last` are all in the database.
    pub fn new(session_id: &str, last: u64, capacity: usize, visible_on_commit: bool) -> Self {
        let (visible, _) = watch::channel(last);
        SessionLog {
            session_id: session_id.into(),
            tail: Mutex::new(Tail {
                events: VecDeque::new(),
                last,
                committed: last,
                last_commit_from: last + 1,
                read_from: [u64::MAX; 2],
                read_since: Instant::now(),
                read_window: READ_WINDOW,
                capacity,
                raw_from: last + 1,
                closed_at: None,
            }),
            visible,
            visible_on_commit,
            appending: Mutex::new(()),
            epoch: std::sync::atomic::AtomicU64::new(0),
            appends_here: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// True while this process appends to the session.
    pub fn appends_here(&self) -> bool {
        self.appends_here.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Says whether this process appends to the session now.
    pub fn set_appends_here(&self, here: bool) {
        self.appends_here
            .store(here, std::sync::atomic::Ordering::SeqCst);
    }

    /// True while someone waits on the visible watermark.
    pub fn followed(&self) -> bool {
        self.visible.receiver_count() > 0
    }

    /// Lets readers see what another engine appended, up to `tip` (in the database; reads
    /// past the tail go there).
    pub fn show_foreign(&self, tip: u64) {
        self.show_up_to(tip);
    }

    /// Makes this process the session's appender from the database's `tip` on (another
    /// engine may have appended since this one last did): the tail starts over there. Call
    /// with the appending lock held.
    pub fn adopt(&self, tip: u64) {
        {
            let mut tail = self.tail();
            if tip > tail.last {
                tail.events.clear();
                tail.last = tip;
                tail.committed = tip;
                tail.last_commit_from = tip + 1;
                tail.raw_from = tip + 1;
                tail.closed_at = None;
            }
        }
        self.show_up_to(tip);
        self.set_appends_here(true);
    }

    /// The tail, locked (hold it briefly: never across database I/O).
    pub fn tail(&self) -> MutexGuard<'_, Tail> {
        self.tail.lock_unpoisoned()
    }

    /// Serializes appends to this session.
    pub fn appending(&self) -> MutexGuard<'_, ()> {
        self.appending.lock_unpoisoned()
    }

    /// The last sequence readers may see.
    pub fn visible(&self) -> u64 {
        *self.visible.borrow()
    }

    /// Lets readers see everything up to `last` and wakes subscribers.
    pub fn show_up_to(&self, last: u64) {
        self.visible.send_if_modified(|v| {
            if last > *v {
                *v = last;
                true
            } else {
                false
            }
        });
    }

    /// A receiver of the visible watermark.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.visible.subscribe()
    }

    /// Records that the writer made everything up to `sequence` durable. The tail is trimmed
    /// by the appender (the next append, or the end of an append that waited for its commit),
    /// on the thread that allocated the events, where freeing them is cheap: the writer thread
    /// freeing events allocated by other threads contends for their malloc arenas, which cost
    /// it more than all its SQLite work for them. Only an ended session's tail is emptied
    /// here (no append will come). Returns true when the tail holds far more than it should;
    /// the writer then trims it with [`SessionLog::trim_if_overfull`] once it has nothing to
    /// commit, in case no append comes soon (a session paused mid-turn).
    pub fn committed(&self, sequence: u64) -> bool {
        let overfull = {
            let mut tail = self.tail();
            if sequence > tail.committed {
                tail.last_commit_from = tail.committed + 1;
                tail.committed = sequence;
            }
            if tail.closed_at.is_some() {
                tail.evict();
            }
            tail.overfull()
        };
        if self.visible_on_commit {
            self.show_up_to(sequence);
        }
        overfull
    }

    /// After a failure of the store (its epoch moved on from this log's), forgets the events
    /// that were never committed: their sequences are free again, and the next append follows
    /// the last committed event. Call with the appending lock held. (Readers of a store that
    /// shows events before their commit may have seen the forgotten ones; readers of one that
    /// shows events once committed never did.) Returns true when events were forgotten.
    pub fn rewind_unless(&self, epoch: u64) -> bool {
        use std::sync::atomic::Ordering;
        if self.epoch.swap(epoch, Ordering::SeqCst) == epoch {
            return false;
        }
        let (committed, lost) = {
            let mut tail = self.tail();
            let committed = tail.committed;
            let lost = tail.last > committed;
            while tail.events.back().is_some_and(|e| e.sequence > committed) {
                tail.events.pop_back();
            }
            tail.last = committed;
            if tail.closed_at.is_some_and(|at| at > committed) {
                tail.closed_at = None;
            }
            (committed, lost)
        };
        self.visible.send_if_modified(|v| {
            let over = *v > committed;
            if over {
                *v = committed;
            }
            over
        });
        lost
    }

    /// Trims the tail if it still holds far more than it should (see [`SessionLog::committed`]).
    pub fn trim_if_overfull(&self) {
        let mut tail = self.tail();
        if tail.overfull() {
            tail.evict();
        }
    }
}

impl Tail {
    /// The sequence of the first event held (`last + 1` when none is).
    pub fn first(&self) -> u64 {
        self.last + 1 - self.events.len() as u64
    }

    /// The last appended sequence (visible or not).
    pub fn last(&self) -> u64 {
        self.last
    }

    /// Appends events that follow `last` densely.
    pub fn push(&mut self, events: &[StoredEvent], closes: bool) {
        self.make_room(events.len());
        for event in events {
            debug_assert_eq!(event.sequence, self.last + 1);
            self.last = event.sequence;
            self.events.push_back(event.clone());
        }
        if closes && self.closed_at.is_none() {
            self.closed_at = Some(self.last);
        }
        self.evict();
    }

    /// Drops what the tail need not keep any more (see [`Tail::evict`]).
    pub fn trim(&mut self) {
        self.evict();
    }

    /// Whether the tail holds more than twice what it may keep once trimmed: its capacity
    /// and [`READERS_KEPT`] capacities for readers (uncommitted events aside, it holds no more
    /// after a trim).
    fn overfull(&self) -> bool {
        let most = (1 + READERS_KEPT as usize) * self.capacity;
        self.closed_at.is_none() && self.events.len() > 2 * most
    }

    /// Notes that a reader asked for the events from `from` on.
    pub fn reading_from(&mut self, from: u64) {
        self.forget_old_reads();
        self.read_from[0] = self.read_from[0].min(from);
    }

    /// Starts a new half window of reads when the current one is over.
    fn forget_old_reads(&mut self) {
        let half = self.read_window / 2;
        let elapsed = self.read_since.elapsed();
        if elapsed >= half {
            let previous = if elapsed >= 2 * half {
                u64::MAX
            } else {
                self.read_from[0]
            };
            self.read_from = [u64::MAX, previous];
            self.read_since = Instant::now();
        }
    }

    /// The sequence of the first event held as a reader wants it: with its raw line (`raw`,
    /// see [`Tail::evict`]) or without (`last + 1` when none is).
    pub fn first_with(&self, raw: bool) -> u64 {
        if raw {
            self.first().max(self.raw_from)
        } else {
            self.first()
        }
    }

    /// Up to `count` events from `from` on (`from >= first_with(raw)`), with their raw lines
    /// if `raw`: a reader that serves none takes no share of the agent's read buffers.
    pub fn copy_from(&self, from: u64, count: usize, raw: bool, out: &mut Vec<StoredEvent>) {
        let start = (from - self.first()) as usize;
        let end = start.saturating_add(count).min(self.events.len());
        if start >= end {
            return;
        }
        let events = self.events.range(start..end);
        if raw {
            out.extend(events.cloned());
        } else {
            out.extend(events.map(|e| StoredEvent {
                sequence: e.sequence,
                event_type: e.event_type,
                json: e.json.clone(),
                raw: None,
            }));
        }
    }

    /// Drops committed events beyond the capacity (all committed ones once closed), but not
    /// those of the last commit, nor those readers asked for within the last [`READ_WINDOW`]
    /// (together at most [`READERS_KEPT`] capacities): one commit can make many events
    /// visible at once, and readers that keep up, even some way behind, then find them here
    /// and not in the database. A reader too far behind, or paused, reads there.
    ///
    /// The committed events kept lose their raw agent lines: a line is a slice of the buffer
    /// the agent's output was read into, which stays whole while any of its lines lives, and
    /// twenty flooding sessions' tails kept ~2 MB of those buffers for the few readers that
    /// ask for raw lines (`includeRaw`); those read committed events from the database.
    fn evict(&mut self) {
        self.forget_old_reads();
        let (keep, below) = if self.closed_at.is_some() {
            (0, self.committed + 1)
        } else {
            let wanted = self
                .read_from
                .iter()
                .fold(self.last_commit_from, |a, &b| a.min(b));
            let floor = self
                .committed
                .saturating_sub(READERS_KEPT * self.capacity as u64);
            (self.capacity, wanted.max(floor + 1))
        };
        while self.events.len() > keep {
            match self.events.front() {
                Some(e) if e.sequence <= self.committed && e.sequence < below => {
                    self.events.pop_front();
                }
                _ => break,
            }
        }
        self.drop_committed_raws();
        self.release_room();
    }

    /// Drops the raw lines of the committed events held (see [`Tail::evict`]).
    fn drop_committed_raws(&mut self) {
        let first = self.first();
        let upto = self.committed.min(self.last);
        let start = self.raw_from.max(first);
        if start <= upto {
            let range = (start - first) as usize..=(upto - first) as usize;
            for event in self.events.range_mut(range) {
                event.raw = None;
            }
        }
        self.raw_from = self.raw_from.max(upto + 1);
    }

    /// Grows the room for `more` events: by doubling while the tail is small (a new session's
    /// first events, few moves), then by a quarter (not by doubling, as a `VecDeque` would),
    /// so a burst's room is at most a quarter over what the burst holds (see
    /// [`Tail::release_room`]).
    fn make_room(&mut self, more: usize) {
        let len = self.events.len();
        if len + more > self.events.capacity() {
            let grow = if len < MIN_ROOM { len } else { len / ROOM_STEP };
            self.events.reserve_exact(more + grow);
        }
    }

    /// Gives back the room a burst made the tail grow to (a flood's uncommitted events, a
    /// reader far behind) once it holds under half of it, keeping a quarter over what it
    /// holds: a session's tail otherwise keeps the largest it ever was, and twenty flooding
    /// sessions held 2.5 MiB in their `VecDeque`s at their heap peak (heaptrack) when it was
    /// given back only under a quarter. With growth by a quarter ([`Tail::make_room`]) the
    /// room stays within twice what is held; each move of the events on a shrink or growth
    /// is paid for by at least a quarter as many pushes or trims since the last.
    fn release_room(&mut self) {
        let room = self.events.capacity();
        let len = self.events.len();
        if room > MIN_ROOM && len < room / 2 {
            self.events.shrink_to((len + len / ROOM_STEP).max(MIN_ROOM));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::universal::{ErrorData, EventData, EventDraft, UniversalEvent};

    fn events(from: u64, to: u64) -> Vec<StoredEvent> {
        (from..=to)
            .map(|n| {
                let draft = EventDraft::synthetic(EventData::Error(Box::new(ErrorData {
                    message: n.to_string(),
                    code: None,
                    details: None,
                })));
                let e = UniversalEvent::from_draft(draft, n, "t".into(), "s".into(), None);
                StoredEvent::new(e)
            })
            .collect()
    }

    fn first(log: &SessionLog) -> u64 {
        log.tail().first()
    }

    /// A commit as the store sees it: the writer's notice, then the appender's trim.
    fn commit(log: &SessionLog, sequence: u64) {
        log.committed(sequence);
        log.tail().trim();
    }

    #[test]
    fn the_tail_keeps_the_last_commit_and_what_readers_still_read() {
        // Capacity 8: at most 16 committed events kept for readers.
        assert_eq!(READERS_KEPT, 2);
        let log = SessionLog::new("s", 0, 8, true);
        log.tail().push(&events(1, 10), false);
        assert_eq!(first(&log), 1, "uncommitted events always stay");
        commit(&log, 10);
        assert_eq!(first(&log), 1, "the whole last commit stays");
        log.tail().push(&events(11, 12), false);
        commit(&log, 12);
        assert_eq!(first(&log), 5, "the capacity, once no reader is behind");

        // A reader at 5 keeps its events through the next commits …
        log.tail().reading_from(5);
        log.tail().push(&events(13, 20), false);
        commit(&log, 20);
        assert_eq!(first(&log), 5);
        // … but never more than 16 committed events …
        log.tail().push(&events(21, 30), false);
        commit(&log, 30);
        assert_eq!(first(&log), 15);
        // … and not once the reader has not read for a window.
        log.tail().read_window = Duration::from_millis(20);
        std::thread::sleep(Duration::from_millis(30));
        log.tail().push(&events(31, 33), false);
        commit(&log, 33);
        assert_eq!(first(&log), 26);
    }

    #[test]
    fn a_burst_gives_its_room_back_once_committed() {
        let log = SessionLog::new("s", 0, 128, true);
        // A flood: 10,000 events appended before the writer commits any.
        for n in 0..100 {
            log.tail().push(&events(n * 100 + 1, n * 100 + 100), false);
        }
        let room = log.tail().events.capacity();
        assert!(
            (10_000..=12_600).contains(&room),
            "room for {room} events: grown by a quarter, not doubled"
        );
        commit(&log, 10_000);
        // Then commits of a few events at a time: the room shrinks to what is kept (128
        // events, the last commit's 10 and 256 for readers behind at most).
        for n in 0..20 {
            let from = 10_001 + n * 10;
            log.tail().push(&events(from, from + 9), false);
            commit(&log, from + 9);
        }
        let room = log.tail().events.capacity();
        assert!(
            room <= MIN_ROOM,
            "the tail still has room for {room} events"
        );
        assert_eq!(first(&log), 10_200 - 128 + 1);
    }

    #[test]
    fn the_writer_leaves_trimming_to_the_appender() {
        let log = SessionLog::new("s", 0, 2, true);
        log.tail().push(&events(1, 10), false);
        assert!(!log.committed(8), "10 events are not over 2 × 3 capacities");
        assert_eq!(first(&log), 1, "not trimmed on the writer's thread");
        log.tail().push(&events(11, 11), false);
        assert_eq!(
            first(&log),
            5,
            "the append trims (keeping 4 of the last commit)"
        );
        // A tail far over its bound (2 × 3 capacities here) is reported, and trimmed later.
        log.tail().push(&events(12, 40), false);
        assert!(log.committed(40), "36 events are over the bound");
        assert_eq!(first(&log), 5, "still not trimmed by the commit");
        log.trim_if_overfull();
        assert_eq!(first(&log), 37, "trimmed once the writer has time");
        assert!(!log.committed(40));
    }

    #[test]
    fn committed_events_lose_their_raw_lines_and_raw_readers_start_after_them() {
        use crate::store::StoredRaw;
        use crate::universal::RawLine;
        let with_raws = |from, to| {
            let mut list = events(from, to);
            for e in &mut list {
                e.raw = Some(StoredRaw::Line(RawLine::json_or_text("{}".into())));
            }
            list
        };
        let log = SessionLog::new("s", 0, 8, true);
        log.tail().push(&with_raws(1, 10), false);
        assert_eq!(log.tail().first_with(true), 1, "nothing committed yet");
        commit(&log, 6);
        let tail = log.tail();
        assert_eq!(tail.first(), 1, "the events stay for readers");
        assert_eq!(
            tail.first_with(true),
            7,
            "raw lines only from the first uncommitted"
        );
        let raws: Vec<bool> = tail.events.iter().map(|e| e.raw.is_some()).collect();
        assert_eq!(
            raws,
            [false, false, false, false, false, false, true, true, true, true]
        );
        let mut out = Vec::new();
        tail.copy_from(5, 10, true, &mut out);
        assert_eq!(out.iter().filter(|e| e.raw.is_some()).count(), 4);
        out.clear();
        tail.copy_from(7, 10, false, &mut out);
        assert_eq!(out.len(), 4);
        assert!(out.iter().all(|e| e.raw.is_none()), "copied without them");
        drop(tail);
        // A rewind forgets uncommitted events; raw lines still start after the committed.
        log.rewind_unless(1);
        assert_eq!(log.tail().first_with(true), 7);
        log.tail().push(&with_raws(7, 12), false);
        commit(&log, 12);
        assert_eq!(log.tail().first_with(true), 13);
        assert!(log.tail().events.iter().all(|e| e.raw.is_none()));
    }

    #[test]
    fn an_ended_session_keeps_nothing_committed() {
        let log = SessionLog::new("s", 0, 4, true);
        log.tail().reading_from(1);
        log.tail().push(&events(1, 5), true);
        log.committed(3);
        assert_eq!(
            first(&log),
            4,
            "the writer trims an ended session's tail itself"
        );
        log.committed(5);
        assert_eq!(first(&log), 6);
    }
}
