//! Starts the real `codebuffd server` binary on a free loopback port for a test, talks to it
//! over real HTTP, and checks that nothing it spawned outlives it.
//!
//! The daemon is started as the leader of a new session (`setsid`), so every process it spawns
//! (agents, their children) carries its session id unless it escapes with its own `setsid`;
//! [`Daemon::stop`] asserts that none of them is left once it has exited.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub use super::procs::{process_group, session_members};
use super::sse::SseReader;

/// A running daemon.
pub struct Daemon {
    child: Option<Child>,
    pub base: String,
    pub token: Option<String>,
    pub data_dir: PathBuf,
    pub http: reqwest::Client,
    stopped: bool,
    /// Leave `data_dir` in place on stop (restart tests reuse it).
    keep_data: bool,
    /// The daemon's last log lines, printed when the test fails while it runs (a failure in CI
    /// then shows what the daemon did, without `CODEBUFFD_TEST_LOG`).
    log_tail: LogTail,
}

/// The last [`LOG_TAIL_LINES`] lines a daemon wrote to stderr.
type LogTail = std::sync::Arc<std::sync::Mutex<std::collections::VecDeque<String>>>;
const LOG_TAIL_LINES: usize = 300;

/// Options for [`Daemon::start`].
#[derive(Default, Clone)]
pub struct DaemonOptions {
    pub token: Option<String>,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    /// Starts the daemon with this soft limit of open files (the hard limit unchanged), as a
    /// machine with a low default would.
    pub open_files_soft_limit: Option<u64>,
    /// A fixed loopback port ([`Daemon::start_in_with`] only; otherwise one the daemon picks).
    pub port: Option<u16>,
    /// Starts the daemon with this umask (else the test's).
    pub umask: Option<u32>,
}

/// Sets the umask of the process `cmd` starts.
fn with_umask(cmd: &mut Command, umask: Option<u32>) {
    if let Some(mask) = umask {
        // SAFETY: umask is a plain system call (async-signal-safe).
        unsafe {
            cmd.pre_exec(move || {
                nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(mask));
                Ok(())
            });
        }
    }
}

/// A scratch directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!(
            "codebuffd-test-{tag}-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&dir).expect("create temp dir");
        TempDir(dir)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    /// Removes the directory and, when a daemon ran on it as its data directory, the working
    /// directory [`Daemon::launch`] made beside it (`<dir>.work`); when a test opened a SQLite
    /// store at the path itself (a file), the lock files the store keeps beside its database
    /// (`<db>.migrate.lock`, `<db>.engines/`).
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
        let _ = std::fs::remove_file(&self.0);
        let _ = std::fs::remove_dir_all(work_dir(&self.0));
        for beside in [".migrate.lock", ".engines"] {
            let mut path = self.0.clone().into_os_string();
            path.push(beside);
            let path = PathBuf::from(path);
            let _ = std::fs::remove_file(&path);
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}

pub fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_codebuffd"))
}

/// An `--agent-command` (in `dir`) that reads its turn line and exits: started as a warm spare
/// it waits, holding nothing, and exits once its stdin closes (the mock keeps no spare, so
/// tests of spares use this).
pub fn waiting_agent(dir: &TempDir) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let agent = dir.path().join("waiting-agent");
    std::fs::write(&agent, "#!/bin/sh\nread turn\n").unwrap();
    std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).unwrap();
    agent
}

