//! A slow webhook receiver must not slow a turn: the real `codebuffd server` runs the `mock`
//! agent's `flood N` turn (N = `WEBHOOK_EVENTS`, 100,000) followed over SSE, four times on
//! fresh daemons:
//!
//! * `none`: no webhooks;
//! * `default`: `--webhook-url` to a receiver that takes 10 s per request
//!   (`WEBHOOK_RECEIVER_DELAY_MS`), the default events (the turn's end reaches the outbox);
//! * `every event`: the same slow receiver, `--webhook-events` every type, so each of the N
//!   deltas becomes an outbox row in the writer's transaction and the dispatcher keeps 16
//!   requests hanging on the receiver the whole time;
//! * `every, fast`: every type again, to a receiver that answers at once: what the outbox and
//!   the deliveries cost by themselves, so that `every event` against it shows what the
//!   receiver's slowness adds.
//!
//! Per run: the turn's wall time (POST to `turn.ended` read), events/s, the daemon's CPU µs per
//! event (`/proc/<pid>/stat`, during the turn), events lost (must be 0), and the requests the
//! receiver had got when the daemon was stopped (it waits up to 5 s for the first). The daemon,
//! the SSE client and the measuring are the load bench's (`benches/load/`).
//!
//! Run: `cargo bench --bench webhooks` (see `benches/README.md`). Without `--bench` (as under
//! `cargo test --benches`) it runs a tiny smoke version whose numbers mean nothing.

#[allow(dead_code)]
#[path = "../load/daemon.rs"]
mod daemon;
#[allow(dead_code)]
#[path = "../load/runs.rs"]
mod runs;
#[allow(dead_code)]
#[path = "../load/sse.rs"]
mod sse;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use runs::{run_then, Row};

/// What the load bench's modules read (only what a single flood uses is set).
pub struct Settings {
    pub bin: PathBuf,
    pub timeout: Duration,
    pub daemon_args: Vec<String>,
    pub clk_tck: u64,
}

/// A Standard Webhooks secret for the bench's daemons.
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .map(|v| {
            v.replace('_', "")
                .parse()
                .unwrap_or_else(|_| panic!("{name}={v:?} is not a number"))
        })
        .unwrap_or(default)
}

/// A receiver that answers every request after `delay`, counting them.
async fn receiver(delay: Duration, got: Arc<AtomicU64>) -> std::net::SocketAddr {
    use axum::routing::post;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("listen");
    let addr = listener.local_addr().expect("address");
    let app = axum::Router::new().route(
        "/hook",
        post(move || {
            let got = got.clone();
            async move {
                got.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(delay).await;
                axum::http::StatusCode::NO_CONTENT
            }
        }),
    );
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}

fn main() {
    let smoke = !std::env::args().any(|a| a == "--bench");
    let events = env_u64("WEBHOOK_EVENTS", if smoke { 2_000 } else { 100_000 });
    let delay = Duration::from_millis(env_u64("WEBHOOK_RECEIVER_DELAY_MS", 10_000));
    let bin = std::env::var_os("LOAD_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_codebuffd")));
    let timeout = Duration::from_secs(env_u64("LOAD_TIMEOUT", 300));
    daemon::install_guards(timeout);
    let debug_build = !bin.components().any(|c| c.as_os_str() == "release");
    println!("codebuffd webhook benchmark: a `flood {events}` turn, a receiver taking {delay:?} per request");
    println!(
        "binary {} ({}), {} CPUs, load average before: {}",
        bin.display(),
        if debug_build {
            "NOT a release build: numbers are meaningless"
        } else {
            "release"
        },
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        daemon::load_average()
    );
    if smoke {
        println!("smoke mode (run with --bench): tiny sizes, numbers are meaningless");
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("client runtime");
    let got = Arc::new(AtomicU64::new(0));
    let addr = rt.block_on(receiver(delay, got.clone()));
    let url = format!("http://{addr}/hook");
    let fast = rt.block_on(receiver(Duration::ZERO, got.clone()));
    let fast_url = format!("http://{fast}/hook");
    let every = codebuffd::universal::EVENT_TYPES.join(",");
    let runs: [(&str, Vec<String>); 4] = [
        ("none", Vec::new()),
        (
            "default",
            vec![
                "--webhook-url".into(),
                url.clone(),
                "--webhook-secret".into(),
                SECRET.into(),
            ],
        ),
        (
            "every event",
            vec![
                "--webhook-url".into(),
                url,
                "--webhook-secret".into(),
                SECRET.into(),
                "--webhook-events".into(),
                every.clone(),
            ],
        ),
        (
            "every, fast",
            vec![
                "--webhook-url".into(),
                fast_url,
                "--webhook-secret".into(),
                SECRET.into(),
                "--webhook-events".into(),
                every,
            ],
        ),
    ];
    let clk_tck = 100;
    let mut rows: Vec<(Row, u64)> = Vec::new();
    for (name, args) in runs {
        let s = Settings {
            bin: bin.clone(),
            timeout,
            daemon_args: args,
            clk_tck,
        };
        let before = got.load(Ordering::Relaxed);
        let hooked = !s.daemon_args.is_empty();
        // Measured by then; the turn's end may still be on its way to the receiver.
        let delivered = || {
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            while hooked
                && got.load(Ordering::Relaxed) == before
                && std::time::Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(10));
            }
        };
        let row = run_then(&s, &rt, name.to_owned(), 1, events, None, delivered);
        rows.push((row, got.load(Ordering::Relaxed) - before));
    }
    println!();
    println!(
        "{:<12} {:>10} {:>12} {:>16} {:>6} {:>18}",
        "webhooks", "wall s", "events/s", "daemon µs/event", "lost", "receiver requests"
    );
    for (row, requests) in &rows {
        println!(
            "{:<12} {:>10.2} {:>12.0} {:>16.2} {:>6} {:>18}",
            row.name,
            row.wall.as_secs_f64(),
            row.events_per_second(),
            row.us_per_event(row.daemon_ticks),
            row.lost(),
            requests
        );
    }
    let base = rows[0].0.wall.as_secs_f64();
    for (row, _) in &rows[1..] {
        println!(
            "{}: wall time {:+.1}% against none",
            row.name,
            (row.wall.as_secs_f64() / base - 1.0) * 100.0
        );
    }
    let (slow, fast) = (&rows[2].0, &rows[3].0);
    println!(
        "every event: wall time {:+.1}%, CPU per event {:+.1}% with the slow receiver against the fast one",
        (slow.wall.as_secs_f64() / fast.wall.as_secs_f64() - 1.0) * 100.0,
        (slow.us_per_event(slow.daemon_ticks) / fast.us_per_event(fast.daemon_ticks) - 1.0) * 100.0
    );
    println!("load average after: {}", daemon::load_average());
    drop(rt);
    assert_eq!(daemon::running(), 0, "daemons left running");
    let lost: u64 = rows.iter().map(|(r, _)| r.lost()).sum();
    assert_eq!(lost, 0, "events were lost");
    assert!(
        rows[1..].iter().all(|(_, requests)| *requests > 0),
        "the receiver got no request: the webhooks were not on"
    );
}
