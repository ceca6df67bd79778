//! [`Coordination`] on one Postgres database shared by a fleet of daemons (each with its own
//! data directory, maybe on other machines).
//!
//! * **Leases** are rows of `engines` whose `heartbeat_at` each engine refreshes every third of
//!   the lease (`StoreOptions::lease`, 30 s by default); an engine whose heartbeat is older than
//!   the lease (by the database's clock) is dead, however it died — a crash, a lost machine, a
//!   cut network. Its sessions are recovered by a survivor within the lease.
//! * **Changes** come by `LISTEN codebuffd`: the writer sends `NOTIFY codebuffd, '<last
//!   sequence>:<session id>'` for each session a commit touched (delivered when the commit is),
//!   and claims and the inbox send an empty payload. A listener thread raises the visible
//!   watermark of the logs other engines append to and moves [`Coordination::changes`]; after a
//!   lost connection it reconnects and catches every followed log up from the database.
//! * Small writes (claims, the inbox, heartbeats) go through a connection of their own.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use postgres::fallible_iterator::FallibleIterator;
use postgres::NoTls;
use tokio::sync::watch;

use super::batched::{foreign_followed, Logs};
use super::coordination::{
    Coordination, EngineEntry, InboxRequest, InboxState, Lease, SessionQuery,
};
use super::postgres::{backend, record_from_row, PgConn, PgReaders, SELECT_RECORD};
use super::row::to_u64;
use super::{SessionRecord, StoreError};
use crate::sync::RwLockExt;

/// The channel every engine listens on.
pub(crate) const CHANNEL: &str = "codebuffd";

/// The shared side of a Postgres store.
pub(crate) struct PgShared {
    /// A connection thread of its own: callers may be on the runtime's threads, where the
    /// blocking client must not run.
    conn: Arc<PgReaders>,
    config: postgres::Config,
    target: String,
    lease: Duration,
    changes: watch::Sender<u64>,
    stop: Arc<AtomicBool>,
    listener: Option<std::thread::JoinHandle<()>>,
}

impl PgShared {
    /// The shared side of the database `config` connects to; `logs` are the store's logs.
    pub fn open(
        config: postgres::Config,
        target: String,
        lease: Duration,
        logs: Logs,
    ) -> Result<PgShared, StoreError> {
        let (changes, _) = watch::channel(0);
        let stop = Arc::new(AtomicBool::new(false));
        let listener = {
            let config = config.clone();
            let changes = changes.clone();
            let stop = stop.clone();
            let target = target.clone();
            std::thread::Builder::new()
                .name("codebuffd-pg-listen".into())
                .spawn(move || listen(config, target, logs, changes, stop))
                .map_err(|e| StoreError::Backend(format!("cannot start the listener: {e}")))?
        };
        Ok(PgShared {
            conn: Arc::new(PgReaders::start_named(&config, &target, 1, "shared")?),
            config,
            target,
            lease,
            changes,
            stop,
            listener: Some(listener),
        })
    }

    fn with<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut postgres::Client) -> Result<T, postgres::Error> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.conn
            .call(move |conn| f(conn.client()?).map_err(backend))
    }

    /// Tells every listener something changed (a claim, the inbox).
    fn notify(client: &mut impl postgres::GenericClient) -> Result<(), postgres::Error> {
        client
            .execute("SELECT pg_notify($1, '')", &[&CHANNEL])
            .map(|_| ())
    }

    fn lease_secs(&self) -> f64 {
        self.lease.as_secs_f64()
    }
}

impl Drop for PgShared {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(listener) = self.listener.take() {
            let _ = listener.join();
        }
    }
}

