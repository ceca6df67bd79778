//! The `/v1` router in process: the real router over the memory store, driven with
//! `tower::ServiceExt::oneshot`, one behaviour per test. Request validation, problem documents,
//! CORS, the Host allow-list, the cross-site guard and the inspector's files live here; start-up, auth and end-to-end
//! flows over real HTTP stay in the real-binary suites (`http_api`, `sse`, `mock_sessions`).
//!
//! Sessions that run turns use the real mock agent (this crate's `codebuffd mock-agent`) in a
//! scratch directory of their own; [`Api::close`] ends them and checks that none is left.

mod support;

#[path = "router/agents.rs"]
mod agents;
#[path = "router/browser_guard.rs"]
mod browser_guard;
#[path = "router/cors.rs"]
mod cors;
#[path = "router/inspector.rs"]
mod inspector;
#[path = "router/requests.rs"]
mod requests;
#[path = "router/sessions.rs"]
mod sessions;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, Method, Request};
use codebuffd::agent::{AdapterSource, Launcher};
use codebuffd::http::{router, HttpOptions};
use codebuffd::session::{Limits, SessionContext, SessionManager};
use codebuffd::store::MemoryStore;
use serde_json::{json, Value};
use support::api::{assert_problem_response, routes};
use support::daemon::TempDir;
use support::events::{assistant_texts, count, of_type, turn_ends};
use support::invariants::assert_well_formed;
use tower::ServiceExt as _;

/// The `Host` a local client sends.
const HOST: &str = "127.0.0.1:2468";
/// A web page elsewhere.
const EVIL: &str = "https://evil.example";
/// Generous limit for anything that waits on a turn (the machine is shared and loaded).
const WAIT: Duration = Duration::from_secs(60);

/// The HTTP options of a default daemon: loopback, no token, CORS closed, 1 MiB bodies.
fn options() -> HttpOptions {
    HttpOptions {
        bind: Some([127, 0, 0, 1].into()),
        max_body_bytes: 1024 * 1024,
        sse_keep_alive: Duration::from_secs(15),
        ..HttpOptions::default()
    }
}

/// The router of one daemon, with the engine behind it.
struct Api {
    app: axum::Router,
    manager: Arc<SessionManager>,
    /// Sessions' working directory (their agents run there).
    work: TempDir,
    _agent_state: TempDir,
}

/// One answer, read whole.
struct Reply {
    what: String,
    status: u16,
    headers: HeaderMap,
    body: Bytes,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON, asserting `status`.
    fn json(&self, status: u16) -> Value {
        assert_eq!(self.status, status, "{}: {}", self.what, self.text());
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{}: not JSON ({e}): {}", self.what, self.text()))
    }

    /// Asserts a problem document of `kind` with `status`; returns it.
    fn problem(&self, status: u16, kind: &str) -> Value {
        assert_problem_response(
            &self.what,
            self.status,
            self.header("content-type"),
            &self.text(),
            status,
            kind,
        )
    }

    /// The problem's `detail`, asserting the problem.
    fn detail(&self, status: u16, kind: &str) -> String {
        self.problem(status, kind)["detail"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }
}

impl Api {
    /// A default daemon.
    fn new() -> Api {
        Api::with(options(), false)
    }

    /// A daemon with `options`, allowing loader variables in sessions' `env` or not.
    fn with(options: HttpOptions, allow_loader_env: bool) -> Api {
        let agent_state = TempDir::new("router-state");
        let launcher = Launcher::new(None, AdapterSource::from_env(agent_state.path()))
            .with_mock_program(PathBuf::from(env!("CARGO_BIN_EXE_codebuffd")));
        let ctx = SessionContext::from_env(
            Arc::new(MemoryStore::new()),
            Arc::new(launcher),
            Limits::default(),
            agent_state.path().to_path_buf(),
            "test-instance".into(),
            allow_loader_env,
        );
        let manager = Arc::new(SessionManager::new(ctx));
        Api {
            app: router(manager.clone(), &options),
            manager,
            work: TempDir::new("router-work"),
            _agent_state: agent_state,
        }
    }

    /// A request from a local client (`Host: 127.0.0.1:2468`).
    fn request(&self, method: Method, path: &str) -> axum::http::request::Builder {
        Request::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, HOST)
    }

