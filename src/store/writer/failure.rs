//! What the writer thread does when a batch does not commit: retry it a few times, then refuse
//! it and everything queued after it (keeping session records aside), and probe the database
//! until a write commits again (see the module above for what *degraded* means to callers).

use std::collections::HashMap;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use super::{Op, Shared, Write};
use crate::store::outbox::NewOutboxRow;
use crate::store::writer::BatchWriter;
use crate::store::{SessionRecord, StoreError};

/// Pauses before retrying a failed batch (about 7 s in all), then the store fails.
#[cfg(not(test))]
const RETRY_DELAYS_MS: &[u64] = &[50, 200, 1000, 2000, 4000];
#[cfg(test)]
const RETRY_DELAYS_MS: &[u64] = &[1, 1];

/// How often a degraded store tries the database again.
#[cfg(not(test))]
const PROBE_INTERVAL: Duration = Duration::from_secs(1);
#[cfg(test)]
const PROBE_INTERVAL: Duration = Duration::from_millis(20);

/// Commits a batch, retrying after each of [`RETRY_DELAYS_MS`]; the last error if none commits.
pub(super) fn commit_with_retries(
    backend: &mut dyn BatchWriter,
    ops: &[Op],
    outbox: &[NewOutboxRow],
) -> Result<Vec<bool>, StoreError> {
    let mut writes: Vec<Write<'_>> = ops.iter().filter_map(Op::write).collect();
    if !outbox.is_empty() {
        writes.push(Write::Outbox(outbox));
    }
    if writes.is_empty() {
        return Ok(Vec::new());
    }
    let mut delays = RETRY_DELAYS_MS.iter();
    loop {
        match backend.commit(&writes) {
            Ok(flags) => return Ok(flags),
            Err(error) => match delays.next() {
                Some(&ms) => {
                    tracing::warn!(%error, retry_in_ms = ms, "committing to the event log failed");
                    std::thread::sleep(Duration::from_millis(ms));
                }
                None => return Err(error),
            },
        }
    }
}

/// Fails every op with `why`, keeping the session records in `deferred` (written once the
/// database takes writes again).
pub(super) fn refuse(ops: Vec<Op>, deferred: &mut HashMap<String, SessionRecord>, why: &str) {
    let error = StoreError::Unavailable(why.to_owned());
    for op in ops {
        match op {
            Op::Put { record } => {
                deferred.insert(record.session_id.clone(), record);
            }
            other => other.complete(Err(&error)),
        }
    }
}

/// Serves while the database takes no writes: refuses every op (keeping session records
/// aside), and every [`PROBE_INTERVAL`] writes the kept records (or probes) until that
/// commits. Returns false when the store was dropped meanwhile.
pub(super) fn degraded(
    backend: &mut dyn BatchWriter,
    rx: &Receiver<Op>,
    shared: &Shared,
    mut deferred: HashMap<String, SessionRecord>,
) -> bool {
    let why = shared.failure().unwrap_or_default();
    let mut next_probe = Instant::now() + PROBE_INTERVAL;
    loop {
        let wait = next_probe.saturating_duration_since(Instant::now());
        match rx.recv_timeout(wait) {
            Ok(op) => {
                let events = op.event_count();
                refuse(vec![op], &mut deferred, &why);
                shared.release(events);
            }
            Err(RecvTimeoutError::Timeout) => {
                // Healthy again only once a write of real data commits (the probe), then the
                // kept records.
                let records: Vec<&SessionRecord> = deferred.values().collect();
                let result = backend.probe().and_then(|()| {
                    if records.is_empty() {
                        return Ok(());
                    }
                    let writes: Vec<Write<'_>> = records.iter().map(|r| Write::Put(r)).collect();
                    backend.commit(&writes).map(|_| ())
                });
                match result {
                    Ok(()) => {
                        shared.recover();
                        return true;
                    }
                    Err(error) => {
                        tracing::debug!(%error, "the event log still cannot be written");
                        next_probe = Instant::now() + PROBE_INTERVAL;
                    }
                }
            }
            Err(RecvTimeoutError::Disconnected) => return false,
        }
    }
}
