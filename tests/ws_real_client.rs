//! What the real Codebuff client (`@codebuff/sdk` 0.3.13, `tests/ws-sdk/`) needs from `/v1/ws`,
//! checked from a plain WebSocket client against the real binary: messages up to
//! `--ws-max-frame-bytes` taken and larger ones refused with a failed ack and a close 1009;
//! the state a client passes back (as its schema parse leaves it) continuing the session;
//! `cancel-user-input` from any connection, even before the turn starts; a question of a
//! client that does not take questions declined after `--ws-question-timeout`; the older
//! generation's `user-input` answered with an `action-error` that names the generation.

mod support;

use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use support::events::{of_type, turn_ends};
use support::ws::*;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message;

/// The next frame, whatever it is (panics after `WAIT` or at the end of the stream).
async fn next_frame(ws: &mut Ws) -> Message {
    tokio::time::timeout(WAIT, ws.stream.next())
        .await
        .expect("a frame in time")
        .expect("the connection is open")
        .expect("a frame")
}

/// A prompt action whose `fileContext` holds `bytes` bytes of file content.
fn prompt_with_context(txid: i64, prompt_id: &str, bytes: usize) -> String {
    json!({"type": "action", "txid": txid, "data": {"type": "prompt", "promptId": prompt_id,
        "prompt": "echo big context", "sessionState": {"fileContext": {
            "projectRoot": "/p", "knowledgeFiles": {"big.md": "k".repeat(bytes)}}}}})
    .to_string()
}

#[tokio::test]
async fn messages_up_to_the_limit_are_taken_and_larger_ones_closed_with_1009() {
    let d = daemon(&["--ws-max-frame-bytes", "2000000"]);
    // 1.5 MB: over the old 1 MiB body limit, under this one: taken, its fileContext echoed.
    let mut ws = Ws::connect(&d).await;
    ws.identify("big-ok").await;
    ws.send_text(&prompt_with_context(100, "p-big", 1_500_000))
        .await;
    ws.acked(100).await;
    let got = ws.recv_until(|m| ends_prompt(m, "p-big")).await;
    let response = last_data(&got);
    assert_eq!(response["type"], "prompt-response", "{}", response["type"]);
    assert_eq!(response["output"]["value"], "big context");
    assert_eq!(
        response["sessionState"]["fileContext"]["knowledgeFiles"]["big.md"]
            .as_str()
            .map(str::len),
        Some(1_500_000)
    );
    drop(ws);

    // 2.5 MB: over the limit, but readable: a failed ack with its txid, the prompt's error,
    // then the close.
    let mut ws = Ws::connect(&d).await;
    ws.send_text(&prompt_with_context(7, "p-too-big", 2_500_000))
        .await;
    let ack = ws.recv().await;
    assert_eq!(ack["type"], "ack", "{ack}");
    assert_eq!(ack["txid"], 7);
    assert_eq!(ack["success"], false);
    let error = ack["error"].as_str().expect("error text");
    assert!(
        error.starts_with("message too big: ") && error.contains("over the limit of 2000000 bytes"),
        "{error}"
    );
    let refused = ws.recv().await;
    assert_eq!(refused["data"]["type"], "prompt-error", "{refused}");
    assert_eq!(refused["data"]["userInputId"], "p-too-big");
    assert_eq!(refused["data"]["error"], "message_too_big");
    match next_frame(&mut ws).await {
        Message::Close(Some(close)) => {
            assert_eq!(close.code, CloseCode::Size);
            assert!(close.reason.contains("--ws-max-frame-bytes"), "{close:?}");
        }
        other => panic!("not a close 1009: {other:?}"),
    }

    // Far over the limit (more than 1 MiB past it): closed unread, the reason says why.
    let mut ws = Ws::connect(&d).await;
    let huge = prompt_with_context(8, "p-huge", 4_000_000);
    // The daemon may close while the frame is still being written.
    let _ = ws.stream.send(Message::Text(huge.into())).await;
    match next_frame(&mut ws).await {
        Message::Close(Some(close)) => {
            assert_eq!(close.code, CloseCode::Size);
            assert!(close.reason.starts_with("message too big"), "{close:?}");
        }
        other => panic!("not a close 1009: {other:?}"),
    }
    // Nothing of the refused prompts ran.
    assert_eq!(d.get("/v1/sessions").await.status(), 200);
    assert_eq!(turn_ends(&d.events("big-ok").await).len(), 1);
    d.stop();
}

#[tokio::test]
async fn the_state_a_client_passes_back_continues_the_session() {
    let d = daemon(&[]);
    let mut ws = Ws::connect(&d).await;
    // No identify, no session named: the prompt gets a session of its own.
    let got = ws
        .prompt(json!({"promptId": "p1", "prompt": "tools", "sessionState": {}}))
        .await;
    let first = last_data(&got).clone();
    assert_eq!(first["type"], "prompt-response", "{first}");
    let session = first["sessionState"]["sessionId"]
        .as_str()
        .expect("session id")
        .to_owned();
    let agent = &first["sessionState"]["mainAgentState"];
    assert_eq!(agent["runId"], session.as_str());
    let history = agent["messageHistory"].as_array().expect("history");
    assert_eq!(history[0], json!({"role": "user", "content": "tools"}));
    assert!(
        history
            .iter()
            .any(|m| m["role"] == "tool" && m["content"]["type"] == "tool-result"),
        "{history:?}"
    );
    let result = &first["toolResults"][0];
    assert_eq!(result["type"], "tool-result");
    assert_eq!(result["output"][0]["type"], "json");
    assert!(first["toolCalls"][0]["input"].is_object());
    // What a Codebuff client keeps of it: only the schema's fields.
    let state = &first["sessionState"];
    let kept =
        json!({"fileContext": state["fileContext"], "mainAgentState": state["mainAgentState"]});
    let mut other = Ws::connect(&d).await;
    let got = other
        .prompt(json!({"promptId": "p2", "prompt": "echo again", "sessionState": kept}))
        .await;
    let second = last_data(&got);
    assert_eq!(second["sessionState"]["sessionId"], session.as_str());
    assert_eq!(second["sessionState"]["turns"], 2);
    assert_eq!(
        second["sessionState"]["mainAgentState"]["messageHistory"],
        json!([{"role": "user", "content": "echo again"},
            {"role": "assistant", "content": [{"type": "text", "text": "again"}]}])
    );
    assert_eq!(turn_ends(&d.events(&session).await).len(), 2);
    d.stop();
}

