//! Permission gates and credit budgets with the real Codebuff adapter and SDK against the fake
//! backend — the same rules `tests/permissions.rs` checks with the mock, here on the files a
//! real Codebuff run writes and the commands it runs:
//!
//! * `permissions`: one reply with `write_file notes/todo.md` and `run_terminal_command
//!   echo ran > ran.txt`, then "Finished.";
//! * `permissions_repeat`: two steps, each `write_file` (first.txt, second.txt) and the same
//!   command `echo one >> log.txt`, then "Done.";
//! * `budget_steps`: five steps of 2 credits, each running `echo step N`, then a 1-credit text.

mod support;

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};
use support::codebuff::{start_daemon, start_daemon_with, LIMIT};
use support::daemon::{Daemon, TempDir};
use support::events::{assistant_texts, of_type, turn_ends};
use support::fake_backend::FakeBackend;
use support::invariants::assert_well_formed;
use support::permissions::{permission_id, reply_ok, requested};

async fn session(d: &Daemon, id: &str, dir: &Path, extra: Value) {
    let mut body = json!({"agent": "codebuff", "directory": dir.display().to_string()});
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    d.create(id, body).await;
}

fn resolutions(events: &[Value]) -> Vec<(String, String, String)> {
    of_type(events, "permission.resolved")
        .into_iter()
        .map(|e| {
            let m = &e["data"]["metadata"];
            (
                m["toolName"].as_str().unwrap_or_default().to_owned(),
                e["data"]["status"].as_str().unwrap_or_default().to_owned(),
                m["decidedBy"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn read(dir: &Path, file: &str) -> Option<String> {
    std::fs::read_to_string(dir.join(file)).ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_mode_blocks_each_tool_until_answered_and_always_covers_the_same_command() {
    let backend = FakeBackend::start("permissions_repeat");
    let home = TempDir::new("cb-perm-home");
    let work = TempDir::new("cb-perm-work");
    let d = start_daemon(&backend, &home, &[]);
    session(&d, "p", work.path(), json!({"permissionMode": "default"})).await;
    d.message("p", "Write two files and log twice.").await;

    // 1: the first write waits; nothing is on disk until it is allowed.
    let first = requested(&d, "p", 1).await;
    assert_eq!(first["data"]["metadata"]["toolName"], "write_file");
    assert_eq!(first["data"]["metadata"]["paths"], json!(["first.txt"]));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        read(work.path(), "first.txt"),
        None,
        "written before the answer"
    );
    assert_eq!(d.info("p").await["status"], "awaiting_input");
    reply_ok(&d, "p", &permission_id(&first), "once").await;

    // 2: the command waits; "always" allows this command for the rest of the session.
    let cmd = requested(&d, "p", 2).await;
    assert_eq!(cmd["data"]["metadata"]["toolName"], "run_terminal_command");
    assert_eq!(cmd["data"]["metadata"]["command"], "echo one >> log.txt");
    assert_eq!(read(work.path(), "first.txt").as_deref(), Some("first\n"));
    assert_eq!(read(work.path(), "log.txt"), None, "ran before the answer");
    reply_ok(&d, "p", &permission_id(&cmd), "always").await;

    // 3: the second write asks again ("once" covered one call); rejected, it never happens.
    let second = requested(&d, "p", 3).await;
    assert_eq!(second["data"]["metadata"]["paths"], json!(["second.txt"]));
    reply_ok(&d, "p", &permission_id(&second), "reject").await;

    let events = d.wait_turns_ended("p", 1).await;
    assert_eq!(turn_ends(&events)[0]["status"], "completed");
    assert_eq!(
        assistant_texts(&events).last().map(String::as_str),
        Some("Done.")
    );
    // The repeated command ran without a fourth request, by the session's rule.
    assert_eq!(of_type(&events, "permission.requested").len(), 3);
    assert_eq!(
        resolutions(&events),
        [
            ("write_file".into(), "accept".into(), "user".into()),
            (
                "run_terminal_command".into(),
                "accept_for_session".into(),
                "user".into()
            ),
            ("write_file".into(), "reject".into(), "user".into()),
            (
                "run_terminal_command".into(),
                "accept".into(),
                "policy".into()
            ),
        ]
    );
    assert_eq!(read(work.path(), "log.txt").as_deref(), Some("one\none\n"));
    assert_eq!(read(work.path(), "second.txt"), None);
    assert!(d.wait_no_agents(LIMIT).await.is_empty());
    d.stop();
    assert_well_formed(&events);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accept_edits_runs_edits_and_asks_for_commands_plan_runs_nothing() {
    let backend = FakeBackend::start("permissions");
    let home = TempDir::new("cb-perm-home");
    let d = start_daemon(&backend, &home, &[]);

    let edits = TempDir::new("cb-accept-edits");
    session(
        &d,
        "e",
        edits.path(),
        json!({"permissionMode": "acceptEdits"}),
    )
    .await;
    d.message("e", "Write a todo list and run a command.").await;
    let cmd = requested(&d, "e", 1).await;
    assert_eq!(cmd["data"]["metadata"]["toolName"], "run_terminal_command");
    assert!(
        edits.path().join("notes/todo.md").is_file(),
        "the edit ran without asking"
    );
    reply_ok(&d, "e", &permission_id(&cmd), "reject").await;
    let events = d.wait_turns_ended("e", 1).await;
    assert_eq!(of_type(&events, "permission.requested").len(), 1);
    assert_eq!(
        resolutions(&events),
        [
            ("write_file".into(), "accept".into(), "policy".into()),
            (
                "run_terminal_command".into(),
                "reject".into(),
                "user".into()
            ),
        ]
    );
    assert!(
        !edits.path().join("ran.txt").exists(),
        "the rejected command ran"
    );
    assert_eq!(turn_ends(&events)[0]["status"], "completed");

    let plan = TempDir::new("cb-plan");
    session(&d, "n", plan.path(), json!({"permissionMode": "plan"})).await;
    d.message("n", "Write a todo list and run a command.").await;
    let events = d.wait_turns_ended("n", 1).await;
    // Plan mode runs Codebuff's own plan agent (which proposes, and here only answers); had it
    // called a tool that changes something, the gate would have rejected it without asking (the
    // mock's tests/permissions.rs shows that rule).
    let chats = backend.chat_requests().await;
    assert_eq!(
        chats.last().unwrap()["model"],
        "fake/base2-plan-model",
        "the plan turn ran the plan agent"
    );
    assert!(of_type(&events, "permission.requested").is_empty());
    assert!(resolutions(&events)
        .iter()
        .all(|(_, status, by)| status == "reject" && by == "policy"));
    assert_eq!(turn_ends(&events)[0]["status"], "completed");
    assert_eq!(
        std::fs::read_dir(plan.path()).unwrap().count(),
        0,
        "plan mode changed nothing"
    );
    d.stop();
    assert_well_formed(&events);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_request_times_out_and_terminate_rejects_a_waiting_one() {
    let backend = FakeBackend::start("permissions");
    let home = TempDir::new("cb-perm-home");
    let d = start_daemon_with(
        &backend,
        &home,
        &[],
        &["--permission-timeout".into(), "1".into()],
    );
    let work = TempDir::new("cb-timeout");
    session(&d, "t", work.path(), json!({"permissionMode": "default"})).await;
    d.message("t", "Write a todo list and run a command.").await;
    let events = d.wait_turns_ended("t", 1).await;
    let r = resolutions(&events);
    assert_eq!(r.len(), 2, "{r:?}");
    assert!(
        r.iter().all(|(_, s, by)| s == "reject" && by == "timeout"),
        "{r:?}"
    );
    assert!(!work.path().join("notes").exists() && !work.path().join("ran.txt").exists());
    assert_eq!(turn_ends(&events)[0]["status"], "completed");
    d.stop();

    let backend = FakeBackend::start("permissions");
    let d = start_daemon(&backend, &home, &[]);
    let work = TempDir::new("cb-terminate");
    session(&d, "x", work.path(), json!({"permissionMode": "default"})).await;
    d.message("x", "Write a todo list and run a command.").await;
    let asked = requested(&d, "x", 1).await;
    assert_eq!(d.post_empty("/v1/sessions/x/terminate").await.status(), 204);
    let events = d.events("x").await;
    let r = of_type(&events, "permission.resolved")
        .into_iter()
        .find(|e| e["data"]["permission_id"] == asked["data"]["permission_id"])
        .expect("the waiting request is resolved");
    assert_eq!(r["data"]["status"], "reject");
    assert_eq!(r["data"]["metadata"]["decidedBy"], "daemon");
    assert_eq!(events.last().unwrap()["type"], "session.ended");
    assert!(
        d.wait_no_agents(LIMIT).await.is_empty(),
        "the agent was killed"
    );
    assert!(!work.path().join("notes").exists());
    d.stop();
    assert_well_formed(&events);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_stops_a_real_turn_at_the_step_that_reaches_it() {
    let backend = FakeBackend::start("budget_steps");
    let home = TempDir::new("cb-budget-home");
    let work = TempDir::new("cb-budget");
    let d = start_daemon(&backend, &home, &[]);
    session(&d, "b", work.path(), json!({"maxCredits": 5.0})).await;
    d.message("b", "Take five steps.").await;
    let events = d.wait_turns_ended("b", 1).await;
    let end = turn_ends(&events)[0];
    assert_eq!(end["status"], "budget_exhausted", "{end}");
    // Costs come as 2, 4, 6, …: the step that reached 6 ≥ 5 was the last; steps 4 and 5
    // never ran (their commands echo their number).
    let outputs: String = of_type(&events, "item.completed")
        .iter()
        .map(|e| e.to_string())
        .collect();
    assert!(outputs.contains("step 3"), "step 3 ran");
    assert!(
        !outputs.contains("step 5"),
        "the turn went on past its budget"
    );
    let info = d.info("b").await;
    assert_eq!(info["remaining"], 0.0, "{info}");
    assert!(info["cost"]["credits"].as_f64().unwrap() >= 5.0, "{info}");
    let refused = d
        .post("/v1/sessions/b/messages", json!({"message": "more"}))
        .await;
    assert_eq!(refused.status(), 402);
    assert!(d.wait_no_agents(LIMIT).await.is_empty());
    d.stop();
    assert_well_formed(&events);
}
