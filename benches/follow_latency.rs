//! Many engines, one log (issue 20): how fast a turn run by one process reaches a reader in
//! another, and how fast `codebuffd sessions list` reads a big data directory.
//!
//! * **Follow latency.** Two `codebuffd server`s share a store: one SQLite data directory, or
//!   one Postgres with a data directory each. The owner (A) runs `flood N RATE` (the mock
//!   agent stamps each delta with its wall clock as it writes it); a reader of A's own SSE and
//!   a reader of B's SSE take every delta. Per delta: reader's clock minus the agent's stamp.
//!   A's reader is the baseline (agent → owner → commit → reader, one process); B's adds the
//!   crossing (SQLite: B's `PRAGMA data_version` watcher; Postgres: `LISTEN/NOTIFY`), so B's
//!   figure bounds "owner's commit → another process's reader" from above. Targets: B's p99
//!   ≤ 50 ms on SQLite, ≤ 100 ms on Postgres.
//! * **`sessions list` over 10,000 sessions.** The records are written through the store API
//!   (`SqliteStore::create`), then `codebuffd sessions list` (table and `--json`) runs as a
//!   person would run it, no daemon anywhere; wall time of the whole process. Target ≤ 200 ms.
//!
//! ```text
//! cargo bench --bench follow_latency    # Postgres too with CODEBUFFD_TEST_POSTGRES_URL set
//! ```
//!
//! Without `--bench` (`cargo test --benches`, as `.ci/run` does) it runs a smoke version: tiny
//! sizes, numbers meaningless, targets unevaluated; a lost delta fails it all the same.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::{json, Value};

#[path = "../tests/support/procs.rs"]
#[allow(dead_code)]
mod procs;

const TARGET_SQLITE_P99: Duration = Duration::from_millis(50);
const TARGET_POSTGRES_P99: Duration = Duration::from_millis(100);
const TARGET_LIST: Duration = Duration::from_millis(200);

fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_codebuffd"))
}

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// A scratch directory removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!(
            "codebuffd-bench-{tag}-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A `codebuffd server` in a session of its own; stopped (SIGTERM, then SIGKILL of anything
/// left in its session) on drop.
struct Server {
    child: Child,
    base: String,
}