#[tokio::test]
async fn cancel_user_input_stops_a_prompt_from_any_connection_and_before_its_turn() {
    let d = daemon(&[]);
    let mut a = Ws::connect(&d).await;
    a.identify("cu1").await;
    let txid = a
        .action(json!({"type": "prompt", "promptId": "p-hang", "prompt": "hang"}))
        .await;
    a.acked(txid).await;
    wait_status(&d, "cu1", "running").await;
    // Another connection (the SDK's handler of another run) cancels it by prompt id.
    let mut b = Ws::connect(&d).await;
    let txid = b
        .action(json!({"type": "cancel-user-input", "authToken": "k", "promptId": "p-hang"}))
        .await;
    b.acked(txid).await;
    let got = a.recv_until(|m| ends_prompt(m, "p-hang")).await;
    assert_eq!(
        last_data(&got)["error"],
        "cancelled",
        "{:?}",
        last_data(&got)
    );

    // Right behind the prompt, before its turn can have started: the turn is stopped when it
    // starts.
    a.send_text(
        &json!({"type": "action", "txid": 50, "data": {"type": "prompt", "promptId": "p-soon",
            "prompt": "hang"}})
        .to_string(),
    )
    .await;
    a.send_text(
        &json!({"type": "action", "txid": 51, "data": {"type": "cancel-user-input",
            "authToken": "k", "promptId": "p-soon"}})
        .to_string(),
    )
    .await;
    let got = a.recv_until(|m| ends_prompt(m, "p-soon")).await;
    assert_eq!(
        last_data(&got)["error"],
        "cancelled",
        "{:?}",
        last_data(&got)
    );

    // A prompt that is over: nothing else of the session is stopped, and no error.
    let txid = a
        .action(json!({"type": "prompt", "promptId": "p-next", "prompt": "stream still going"}))
        .await;
    a.acked(txid).await;
    let txid = a
        .action(json!({"type": "cancel-user-input", "authToken": "k", "promptId": "p-hang"}))
        .await;
    let got = a.recv_until(|m| ends_prompt(m, "p-next")).await;
    assert!(
        got.iter().all(|m| m["data"]["type"] != "action-error"),
        "{got:?}"
    );
    assert!(got.contains(&json!({"type": "ack", "txid": txid, "success": true})));
    assert_eq!(last_data(&got)["output"]["value"], "still going");
    let statuses: Vec<Value> = turn_ends(&d.events("cu1").await)
        .iter()
        .map(|t| t["status"].clone())
        .collect();
    assert_eq!(
        statuses,
        vec![json!("cancelled"), json!("cancelled"), json!("completed")]
    );
    d.stop();
}

#[tokio::test]
async fn a_question_the_client_does_not_take_is_declined_after_the_question_timeout() {
    let d = daemon(&["--ws-question-timeout", "1"]);
    let mut ws = Ws::connect(&d).await;
    ws.identify("nq1").await;
    let started = Instant::now();
    let got = ws
        .prompt(json!({"promptId": "p-ask", "prompt": "ask"}))
        .await;
    // Not shown the question (no `question` extension), the prompt still ends: skipped.
    assert!(
        got.iter().all(|m| m["data"]["type"] != "question"),
        "{got:?}"
    );
    let response = last_data(&got);
    assert_eq!(response["type"], "prompt-response", "{response}");
    assert!(
        response["output"]["value"]
            .as_str()
            .is_some_and(|v| v.to_lowercase().contains("skip")),
        "{response}"
    );
    assert!(started.elapsed() >= Duration::from_secs(1));
    let events = d.events("nq1").await;
    let resolved = of_type(&events, "question.resolved");
    assert_eq!(resolved.len(), 1, "{resolved:?}");
    assert_eq!(resolved[0]["data"]["status"], "rejected");
    d.stop();
}

#[tokio::test]
async fn the_older_generations_user_input_gets_an_action_error_naming_the_generation() {
    let d = daemon(&[]);
    let mut ws = Ws::connect(&d).await;
    let txid = ws
        .action(
            json!({"type": "user-input", "fingerprintId": "fp", "authToken": "k",
            "userInputId": "u1", "messages": [], "fileContext": {}, "changesAlreadyApplied": []}),
        )
        .await;
    ws.acked(txid).await;
    let error = ws.recv().await;
    let data = &error["data"];
    assert_eq!(data["type"], "action-error", "{error}");
    assert_eq!(data["error"], "unsupported_client");
    let message = data["message"].as_str().expect("message");
    assert!(
        message.contains("`user-input`") && message.contains("@codebuff/sdk 0.3"),
        "{message}"
    );
    assert!(data.get("remainingBalance").is_none(), "{data}");
    // The connection goes on.
    ws.send_text(r#"{"type":"ping","txid":99}"#).await;
    ws.acked(99).await;
    d.stop();
}
