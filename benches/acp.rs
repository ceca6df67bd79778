//! The ACP door (`codebuffd acp`) as an editor meets it, through its stdio pipe:
//!
//! * **initialize latency**: from spawning `codebuffd acp` to reading its `initialize` answer
//!   (the request is written right after the spawn), median of `ACP_STARTS` starts on a data
//!   directory that exists (as an editor's launches are), and the first start on a new one;
//! * **streamed updates**: `session/prompt` of the mock's `flood N` (N `text_delta`s, as fast
//!   as the pipe takes them) to its answer: `agent_message_chunk`s per second, the daemon's CPU
//!   per update, and every chunk checked (in order, none lost), `ACP_RUNS` prompts.
//!
//! ```text
//! cargo bench --bench acp                  # ACP_CHUNKS=10000 ACP_RUNS=5 ACP_STARTS=20
//! ACP_DAEMON_ARGS="--store memory" cargo bench --bench acp
//! ```
//!
//! Without `--bench` (as under `cargo test --benches`) it runs a smoke version with tiny sizes.
//! Every daemon is stopped (stdin closed, then SIGKILL after 10 s) and its data removed.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const TARGET_INIT: Duration = Duration::from_millis(20);
const TARGET_UPDATES_PER_S: f64 = 200_000.0;

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.replace('_', "").parse().ok())
        .unwrap_or(default)
}

fn binary() -> PathBuf {
    std::env::var_os("ACP_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_codebuffd")))
}

/// A scratch directory removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!(
            "codebuffd-acp-bench-{tag}-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&dir).expect("temp dir");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A running `codebuffd acp`: closed (stdin EOF) on drop, killed if it does not exit.
struct Acp {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    line: String,
}

impl Acp {
    fn spawn(data_dir: &Path, extra: &[String]) -> Acp {
        let mut child = Command::new(binary())
            .args(["acp", "--agent", "mock", "--data-dir"])
            .arg(data_dir)
            .args(extra)
            .current_dir(data_dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn codebuffd acp");
        let stdin = child.stdin.take();
        let stdout = BufReader::with_capacity(1 << 20, child.stdout.take().expect("stdout"));
        Acp {
            child,
            stdin,
            stdout,
            line: String::new(),
        }
    }

    fn send(&mut self, message: &Value) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{message}").expect("write to codebuffd acp");
        stdin.flush().expect("flush");
    }

    /// The next line (without its newline).
    fn next_line(&mut self) -> &str {
        self.line.clear();
        let n = self.stdout.read_line(&mut self.line).expect("read");
        assert!(n > 0, "codebuffd acp closed its stdout");
        self.line.trim_end()
    }

    /// Reads lines until the response to `id`.
    fn response(&mut self, id: u64) -> Value {
        loop {
            let line = self.next_line().to_owned();
            let v: Value = serde_json::from_str(&line).expect("JSON-RPC line");
            if v["id"] == id && (v.get("result").is_some() || v.get("error").is_some()) {
                return v;
            }
        }
    }

