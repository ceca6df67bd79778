//! The Codebuff WebSocket protocol at `/v1/ws` (`docs/ws.md`), end to end: a real WebSocket
//! client (tokio-tungstenite) against the real binary on loopback with the mock agent. Every
//! message of the protocol and our extensions; prompts streamed, failed, asking, cancelled and
//! gated; subscriptions replayed from a sequence; bad input; the heartbeat; auth at the
//! upgrade; many connections per session and many sessions per connection; a dropped
//! connection leaves its turn running. Each test ends with `Daemon::stop`, which checks that
//! the daemon exits 0 and leaves no process behind.

mod support;

use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use support::api::assert_problem_response;
use support::daemon::{Daemon, DaemonOptions, TempDir};
use support::events::{count, of_type, turn_ends};
use support::ws::*;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message;

// ----- the protocol's messages --------------------------------------------------------------

#[tokio::test]
async fn identify_and_ping_are_acked_with_their_txid() {
    let d = daemon(&[]);
    let mut ws = Ws::connect(&d).await;
    ws.send_text(r#"{"type":"identify","txid":1,"clientSessionId":"session-abc123"}"#)
        .await;
    ws.acked(1).await;
    ws.send_text(r#"{"type":"ping","txid":42}"#).await;
    ws.acked(42).await;
    ws.send_text(r#"{"type":"ping"}"#).await;
    assert_eq!(ws.recv().await, json!({"type": "ack", "success": true}));
    // Identifying creates nothing: the first prompt or init does.
    assert_eq!(d.get("/v1/sessions/session-abc123").await.status(), 404);
    drop(ws);
    d.stop();
}

#[tokio::test]
async fn a_streamed_prompt_sends_a_chunk_per_delta_then_the_response_with_cost() {
    let d = daemon(&[]);
    let mut ws = Ws::connect(&d).await;
    ws.identify("s1").await;
    let got = ws
        .prompt(
            json!({"promptId": "p1", "prompt": "stream alpha beta gamma",
            "fingerprintId": "fp", "costMode": "normal", "sessionState": {}, "toolResults": [],
            "agentId": "mock"}),
        )
        .await;
    let chunks = chunks(&got, "p1");
    assert_eq!(chunks.concat(), "alpha beta gamma");
    let events = d.events("s1").await;
    assert_eq!(
        chunks.len(),
        count(&events, "item.delta"),
        "one chunk per streamed delta"
    );
    let response = last_data(&got);
    assert_eq!(response["type"], "prompt-response", "{response}");
    assert_eq!(response["promptId"], "p1");
    assert_eq!(response["output"]["type"], "lastMessage");
    assert_eq!(response["output"]["value"], "alpha beta gamma");
    assert_eq!(response["output"]["status"], "completed");
    let turn = turn_ends(&events)[0];
    assert_eq!(response["output"]["cost"], turn["cost"]);
    assert!(response["output"]["cost"]["credits"].as_f64() > Some(0.0));
    let state = &response["sessionState"];
    assert_eq!(state["sessionId"], "s1");
    assert_eq!(state["agent"], "mock");
    assert_eq!(
        state["messages"],
        json!([{"role": "user", "content": "stream alpha beta gamma"},
            {"role": "assistant", "content": "alpha beta gamma"}])
    );
    let info = d.info("s1").await;
    assert_eq!(state["cost"], info["cost"]);
    assert_eq!(state["turns"], 1);
    assert_eq!(response["toolCalls"], json!([]));
    d.stop();
}

#[tokio::test]
async fn a_failing_prompt_gets_a_prompt_error_with_the_typed_cause() {
    let d = daemon(&[]);
    let mut ws = Ws::connect(&d).await;
    ws.identify("f1").await;
    let got = ws
        .prompt(json!({"promptId": "p-fail", "prompt": "fail"}))
        .await;
    assert_eq!(
        last_data(&got),
        &json!({"type": "prompt-error", "userInputId": "p-fail",
            "message": "Codebuff backend unreachable (mock failure) (the agent exited with status 3)",
            "error": "backend_error", "sessionId": "f1"})
    );
    // The session goes on: the next prompt works.
    let got = ws
        .prompt(json!({"promptId": "p-ok", "prompt": "echo fine"}))
        .await;
    assert_eq!(last_data(&got)["output"]["value"], "fine");
    d.stop();
}

#[tokio::test]
async fn a_spent_budget_is_a_prompt_error_with_the_remaining_balance() {
    let d = daemon(&[]);
    d.create("b1", json!({"agent": "mock", "maxCredits": 1}))
        .await;
    let mut ws = Ws::connect(&d).await;
    ws.identify("b1").await;
    // The turn is stopped when its cost reaches the budget.
    let got = ws
        .prompt(json!({"promptId": "p1", "prompt": "spend 3"}))
        .await;
    let error = last_data(&got);
    assert_eq!(error["type"], "prompt-error", "{error}");
    assert_eq!(error["error"], "budget_exhausted");
    assert_eq!(error["remainingBalance"], 0.0);
    // The next prompt is refused before any turn starts.
    let got = ws
        .prompt(json!({"promptId": "p2", "prompt": "echo more"}))
        .await;
    let error = last_data(&got);
    assert_eq!(error["error"], "budget_exhausted", "{error}");
    assert_eq!(error["remainingBalance"], 0.0);
    assert!(error["message"]
        .as_str()
        .is_some_and(|m| m.contains("budget")));
    d.stop();
}

#[tokio::test]
async fn ask_sends_a_question_action_and_the_answer_completes_the_prompt() {
    let d = daemon(&[]);
    let mut ws = Ws::connect(&d).await;
    ws.identify("q1").await;
    let txid = ws
        .action(
            json!({"type": "prompt", "promptId": "p-ask", "prompt": "ask",
            "extensions": ["question"]}),
        )
        .await;
    ws.acked(txid).await;
    let got = ws.recv_until(|m| m["data"]["type"] == "question").await;
    let question = last_data(&got).clone();
    assert_eq!(question["userInputId"], "p-ask");
    assert_eq!(question["sessionId"], "q1");
    assert_eq!(question["prompt"], "Which test framework?");
    assert_eq!(question["options"], json!(["vitest", "jest"]));
    assert_eq!(question["questions"][1]["multiSelect"], true);
    assert_eq!(question["questions"][0]["options"][0]["label"], "vitest");
    assert_eq!(
        wait_status(&d, "q1", "awaiting_input").await["status"],
        "awaiting_input"
    );
    let txid = ws
        .action(
            json!({"type": "answer", "questionId": question["questionId"],
            "answers": [["vitest"], ["unit", "snapshot"]]}),
        )
        .await;
    ws.acked(txid).await;
    let got = ws.recv_until(|m| ends_prompt(m, "p-ask")).await;
    let response = last_data(&got);
    assert_eq!(response["type"], "prompt-response", "{response}");
    assert_eq!(
        response["output"]["value"],
        "You chose: vitest; unit, snapshot"
    );
    assert_eq!(
        chunks(&got, "p-ask").concat(),
        "You chose: vitest; unit, snapshot"
    );
    assert_eq!(response["toolCalls"][0]["toolName"], "ask_user");
    assert_eq!(
        response["toolResults"][0]["toolCallId"],
        question["questionId"]
    );
    // A second answer to the same question fails after its ack.
    let txid = ws
        .action(
            json!({"type": "answer", "questionId": question["questionId"], "answers": [["jest"]]}),
        )
        .await;
    ws.acked(txid).await;
    let error = ws.recv().await;
    assert_eq!(error["data"]["type"], "action-error", "{error}");
    assert_eq!(error["data"]["error"], "invalid_request");
    d.stop();
}

#[tokio::test]
async fn cancel_stops_the_running_prompt() {
    let d = daemon(&[]);
    let mut ws = Ws::connect(&d).await;
    ws.identify("c1").await;
    let txid = ws
        .action(json!({"type": "prompt", "promptId": "p-hang", "prompt": "hang"}))
        .await;
    ws.acked(txid).await;
    wait_status(&d, "c1", "running").await;
    let txid = ws
        .action(json!({"type": "cancel", "promptId": "p-hang"}))
        .await;
    ws.acked(txid).await;
    let got = ws.recv_until(|m| ends_prompt(m, "p-hang")).await;
    let error = last_data(&got);
    assert_eq!(error["type"], "prompt-error", "{error}");
    assert_eq!(error["error"], "cancelled");
    assert_eq!(turn_ends(&d.events("c1").await)[0]["status"], "cancelled");
    d.stop();
}

#[tokio::test]
async fn permission_requests_are_actions_and_the_replies_decide() {
    let d = daemon(&[]);
    let dir = TempDir::new("ws-gated");
    d.create(
        "g1",
        json!({"agent": "mock", "permissionMode": "default", "directory": dir.path()}),
    )
    .await;
    let mut ws = Ws::connect(&d).await;
    ws.identify("g1").await;
    let txid = ws
        .action(
            json!({"type": "prompt", "promptId": "p-gated", "prompt": "gated",
            "extensions": ["permission"]}),
        )
        .await;
    ws.acked(txid).await;
    let got = ws.recv_until(|m| m["data"]["type"] == "permission").await;
    let first = last_data(&got).clone();
    assert_eq!(first["toolName"], "write_file");
    assert_eq!(first["userInputId"], "p-gated");
    assert_eq!(first["metadata"]["paths"], json!(["gated.txt"]));
    let txid = ws
        .action(json!({"type": "permission-reply", "permissionId": first["permissionId"], "reply": "once"}))
        .await;
    ws.acked(txid).await;
    let got = ws.recv_until(|m| m["data"]["type"] == "permission").await;
    let second = last_data(&got).clone();
    assert_eq!(second["toolName"], "run_terminal_command");
    let txid = ws
        .action(json!({"type": "permission-reply", "permissionId": second["permissionId"], "reply": "reject"}))
        .await;
    ws.acked(txid).await;
    let got = ws.recv_until(|m| ends_prompt(m, "p-gated")).await;
    assert_eq!(last_data(&got)["type"], "prompt-response");
    assert!(
        dir.path().join("gated.txt").exists(),
        "the allowed write ran"
    );
    assert!(
        !dir.path().join("gated-cmd.txt").exists(),
        "the refused command did not run"
    );
    d.stop();
}

#[tokio::test]
async fn init_reports_the_sessions_real_usage_and_budget() {
    let d = daemon(&[]);
    d.create("u1", json!({"agent": "mock", "maxCredits": 100}))
        .await;
    d.message("u1", "echo spend something").await;
    d.wait_turns_ended("u1", 1).await;
    let info = d.wait_status("u1", "idle", WAIT).await;
    let spent = info["cost"]["credits"].as_f64().expect("cost");
    assert!(spent > 0.0);
    let mut ws = Ws::connect(&d).await;
    ws.identify("u1").await;
    let txid = ws
        .action(json!({"type": "init", "fingerprintId": "fp",
            "fileContext": {"files": []}, "repoUrl": null}))
        .await;
    ws.acked(txid).await;
    let reply = ws.recv().await;
    let data = &reply["data"];
    assert_eq!(data["type"], "init-response", "{reply}");
    assert_eq!(data["usage"], spent);
    assert_eq!(data["remainingBalance"], 100.0 - spent);
    assert_eq!(data["next_quota_reset"], Value::Null);
    assert!(data["message"].as_str().is_some_and(|m| m.contains("u1")));
    assert_eq!(data["agentNames"]["codebuff"], "Codebuff");
    // An init for a new session creates it, with the door's default agent.
    ws.identify("u2").await;
    let txid = ws
        .action(json!({"type": "init", "fingerprintId": "fp"}))
        .await;
    ws.acked(txid).await;
    let reply = ws.recv().await;
    assert_eq!(reply["data"]["usage"], 0.0);
    // Without a budget the protocol's required balance is the usage.
    assert_eq!(reply["data"]["remainingBalance"], 0.0);
    assert_eq!(d.info("u2").await["agent"], "mock");
    d.stop();
}

#[tokio::test]
async fn cost_mode_picks_the_agent_mode() {
    let d = daemon(&[]);
    let mut ws = Ws::connect(&d).await;
    ws.identify("m1").await;
    let got = ws
        .prompt(json!({"promptId": "p1", "prompt": "echo a", "costMode": "max"}))
        .await;
    assert_eq!(last_data(&got)["sessionState"]["agentMode"], "max");
    assert_eq!(d.info("m1").await["agentMode"], "max");
    let got = ws
        .prompt(json!({"promptId": "p2", "prompt": "echo b", "costMode": "ask"}))
        .await;
    assert_eq!(last_data(&got)["type"], "prompt-response");
    assert_eq!(d.info("m1").await["agentMode"], "plan");
    let got = ws
        .prompt(json!({"promptId": "p3", "prompt": "echo c", "costMode": "lite"}))
        .await;
    assert_eq!(last_data(&got)["type"], "prompt-response");
    assert_eq!(d.info("m1").await["agentMode"], "build");
    d.stop();
}

// ----- subscriptions --------------------------------------------------------------------------

#[tokio::test]
async fn subscribe_replays_from_a_sequence_then_follows_live() {
    let d = daemon(&[]);
    let mut writer = Ws::connect(&d).await;
    writer.identify("r1").await;
    writer
        .prompt(json!({"promptId": "p1", "prompt": "echo first"}))
        .await;
    let before = d.events("r1").await;
    let last = before.len() as u64;
    assert!(last > 5);

    let mut reader = Ws::connect(&d).await;
    let txid = reader
        .send(json!({"type": "subscribe", "topics": ["r1@3"]}))
        .await;
    reader.acked(txid).await;
    let mut replayed = Vec::new();
    for _ in 3..last {
        let m = reader.recv().await;
        assert_eq!(m["data"]["type"], "event", "{m}");
        assert_eq!(m["data"]["topic"], "r1");
        replayed.push(m["data"]["event"].clone());
    }
    assert_eq!(replayed, before[3..].to_vec(), "the log after sequence 3");

    // Live: the next turn's events follow, with no gap.
    d.message("r1", "echo second").await;
    let live = reader
        .recv_until(|m| m["data"]["event"]["type"] == "turn.ended")
        .await;
    let sequences: Vec<u64> = live
        .iter()
        .map(|m| m["data"]["event"]["sequence"].as_u64().expect("sequence"))
        .collect();
    assert_eq!(
        sequences,
        (last + 1..=last + sequences.len() as u64).collect::<Vec<_>>()
    );

    // Unsubscribed: nothing more arrives.
    let txid = reader
        .send(json!({"type": "unsubscribe", "topics": ["r1"]}))
        .await;
    reader.acked(txid).await;
    d.message("r1", "echo third").await;
    d.wait_turns_ended("r1", 3).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let txid = reader.send(json!({"type": "ping"})).await;
    reader.acked(txid).await;
    d.stop();
}

#[tokio::test]
async fn subscribing_to_every_session_and_to_one_not_created_yet() {
    let d = daemon(&[]);
    let mut reader = Ws::connect(&d).await;
    let txid = reader
        .send(json!({"type": "subscribe", "topics": ["*", "later"]}))
        .await;
    reader.acked(txid).await;
    let mut ws = Ws::connect(&d).await;
    ws.identify("later").await;
    ws.prompt(json!({"promptId": "p1", "prompt": "echo hi"}))
        .await;
    // Both topics deliver the new session from its first event to the turn's end.
    let mut seen: std::collections::HashMap<String, Vec<u64>> = Default::default();
    while seen.values().filter(|s| s.len() >= 8).count() < 2 {
        let m = reader.recv().await;
        assert_eq!(m["data"]["event"]["session_id"], "later");
        seen.entry(m["data"]["topic"].as_str().unwrap_or_default().to_owned())
            .or_default()
            .push(m["data"]["event"]["sequence"].as_u64().expect("sequence"));
    }
    for (topic, sequences) in &seen {
        assert_eq!(
            sequences[..8],
            (1..=8).collect::<Vec<u64>>()[..],
            "topic {topic}"
        );
    }
    d.stop();
}

// ----- bad input, heartbeat, auth --------------------------------------------------------------

#[tokio::test]
async fn bad_messages_get_a_failed_ack_and_the_connection_goes_on() {
    let d = daemon(&[]);
    let mut ws = Ws::connect(&d).await;
    let failed = |m: &Value| {
        assert_eq!(m["type"], "ack", "{m}");
        assert_eq!(m["success"], false, "{m}");
        (
            m["txid"].clone(),
            m["error"].as_str().unwrap_or_default().to_owned(),
        )
    };
    ws.send_text(r#"{"type": "ping", "txid": 1"#).await;
    let m = ws.recv().await;
    assert!(m.get("txid").is_none(), "no usable txid, none echoed: {m}");
    let (_, error) = failed(&m);
    assert!(error.starts_with("invalid JSON: "), "{error}");

    ws.send_text(r#"{"txid": 2}"#).await;
    assert_eq!(
        failed(&ws.recv().await),
        (json!(2), "missing `type`".into())
    );

    ws.send_text(r#"{"type": "hello", "txid": 3}"#).await;
    let (txid, error) = failed(&ws.recv().await);
    assert_eq!(txid, json!(3));
    assert!(error.starts_with("unknown message type `hello`"), "{error}");

    ws.send_text(r#"{"type": "identify", "txid": 4, "clientSessionId": 7}"#)
        .await;
    assert_eq!(
        failed(&ws.recv().await),
        (
            json!(4),
            "bad `identify` message: invalid type: integer `7`, expected a string".into()
        )
    );

    ws.send_text(r#"{"type": "action", "txid": 5, "data": {"type": "dance"}}"#)
        .await;
    let (txid, error) = failed(&ws.recv().await);
    assert_eq!(txid, json!(5));
    assert!(error.starts_with("unknown action type `dance`"), "{error}");

    ws.send_text(r#"{"type": "action", "txid": 6, "data": {"type": "prompt", "prompt": "x"}}"#)
        .await;
    assert_eq!(
        failed(&ws.recv().await),
        (
            json!(6),
            "bad `prompt` action: missing field `promptId`".into()
        )
    );

    ws.stream
        .send(Message::Binary(vec![1, 2, 3].into()))
        .await
        .expect("send binary");
    let (_, error) = failed(&ws.recv().await);
    assert!(error.contains("binary"), "{error}");

    // Still open and working.
    ws.send_text(r#"{"type": "ping", "txid": 9}"#).await;
    ws.acked(9).await;
    ws.identify("after-bad").await;
    let got = ws
        .prompt(json!({"promptId": "p", "prompt": "echo still here"}))
        .await;
    assert_eq!(last_data(&got)["output"]["value"], "still here");
    d.stop();
}

#[tokio::test]
async fn a_silent_connection_is_closed_after_the_heartbeat_timeout() {
    let d = daemon(&["--ws-heartbeat-timeout", "1"]);
    let mut silent = Ws::connect(&d).await;
    let mut pinging = Ws::connect(&d).await;
    let started = Instant::now();
    // The pinging connection outlives the silent one.
    let pings = async {
        for _ in 0..8 {
            let txid = pinging.send(json!({"type": "ping"})).await;
            pinging.acked(txid).await;
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    };
    let close = async {
        let frame = tokio::time::timeout(WAIT, silent.stream.next())
            .await
            .expect("closed in time");
        match frame {
            Some(Ok(Message::Close(close))) => close,
            other => panic!("not a close frame: {other:?}"),
        }
    };
    let ((), close) = tokio::join!(pings, close);
    let close = close.expect("a close frame with a reason");
    assert_eq!(close.code, CloseCode::from(4000));
    assert!(
        close.reason.contains("heartbeat timeout"),
        "{}",
        close.reason
    );
    let after = started.elapsed();
    assert!(
        after >= Duration::from_millis(900) && after < Duration::from_secs(20),
        "{after:?}"
    );
    drop(silent);
    drop(pinging);
    d.stop();
}

#[tokio::test]
async fn the_token_is_checked_at_the_upgrade() {
    let d = Daemon::start_with(DaemonOptions {
        token: Some("t0ken".into()),
        args: vec!["--ws-default-agent".into(), "mock".into()],
        ..Default::default()
    });
    assert_eq!(refused(connect_with(&d, &[]).await), 401);
    assert_eq!(
        refused(connect_with(&d, &[("authorization", "Bearer wrong")]).await),
        401
    );
    assert_eq!(
        refused(connect_with(&d, &[("sec-websocket-protocol", "codebuff, bearer.wrong")]).await),
        401
    );
    // Never a token in the URL.
    let mut request = format!("{}?token=t0ken", ws_url(&d))
        .into_client_request()
        .expect("request");
    request.headers_mut().remove("authorization");
    assert_eq!(
        refused(tokio_tungstenite::connect_async(request).await),
        401
    );
    // A page on another site is refused even with the token.
    assert_eq!(
        refused(
            connect_with(
                &d,
                &[
                    ("authorization", "Bearer t0ken"),
                    ("origin", "https://evil.example")
                ]
            )
            .await
        ),
        403
    );

    // The header, and the browser's subprotocol form (answered with `codebuff`).
    let mut ws = Ws::connect(&d).await;
    let txid = ws.send(json!({"type": "ping"})).await;
    ws.acked(txid).await;
    let (mut ws, response) =
        connect_with(&d, &[("sec-websocket-protocol", "codebuff, bearer.t0ken")])
            .await
            .expect("the subprotocol token is taken");
    assert_eq!(
        response
            .headers()
            .get("sec-websocket-protocol")
            .and_then(|v| v.to_str().ok()),
        Some("codebuff")
    );
    let txid = ws.send(json!({"type": "ping"})).await;
    ws.acked(txid).await;
    d.stop();
}

#[tokio::test]
async fn a_request_that_is_not_an_upgrade_gets_a_problem_document() {
    let d = daemon(&[]);
    for (resp, status, kind) in [
        (d.get("/v1/ws").await, 400, "invalid_request"),
        (d.post_empty("/v1/ws").await, 405, "method_not_allowed"),
    ] {
        let got = resp.status().as_u16();
        let content_type = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let text = resp.text().await.unwrap_or_default();
        let problem = assert_problem_response(
            "/v1/ws without an upgrade",
            got,
            content_type.as_deref(),
            &text,
            status,
            kind,
        );
        if status == 400 {
            assert!(
                problem["detail"]
                    .as_str()
                    .is_some_and(|d| d.contains("WebSocket upgrades only")),
                "{problem}"
            );
        }
    }
    d.stop();
}

// ----- many connections, many sessions ----------------------------------------------------------

#[tokio::test]
async fn a_dropped_connection_leaves_its_turn_running_and_others_share_the_session() {
    let d = daemon(&[]);
    let mut watcher = Ws::connect(&d).await;
    watcher.identify("shared").await;
    let txid = watcher
        .send(json!({"type": "subscribe", "topics": ["shared"]}))
        .await;
    watcher.acked(txid).await;

    let mut driver = Ws::connect(&d).await;
    driver.identify("shared").await;
    // 40 deltas at 20 a second: the turn runs about 2 s.
    let txid = driver
        .action(json!({"type": "prompt", "promptId": "p-long", "prompt": "flood 40 20"}))
        .await;
    driver.acked(txid).await;
    driver
        .recv_until(|m| m["data"]["type"] == "response-chunk")
        .await;
    // Gone mid-turn, without a close frame.
    drop(driver);

    let events = watcher
        .recv_until(|m| m["data"]["event"]["type"] == "turn.ended")
        .await;
    let end = &last_data(&events)["event"]["data"]["metadata"];
    assert_eq!(end["status"], "completed", "{end}");
    let log = d.events("shared").await;
    assert_eq!(
        of_type(&log, "item.delta").len(),
        40,
        "every delta reached the log"
    );

    // Another connection prompts the same session; the watcher sees that turn too.
    let mut third = Ws::connect(&d).await;
    third.identify("shared").await;
    let got = third
        .prompt(json!({"promptId": "p-next", "prompt": "echo next"}))
        .await;
    assert_eq!(last_data(&got)["sessionState"]["turns"], 2);
    let seen = watcher
        .recv_until(|m| m["data"]["event"]["type"] == "turn.ended")
        .await;
    assert!(seen
        .iter()
        .any(|m| m["data"]["event"]["data"]["delta"] == "next"));
    d.stop();
}

#[tokio::test]
async fn one_connection_drives_many_sessions() {
    let d = daemon(&[]);
    let mut ws = Ws::connect(&d).await;
    for (prompt_id, session, text) in [("pa", "ma", "echo one"), ("pb", "mb", "echo two")] {
        let txid = ws
            .action(
                json!({"type": "prompt", "promptId": prompt_id, "prompt": text,
                "sessionState": {"sessionId": session}}),
            )
            .await;
        ws.acked(txid).await;
    }
    let mut ended = Vec::new();
    while ended.len() < 2 {
        let m = ws.recv().await;
        if m["data"]["type"] == "prompt-response" {
            ended.push(m["data"].clone());
        }
    }
    ended.sort_by_key(|d| d["promptId"].as_str().unwrap_or_default().to_owned());
    assert_eq!(ended[0]["sessionState"]["sessionId"], "ma");
    assert_eq!(ended[0]["output"]["value"], "one");
    assert_eq!(ended[1]["sessionState"]["sessionId"], "mb");
    assert_eq!(ended[1]["output"]["value"], "two");
    // Without identify or a sessionState, a prompt gets a session of its own, named back.
    let mut fresh = Ws::connect(&d).await;
    let got = fresh
        .prompt(json!({"promptId": "p", "prompt": "echo new"}))
        .await;
    let id = last_data(&got)["sessionState"]["sessionId"]
        .as_str()
        .expect("a session id")
        .to_owned();
    assert!(id.starts_with("ws-"), "{id}");
    assert_eq!(d.info(&id).await["turns"], 1);
    d.stop();
}

#[tokio::test]
async fn open_connections_hold_their_slots_and_are_closed_going_away_at_shutdown() {
    // Four slots: two for WebSockets, two kept for plain requests (`scope.rs`).
    let d = daemon(&["--max-connections", "4"]);
    let mut first = Ws::connect(&d).await;
    let mut second = Ws::connect(&d).await;
    for ws in [&mut first, &mut second] {
        let txid = ws.send(json!({"type": "ping"})).await;
        ws.acked(txid).await;
    }
    // The WebSockets' share is taken: a third upgrade is refused, plain requests are served.
    match connect_with(&d, &[]).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
            assert_eq!(resp.status(), 503)
        }
        other => panic!("a third WebSocket was accepted: {:?}", other.map(|_| ())),
    }
    let fresh = || {
        reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .build()
            .expect("a client")
    };
    let health = tokio::time::timeout(WAIT, fresh().get(d.url("/v1/health")).send())
        .await
        .expect("health is served while WebSockets hold their share")
        .expect("a response");
    assert_eq!(health.status(), 200);
    // Closing one gives its slot back.
    first.stream.close(None).await.expect("close the first");
    drop(first);
    let deadline = Instant::now() + WAIT;
    let third = loop {
        if let Ok((ws, _)) = connect_with(&d, &[]).await {
            break ws;
        }
        assert!(Instant::now() < deadline, "the slot never came back");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    drop(third);
    // Shutting down closes the open WebSocket with 1001 and a reason; the daemon exits 0.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(d.pid()),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("SIGTERM");
    let close = loop {
        let frame = tokio::time::timeout(WAIT, second.stream.next())
            .await
            .expect("closed in time");
        match frame {
            Some(Ok(Message::Close(close))) => break close.expect("a close frame with a reason"),
            Some(Ok(_)) => continue,
            other => panic!("not a close frame: {other:?}"),
        }
    };
    assert_eq!(close.code, CloseCode::Away);
    assert!(close.reason.contains("shutting down"), "{}", close.reason);
    drop(second);
    d.stop();
}
