//! The question relay with the `mock` agent, end to end over real HTTP on loopback: a question
//! is asked, answered (with options or free text), rejected, skipped by its run, answered after
//! its run ended, left open when the conversation moves on, and resolved when the session is
//! terminated while it waits — each resolved exactly once.
//!
//! Each test starts its own `codebuffd server` and ends with `Daemon::stop`, which checks that the
//! daemon exits 0 and leaves no process behind. Every session's events are checked against the
//! lifecycle rules with `assert_well_formed`.

mod support;

use serde_json::json;
use support::daemon::{Daemon, DaemonOptions};
use support::events::{assistant_texts, count, of_type, part, turn_ends, types};
use support::invariants::assert_well_formed;
use support::mock::{
    all_events, assert_no_agent_left, assert_problem, completed_kind, mock_session, position, post,
    wait_agent_started, Tail, WAIT,
};

/// Sends `ask`, waits for the question, checks its shape; returns its id.
async fn ask(d: &Daemon, t: &mut Tail<'_>) -> String {
    d.message(&t.id.clone(), "ask").await;
    let events = t.event("question.requested").await;
    let asked = of_type(&events, "question.requested");
    assert_eq!(asked.len(), 1);
    let q = &asked[0]["data"];
    let qid = q["question_id"].as_str().unwrap().to_owned();
    let call = completed_kind(&events, "tool_call")
        .into_iter()
        .find(|i| part(i, "tool_call").is_some_and(|p| p["name"] == "ask_user"))
        .expect("the ask_user call");
    assert_eq!(part(call, "tool_call").unwrap()["call_id"], qid.as_str());
    assert_eq!(q["status"], "requested");
    assert_eq!(q["prompt"], "Which test framework?");
    assert_eq!(q["options"], json!(["vitest", "jest"]));
    let questions = q["questions"].as_array().unwrap();
    assert_eq!(questions.len(), 2);
    assert_eq!(questions[0]["question"], "Which test framework?");
    assert_eq!(questions[0]["multi_select"], false);
    assert_eq!(questions[1]["question"], "Which kinds of tests?");
    assert_eq!(questions[1]["multi_select"], true);
    let labels: Vec<&str> = questions[1]["options"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|o| o["label"].as_str())
        .collect();
    assert_eq!(labels, ["unit", "snapshot", "e2e"]);
    qid
}

#[tokio::test]
async fn an_answered_question_is_resolved_once_and_said_back() {
    let d = Daemon::start();
    mock_session(&d, "s", json!({})).await;
    let mut t = Tail::new(&d, "s");
    let qid = ask(&d, &mut t).await;
    assert_eq!(
        d.wait_status("s", "awaiting_input", WAIT).await["ended"],
        false
    );

    let unknown = post(
        &d,
        "/v1/sessions/s/questions/no-such-question/reply",
        Some(json!({"answers": [["vitest"]]})),
    )
    .await;
    assert_problem(&unknown, 400, "invalid_request", "no-such-question");
    let unknown = post(&d, "/v1/sessions/s/questions/no-such-question/reject", None).await;
    assert_problem(&unknown, 400, "invalid_request", "no-such-question");

    let path = format!("/v1/sessions/s/questions/{qid}/reply");
    let answers = json!([["vitest"], ["unit", "snapshot"]]);
    let reply = post(&d, &path, Some(json!({ "answers": answers }))).await;
    assert_eq!(reply.0, 204, "{}", reply.1);
    let events = t.turns_ended(1).await;
    let resolved = of_type(&events, "question.resolved");
    assert_eq!(resolved.len(), 1);
    let r = &resolved[0]["data"];
    assert_eq!(r["question_id"], qid.as_str());
    assert_eq!(r["status"], "answered");
    assert_eq!(r["answers"], answers);
    assert_eq!(r["response"], "vitest");
    assert_eq!(
        assistant_texts(&events).last().unwrap(),
        "You chose: vitest; unit, snapshot"
    );
    assert_eq!(turn_ends(&events)[0]["status"], "completed");

    let again = post(&d, &path, Some(json!({ "answers": answers }))).await;
    assert_problem(&again, 400, "invalid_request", "already resolved");
    d.wait_status("s", "idle", WAIT).await;
    let events = all_events(&d, "s").await;
    assert_eq!(count(&events, "question.resolved"), 1);
    assert_eq!(
        count(&events, "turn.started"),
        1,
        "no turn for a refused answer"
    );
    assert_well_formed(&events);
    d.stop();
}