    async fn send(&self, req: Request<Body>) -> Reply {
        let what = format!("{} {}", req.method(), req.uri());
        let resp = self
            .app
            .clone()
            .oneshot(req)
            .await
            .unwrap_or_else(|e| match e {});
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .expect("the body");
        Reply {
            what,
            status,
            headers,
            body,
        }
    }

    async fn get(&self, path: &str) -> Reply {
        self.send(self.request(Method::GET, path).body(Body::empty()).unwrap())
            .await
    }

    async fn post(&self, path: &str, body: Value) -> Reply {
        self.post_raw(path, Some("application/json"), body.to_string())
            .await
    }

    async fn post_empty(&self, path: &str) -> Reply {
        self.send(
            self.request(Method::POST, path)
                .body(Body::empty())
                .unwrap(),
        )
        .await
    }

    async fn post_raw(&self, path: &str, ct: Option<&str>, body: impl Into<Body>) -> Reply {
        let mut req = self.request(Method::POST, path);
        if let Some(ct) = ct {
            req = req.header(header::CONTENT_TYPE, ct);
        }
        self.send(req.body(body.into()).unwrap()).await
    }

    /// A POST with extra `headers` (which may name another `Host`) and a JSON body or none: what
    /// a browser sends says where it comes from.
    async fn post_with(&self, path: &str, headers: &[(&str, &str)], body: Option<Value>) -> Reply {
        let mut req = Request::builder().method(Method::POST).uri(path);
        if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
            req = req.header(header::HOST, HOST);
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let body = match body {
            Some(b) => {
                req = req.header(header::CONTENT_TYPE, "application/json");
                Body::from(b.to_string())
            }
            None => Body::empty(),
        };
        self.send(req.body(body).unwrap()).await
    }

    /// Creates a mock session working in [`Api::work`]; asserts 200.
    async fn create(&self, id: &str) {
        let body = json!({"agent": "mock", "directory": self.work.path()});
        let reply = self.post(&format!("/v1/sessions/{id}"), body).await;
        assert_eq!(reply.json(200), json!({"healthy": true}));
    }

    /// Sends a message; asserts 204.
    async fn message(&self, id: &str, text: &str) {
        let reply = self
            .post(
                &format!("/v1/sessions/{id}/messages"),
                json!({ "message": text }),
            )
            .await;
        assert_eq!(reply.status, 204, "message to {id}: {}", reply.text());
    }

    async fn info(&self, id: &str) -> Value {
        self.get(&format!("/v1/sessions/{id}")).await.json(200)
    }

    async fn events(&self, id: &str) -> Vec<Value> {
        let page = self
            .get(&format!("/v1/sessions/{id}/events?limit=100000"))
            .await
            .json(200);
        page["events"].as_array().cloned().unwrap_or_default()
    }

    /// Polls until the log satisfies `done`; returns it.
    async fn wait_for(&self, id: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let deadline = Instant::now() + WAIT;
        loop {
            let events = self.events(id).await;
            if done(&events) {
                return events;
            }
            assert!(
                Instant::now() < deadline,
                "timed out on {id}: {:?}",
                support::events::types(&events)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn wait_turns_ended(&self, id: &str, n: usize) -> Vec<Value> {
        self.wait_for(id, |ev| count(ev, "turn.ended") >= n).await
    }

    /// Asserts that session `id` does not exist.
    async fn assert_no_session(&self, id: &str) {
        self.get(&format!("/v1/sessions/{id}"))
            .await
            .problem(404, "session_not_found");
    }

    /// Creates session `id` with `body`, asserting that it is refused with a problem of `kind`
    /// and `status` and that no session is left behind; returns the problem.
    async fn refuse_create(&self, id: &str, body: Value, status: u16, kind: &str) -> Value {
        let problem = self
            .post(&format!("/v1/sessions/{id}"), body)
            .await
            .problem(status, kind);
        self.assert_no_session(id).await;
        problem
    }

    /// Ends every session's turn and checks that no agent is left in [`Api::work`].
    async fn close(self) {
        self.manager.shutdown(Duration::from_secs(10)).await;
        let left = processes_in(self.work.path());
        assert!(left.is_empty(), "agents outlived the engine: {left:?}");
    }
}

/// Live processes whose working directory is `dir`.
fn processes_in(dir: &Path) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| s.rfind(')').map(|i| s[i + 2..].starts_with('Z')))
                .unwrap_or(true);
            !zombie && std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|c| c == dir)
        })
        .collect()
}
