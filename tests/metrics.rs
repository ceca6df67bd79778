//! `GET /metrics` through the real binary (`docs/metrics.md`): behind the token unless
//! `--metrics-no-auth`, values checked after known turns, no session id in any label, and
//! `promtool check metrics` (Debian's `prometheus` package; CI installs it) finds no problem.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;
use support::daemon::{waiting_agent, Daemon, DaemonOptions, TempDir};

const WAIT: Duration = Duration::from_secs(30);

/// The samples of an exposition: `name{labels}` → value.
fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let (key, value) = l.rsplit_once(' ').expect("a sample line");
            (key.to_owned(), value.parse().expect("a number"))
        })
        .collect()
}

async fn scrape(d: &Daemon) -> (String, BTreeMap<String, f64>) {
    let resp = d.get("/metrics").await;
    assert_eq!(resp.status(), 200);
    let kind = resp.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(kind.starts_with("text/plain; version=0.0.4"), "{kind}");
    let text = resp.text().await.unwrap();
    let s = samples(&text);
    (text, s)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_known_turns_without_session_ids() {
    let d = Daemon::start_with(DaemonOptions {
        token: Some("sekret".into()),
        ..Default::default()
    });
    // Same auth as /v1.
    let anonymous = reqwest::get(format!("{}/metrics", d.base)).await.unwrap();
    assert_eq!(anonymous.status(), 401);

    let id = "metrics-session-7f3a";
    d.create(id, json!({"agent": "mock", "permissionMode": "bypass"}))
        .await;
    d.message(id, "echo one").await;
    d.wait_status(id, "idle", WAIT).await;
    d.message(id, "stream a b c").await;
    d.wait_status(id, "idle", WAIT).await;
    d.message(id, "ask").await;
    d.wait_status(id, "awaiting_input", WAIT).await;
    let events = d.events(id).await;

    let (text, s) = scrape(&d).await;
    assert!(!text.contains(id), "a label holds the session id:\n{text}");
    assert_eq!(
        s["codebuffd_turns_total{agent=\"mock\",status=\"completed\"}"],
        2.0
    );
    // echo 1.25 + stream 2.5 credits.
    assert_eq!(s["codebuffd_cost_credits_total{agent=\"mock\"}"], 3.75);
    assert_eq!(
        s["codebuffd_events_appended_total"],
        events.len() as f64,
        "every event the session's log holds"
    );
    assert_eq!(s["codebuffd_sessions{status=\"awaiting_input\"}"], 1.0);
    assert_eq!(s["codebuffd_sessions{status=\"idle\"}"], 0.0);
    assert_eq!(s["codebuffd_questions_pending"], 1.0);
    assert_eq!(s["codebuffd_permissions_pending"], 0.0);
    assert_eq!(s["codebuffd_store_degraded"], 0.0);
    // The asking turn's agent runs; the mock keeps no warm spare (it starts in ~2 ms).
    assert_eq!(s["codebuffd_agent_processes"], 1.0, "{text}");
    assert_eq!(s["codebuffd_warm_spares"], 0.0);
    assert!(s["codebuffd_store_commit_seconds_count"] >= 1.0);
    assert!(s["codebuffd_store_commit_seconds_sum"] > 0.0);
    // Route templates, not paths.
    assert!(
        s["codebuffd_http_requests_total{route=\"/v1/sessions/{id}/messages\",status=\"204\"}"]
            >= 3.0
    );
    assert!(s["codebuffd_http_requests_total{route=\"/v1/sessions/{id}\",status=\"200\"}"] >= 1.0);
    assert_eq!(
        s["codebuffd_http_requests_total{route=\"/metrics\",status=\"401\"}"],
        1.0
    );
    assert_eq!(s["codebuffd_webhook_outbox_pending"], 0.0);

    // The question answered: the turn completes, nothing is pending any more.
    let qid = events
        .iter()
        .find(|e| e["type"] == "question.requested")
        .and_then(|e| e["data"]["question_id"].as_str())
        .unwrap()
        .to_owned();
    let resp = d
        .post(
            &format!("/v1/sessions/{id}/questions/{qid}/reply"),
            json!({"answers": [["jest"], ["e2e"]]}),
        )
        .await;
    assert_eq!(resp.status(), 204);
    d.wait_status(id, "idle", WAIT).await;
    let (text, s) = scrape(&d).await;
    assert_eq!(
        s["codebuffd_turns_total{agent=\"mock\",status=\"completed\"}"],
        3.0
    );
    assert_eq!(s["codebuffd_cost_credits_total{agent=\"mock\"}"], 6.75);
    assert_eq!(s["codebuffd_questions_pending"], 0.0);
    assert_eq!(s["codebuffd_sessions{status=\"idle\"}"], 1.0);
    promtool_check(&text);
    d.stop();
}

/// A `codebuff` session keeps a warm spare (here of an `--agent-command` that only waits for
/// its turn line): both gauges count it, and it is gone once the session is deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_warm_spare_of_a_codebuff_session_is_counted() {
    let bin = TempDir::new("metrics-agent");
    let agent = waiting_agent(&bin);
    let d = Daemon::start_with(DaemonOptions {
        args: vec!["--agent-command".into(), agent.display().to_string()],
        env: vec![("CODEBUFF_API_KEY".into(), "cb-metrics-key".into())],
        ..Default::default()
    });
    let (_, s) = scrape(&d).await;
    assert_eq!(s["codebuffd_warm_spares"], 0.0);
    d.create("metrics-codebuff", json!({"agent": "codebuff"}))
        .await;
    let spares = d.spares().await;
    assert_eq!(spares.len(), 1, "a spare waits for the first turn");
    let (text, s) = scrape(&d).await;
    assert_eq!(s["codebuffd_warm_spares"], 1.0, "{text}");
    assert_eq!(s["codebuffd_agent_processes"], 1.0, "{text}");
    assert!(!text.contains("cb-metrics-key"));
    let resp = d.delete("/v1/sessions/metrics-codebuff").await;
    assert!(resp.status().is_success(), "{}", resp.status());
    // Released before the DELETE is answered (the last session of its kind ended).
    assert_eq!(d.spares().await, Vec::<i32>::new(), "the spare stays");
    let (_, s) = scrape(&d).await;
    assert_eq!(s["codebuffd_warm_spares"], 0.0);
    d.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_no_auth_serves_metrics_without_the_token_and_nothing_else() {
    let d = Daemon::start_with(DaemonOptions {
        token: Some("sekret".into()),
        args: vec!["--metrics-no-auth".into()],
        ..Default::default()
    });
    let open = reqwest::get(format!("{}/metrics", d.base)).await.unwrap();
    assert_eq!(open.status(), 200);
    let text = open.text().await.unwrap();
    assert!(
        text.contains("# TYPE codebuffd_events_appended_total counter"),
        "{text}"
    );
    let closed = reqwest::get(format!("{}/v1/sessions", d.base))
        .await
        .unwrap();
    assert_eq!(closed.status(), 401);
    d.stop();
}

/// `promtool check metrics` (when installed: CI installs Debian's `prometheus`; elsewhere the
/// check is skipped, said on stderr).
fn promtool_check(text: &str) {
    use std::io::Write;
    let child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(_) if std::env::var("CI").as_deref() != Ok("true") => {
            eprintln!("promtool is not installed: `promtool check metrics` skipped");
            return;
        }
        Err(e) => panic!("CI needs promtool: {e}"),
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "promtool check metrics: {}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
