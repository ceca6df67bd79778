//! Permission gates that really block, and credit budgets that really stop, through the mock
//! agent over real HTTP: the `gated` scenario writes `gated.txt` and runs
//! `echo gated-ok > gated-cmd.txt`, each only once allowed; `spend N` reports its cost as it
//! grows.

mod support;

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};
use support::daemon::{Daemon, DaemonOptions, TempDir};
use support::events::{assistant_texts, of_type, turn_ends};
use support::invariants::assert_well_formed;
use support::permissions::{reply, requested};
use support::sse::SseReader;

const WAIT: Duration = Duration::from_secs(20);

async fn gated_session(d: &Daemon, id: &str, dir: &Path, mode: &str) {
    d.create(
        id,
        json!({"agent": "mock", "permissionMode": mode, "directory": dir.display().to_string()}),
    )
    .await;
}

fn resolved<'e>(events: &'e [Value], permission: &str) -> &'e Value {
    of_type(events, "permission.resolved")
        .into_iter()
        .find(|e| e["data"]["permission_id"] == permission)
        .unwrap_or_else(|| panic!("{permission} was never resolved"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_default_mode_nothing_is_written_or_run_before_the_answer() {
    let d = Daemon::start();
    let dir = TempDir::new("gated");
    gated_session(&d, "g", dir.path(), "default").await;
    // The turn stream stops at the request, like at a question.
    let resp = d
        .post(
            "/v1/sessions/g/messages/stream",
            json!({"message": "gated"}),
        )
        .await;
    let mut sse = SseReader::new(resp);
    let streamed = sse
        .until(WAIT, |e| e["type"] == "permission.requested")
        .await;
    assert!(
        sse.closes_within(Duration::from_secs(5)).await,
        "the turn stream closes"
    );
    let asked = streamed.last().unwrap();
    let data = &asked["data"];
    assert_eq!(data["action"], "write_file");
    assert_eq!(data["status"], "requested");
    assert_eq!(data["metadata"]["kind"], "edit");
    assert_eq!(data["metadata"]["paths"], json!(["gated.txt"]));
    assert_eq!(
        data["metadata"]["options"],
        json!(["once", "always", "reject"])
    );
    assert!(data["metadata"]["toolCallId"].is_string());
    // The request blocks: nothing is written, the session waits for input.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!dir.path().join("gated.txt").exists());
    assert_eq!(d.info("g").await["status"], "awaiting_input");

    let write = data["permission_id"].as_str().unwrap().to_owned();
    assert_eq!(reply(&d, "g", &write, "once").await, 204);
    let run = requested(&d, "g", 2).await;
    assert_eq!(
        run["data"]["metadata"]["command"],
        "echo gated-ok > gated-cmd.txt"
    );
    assert_eq!(run["data"]["metadata"]["kind"], "execute");
    assert!(
        dir.path().join("gated.txt").exists(),
        "written once allowed"
    );
    let run_id = run["data"]["permission_id"].as_str().unwrap().to_owned();
    assert_eq!(reply(&d, "g", &run_id, "reject").await, 204);
    let events = d.wait_turns_ended("g", 1).await;
    assert!(
        !dir.path().join("gated-cmd.txt").exists(),
        "a rejected command never runs"
    );
    assert_eq!(
        assistant_texts(&events).last().unwrap(),
        "Wrote gated.txt: yes; ran the command: no."
    );
    let write_resolved = resolved(&events, &write);
    assert_eq!(write_resolved["data"]["status"], "accept");
    assert_eq!(write_resolved["data"]["metadata"]["reply"], "once");
    assert_eq!(write_resolved["data"]["metadata"]["decidedBy"], "user");
    assert_eq!(resolved(&events, &run_id)["data"]["status"], "reject");
    // The model was told: the command's result is the denial.
    let denial = events.iter().any(|e| {
        e["type"] == "item.completed"
            && e["data"]["item"]["kind"] == "tool_result"
            && e["data"]["item"]["content"][0]["output"]
                .as_str()
                .is_some_and(|o| o.contains("The user rejected this tool call"))
    });
    assert!(denial);
    // An answer to a resolved request is refused.
    assert_eq!(reply(&d, "g", &write, "once").await, 400);
    assert_eq!(reply(&d, "g", "nope", "once").await, 400);
    d.stop();
    assert_well_formed(&events);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn always_is_remembered_and_once_is_not() {
    let d = Daemon::start();
    let dir = TempDir::new("gated");
    gated_session(&d, "a", dir.path(), "default").await;
    d.message("a", "gated").await;
    let write = requested(&d, "a", 1).await["data"]["permission_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(reply(&d, "a", &write, "always").await, 204);
    let run = requested(&d, "a", 2).await["data"]["permission_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(reply(&d, "a", &run, "once").await, 204);
    d.wait_turns_ended("a", 1).await;
    // The next turn: the write is allowed by the policy, the command (once) asks again.
    d.message("a", "gated").await;
    let again = requested(&d, "a", 3).await;
    assert_eq!(again["data"]["action"], "run_terminal_command");
    let events = d.events("a").await;
    let by_policy: Vec<&Value> = of_type(&events, "permission.resolved")
        .into_iter()
        .filter(|e| e["data"]["metadata"]["decidedBy"] == "policy")
        .collect();
    assert_eq!(by_policy.len(), 1, "{by_policy:?}");
    assert_eq!(by_policy[0]["data"]["action"], "write_file");
    assert_eq!(by_policy[0]["data"]["status"], "accept");
    let id = again["data"]["permission_id"].as_str().unwrap().to_owned();
    assert_eq!(reply(&d, "a", &id, "once").await, 204);
    let events = d.wait_turns_ended("a", 2).await;
    assert!(dir.path().join("gated-cmd.txt").exists());
    d.stop();
    assert_well_formed(&events);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accept_edits_runs_edits_and_asks_for_commands() {
    let d = Daemon::start();
    let dir = TempDir::new("gated");
    gated_session(&d, "e", dir.path(), "acceptEdits").await;
    d.message("e", "gated").await;
    let asked = requested(&d, "e", 1).await;
    assert_eq!(asked["data"]["action"], "run_terminal_command");
    assert!(
        dir.path().join("gated.txt").exists(),
        "the edit ran without asking"
    );
    let id = asked["data"]["permission_id"].as_str().unwrap().to_owned();
    assert_eq!(reply(&d, "e", &id, "once").await, 204);
    let events = d.wait_turns_ended("e", 1).await;
    assert_eq!(of_type(&events, "permission.requested").len(), 1);
    assert_eq!(
        assistant_texts(&events).last().unwrap(),
        "Wrote gated.txt: yes; ran the command: yes."
    );
    d.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_mode_rejects_every_change_without_asking_and_plans() {
    let d = Daemon::start();
    let dir = TempDir::new("gated");
    gated_session(&d, "p", dir.path(), "plan").await;
    d.message("p", "gated").await;
    let events = d.wait_turns_ended("p", 1).await;
    assert!(of_type(&events, "permission.requested").is_empty());
    let resolved = of_type(&events, "permission.resolved");
    assert_eq!(resolved.len(), 2);
    for r in resolved {
        assert_eq!(r["data"]["status"], "reject");
        assert_eq!(r["data"]["metadata"]["decidedBy"], "policy");
        assert!(r["data"]["metadata"]["reason"]
            .as_str()
            .unwrap()
            .contains("plan mode"));
    }
    assert!(!dir.path().join("gated.txt").exists());
    assert!(!dir.path().join("gated-cmd.txt").exists());
    // The agent itself ran in plan mode.
    assert_eq!(turn_ends(&events)[0]["agent_id"], "base2-plan");
    let info = d.info("p").await;
    assert_eq!(info["permissionMode"], "plan");
    d.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_request_times_out_as_rejected() {
    let d = Daemon::start_with(DaemonOptions {
        args: vec!["--permission-timeout".into(), "1".into()],
        ..Default::default()
    });
    let dir = TempDir::new("gated");
    gated_session(&d, "t", dir.path(), "default").await;
    d.message("t", "gated").await;
    let events = d.wait_turns_ended("t", 1).await;
    let resolved = of_type(&events, "permission.resolved");
    assert_eq!(resolved.len(), 2);
    for r in &resolved {
        assert_eq!(r["data"]["status"], "reject");
        assert_eq!(r["data"]["metadata"]["decidedBy"], "timeout");
    }
    assert!(!dir.path().join("gated.txt").exists());
    d.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminate_while_a_request_waits_rejects_it_and_leaves_no_process() {
    let d = Daemon::start();
    let dir = TempDir::new("gated");
    gated_session(&d, "x", dir.path(), "default").await;
    d.message("x", "gated").await;
    let asked = requested(&d, "x", 1).await;
    let id = asked["data"]["permission_id"].as_str().unwrap().to_owned();
    assert_eq!(d.post_empty("/v1/sessions/x/terminate").await.status(), 204);
    let events = d.events("x").await;
    let r = resolved(&events, &id);
    assert_eq!(r["data"]["status"], "reject");
    assert_eq!(r["data"]["metadata"]["decidedBy"], "daemon");
    assert_eq!(events.last().unwrap()["type"], "session.ended");
    let left = d.wait_no_agents(Duration::from_secs(10)).await;
    assert!(left.is_empty(), "{left:?}");
    assert!(!dir.path().join("gated.txt").exists());
    d.stop();
    assert_well_formed(&events);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_request_is_replayed_to_a_reconnecting_client() {
    let d = Daemon::start();
    let dir = TempDir::new("gated");
    gated_session(&d, "r", dir.path(), "default").await;
    d.message("r", "gated").await;
    let asked = requested(&d, "r", 1).await;
    let seq = asked["sequence"].as_u64().unwrap();
    // A client that saw everything before the request reconnects with Last-Event-ID.
    let resp = d
        .http
        .get(d.url("/v1/sessions/r/events/sse"))
        .header("last-event-id", (seq - 1).to_string())
        .send()
        .await
        .unwrap();
    let mut sse = SseReader::new(resp);
    let replayed = sse
        .until(WAIT, |e| e["type"] == "permission.requested")
        .await;
    assert_eq!(replayed[0]["sequence"].as_u64(), Some(seq));
    let id = asked["data"]["permission_id"].as_str().unwrap().to_owned();
    assert_eq!(reply(&d, "r", &id, "reject").await, 204);
    let after = sse
        .until(WAIT, |e| e["type"] == "permission.resolved")
        .await;
    assert_eq!(after.last().unwrap()["data"]["permission_id"], id.as_str());
    let run = requested(&d, "r", 2).await["data"]["permission_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(reply(&d, "r", &run, "reject").await, 204);
    d.wait_turns_ended("r", 1).await;
    d.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_interrupts_the_turn_and_rejects_its_pending_request() {
    let data = TempDir::new("gated-data");
    let dir = TempDir::new("gated");
    let d = Daemon::start_in(data.path(), &[]);
    gated_session(&d, "s", dir.path(), "default").await;
    d.message("s", "gated").await;
    let id = requested(&d, "s", 1).await["data"]["permission_id"]
        .as_str()
        .unwrap()
        .to_owned();
    d.stop();
    let d = Daemon::start_in(data.path(), &[]);
    let events = d.wait_turns_ended("s", 1).await;
    let r = resolved(&events, &id);
    assert_eq!(r["data"]["status"], "reject");
    assert_eq!(r["data"]["metadata"]["decidedBy"], "daemon");
    assert_eq!(turn_ends(&events)[0]["status"], "interrupted");
    assert!(!dir.path().join("gated.txt").exists());
    d.stop();
    assert_well_formed(&events);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spent_budget_refuses_the_next_message_with_402() {
    let d = Daemon::start();
    d.create("b", json!({"agent": "mock", "maxCredits": 1.0}))
        .await;
    let info = d.info("b").await;
    assert_eq!(info["budget"], 1.0);
    assert_eq!(info["remaining"], 1.0);
    d.message("b", "echo one").await; // costs 1.25 credits
    let events = d.wait_turns_ended("b", 1).await;
    let reached = of_type(&events, "error")
        .into_iter()
        .find(|e| e["data"]["code"] == "budget_exhausted")
        .expect("the log says why the session takes no more messages");
    assert!(reached["data"]["message"]
        .as_str()
        .unwrap()
        .contains("budget"));
    d.wait_status("b", "idle", WAIT).await;
    let resp = d
        .post("/v1/sessions/b/messages", json!({"message": "echo two"}))
        .await;
    assert_eq!(resp.status(), 402);
    let problem: Value = resp.json().await.unwrap();
    assert_eq!(problem["type"], "urn:sandbox-agent:error:budget_exhausted");
    let info = d.info("b").await;
    assert_eq!(info["remaining"], 0.0);
    assert_eq!(info["turns"], 1);
    d.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_that_reaches_the_budget_is_stopped_there() {
    let d = Daemon::start();
    d.create("m", json!({"agent": "mock", "maxCredits": 3.5}))
        .await;
    d.message("m", "spend 40").await;
    let events = d.wait_turns_ended("m", 1).await;
    let end = turn_ends(&events)[0];
    assert_eq!(end["status"], "budget_exhausted", "{end}");
    // Stopped after the step that crossed 3.5 credits, long before the 40th.
    let steps = of_type(&events, "item.delta").len();
    assert!(steps < 10, "{steps} steps ran");
    assert_eq!(
        d.post("/v1/sessions/m/messages", json!({"message": "echo"}))
            .await
            .status(),
        402
    );
    d.stop();
    assert_well_formed(&events);
}

/// Sends `run <command>` and returns how the command's permission was resolved: `(decided by,
/// status)`, after answering `reject` when it was asked.
async fn run_and_reject_if_asked(d: &Daemon, id: &str, command: &str, turn: usize) -> String {
    d.message(id, &format!("run {command}")).await;
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let events = d.events(id).await;
        let ended = of_type(&events, "turn.ended").len();
        if ended >= turn {
            let resolved = of_type(&events, "permission.resolved");
            let last = resolved.last().expect("the command was resolved");
            assert_eq!(last["data"]["metadata"]["command"], command);
            return last["data"]["metadata"]["decidedBy"]
                .as_str()
                .unwrap()
                .to_owned();
        }
        let open: Vec<String> = of_type(&events, "permission.requested")
            .into_iter()
            .filter(|r| {
                !of_type(&events, "permission.resolved")
                    .iter()
                    .any(|x| x["data"]["permission_id"] == r["data"]["permission_id"])
            })
            .map(|r| r["data"]["permission_id"].as_str().unwrap().to_owned())
            .collect();
        for p in open {
            assert_eq!(reply(d, id, &p, "reject").await, 204);
        }
        assert!(std::time::Instant::now() < deadline, "{events:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn always_allows_only_the_simple_command_the_user_saw() {
    let d = Daemon::start();
    let dir = TempDir::new("always");
    gated_session(&d, "s", dir.path(), "default").await;
    // `always` for `ls -la` and `git status`.
    let mut turn = 0;
    let mut prefixes = Vec::new();
    for first in ["ls -la", "git status"] {
        turn += 1;
        d.message("s", &format!("run {first}")).await;
        let asked = requested(&d, "s", turn).await;
        assert_eq!(asked["data"]["metadata"]["command"], first);
        prefixes.push(asked["data"]["metadata"]["alwaysPrefix"].clone());
        let id = asked["data"]["permission_id"].as_str().unwrap().to_owned();
        assert_eq!(reply(&d, "s", &id, "always").await, 204);
        d.wait_turns_ended("s", turn).await;
    }
    // The same simple commands with other options run without asking.
    for same in ["ls -l", "git status --short"] {
        turn += 1;
        assert_eq!(run_and_reject_if_asked(&d, "s", same, turn).await, "policy");
    }
    // Lines that only start the same way ask again (and, rejected, never run).
    let attacks = [
        "git status --short || touch x1",
        "ls -la; touch x2",
        "ls $(touch x3)",
        "ls `touch x4`",
        "ls | sh -c 'touch x5'",
        "ls > /dev/null; touch x6",
        "ls -la && touch x7",
        "ls\ntouch x8",
    ];
    for (i, attack) in attacks.iter().enumerate() {
        turn += 1;
        assert_eq!(
            run_and_reject_if_asked(&d, "s", attack, turn).await,
            "user",
            "{attack:?} was asked"
        );
        let touched = dir.path().join(format!("x{}", i + 1));
        assert!(!touched.exists(), "{attack:?} ran");
    }
    // The request said what `always` would allow.
    assert_eq!(prefixes, vec![json!("ls"), json!("git status")]);
    let events = d.events("s").await;
    d.stop();
    assert_well_formed(&events);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_negative_cost_never_refills_the_budget() {
    let d = Daemon::start();
    d.create("n", json!({"agent": "mock", "maxCredits": 5}))
        .await;
    d.message("n", "spend 2").await;
    d.wait_turns_ended("n", 1).await;
    assert_eq!(d.info("n").await["remaining"], 3.0);
    d.message("n", "spend -1000").await;
    let events = d.wait_turns_ended("n", 2).await;
    let info = d.info("n").await;
    assert_eq!(info["remaining"], 3.0, "{info}");
    assert_eq!(info["cost"]["credits"], 2.0, "{info}");
    // The log says the agent's costs were ignored (its `cost` and its `finish`).
    let ignored: Vec<&Value> = of_type(&events, "error")
        .into_iter()
        .filter(|e| e["data"]["code"] == "invalid_cost")
        .collect();
    assert_eq!(ignored.len(), 2, "{events:?}");
    assert!(ignored[1]["data"]["message"]
        .as_str()
        .unwrap()
        .contains("-1000"));
    assert_eq!(turn_ends(&events)[1]["status"], "completed");
    d.stop();
    assert_well_formed(&events);
}
