//! Runs the adapter's scripted fake Codebuff backend (`adapters/codebuff/test/fake-backend.mjs`)
//! for one scenario, as a child process of the test, and reads back what it was asked.
//!
//! The backend prints `{"url":…}` once listening and records every request at `GET /__requests`.
//! It is killed and reaped on drop; its stdin is a pipe owned here, so it also exits by itself if
//! the test process dies.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

/// The adapter's directory in the source tree.
pub fn adapter_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("adapters/codebuff")
}

/// A running fake backend.
pub struct FakeBackend {
    child: Child,
    /// Held open: the backend exits when it reaches EOF.
    _stdin: Option<ChildStdin>,
    /// `http://127.0.0.1:PORT`, the value for `CODEBUFFD_TEST_BACKEND_URL`.
    pub url: String,
}

impl FakeBackend {
    /// Starts the backend for `scenario` (a key of `test/scenarios.mjs`) and waits for its URL.
    pub fn start(scenario: &str) -> FakeBackend {
        let dir = adapter_dir();
        assert!(
            dir.join("node_modules/@codebuff/sdk").is_dir(),
            "run `npm ci` in {} first",
            dir.display()
        );
        let log = std::env::var_os("CODEBUFFD_TEST_LOG").is_some();
        let mut child = Command::new("node")
            .arg(dir.join("test/fake-backend.mjs"))
            .args(["--scenario", scenario, "--port", "0"])
            .current_dir(&dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(if log { Stdio::inherit() } else { Stdio::null() })
            .spawn()
            .expect("start the fake backend (node on PATH)");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let mut backend = FakeBackend {
            child,
            _stdin: stdin,
            url: String::new(),
        };
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("the fake backend ({scenario}) announces its URL"));
        let announced: Value = serde_json::from_str(line.trim())
            .unwrap_or_else(|e| panic!("fake backend announcement {line:?}: {e}"));
        backend.url = announced["url"]
            .as_str()
            .unwrap_or_else(|| panic!("no url in {line:?}"))
            .to_owned();
        backend
    }

    /// Every request the backend has served so far: `[{method, path, authorization, body}]`.
    pub async fn requests(&self) -> Vec<Value> {
        let v: Value = reqwest::get(format!("{}/__requests", self.url))
            .await
            .expect("GET /__requests")
            .json()
            .await
            .expect("/__requests JSON");
        v.as_array().cloned().unwrap_or_default()
    }

    /// The bodies of the chat completion requests, in order.
    pub async fn chat_requests(&self) -> Vec<Value> {
        self.requests()
            .await
            .into_iter()
            .filter(|r| r["method"] == "POST" && r["path"] == "/api/v1/chat/completions")
            .map(|r| r["body"].clone())
            .collect()
    }
}

impl Drop for FakeBackend {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
