//! Event store micro-benchmark: append throughput (1- and 64-event batches), the latency of a
//! `turn.ended` append (which waits for its commit), and resident memory after 200,000 stored
//! events — for memory, SQLite and (when `CODEBUFFD_TEST_POSTGRES_URL` is set) Postgres.
//!
//! `cargo bench --bench store` runs every case, each in a child process of its own so memory
//! numbers are not mixed; `cargo bench --bench store -- CASE STORE [BATCH]` runs one. Without
//! `--bench` (`cargo test --benches`, as `.ci/run` does) every size is a hundredth: a smoke
//! version whose numbers mean nothing.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use codebuffd::store::{open_store, EventStore, SessionRecord};
use codebuffd::universal::{ErrorData, EventData, EventDraft, RawLine, TurnData, TurnPhase};

const POSTGRES_URL: &str = "CODEBUFFD_TEST_POSTGRES_URL";

/// True under `cargo bench` (which passes `--bench`; `run_all` passes it on to its children).
fn measuring() -> bool {
    std::env::args().any(|a| a == "--bench")
}

/// A size of the real run, or a hundredth of it in the smoke version.
fn sized(n: u64) -> u64 {
    if measuring() {
        n
    } else {
        (n / 100).max(1)
    }
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    match args.first().map(String::as_str) {
        Some("throughput") => throughput(&args[1], args[2].parse().unwrap_or(1)),
        Some("turn-end") => turn_end(&args[1]),
        Some("rss") => rss(&args[1]),
        _ => run_all(),
    }
}

/// Runs every case in a child process.
fn run_all() {
    let mut stores = vec!["memory".to_owned(), "sqlite".to_owned()];
    if std::env::var(POSTGRES_URL).is_ok_and(|u| !u.is_empty()) {
        stores.push("postgres".to_owned());
    } else {
        println!("(postgres skipped: {POSTGRES_URL} is not set)");
    }
    let me = std::env::current_exe().expect("the benchmark's own path");
    let bench: &[&str] = if measuring() {
        &["--bench"]
    } else {
        println!("smoke mode (run with --bench): tiny sizes, numbers are meaningless");
        &[]
    };
    let run = |args: &[&str]| {
        let status = Command::new(&me)
            .args(args)
            .args(bench)
            .status()
            .expect("a child benchmark");
        assert!(status.success(), "{args:?} failed");
    };
    for store in &stores {
        run(&["throughput", store, "1"]);
        run(&["throughput", store, "64"]);
    }
    for store in &stores {
        run(&["turn-end", store]);
    }
    for store in &stores {
        run(&["rss", store]);
    }
}

