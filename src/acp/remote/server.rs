//! One remote ACP server: an ACP connection to the engine, served by the same door as
//! `codebuffd acp` ([`crate::acp::serve`]), whose input is the envelopes clients post and whose
//! output goes to its [`EnvelopeLog`].
//!
//! * [`Server::post`] hands one envelope to the connection. A request's answer is awaited (the
//!   caller gets a receiver); notifications and the client's responses (to permission requests,
//!   questions) are only delivered.
//! * The writer thread takes what the connection writes, records what an answer changes (a
//!   created session, the `initialize`), appends it to the log with one write per batch, and
//!   only then hands an answer to the request waiting for it — so the log holds
//!   every envelope, answers included, in the order the connection wrote them. It also counts
//!   them written for the door's [`Outbox`]: readers never hold the door up (the log keeps
//!   everything for them).
//! * It remembers what a restart and a delete need: the client's `initialize` (replayed to the
//!   connection of a restarted daemon), the sessions it created (ended by a delete) and the
//!   prompts running (cancelled by a delete).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex};

use agent_client_protocol::Lines;
use futures::channel::mpsc as fmpsc;
use futures::SinkExt;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;
use tokio::sync::oneshot;

use super::envelopes::EnvelopeLog;
use super::record::{ServerRecord, LOG_FILE};
use crate::acp::{self, AcpOptions, Outbox};
use crate::session::AgentKind;
use crate::session::SessionManager;
use crate::sync::LockExt;

/// The id of the `initialize` a restored server replays (its answer is not logged).
const RESTORE_ID: &str = "codebuffd/restore-initialize";
/// Lines the writer gathers into one append at most.
const WRITE_BATCH: usize = 512;

/// What posting an envelope did.
#[derive(Debug)]
pub enum Posted {
    /// A request: its answer (the response envelope's JSON) comes on this receiver; a closed
    /// receiver means the server was closed before it answered.
    Answer(oneshot::Receiver<Arc<str>>),
    /// A notification or a response: delivered.
    Accepted,
}

/// Why an envelope was not taken.
#[derive(Debug, thiserror::Error)]
pub enum PostError {
    #[error("the body must be one JSON-RPC message (an object)")]
    NotAnObject,
    /// Not a JSON-RPC 2.0 message the connection would answer (it would drop it silently).
    #[error("not a JSON-RPC 2.0 message: {0}")]
    Invalid(&'static str),
    #[error("the ACP server is closed")]
    Closed,
}

/// A request waiting for its answer.
struct Waiter {
    method: String,
    /// The session a `session/prompt` is for.
    session: Option<String>,
    /// The `initialize` parameters (recorded once it succeeds).
    params: Option<Value>,
    /// `None` for the restore's own `initialize`, whose answer nobody reads.
    tx: Option<oneshot::Sender<Arc<str>>>,
}

/// State the handlers and the writer thread share.
struct Shared {
    dir: PathBuf,
    waiting: Mutex<HashMap<String, Waiter>>,
    record: Mutex<ServerRecord>,
    /// Running prompts by session.
    prompting: Mutex<BTreeMap<String, usize>>,
}

impl Shared {
    fn save(&self, record: &ServerRecord) {
        if let Err(error) = record.save(&self.dir) {
            tracing::warn!(%error, server = %record.server_id, "cannot write the ACP server's record");
        }
    }

    /// A response is about to be written: settles its request's bookkeeping (recorded before the
    /// client can see the answer, so a crash right after cannot lose it) and returns who waits.
    fn settle(&self, key: &str, line: &str) -> Option<oneshot::Sender<Arc<str>>> {
        let waiter = self.waiting.lock_unpoisoned().remove(key);
        let waiter = waiter?;
        let ok = succeeded(line);
        match waiter.method.as_str() {
            "session/new" if ok => {
                if let Some(id) = result_session_id(line) {
                    let mut record = self.record.lock_unpoisoned();
                    record.sessions.push(id);
                    self.save(&record);
                }
            }
            "initialize" if ok && waiter.tx.is_some() => {
                let mut record = self.record.lock_unpoisoned();
                record.initialize = waiter.params.clone();
                self.save(&record);
            }
            _ => {}
        }
        if let Some(session) = &waiter.session {
            let mut prompting = self.prompting.lock_unpoisoned();
            if let Some(n) = prompting.get_mut(session) {
                *n -= 1;
                if *n == 0 {
                    prompting.remove(session);
                }
            }
        }
        waiter.tx
    }
}

/// A response's head: enough to tell it from a request or notification.
#[derive(Deserialize)]
struct Head<'a> {
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    method: Option<&'a str>,
}

