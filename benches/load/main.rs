//! End-to-end load: the real `codebuffd server` binary, the `mock` agent's `flood` scenario, and a
//! raw-TCP SSE client, measuring what an orchestrator would see.
//!
//! Runs, each on a fresh daemon (`server --no-token --port 0`, its address read from stderr):
//!
//! * `flood`, 1 session: `flood N` (N = `LOAD_EVENTS`, 200,000) as fast as the agent can write;
//! * `flood`, K sessions (K = `LOAD_SESSIONS`, 20) each `flood N/K` at once;
//! * `paced`, 1 and K sessions: `flood M R` (M = `LOAD_RATE_EVENTS`, 10,000; R = `LOAD_RATE`,
//!   2,000 lines/s per session), the realistic streaming case where queueing does not dominate.
//!
//! Per run: deltas received, lost (expected minus received; sequences and delta indexes must be
//! dense and in order), events/s (deltas ÷ time from the message POST to `turn.ended` read),
//! daemon CPU µs per event (`/proc/<pid>/stat` utime+stime), the agents' CPU per event (the
//! daemon's cutime+cstime: its reaped children), the client's own CPU per event, latency from
//! the agent writing a line (the ns timestamp inside each delta) to the client reading it
//! (p50/p99/max), and the daemon's peak RSS (`VmHWM`). Then startup: exec to the first 200 on
//! `/v1/health` over 20 starts on a fixed free port, and idle RSS right after it.
//!
//! Run: `cargo bench --bench load` (see `benches/README.md`). Without `--bench` (as under
//! `cargo test --benches`) it runs a tiny smoke version whose numbers mean nothing.
//!
//! Files: `daemon.rs` (starting, stopping, cleaning up, `/proc`), `sse.rs` (the client),
//! `runs.rs` (one measured run), `startup.rs`, `report.rs` (the tables).

mod daemon;
mod report;
mod runs;
mod sse;
mod startup;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use runs::run;
use runs::Row;
use startup::{start_once, Start};

/// What to run, from `LOAD_*` variables (see `benches/README.md`).
pub struct Settings {
    pub smoke: bool,
    pub bin: PathBuf,
    pub events: u64,
    pub sessions: u64,
    pub per_session: u64,
    pub rate: u64,
    pub rate_events: u64,
    pub starts: usize,
    pub timeout: Duration,
    pub client_threads: usize,
    pub daemon_args: Vec<String>,
    /// `LOAD_BASELINE_ARGS`: daemon arguments of a baseline the floods are repeated with
    /// (e.g. `--store memory`), to compare stores in one run.
    pub baseline_args: Option<Vec<String>>,
    pub clk_tck: u64,
}

impl Settings {
    /// Whether the daemon keeps its log in memory (`--store memory` / `--store=memory`).
    pub fn memory_store(&self) -> bool {
        let args = self.daemon_args.join(" ");
        args.contains("--store memory") || args.contains("--store=memory")
    }
}

fn split_args(value: &str) -> Vec<String> {
    value.split_whitespace().map(str::to_owned).collect()
}

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .replace('_', "")
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
        Err(_) => default,
    }
}

impl Settings {
    fn from_env() -> Settings {
        let smoke = !std::env::args().any(|a| a == "--bench");
        let (events, sessions, rate_events, starts) = if smoke {
            (2_000, 2, 200, 2)
        } else {
            (200_000, 20, 10_000, 20)
        };
        let events = env_u64("LOAD_EVENTS", events);
        let sessions = env_u64("LOAD_SESSIONS", sessions).max(1);
        let per_session = env_u64("LOAD_PER_SESSION", events / sessions).max(1);
        let bin = std::env::var_os("LOAD_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_codebuffd")));
        Settings {
            smoke,
            bin,
            events,
            sessions,
            per_session,
            rate: env_u64("LOAD_RATE", 2_000),
            rate_events: env_u64("LOAD_RATE_EVENTS", rate_events),
            starts: env_u64("LOAD_STARTS", starts) as usize,
            timeout: Duration::from_secs(env_u64("LOAD_TIMEOUT", 300)),
            client_threads: env_u64("LOAD_CLIENT_THREADS", 1).max(1) as usize,
            daemon_args: std::env::var("LOAD_DAEMON_ARGS")
                .map(|s| split_args(&s))
                .unwrap_or_default(),
            baseline_args: std::env::var("LOAD_BASELINE_ARGS")
                .ok()
                .map(|s| split_args(&s)),
            clk_tck: clock_ticks_per_second(),
        }
    }
}

