//! Many engine processes on one data directory (issue "many clients, one log"): servers,
//! `codebuffd acp` and `codebuffd exec` side by side, each its own engine on the one SQLite
//! log; a session is followed, answered and recovered across processes.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::daemon::{
    binary, describe_processes, session_members, waiting_agent, work_dir, Daemon, DaemonOptions,
    TempDir,
};

/// A `codebuffd acp` on `data_dir`, driven with raw JSON-RPC lines.
struct AcpProcess {
    child: Child,
    stdin: std::process::ChildStdin,
    lines: std::sync::mpsc::Receiver<Value>,
    next_id: u64,
}

impl AcpProcess {
    fn start(data_dir: &std::path::Path) -> AcpProcess {
        let mut cmd = Command::new(binary());
        cmd.args(["acp", "--agent", "mock", "--data-dir"])
            .arg(data_dir)
            .current_dir(work_dir(data_dir))
            .env("RUST_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        // SAFETY: setsid is async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                nix::unistd::setsid()
                    .map(|_| ())
                    .map_err(std::io::Error::from)
            });
        }
        let mut child = cmd.spawn().expect("start codebuffd acp");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    if tx.send(v).is_err() {
                        return;
                    }
                }
            }
        });
        let mut acp = AcpProcess {
            child,
            stdin,
            lines,
            next_id: 0,
        };
        let init = acp.request(
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": {}}),
        );
        assert!(init["result"]["protocolVersion"].is_number(), "{init}");
        acp
    }

    /// Sends a request and waits for its response (notifications in between are skipped).
    fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let msg = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no answer to {method}"));
            if msg["id"] == id && msg.get("method").is_none() {
                return msg;
            }
        }
    }

    /// `session/new` then one prompt; returns the session id and the prompt's stop reason.
    fn prompt_new_session(&mut self, cwd: &std::path::Path, text: &str) -> (String, Value) {
        let new = self.request("session/new", json!({"cwd": cwd, "mcpServers": []}));
        let sid = new["result"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("{new}"))
            .to_owned();
        let answer = self.request(
            "session/prompt",
            json!({"sessionId": sid, "prompt": [{"type": "text", "text": text}]}),
        );
        (sid, answer["result"]["stopReason"].clone())
    }

    /// Closes stdin and waits for exit 0; nothing it started is left.
    fn finish(mut self) {
        let pid = self.child.id() as i32;
        drop(self.stdin);
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                break status;
            }
            assert!(Instant::now() < deadline, "codebuffd acp did not exit");
            std::thread::sleep(Duration::from_millis(10));
        };
        assert!(status.success(), "codebuffd acp exited {status:?}");
        let left = support::daemon::wait_session_empty(pid, Duration::from_secs(5));
        assert!(left.is_empty(), "left behind by codebuffd acp: {left:?}");
    }
}

/// `codebuffd exec` on `data_dir`, started now (in a session of its own).
fn spawn_exec(data_dir: &std::path::Path, text: &str) -> Child {
    let mut cmd = Command::new(binary());
    cmd.args(["exec", "--agent", "mock", "--data-dir"])
        .arg(data_dir)
        .arg(text)
        .current_dir(work_dir(data_dir))
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: setsid is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setsid()
                .map(|_| ())
                .map_err(std::io::Error::from)
        });
    }
    cmd.spawn().expect("start codebuffd exec")
}

