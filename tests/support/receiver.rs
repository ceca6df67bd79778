//! A webhook receiver on loopback for the tests: an axum server that records every request it
//! gets (headers, raw body, when) and answers as the test says (a status, after a delay).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use serde_json::Value;

/// One request the receiver got.
#[derive(Debug, Clone)]
pub struct Received {
    pub webhook_id: String,
    pub timestamp: String,
    pub signature: String,
    pub body: String,
    pub at: Instant,
}

impl Received {
    /// The body as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).expect("the body is JSON")
    }

    /// `body.type`.
    pub fn event_type(&self) -> String {
        self.json()["type"].as_str().unwrap_or_default().to_owned()
    }

    /// The line `tests/webhooks/verify.mjs` reads.
    pub fn verifier_line(&self) -> String {
        serde_json::json!({
            "headers": {
                "webhook-id": self.webhook_id,
                "webhook-timestamp": self.timestamp,
                "webhook-signature": self.signature,
            },
            "body": self.body,
        })
        .to_string()
    }
}

/// How the receiver answers: the statuses of the first requests in order, then `then`.
#[derive(Debug, Clone)]
pub struct Behaviour {
    pub first: Vec<u16>,
    pub then: u16,
    pub delay: Duration,
}

impl Default for Behaviour {
    fn default() -> Self {
        Behaviour {
            first: Vec::new(),
            then: 204,
            delay: Duration::ZERO,
        }
    }
}

#[derive(Clone)]
struct Shared {
    got: Arc<Mutex<Vec<Received>>>,
    behaviour: Arc<Behaviour>,
}

/// A running receiver; stopped when dropped.
pub struct Receiver {
    pub addr: SocketAddr,
    got: Arc<Mutex<Vec<Received>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    /// Starts a receiver on a free loopback port.
    pub async fn start(behaviour: Behaviour) -> Receiver {
        Receiver::start_on(0, behaviour).await
    }

    /// Starts a receiver on `port` (retrying a moment while the port is still taken).
    pub async fn start_on(port: u16, behaviour: Behaviour) -> Receiver {
        let deadline = Instant::now() + Duration::from_secs(10);
        let listener = loop {
            match tokio::net::TcpListener::bind(("127.0.0.1", port)).await {
                Ok(l) => break l,
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("cannot listen on 127.0.0.1:{port}: {e}"),
            }
        };
        let addr = listener.local_addr().expect("address");
        let got = Arc::new(Mutex::new(Vec::new()));
        let state = Shared {
            got: got.clone(),
            behaviour: Arc::new(behaviour),
        };
        let app = Router::new()
            .route("/{*path}", post(receive))
            .route("/", post(receive))
            .with_state(state);
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Receiver { addr, got, task }
    }

    /// The URL of its `/hook` path.
    pub fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    /// Everything received so far.
    pub fn got(&self) -> Vec<Received> {
        self.got.lock().unwrap().clone()
    }

    /// Waits until `pred` holds for what was received; panics after `limit`.
    pub async fn wait_until(
        &self,
        limit: Duration,
        what: &str,
        pred: impl Fn(&[Received]) -> bool,
    ) -> Vec<Received> {
        let deadline = Instant::now() + limit;
        loop {
            let got = self.got();
            if pred(&got) {
                return got;
            }
            if Instant::now() > deadline {
                let types: Vec<String> = got.iter().map(Received::event_type).collect();
                panic!("the receiver never got {what}; it got {types:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops listening (the port is free again once this returns).
    pub async fn stop(self) {
        self.task.abort();
        let _ = self.task.await;
    }
}

async fn receive(State(s): State<Shared>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let n = {
        let mut got = s.got.lock().unwrap();
        got.push(Received {
            webhook_id: header("webhook-id"),
            timestamp: header("webhook-timestamp"),
            signature: header("webhook-signature"),
            body: String::from_utf8_lossy(&body).into_owned(),
            at: Instant::now(),
        });
        got.len() - 1
    };
    if !s.behaviour.delay.is_zero() {
        tokio::time::sleep(s.behaviour.delay).await;
    }
    let status = s
        .behaviour
        .first
        .get(n)
        .copied()
        .unwrap_or(s.behaviour.then);
    StatusCode::from_u16(status).unwrap_or(StatusCode::OK)
}

/// Verifies deliveries with the official Standard Webhooks library (npm `standardwebhooks`,
/// `tests/webhooks/verify.mjs`, installed with `npm ci` on first use); returns each verified
/// payload, in order. Panics when any fails verification.
pub fn verify_with_official_library(secret: &str, deliveries: &[Received]) -> Vec<Value> {
    use std::io::Write;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/webhooks");
    if !dir.join("node_modules/standardwebhooks").is_dir() {
        let status = std::process::Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(&dir)
            .status()
            .expect("run npm ci in tests/webhooks");
        assert!(status.success(), "npm ci in tests/webhooks failed");
    }
    let mut child = std::process::Command::new("node")
        .arg("verify.mjs")
        .current_dir(&dir)
        .env("WEBHOOK_SECRET", secret)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run node verify.mjs");
    {
        let mut stdin = child.stdin.take().expect("stdin");
        for d in deliveries {
            writeln!(stdin, "{}", d.verifier_line()).expect("write to the verifier");
        }
    }
    let out = child.wait_with_output().expect("the verifier ends");
    let text = String::from_utf8_lossy(&out.stdout);
    let results: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("the verifier prints JSON"))
        .collect();
    assert_eq!(results.len(), deliveries.len(), "verifier output: {text}");
    for (r, d) in results.iter().zip(deliveries) {
        assert_eq!(
            r["ok"], true,
            "the official library refused delivery {}: {r}",
            d.webhook_id
        );
    }
    assert!(out.status.success(), "verifier output: {text}");
    results.into_iter().map(|r| r["payload"].clone()).collect()
}
