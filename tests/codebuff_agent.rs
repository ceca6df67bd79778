//! The daemon with the real Codebuff adapter (`adapters/codebuff`, on `@codebuff/sdk`) against the
//! scripted fake Codebuff backend: every turn spawns the real Node adapter, whose SDK talks to the
//! fake backend over real HTTP, edits real files and runs real commands.
//!
//! Needs `npm ci` in `adapters/codebuff` (CI runs it before the tests).

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::codebuff::{create_codebuff, credits, start_daemon, start_daemon_with, LIMIT};
use support::daemon::{cmdline, TempDir};
use support::events::{assistant_texts, completed_items, deltas, of_type, part};
use support::fake_backend::{adapter_dir, FakeBackend};
use support::invariants::assert_well_formed;

fn tool_name(item: &Value) -> &str {
    part(item, "tool_call")
        .and_then(|p| p["name"].as_str())
        .unwrap_or("")
}

/// The `codebuff.start` status items' details, in order.
fn start_details(events: &[Value]) -> Vec<String> {
    completed_items(events)
        .into_iter()
        .filter_map(|i| part(i, "status"))
        .filter(|p| p["label"] == "codebuff.start")
        .filter_map(|p| p["detail"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_text_turn_streams_the_answer_and_reports_its_cost() {
    let backend = FakeBackend::start("text");
    let home = TempDir::new("cb-home");
    let work = TempDir::new("cb-work");
    let d = start_daemon(&backend, &home, &[]);
    create_codebuff(&d, "t1", work.path()).await;
    d.message("t1", "Say hello.").await;
    let events = d.wait_turns_ended("t1", 1).await;

    let want = "Hello from the fake model.";
    assert_eq!(assistant_texts(&events), vec![want]);
    let message = completed_items(&events)
        .into_iter()
        .find(|i| i["kind"] == "message" && i["role"] == "assistant")
        .expect("an assistant message");
    let id = message["item_id"].as_str().unwrap();
    assert_eq!(deltas(&events, id).concat(), want);
    assert!(
        of_type(&events, "item.delta")
            .iter()
            .filter(|e| e["data"]["item_id"] == id)
            .count()
            > 1,
        "the answer streams in several deltas"
    );

    let ended = of_type(&events, "turn.ended");
    assert_eq!(ended.len(), 1);
    let meta = &ended[0]["data"]["metadata"];
    assert_eq!(meta["status"], "completed", "{meta}");
    let want_credits = credits(0.05);
    assert_eq!(meta["cost"]["credits"].as_f64(), Some(want_credits));
    assert_eq!(meta["cost"]["usd"].as_f64(), Some(want_credits / 100.0));

    // The user's prompt is the turn's first item.
    let user = completed_items(&events)
        .into_iter()
        .find(|i| i["role"] == "user")
        .expect("the user item");
    assert_eq!(part(user, "text").unwrap()["text"], "Say hello.");

    // The native session id is the adapter's `start.sessionId`.
    let native = events
        .last()
        .and_then(|e| e["native_session_id"].as_str())
        .expect("native_session_id on the agent's events")
        .to_owned();
    assert!(!native.is_empty());
    let info = d.info("t1").await;
    assert_eq!(info["nativeSessionId"], native.as_str());
    assert_eq!(info["cost"]["credits"].as_f64(), Some(want_credits));
    assert_eq!(info["cost"]["usd"].as_f64(), Some(want_credits / 100.0));
    assert_eq!(info["ended"], false);
    assert_eq!(info["turns"], 1);
    // The turn is over for whoever saw its `turn.ended`, even while the adapter winds down.
    assert_eq!(info["status"], "idle");

    // The SDK really talked to the backend, with the key.
    let chats = backend.requests().await;
    let chat: Vec<&Value> = chats
        .iter()
        .filter(|r| r["path"] == "/api/v1/chat/completions")
        .collect();
    assert_eq!(chat.len(), 1);
    assert_eq!(chat[0]["authorization"], "Bearer test-key");
    d.stop();
    assert_well_formed(&events);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_turn_edits_real_files_and_reports_diffs_and_failures() {
    let backend = FakeBackend::start("tools");
    let home = TempDir::new("cb-home");
    let work = TempDir::new("cb-work");
    std::fs::create_dir_all(work.path().join("src")).unwrap();
    let greet = "export function greet(name) {\n  return 'Hello ' + name\n}\n";
    std::fs::write(work.path().join("src/greet.js"), greet).unwrap();
    let d = start_daemon(&backend, &home, &[]);
    create_codebuff(&d, "t2", work.path()).await;
    d.message("t2", "Edit the project.").await;
    let events = d.wait_turns_ended("t2", 1).await;

    // The files in the session directory really changed.
    assert_eq!(
        std::fs::read_to_string(work.path().join("notes/todo.md")).unwrap(),
        "# TODO\n\n- write tests\n"
    );
    assert_eq!(
        std::fs::read_to_string(work.path().join("src/greet.js")).unwrap(),
        "export function greet(name) {\n  return 'Hello, ' + name\n}\n"
    );
    assert!(!work.path().join("missing.txt").exists());

    let items = completed_items(&events);
    let calls: Vec<&str> = items
        .iter()
        .filter(|i| i["kind"] == "tool_call")
        .map(|i| tool_name(i))
        .collect();
    assert_eq!(
        calls,
        [
            "write_file",
            "str_replace",
            "run_terminal_command",
            "str_replace",
            "run_terminal_command"
        ]
    );
    let results: Vec<&&Value> = items
        .iter()
        .filter(|i| i["kind"] == "tool_result")
        .collect();
    assert_eq!(results.len(), 5);
    // Each result answers the call with the same native id, in the same order.
    let call_ids: Vec<&Value> = items
        .iter()
        .filter(|i| i["kind"] == "tool_call")
        .map(|i| &i["native_item_id"])
        .collect();
    let result_ids: Vec<&Value> = results.iter().map(|i| &i["native_item_id"]).collect();
    assert_eq!(call_ids, result_ids);

    let file_ref = |i: &Value| part(i, "file_ref").cloned();
    let write = file_ref(results[0]).expect("write_file result has a file_ref");
    assert_eq!(write["path"], "notes/todo.md");
    assert_eq!(write["action"], "write");
    assert_eq!(write["diff"], "# TODO\n\n- write tests\n");
    assert_eq!(results[0]["status"], "completed");
    let patch = file_ref(results[1]).expect("str_replace result has a file_ref");
    assert_eq!(patch["path"], "src/greet.js");
    assert_eq!(patch["action"], "patch");
    let diff = patch["diff"].as_str().expect("a diff");
    assert!(diff.contains("-  return 'Hello ' + name"), "{diff}");
    assert!(diff.contains("+  return 'Hello, ' + name"), "{diff}");
    assert_eq!(results[1]["status"], "completed");

    // The command's real output.
    let cmd_output = part(results[2], "tool_result").unwrap()["output"]
        .as_str()
        .unwrap();
    let cmd: Value = serde_json::from_str(cmd_output).unwrap();
    assert_eq!(cmd[0]["value"]["exitCode"], 0);
    assert_eq!(
        cmd[0]["value"]["stdout"],
        "export function greet(name) {\n  return 'Hello, ' + name\n}\n# TODO\n\n- write tests\n"
    );

    // The edit of a missing file failed.
    assert_eq!(results[3]["status"], "failed", "{}", results[3]);
    let failed_output = part(results[3], "tool_result").unwrap()["output"]
        .as_str()
        .unwrap();
    assert!(failed_output.contains("errorMessage"), "{failed_output}");
    assert!(file_ref(results[3]).is_none() || file_ref(results[3]).unwrap()["diff"].is_null());

    // A command exiting non-zero is a completed call whose output says so.
    let failing: Value = serde_json::from_str(
        part(results[4], "tool_result").unwrap()["output"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(failing[0]["value"]["exitCode"], 3);
    assert_eq!(failing[0]["value"]["stderr"], "failing\n");

    assert_eq!(
        assistant_texts(&events),
        vec![
            "I will edit the files.",
            "Edited two files and ran the commands."
        ]
    );
    let ended = of_type(&events, "turn.ended");
    assert_eq!(ended[0]["data"]["metadata"]["status"], "completed");
    assert_eq!(
        ended[0]["data"]["metadata"]["cost"]["credits"].as_f64(),
        Some(credits(0.05) + credits(0.02))
    );
    d.stop();
    assert_well_formed(&events);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subagents_items_link_to_it_through_parent_id() {
    let backend = FakeBackend::start("subagent");
    let home = TempDir::new("cb-home");
    let work = TempDir::new("cb-work");
    std::fs::write(
        work.path().join("README.md"),
        "# Demo\n\nThis project greets people.\n",
    )
    .unwrap();
    let d = start_daemon(&backend, &home, &[]);
    create_codebuff(&d, "t3", work.path()).await;
    d.message("t3", "Ask the helper to read README.md.").await;
    let events = d.wait_turns_ended("t3", 1).await;

    let items = completed_items(&events);
    let spawn = items
        .iter()
        .find(|i| i["kind"] == "tool_call" && tool_name(i) == "spawn_agents")
        .expect("the spawn_agents call");
    assert!(spawn["parent_id"].is_null());
    let sub = items
        .iter()
        .find(|i| {
            i["kind"] == "status" && part(i, "status").is_some_and(|p| p["label"] == "subagent")
        })
        .expect("the subagent's status item");
    assert!(sub["parent_id"].is_null());
    let sub_id = sub["item_id"].as_str().unwrap();
    let sub_native = sub["native_item_id"].as_str().expect("the subagent's id");

    // The subagent's own text, read_files call and result hang under it.
    let children: Vec<&&Value> = items.iter().filter(|i| i["parent_id"] == sub_id).collect();
    let kinds: Vec<(&str, &str)> = children
        .iter()
        .map(|i| (i["kind"].as_str().unwrap(), tool_name(i)))
        .collect();
    assert_eq!(
        kinds,
        [
            ("message", ""),
            ("tool_call", "read_files"),
            ("tool_result", ""),
            ("message", "")
        ]
    );
    assert_eq!(
        part(children[3], "text").unwrap()["text"],
        "The README says this project greets people."
    );
    let read = part(children[2], "tool_result").unwrap()["output"]
        .as_str()
        .unwrap();
    assert!(read.contains("This project greets people."), "{read}");
    // The subagent started inside the spawn call and finished before its result.
    let pos = |ty: &str, id: &str| {
        events
            .iter()
            .position(|e| e["type"] == ty && e["data"]["item"]["item_id"] == id)
            .unwrap()
    };
    let spawn_id = spawn["item_id"].as_str().unwrap();
    let spawn_result = items
        .iter()
        .find(|i| i["kind"] == "tool_result" && i["native_item_id"] == spawn["native_item_id"])
        .expect("the spawn_agents result");
    assert!(spawn_result["parent_id"].is_null());
    assert!(pos("item.completed", spawn_id) < pos("item.started", sub_id));
    assert!(
        pos("item.completed", sub_id)
            < pos("item.started", spawn_result["item_id"].as_str().unwrap())
    );
    // The root agent's items have no parent; the final answer is the root's.
    let root_texts: Vec<&str> = items
        .iter()
        .filter(|i| i["kind"] == "message" && i["role"] == "assistant" && i["parent_id"].is_null())
        .filter_map(|i| part(i, "text").and_then(|p| p["text"].as_str()))
        .collect();
    assert_eq!(
        root_texts,
        [
            "Spawning the helper.",
            "The helper says the project greets people."
        ]
    );
    // The subagent's request went to the backend as a child run of the root run.
    let runs: Vec<Value> = backend
        .requests()
        .await
        .into_iter()
        .filter(|r| r["path"] == "/api/v1/agent-runs" && r["body"]["action"] == "START")
        .map(|r| r["body"].clone())
        .collect();
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_eq!(runs[1]["ancestorRunIds"].as_array().map(Vec::len), Some(1));
    assert!(!sub_native.is_empty());
    d.stop();
    assert_well_formed(&events);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_user_is_answered_and_rejected_through_the_api_while_the_turn_waits() {
    let backend = FakeBackend::start("ask_user_reply_then_reject");
    let home = TempDir::new("cb-home");
    let work = TempDir::new("cb-work");
    // The adapter would skip the question by itself after this long; the test answers sooner.
    let d = start_daemon(
        &backend,
        &home,
        &[("CODEBUFF_QUESTION_TIMEOUT_SECONDS", "300")],
    );
    create_codebuff(&d, "t4", work.path()).await;
    d.message("t4", "Set up the project.").await;

    // The first question: answered.
    let events = d
        .wait_for("t4", LIMIT, |e| e["type"] == "question.requested")
        .await;
    let asked = of_type(&events, "question.requested");
    assert_eq!(asked.len(), 1);
    let q1 = &asked[0]["data"];
    let qid1 = q1["question_id"].as_str().unwrap().to_owned();
    let call = completed_items(&events)
        .into_iter()
        .find(|i| i["kind"] == "tool_call" && tool_name(i) == "ask_user")
        .expect("the ask_user call");
    assert_eq!(call["native_item_id"], qid1.as_str());
    assert_eq!(part(call, "tool_call").unwrap()["call_id"], qid1.as_str());
    assert_eq!(q1["prompt"], "Which test framework should I use?");
    assert_eq!(q1["options"], json!(["vitest", "jest"]));
    assert!(of_type(&events, "turn.ended").is_empty(), "the turn waits");
    d.wait_status("t4", "awaiting_input", LIMIT).await;
    // The model has been asked once so far.
    assert_eq!(backend.chat_requests().await.len(), 1);
    let resp = d
        .post(
            &format!("/v1/sessions/t4/questions/{qid1}/reply"),
            json!({"answers": [["vitest"]]}),
        )
        .await;
    assert_eq!(
        resp.status(),
        204,
        "{}",
        resp.text().await.unwrap_or_default()
    );

    // The second question: rejected.
    let events = d
        .wait_for("t4", LIMIT, |e| {
            e["type"] == "question.requested" && e["data"]["question_id"] != qid1.as_str()
        })
        .await;
    let q2 = of_type(&events, "question.requested")[1]["data"].clone();
    let qid2 = q2["question_id"].as_str().unwrap().to_owned();
    assert_eq!(q2["prompt"], "Which CI service should I configure?");
    // The answer reached the model: the next chat request carries it.
    let chats = backend.chat_requests().await;
    assert_eq!(chats.len(), 2);
    assert!(!chats[0].to_string().contains("selectedOption"));
    let second = chats[1].to_string();
    assert!(
        second.contains("selectedOption") && second.contains("vitest"),
        "the answer reaches the model: {second}"
    );
    let resp = d
        .post_empty(&format!("/v1/sessions/t4/questions/{qid2}/reject"))
        .await;
    assert_eq!(
        resp.status(),
        204,
        "{}",
        resp.text().await.unwrap_or_default()
    );

    let events = d.wait_turns_ended("t4", 1).await;
    let ended = of_type(&events, "turn.ended");
    assert_eq!(ended[0]["data"]["metadata"]["status"], "completed");
    assert_eq!(assistant_texts(&events), vec!["Using vitest, no CI."]);

    // Exactly one question.resolved per question, with the right outcome.
    let resolved = of_type(&events, "question.resolved");
    let for_q = |qid: &str| -> Vec<&Value> {
        resolved
            .iter()
            .filter(|e| e["data"]["question_id"] == qid)
            .map(|e| &e["data"])
            .collect()
    };
    let r1 = for_q(&qid1);
    assert_eq!(r1.len(), 1, "{resolved:?}");
    assert_eq!(r1[0]["status"], "answered");
    assert_eq!(r1[0]["answers"], json!([["vitest"]]));
    let r2 = for_q(&qid2);
    assert_eq!(r2.len(), 1, "{resolved:?}");
    assert_eq!(r2[0]["status"], "rejected");
    assert_eq!(resolved.len(), 2);

    // The tool results: the answer, then skipped.
    let result_of = |qid: &str| -> String {
        let item = completed_items(&events)
            .into_iter()
            .find(|i| i["kind"] == "tool_result" && i["native_item_id"] == qid)
            .expect("the ask_user result");
        part(item, "tool_result").unwrap()["output"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let answered: Value = serde_json::from_str(&result_of(&qid1)).unwrap();
    assert_eq!(
        answered[0]["value"],
        json!({"answers": [{"questionIndex": 0, "selectedOption": "vitest"}]})
    );
    let skipped: Value = serde_json::from_str(&result_of(&qid2)).unwrap();
    assert_eq!(skipped[0]["value"], json!({"skipped": true}));
    // …and the model saw the skip.
    let chats = backend.chat_requests().await;
    assert_eq!(chats.len(), 3);
    assert!(chats[2].to_string().contains("skipped"));
    assert!(!chats[1].to_string().contains("skipped"));

    // The questions are gone: answering again is an error.
    let resp = d
        .post(
            &format!("/v1/sessions/t4/questions/{qid1}/reply"),
            json!({"answers": [["jest"]]}),
        )
        .await;
    assert_eq!(resp.status(), 400);
    let info = d.info("t4").await;
    assert_eq!(info["status"], "idle");
    let events = d.events("t4").await;
    d.stop();
    assert_well_formed(&events);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_message_continues_the_conversation() {
    let backend = FakeBackend::start("continue");
    let home = TempDir::new("cb-home");
    let work = TempDir::new("cb-work");
    // A wrapper around the real adapter that keeps what each process read on stdin (its turn
    // line first), one file per process: the daemon hands turns over on stdin.
    let bin = TempDir::new("cb-bin");
    let wrapper = bin.path().join("codebuff-agent");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$*\" > \"{dir}/argv-$$\"\ntee \"{dir}/stdin-$$\" | node '{adapter}' \"$@\"\n",
            dir = bin.path().display(),
            adapter = adapter_dir().join("bin/codebuff-agent.mjs").display()
        ),
    )
    .unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let d = start_daemon_with(
        &backend,
        &home,
        &[],
        &["--agent-command".to_owned(), wrapper.display().to_string()],
    );
    create_codebuff(&d, "t5", work.path()).await;
    d.message("t5", "Remember the number 42.").await;
    d.message("t5", "Which number did I mention?").await;
    let events = d.wait_turns_ended("t5", 2).await;

    let ended = of_type(&events, "turn.ended");
    assert_eq!(ended.len(), 2);
    for e in &ended {
        assert_eq!(e["data"]["metadata"]["status"], "completed", "{e}");
    }
    assert_eq!(
        assistant_texts(&events),
        vec!["OK, I will remember 42.", "You asked me to remember 42."]
    );
    let native = d.info("t5").await["nativeSessionId"]
        .as_str()
        .expect("nativeSessionId")
        .to_owned();
    // Both turns' events carry the same native session id.
    let turn2_start = events
        .iter()
        .rposition(|e| e["type"] == "turn.started")
        .unwrap();
    assert!(events[turn2_start..]
        .iter()
        .filter(|e| e["source"] == "agent")
        .all(|e| e["native_session_id"] == native.as_str()));

    // Every process was started as `--stream-json --stdin-turn`, and the second turn's line
    // resumes the first turn's conversation. (Unused warm spares read nothing.)
    let mut turns = Vec::new();
    let files: Vec<String> = std::fs::read_dir(bin.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    for entry in std::fs::read_dir(bin.path()).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        if name.starts_with("argv-") {
            assert_eq!(text.trim(), "--stream-json --stdin-turn", "{name}");
        } else if let Some(line) = name
            .starts_with("stdin-")
            .then(|| text.lines().next())
            .flatten()
        {
            let turn: Value = serde_json::from_str(line).expect("a turn line");
            assert_eq!(turn["type"], "turn");
            assert_eq!(turn["apiKey"], "test-key", "the key comes in the turn line");
            turns.push(turn);
        }
    }
    turns.sort_by_key(|t| t["continue"].is_string());
    assert_eq!(turns.len(), 2, "{turns:?} in {files:?}");
    assert_eq!(turns[0]["prompt"], "Remember the number 42.");
    assert_eq!(turns[0]["continue"], Value::Null);
    assert_eq!(turns[1]["prompt"], "Which number did I mention?");
    assert_eq!(turns[1]["continue"], native.as_str());

    // The backend's chat request of the second turn carries the first turn's messages.
    let chats = backend.chat_requests().await;
    assert_eq!(chats.len(), 2);
    let second = chats[1].to_string();
    assert!(second.contains("Remember the number 42."), "{second}");
    assert!(second.contains("OK, I will remember 42."), "{second}");
    assert!(second.contains("Which number did I mention?"), "{second}");
    assert!(!chats[0].to_string().contains("Which number did I mention?"));

    // The second start reports the carried history.
    let starts = start_details(&events);
    assert_eq!(starts.len(), 2, "{starts:?}");
    assert!(starts[0].contains("messageHistoryLength=0"), "{starts:?}");
    let history: u64 = starts[1]
        .rsplit("messageHistoryLength=")
        .next()
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no history length in {:?}", starts[1]));
    assert!(history > 0, "{starts:?}");

    let info = d.info("t5").await;
    assert_eq!(info["turns"], 2);
    assert_eq!(info["status"], "idle");
    assert_eq!(info["cost"]["credits"].as_f64(), Some(2.0 * credits(0.01)));
    d.stop();
    assert_well_formed(&events);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminate_mid_turn_kills_the_adapter_and_ends_the_session() {
    let backend = FakeBackend::start("stall");
    let home = TempDir::new("cb-home");
    let work = TempDir::new("cb-work");
    let d = start_daemon(&backend, &home, &[]);
    create_codebuff(&d, "t7", work.path()).await;
    d.message("t7", "Take your time.").await;
    // The reply streams its one chunk, then stalls.
    d.wait_for("t7", LIMIT, |e| {
        e["type"] == "item.delta" && e["data"]["delta"] == "Working"
    })
    .await;
    let running = d.agents().await;
    assert!(
        running
            .iter()
            .any(|p| cmdline(*p).contains("codebuff-agent.mjs")),
        "the adapter runs: {:?}",
        running.iter().map(|p| cmdline(*p)).collect::<Vec<_>>()
    );
    assert_eq!(d.info("t7").await["status"], "running");

    let resp = d.post_empty("/v1/sessions/t7/terminate").await;
    assert_eq!(resp.status(), 204);
    let events = d
        .wait_for("t7", LIMIT, |e| e["type"] == "session.ended")
        .await;
    let left = d.wait_no_agents(Duration::from_secs(20)).await;
    assert!(
        left.is_empty(),
        "the adapter outlived the terminate: {:?}",
        left.iter().map(|p| cmdline(*p)).collect::<Vec<_>>()
    );

    let ended = of_type(&events, "turn.ended");
    assert_eq!(ended.len(), 1);
    let status = ended[0]["data"]["metadata"]["status"].as_str().unwrap();
    assert_eq!(status, "cancelled");
    let last = events.last().unwrap();
    assert_eq!(last["type"], "session.ended");
    assert_eq!(last["data"]["reason"], "terminated");
    assert_eq!(last["data"]["terminated_by"], "daemon");
    // The partial answer is kept; its item is closed.
    let partial = completed_items(&events)
        .into_iter()
        .find(|i| i["kind"] == "message" && i["role"] == "assistant")
        .expect("the partial answer's item is completed");
    assert_eq!(part(partial, "text").unwrap()["text"], "Working");

    // Terminate is idempotent; messages are refused.
    let resp = d.post_empty("/v1/sessions/t7/terminate").await;
    assert_eq!(resp.status(), 204);
    let resp = d
        .post("/v1/sessions/t7/messages", json!({"message": "More."}))
        .await;
    assert_eq!(resp.status(), 400);
    let events = d.events("t7").await;
    assert_eq!(of_type(&events, "session.ended").len(), 1);
    d.stop();
    assert_well_formed(&events);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_credential_at_all_refuses_the_session_saying_where_to_look_and_get_one() {
    let backend = FakeBackend::start("text");
    let home = TempDir::new("cb-home");
    let work = TempDir::new("cb-work");
    // An empty CODEBUFF_API_KEY counts as none (and hides any key the test runner has).
    let d = start_daemon(&backend, &home, &[("CODEBUFF_API_KEY", "")]);
    let agents: Value = d.get("/v1/agents").await.json().await.unwrap();
    let codebuff = agents["agents"]
        .as_array()
        .and_then(|a| a.iter().find(|a| a["id"] == "codebuff"))
        .expect("codebuff in /v1/agents");
    assert_eq!(codebuff["credentialsAvailable"], false);
    let resp = d
        .post(
            "/v1/sessions/t9",
            json!({"agent": "codebuff", "directory": work.path().display().to_string()}),
        )
        .await;
    assert_eq!(resp.status(), 400);
    let problem: Value = resp.json().await.unwrap();
    assert_eq!(
        problem["type"],
        "urn:sandbox-agent:error:credentials_missing"
    );
    let detail = problem["detail"].as_str().unwrap_or("");
    assert!(
        detail.contains("CODEBUFF_API_KEY") && detail.contains("apiKey"),
        "the problem says where keys are looked for: {detail:?}"
    );
    let looked_in = problem["details"]["lookedIn"].to_string();
    assert!(looked_in.contains("credentials.json"), "{looked_in}");
    assert_eq!(
        problem["details"]["getAKey"],
        "https://www.codebuff.com/api-keys"
    );
    // Nothing was created, no agent ran; a session with its own key is accepted.
    assert_eq!(d.get("/v1/sessions/t9").await.status(), 404);
    assert!(backend.requests().await.is_empty());
    d.create(
        "t9",
        json!({"agent": "codebuff", "directory": work.path().display().to_string(),
               "apiKey": "its-own-key"}),
    )
    .await;
    d.message("t9", "Say hello.").await;
    let events = d.wait_turns_ended("t9", 1).await;
    assert_eq!(
        of_type(&events, "turn.ended")[0]["data"]["metadata"]["status"],
        "completed"
    );
    let requests = backend.requests().await;
    assert!(requests
        .iter()
        .any(|r| r["authorization"] == "Bearer its-own-key"));
    d.stop();
    assert_well_formed(&events);
}