/// True when the JSON response `line` has a `result` (not an `error`).
fn succeeded(line: &str) -> bool {
    #[derive(Deserialize)]
    struct R<'a> {
        #[serde(borrow, default)]
        result: Option<&'a RawValue>,
    }
    serde_json::from_str::<R>(line).is_ok_and(|r| r.result.is_some())
}

/// `result.sessionId` of a response.
fn result_session_id(line: &str) -> Option<String> {
    let v: Value = serde_json::from_str(line).ok()?;
    Some(v.get("result")?.get("sessionId")?.as_str()?.to_owned())
}

/// The key of a JSON-RPC id: its compact JSON.
fn id_key(id: &Value) -> String {
    id.to_string()
}

/// One server.
pub struct Server {
    pub id: String,
    pub agent: AgentKind,
    pub created_at_ms: i64,
    pub log: Arc<EnvelopeLog>,
    shared: Arc<Shared>,
    manager: Arc<SessionManager>,
    /// The connection's input; taken at close (which ends the connection).
    incoming: Mutex<Option<fmpsc::Sender<std::io::Result<String>>>>,
    connection: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// When a client last posted to it or read its stream (the idle sweep retires it after
    /// `--acp-idle-timeout` of neither).
    last_used: Mutex<std::time::Instant>,
    /// Streams reading its log now (a server being read is not idle).
    readers: Arc<std::sync::atomic::AtomicUsize>,
}

/// A stream reading a server's log; the server counts as in use until it is dropped.
pub struct Reading {
    readers: Arc<std::sync::atomic::AtomicUsize>,
}