#[tokio::test]
async fn a_free_text_answer_is_passed_on() {
    let d = Daemon::start();
    mock_session(&d, "s", json!({})).await;
    let mut t = Tail::new(&d, "s");
    let qid = ask(&d, &mut t).await;
    let path = format!("/v1/sessions/s/questions/{qid}/reply");
    let reply = post(&d, &path, Some(json!({"answers": [["mocha"], ["e2e"]]}))).await;
    assert_eq!(reply.0, 204, "{}", reply.1);
    let events = t.turns_ended(1).await;
    let resolved = of_type(&events, "question.resolved");
    assert_eq!(resolved.len(), 1);
    assert_eq!(resolved[0]["data"]["answers"], json!([["mocha"], ["e2e"]]));
    assert_eq!(
        assistant_texts(&events).last().unwrap(),
        "You chose: mocha; e2e"
    );
    assert_well_formed(&events);
    d.stop();
}

#[tokio::test]
async fn a_rejected_question_is_resolved_rejected_and_skipped() {
    let d = Daemon::start();
    mock_session(&d, "s", json!({})).await;
    let mut t = Tail::new(&d, "s");
    let qid = ask(&d, &mut t).await;
    let path = format!("/v1/sessions/s/questions/{qid}/reject");
    assert_eq!(post(&d, &path, None).await.0, 204);
    let events = t.turns_ended(1).await;
    let resolved = of_type(&events, "question.resolved");
    assert_eq!(resolved.len(), 1);
    assert_eq!(resolved[0]["data"]["status"], "rejected");
    assert_eq!(resolved[0]["data"]["question_id"], qid.as_str());
    assert_eq!(
        assistant_texts(&events).last().unwrap(),
        "You skipped the question."
    );
    assert_eq!(turn_ends(&events)[0]["status"], "completed");
    let again = post(&d, &path, None).await;
    assert_problem(&again, 400, "invalid_request", "already resolved");
    assert_well_formed(&all_events(&d, "s").await);
    d.stop();
}

#[tokio::test]
async fn a_question_the_run_skipped_cannot_be_answered_afterwards() {
    let d = Daemon::start_with(DaemonOptions {
        env: vec![("CODEBUFF_QUESTION_TIMEOUT_SECONDS".into(), "1".into())],
        ..Default::default()
    });
    mock_session(&d, "s", json!({})).await;
    let mut t = Tail::new(&d, "s");
    let qid = ask(&d, &mut t).await;
    // Nobody answers: the agent gives up on the question after a second and goes on.
    let events = t.turns_ended(1).await;
    let resolved = of_type(&events, "question.resolved");
    assert_eq!(resolved.len(), 1, "the skip resolves the question");
    assert_eq!(resolved[0]["data"]["status"], "rejected");
    assert_eq!(resolved[0]["source"], "agent");
    assert_eq!(
        assistant_texts(&events).last().unwrap(),
        "You skipped the question."
    );
    d.wait_status("s", "idle", WAIT).await;

    let path = format!("/v1/sessions/s/questions/{qid}/reply");
    let late = post(&d, &path, Some(json!({"answers": [["vitest"], ["unit"]]}))).await;
    assert_problem(&late, 400, "invalid_request", "already resolved");
    let after = all_events(&d, "s").await;
    assert_eq!(
        after.len(),
        events.len(),
        "a refused answer records nothing"
    );
    assert_eq!(count(&after, "question.requested"), 1);
    assert_eq!(count(&after, "question.resolved"), 1);
    assert_eq!(d.info("s").await["status"], "idle");
    assert_well_formed(&after);
    d.stop();
}

