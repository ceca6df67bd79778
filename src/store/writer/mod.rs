//! The writer thread of a durable store: it owns the write connection and commits whatever is
//! queued as one transaction, so appends never wait for a sync per event.
//!
//! Operations are committed in the order they were queued, and a batch is committed whole or
//! not at all, so the database always holds a prefix of the history of writes.
//!
//! A batch that still fails after retrying (a full disk, a lost database) makes the store
//! *degraded*: that batch and everything queued after it are refused (the events' sequences
//! are free again: the next append of each session starts after its last committed event, see
//! [`Writer::epoch`]), later appends are refused at once, session records are kept aside and
//! written on recovery, and the thread probes the database every second (`failure.rs`). Once
//! a probe commits, the store is healthy again. [`Writer::health`] says which it is. Only a
//! writer thread that died (a panic) fails the store for good.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender, TryRecvError};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::outbox::{now_ms, NewOutboxRow, OutboxRoutes};
use super::tail::SessionLog;
use super::{SessionRecord, StoreError, StoredEvent};
use crate::sync::{unpoisoned, LockExt};

mod failure;
use failure::{commit_with_retries, degraded, refuse};

/// The most operations one transaction takes.
const MAX_BATCH_OPS: usize = 1024;
/// The most events one transaction takes.
const MAX_BATCH_EVENTS: usize = 1024;
/// The least time from one commit to the next when nobody waits for the next: ordinary
/// events arriving meanwhile are gathered into one transaction (at most this much later
/// visible), instead of a commit each, which under many sessions' steady trickle of events
/// cost more than everything else. A write somebody waits for ends the pause at once.
const GROUP_COMMIT: Duration = Duration::from_millis(1);

