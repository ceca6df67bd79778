//! One session's log as a durable store holds it in memory: a small tail of recent events (so
//! live readers never touch the database) and two watermarks.
//!
//! * `committed`: the last sequence the writer has made durable. Only committed events may
//!   leave the tail, so everything before the tail is in the database.
//! * `visible`: the last sequence readers may see (`read`, `last_sequence`, `subscribe`).
//!   It runs ahead of `committed` for ordinary events (unless the store shows events only
//!   once committed), but never past an uncommitted `turn.ended` or `session.ended` (see
//!   [`super::batched`]).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::watch;

use super::StoredEvent;

/// How many capacities of events the tail may hold to keep the whole of the last commit.
const LAST_COMMIT_KEPT: u64 = 4;

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
}

/// Recent events, contiguous, ending at `last`.
pub(crate) struct Tail {
    events: VecDeque<Arc<StoredEvent>>,
    last: u64,
    committed: u64,
    /// The first sequence of the last commit: events from here on stay (see [`Tail::evict`]).
    last_commit_from: u64,
    capacity: usize,
    /// `session.ended` was appended: nothing more will be, so keep nothing once committed.
    closed: bool,
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
                capacity,
                closed: false,
            }),
            visible,
            visible_on_commit,
            appending: Mutex::new(()),
        }
    }

    /// The tail, locked (hold it briefly: never across database I/O).
    pub fn tail(&self) -> MutexGuard<'_, Tail> {
        self.tail.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Serializes appends to this session.
    pub fn appending(&self) -> MutexGuard<'_, ()> {
        self.appending.lock().unwrap_or_else(|p| p.into_inner())
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

    /// Records that the writer made everything up to `sequence` durable, and trims the tail.
    pub fn committed(&self, sequence: u64) {
        {
            let mut tail = self.tail();
            if sequence > tail.committed {
                tail.last_commit_from = tail.committed + 1;
                tail.committed = sequence;
            }
            tail.evict();
        }
        if self.visible_on_commit {
            self.show_up_to(sequence);
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
    pub fn push(&mut self, events: &[Arc<StoredEvent>], closes: bool) {
        for event in events {
            debug_assert_eq!(event.sequence, self.last + 1);
            self.last = event.sequence;
            self.events.push_back(event.clone());
        }
        self.closed |= closes;
        self.evict();
    }

    /// Up to `count` events from `from` on (`from >= first()`).
    pub fn copy_from(&self, from: u64, count: usize, out: &mut Vec<Arc<StoredEvent>>) {
        let start = (from - self.first()) as usize;
        let end = start.saturating_add(count).min(self.events.len());
        if start < end {
            out.extend(self.events.range(start..end).cloned());
        }
    }

    /// Drops committed events beyond the capacity (all committed ones once closed), but not
    /// those of the last commit (up to [`LAST_COMMIT_KEPT`] capacities): one commit can make
    /// many events visible at once, and readers that were up to date then find them all here,
    /// not in the database.
    fn evict(&mut self) {
        let (keep, below) = if self.closed {
            (0, self.committed + 1)
        } else {
            let floor = self
                .committed
                .saturating_sub(LAST_COMMIT_KEPT * self.capacity as u64);
            (self.capacity, self.last_commit_from.max(floor + 1))
        };
        while self.events.len() > keep {
            match self.events.front() {
                Some(e) if e.sequence <= self.committed && e.sequence < below => {
                    self.events.pop_front();
                }
                _ => break,
            }
        }
    }
}