#[tokio::test]
async fn an_answer_after_its_run_ended_becomes_the_next_prompt() {
    let d = Daemon::start();
    mock_session(&d, "s", json!({})).await;
    let mut t = Tail::new(&d, "s");
    let qid = ask(&d, &mut t).await;
    d.wait_status("s", "awaiting_input", WAIT).await;
    assert_eq!(post(&d, "/v1/sessions/s/cancel", None).await.0, 204);
    let events = t.turns_ended(1).await;
    assert_eq!(turn_ends(&events)[0]["status"], "cancelled");
    assert_eq!(count(&events, "question.resolved"), 0, "still answerable");
    d.wait_status("s", "idle", WAIT).await;

    let path = format!("/v1/sessions/s/questions/{qid}/reply");
    let reply = post(
        &d,
        &path,
        Some(json!({"answers": [["jest"], ["unit", "e2e"]]})),
    )
    .await;
    assert_eq!(reply.0, 204, "{}", reply.1);
    let events = t.turns_ended(2).await;
    let resolved = of_type(&events, "question.resolved");
    assert_eq!(resolved.len(), 1);
    assert_eq!(resolved[0]["data"]["status"], "answered");
    // The answer goes to the conversation as the next turn's prompt (the mock echoes it).
    let prompt = "Answers to your questions:\n- Which test framework?: jest\n- Which kinds of tests?: unit, e2e";
    assert_eq!(assistant_texts(&events).last().unwrap(), prompt);
    assert_eq!(turn_ends(&events)[1]["status"], "completed");
    let again = post(&d, &path, Some(json!({"answers": [["jest"], ["unit"]]}))).await;
    assert_problem(&again, 400, "invalid_request", "already resolved");
    assert_well_formed(&all_events(&d, "s").await);
    d.stop();
}

#[tokio::test]
async fn a_question_its_run_left_open_is_rejected_when_the_conversation_moves_on() {
    let d = Daemon::start();
    mock_session(&d, "s", json!({})).await;
    let mut t = Tail::new(&d, "s");
    let qid = ask(&d, &mut t).await;
    d.wait_status("s", "awaiting_input", WAIT).await;
    assert_eq!(post(&d, "/v1/sessions/s/cancel", None).await.0, 204);
    t.turns_ended(1).await;
    d.wait_status("s", "idle", WAIT).await;

    // A new message instead of an answer: the old question is over.
    d.message("s", "hang").await;
    let events = wait_agent_started(&mut t, 2).await;
    let resolved = of_type(&events, "question.resolved");
    assert_eq!(resolved.len(), 1);
    assert_eq!(resolved[0]["data"]["question_id"], qid.as_str());
    assert_eq!(resolved[0]["data"]["status"], "rejected");
    assert_eq!(resolved[0]["synthetic"], true);
    let resolved_at = position(&events, |e| e["type"] == "question.resolved");
    let second_turn = events
        .iter()
        .enumerate()
        .filter(|(_, e)| e["type"] == "turn.started")
        .nth(1)
        .unwrap()
        .0;
    assert!(resolved_at < second_turn, "resolved before the next turn");
    // The running turn asked nothing: the session is running, not awaiting input.
    assert_eq!(d.info("s").await["status"], "running");
    let path = format!("/v1/sessions/s/questions/{qid}/reply");
    let late = post(&d, &path, Some(json!({"answers": [["vitest"], ["unit"]]}))).await;
    assert_problem(&late, 400, "invalid_request", "already resolved");

    assert_eq!(post(&d, "/v1/sessions/s/terminate", None).await.0, 204);
    let events = all_events(&d, "s").await;
    assert_eq!(count(&events, "question.resolved"), 1);
    assert_eq!(count(&events, "session.ended"), 1);
    assert_well_formed(&events);
    d.stop();
}

#[tokio::test]
async fn terminating_while_a_question_waits_resolves_it_before_the_session_ends() {
    let d = Daemon::start();
    mock_session(&d, "s", json!({})).await;
    let mut t = Tail::new(&d, "s");
    let qid = ask(&d, &mut t).await;
    d.wait_status("s", "awaiting_input", WAIT).await;
    assert_eq!(post(&d, "/v1/sessions/s/terminate", None).await.0, 204);
    let events = all_events(&d, "s").await;
    let resolved = of_type(&events, "question.resolved");
    assert_eq!(resolved.len(), 1, "{:?}", types(&events));
    assert_eq!(resolved[0]["data"]["question_id"], qid.as_str());
    assert_eq!(resolved[0]["data"]["status"], "rejected");
    let tail: Vec<&str> = types(&events).into_iter().rev().take(3).collect();
    assert_eq!(tail, ["session.ended", "question.resolved", "turn.ended"]);
    assert_eq!(turn_ends(&events)[0]["status"], "cancelled");
    let path = format!("/v1/sessions/s/questions/{qid}/reply");
    let late = post(&d, &path, Some(json!({"answers": [["vitest"], ["unit"]]}))).await;
    assert_problem(&late, 400, "invalid_request", "already resolved");
    assert_no_agent_left(&d).await;
    assert_well_formed(&events);
    d.stop();
}