    fn initialize(&mut self) -> Value {
        self.send(&json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
            "protocolVersion":1,"clientCapabilities":{},"clientInfo":{"name":"bench","version":"0"}}}));
        self.response(0)
    }

    /// The daemon's CPU time so far (user + system, all threads).
    fn cpu(&self) -> Duration {
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap_or_default();
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.split_whitespace().collect())
            .unwrap_or_default();
        let ticks: u64 = [11, 12]
            .iter()
            .filter_map(|i| fields.get(*i)?.parse::<u64>().ok())
            .sum();
        Duration::from_secs_f64(ticks as f64 / clock_ticks_per_second())
    }

    /// Closes stdin and waits for the exit (SIGKILL after 10 s); the time it took.
    fn close(mut self) -> Duration {
        let start = Instant::now();
        drop(self.stdin.take());
        let deadline = start + Duration::from_secs(10);
        loop {
            if let Ok(Some(_)) = self.child.try_wait() {
                return start.elapsed();
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                eprintln!("codebuffd acp did not exit within 10 s of its stdin's end");
                return start.elapsed();
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl Drop for Acp {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Clock ticks per second (the unit of `/proc/<pid>/stat` times).
fn clock_ticks_per_second() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

/// One start: spawn, `initialize`, answer read; the latency and the exit time.
fn one_start(data_dir: &Path, extra: &[String]) -> (Duration, Duration) {
    let start = Instant::now();
    let mut acp = Acp::spawn(data_dir, extra);
    let init = acp.initialize();
    let latency = start.elapsed();
    assert_eq!(init["result"]["protocolVersion"], 1, "{init}");
    (latency, acp.close())
}

/// Result of one flood prompt.
struct Flood {
    wall: Duration,
    cpu: Duration,
    /// The flood's text deltas received.
    chunks: u64,
    /// `session/update` notifications received (merged chunks count once).
    notifications: u64,
    lost: u64,
    out_of_order: u64,
}

/// Sends `flood N` and reads every update until the prompt's answer.
fn flood(acp: &mut Acp, session: &str, id: u64, n: u64) -> Flood {
    let cpu_before = acp.cpu();
    let start = Instant::now();
    acp.send(
        &json!({"jsonrpc":"2.0","id":id,"method":"session/prompt","params":{
        "sessionId":session,"prompt":[{"type":"text","text":format!("flood {n}")}]}}),
    );
    let mut next = 0u64;
    let mut chunks = 0u64;
    let mut notifications = 0u64;
    let mut out_of_order = 0u64;
    loop {
        let line = acp.next_line();
        if line.contains("\"agent_message_chunk\"") {
            notifications += 1;
            // The flood's deltas are `<index>:<ns>;` (consecutive ones may come merged into
            // one chunk); the closing message is "Flooded N deltas.".
            let Some(text) = line
                .split("\"text\":\"")
                .nth(1)
                .and_then(|t| t.split('"').next())
            else {
                continue;
            };
            for delta in text.split(';').filter(|d| !d.is_empty()) {
                let Some(Ok(i)) = delta.split_once(':').map(|(i, _)| i.parse::<u64>()) else {
                    continue;
                };
                chunks += 1;
                if i != next {
                    out_of_order += 1;
                }
                next = i + 1;
            }
            continue;
        }
        if line.contains("\"session/update\"") {
            notifications += 1;
            continue;
        }
        let v: Value = serde_json::from_str(line).expect("a JSON-RPC line");
        if v["id"] == id {
            assert_eq!(v["result"]["stopReason"], "end_turn", "{v}");
            break;
        }
    }
    let wall = start.elapsed();
    Flood {
        wall,
        cpu: acp.cpu().saturating_sub(cpu_before),
        chunks,
        notifications,
        lost: n.saturating_sub(chunks),
        out_of_order,
    }
}

fn main() {
    let smoke = !std::env::args().any(|a| a == "--bench");
    let (starts, chunks, runs) = if smoke {
        (2, 200, 1)
    } else {
        (
            env_num("ACP_STARTS", 20),
            env_num("ACP_CHUNKS", 10_000),
            env_num("ACP_RUNS", 5),
        )
    };
    let extra: Vec<String> = std::env::var("ACP_DAEMON_ARGS")
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    let bin = binary();
    println!("codebuffd acp: {}", bin.display());
    if smoke {
        println!("smoke mode (run with --bench): tiny sizes, numbers are meaningless");
    } else if !bin.to_string_lossy().contains("release") {
        println!("NOTE: not a release build; the numbers say little");
    }
    if !extra.is_empty() {
        println!("daemon arguments: {}", extra.join(" "));
    }

    // initialize latency.
    let data = TempDir::new("init");
    let (first, _) = one_start(&data.0, &extra);
    let mut latencies = Vec::new();
    let mut exits = Vec::new();
    for _ in 0..starts {
        let (latency, exit) = one_start(&data.0, &extra);
        latencies.push(latency);
        exits.push(exit);
    }
    let (min, max) = (
        *latencies.iter().min().expect("starts"),
        *latencies.iter().max().expect("starts"),
    );
    let init_median = median(latencies);
    println!();
    println!("initialize latency from spawn ({starts} starts, existing data directory)");
    println!(
        "  median {}  min {}  max {}  (first start on a new data directory: {}; exit after stdin's end: median {})",
        ms(init_median),
        ms(min),
        ms(max),
        ms(first),
        ms(median(exits))
    );

    // Streamed updates.
    let data = TempDir::new("flood");
    // Sessions may not work in the daemon's data directory.
    let work = TempDir::new("flood-work");
    let mut acp = Acp::spawn(&data.0, &extra);
    acp.initialize();
    acp.send(
        &json!({"jsonrpc":"2.0","id":1,"method":"session/new","params":{
        "cwd": work.0.display().to_string(),"mcpServers":[]}}),
    );
    let created = acp.response(1);
    let session = created["result"]["sessionId"]
        .as_str()
        .unwrap_or_else(|| panic!("session/new: {created}"))
        .to_owned();
    // A first prompt starts the agent machinery (and a warm spare).
    flood(&mut acp, &session, 2, 10);
    println!();
    println!("session/prompt `flood {chunks}` → answer, through the stdio pipe ({runs} runs)");
    println!(
        "  {:>4} {:>10} {:>12} {:>14} {:>15} {:>6} {:>12}",
        "run", "wall", "deltas/s", "notifications", "daemon µs/delta", "lost", "out of order"
    );
    let mut total_cpu = Duration::ZERO;
    let mut total_chunks = 0;
    let mut rates = Vec::new();
    let mut lost = 0;
    for run in 0..runs {
        let f = flood(&mut acp, &session, 10 + run, chunks);
        let rate = f.chunks as f64 / f.wall.as_secs_f64();
        println!(
            "  {:>4} {:>10} {:>12.0} {:>14} {:>15.2} {:>6} {:>12}",
            run + 1,
            ms(f.wall),
            rate,
            f.notifications,
            f.cpu.as_secs_f64() * 1e6 / f.chunks.max(1) as f64,
            f.lost,
            f.out_of_order
        );
        total_cpu += f.cpu;
        total_chunks += f.chunks;
        lost += f.lost + f.out_of_order;
        rates.push(rate);
    }
    acp.close();
    rates.sort_by(f64::total_cmp);
    let rate = rates[rates.len() / 2];
    let cpu_per = total_cpu.as_secs_f64() * 1e6 / total_chunks.max(1) as f64;
    println!(
        "  median {rate:.0} deltas/s; daemon CPU {cpu_per:.2} µs per delta over {total_chunks} deltas"
    );
    if smoke {
        assert_eq!(lost, 0, "updates lost or out of order");
        return;
    }
    println!();
    let verdict = |ok: bool| if ok { "ok" } else { "MISSED" };
    println!(
        "targets: initialize ≤ {} median: {} ({}); ≥ {:.0} streamed deltas/s: {} ({rate:.0}); 0 lost: {} ({lost})",
        ms(TARGET_INIT),
        verdict(init_median <= TARGET_INIT),
        ms(init_median),
        TARGET_UPDATES_PER_S,
        verdict(rate >= TARGET_UPDATES_PER_S),
        verdict(lost == 0),
    );
    if lost > 0 {
        std::process::exit(1);
    }
}
