//! One measured run: a fresh daemon, K `mock` sessions each told to `flood`, every SSE stream
//! followed to `turn.ended`, and what it cost.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::daemon::{cpu_ticks, status_kib, Daemon};
use crate::sse::{follow, StreamStats};
use crate::Settings;

/// One measured run.
pub struct Row {
    pub name: String,
    pub sessions: u64,
    pub expected: u64,
    pub deltas: u64,
    pub sequence_errors: u64,
    pub order_errors: u64,
    pub malformed: u64,
    pub wall: Duration,
    /// Time over which the agents wrote (first to last delta timestamp, over all sessions).
    pub agent_span: Duration,
    pub daemon_ticks: u64,
    pub agent_ticks: u64,
    pub client_ticks: u64,
    pub latencies: Vec<u64>,
    pub peak_rss_kib: u64,
    pub idle_rss_kib: u64,
    pub bytes: u64,
    pub clk_tck: u64,
}

impl Row {
    pub fn lost(&self) -> u64 {
        self.expected.saturating_sub(self.deltas)
    }
    pub fn events_per_second(&self) -> f64 {
        self.deltas as f64 / self.wall.as_secs_f64()
    }
    pub fn us_per_event(&self, ticks: u64) -> f64 {
        ticks as f64 * 1e6 / self.clk_tck as f64 / self.deltas.max(1) as f64
    }
    pub fn percentile(&self, p: f64) -> u64 {
        if self.latencies.is_empty() {
            return 0;
        }
        let at = ((self.latencies.len() - 1) as f64 * p).round() as usize;
        self.latencies[at]
    }
}

async fn post(http: &reqwest::Client, url: String, body: serde_json::Value) -> u16 {
    let resp = http.post(&url).json(&body).send().await.expect("POST");
    let status = resp.status().as_u16();
    if !(200..300).contains(&status) {
        let text = resp.text().await.unwrap_or_default();
        panic!("POST {url}: {status} {text}");
    }
    status
}

/// Starts a daemon, has `sessions` mock sessions each run `prompt`, follows them all over SSE.
pub fn run(
    s: &Settings,
    rt: &tokio::runtime::Runtime,
    name: String,
    sessions: u64,
    per_session: u64,
    rate: Option<u64>,
) -> Row {
    run_then(s, rt, name, sessions, per_session, rate, || {})
}

