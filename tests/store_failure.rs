//! When the event log cannot be written, nothing is dropped silently: the running turn is
//! stopped, the session says `failed`, `GET /v1/health` says `degraded` with the cause, new
//! turns get 503; once the log can be written again the turn is recorded as failed
//! (`store_error`), the session goes on, and nothing a client saw is lost or changed.
//!
//! Two ways to fail: a real daemon whose data directory is a small tmpfs filled up mid-turn
//! (needs root to mount it, as `.ci/run` has: `#[ignore]`d, run with `--ignored`, and failing
//! without root), and an in-process engine over a store told to fail.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use codebuffd::agent::{AdapterSource, Launcher};
use codebuffd::session::{CreateRequest, Limits, SessionContext, SessionManager, SessionStatus};
use codebuffd::store::{EventStore, MemoryStore, SessionRecord, StoreError, StoredEvent};
use codebuffd::universal::EventDraft;
use serde_json::{json, Value};
use support::api::status_and_json;
use support::daemon::{Daemon, TempDir};
use support::ws::Ws;
use tokio::sync::watch;

// ---------------------------------------------------------------------------------------------
// A full disk under a real daemon.

/// A tmpfs mounted for one test, unmounted (lazily, so a busy file cannot block it) on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    /// Mounts a tmpfs of `size` (e.g. `24m`), or says why it cannot.
    fn mount(size: &str) -> Result<Tmpfs, String> {
        let uid = Command::new("id")
            .arg("-u")
            .output()
            .map_err(|e| e.to_string())?;
        if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
            return Err("not root".into());
        }
        let dir = std::env::temp_dir().join(format!(
            "codebuffd-tmpfs-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&dir)
            .status()
            .map_err(|e| e.to_string())?;
        if !status.success() {
            let _ = std::fs::remove_dir(&dir);
            return Err(format!("mount exited with {status}"));
        }
        Ok(Tmpfs(dir))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// Fills the file system of `dir` completely with `filler`.
fn fill(filler: &Path) {
    use std::io::Write;
    let mut file = std::fs::File::create(filler).expect("create the filler");
    let chunk = vec![0u8; 64 * 1024];
    while file.write_all(&chunk).is_ok() {}
    // The last partial blocks too.
    let byte = [0u8; 1];
    while file.write_all(&byte).is_ok() {}
    let _ = file.sync_all();
}

async fn health(d: &Daemon) -> (u16, Value) {
    status_and_json(d.get("/v1/health").await).await
}

async fn wait_health(d: &Daemon, want: u16, limit: Duration) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let (status, body) = health(d).await;
        if status == want {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "health never answered {want}: {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What an SSE client read.
#[derive(Default)]
struct Read {
    /// The events, as (sequence, JSON).
    events: Vec<(u64, Value)>,
    /// The data of an `event: error` message.
    error: Option<Value>,
    /// Whether the daemon closed the stream.
    closed: bool,
}

/// Every message an SSE client reads after `Last-Event-ID` `after` until the stream closes or
/// it has read the sequence `until` holds (0 until set: no limit).
fn follow(d: &Daemon, id: &str, after: u64) -> (tokio::task::JoinHandle<Read>, Arc<AtomicU64>) {
    let until = Arc::new(AtomicU64::new(0));
    let url = d.url(&format!("/v1/sessions/{id}/events/sse"));
    let http = d.http.clone();
    let done = until.clone();
    let task = tokio::spawn(async move {
        use futures_util::StreamExt;
        let mut read = Read::default();
        let request = http.get(url).header("last-event-id", after.to_string());
        let Ok(resp) = request.send().await else {
            return read;
        };
        let mut body = resp.bytes_stream();
        let mut buf = String::new();
        loop {
            let until = done.load(Ordering::SeqCst);
            if until > 0 && read.events.last().is_some_and(|(seq, _)| *seq >= until) {
                break;
            }
            let next = tokio::time::timeout(Duration::from_millis(200), body.next()).await;
            let chunk = match next {
                Ok(Some(Ok(chunk))) => chunk,
                Ok(None) => {
                    read.closed = true;
                    break;
                }
                Ok(Some(Err(_))) => break,
                Err(_) => continue,
            };
            buf.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = buf.find("\n\n") {
                let block: String = buf.drain(..end + 2).collect();
                let Some(data) = block.lines().find_map(|l| l.strip_prefix("data: ")) else {
                    continue;
                };
                let data: Value = serde_json::from_str(data).expect("SSE data is JSON");
                if block.lines().any(|l| l == "event: error") {
                    assert!(read.error.is_none(), "one error ends the stream");
                    assert!(
                        !block.contains("\nid:") && !block.starts_with("id:"),
                        "{block}"
                    );
                    read.error = Some(data);
                } else {
                    assert!(read.error.is_none(), "nothing after the error: {block}");
                    read.events
                        .push((data["sequence"].as_u64().unwrap_or(0), data));
                }
            }
        }
        read
    });
    (task, until)
}

/// Checks that an SSE stream ended with a `store_unavailable` error about session `id`.
fn told_store_unavailable(read: &Read, id: &str) {
    assert!(read.closed, "the daemon closed the stream");
    let error = read
        .error
        .as_ref()
        .expect("an error message ended the stream");
    assert_eq!(
        error["type"], "urn:sandbox-agent:error:store_unavailable",
        "{error}"
    );
    assert_eq!(error["status"], 503, "{error}");
    assert_eq!(error["sessionId"], id, "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root (to mount a tmpfs), and --ignored"]
async fn a_full_disk_mid_turn_fails_the_turn_visibly_and_the_daemon_recovers_when_space_returns() {
    let fs = match Tmpfs::mount("24m") {
        Ok(fs) => fs,
        Err(why) => panic!("cannot mount a tmpfs ({why}): this test needs root, as .ci/run has"),
    };
    let data = fs.0.join("data");
    let d = Daemon::start_in(&data, &[]);
    d.create("full", json!({"agent": "mock"})).await;
    d.message("full", "echo before").await;
    d.wait_turns_ended("full", 1).await;
    let (reader, _) = follow(&d, "full", 0);
    // A WebSocket subscriber too, live from here.
    let mut ws = Ws::connect(&d).await;
    let txid = ws
        .send(json!({"type": "subscribe", "topics": ["full"]}))
        .await;
    ws.acked(txid).await;

    // A slow stream of deltas: the turn is well under way when the disk fills.
    d.message("full", "flood 100000 400").await;
    d.wait_for("full", Duration::from_secs(20), |e| {
        e["type"] == "item.delta" && e["sequence"].as_u64().unwrap_or(0) > 60
    })
    .await;
    let filler = fs.0.join("filler");
    fill(&filler);

    let degraded = wait_health(&d, 503, Duration::from_secs(30)).await;
    assert_eq!(degraded["status"], "degraded");
    let cause = degraded["cause"].as_str().unwrap_or("");
    assert!(
        cause.contains("full") || cause.contains("space"),
        "the cause says the disk is full: {cause}"
    );
    let info = d
        .wait_status("full", "failed", Duration::from_secs(20))
        .await;
    assert_eq!(info["ended"], false);
    // The live reader is told, and its stream closed: it does not wait in silence.
    let first = tokio::time::timeout(Duration::from_secs(10), reader)
        .await
        .expect("the live SSE stream ends while the log cannot be written")
        .unwrap();
    told_store_unavailable(&first, "full");
    assert!(
        first.events.len() > 60,
        "the client saw the turn's events: {}",
        first.events.len()
    );
    let seen_last = first.events.last().map_or(0, |(seq, _)| *seq);
    // A reader that comes back meanwhile is told at once.
    let (again, _) = follow(&d, "full", seen_last);
    let again = tokio::time::timeout(Duration::from_secs(10), again)
        .await
        .expect("a new SSE stream ends at once while the log cannot be written")
        .unwrap();
    told_store_unavailable(&again, "full");
    assert!(again.events.is_empty(), "{:?}", again.events);
    // The WebSocket subscriber is told once it has every stored event.
    let got = ws.recv_until(|m| m["data"]["type"] == "action-error").await;
    let (error, sent) = got.split_last().unwrap();
    assert_eq!(error["data"]["error"], "store_unavailable", "{error}");
    assert!(
        error["data"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("session full"),
        "{error}"
    );
    assert_eq!(
        sent.last()
            .and_then(|m| m["data"]["event"]["sequence"].as_u64()),
        Some(seen_last)
    );
    // While the disk stays full the daemon stays degraded: the store's probe writes real data
    // (an empty commit succeeded on the full disk, and health said `ok` most of the time),
    // and every create is refused, across several probes (one a second).
    let mut answers = Vec::new();
    for n in 0..12 {
        answers.push(health(&d).await.0);
        let resp = d
            .post(
                &format!("/v1/sessions/during-{n}"),
                json!({"agent": "mock"}),
            )
            .await;
        answers.push(resp.status().as_u16());
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(
        answers.iter().all(|s| *s == 503),
        "health and creates while the disk is full: {answers:?}"
    );
    // `GET` says what the log holds, not what the session stamped.
    let info = d.info("full").await;
    let stored = d.events("full").await;
    assert_eq!(
        info["eventCount"].as_u64(),
        stored.last().and_then(|e| e["sequence"].as_u64()),
        "{info}"
    );
    assert_eq!(
        stored.last().and_then(|e| e["sequence"].as_u64()),
        Some(seen_last)
    );
    // New turns and sessions are refused while the log cannot be written.
    let resp = d
        .post(
            "/v1/sessions/full/messages",
            json!({"message": "echo during"}),
        )
        .await;
    assert_eq!(resp.status(), 503);
    let problem: Value = resp.json().await.unwrap();
    assert_eq!(problem["type"], "urn:sandbox-agent:error:store_unavailable");
    let resp = d.post("/v1/sessions/other", json!({"agent": "mock"})).await;
    assert_eq!(resp.status(), 503);
    // The flooding agent was stopped: no agent of a turn runs.
    let left = d.wait_no_agents(Duration::from_secs(10)).await;
    assert!(
        left.is_empty(),
        "the agent of the failed turn still runs: {left:?}"
    );

    // Space returns: the daemon recovers by itself and records how the turn ended; the
    // reader resumes where it was told to stop. While the session catches up with its log,
    // `GET` never counts more than the log holds (it counted the refused events once the
    // store said it was healthy again, before the session had caught up).
    std::fs::remove_file(&filler).expect("remove the filler");
    let mut counts = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let info = d.info("full").await;
        let (_, list) = status_and_json(d.get("/v1/sessions").await).await;
        let stored = d.events("full").await;
        let last = stored
            .last()
            .and_then(|e| e["sequence"].as_u64())
            .unwrap_or(0);
        let count = info["eventCount"].as_u64().unwrap_or(u64::MAX);
        counts.push((count, last));
        let listed = list["sessions"]
            .as_array()
            .and_then(|all| all.iter().find(|s| s["sessionId"] == "full"))
            .and_then(|s| s["eventCount"].as_u64())
            .unwrap_or(u64::MAX);
        counts.push((listed, last));
        if info["status"] == "idle" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        counts.iter().all(|(count, last)| count <= last),
        "eventCount beyond the log (count, stored): {counts:?}"
    );
    assert_eq!(counts.last().map(|(count, last)| count == last), Some(true));
    let ok = wait_health(&d, 200, Duration::from_secs(20)).await;
    assert_eq!(ok["status"], "ok");
    let (resumed, resumed_until) = follow(&d, "full", seen_last);
    let events = d.wait_turns_ended("full", 2).await;
    // The subscription goes on from where it was.
    let after = ws
        .recv_until(|m| m["data"]["event"]["type"] == "turn.ended")
        .await;
    assert_eq!(
        after[0]["data"]["event"]["sequence"].as_u64(),
        Some(seen_last + 1)
    );
    assert_eq!(
        after.last().unwrap()["data"]["event"]["data"]["metadata"]["code"],
        "store_error"
    );
    let ended: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "turn.ended")
        .collect();
    let metadata = &ended[1]["data"]["metadata"];
    assert_eq!(metadata["status"], "failed");
    assert_eq!(metadata["code"], "store_error");
    assert!(
        metadata["message"]
            .as_str()
            .unwrap_or("")
            .contains("event log"),
        "{metadata}"
    );
    d.wait_status("full", "idle", Duration::from_secs(10)).await;
    d.message("full", "echo after").await;
    let events = d.wait_turns_ended("full", 3).await;
    let last_end = events
        .iter()
        .rev()
        .find(|e| e["type"] == "turn.ended")
        .unwrap();
    assert_eq!(last_end["data"]["metadata"]["status"], "completed");

    // Dense, and everything the SSE client saw is in the log, unchanged.
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e["sequence"].as_u64(), Some(i as u64 + 1), "dense log");
    }
    let info = d.info("full").await;
    assert_eq!(
        info["eventCount"].as_u64(),
        events.last().and_then(|e| e["sequence"].as_u64()),
        "{info}"
    );
    resumed_until.store(events.len() as u64, Ordering::SeqCst);
    let resumed = tokio::time::timeout(Duration::from_secs(20), resumed)
        .await
        .expect("the resumed reader reads the whole log")
        .unwrap();
    assert!(resumed.error.is_none(), "{:?}", resumed.error);
    let seen: Vec<(u64, Value)> = first.events.into_iter().chain(resumed.events).collect();
    assert_eq!(
        seen.len(),
        events.len(),
        "the two streams read the whole log"
    );
    let log: BTreeMap<u64, &Value> = events
        .iter()
        .map(|e| (e["sequence"].as_u64().unwrap(), e))
        .collect();
    for (seq, event) in &seen {
        assert_eq!(
            log.get(seq),
            Some(&event),
            "event {seq} the client saw is in the log"
        );
    }

    d.stop();
    // No corrupt database.
    let conn = rusqlite::Connection::open(data.join("codebuffd.db")).unwrap();
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    drop(conn);
    let _ = std::fs::remove_dir_all(&data);
}

// ---------------------------------------------------------------------------------------------
// A store that is told to fail, under an in-process engine.

/// The in-memory store, with a switch that makes it refuse appends (as a degraded durable
/// store does) and a health receiver that says so.
struct FailingStore {
    inner: MemoryStore,
    failing: AtomicBool,
    health: watch::Sender<Option<Arc<str>>>,
    /// While set, appends wait (as a slow commit does) and `held` counts those waiting.
    hold: AtomicBool,
    held: AtomicU64,
}

impl FailingStore {
    fn set_failing(&self, failing: bool) {
        self.failing.store(failing, Ordering::SeqCst);
        self.health
            .send_replace(failing.then(|| Arc::from("disk on fire")));
    }

    fn check(&self) -> Result<(), StoreError> {
        if self.failing.load(Ordering::SeqCst) {
            return Err(StoreError::Unavailable("disk on fire".into()));
        }
        Ok(())
    }
}

impl EventStore for FailingStore {
    fn coordination(&self) -> &dyn codebuffd::store::Coordination {
        self.inner.coordination()
    }
    fn create(&self, record: &SessionRecord) -> Result<(), StoreError> {
        self.check()?;
        self.inner.create(record)
    }
    fn put_session(&self, record: &SessionRecord) -> Result<(), StoreError> {
        self.inner.put_session(record)
    }
    fn load_sessions(&self) -> Result<Vec<SessionRecord>, StoreError> {
        self.inner.load_sessions()
    }
    fn delete_session(&self, id: &str) -> Result<bool, StoreError> {
        self.check()?;
        self.inner.delete_session(id)
    }
    fn flush(&self) -> Result<(), StoreError> {
        self.check()
    }
    fn append(
        &self,
        session_id: &str,
        drafts: &mut Vec<EventDraft>,
        time: Arc<str>,
        native_session_id: Option<&str>,
    ) -> Result<u64, StoreError> {
        self.check()?;
        if self.hold.load(Ordering::SeqCst) {
            self.held.fetch_add(1, Ordering::SeqCst);
            while self.hold.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
            self.held.fetch_sub(1, Ordering::SeqCst);
        }
        self.inner
            .append(session_id, drafts, time, native_session_id)
    }
    fn read(&self, id: &str, after: u64, limit: usize) -> Result<Vec<StoredEvent>, StoreError> {
        self.inner.read(id, after, limit)
    }
    fn last_sequence(&self, id: &str) -> Result<u64, StoreError> {
        self.inner.last_sequence(id)
    }
    fn subscribe(&self, id: &str) -> Result<watch::Receiver<u64>, StoreError> {
        self.inner.subscribe(id)
    }
    fn health(&self) -> Option<watch::Receiver<Option<Arc<str>>>> {
        Some(self.health.subscribe())
    }
}

fn events(store: &FailingStore, id: &str) -> Vec<Value> {
    store
        .read(id, 0, 100_000)
        .unwrap()
        .iter()
        .map(|e| serde_json::from_str(&e.json(false)).unwrap())
        .collect()
}

async fn wait_until(what: &str, limit: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_fails_stops_the_turn_and_the_session_resumes_once_it_works() {
    let state = TempDir::new("failing-store");
    let store = Arc::new(FailingStore {
        inner: MemoryStore::new(),
        failing: AtomicBool::new(false),
        health: watch::Sender::new(None),
        hold: AtomicBool::new(false),
        held: AtomicU64::new(0),
    });
    let launcher = Launcher::new(None, AdapterSource::from_env(state.path()))
        .with_mock_program(PathBuf::from(env!("CARGO_BIN_EXE_codebuffd")));
    let ctx = SessionContext::from_env(
        store.clone(),
        Arc::new(launcher),
        Limits::default(),
        state.path().to_path_buf(),
        "test".into(),
        false,
    );
    let manager = SessionManager::new(ctx);
    let request = CreateRequest {
        agent: "mock".into(),
        directory: Some(state.path().display().to_string()),
        ..CreateRequest::default()
    };
    manager.create("s", request).await.unwrap();
    // A session shows running only once the log holds its turn's start: while that append
    // waits (a slow commit), the session is still idle.
    store.hold.store(true, Ordering::SeqCst);
    manager.send_message("s", "flood 100000 400").await.unwrap();
    wait_until(
        "the turn's start to be appended",
        Duration::from_secs(20),
        || store.held.load(Ordering::SeqCst) > 0,
    )
    .await;
    let status = manager.info("s").unwrap().status;
    store.hold.store(false, Ordering::SeqCst);
    assert_eq!(status, SessionStatus::Idle);
    wait_until("the turn under way", Duration::from_secs(20), || {
        events(&store, "s").len() > 40
    })
    .await;
    store.set_failing(true);
    wait_until("the session to fail", Duration::from_secs(20), || {
        manager.info("s").unwrap().status == SessionStatus::Failed
    })
    .await;
    let refused = manager.send_message("s", "echo during").await;
    assert!(
        matches!(
            refused,
            Err(codebuffd::session::SessionError::StoreUnavailable(_))
        ),
        "{refused:?}"
    );
    let before = events(&store, "s").len();
    // The agent was stopped: the log stays as it is while the store fails.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(events(&store, "s").len(), before);

    // The store works again, but slowly: while the append that ends the turn waits, the
    // session is not idle yet (whoever sees it idle reads a log whose turns have all ended).
    store.hold.store(true, Ordering::SeqCst);
    store.set_failing(false);
    wait_until(
        "the turn's end to be appended",
        Duration::from_secs(20),
        || store.held.load(Ordering::SeqCst) > 0,
    )
    .await;
    let ended_in_log = events(&store, "s")
        .iter()
        .any(|e| e["type"] == "turn.ended");
    let status = manager.info("s").unwrap().status;
    store.hold.store(false, Ordering::SeqCst);
    assert!(!ended_in_log);
    assert_ne!(status, SessionStatus::Idle);
    wait_until(
        "the turn to be recorded as failed",
        Duration::from_secs(20),
        || {
            events(&store, "s").iter().any(|e| {
                e["type"] == "turn.ended" && e["data"]["metadata"]["code"] == "store_error"
            })
        },
    )
    .await;
    wait_until("the session to be idle", Duration::from_secs(10), || {
        manager.info("s").unwrap().status == SessionStatus::Idle
    })
    .await;
    manager.send_message("s", "echo after").await.unwrap();
    wait_until("the next turn", Duration::from_secs(20), || {
        events(&store, "s")
            .iter()
            .filter(|e| e["type"] == "turn.ended")
            .count()
            == 2
    })
    .await;
    let all = events(&store, "s");
    let ends: Vec<&Value> = all.iter().filter(|e| e["type"] == "turn.ended").collect();
    assert_eq!(ends[0]["data"]["metadata"]["status"], "failed");
    assert_eq!(ends[1]["data"]["metadata"]["status"], "completed");
    // Every item that started was completed (the failed turn's open items as failed).
    let started = all.iter().filter(|e| e["type"] == "item.started").count();
    let completed = all.iter().filter(|e| e["type"] == "item.completed").count();
    assert_eq!(started, completed);
    manager.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_the_store_refuses_keeps_the_session_for_a_retry() {
    let state = TempDir::new("failing-delete");
    let store = Arc::new(FailingStore {
        inner: MemoryStore::new(),
        failing: AtomicBool::new(false),
        health: watch::Sender::new(None),
        hold: AtomicBool::new(false),
        held: AtomicU64::new(0),
    });
    let launcher = Launcher::new(None, AdapterSource::from_env(state.path()))
        .with_mock_program(PathBuf::from(env!("CARGO_BIN_EXE_codebuffd")));
    let ctx = SessionContext::from_env(
        store.clone(),
        Arc::new(launcher),
        Limits::default(),
        state.path().to_path_buf(),
        "test".into(),
        false,
    );
    let manager = SessionManager::new(ctx);
    let request = CreateRequest {
        agent: "mock".into(),
        directory: Some(state.path().display().to_string()),
        ..CreateRequest::default()
    };
    manager.create("s", request).await.unwrap();
    manager.send_message("s", "echo one").await.unwrap();
    wait_until("the turn", Duration::from_secs(20), || {
        events(&store, "s")
            .iter()
            .any(|e| e["type"] == "turn.ended")
    })
    .await;
    manager.terminate("s").await.unwrap();
    store.set_failing(true);
    let refused = tokio::time::timeout(Duration::from_secs(20), manager.delete("s"))
        .await
        .expect("a refused delete answers");
    assert!(
        matches!(
            refused,
            Err(codebuffd::session::SessionError::StoreUnavailable(_))
        ),
        "{refused:?}"
    );
    // Still there, readable, ended; the log untouched.
    let info = manager.info("s").unwrap();
    assert_eq!(info.status, SessionStatus::Ended);
    assert!(events(&store, "s")
        .iter()
        .any(|e| e["type"] == "session.ended"));
    store.set_failing(false);
    manager.delete("s").await.unwrap();
    assert!(manager.info("s").is_err());
    assert!(store.inner.load_sessions().unwrap().is_empty());
    manager.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_follower_is_told_when_the_store_cannot_be_written_and_goes_on_after() {
    let state = TempDir::new("failing-follow");
    let store = Arc::new(FailingStore {
        inner: MemoryStore::new(),
        failing: AtomicBool::new(false),
        health: watch::Sender::new(None),
        hold: AtomicBool::new(false),
        held: AtomicU64::new(0),
    });
    let launcher = Launcher::new(None, AdapterSource::from_env(state.path()))
        .with_mock_program(PathBuf::from(env!("CARGO_BIN_EXE_codebuffd")));
    let ctx = SessionContext::from_env(
        store.clone(),
        Arc::new(launcher),
        Limits::default(),
        state.path().to_path_buf(),
        "test".into(),
        false,
    );
    let manager = SessionManager::new(ctx);
    let request = CreateRequest {
        agent: "mock".into(),
        directory: Some(state.path().display().to_string()),
        ..CreateRequest::default()
    };
    manager.create("s", request).await.unwrap();
    let last = store.last_sequence("s").unwrap();
    // A follower that has read everything and waits for more …
    let mut follow = manager.follow("s", last).unwrap();
    let waiting = tokio::spawn(async move {
        let result = follow.next().await.map(|page| page.map(|p| p.len()));
        (result, follow)
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiting.is_finished(), "the follower waits for events");
    // … is told when the store degrades, instead of waiting in silence; its cursor stays.
    store.set_failing(true);
    let (result, mut follow) = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the waiting follower is woken")
        .unwrap();
    assert!(
        matches!(
            &result,
            Err(codebuffd::session::SessionError::StoreUnavailable(why)) if why.contains("disk on fire")
        ),
        "{result:?}"
    );
    assert_eq!(follow.position(), last);
    // A follower that starts meanwhile reads what is stored, then is told the same.
    let mut late = manager.follow("s", 0).unwrap();
    let page = late.next().await.unwrap().unwrap();
    assert_eq!(page.last().map(|e| e.sequence), Some(last));
    assert!(matches!(
        late.next().await,
        Err(codebuffd::session::SessionError::StoreUnavailable(_))
    ));

    // Once the store writes again, the first follower goes on from where it was.
    store.set_failing(false);
    let mut drafts = vec![EventDraft::synthetic(
        codebuffd::universal::EventData::Error(Box::new(codebuffd::universal::ErrorData {
            message: "after".into(),
            code: None,
            details: None,
        })),
    )];
    store
        .append("s", &mut drafts, "2026-01-01T00:00:00Z".into(), None)
        .unwrap();
    let page = tokio::time::timeout(Duration::from_secs(5), follow.next())
        .await
        .expect("the follower goes on")
        .unwrap()
        .unwrap();
    assert_eq!(
        page.iter().map(|e| e.sequence).collect::<Vec<_>>(),
        vec![last + 1]
    );
    manager.shutdown(Duration::from_secs(5)).await;
}