/// A scratch directory for SQLite, removed on drop.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn open(kind: &str) -> (Arc<dyn EventStore>, Scratch) {
    let dir = std::env::temp_dir().join(format!(
        "codebuffd-store-bench-{}",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    let spec = match kind {
        "postgres" => std::env::var(POSTGRES_URL).expect("the Postgres URL"),
        other => other.to_owned(),
    };
    let store = open_store(&spec, &dir).expect("the store opens");
    (store, Scratch(dir))
}

fn session(store: &dyn EventStore, name: &str) -> String {
    let id = format!("bench-{name}-{}", uuid::Uuid::new_v4().simple());
    store
        .create(&SessionRecord {
            status: "running".into(),
            ..SessionRecord::new(&id, "mock", serde_json::json!({}), "", 1)
        })
        .expect("create");
    id
}

/// A delta-sized agent event with its raw line (about 400 bytes stored).
fn draft(n: u64) -> EventDraft {
    let raw = format!(
        r#"{{"type":"text","agentId":"main-agent-{n}","text":"Some streamed output of the agent, a sentence or so long, number {n}."}}"#
    );
    EventDraft::from_agent(
        EventData::Error(Box::new(ErrorData {
            message: format!("streamed text chunk {n} of a reply"),
            code: None,
            details: None,
        })),
        Some(RawLine::Json(raw.into())),
    )
}

fn append(store: &dyn EventStore, id: &str, mut drafts: Vec<EventDraft>) -> u64 {
    store
        .append(id, &mut drafts, "2025-01-01T00:00:00.000Z".into(), None)
        .expect("append")
}

/// Appends/s and events/s (up to a final flush) with batches of `batch` events.
fn throughput(kind: &str, batch: u64) {
    let (store, _scratch) = open(kind);
    let id = session(&*store, "throughput");
    let events: u64 = sized(if batch == 1 { 20_000 } else { 64_000 });
    let started = Instant::now();
    let mut n = 0;
    while n < events {
        append(&*store, &id, (n..n + batch).map(draft).collect());
        n += batch;
    }
    let appended = started.elapsed();
    store.flush().expect("flush");
    let durable = started.elapsed();
    println!(
        "{kind:>8} {batch:>2}-event batches: {:>9.0} appends/s, {:>9.0} events/s appended, {:>9.0} events/s durable (flush included)",
        (events / batch) as f64 / appended.as_secs_f64(),
        events as f64 / appended.as_secs_f64(),
        events as f64 / durable.as_secs_f64(),
    );
}

/// How long an append holding `turn.ended` takes (it waits for its commit).
fn turn_end(kind: &str) {
    let (store, _scratch) = open(kind);
    let id = session(&*store, "turn-end");
    let mut times: Vec<Duration> = Vec::new();
    for turn in 0..sized(200) {
        append(
            &*store,
            &id,
            (turn * 10..turn * 10 + 9).map(draft).collect(),
        );
        let started = Instant::now();
        append(
            &*store,
            &id,
            vec![EventDraft::synthetic(EventData::TurnEnded(Box::new(
                TurnData {
                    phase: TurnPhase::Ended,
                    turn_id: None,
                    metadata: None,
                },
            )))],
        );
        times.push(started.elapsed());
    }
    times.sort();
    let mean = times.iter().sum::<Duration>() / times.len() as u32;
    println!(
        "{kind:>8} turn.ended append: mean {:>7.3} ms, p50 {:>7.3} ms, p99 {:>7.3} ms",
        mean.as_secs_f64() * 1e3,
        times[times.len() / 2].as_secs_f64() * 1e3,
        times[times.len() * 99 / 100].as_secs_f64() * 1e3,
    );
}

/// Resident memory after 20 sessions × 10,000 events, and after replaying one from the start.
fn rss(kind: &str) {
    let before = memory_kb();
    let (store, _scratch) = open(kind);
    let ids: Vec<String> = (0..20)
        .map(|s| session(&*store, &format!("rss{s}")))
        .collect();
    let per_session = sized(10_000) / 16 * 16;
    let started = Instant::now();
    for round in 0..per_session / 16 {
        for id in &ids {
            append(
                &*store,
                id,
                (round * 16..round * 16 + 16).map(draft).collect(),
            );
        }
    }
    store.flush().expect("flush");
    let elapsed = started.elapsed();
    let stored = memory_kb();
    let mut read = 0;
    let mut cursor = 0;
    loop {
        let page = store.read(&ids[0], cursor, 100).expect("read");
        let Some(last) = page.last() else { break };
        cursor = last.sequence;
        read += page.len();
    }
    assert_eq!(read as u64, per_session);
    let replayed = memory_kb();
    println!(
        "{kind:>8} {} events in {:.2} s ({:.0} events/s): RSS {} MB before opening, {} MB after storing, {} MB after replaying a session; peak {} MB",
        20 * per_session,
        elapsed.as_secs_f64(),
        (20 * per_session) as f64 / elapsed.as_secs_f64(),
        before.0 / 1024,
        stored.0 / 1024,
        replayed.0 / 1024,
        replayed.1 / 1024,
    );
}

/// (VmRSS, VmHWM) of this process in kB.
fn memory_kb() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}