impl Drop for Reading {
    fn drop(&mut self) {
        self.readers
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Server {
    /// Starts the server recorded in `dir` (new or restored): opens its log and connects it to
    /// the door. A restored server is initialized again with its client's parameters.
    pub fn start(
        manager: Arc<SessionManager>,
        data_dir: &Path,
        dir: PathBuf,
        mut record: ServerRecord,
    ) -> std::io::Result<Arc<Server>> {
        let agent = AgentKind::parse(&record.agent).ok_or_else(|| {
            std::io::Error::other(format!("unknown agent `{}` in the record", record.agent))
        })?;
        // Served by this engine from now on (see `ServerRecord::engine`).
        record.engine = Some(manager.engine_id().to_owned());
        record.save(&dir)?;
        let log = Arc::new(EnvelopeLog::open(&dir.join(LOG_FILE))?);
        let initialize = record.initialize.clone();
        let shared = Arc::new(Shared {
            dir,
            waiting: Mutex::new(HashMap::new()),
            record: Mutex::new(record.clone()),
            prompting: Mutex::new(BTreeMap::new()),
        });
        let outbox = Outbox::new();
        let (line_tx, line_rx) = mpsc::channel::<String>();
        {
            let (shared, log, outbox) = (shared.clone(), log.clone(), outbox.clone());
            std::thread::Builder::new()
                .name("acp-http-log".into())
                .spawn(move || write_envelopes(line_rx, &shared, &log, &outbox))?;
        }
        let (mut in_tx, in_rx) = fmpsc::channel::<std::io::Result<String>>(16);
        let sink = futures::sink::unfold(line_tx, |tx, line: String| async move {
            // The writer only goes away with this sink.
            let _ = tx.send(line);
            Ok::<_, std::io::Error>(tx)
        });
        let options = AcpOptions {
            agent,
            data_dir: data_dir.to_owned(),
        };
        let server_id = record.server_id.clone();
        let connection = {
            let manager = manager.clone();
            let server_id = server_id.clone();
            let (shared, log) = (shared.clone(), log.clone());
            tokio::spawn(async move {
                if let Err(error) =
                    acp::serve(manager, options, outbox, Lines::new(sink, in_rx)).await
                {
                    tracing::warn!(%error, server = %server_id, "an ACP server's connection failed");
                }
                // Over (closed, or failed by itself): nothing waiting will be answered, and
                // its streams end after what was logged.
                shared.waiting.lock_unpoisoned().clear();
                log.close();
            })
        };
        if let Some(params) = initialize {
            shared.waiting.lock_unpoisoned().insert(
                id_key(&Value::from(RESTORE_ID)),
                Waiter {
                    method: "initialize".into(),
                    session: None,
                    params: None,
                    tx: None,
                },
            );
            let line = serde_json::json!({
                "jsonrpc": "2.0", "id": RESTORE_ID, "method": "initialize", "params": params,
            })
            .to_string();
            // The channel is new and empty: there is room.
            let _ = in_tx.try_send(Ok(line));
        }
        Ok(Arc::new(Server {
            id: server_id,
            agent,
            created_at_ms: record.created_at_ms,
            log,
            shared,
            manager,
            incoming: Mutex::new(Some(in_tx)),
            connection: Mutex::new(Some(connection)),
            last_used: Mutex::new(std::time::Instant::now()),
            readers: Arc::default(),
        }))
    }

    /// True for the server of an `/acp` WebSocket connection (it ends with its socket).
    pub fn websocket(&self) -> bool {
        self.shared.record.lock_unpoisoned().websocket
    }

    /// Notes that a client used the server now.
    pub fn touch(&self) {
        *self.last_used.lock_unpoisoned() = std::time::Instant::now();
    }

    /// Counts a stream reading the log until the returned guard is dropped.
    pub fn reading(&self) -> Reading {
        self.readers
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Reading {
            readers: self.readers.clone(),
        }
    }

    /// How long no client has used it, `None` while a request of its client runs (a prompt, a
    /// request waiting for its answer) or a stream reads it: a server is idle only when nothing
    /// is going on.
    pub fn idle_for(&self) -> Option<std::time::Duration> {
        if self.readers.load(std::sync::atomic::Ordering::Relaxed) > 0 {
            return None;
        }
        let busy = !self.shared.waiting.lock_unpoisoned().is_empty();
        if busy {
            return None;
        }
        Some(self.last_used.lock_unpoisoned().elapsed())
    }

    /// Hands one envelope to the connection.
    pub async fn post(&self, envelope: Value) -> Result<Posted, PostError> {
        let Some(object) = envelope.as_object() else {
            return Err(PostError::NotAnObject);
        };
        self.touch();
        check_envelope(object)?;
        let method = object.get("method").and_then(Value::as_str);
        let id = object.get("id").filter(|id| !id.is_null());
        let mut answer = None;
        let mut key = None;
        if let (Some(method), Some(id)) = (method, id) {
            let (tx, rx) = oneshot::channel();
            let params = object.get("params");
            let session = (method == "session/prompt")
                .then(|| params?.get("sessionId")?.as_str().map(str::to_owned))
                .flatten();
            if let Some(session) = &session {
                *self
                    .shared
                    .prompting
                    .lock_unpoisoned()
                    .entry(session.clone())
                    .or_default() += 1;
            }
            let k = id_key(id);
            // A second request with the same id replaces the first's waiter (which then
            // answers that the server closed it): ids are the client's to keep apart.
            self.shared.waiting.lock_unpoisoned().insert(
                k.clone(),
                Waiter {
                    method: method.to_owned(),
                    session,
                    params: (method == "initialize").then(|| params.cloned()).flatten(),
                    tx: Some(tx),
                },
            );
            answer = Some(rx);
            key = Some(k);
        }
        let line = envelope.to_string();
        let sender = self.incoming.lock_unpoisoned().clone();
        let delivered = match sender {
            Some(mut tx) => tx.send(Ok(line)).await.is_ok(),
            None => false,
        };
        if !delivered {
            if let Some(k) = key {
                self.forget(&k);
            }
            return Err(PostError::Closed);
        }
        Ok(match answer {
            Some(rx) => Posted::Answer(rx),
            None => Posted::Accepted,
        })
    }

    /// Hands the connection a message as the client wrote it, without following it: for what is
    /// not one JSON object (the connection answers the parse error or invalid request itself).
    pub async fn post_raw(&self, line: String) -> Result<(), PostError> {
        let sender = self.incoming.lock_unpoisoned().clone();
        let Some(mut tx) = sender else {
            return Err(PostError::Closed);
        };
        tx.send(Ok(line)).await.map_err(|_| PostError::Closed)
    }

    /// Drops the waiter of request `key` (it was never delivered).
    fn forget(&self, key: &str) {
        let waiter = self.shared.waiting.lock_unpoisoned().remove(key);
        if let Some(session) = waiter.and_then(|w| w.session) {
            let mut prompting = self.shared.prompting.lock_unpoisoned();
            if let Some(n) = prompting.get_mut(&session) {
                *n -= 1;
                if *n == 0 {
                    prompting.remove(&session);
                }
            }
        }
    }

    /// True until [`Server::close`].
    pub fn is_open(&self) -> bool {
        self.incoming.lock_unpoisoned().is_some()
    }

    /// The directory of its record and log.
    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    /// Ends the server: the connection ends (the door stops its tasks), the sessions it created
    /// end (their turns stopped, their agents' process groups killed), prompts it was running
    /// on other sessions are cancelled, requests still waiting are answered as closed, and its
    /// stream ends after what was logged.
    pub async fn close(&self) {
        let incoming = self.incoming.lock_unpoisoned().take();
        drop(incoming);
        let connection = self.connection.lock_unpoisoned().take();
        if let Some(connection) = connection {
            // The connection ends once its input does; it is stopped if it does not.
            let abort = connection.abort_handle();
            if tokio::time::timeout(std::time::Duration::from_secs(5), connection)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
        let created = self.shared.record.lock_unpoisoned().sessions.clone();
        let prompting: Vec<String> = self
            .shared
            .prompting
            .lock_unpoisoned()
            .keys()
            .cloned()
            .collect();
        for id in &created {
            if let Err(error) = self.manager.terminate(id).await {
                tracing::debug!(%error, session = %id, "ending a session of a closed ACP server");
            }
        }
        for id in prompting.iter().filter(|id| !created.contains(id)) {
            let _ = self.manager.cancel(id).await;
        }
        self.shared.waiting.lock_unpoisoned().clear();
        self.log.close();
    }
}

/// The writer thread: appends what the connection writes, then settles the answered requests
/// and counts the lines written, until the connection drops its sink.
fn write_envelopes(
    rx: mpsc::Receiver<String>,
    shared: &Shared,
    log: &EnvelopeLog,
    outbox: &Outbox,
) {
    let mut batch = Vec::with_capacity(WRITE_BATCH);
    let restore_key = id_key(&Value::from(RESTORE_ID));
    while let Ok(first) = rx.recv() {
        batch.push(first);
        while batch.len() < WRITE_BATCH {
            match rx.try_recv() {
                Ok(line) => batch.push(line),
                Err(_) => break,
            }
        }
        let count = batch.len();
        // Responses, by index in the batch, with their request's key.
        let mut answers = Vec::new();
        let mut keep = Vec::with_capacity(count);
        for line in batch.drain(..) {
            let key = match serde_json::from_str::<Head>(&line) {
                Ok(Head {
                    id: Some(id),
                    method: None,
                }) => Some(compact(id.get())),
                _ => None,
            };
            match key {
                Some(k) if k == restore_key => {
                    shared.settle(&k, &line);
                }
                Some(k) => {
                    answers.push((keep.len(), shared.settle(&k, &line)));
                    keep.push(line);
                }
                None => keep.push(line),
            }
        }
        if let Err(error) = log.append(&keep) {
            tracing::error!(%error, "cannot append to an ACP server's envelope log");
        }
        for (i, tx) in answers {
            if let Some(tx) = tx {
                let _ = tx.send(Arc::from(keep[i].as_str()));
            }
        }
        outbox.written(count);
    }
}

/// Refuses what the connection would drop without an answer (`jsonrpc` other than `"2.0"`, an
/// id that is not a string or a 64-bit integer, a method that is not a string, a message that
/// is neither a request, a notification nor a response), so that a POST never waits for an
/// answer that cannot come.
fn check_envelope(object: &serde_json::Map<String, Value>) -> Result<(), PostError> {
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(PostError::Invalid("`jsonrpc` must be \"2.0\""));
    }
    match object.get("id") {
        None | Some(Value::Null | Value::String(_)) => {}
        Some(Value::Number(n)) if n.is_i64() => {}
        Some(_) => {
            return Err(PostError::Invalid(
                "`id` must be a string, an integer of at most 64 bits or null",
            ))
        }
    }
    match object.get("method") {
        Some(Value::String(_)) => Ok(()),
        Some(_) => Err(PostError::Invalid("`method` must be a string")),
        None if object.contains_key("result") || object.contains_key("error") => {
            if object.get("id").is_none_or(Value::is_null) {
                Err(PostError::Invalid("a response must carry the request's `id`"))
            } else {
                Ok(())
            }
        }
        None => Err(PostError::Invalid(
            "a message needs a `method` (a request or notification) or a `result` or `error` (a response)",
        )),
    }
}

/// The compact form of the JSON text `raw` (ids as the connection wrote them).
fn compact(raw: &str) -> String {
    match serde_json::from_str::<Value>(raw) {
        Ok(v) => v.to_string(),
        Err(_) => raw.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_response_head_is_told_from_requests_and_notifications() {
        let head = |s: &str| {
            let h: Head = serde_json::from_str(s).unwrap();
            (h.id.map(|i| compact(i.get())), h.method.map(str::to_owned))
        };
        assert_eq!(
            head(r#"{"jsonrpc":"2.0","id":"a b","result":{"method":"x"}}"#),
            (Some("\"a b\"".into()), None)
        );
        assert_eq!(
            head(r#"{"jsonrpc":"2.0","method":"session/update","params":{}}"#),
            (None, Some("session/update".into()))
        );
        assert_eq!(
            head(r#"{"jsonrpc":"2.0","id":3,"method":"session/request_permission"}"#),
            (Some("3".into()), Some("session/request_permission".into()))
        );
        assert!(succeeded(r#"{"id":1,"result":{"error":1}}"#));
        let check = |s: &str| {
            let v: Value = serde_json::from_str(s).unwrap();
            check_envelope(v.as_object().unwrap()).map_err(|e| e.to_string())
        };
        for ok in [
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize"}"#,
            r#"{"jsonrpc":"2.0","id":"a","method":"x"}"#,
            r#"{"jsonrpc":"2.0","id":-9223372036854775808,"method":"x"}"#,
            r#"{"jsonrpc":"2.0","method":"session/cancel"}"#,
            r#"{"jsonrpc":"2.0","id":3,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":3,"error":{"code":-1,"message":"no"}}"#,
        ] {
            assert_eq!(check(ok), Ok(()), "{ok}");
        }
        for bad in [
            r#"{"jsonrpc":"1.0","id":1,"method":"initialize"}"#,
            r#"{"id":1,"method":"initialize"}"#,
            r#"{"jsonrpc":"2.0","id":{"a":1},"method":"initialize"}"#,
            r#"{"jsonrpc":"2.0","id":18446744073709551616,"method":"initialize"}"#,
            r#"{"jsonrpc":"2.0","id":18446744073709551615,"method":"initialize"}"#,
            r#"{"jsonrpc":"2.0","id":1.5,"method":"initialize"}"#,
            r#"{"jsonrpc":"2.0","id":true,"method":"initialize"}"#,
            r#"{"jsonrpc":"2.0","id":[1],"method":"initialize"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":7}"#,
            r#"{"jsonrpc":"2.0","id":1}"#,
            r#"{"jsonrpc":"2.0","result":{}}"#,
        ] {
            assert!(check(bad).is_err(), "{bad}");
        }
        assert!(!succeeded(r#"{"id":1,"error":{"code":-1}}"#));
        assert_eq!(
            result_session_id(r#"{"id":1,"result":{"sessionId":"s"}}"#).as_deref(),
            Some("s")
        );
    }
}
