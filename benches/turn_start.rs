//! How fast a Codebuff turn starts: the time from `POST …/messages` to the first event the agent
//! produced (its `start`), through the real daemon, the real adapter and SDK, against the fake
//! backend, on a small project. Run three times: with warm spares (the default), without
//! (`--no-warm-start`, every turn starts Node and imports the SDK), and with spares that retire
//! (`--warm-spare-idle 1`): each turn then is the first turn of a new session created 2.5 s
//! after the last turn, when the spare has retired (checked) and comes back with the session
//! (checked); and cold again with each turn the first of a new session after that pause
//! (`cold-new`, what `retired` compares with). Also prints the memory an idle spare costs.
//!
//! ```text
//! cargo bench --bench turn_start            # TURNS=20 by default
//! CODEBUFFD_BIN=<other build>/codebuffd cargo bench --bench turn_start   # another daemon
//! ```
//!
//! Without `--bench` (`cargo test --benches`, as `.ci/run` does) it runs a smoke version: two
//! turns each way, numbers meaningless, every target unevaluated.
//!
//! Needs `npm ci` in `adapters/codebuff`. Turns are a second apart, as a person's or an
//! orchestrator's would be at the least (a spare needs ~0.7 s to load the SDK).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const TARGET_P50: Duration = Duration::from_millis(150);

/// The daemon measured: this build's, or `CODEBUFFD_BIN` (another build, for a side-by-side
/// run against the same adapter and backend).
fn daemon_binary() -> PathBuf {
    std::env::var_os("CODEBUFFD_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_codebuffd")))
}

fn adapter_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("adapters/codebuff")
}

/// A child process killed (and reaped) on drop.
struct Owned(Child);