/// `getconf CLK_TCK` (100 on every Linux this runs on).
fn clock_ticks_per_second() -> u64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100)
}

fn main() {
    let s = Settings::from_env();
    let debug_build = !s.bin.components().any(|c| c.as_os_str() == "release");
    // Nothing this bench starts may outlive it.
    daemon::install_guards(s.timeout);

    println!("codebuffd load benchmark");
    println!(
        "binary {} ({}), {} CPUs, clock tick {} Hz",
        s.bin.display(),
        if debug_build {
            "NOT a release build: numbers are meaningless"
        } else {
            "release"
        },
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        s.clk_tck
    );
    if s.smoke {
        println!("smoke mode (run with --bench): tiny sizes, numbers are meaningless");
    }
    let load_before = daemon::load_average();
    println!("load average before: {load_before}");
    if load_before
        .split_whitespace()
        .next()
        .and_then(|l| l.parse::<f64>().ok())
        .is_some_and(|l| l > 0.5)
    {
        println!(
            "WARNING: the machine is busy; other processes compete for the CPUs and inflate \
             latency and wall times (see benches/README.md)"
        );
    }
    println!(
        "LOAD_EVENTS={} LOAD_SESSIONS={} LOAD_PER_SESSION={} LOAD_RATE={} LOAD_RATE_EVENTS={} LOAD_STARTS={} LOAD_CLIENT_THREADS={}",
        s.events, s.sessions, s.per_session, s.rate, s.rate_events, s.starts, s.client_threads
    );
    println!();

    // The client runs on its own runtime (its CPU is measured too: the "client" column).
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(s.client_threads)
        .enable_all()
        .build()
        .expect("client runtime");
    let k = s.sessions;
    let mut rows = vec![run(&s, &rt, "flood".into(), 1, s.events, None)];
    if k > 1 {
        rows.push(run(&s, &rt, "flood".into(), k, s.per_session, None));
    }
    if s.rate > 0 && s.rate_events > 0 {
        let name = format!("paced {}/s", s.rate);
        rows.push(run(&s, &rt, name.clone(), 1, s.rate_events, Some(s.rate)));
        if k > 1 {
            rows.push(run(&s, &rt, name, k, s.rate_events, Some(s.rate)));
        }
    }
    // The same floods against the baseline daemon, for the store comparison.
    let baseline: Vec<Row> = match &s.baseline_args {
        Some(args) => {
            let b = Settings {
                daemon_args: args.clone(),
                baseline_args: None,
                bin: s.bin.clone(),
                ..s
            };
            let mut rows = vec![run(&b, &rt, "flood".into(), 1, b.events, None)];
            if k > 1 {
                rows.push(run(&b, &rt, "flood".into(), k, b.per_session, None));
            }
            rows
        }
        None => Vec::new(),
    };
    drop(rt);
    let mut starts: Vec<Start> = (0..s.starts).map(|_| start_once(&s)).collect();

    let anomalies = report::runs(&rows);
    let baseline_anomalies = if baseline.is_empty() {
        Vec::new()
    } else {
        println!(
            "baseline: LOAD_BASELINE_ARGS=\"{}\"",
            s.baseline_args.as_deref().unwrap_or_default().join(" ")
        );
        report::runs(&baseline)
    };
    let start_median = report::startup(&mut starts);
    println!("load average after: {}", daemon::load_average());
    println!();
    let clean = rows.iter().chain(&baseline).all(|r| r.lost() == 0)
        && anomalies.is_empty()
        && baseline_anomalies.is_empty();
    if s.smoke {
        println!("targets: not evaluated in smoke mode");
    } else {
        report::targets(&rows, &baseline, s.memory_store(), start_median, clean);
    }
    assert_eq!(daemon::running(), 0, "daemons left running");
    if !clean {
        std::process::exit(1);
    }
}
