//! The daemon with the `mock` agent, as the mock suites drive it (`mock_sessions.rs`,
//! `mock_questions.rs`): sessions created with extra fields, a session's log read incrementally
//! until it satisfies a condition, POSTs with their problem documents, costs, and the check that
//! no agent process is left.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::api::assert_problem_body;
use super::daemon::{cmdline, Daemon};
use super::events::{completed_items, count, part, types};

/// Generous limit for anything that waits on the daemon (the machine is shared and loaded).
pub const WAIT: Duration = Duration::from_secs(60);

/// Creates a `mock` session with `extra` fields merged into the body.
pub async fn mock_session(d: &Daemon, id: &str, extra: Value) {
    let mut body = json!({"agent": "mock"});
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    d.create(id, body).await;
}

/// Creates the mock session `s`, sends `prompt` and waits for the turn to end; returns the
/// session's events.
pub async fn one_turn(d: &Daemon, prompt: &str) -> Vec<Value> {
    mock_session(d, "s", json!({})).await;
    d.message("s", prompt).await;
    Tail::new(d, "s").turns_ended(1).await
}

/// Reads a session's log incrementally (by offset), so waiting on long logs stays cheap.
pub struct Tail<'a> {
    d: &'a Daemon,
    /// The session whose log it reads.
    pub id: String,
    /// The events read so far.
    pub events: Vec<Value>,
}

impl<'a> Tail<'a> {
    pub fn new(d: &'a Daemon, id: &str) -> Self {
        Tail {
            d,
            id: id.to_owned(),
            events: Vec::new(),
        }
    }

    /// Fetches whatever was recorded since the last read.
    pub async fn refresh(&mut self) {
        loop {
            let after = self.events.len();
            let resp = self
                .d
                .get(&format!(
                    "/v1/sessions/{}/events?offset={after}&limit=10000",
                    self.id
                ))
                .await;
            assert_eq!(resp.status(), 200, "events of {}", self.id);
            let v: Value = resp.json().await.expect("events JSON");
            let page = v["events"].as_array().cloned().unwrap_or_default();
            self.events.extend(page);
            if v["hasMore"] != true {
                return;
            }
        }
    }

    /// Waits until the whole log satisfies `done`; returns it.
    pub async fn until(&mut self, what: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let deadline = Instant::now() + WAIT;
        loop {
            self.refresh().await;
            if done(&self.events) {
                return self.events.clone();
            }
            if Instant::now() > deadline {
                panic!(
                    "timed out waiting for {what} on {}; events: {:?}",
                    self.id,
                    types(&self.events)
                );
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Waits for `n` `turn.ended` events.
    pub async fn turns_ended(&mut self, n: usize) -> Vec<Value> {
        self.until(&format!("{n} turn(s) to end"), |ev| {
            count(ev, "turn.ended") >= n
        })
        .await
    }

    /// Waits for an event of type `ty`.
    pub async fn event(&mut self, ty: &str) -> Vec<Value> {
        self.until(ty, |ev| ev.iter().any(|e| e["type"] == ty))
            .await
    }
}

/// Every event of a session (whole log, fresh).
pub async fn all_events(d: &Daemon, id: &str) -> Vec<Value> {
    let mut t = Tail::new(d, id);
    t.refresh().await;
    t.events
}

pub fn position(events: &[Value], pred: impl Fn(&Value) -> bool) -> usize {
    events.iter().position(pred).expect("the event is there")
}

/// Completed items of one kind.
pub fn completed_kind<'e>(events: &'e [Value], kind: &str) -> Vec<&'e Value> {
    completed_items(events)
        .into_iter()
        .filter(|i| i["kind"] == kind)
        .collect()
}

pub fn credits(cost: &Value) -> f64 {
    cost["credits"].as_f64().expect("cost.credits")
}

pub fn assert_cost(cost: &Value, want_credits: f64) {
    let got = credits(cost);
    assert!(
        (got - want_credits).abs() < 1e-9,
        "credits {got} != {want_credits}"
    );
    let usd = cost["usd"].as_f64().expect("cost.usd");
    assert!(
        (usd - want_credits / 100.0).abs() < 1e-9,
        "usd {usd} for {want_credits} credits"
    );
}

/// Asserts that, with the daemon still running, its process session holds only the daemon
/// (called once the turns have ended).
pub async fn assert_no_agent_left(d: &Daemon) {
    let left = d.wait_no_agents(Duration::from_secs(10)).await;
    let described: Vec<String> = left
        .iter()
        .map(|p| format!("{p}: {}", cmdline(*p)))
        .collect();
    assert!(
        left.is_empty(),
        "processes other than the daemon ({}) are alive: {described:?}",
        d.pid()
    );
}

/// POSTs `body` and returns the status and the parsed body (null when empty).
pub async fn post(d: &Daemon, path: &str, body: Option<Value>) -> (u16, Value) {
    let resp = match body {
        Some(b) => d.post(path, b).await,
        None => d.post_empty(path).await,
    };
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap_or_default();
    let v = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    };
    (status, v)
}

/// Asserts a problem document of `kind` with `status` whose detail contains `detail`.
pub fn assert_problem(got: &(u16, Value), status: u16, kind: &str, detail: &str) {
    let (code, body) = got;
    assert_eq!(*code, status, "{body}");
    assert_problem_body(kind, body, status, kind);
    let d = body["detail"].as_str().unwrap_or("");
    assert!(d.contains(detail), "detail {d:?} should contain {detail:?}");
}

/// Waits until the agent of the running turn has started (its `start` status item is recorded).
pub async fn wait_agent_started(t: &mut Tail<'_>, turn: usize) -> Vec<Value> {
    t.until("the agent's start", |ev| {
        completed_items(ev)
            .iter()
            .filter(|i| part(i, "status").is_some_and(|p| p["label"] == "codebuff.start"))
            .count()
            >= turn
    })
    .await
}

pub fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}