/// A data directory of its own for one daemon (the daemon creates it; `Daemon` removes it).
fn fresh_data_dir() -> PathBuf {
    std::env::temp_dir().join(format!(
        "codebuffd-test-data-{}-{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    ))
}

/// The working directory of the daemon whose data directory is `data_dir`: beside it (inside it
/// sessions are refused).
pub fn work_dir(data_dir: &Path) -> PathBuf {
    let mut name = data_dir.as_os_str().to_owned();
    name.push(".work");
    PathBuf::from(name)
}

impl Daemon {
    /// Starts a daemon with a fresh data directory and no token.
    pub fn start() -> Daemon {
        Daemon::start_with(DaemonOptions::default())
    }

    pub fn start_with(opts: DaemonOptions) -> Daemon {
        let data_dir = fresh_data_dir();
        let mut cmd = Command::new(binary());
        cmd.arg("server")
            .args(["--host", "127.0.0.1", "--port", "0", "--data-dir"])
            .arg(&data_dir);
        match &opts.token {
            Some(t) => cmd.args(["--token", t]),
            None => cmd.arg("--no-token"),
        };
        cmd.args(&opts.args)
            .env("RUST_LOG", "info")
            .envs(opts.env.iter().map(|(k, v)| (k, v)));
        with_umask(&mut cmd, opts.umask);
        if let Some(soft) = opts.open_files_soft_limit {
            use nix::sys::resource::{getrlimit, setrlimit, Resource};
            // SAFETY: getrlimit and setrlimit are plain system calls (async-signal-safe).
            unsafe {
                cmd.pre_exec(move || {
                    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
                    setrlimit(Resource::RLIMIT_NOFILE, soft.min(hard), hard)?;
                    Ok(())
                });
            }
        }
        Daemon::launch(cmd, opts.token, data_dir)
    }

    /// Starts `codebuffd server` with exactly `args` after `server` (nothing added: the data
    /// directory comes from `CODEBUFFD_DATA_DIR`), e.g. the command line orchestrator SDKs use:
    /// `--host 127.0.0.1 --port P --token T`. `token` is what [`Daemon::get`] and friends send.
    pub fn start_with_args(args: &[&str], token: Option<&str>) -> Daemon {
        let data_dir = fresh_data_dir();
        let mut cmd = Command::new(binary());
        cmd.arg("server")
            .args(args)
            .env("RUST_LOG", "info")
            .env("CODEBUFFD_DATA_DIR", &data_dir);
        Daemon::launch(cmd, token.map(str::to_owned), data_dir)
    }

    /// Spawns `cmd` (a `codebuffd server` command line) in a new session and waits for its
    /// ready signal: the JSON line `{"event":"listening","address":…}` on stdout.
    pub fn launch(mut cmd: Command, token: Option<String>, data_dir: PathBuf) -> Daemon {
        // Like the README's walkthrough, the daemon runs from a scratch directory (the default
        // directory of its sessions), never from the checkout.
        let work = work_dir(&data_dir);
        std::fs::create_dir_all(&work).expect("create the daemon's working directory");
        cmd.current_dir(&work);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
        unsafe {
            cmd.pre_exec(|| {
                nix::unistd::setsid().map_err(std::io::Error::other)?;
                Ok(())
            });
        }
        let mut child = cmd.spawn().expect("start codebuffd");
        let stdout = child.stdout.take().expect("stdout");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let ready: Option<Value> = serde_json::from_str(&line).ok();
                match ready {
                    Some(v) if !sent && v["event"] == "listening" => {
                        let _ = tx.send(v["address"].as_str().unwrap_or_default().to_owned());
                        sent = true;
                    }
                    _ => panic!("the daemon printed something else on stdout: {line}"),
                }
            }
        });
        let log_tail = LogTail::default();
        let tail = log_tail.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if std::env::var_os("CODEBUFFD_TEST_LOG").is_some() {
                    eprintln!("[daemon] {line}");
                }
                let mut tail = tail.lock().unwrap_or_else(|e| e.into_inner());
                if tail.len() == LOG_TAIL_LINES {
                    tail.pop_front();
                }
                tail.push_back(line);
            }
        });
        let addr = match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(addr) => addr,
            Err(_) => {
                // Never leave a daemon behind, even when it failed to start.
                let _ = child.kill();
                let _ = child.wait();
                panic!("the daemon did not announce its address");
            }
        };
        Daemon {
            child: Some(child),
            base: format!("http://{addr}"),
            token,
            data_dir,
            http: reqwest::Client::new(),
            stopped: false,
            keep_data: false,
            log_tail,
        }
    }

    /// Starts a daemon on an existing data directory (kept on stop) with `args` added, e.g. a
    /// `--store`; restart tests start several daemons one after the other on the same one.
    pub fn start_in(data_dir: &Path, args: &[&str]) -> Daemon {
        Daemon::start_in_with(
            data_dir,
            DaemonOptions {
                args: args.iter().map(|a| (*a).to_owned()).collect(),
                ..Default::default()
            },
        )
    }

    /// [`Daemon::start_in`] with options (arguments and environment; no token).
    pub fn start_in_with(data_dir: &Path, opts: DaemonOptions) -> Daemon {
        let port = opts.port.unwrap_or(0).to_string();
        let mut cmd = Command::new(binary());
        cmd.arg("server")
            .args(["--host", "127.0.0.1", "--port", &port, "--no-token"])
            .arg("--data-dir")
            .arg(data_dir)
            .args(&opts.args)
            .env("RUST_LOG", "info")
            .envs(opts.env.iter().map(|(k, v)| (k, v)));
        with_umask(&mut cmd, opts.umask);
        let mut d = Daemon::launch(cmd, None, data_dir.to_path_buf());
        d.keep_data = true;
        d
    }

    /// [`Daemon::start_in`] on a fixed loopback `port` (a daemon restarted where its clients
    /// left it: they reconnect to the same address).
    pub fn start_in_on(data_dir: &Path, port: u16) -> Daemon {
        Daemon::start_in_with(
            data_dir,
            DaemonOptions {
                port: Some(port),
                ..Default::default()
            },
        )
    }

    /// Kills the daemon with SIGKILL (a crash) and waits for it; its agents are left behind,
    /// as a crash leaves them. Returns its pid (the session id of what it spawned).
    pub fn kill9(mut self) -> i32 {
        self.stopped = true;
        let mut child = self.child.take().expect("running daemon");
        let pid = child.id() as i32;
        let _ = child.kill();
        let _ = child.wait();
        pid
    }

    /// [`Daemon::kill9`], then waits until nothing it spawned is left (its agents see their
    /// pipes close and exit), failing with what is still there after 10 s.
    pub fn crash(self) {
        let pid = self.kill9();
        assert_eq!(
            wait_session_empty(pid, Duration::from_secs(10)),
            Vec::<i32>::new(),
            "what the crashed daemon spawned is left"
        );
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().map(|c| c.id() as i32).unwrap_or(0)
    }

    /// The warm spares the daemon keeps (`warmSpare.pid` of `GET /v1/agents`): agent processes
    /// waiting for a turn that has not come yet.
    pub async fn spares(&self) -> Vec<i32> {
        let agents: Value = self
            .get("/v1/agents")
            .await
            .json()
            .await
            .expect("agents JSON");
        agents["agents"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|a| a["warmSpare"]["pid"].as_i64())
            .map(|pid| pid as i32)
            .collect()
    }

    /// The live processes the daemon started for turns: the members of its process session
    /// but itself and its idle warm spares (with what runs in their process groups).
    pub async fn agents(&self) -> Vec<i32> {
        let pid = self.pid();
        let spares = self.spares().await;
        session_members(pid)
            .into_iter()
            .filter(|p| *p != pid)
            .filter(|p| process_group(*p).is_none_or(|g| !spares.contains(&g)))
            .collect()
    }

    /// Waits (up to 10 s) until the daemon runs an agent (see [`Daemon::agents`]); returns
    /// their pids.
    pub async fn wait_agents(&self) -> Vec<i32> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let agents = self.agents().await;
            if !agents.is_empty() {
                return agents;
            }
            assert!(Instant::now() < deadline, "the daemon started no agent");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Polls (up to `limit`) until the daemon's process session holds no process but the
    /// daemon and its idle spares; returns those still there. The poll covers an agent that
    /// still winds down after its `finish` and the delivery of the SIGKILL the daemon sends to a
    /// leftover group.
    pub async fn wait_no_agents(&self, limit: Duration) -> Vec<i32> {
        let deadline = Instant::now() + limit;
        loop {
            let left = self.agents().await;
            if left.is_empty() || Instant::now() > deadline {
                return left;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    fn auth(&self, rb: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.token {
            Some(t) => rb.bearer_auth(t),
            None => rb,
        }
    }

    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.auth(self.http.get(self.url(path)))
            .send()
            .await
            .expect("GET")
    }

    pub async fn post(&self, path: &str, body: Value) -> reqwest::Response {
        self.auth(self.http.post(self.url(path)).json(&body))
            .send()
            .await
            .expect("POST")
    }

    pub async fn delete(&self, path: &str) -> reqwest::Response {
        self.auth(self.http.delete(self.url(path)))
            .send()
            .await
            .expect("DELETE")
    }

    pub async fn post_empty(&self, path: &str) -> reqwest::Response {
        self.auth(self.http.post(self.url(path)))
            .send()
            .await
            .expect("POST")
    }

    /// Creates a session and asserts 200.
    pub async fn create(&self, id: &str, body: Value) {
        let resp = self.post(&format!("/v1/sessions/{id}"), body).await;
        let status = resp.status();
        let text = resp.text().await.unwrap_or_default();
        assert_eq!(status, 200, "create {id}: {text}");
    }

    /// Sends a message and asserts 204.
    pub async fn message(&self, id: &str, text: &str) {
        let resp = self
            .post(
                &format!("/v1/sessions/{id}/messages"),
                serde_json::json!({ "message": text }),
            )
            .await;
        let status = resp.status();
        let body = resp.text().await.unwrap_or_default();
        assert_eq!(status, 204, "message to {id}: {body}");
    }

    /// The session's `SessionInfo` (asserting 200).
    pub async fn info(&self, id: &str) -> Value {
        let resp = self.get(&format!("/v1/sessions/{id}")).await;
        assert_eq!(resp.status(), 200, "SessionInfo of {id}");
        resp.json().await.expect("SessionInfo JSON")
    }

    /// Polls `SessionInfo` until its status is `status` (the session's actor updates it right
    /// after it records the events, so a poll may see it a moment later); panics after `limit`.
    pub async fn wait_status(&self, id: &str, status: &str, limit: Duration) -> Value {
        let deadline = Instant::now() + limit;
        loop {
            let info = self.info(id).await;
            if info["status"] == status {
                return info;
            }
            assert!(
                Instant::now() < deadline,
                "session {id} never became {status}: {info}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Every event of a session so far.
    pub async fn events(&self, id: &str) -> Vec<Value> {
        let mut all = Vec::new();
        loop {
            let after = all.len();
            let v: Value = self
                .get(&format!(
                    "/v1/sessions/{id}/events?offset={after}&limit=10000"
                ))
                .await
                .json()
                .await
                .expect("events JSON");
            let page = v["events"].as_array().cloned().unwrap_or_default();
            all.extend(page);
            if v["hasMore"] != true {
                return all;
            }
        }
    }

    /// Polls until some event satisfies `pred` (or panics after `limit`); returns all events.
    pub async fn wait_for(
        &self,
        id: &str,
        limit: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Vec<Value> {
        let deadline = Instant::now() + limit;
        loop {
            let events = self.events(id).await;
            if events.iter().any(&pred) {
                return events;
            }
            if Instant::now() > deadline {
                let types: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
                panic!("timed out waiting on session {id}; events so far: {types:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until the session has recorded `turns` `turn.ended` events; returns all events.
    pub async fn wait_turns_ended(&self, id: &str, turns: usize) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let events = self.events(id).await;
            let ended = events.iter().filter(|e| e["type"] == "turn.ended").count();
            if ended >= turns {
                return events;
            }
            if Instant::now() > deadline {
                let types: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
                panic!("timed out waiting for {turns} turn(s) on {id}; events: {types:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Sends SIGTERM, waits for exit 0, and asserts that no process of the daemon's session is
    /// left (zombies waiting for init to reap them aside).
    pub fn stop(mut self) {
        self.stop_inner(true);
    }

    fn stop_inner(&mut self, check: bool) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        let Some(mut child) = self.child.take() else {
            return;
        };
        let pid = child.id() as i32;
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGTERM,
        );
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Ok(Some(status)) = child.try_wait() {
                break Some(status);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                break child.wait().ok();
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let leftovers = wait_session_empty(pid, Duration::from_secs(5));
        for p in &leftovers {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(*p),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        if !self.keep_data {
            let _ = std::fs::remove_dir_all(&self.data_dir);
            let _ = std::fs::remove_dir_all(work_dir(&self.data_dir));
        }
        if check && !std::thread::panicking() {
            assert!(
                status.is_some_and(|s| s.success()),
                "the daemon should exit 0 after SIGTERM, got {status:?}"
            );
            assert!(
                leftovers.is_empty(),
                "processes of the daemon outlived it: {leftovers:?}"
            );
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if std::thread::panicking() && !self.stopped {
            let tail = self.log_tail.lock().unwrap_or_else(|e| e.into_inner());
            eprintln!(
                "the daemon at {} logged, last {} lines:",
                self.base,
                tail.len()
            );
            for line in tail.iter() {
                eprintln!("[daemon] {line}");
            }
        }
        self.stop_inner(false);
    }
}

/// A loopback port that was free a moment ago (for tests that must pass `--port P`).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

impl Daemon {
    /// Opens an SSE stream (`GET path`) and asserts 200 `text/event-stream`.
    pub async fn sse(&self, path: &str) -> SseReader {
        let resp = self.get(path).await;
        assert_eq!(resp.status(), 200, "SSE {path}");
        let ct = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        assert!(ct.starts_with("text/event-stream"), "SSE content type {ct}");
        SseReader::new(resp)
    }
}

/// The command line of process `pid` (empty once it is gone), for failure messages.
pub fn cmdline(pid: i32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .unwrap_or_default()
}

/// What a failure message shows of processes: pid, state, parent, process group, where it
/// waits in the kernel, command line.
pub fn describe_processes(pids: &[i32]) -> String {
    pids.iter()
        .map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let after = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or("");
            let fields: Vec<&str> = after.split_whitespace().collect();
            let wchan = std::fs::read_to_string(format!("/proc/{pid}/wchan")).unwrap_or_default();
            format!(
                "[{pid} state {} ppid {} pgid {} wchan {wchan}: {}]",
                fields.first().unwrap_or(&"?"),
                fields.get(1).unwrap_or(&"?"),
                fields.get(2).unwrap_or(&"?"),
                cmdline(*pid),
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Waits until no live process of session `sid` remains; returns those still there.
pub fn wait_session_empty(sid: i32, limit: Duration) -> Vec<i32> {
    let deadline = Instant::now() + limit;
    loop {
        let left = session_members(sid);
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