fn sessions(v: &Value) -> Vec<Value> {
    v["sessions"].as_array().cloned().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_acp_two_exec_and_a_server_run_turns_on_one_data_directory() {
    let dir = TempDir::new("many-all");
    std::fs::create_dir_all(work_dir(dir.path())).unwrap();
    let server = Daemon::start_in(dir.path(), &[]);
    // Two editors' agents and two terminals, all at once, beside the server.
    let mut acp_a = AcpProcess::start(dir.path());
    let mut acp_b = AcpProcess::start(dir.path());
    let exec_1 = spawn_exec(dir.path(), "echo from terminal one");
    let exec_2 = spawn_exec(dir.path(), "echo from terminal two");
    server.create("by-server", json!({"agent": "mock"})).await;
    server.message("by-server", "echo from the server").await;
    let cwd = work_dir(dir.path());
    let (sid_a, stop_a) = acp_a.prompt_new_session(&cwd, "echo from editor a");
    let (sid_b, stop_b) = acp_b.prompt_new_session(&cwd, "echo from editor b");
    assert_eq!(stop_a, "end_turn");
    assert_eq!(stop_b, "end_turn");
    for exec in [exec_1, exec_2] {
        let out = exec.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "exec: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("from terminal"));
    }
    server.wait_turns_ended("by-server", 1).await;
    // Every process's session is in the one log: the server lists and reads them all.
    let list: Value = server.get("/v1/sessions").await.json().await.unwrap();
    let all = sessions(&list);
    assert_eq!(all.len(), 5, "{list:#}");
    for sid in [&sid_a, &sid_b] {
        let events = server.wait_turns_ended(sid, 1).await;
        assert!(
            events.iter().any(
                |e| e["type"] == "turn.ended" && e["data"]["metadata"]["status"] == "completed"
            ),
            "{sid}: {events:#?}"
        );
    }
    acp_a.finish();
    acp_b.finish();
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_run_by_one_process_is_followed_and_answered_through_another() {
    let dir = TempDir::new("many-follow");
    let a = Daemon::start_in(dir.path(), &[]);
    let b = Daemon::start_in(dir.path(), &[]);
    a.create("s", json!({"agent": "mock"})).await;
    // Followed live in B from its first event while A runs the turn.
    let mut sse = b.sse("/v1/sessions/s/events/sse").await;
    a.message("s", "flood 3000").await;
    let seen = sse
        .until(Duration::from_secs(60), |e| e["type"] == "turn.ended")
        .await;
    assert_eq!(
        seen.last().map(|e| e["type"].clone()),
        Some(json!("turn.ended")),
        "B never saw the turn end"
    );
    let sequences: Vec<u64> = seen
        .iter()
        .map(|e| e["sequence"].as_u64().unwrap())
        .collect();
    assert_eq!(sequences, (1..=sequences.len() as u64).collect::<Vec<_>>());
    let deltas = seen.iter().filter(|e| e["type"] == "item.delta").count();
    assert!(deltas >= 3000, "{deltas} deltas");
    // B's copy is A's log.
    assert_eq!(a.events("s").await, seen);

    // A question asked in A's turn is answered through B.
    a.message("s", "ask").await;
    let events = b
        .wait_for("s", Duration::from_secs(30), |e| {
            e["type"] == "question.requested"
        })
        .await;
    let question = events
        .iter()
        .rfind(|e| e["type"] == "question.requested")
        .unwrap();
    let qid = question["data"]["question_id"].as_str().unwrap();
    let resp = b
        .post(
            &format!("/v1/sessions/s/questions/{qid}/reply"),
            json!({"answers": [["Blue"]]}),
        )
        .await;
    assert!(resp.status().is_success(), "{}", resp.status());
    let events = a
        .wait_for("s", Duration::from_secs(30), |e| {
            e["type"] == "question.resolved" && e["data"]["status"] == "answered"
        })
        .await;
    assert!(events.iter().any(|e| e["type"] == "question.resolved"));
    a.wait_turns_ended("s", 2).await;
    // An unknown question is refused through B as A would refuse it.
    let resp = b
        .post(
            "/v1/sessions/s/questions/nope/reply",
            json!({"answers": [["x"]]}),
        )
        .await;
    assert_eq!(resp.status(), 400);
    a.stop();
    b.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_process_s_turn_is_interrupted_by_a_survivor_and_its_agent_killed() {
    let dir = TempDir::new("many-kill");
    // A also keeps a warm spare: a `codebuff` session's, of an `--agent-command` that waits
    // for its turn line (the mock keeps none).
    let bin = TempDir::new("many-kill-agent");
    let waiting = waiting_agent(&bin);
    let a = Daemon::start_in_with(
        dir.path(),
        DaemonOptions {
            args: vec!["--agent-command".into(), waiting.display().to_string()],
            env: vec![("CODEBUFF_API_KEY".into(), "cb-many-key".into())],
            ..Default::default()
        },
    );
    let b = Daemon::start_in(dir.path(), &[]);
    a.create("idle-codebuff", json!({"agent": "codebuff"}))
        .await;
    assert_eq!(a.spares().await.len(), 1, "A keeps a spare");
    a.create("victim", json!({"agent": "mock"})).await;
    b.create("bystander", json!({"agent": "mock"})).await;
    a.message("victim", "hang").await;
    b.message("bystander", "hang").await;
    a.wait_status("victim", "running", Duration::from_secs(10))
        .await;
    let agents = a.wait_agents().await;
    let killed = Instant::now();
    let a_pid = a.kill9();
    // B ends the victim's turn within 5 s, and kills the agent A left behind.
    let events = b
        .wait_for("victim", Duration::from_secs(5), |e| {
            e["type"] == "turn.ended" && e["data"]["metadata"]["status"] == "interrupted"
        })
        .await;
    let took = killed.elapsed();
    assert!(took < Duration::from_secs(5), "recovered after {took:?}");
    assert_eq!(
        events.iter().filter(|e| e["type"] == "turn.ended").count(),
        1
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while agents.iter().any(|p| session_members(a_pid).contains(p)) {
        assert!(
            Instant::now() < deadline,
            "A's agent outlived the recovery: {}",
            describe_processes(&session_members(a_pid))
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Nothing of A stays: its spare reads end-of-file and exits, as does an agent A started
    // but had not yet recorded (it never got its turn).
    let left = support::daemon::wait_session_empty(a_pid, Duration::from_secs(5));
    assert!(
        left.is_empty(),
        "processes of A outlived it: {}",
        describe_processes(&left)
    );
    // The bystander's turn in B goes on, untouched.
    assert_eq!(b.info("bystander").await["status"], "running");
    b.post_empty("/v1/sessions/bystander/cancel").await;
    b.wait_turns_ended("bystander", 1).await;
    // The victim is usable again, through B.
    b.message("victim", "echo again").await;
    let events = b.wait_turns_ended("victim", 2).await;
    assert_eq!(
        events.last().unwrap()["data"]["metadata"]["status"],
        "completed"
    );
    b.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_list_sees_every_session_while_other_engines_run() {
    let dir = TempDir::new("many-list");
    let a = Daemon::start_in(dir.path(), &[]);
    a.create("one", json!({"agent": "mock", "title": "first"}))
        .await;
    a.message("one", "hang").await;
    a.wait_status("one", "running", Duration::from_secs(10))
        .await;
    let out = Command::new(binary())
        .args(["sessions", "list", "--json", "--data-dir"])
        .arg(dir.path())
        .current_dir(work_dir(dir.path()))
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "sessions list: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("\"one\""), "{text}");
    assert!(text.contains("running"), "{text}");
    // Filtered by owner: the engine running it.
    let engines: Value = a.get("/v1/engines").await.json().await.unwrap();
    let owner = engines["engines"][0]["engineId"]
        .as_str()
        .unwrap()
        .to_owned();
    let mine: Value = a
        .get(&format!("/v1/sessions?owner={owner}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(sessions(&mine).len(), 1);
    let idle: Value = a.get("/v1/sessions?owner=").await.json().await.unwrap();
    assert_eq!(sessions(&idle).len(), 0);
    a.post_empty("/v1/sessions/one/cancel").await;
    a.stop();
}

/// `/v1/acp` servers on a shared data directory: each is served by the process that created
/// it; a second server process leaves it alone (it neither lists nor restores it), and once
/// its process is gone the next one restores it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acp_server_is_served_by_one_process_and_restored_after_it_dies() {
    use support::acp_http;
    let dir = TempDir::new("many-acp-http");
    let work = work_dir(dir.path());
    std::fs::create_dir_all(&work).unwrap();
    let a = Daemon::start_in(dir.path(), &[]);
    acp_http::initialize(&a, "x", "mock").await;
    let session = acp_http::new_session(&a, "x", 1, &work).await;
    let answer = acp_http::prompt(&a, "x", 2, &session, "echo first").await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    let b = Daemon::start_in(dir.path(), &[]);
    let listed: Value = b.get("/v1/acp").await.json().await.unwrap();
    assert_eq!(listed["servers"], json!([]), "B leaves A's server to A");
    // A's server goes on, its log not interleaved with another writer's.
    let answer = acp_http::prompt(&a, "x", 3, &session, "echo second").await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    a.kill9();
    let c = Daemon::start_in(dir.path(), &[]);
    let listed: Value = c.get("/v1/acp").await.json().await.unwrap();
    assert_eq!(listed["servers"][0]["serverId"], "x", "{listed}");
    let mut stream = acp_http::open_stream(&c, "x", None).await;
    let envelopes = stream.until_response(3).await;
    acp_http::assert_dense(&envelopes, 1);
    assert!(acp_http::agent_text(&envelopes).contains("second"));
    b.stop();
    c.stop();
}