impl Drop for Owned {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `cmd` and returns it with the first line it prints on stdout.
fn start(mut cmd: Command) -> (Owned, String) {
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = cmd.spawn().expect("start");
    let stdout = child.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("first line");
    (Owned(child), line)
}

/// The daemon's SIGTERM (its spares and agents go with it), then the reap.
fn stop(mut daemon: Owned) {
    let pid = daemon.0.id() as i32;
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = daemon.0.wait();
}

struct Run {
    starts: Vec<Duration>,
    spare_rss: Option<u64>,
}

/// How the daemon keeps its spares.
#[derive(Clone, Copy, PartialEq)]
enum Spares {
    /// The default: a spare always waits.
    Warm,
    /// `--no-warm-start`.
    Cold,
    /// `--warm-spare-idle 1`: each turn is the first of a new session, created after the
    /// spare retired.
    Retired,
    /// `--no-warm-start`, each turn the first of a new session after the same pause as
    /// `Retired`'s: what a retired spare's turn is fairly compared with.
    ColdNew,
}

/// `GET url`'s JSON body.
async fn get_json(http: &reqwest::Client, url: &str) -> Value {
    http.get(url).send().await.unwrap().json().await.unwrap()
}

/// The pid of the codebuff spare `GET /v1/agents` reports, and its resident memory.
async fn spare(http: &reqwest::Client, base: &str) -> (Option<u64>, Option<u64>) {
    let agents = get_json(http, &format!("{base}/v1/agents")).await;
    let spare = &agents["agents"][0]["warmSpare"];
    (spare["pid"].as_u64(), spare["rssBytes"].as_u64())
}

async fn run(spares: Spares, turns: usize) -> Run {
    let warm = spares == Spares::Warm;
    let (backend, line) = start({
        let mut cmd = Command::new("node");
        cmd.arg(adapter_dir().join("test/fake-backend.mjs"))
            .args(["--scenario", "text", "--port", "0"])
            .current_dir(adapter_dir());
        cmd
    });
    let backend_url = serde_json::from_str::<Value>(&line).expect("backend URL")["url"]
        .as_str()
        .expect("url")
        .to_owned();
    let scratch = std::env::temp_dir().join(format!(
        "codebuffd-turn-start-{}-{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    ));
    let project = scratch.join("project");
    std::fs::create_dir_all(project.join("src")).unwrap();
    std::fs::write(project.join("README.md"), "# demo\n").unwrap();
    std::fs::write(project.join("src/main.rs"), "fn main() {}\n").unwrap();
    let mut cmd = Command::new(daemon_binary());
    cmd.args(["server", "--no-token", "--host", "127.0.0.1", "--port", "0"])
        .arg("--data-dir")
        .arg(scratch.join("data"))
        .env("CODEBUFFD_TEST_BACKEND_URL", &backend_url)
        .env("CODEBUFF_API_KEY", "bench-key")
        .env("HOME", &scratch);
    match spares {
        Spares::Warm => {}
        Spares::Cold | Spares::ColdNew => {
            cmd.arg("--no-warm-start");
        }
        Spares::Retired => {
            cmd.args(["--warm-spare-idle", "1"]);
        }
    }
    let (daemon, ready) = start(cmd);
    let ready: Value = serde_json::from_str(&ready).expect("ready line");
    let base = ready["url"].as_str().expect("url").to_owned();
    let http = reqwest::Client::new();
    let mut s = format!("{base}/v1/sessions/bench");
    let resp = http
        .post(&s)
        .json(&json!({"agent": "codebuff", "directory": project}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "{:?}", resp.text().await);

    let mut starts = Vec::with_capacity(turns);
    let mut seen = 1u64;
    let mut spare_rss = None;
    for turn in 0..turns {
        // Give the spare (or the machine) the pause a real user's turns have.
        if matches!(spares, Spares::Retired | Spares::ColdNew) {
            // An idle daemon: its spare retires...
            tokio::time::sleep(Duration::from_millis(2500)).await;
            assert_eq!(
                spare(&http, &base).await.0,
                None,
                "the spare did not retire before turn {turn}"
            );
            // ...and comes back with the next session, whose first turn is measured.
            s = format!("{base}/v1/sessions/bench-{turn}");
            let resp = http
                .post(&s)
                .json(&json!({"agent": "codebuff", "directory": project}))
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), 200, "{:?}", resp.text().await);
            seen = 1;
            assert_eq!(
                spare(&http, &base).await.0.is_some(),
                spares == Spares::Retired,
                "a spare came back with the session of turn {turn}, or did not"
            );
        } else {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        if warm && spare_rss.is_none() && turn > 0 {
            spare_rss = spare(&http, &base).await.1;
        }
        let sent = Instant::now();
        let resp = http
            .post(format!("{s}/messages"))
            .json(&json!({"message": "Say hello."}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 204);
        // Poll the log at a fine grain for the turn's first agent event.
        let mut first = None;
        loop {
            let page = get_json(&http, &format!("{s}/events?offset={seen}&limit=1000")).await;
            let events = page["events"].as_array().cloned().unwrap_or_default();
            if first.is_none() && events.iter().any(|e| e["source"] == "agent") {
                first = Some(sent.elapsed());
            }
            if let Some(end) = events.iter().find(|e| e["type"] == "turn.ended") {
                assert_eq!(end["data"]["metadata"]["status"], "completed", "{end}");
                seen = events
                    .last()
                    .and_then(|e| e["sequence"].as_u64())
                    .unwrap_or(seen);
                break;
            }
            assert!(
                sent.elapsed() < Duration::from_secs(60),
                "turn {turn} never ended"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        starts.push(first.expect("an agent event"));
    }
    stop(daemon);
    drop(backend);
    let _ = std::fs::remove_dir_all(&scratch);
    Run { starts, spare_rss }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn report(label: &str, run: &mut Run) -> Duration {
    run.starts.sort();
    let p50 = percentile(&run.starts, 0.5);
    let p95 = percentile(&run.starts, 0.95);
    println!(
        "{label:>8}: POST → first agent event over {} turns: p50 {:.0} ms, p95 {:.0} ms, min {:.0} ms, max {:.0} ms",
        run.starts.len(),
        p50.as_secs_f64() * 1e3,
        p95.as_secs_f64() * 1e3,
        run.starts[0].as_secs_f64() * 1e3,
        run.starts[run.starts.len() - 1].as_secs_f64() * 1e3,
    );
    p50
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    assert!(
        adapter_dir().join("node_modules/@codebuff/sdk").is_dir(),
        "run `npm ci` in adapters/codebuff first"
    );
    let measuring = std::env::args().any(|a| a == "--bench");
    let turns: usize = match std::env::var("TURNS").ok().and_then(|t| t.parse().ok()) {
        Some(turns) => turns,
        None if measuring => 20,
        None => {
            println!("smoke mode (run with --bench): tiny sizes, numbers are meaningless");
            2
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut warm = runtime.block_on(run(Spares::Warm, turns));
    let mut cold = runtime.block_on(run(Spares::Cold, turns));
    let mut retired = runtime.block_on(run(Spares::Retired, turns));
    let mut cold_new = runtime.block_on(run(Spares::ColdNew, turns));
    let warm_p50 = report("warm", &mut warm);
    report("cold", &mut cold);
    report("retired", &mut retired);
    report("cold-new", &mut cold_new);
    match warm.spare_rss {
        Some(rss) => println!(
            "idle spare: {:.0} MiB resident (VmRSS of the waiting adapter)",
            rss as f64 / (1024.0 * 1024.0)
        ),
        None => println!("idle spare: not seen"),
    }
    if !measuring {
        println!("target: not evaluated in smoke mode");
        return;
    }
    let met = if warm_p50 <= TARGET_P50 {
        "met"
    } else {
        "MISSED"
    };
    println!("target: warm p50 ≤ {} ms: {met}", TARGET_P50.as_millis());
}