/// [`run`], calling `before_stop` once everything is measured, before the daemon is stopped
/// (to wait for what the daemon does after the turns, such as a webhook delivery).
pub fn run_then(
    s: &Settings,
    rt: &tokio::runtime::Runtime,
    name: String,
    sessions: u64,
    per_session: u64,
    rate: Option<u64>,
    before_stop: impl FnOnce(),
) -> Row {
    let daemon = Daemon::start(s);
    let pid = daemon.pid.to_string();
    let addr = daemon.addr;
    let base = format!("http://{addr}");
    let http = reqwest::Client::new();
    let idle_rss_kib = rt.block_on(async {
        let resp = http
            .get(format!("{base}/v1/health"))
            .send()
            .await
            .expect("health");
        assert_eq!(resp.status(), 200);
        status_kib(daemon.pid, "VmRSS")
    });
    let prompt = match rate {
        Some(r) => format!("flood {per_session} {r}"),
        None => format!("flood {per_session}"),
    };
    let run_tag = uuid::Uuid::new_v4().simple().to_string()[..6].to_owned();
    let ids: Vec<String> = (0..sessions)
        .map(|i| format!("load-{run_tag}-{i}"))
        .collect();
    let result = rt.block_on(async {
        for id in &ids {
            post(
                &http,
                format!("{base}/v1/sessions/{id}"),
                serde_json::json!({"agent": "mock"}),
            )
            .await;
        }
        let mut streams = Vec::new();
        for id in &ids {
            let (tx, rx) = tokio::sync::oneshot::channel();
            streams.push(tokio::spawn(follow(addr, id.clone(), tx)));
            rx.await.expect("the SSE stream opens");
        }
        let client_before = cpu_ticks("self").0;
        // `perf record` attached to the daemon (and, inherited, the agents it starts) for this run.
        let perf = std::env::var_os("LOAD_PERF_DIR").map(|dir| {
            let file = PathBuf::from(dir).join(format!(
                "{}-x{sessions}.data",
                name.replace([' ', '/'], "_")
            ));
            let child = Command::new("perf")
                .args(["record", "-F", "999", "--call-graph", "dwarf,16384", "-o"])
                .arg(&file)
                .args(["-p", &pid])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start perf record (LOAD_PERF_DIR)");
            std::thread::sleep(Duration::from_millis(300));
            child
        });
        let daemon_before = cpu_ticks(&pid);
        let t0 = Instant::now();
        let posts = ids.iter().map(|id| {
            post(
                &http,
                format!("{base}/v1/sessions/{id}/messages"),
                serde_json::json!({"message": prompt}),
            )
        });
        futures_util::future::join_all(posts).await;
        let mut all = Vec::new();
        for stream in streams {
            let stats = tokio::time::timeout(s.timeout, stream)
                .await
                .expect("every turn ends in time")
                .expect("the SSE task");
            all.push(stats);
        }
        let daemon_after = cpu_ticks(&pid);
        let client_after = cpu_ticks("self").0;
        (
            perf,
            t0,
            all,
            (
                daemon_after.0 - daemon_before.0,
                daemon_after.1 - daemon_before.1,
            ),
            client_after - client_before,
        )
    });
    let (perf, t0, streams, (daemon_ticks, agent_ticks), client_ticks) = result;
    let peak_rss_kib = status_kib(daemon.pid, "VmHWM");
    if let Some(mut perf) = perf {
        let _ = kill(Pid::from_raw(perf.id() as i32), Signal::SIGINT);
        let _ = perf.wait();
    }
    before_stop();
    daemon.stop();
    let end = streams
        .iter()
        .filter_map(|st| st.ended_at)
        .max()
        .unwrap_or_else(Instant::now);
    let first = streams
        .iter()
        .map(|st| st.first_ts)
        .filter(|t| *t > 0)
        .min();
    let last = streams.iter().map(|st| st.last_ts).max();
    let agent_span = match (first, last) {
        (Some(f), Some(l)) if l > f => Duration::from_nanos(l - f),
        _ => Duration::ZERO,
    };
    let unended = streams.iter().filter(|st| st.ended_at.is_none()).count();
    assert_eq!(
        unended, 0,
        "{name}: {unended} stream(s) closed before turn.ended"
    );
    if let Some(path) = std::env::var_os("LOAD_DUMP") {
        dump(&PathBuf::from(path), &name, sessions, &streams);
    }
    let mut latencies: Vec<u64> = streams
        .iter()
        .flat_map(|st| st.latencies.iter().copied())
        .collect();
    latencies.sort_unstable();
    Row {
        name,
        sessions,
        expected: sessions * per_session,
        deltas: streams.iter().map(|st| st.deltas).sum(),
        sequence_errors: streams.iter().map(|st| st.sequence_errors).sum(),
        order_errors: streams.iter().map(|st| st.order_errors).sum(),
        malformed: streams.iter().map(|st| st.malformed).sum(),
        wall: end - t0,
        agent_span,
        daemon_ticks,
        agent_ticks,
        client_ticks,
        latencies,
        peak_rss_kib,
        idle_rss_kib,
        bytes: streams.iter().map(|st| st.bytes).sum(),
        clk_tck: s.clk_tck,
    }
}

/// Appends `run sessions stream delta_index agent_ns latency_ns` per delta to `path` (for
/// plotting latency over time).
fn dump(path: &Path, name: &str, sessions: u64, streams: &[StreamStats]) {
    let mut out = String::new();
    for (k, st) in streams.iter().enumerate() {
        for (i, (ts, lat)) in st.stamps.iter().zip(&st.latencies).enumerate() {
            out.push_str(&format!(
                "{} {sessions} {k} {i} {ts} {lat}\n",
                name.replace(' ', "_")
            ));
        }
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("open LOAD_DUMP");
    f.write_all(out.as_bytes()).expect("write LOAD_DUMP");
}