impl Server {
    fn start(data_dir: &Path, work: &Path, store: Option<&str>) -> Server {
        let mut cmd = Command::new(binary());
        cmd.args(["server", "--no-token", "--host", "127.0.0.1", "--port", "0"])
            .arg("--data-dir")
            .arg(data_dir)
            .current_dir(work)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        if let Some(url) = store {
            cmd.args(["--store", url]);
        }
        // SAFETY: setsid is async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                nix::unistd::setsid()
                    .map(|_| ())
                    .map_err(std::io::Error::from)
            });
        }
        let mut child = cmd.spawn().expect("start codebuffd server");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .expect("the ready line");
        let ready: Value = serde_json::from_str(&line).expect("the ready line is JSON");
        let base = ready["url"]
            .as_str()
            .expect("url")
            .trim_end_matches('/')
            .to_owned();
        Server { child, base }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let pid = self.child.id() as i32;
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.child.wait();
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let left = procs::session_members(pid);
            if left.is_empty() {
                break;
            }
            if Instant::now() > deadline {
                for p in left {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(p),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// What one SSE reader saw of the flood: per delta index, its latency.
struct Seen {
    latencies: Vec<Option<Duration>>,
    anomalies: Vec<String>,
}

/// Reads `url` (an SSE stream from the session's start) until `turn.ended`, timing each flood
/// delta as it arrives.
async fn read_flood(http: reqwest::Client, url: String, count: usize) -> Seen {
    let resp = http.get(&url).send().await.expect("SSE");
    assert_eq!(resp.status(), 200, "SSE {url}");
    let mut body = resp.bytes_stream();
    let mut buf: Vec<u8> = Vec::new();
    let mut seen = Seen {
        latencies: vec![None; count],
        anomalies: Vec::new(),
    };
    let mut last_id = 0u64;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let chunk = match tokio::time::timeout_at(deadline, body.next()).await {
            Ok(Some(Ok(chunk))) => chunk,
            other => {
                seen.anomalies.push(format!(
                    "the stream ended early: {:?}",
                    other.map(|o| o.map(|r| r.map(|_| ())))
                ));
                return seen;
            }
        };
        let at = now_ns();
        buf.extend_from_slice(&chunk);
        while let Some(end) = buf.windows(2).position(|w| w == b"\n\n") {
            let frame: Vec<u8> = buf.drain(..end + 2).collect();
            let text = String::from_utf8_lossy(&frame);
            let Some(data) = text.lines().find_map(|l| l.strip_prefix("data: ")) else {
                continue;
            };
            let event: Value = serde_json::from_str(data).expect("event JSON");
            let id = event["sequence"].as_u64().unwrap_or(0);
            if id != last_id + 1 {
                seen.anomalies
                    .push(format!("sequence {id} after {last_id}"));
            }
            last_id = id;
            match event["type"].as_str() {
                Some("item.delta") => {
                    let delta = event["data"]["delta"].as_str().unwrap_or("");
                    for part in delta.split(';').filter(|p| !p.is_empty()) {
                        let Some((i, stamp)) = part.split_once(':') else {
                            continue;
                        };
                        let (Ok(i), Ok(stamp)) = (i.parse::<usize>(), stamp.parse::<u64>()) else {
                            continue;
                        };
                        if i < count {
                            seen.latencies[i] =
                                Some(Duration::from_nanos(at.saturating_sub(stamp)));
                        }
                    }
                }
                Some("turn.ended") => return seen,
                _ => {}
            }
        }
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Prints one reader's row; returns its p99, or `None` when a delta was lost.
fn report(store: &str, reader: &str, seen: &Seen) -> Option<Duration> {
    let lost = seen.latencies.iter().filter(|l| l.is_none()).count();
    for anomaly in &seen.anomalies {
        println!("ANOMALY ({store}, {reader}): {anomaly}");
    }
    let mut got: Vec<Duration> = seen.latencies.iter().flatten().copied().collect();
    got.sort();
    if got.is_empty() {
        println!("{store:>8} | {reader:<26} | lost all {lost}");
        return None;
    }
    println!(
        "{store:>8} | {reader:<26} | {:>6} | {:>4} | {:>7.1} | {:>7.1} | {:>7.1} | {:>7.1}",
        got.len(),
        lost,
        ms(percentile(&got, 0.5)),
        ms(percentile(&got, 0.99)),
        ms(percentile(&got, 0.999)),
        ms(got[got.len() - 1]),
    );
    (lost == 0 && seen.anomalies.is_empty()).then(|| percentile(&got, 0.99))
}

/// One follow run on `store` (None: SQLite on the shared data directory); returns the
/// cross-process reader's p99 (None: something was lost).
async fn follow(store: Option<&str>, count: usize, rate: usize) -> Option<Duration> {
    let label = if store.is_some() {
        "postgres"
    } else {
        "sqlite"
    };
    let scratch = Scratch::new("follow");
    let work = scratch.0.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let (dir_a, dir_b) = match store {
        // A fleet: each daemon its own data directory.
        Some(_) => (scratch.0.join("a"), scratch.0.join("b")),
        None => (scratch.0.join("data"), scratch.0.join("data")),
    };
    let a = Server::start(&dir_a, &work, store);
    let b = Server::start(&dir_b, &work, store);
    let http = reqwest::Client::new();
    let id = format!("follow-{}", uuid::Uuid::new_v4().simple());
    let resp = http
        .post(format!("{}/v1/sessions/{id}", a.base))
        .json(&json!({"agent": "mock"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "create: {:?}", resp.text().await);
    let path = format!("/v1/sessions/{id}/events/sse");
    let here = tokio::spawn(read_flood(http.clone(), format!("{}{path}", a.base), count));
    let there = tokio::spawn(read_flood(http.clone(), format!("{}{path}", b.base), count));
    // Both streams open (they replay from the start, so nothing is missed either way).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let resp = http
        .post(format!("{}/v1/sessions/{id}/messages", a.base))
        .json(&json!({"message": format!("flood {count} {rate}")}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 204);
    let here = here.await.unwrap();
    let there = there.await.unwrap();
    let _ = report(label, "owner's process (A)", &here);
    let p99 = report(label, "another process (B)", &there);
    drop(b);
    drop(a);
    p99
}

/// Fills the SQLite store of `data_dir` with `n` sessions: one created by a real server (with
/// a turn), and `n - 1` more written through the store API as copies of its record.
async fn fill(data_dir: &Path, work: &Path, n: usize) -> Duration {
    use codebuffd::store::{EventStore, SqliteStore};
    let started = Instant::now();
    {
        let server = Server::start(data_dir, work, None);
        let http = reqwest::Client::new();
        let s = format!("{}/v1/sessions/listed-template", server.base);
        let resp = http
            .post(&s)
            .json(&json!({"agent": "mock"}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "create: {:?}", resp.text().await);
        let resp = http
            .post(format!("{s}/messages/stream"))
            .json(&json!({"message": "echo one turn"}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let _ = resp.bytes().await;
    }
    let store = SqliteStore::open(&data_dir.join("codebuffd.db")).expect("open the store");
    let template = store
        .load_sessions()
        .expect("load")
        .into_iter()
        .find(|r| r.session_id == "listed-template")
        .expect("the template session");
    for i in 1..n {
        let mut record = template.clone();
        record.session_id = format!("listed-{i:05}");
        record.created_at = template.created_at.saturating_sub((n - i) as u64);
        record.updated_at = record.created_at;
        record.event_count = 0;
        record.turns = 0;
        record.owner = String::new();
        store.create(&record).expect("create");
    }
    store.flush().expect("flush");
    drop(store);
    started.elapsed()
}

/// Runs `codebuffd sessions list` (with `extra`) `runs` times; the sorted wall times, and
/// the lines of the last run's output.
fn list(data_dir: &Path, work: &Path, extra: &[&str], runs: usize) -> (Vec<Duration>, usize) {
    let mut times = Vec::with_capacity(runs);
    let mut lines = 0;
    for _ in 0..runs {
        let started = Instant::now();
        let out = Command::new(binary())
            .args(["sessions", "list", "--color", "never", "--data-dir"])
            .arg(data_dir)
            .args(extra)
            .current_dir(work)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .output()
            .expect("sessions list");
        times.push(started.elapsed());
        assert!(
            out.status.success(),
            "sessions list: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        lines = out
            .stdout
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .count();
    }
    times.sort();
    (times, lines)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let smoke = !std::env::args().any(|a| a == "--bench");
    let (count, rate, sessions, runs) = if smoke {
        (200, 1000, 200, 2)
    } else {
        (5000, 1000, 10_000, 7)
    };
    let postgres = std::env::var("CODEBUFFD_TEST_POSTGRES_URL")
        .ok()
        .filter(|u| !u.is_empty());
    println!("codebuffd: {}", binary().display());
    if smoke {
        println!("smoke mode (run with --bench): tiny sizes, numbers are meaningless");
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();

    println!("\nfollow: `flood {count} {rate}` run by A, read over SSE in A and in B (ms from the agent's write)");
    println!("   store | reader                     | deltas | lost |     p50 |     p99 |   p99.9 |     max");
    let mut failed = false;
    let sqlite = rt.block_on(follow(None, count, rate));
    failed |= sqlite.is_none();
    let pg = match &postgres {
        Some(url) => {
            let p99 = rt.block_on(follow(Some(url), count, rate));
            failed |= p99.is_none();
            p99
        }
        None => {
            println!("postgres | skipped: set CODEBUFFD_TEST_POSTGRES_URL (.ci/postgres.sh start)");
            None
        }
    };

    println!(
        "\nsessions list over {sessions} sessions (SQLite, no daemon; whole process, {runs} runs)"
    );
    let scratch = Scratch::new("list");
    let data = scratch.0.join("data");
    let work = scratch.0.join("work");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::create_dir_all(&work).unwrap();
    let took = rt.block_on(fill(&data, &work, sessions));
    println!(
        "  {sessions} sessions written (one by a server, the rest through the store API) in {:.1} s",
        took.as_secs_f64()
    );
    let mut list_median = Duration::ZERO;
    for (label, extra) in [("table", &[][..]), ("--json", &["--json"][..])] {
        let (times, lines) = list(&data, &work, extra, runs);
        let median = percentile(&times, 0.5);
        list_median = list_median.max(median);
        println!(
            "  {label:<7}: median {:.0} ms, min {:.0} ms, max {:.0} ms, {lines} lines",
            ms(median),
            ms(times[0]),
            ms(times[times.len() - 1]),
        );
        if lines < sessions {
            println!("ANOMALY: {lines} lines for {sessions} sessions");
            failed = true;
        }
    }

    if smoke {
        println!("\ntargets: not evaluated in smoke mode");
    } else {
        println!("\ntargets:");
        let verdict = |ok: bool| if ok { "met" } else { "MISSED" };
        if let Some(p99) = sqlite {
            println!(
                "  SQLite cross-process p99 {:.1} ms ≤ {} ms: {}",
                ms(p99),
                TARGET_SQLITE_P99.as_millis(),
                verdict(p99 <= TARGET_SQLITE_P99)
            );
        }
        if let Some(p99) = pg {
            println!(
                "  Postgres cross-process p99 {:.1} ms ≤ {} ms: {}",
                ms(p99),
                TARGET_POSTGRES_P99.as_millis(),
                verdict(p99 <= TARGET_POSTGRES_P99)
            );
        }
        println!(
            "  sessions list median {:.0} ms ≤ {} ms: {}",
            ms(list_median),
            TARGET_LIST.as_millis(),
            verdict(list_median <= TARGET_LIST)
        );
    }
    // Exiting skips destructors: the scratch directory goes first.
    drop(scratch);
    if failed {
        println!("FAILED: a delta or a session was lost (see ANOMALY above)");
        std::process::exit(1);
    }
}