/// One write of a batch, as the database sees it.
pub(crate) enum Write<'a> {
    /// Insert a session record unless the id is taken.
    Create(&'a SessionRecord),
    /// Replace a session record.
    Put(&'a SessionRecord),
    /// Insert events of one session.
    Events {
        session_id: &'a str,
        events: &'a [StoredEvent],
    },
    /// Remove a session's record and events; its flag says whether there was one.
    Delete(&'a str),
    /// Insert outbox rows about events of the same batch (`store/outbox.rs`); always last.
    Outbox(&'a [NewOutboxRow]),
}

/// The database side of the writer thread.
pub(crate) trait BatchWriter: Send + 'static {
    /// Commits the writes in one transaction (all or nothing). Returns one flag per write:
    /// false for a `Create` whose id was taken (that write did nothing), true otherwise.
    fn commit(&mut self, batch: &[Write<'_>]) -> Result<Vec<bool>, StoreError>;

    /// Checks that the database takes writes again (a degraded store calls it until it
    /// succeeds, before it writes anything else): by default an empty transaction. An empty
    /// transaction writes nothing in SQLite or Postgres, so both write real data instead (about
    /// a batch of events, removed again), so that a disk still full keeps the store degraded.
    fn probe(&mut self) -> Result<(), StoreError> {
        self.commit(&[]).map(|_| ())
    }
}

/// Where the result of an operation is sent once its batch is committed.
pub(crate) type Reply<T> = SyncSender<Result<T, StoreError>>;

/// Who learns that a batch of events is committed: a thread waiting on it, or a task that
/// awaits it (an appender on an async runtime, which must not park its thread).
pub(crate) enum EventsReply {
    Wait(Reply<()>),
    Notify(tokio::sync::oneshot::Sender<Result<(), StoreError>>),
}

impl EventsReply {
    fn send(self, result: Result<(), StoreError>) {
        match self {
            EventsReply::Wait(done) => {
                let _ = done.send(result);
            }
            EventsReply::Notify(done) => {
                let _ = done.send(result);
            }
        }
    }
}

/// What the store asks of the writer thread.
pub(crate) enum Op {
    Create {
        record: SessionRecord,
        done: Reply<bool>,
    },
    Put {
        record: SessionRecord,
    },
    Events {
        log: Arc<SessionLog>,
        events: Vec<StoredEvent>,
        done: Option<EventsReply>,
        /// The store's epoch when the events were stamped: events of an older epoch were
        /// stamped before a failure freed their sequences, and are refused.
        epoch: u64,
    },
    Flush {
        done: Reply<()>,
    },
    Delete {
        session_id: String,
        done: Reply<bool>,
    },
}

impl Op {
    fn event_count(&self) -> usize {
        match self {
            Op::Events { events, .. } => events.len(),
            _ => 0,
        }
    }

    /// True when a caller waits for this op's commit.
    fn is_awaited(&self) -> bool {
        match self {
            Op::Create { .. } | Op::Flush { .. } | Op::Delete { .. } => true,
            Op::Put { .. } => false,
            Op::Events { done, .. } => done.is_some(),
        }
    }

    fn write(&self) -> Option<Write<'_>> {
        match self {
            Op::Create { record, .. } => Some(Write::Create(record)),
            Op::Put { record } => Some(Write::Put(record)),
            Op::Events { log, events, .. } => Some(Write::Events {
                session_id: &log.session_id,
                events,
            }),
            Op::Flush { .. } => None,
            Op::Delete { session_id, .. } => Some(Write::Delete(session_id)),
        }
    }

    /// Reports the outcome of the op's batch; `created` is the op's flag on success.
    fn complete(self, outcome: Result<bool, &StoreError>) {
        let error = |e: &StoreError| e.clone();
        match self {
            Op::Create { done, .. } | Op::Delete { done, .. } => {
                let _ = done.send(outcome.map_err(error));
            }
            Op::Put { .. } => {}
            Op::Events { done, .. } => {
                if let Some(done) = done {
                    done.send(outcome.map(|_| ()).map_err(error));
                }
            }
            Op::Flush { done } => {
                let _ = done.send(outcome.map(|_| ()).map_err(error));
            }
        }
    }
}

/// State shared by the store and its writer thread.
struct Shared {
    /// Events queued and not yet committed (or failed).
    pending: Mutex<usize>,
    drained: Condvar,
    /// Why the store cannot write now (degraded), if it cannot.
    failure: Mutex<Option<String>>,
    /// The writer thread is gone: the store cannot write ever again.
    dead: AtomicBool,
    /// Bumped at every failure: sequences stamped before it are free again.
    epoch: AtomicU64,
    /// `None` while healthy, else why the store cannot write; changes wake watchers.
    health: tokio::sync::watch::Sender<Option<Arc<str>>>,
    max_pending: usize,
    /// Whether the queue has room (below three quarters of `max_pending`): appenders on an
    /// async runtime wait for it without blocking a runtime thread (see [`Writer::room`]).
    room: tokio::sync::watch::Sender<bool>,
}

impl Shared {
    fn failure(&self) -> Option<String> {
        self.failure.lock_unpoisoned().clone()
    }

    /// The store cannot write (until a probe succeeds, unless the writer is dead).
    fn degrade(&self, why: &str) {
        let mut failure = self.failure.lock_unpoisoned();
        if failure.is_none() {
            tracing::error!(error = %why, "the event log cannot be written; the store is degraded until it can");
            *failure = Some(why.to_owned());
            self.epoch.fetch_add(1, Ordering::SeqCst);
            self.health.send_replace(Some(why.into()));
        }
    }

    /// The store writes again.
    fn recover(&self) {
        let mut failure = self.failure.lock_unpoisoned();
        if failure.take().is_some() {
            tracing::info!("the event log can be written again");
            self.health.send_replace(None);
        }
    }

    /// Events queued and not yet committed.
    fn pending(&self) -> usize {
        *self.pending.lock_unpoisoned()
    }

    fn release(&self, events: usize) {
        let mut pending = self.pending.lock_unpoisoned();
        *pending = pending.saturating_sub(events);
        self.drained.notify_all();
        self.show_room(*pending);
    }

    fn show_room(&self, pending: usize) {
        let room = pending < self.max_pending / 4 * 3;
        self.room
            .send_if_modified(|r| std::mem::replace(r, room) != room);
    }
}

/// The store's handle on its writer thread; dropping it commits what is queued and joins.
pub(crate) struct Writer {
    tx: Option<Sender<Op>>,
    thread: Option<JoinHandle<()>>,
    shared: Arc<Shared>,
}

impl Writer {
    /// Starts the writer thread around a write connection.
    pub fn spawn(
        name: &str,
        backend: Box<dyn BatchWriter>,
        max_pending: usize,
        routes: Arc<OutboxRoutes>,
    ) -> Result<Self, StoreError> {
        let shared = Arc::new(Shared {
            pending: Mutex::new(0),
            drained: Condvar::new(),
            failure: Mutex::new(None),
            dead: AtomicBool::new(false),
            epoch: AtomicU64::new(0),
            health: tokio::sync::watch::Sender::new(None),
            max_pending: max_pending.max(1),
            room: tokio::sync::watch::Sender::new(true),
        });
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn({
                let shared = shared.clone();
                move || {
                    let stopped = Stopped(shared);
                    run(backend, rx, &stopped.0, &routes);
                }
            })
            .map_err(|e| StoreError::Backend(format!("cannot start the store's writer: {e}")))?;
        Ok(Writer {
            tx: Some(tx),
            thread: Some(thread),
            shared,
        })
    }

    /// Fails when the store cannot write now.
    pub fn check(&self) -> Result<(), StoreError> {
        match self.shared.failure() {
            Some(why) if self.shared.dead.load(Ordering::Acquire) => Err(failed(&why)),
            Some(why) => Err(StoreError::Unavailable(why)),
            None => Ok(()),
        }
    }

    /// The current epoch: it changes at every failure, after which the sequences of events
    /// not committed before it are free again. Read it before [`Writer::check`] when stamping.
    pub fn epoch(&self) -> u64 {
        self.shared.epoch.load(Ordering::SeqCst)
    }

    /// A receiver of the store's health: `None` while it writes, else why it cannot.
    pub fn health(&self) -> tokio::sync::watch::Receiver<Option<Arc<str>>> {
        self.shared.health.subscribe()
    }

    /// Waits while too many events are queued (bounding memory), then counts `events` in.
    pub fn reserve(&self, events: usize) -> Result<(), StoreError> {
        let mut pending = self.shared.pending.lock_unpoisoned();
        while *pending > 0 && *pending + events > self.shared.max_pending {
            self.check()?;
            pending = unpoisoned(
                self.shared
                    .drained
                    .wait_timeout(pending, Duration::from_millis(100)),
            )
            .0;
        }
        self.check()?;
        *pending += events;
        self.shared.show_room(*pending);
        Ok(())
    }

    /// A receiver of whether the queue has room; see [`crate::store::EventStore::room`].
    pub fn room(&self) -> tokio::sync::watch::Receiver<bool> {
        self.shared.room.subscribe()
    }

    /// Queues an operation.
    pub fn send(&self, op: Op) -> Result<(), StoreError> {
        let events = op.event_count();
        let sent = self.tx.as_ref().is_some_and(|tx| tx.send(op).is_ok());
        if sent {
            Ok(())
        } else {
            self.shared.release(events);
            Err(StoreError::Backend("the store's writer has stopped".into()))
        }
    }

    /// Cuts short the writer's gathering pause: somebody waits for the next commit.
    pub fn hurry(&self) {
        if let Some(thread) = &self.thread {
            thread.thread().unpark();
        }
    }

    /// Queues an operation and waits until its batch is committed.
    pub fn call<T>(&self, op: impl FnOnce(Reply<T>) -> Op) -> Result<T, StoreError> {
        let (done, result) = mpsc::sync_channel(1);
        self.send(op(done))?;
        // Cut short the writer's gathering pause: somebody waits.
        if let Some(thread) = &self.thread {
            thread.thread().unpark();
        }
        result
            .recv()
            .map_err(|_| StoreError::Backend("the store's writer has stopped".into()))?
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        // Closing the channel lets the thread commit what is queued and end.
        self.tx = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Marks the store failed when the writer thread ends for any reason other than the store
/// being dropped (a panic): appenders waiting for room or for the queue to drain then get an
/// error instead of waiting forever.
struct Stopped(Arc<Shared>);

impl Drop for Stopped {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.dead.store(true, Ordering::Release);
            let mut failure = self.0.failure.lock_unpoisoned();
            let why = failure.get_or_insert_with(|| "the store's writer stopped".to_owned());
            self.0.health.send_replace(Some(why.as_str().into()));
        }
        self.0.drained.notify_all();
        self.0.room.send_replace(true);
    }
}

fn failed(why: &str) -> StoreError {
    StoreError::Backend(format!("the event log can no longer be written: {why}"))
}

/// The writer thread: take everything queued (up to a cap, waiting up to [`GROUP_COMMIT`]
/// after the last commit for more unless somebody waits), commit it, report, repeat; when a
/// batch cannot be committed, serve degraded until the database takes writes again.
fn run(
    mut backend: Box<dyn BatchWriter>,
    rx: Receiver<Op>,
    shared: &Shared,
    routes: &OutboxRoutes,
) {
    let mut last_commit = Instant::now() - GROUP_COMMIT;
    // Logs whose tail was far over its bound at a commit: trimmed once nothing is queued.
    let mut overfull: Vec<Arc<SessionLog>> = Vec::new();
    while let Some(first) = next_op(&rx, &mut overfull) {
        let since = last_commit.elapsed();
        if since < GROUP_COMMIT && !first.is_awaited() && shared.pending() < MAX_BATCH_EVENTS {
            // Park rather than wait on the queue: a thread woken by every append would cost
            // a context switch per event, which is what gathering saves. A caller that waits
            // for its commit unparks it (see `Writer::call`).
            std::thread::park_timeout(GROUP_COMMIT - since);
        }
        let mut events = first.event_count();
        let mut ops = vec![first];
        while ops.len() < MAX_BATCH_OPS && events < MAX_BATCH_EVENTS {
            match rx.try_recv() {
                Ok(op) => {
                    events += op.event_count();
                    ops.push(op);
                }
                Err(_) => break,
            }
        }
        // Events stamped before the last failure lost their sequences: refuse them.
        let epoch = shared.epoch.load(Ordering::SeqCst);
        let (stale, ops): (Vec<Op>, Vec<Op>) = ops
            .into_iter()
            .partition(|op| matches!(op, Op::Events { epoch: e, .. } if *e != epoch));
        refuse(
            stale,
            &mut HashMap::new(),
            "the event log failed before these events were written",
        );
        let outbox = outbox_rows(routes, &ops);
        let started = Instant::now();
        let result = commit_with_retries(backend.as_mut(), &ops, &outbox);
        crate::metrics::metrics()
            .store_commit_seconds
            .observe(started.elapsed().as_secs_f64());
        match result {
            Ok(flags) => {
                if !outbox.is_empty() {
                    routes.notify();
                }
                committed(ops, flags, &mut overfull)
            }
            Err(error) => {
                shared.degrade(&error.to_string());
                let mut deferred = HashMap::new();
                refuse(ops, &mut deferred, &error.to_string());
                if !degraded(backend.as_mut(), &rx, shared, deferred) {
                    break;
                }
            }
        }
        shared.release(events);
        last_commit = Instant::now();
    }
}

/// Reports a committed batch: each session's log learns once how far it is committed, before
/// anybody waiting hears of the commit (who then trims the tail, which only lets committed
/// events go).
fn committed(mut ops: Vec<Op>, flags: Vec<bool>, overfull: &mut Vec<Arc<SessionLog>>) {
    let mut logs: Vec<(&Arc<SessionLog>, u64)> = Vec::new();
    for op in &mut ops {
        if let Op::Events { log, events, .. } = op {
            let last = events.last().map_or(0, |e| e.sequence);
            // Let go of the events while the tail still holds them all (it keeps
            // uncommitted events): dropping the last reference here, after the appender
            // trimmed them, would free on this thread memory other threads allocated,
            // contending for their malloc arenas.
            events.clear();
            let log: &Arc<SessionLog> = log;
            match logs.iter_mut().find(|(l, _)| Arc::ptr_eq(l, log)) {
                Some((_, seq)) => *seq = (*seq).max(last),
                None => logs.push((log, last)),
            }
        }
    }
    for (log, sequence) in logs {
        if log.committed(sequence) && !overfull.iter().any(|l| Arc::ptr_eq(l, log)) {
            overfull.push(log.clone());
        }
    }
    let mut flags = flags.into_iter();
    for op in ops {
        let flag = if op.write().is_some() {
            flags.next().unwrap_or(true)
        } else {
            true
        };
        op.complete(Ok(flag));
    }
}

/// Refuses ops that will not be written: their callers hear `why`; session records are kept
/// in `deferred` (the newest per session) to be written on recovery. (The caller releases
/// their events from the queue's count.)
/// The next queued op, waiting for one if none is. Before waiting (nothing to commit), trims
/// the tails that were overfull at a commit. `None` once the store is dropped and the queue
/// drained.
fn next_op(rx: &Receiver<Op>, overfull: &mut Vec<Arc<SessionLog>>) -> Option<Op> {
    match rx.try_recv() {
        Ok(op) => Some(op),
        Err(TryRecvError::Disconnected) => None,
        Err(TryRecvError::Empty) => {
            for log in overfull.drain(..) {
                log.trim_if_overfull();
            }
            rx.recv().ok()
        }
    }
}

/// The outbox rows the routes want for a batch's events (none, at the cost of an atomic
/// load, while nobody subscribes).
fn outbox_rows(routes: &OutboxRoutes, ops: &[Op]) -> Vec<NewOutboxRow> {
    let mut rows = Vec::new();
    if !routes.active() {
        return rows;
    }
    let mut now = None;
    for op in ops {
        if let Op::Events { log, events, .. } = op {
            let now = *now.get_or_insert_with(now_ms);
            routes.rows_for(&log.session_id, events, now, &mut rows);
        }
    }
    rows
}
