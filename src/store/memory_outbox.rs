//! The outbox of the in-memory store (`--store memory`): the same claims and leases as the
//! durable stores, in a map that lives as long as the process (as do the events).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use super::outbox::{
    Claim, NewOutboxRow, Outbox, OutboxQuery, OutboxRoutes, OutboxRow, Settlement, PENDING,
};
use super::StoreError;
use crate::sync::LockExt;

#[derive(Default)]
struct Rows {
    next_id: i64,
    rows: BTreeMap<i64, Leased>,
}

struct Leased {
    row: OutboxRow,
    lease: Option<(String, u64)>,
}

/// Outbox rows in memory.
#[derive(Default)]
pub struct MemoryOutbox {
    routes: Arc<OutboxRoutes>,
    rows: Mutex<Rows>,
}

impl MemoryOutbox {
    /// Adds rows made by the routes for an append.
    pub(crate) fn insert(&self, new: Vec<NewOutboxRow>) {
        if new.is_empty() {
            return;
        }
        let mut rows = self.rows.lock_unpoisoned();
        for row in new {
            rows.next_id += 1;
            let id = rows.next_id;
            rows.rows.insert(
                id,
                Leased {
                    row: OutboxRow {
                        id,
                        webhook_id: row.webhook_id,
                        session_id: row.session_id,
                        sequence: row.sequence,
                        event_type: row.event_type.to_owned(),
                        endpoint: row.endpoint.to_string(),
                        session_scoped: row.session_scoped,
                        payload: row.payload,
                        status: PENDING.to_owned(),
                        attempts: 0,
                        created_at: row.created_at,
                        next_attempt_at: row.created_at,
                        last_status: None,
                        last_error: None,
                    },
                    lease: None,
                },
            );
        }
        drop(rows);
        self.routes.notify();
    }
}

impl Outbox for MemoryOutbox {
    fn routes(&self) -> &Arc<OutboxRoutes> {
        &self.routes
    }

    fn claim(&self, claim: &Claim<'_>) -> Result<Vec<OutboxRow>, StoreError> {
        let mut rows = self.rows.lock_unpoisoned();
        let mut due: Vec<&mut Leased> = rows
            .rows
            .values_mut()
            .filter(|l| {
                l.row.status == PENDING
                    && l.row.next_attempt_at <= claim.now
                    && l.lease
                        .as_ref()
                        .is_none_or(|(_, until)| *until <= claim.now)
                    && if l.row.session_scoped {
                        claim.session_scoped
                    } else {
                        claim.endpoints.contains(&l.row.endpoint)
                    }
            })
            .collect();
        due.sort_by_key(|l| (l.row.next_attempt_at, l.row.id));
        let until = claim.now + claim.lease.as_millis() as u64;
        Ok(due
            .into_iter()
            .take(claim.limit)
            .map(|l| {
                l.lease = Some((claim.owner.to_owned(), until));
                l.row.clone()
            })
            .collect())
    }

    fn settle(
        &self,
        id: i64,
        owner: &str,
        now: u64,
        settlement: &Settlement,
    ) -> Result<bool, StoreError> {
        let mut rows = self.rows.lock_unpoisoned();
        let Some(l) = rows.rows.get_mut(&id) else {
            return Ok(false);
        };
        if l.lease.as_ref().is_none_or(|(o, _)| o != owner) {
            return Ok(false);
        }
        let (at, status, error) = settlement.columns(now);
        l.lease = None;
        l.row.status = settlement.status().to_owned();
        l.row.attempts += 1;
        l.row.next_attempt_at = at;
        l.row.last_status = status;
        l.row.last_error = error.map(str::to_owned);
        Ok(true)
    }

    fn release(&self, owner: &str) -> Result<u64, StoreError> {
        let mut rows = self.rows.lock_unpoisoned();
        let mut released = 0;
        for l in rows.rows.values_mut() {
            if l.lease.as_ref().is_some_and(|(o, _)| o == owner) {
                l.lease = None;
                released += 1;
            }
        }
        Ok(released)
    }

    fn lease_owners(&self) -> Result<Vec<String>, StoreError> {
        let rows = self.rows.lock_unpoisoned();
        let mut owners: Vec<String> = rows
            .rows
            .values()
            .filter_map(|l| l.lease.as_ref().map(|(o, _)| o.clone()))
            .collect();
        owners.sort();
        owners.dedup();
        Ok(owners)
    }

    fn list(&self, query: &OutboxQuery) -> Result<Vec<OutboxRow>, StoreError> {
        let rows = self.rows.lock_unpoisoned();
        Ok(rows
            .rows
            .values()
            .rev()
            .map(|l| &l.row)
            .filter(|r| query.before.is_none_or(|b| r.id < b))
            .filter(|r| query.status.as_ref().is_none_or(|s| &r.status == s))
            .filter(|r| query.session_id.as_ref().is_none_or(|s| &r.session_id == s))
            .take(query.limit)
            .cloned()
            .collect())
    }

    fn pending(&self) -> Result<u64, StoreError> {
        let rows = self.rows.lock_unpoisoned();
        Ok(rows
            .rows
            .values()
            .filter(|l| l.row.status == PENDING)
            .count() as u64)
    }
}
