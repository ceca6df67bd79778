//! How an event and a session record become database columns and back: shared by the SQLite
//! and Postgres stores so both hold exactly the same data.
//!
//! An event is stored as its compact JSON *without* `raw` (the text readers are served, kept
//! byte for byte) plus the raw line apart: `raw` is always JSON (the agent's line verbatim, or
//! a JSON string for a line that was not JSON) and `raw_is_text` says which.

use super::{RunningProcess, SessionRecord, StoreError, StoredEvent};

/// An event's columns, borrowed from the stored event where possible.
pub(crate) struct EventRow<'a> {
    pub sequence: i64,
    pub event_type: &'static str,
    pub json: &'a str,
    pub raw: Option<std::borrow::Cow<'a, str>>,
    pub raw_is_text: bool,
}

impl<'a> EventRow<'a> {
    /// The columns of a stored event.
    pub fn new(stored: &'a StoredEvent) -> Result<Self, StoreError> {
        Ok(EventRow {
            sequence: to_i64(stored.sequence, "sequence")?,
            event_type: stored.event_type,
            json: &stored.json,
            raw: stored.raw.as_ref().map(|r| r.json()),
            raw_is_text: stored.raw.as_ref().is_some_and(|r| r.is_text()),
        })
    }
}

/// A u64 as a database integer (both databases have signed 64-bit integers).
pub(crate) fn to_i64(value: u64, what: &str) -> Result<i64, StoreError> {
    i64::try_from(value).map_err(|_| StoreError::Backend(format!("{what} {value} is too large")))
}

/// A database integer as a u64.
pub(crate) fn to_u64(value: i64, what: &str) -> Result<u64, StoreError> {
    u64::try_from(value)
        .map_err(|_| StoreError::Backend(format!("stored {what} {value} is negative")))
}

/// A session record's integer columns, checked.
pub(crate) struct RecordInts {
    pub created_at: i64,
    pub updated_at: i64,
    pub turns: i64,
    pub event_count: i64,
    pub running_pid: Option<i64>,
    pub running_pgid: Option<i64>,
    pub running_start_ticks: Option<i64>,
}

impl RecordInts {
    /// Converts the record's counters and its running process.
    pub fn new(r: &SessionRecord) -> Result<Self, StoreError> {
        let running = r.running.as_ref();
        Ok(RecordInts {
            created_at: to_i64(r.created_at, "created_at")?,
            updated_at: to_i64(r.updated_at, "updated_at")?,
            turns: to_i64(r.turns, "turns")?,
            event_count: to_i64(r.event_count, "event_count")?,
            running_pid: running.map(|p| i64::from(p.pid)),
            running_pgid: running.map(|p| i64::from(p.pgid)),
            running_start_ticks: running
                .map(|p| to_i64(p.start_ticks, "start_ticks"))
                .transpose()?,
        })
    }
}

/// The running process from its three nullable columns (all set, or none).
pub(crate) fn running_process(
    pid: Option<i64>,
    pgid: Option<i64>,
    start_ticks: Option<i64>,
) -> Result<Option<RunningProcess>, StoreError> {
    let (Some(pid), Some(pgid), Some(start_ticks)) = (pid, pgid, start_ticks) else {
        return Ok(None);
    };
    let id = |v: i64, what: &str| {
        u32::try_from(v).map_err(|_| StoreError::Backend(format!("stored {what} {v} is invalid")))
    };
    Ok(Some(RunningProcess {
        pid: id(pid, "pid")?,
        pgid: id(pgid, "pgid")?,
        start_ticks: to_u64(start_ticks, "start_ticks")?,
    }))
}

/// The settings column as JSON.
pub(crate) fn decode_settings(text: &str) -> Result<serde_json::Value, StoreError> {
    serde_json::from_str(text)
        .map_err(|e| StoreError::Backend(format!("stored session settings are not valid: {e}")))
}