/// The listener thread (see the module docs).
fn listen(
    config: postgres::Config,
    target: String,
    logs: Logs,
    changes: watch::Sender<u64>,
    stop: Arc<AtomicBool>,
) {
    let bump = |changes: &watch::Sender<u64>| changes.send_modify(|n| *n = n.wrapping_add(1));
    while !stop.load(Ordering::SeqCst) {
        let mut client = match config.connect(NoTls) {
            Ok(client) => client,
            Err(error) => {
                tracing::warn!(%target, %error, "the Postgres listener cannot connect; retrying");
                std::thread::sleep(Duration::from_secs(1));
                continue;
            }
        };
        if let Err(error) = client.batch_execute(&format!("LISTEN {CHANNEL}")) {
            tracing::warn!(%error, "LISTEN failed; retrying");
            std::thread::sleep(Duration::from_secs(1));
            continue;
        }
        // Anything missed while not listening: catch the followed logs up.
        catch_up(&mut client, &logs);
        bump(&changes);
        while !stop.load(Ordering::SeqCst) && !client.is_closed() {
            let mut notifications = client.notifications();
            let mut iter = notifications.timeout_iter(Duration::from_millis(200));
            let mut any = false;
            loop {
                match iter.next() {
                    Ok(Some(n)) => {
                        any = true;
                        if let Some((sequence, session_id)) = n.payload().split_once(':') {
                            if let (Ok(sequence), Some(log)) = (
                                sequence.parse::<u64>(),
                                logs.read_unpoisoned().get(session_id).cloned(),
                            ) {
                                if !log.appends_here() {
                                    log.show_foreign(sequence);
                                }
                            }
                        }
                    }
                    Ok(None) => break,
                    Err(_) => break,
                }
            }
            if any {
                bump(&changes);
            }
        }
    }
}

/// Raises each followed log another engine appends to up to the database's tip.
fn catch_up(client: &mut postgres::Client, logs: &Logs) {
    for log in foreign_followed(logs) {
        let tip = client.query_one(
            "SELECT max(sequence) FROM events WHERE session_id = $1",
            &[&&*log.session_id],
        );
        if let Ok(row) = tip {
            if let Ok(Some(tip)) = row.try_get::<_, Option<i64>>(0) {
                log.show_foreign(u64::try_from(tip).unwrap_or(0));
            }
        }
    }
}

/// An engine's registration in a Postgres store: its row, kept fresh by a heartbeat thread.
struct PgLease {
    conn: Arc<PgReaders>,
    engine_id: String,
    stop: Arc<AtomicBool>,
    heartbeat: Option<std::thread::JoinHandle<()>>,
}

impl Lease for PgLease {
    fn announce_url(&self, url: &str) -> Result<(), StoreError> {
        let (id, url) = (self.engine_id.clone(), url.to_owned());
        self.conn.call(move |conn| {
            conn.client()?
                .execute(
                    "UPDATE engines SET url = $2 WHERE engine_id = $1",
                    &[&id, &url],
                )
                .map_err(backend)
        })?;
        Ok(())
    }
}

impl Drop for PgLease {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(heartbeat) = self.heartbeat.take() {
            heartbeat.thread().unpark();
            let _ = heartbeat.join();
        }
        let id = self.engine_id.clone();
        let _ = self.conn.call(move |conn| {
            conn.client()?
                .execute("DELETE FROM engines WHERE engine_id = $1", &[&id])
                .map_err(backend)
        });
    }
}

fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl Coordination for PgShared {
    fn register(&self, engine: &EngineEntry) -> Result<Box<dyn Lease>, StoreError> {
        let engine = engine.clone();
        let registered = engine.clone();
        self.with(move |c| {
            c.execute(
                "INSERT INTO engines (engine_id, instance_id, pid, command, url, started_at, \
                 heartbeat_at) VALUES ($1, $2, $3, $4, $5, $6, now()) \
                 ON CONFLICT (engine_id) DO UPDATE SET heartbeat_at = now()",
                &[
                    &engine.engine_id,
                    &engine.instance_id,
                    &i64::from(engine.pid),
                    &engine.command,
                    &engine.url,
                    &to_i64(engine.started_at),
                ],
            )
        })?;
        let stop = Arc::new(AtomicBool::new(false));
        let engine = registered;
        let heartbeat = {
            // Its own connection: a heartbeat must not wait behind slow queries.
            let mut conn = PgConn::new(self.config.clone(), self.target.clone());
            let stop = stop.clone();
            let id = engine.engine_id.clone();
            let every = self.lease / 3;
            std::thread::Builder::new()
                .name("codebuffd-pg-heartbeat".into())
                .spawn(move || {
                    while !stop.load(Ordering::SeqCst) {
                        std::thread::park_timeout(every);
                        if stop.load(Ordering::SeqCst) {
                            break;
                        }
                        let beat = conn.client().and_then(|c| {
                            c.execute(
                                "UPDATE engines SET heartbeat_at = now() WHERE engine_id = $1",
                                &[&id],
                            )
                            .map_err(backend)
                        });
                        if let Err(error) = beat {
                            tracing::warn!(%error, "the engine's heartbeat failed; retrying");
                        }
                    }
                })
                .map_err(|e| StoreError::Backend(format!("cannot start the heartbeat: {e}")))?
        };
        Ok(Box::new(PgLease {
            conn: self.conn.clone(),
            engine_id: engine.engine_id.clone(),
            stop,
            heartbeat: Some(heartbeat),
        }))
    }

    fn engine_alive(&self, engine_id: &str) -> Result<bool, StoreError> {
        let secs = self.lease_secs();
        let id = engine_id.to_owned();
        let alive: Option<bool> = self.with(move |c| {
            c.query_opt(
                "SELECT heartbeat_at > now() - make_interval(secs => $2) FROM engines \
                 WHERE engine_id = $1",
                &[&id, &secs],
            )
            .map(|row| row.and_then(|r| r.get(0)))
        })?;
        if alive != Some(true) {
            let id = engine_id.to_owned();
            self.with(move |c| c.execute("DELETE FROM engines WHERE engine_id = $1", &[&id]))?;
        }
        Ok(alive == Some(true))
    }

    fn engines(&self) -> Result<Vec<EngineEntry>, StoreError> {
        let secs = self.lease_secs();
        let rows = self.with(move |c| {
            c.query(
                "SELECT engine_id, instance_id, pid, command, url, started_at FROM engines \
                 WHERE heartbeat_at > now() - make_interval(secs => $1) ORDER BY started_at",
                &[&secs],
            )
        })?;
        rows.iter()
            .map(|r| {
                Ok(EngineEntry {
                    engine_id: r.try_get(0).map_err(backend)?,
                    instance_id: r.try_get(1).map_err(backend)?,
                    pid: u32::try_from(r.try_get::<_, i64>(2).map_err(backend)?).unwrap_or(0),
                    command: r.try_get(3).map_err(backend)?,
                    url: r.try_get(4).map_err(backend)?,
                    started_at: to_u64(r.try_get(5).map_err(backend)?, "started_at")?,
                })
            })
            .collect()
    }

    fn claim(&self, session_id: &str, from: &str, to: &str) -> Result<bool, StoreError> {
        let (session_id, from, to) = (session_id.to_owned(), from.to_owned(), to.to_owned());
        let changed = self.with(move |c| {
            let mut tx = c.transaction()?;
            let n = tx.execute(
                "UPDATE sessions SET owner = $3 WHERE session_id = $1 AND owner = $2",
                &[&session_id, &from, &to],
            )?;
            Self::notify(&mut tx)?;
            tx.commit()?;
            Ok(n)
        })?;
        Ok(changed == 1)
    }

    fn owned_sessions(&self) -> Result<Vec<(String, String)>, StoreError> {
        let rows = self.with(|c| {
            c.query(
                "SELECT session_id, owner FROM sessions WHERE owner <> ''",
                &[],
            )
        })?;
        rows.iter()
            .map(|r| {
                Ok((
                    r.try_get(0).map_err(backend)?,
                    r.try_get(1).map_err(backend)?,
                ))
            })
            .collect()
    }

    fn load_session(&self, session_id: &str) -> Result<Option<SessionRecord>, StoreError> {
        let session_id = session_id.to_owned();
        let row = self.with(move |c| {
            c.query_opt(
                &format!("{SELECT_RECORD} WHERE session_id = $1"),
                &[&session_id],
            )
        })?;
        row.as_ref().map(record_from_row).transpose()
    }

    fn query_sessions(&self, q: &SessionQuery) -> Result<Vec<SessionRecord>, StoreError> {
        let mut sql = format!("{SELECT_RECORD} WHERE TRUE");
        let mut args: Vec<Box<dyn postgres::types::ToSql + Sync + Send>> = Vec::new();
        if let Some((at, id)) = &q.before {
            args.push(Box::new(to_i64(*at)));
            args.push(Box::new(id.clone()));
            sql.push_str(&format!(
                " AND (created_at, session_id) < (${}, ${})",
                args.len() - 1,
                args.len()
            ));
        }
        if !q.statuses.is_empty() {
            args.push(Box::new(q.statuses.clone()));
            sql.push_str(&format!(" AND status = ANY(${})", args.len()));
        }
        if let Some(owner) = &q.owner {
            args.push(Box::new(owner.clone()));
            sql.push_str(&format!(" AND owner = ${}", args.len()));
        }
        args.push(Box::new(to_i64(q.limit as u64)));
        sql.push_str(&format!(
            " ORDER BY created_at DESC, session_id DESC LIMIT ${}",
            args.len()
        ));
        let rows = self.with(move |c| {
            let params: Vec<&(dyn postgres::types::ToSql + Sync)> =
                args.iter().map(|a| a.as_ref() as _).collect();
            c.query(&sql, &params)
        })?;
        rows.iter().map(record_from_row).collect()
    }

    fn inbox_send(&self, session_id: &str, body: &serde_json::Value) -> Result<u64, StoreError> {
        let (session_id, body) = (session_id.to_owned(), body.to_string());
        let id: i64 = self.with(move |c| {
            let mut tx = c.transaction()?;
            let row = tx.query_one(
                "INSERT INTO inbox (session_id, body, state) VALUES ($1, $2, 'pending') \
                 RETURNING id",
                &[&session_id, &body],
            )?;
            Self::notify(&mut tx)?;
            tx.commit()?;
            Ok(row.get(0))
        })?;
        to_u64(id, "inbox id")
    }

    fn inbox_take(&self, owner: &str) -> Result<Vec<InboxRequest>, StoreError> {
        let owner = owner.to_owned();
        let rows = self.with(move |c| {
            c.query(
                "UPDATE inbox SET state = 'taken' WHERE id IN (SELECT i.id FROM inbox i \
                 JOIN sessions s ON s.session_id = i.session_id WHERE i.state = 'pending' \
                 AND s.owner = $1 ORDER BY i.id FOR UPDATE OF i SKIP LOCKED) \
                 RETURNING id, session_id, body",
                &[&owner],
            )
        })?;
        let mut taken = rows
            .iter()
            .map(|r| {
                let body: String = r.try_get(2).map_err(backend)?;
                Ok(InboxRequest {
                    id: to_u64(r.try_get(0).map_err(backend)?, "inbox id")?,
                    session_id: r.try_get(1).map_err(backend)?,
                    body: serde_json::from_str(&body).map_err(|e| {
                        StoreError::Backend(format!("an inbox request is not JSON: {e}"))
                    })?,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        taken.sort_by_key(|r| r.id);
        Ok(taken)
    }

    fn inbox_answer(&self, id: u64, reply: &serde_json::Value) -> Result<(), StoreError> {
        let reply = reply.to_string();
        self.with(move |c| {
            let mut tx = c.transaction()?;
            tx.execute(
                "UPDATE inbox SET state = 'done', reply = $2 WHERE id = $1",
                &[&to_i64(id), &reply],
            )?;
            Self::notify(&mut tx)?;
            tx.commit()
        })
    }

    fn inbox_state(&self, id: u64) -> Result<InboxState, StoreError> {
        let row = self.with(move |c| {
            c.query_opt(
                "SELECT state, reply FROM inbox WHERE id = $1",
                &[&to_i64(id)],
            )
        })?;
        let Some(row) = row else {
            return Ok(InboxState::Gone);
        };
        let state: String = row.try_get(0).map_err(backend)?;
        let reply: Option<String> = row.try_get(1).map_err(backend)?;
        Ok(match state.as_str() {
            "pending" => InboxState::Pending,
            "taken" => InboxState::Taken,
            "withdrawn" => InboxState::Withdrawn,
            _ => InboxState::Done(
                reply
                    .and_then(|r| serde_json::from_str(&r).ok())
                    .unwrap_or(serde_json::Value::Null),
            ),
        })
    }

    fn inbox_withdraw(&self, id: u64) -> Result<bool, StoreError> {
        let n = self.with(move |c| {
            c.execute(
                "UPDATE inbox SET state = 'withdrawn' WHERE id = $1 AND state = 'pending'",
                &[&to_i64(id)],
            )
        })?;
        Ok(n == 1)
    }

    fn inbox_forget(&self, id: u64) -> Result<(), StoreError> {
        self.with(move |c| c.execute("DELETE FROM inbox WHERE id = $1", &[&to_i64(id)]))?;
        Ok(())
    }

    fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }
}
