//! The daemon with the `mock` agent, end to end over real HTTP on loopback: every mock scenario,
//! the turn and session lifecycle (queueing, cancel, terminate, SessionInfo, cost), concurrent
//! sessions, shutdown, and that no agent process outlives its turn (the question relay is
//! `mock_questions.rs`; the helpers both use, `support/mock.rs`).
//!
//! Each test starts its own `codebuffd server` and ends with `Daemon::stop`, which checks that the
//! daemon exits 0 and leaves no process behind. Every session's events are checked against the
//! lifecycle rules with `assert_well_formed`.

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::daemon::{binary, session_members, Daemon, DaemonOptions, TempDir};
use support::events::{
    assistant_texts, completed_items, count, deltas, of_type, part, turn_ends, types,
};
use support::invariants::assert_well_formed;
use support::mock::{
    all_events, assert_cost, assert_no_agent_left, assert_problem, completed_kind, credits,
    mock_session, one_turn, position, post, read, wait_agent_started, Tail, WAIT,
};

// ----- 1. scenarios -------------------------------------------------------------------------

#[tokio::test]
async fn echo_replies_with_the_rest_of_the_prompt() {
    let d = Daemon::start();
    let events = one_turn(&d, "echo  hello, echo world").await;
    assert_eq!(assistant_texts(&events), vec!["hello, echo world"]);
    let user: Vec<&Value> = completed_kind(&events, "message")
        .into_iter()
        .filter(|i| i["role"] == "user")
        .collect();
    assert_eq!(user.len(), 1);
    assert_eq!(
        part(user[0], "text").unwrap()["text"],
        "echo  hello, echo world"
    );
    let end = turn_ends(&events)[0];
    assert_eq!(end["status"], "completed");
    assert_cost(&end["cost"], 1.25);
    assert_well_formed(&events);
    d.stop();
}

#[tokio::test]
async fn stream_deltas_concatenate_to_the_completed_text() {
    let d = Daemon::start();
    mock_session(&d, "s", json!({})).await;
    let text = "the quick brown fox jumps over the lazy dog";
    d.message("s", &format!("stream {text}")).await;
    let events = Tail::new(&d, "s").turns_ended(1).await;
    let items: Vec<&Value> = completed_kind(&events, "message")
        .into_iter()
        .filter(|i| i["role"] == "assistant")
        .collect();
    assert_eq!(items.len(), 1);
    let item = items[0];
    assert_eq!(part(item, "text").unwrap()["text"], text);
    let ds = deltas(&events, item["item_id"].as_str().unwrap());
    assert!(ds.len() >= 2, "several deltas, got {ds:?}");
    assert_eq!(ds.concat(), text);
    assert_eq!(turn_ends(&events)[0]["status"], "completed");
    assert_well_formed(&events);
    d.stop();
}

#[tokio::test]
async fn reasoning_streams_and_completes_before_the_answer() {
    let d = Daemon::start();
    let events = one_turn(&d, "reasoning The answer is blue.").await;
    let reasoning: Vec<&Value> = completed_items(&events)
        .into_iter()
        .filter(|i| part(i, "reasoning").is_some())
        .collect();
    assert_eq!(reasoning.len(), 1, "one reasoning item");
    let r = reasoning[0];
    let r_id = r["item_id"].as_str().unwrap();
    let r_text = part(r, "reasoning").unwrap()["text"].as_str().unwrap();
    assert_eq!(r_text, "Let me think about the question step by step.");
    let ds = deltas(&events, r_id);
    assert!(ds.len() >= 2, "reasoning deltas {ds:?}");
    assert_eq!(ds.concat(), r_text);
    assert_eq!(assistant_texts(&events), vec!["The answer is blue."]);
    let answer_id = completed_kind(&events, "message")
        .into_iter()
        .find(|i| part(i, "text").is_some_and(|p| p["text"] == "The answer is blue."))
        .unwrap()["item_id"]
        .clone();
    let r_done = position(&events, |e| {
        e["type"] == "item.completed" && e["data"]["item"]["item_id"] == r_id
    });
    let answer_start = position(&events, |e| {
        e["type"] == "item.started" && e["data"]["item"]["item_id"] == answer_id
    });
    assert!(
        r_done < answer_start,
        "reasoning completes before the answer starts"
    );
    assert_well_formed(&events);
    d.stop();
}

#[tokio::test]
async fn tools_write_real_files_and_report_their_results() {
    let d = Daemon::start();
    let dir = TempDir::new("tools");
    mock_session(&d, "s", json!({"directory": dir.path()})).await;
    d.message("s", "tools").await;
    let events = Tail::new(&d, "s").turns_ended(1).await;
    assert_eq!(turn_ends(&events)[0]["status"], "completed");

    // The calls, with their file references.
    let calls = completed_kind(&events, "tool_call");
    let call = |name: &str| {
        *calls
            .iter()
            .find(|i| part(i, "tool_call").is_some_and(|p| p["name"] == name))
            .unwrap_or_else(|| panic!("a {name} call"))
    };
    let names: Vec<&str> = calls
        .iter()
        .filter_map(|i| part(i, "tool_call")?["name"].as_str())
        .collect();
    assert_eq!(names, ["write_file", "str_replace", "run_terminal_command"]);
    let write = call("write_file");
    let write_ref = part(write, "file_ref").expect("write_file has a file_ref");
    assert_eq!(write_ref["path"], "hello.txt");
    assert_eq!(write_ref["action"], "write");
    let patch = call("str_replace");
    let patch_ref = part(patch, "file_ref").expect("str_replace has a file_ref");
    assert_eq!(patch_ref["path"], "missing.txt");
    assert_eq!(patch_ref["action"], "patch");
    let run = call("run_terminal_command");
    let args: Value = serde_json::from_str(
        part(run, "tool_call").unwrap()["arguments"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(args["command"], "echo mock-tools");

    // The write really happened in the session's directory.
    assert_eq!(
        read(&dir.path().join("hello.txt")),
        "Hello from the mock agent!\n"
    );
    assert!(!dir.path().join("missing.txt").exists());

    // The results, matched to their calls.
    let results = completed_kind(&events, "tool_result");
    assert_eq!(results.len(), 3);
    let result_of = |call: &Value| {
        let id = &part(call, "tool_call").unwrap()["call_id"];
        *results
            .iter()
            .find(|r| &part(r, "tool_result").unwrap()["call_id"] == id)
            .unwrap_or_else(|| panic!("a result for {id}"))
    };
    let failed: Vec<&&Value> = results.iter().filter(|r| r["status"] == "failed").collect();
    assert_eq!(failed.len(), 1, "exactly one failed result");
    assert_eq!(result_of(patch)["status"], "failed");
    let patch_out = part(result_of(patch), "tool_result").unwrap()["output"]
        .as_str()
        .unwrap();
    assert!(patch_out.contains("does not exist"), "{patch_out}");
    let write_result = result_of(write);
    assert_eq!(write_result["status"], "completed");
    let write_result_ref = part(write_result, "file_ref").expect("the write result's file_ref");
    assert_eq!(write_result_ref["path"], "hello.txt");
    let run_result = result_of(run);
    assert_eq!(run_result["status"], "completed");
    let out = part(run_result, "tool_result").unwrap()["output"]
        .as_str()
        .unwrap();
    assert!(out.contains("mock-tools"), "the command's output: {out}");
    assert_eq!(
        assistant_texts(&events).last().unwrap(),
        "Wrote hello.txt, could not patch missing.txt, and ran the command."
    );

    // Nothing the turn started (the agent, its shell) is left.
    d.wait_status("s", "idle", WAIT).await;
    assert_no_agent_left(&d).await;
    assert_well_formed(&events);
    d.stop();
}

#[tokio::test]
async fn subagent_items_are_children_of_its_status_item() {
    let d = Daemon::start();
    let dir = TempDir::new("subagent");
    std::fs::write(dir.path().join("hello.txt"), "Hi from the test\n").unwrap();
    mock_session(&d, "s", json!({"directory": dir.path()})).await;
    d.message("s", "subagent").await;
    let events = Tail::new(&d, "s").turns_ended(1).await;
    let subs: Vec<&Value> = completed_kind(&events, "status")
        .into_iter()
        .filter(|i| part(i, "status").is_some_and(|p| p["label"] == "subagent"))
        .collect();
    assert_eq!(subs.len(), 1, "one subagent status item");
    let sub = subs[0];
    assert_eq!(part(sub, "status").unwrap()["detail"], "File Picker");
    assert_eq!(sub["status"], "completed");
    let sub_id = sub["item_id"].as_str().unwrap();
    let children: Vec<&Value> = completed_items(&events)
        .into_iter()
        .filter(|i| i["parent_id"] == sub_id)
        .collect();
    let kinds: Vec<&str> = children.iter().filter_map(|i| i["kind"].as_str()).collect();
    assert_eq!(kinds, ["tool_call", "tool_result", "message"]);
    assert_eq!(
        part(children[0], "tool_call").unwrap()["name"],
        "read_files"
    );
    let output = part(children[1], "tool_result").unwrap()["output"]
        .as_str()
        .unwrap();
    assert!(output.contains("Hi from the test"), "{output}");
    assert_eq!(
        part(children[2], "text").unwrap()["text"],
        "hello.txt holds the greeting."
    );
    // The children are started and completed while the subagent is open.
    let sub_started = position(&events, |e| {
        e["type"] == "item.started" && e["data"]["item"]["item_id"] == sub_id
    });
    let sub_done = position(&events, |e| {
        e["type"] == "item.completed" && e["data"]["item"]["item_id"] == sub_id
    });
    for child in &children {
        let at = position(&events, |e| {
            e["type"] == "item.completed" && e["data"]["item"]["item_id"] == child["item_id"]
        });
        assert!(
            sub_started < at && at < sub_done,
            "{child} inside the subagent"
        );
    }
    // The root agent's items have no parent.
    let root_texts: Vec<&Value> = completed_kind(&events, "message")
        .into_iter()
        .filter(|i| i["role"] == "assistant" && i["parent_id"].is_null())
        .collect();
    assert_eq!(root_texts.len(), 2);
    assert_eq!(turn_ends(&events)[0]["status"], "completed");
    assert_well_formed(&events);
    d.stop();
}

#[tokio::test]
async fn error_event_is_recorded_and_the_turn_completes() {
    let d = Daemon::start();
    let events = one_turn(&d, "error").await;
    let errors = of_type(&events, "error");
    assert_eq!(errors.len(), 1);
    let e = &errors[0]["data"];
    assert!(e["message"].as_str().unwrap().contains("overloaded"), "{e}");
    assert_eq!(e["code"], "provider-error");
    let err_at = position(&events, |e| e["type"] == "error");
    let end_at = position(&events, |e| e["type"] == "turn.ended");
    assert!(err_at < end_at);
    assert_eq!(turn_ends(&events)[0]["status"], "completed");
    assert_eq!(
        assistant_texts(&events),
        vec!["Recovered after a provider error."]
    );
    assert_well_formed(&events);
    d.stop();
}

#[tokio::test]
async fn a_failed_run_fails_its_turn_and_the_session_goes_on() {
    let d = Daemon::start();
    mock_session(&d, "s", json!({})).await;
    d.message("s", "fail").await;
    let mut t = Tail::new(&d, "s");
    let events = t.turns_ended(1).await;
    let end = turn_ends(&events)[0];
    assert_eq!(end["status"], "failed", "{end}");
    assert_eq!(end["exit_code"], 3, "{end}");
    assert_eq!(end["cost_reported"], false);
    assert_cost(&end["cost"], 0.0);
    let errors = of_type(&events, "error");
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0]["data"]["code"], "backend_error");
    assert_eq!(count(&events, "session.ended"), 0);

    let i = d.wait_status("s", "idle", WAIT).await;
    assert_eq!(i["ended"], false);
    d.message("s", "echo still here").await;
    let events = t.turns_ended(2).await;
    assert_eq!(turn_ends(&events)[1]["status"], "completed");
    assert_eq!(assistant_texts(&events), vec!["still here"]);
    assert_well_formed(&events);
    d.stop();
}

#[tokio::test]
async fn a_crash_fails_the_turn_with_its_signal_and_fails_open_items() {
    let d = Daemon::start();
    mock_session(&d, "s", json!({})).await;
    d.message("s", "crash").await;
    let mut t = Tail::new(&d, "s");
    let events = t.turns_ended(1).await;
    let end = turn_ends(&events)[0];
    assert_eq!(end["status"], "failed", "{end}");
    assert_eq!(end["signal"], 9, "{end}");
    let ended = of_type(&events, "turn.ended")[0];
    assert_eq!(ended["synthetic"], true);
    assert_eq!(ended["source"], "daemon");
    // The message cut short is completed as failed, with what had arrived.
    let cut: Vec<&Value> = completed_kind(&events, "message")
        .into_iter()
        .filter(|i| i["role"] == "assistant")
        .collect();
    assert_eq!(cut.len(), 1);
    assert_eq!(cut[0]["status"], "failed");
    assert_eq!(part(cut[0], "text").unwrap()["text"], "About to crash");
    assert_eq!(count(&events, "session.ended"), 0);

    d.wait_status("s", "idle", WAIT).await;
    assert_no_agent_left(&d).await;
    d.message("s", "echo after the crash").await;
    let events = t.turns_ended(2).await;
    assert_eq!(turn_ends(&events)[1]["status"], "completed");
    assert_eq!(assistant_texts(&events).last().unwrap(), "after the crash");
    assert_well_formed(&events);
    d.stop();
}

#[tokio::test]
async fn hang_times_out_at_the_sessions_turn_timeout() {
    let d = Daemon::start();
    mock_session(&d, "s", json!({"timeoutSeconds": 1})).await;
    let sent = Instant::now();
    d.message("s", "hang").await;
    let events = Tail::new(&d, "s").turns_ended(1).await;
    let took = sent.elapsed();
    let end = turn_ends(&events)[0];
    assert_eq!(end["status"], "timed_out", "{end}");
    assert!(took < Duration::from_secs(20), "timed out after {took:?}");
    d.wait_status("s", "idle", WAIT).await;
    assert_no_agent_left(&d).await;
    assert_well_formed(&events);
    d.stop();
}

#[tokio::test]
async fn hang_times_out_at_the_daemons_inactivity_timeout() {
    let d = Daemon::start_with(DaemonOptions {
        args: vec!["--inactivity-timeout".into(), "1".into()],
        ..Default::default()
    });
    mock_session(&d, "s", json!({})).await;
    let sent = Instant::now();
    d.message("s", "hang").await;
    let events = Tail::new(&d, "s").turns_ended(1).await;
    let took = sent.elapsed();
    let end = turn_ends(&events)[0];
    assert_eq!(end["status"], "timed_out", "{end}");
    let message = end["message"].as_str().unwrap_or("");
    assert!(message.contains("printed nothing"), "{end}");
    assert!(took < Duration::from_secs(20), "timed out after {took:?}");
    d.wait_status("s", "idle", WAIT).await;
    assert_no_agent_left(&d).await;
    assert_well_formed(&events);
    d.stop();
}

#[tokio::test]
async fn garbage_lines_become_agent_unparsed_and_the_turn_completes() {
    let d = Daemon::start();
    let events = one_turn(&d, "garbage").await;
    let unparsed = of_type(&events, "agent.unparsed");
    assert_eq!(unparsed.len(), 3, "{:?}", types(&events));
    let errors: Vec<&str> = unparsed
        .iter()
        .filter_map(|e| e["data"]["error"].as_str())
        .collect();
    assert!(errors[0].starts_with("not JSON"), "{errors:?}");
    assert!(errors[1].starts_with("not JSON"), "{errors:?}");
    assert!(errors[2].contains("without a string `type`"), "{errors:?}");
    for e in &unparsed {
        assert!(e["data"]["location"]
            .as_str()
            .unwrap()
            .starts_with("stdout:"));
        assert!(e["data"]["raw_hash"]
            .as_str()
            .unwrap()
            .starts_with("sha256:"));
        assert!(e["raw"].is_null(), "raw only when asked for");
    }
    // With includeRaw, each carries the offending line.
    let v: Value = d
        .get("/v1/sessions/s/events?includeRaw=true&limit=10000")
        .await
        .json()
        .await
        .unwrap();
    let raws: Vec<Value> = v["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "agent.unparsed")
        .map(|e| e["raw"].clone())
        .collect();
    assert_eq!(
        raws,
        vec![
            json!("not json at all"),
            json!("{broken"),
            json!({"no_type": true})
        ]
    );
    assert_eq!(assistant_texts(&events), vec!["Some text"]);
    let end = turn_ends(&events)[0];
    assert_eq!(end["status"], "completed");
    assert_cost(&end["cost"], 1.5);
    assert_well_formed(&events);
    d.stop();
}

#[tokio::test]
async fn a_huge_line_arrives_intact_under_the_default_limit() {
    let d = Daemon::start();
    let events = one_turn(&d, "huge").await;
    let texts = assistant_texts(&events);
    assert_eq!(texts.len(), 2);
    let huge = &texts[0];
    assert_eq!(huge.len(), 5 * 1024 * 1024);
    let phrase = "All work and no play makes a very long line. ";
    let want: String = phrase.repeat(huge.len() / phrase.len() + 1)[..huge.len()].to_owned();
    assert!(huge == &want, "the 5 MiB text arrives unchanged");
    assert_eq!(texts[1], "That was a long one.");
    assert_eq!(count(&events, "agent.unparsed"), 0);
    assert_eq!(turn_ends(&events)[0]["status"], "completed");
    assert_well_formed(&events);
    d.stop();
}

#[tokio::test]
async fn a_line_over_the_limit_is_reported_and_the_turn_goes_on() {
    let d = Daemon::start_with(DaemonOptions {
        args: vec!["--max-line-bytes".into(), "1048576".into()],
        ..Default::default()
    });
    let events = one_turn(&d, "huge").await;
    let unparsed = of_type(&events, "agent.unparsed");
    assert_eq!(unparsed.len(), 1, "{:?}", types(&events));
    let error = unparsed[0]["data"]["error"].as_str().unwrap();
    assert!(
        error.contains("exceeds the limit of 1048576 bytes"),
        "{error}"
    );
    let unparsed_at = position(&events, |e| e["type"] == "agent.unparsed");
    let last_text_at = position(&events, |e| {
        e["type"] == "item.completed"
            && part(&e["data"]["item"], "text").is_some_and(|p| p["text"] == "That was a long one.")
    });
    assert!(unparsed_at < last_text_at);
    assert_eq!(assistant_texts(&events), vec!["That was a long one."]);
    assert_eq!(turn_ends(&events)[0]["status"], "completed");
    assert_well_formed(&events);
    d.stop();
}

/// Asserts that a `flood N` turn's events hold exactly N deltas, `0..N` in order.
fn assert_flood(events: &[Value], session: &str, n: usize) {
    let ds = of_type(events, "item.delta");
    assert_eq!(ds.len(), n, "exactly {n} deltas");
    let item = &ds[0]["data"]["item_id"];
    for (i, e) in ds.iter().enumerate() {
        assert_eq!(&e["data"]["item_id"], item);
        let text = e["data"]["delta"].as_str().unwrap();
        let index: usize = text.split(':').next().unwrap().parse().unwrap();
        assert_eq!(index, i, "delta {i} is {text:?}");
    }
    for e in events {
        assert_eq!(e["session_id"], session);
    }
    assert_eq!(
        assistant_texts(events),
        vec![format!("Flooded {n} deltas.")]
    );
    assert_eq!(turn_ends(events)[0]["status"], "completed");
}

#[tokio::test]
async fn a_flood_arrives_whole_and_in_order() {
    let d = Daemon::start();
    let events = one_turn(&d, "flood 20000").await;
    assert_flood(&events, "s", 20000);
    assert_eq!(d.info("s").await["eventCount"], events.len());
    assert_well_formed(&events);
    d.stop();
}

// ----- 2. lifecycle -------------------------------------------------------------------------

#[tokio::test]
async fn messages_sent_during_a_turn_queue_and_run_in_order() {
    let d = Daemon::start();
    mock_session(&d, "s", json!({})).await;
    d.message("s", "stream one two three four five").await;
    d.message("s", "echo second").await;
    d.message("s", "echo third").await;
    let events = Tail::new(&d, "s").turns_ended(3).await;
    // Turns never overlap: started/ended alternate, and each turn holds its own prompt and reply.
    let mut turns: Vec<Vec<&Value>> = Vec::new();
    let mut open = false;
    for e in &events {
        match e["type"].as_str().unwrap() {
            "turn.started" => {
                assert!(!open, "a turn started while another ran");
                open = true;
                turns.push(Vec::new());
            }
            "turn.ended" => {
                assert!(open);
                open = false;
            }
            _ if open => turns.last_mut().unwrap().push(e),
            _ => {}
        }
    }
    assert_eq!(turns.len(), 3);
    let want = [
        ("stream one two three four five", "one two three four five"),
        ("echo second", "second"),
        ("echo third", "third"),
    ];
    for (turn, (prompt, reply)) in turns.iter().zip(want) {
        let items: Vec<&Value> = turn
            .iter()
            .filter(|e| e["type"] == "item.completed" && e["data"]["item"]["kind"] == "message")
            .map(|e| &e["data"]["item"])
            .collect();
        assert_eq!(items.len(), 2, "{items:?}");
        assert_eq!(items[0]["role"], "user");
        assert_eq!(part(items[0], "text").unwrap()["text"], prompt);
        assert_eq!(items[1]["role"], "assistant");
        assert_eq!(part(items[1], "text").unwrap()["text"], reply);
    }
    assert!(turn_ends(&events)
        .iter()
        .all(|m| m["status"] == "completed"));
    assert_eq!(d.wait_status("s", "idle", WAIT).await["turns"], 3);
    assert_well_formed(&events);
    d.stop();
}

#[tokio::test]
async fn cancel_stops_the_running_turn_and_the_session_stays_usable() {
    let d = Daemon::start();
    mock_session(&d, "s", json!({})).await;
    let mut t = Tail::new(&d, "s");
    // Cancelling an idle session does nothing.
    assert_eq!(post(&d, "/v1/sessions/s/cancel", None).await.0, 204);
    assert_eq!(d.info("s").await["eventCount"], 1);

    d.message("s", "hang").await;
    wait_agent_started(&mut t, 1).await;
    assert_eq!(d.info("s").await["status"], "running");
    assert_eq!(post(&d, "/v1/sessions/s/cancel", None).await.0, 204);
    let events = t.turns_ended(1).await;
    let end = turn_ends(&events)[0];
    assert_eq!(end["status"], "cancelled", "{end}");
    assert_eq!(count(&events, "session.ended"), 0);
    let i = d.wait_status("s", "idle", WAIT).await;
    assert_eq!(i["ended"], false);
    assert_no_agent_left(&d).await;

    let before = i["eventCount"].as_u64().unwrap();
    assert_eq!(post(&d, "/v1/sessions/s/cancel", None).await.0, 204);
    assert_eq!(d.info("s").await["eventCount"], before);

    d.message("s", "echo next").await;
    let events = t.turns_ended(2).await;
    assert_eq!(turn_ends(&events)[1]["status"], "completed");
    assert_eq!(assistant_texts(&events), vec!["next"]);
    assert_well_formed(&events);
    d.stop();
}

#[tokio::test]
async fn terminate_ends_the_running_turn_then_the_session() {
    let d = Daemon::start();
    mock_session(&d, "s", json!({})).await;
    let mut t = Tail::new(&d, "s");
    d.message("s", "echo first").await;
    t.turns_ended(1).await;
    d.message("s", "hang").await;
    wait_agent_started(&mut t, 2).await;
    assert_eq!(post(&d, "/v1/sessions/s/terminate", None).await.0, 204);

    // terminate answers once the ending is recorded.
    let events = all_events(&d, "s").await;
    let tail: Vec<&str> = types(&events).into_iter().rev().take(2).collect();
    assert_eq!(
        tail,
        ["session.ended", "turn.ended"],
        "{:?}",
        types(&events)
    );
    let end = turn_ends(&events)[1];
    assert_eq!(end["status"], "cancelled", "{end}");
    let ended = &of_type(&events, "session.ended")[0]["data"];
    assert_eq!(ended["reason"], "terminated");
    assert_eq!(ended["terminated_by"], "daemon");
    assert_cost(&ended["cost"], 1.25);
    assert_no_agent_left(&d).await;

    let i = d.info("s").await;
    assert_eq!(i["status"], "ended");
    assert_eq!(i["ended"], true);
    assert_eq!(i["eventCount"], events.len());

    let refused = post(
        &d,
        "/v1/sessions/s/messages",
        Some(json!({"message": "echo x"})),
    )
    .await;
    assert_problem(&refused, 400, "invalid_request", "session terminated");
    assert_eq!(refused.1["sessionId"], "s");
    assert_eq!(post(&d, "/v1/sessions/s/terminate", None).await.0, 204);
    assert_eq!(post(&d, "/v1/sessions/s/cancel", None).await.0, 204);
    let after = all_events(&d, "s").await;
    assert_eq!(after.len(), events.len(), "nothing after session.ended");
    assert_well_formed(&after);
    d.stop();
}

#[tokio::test]
async fn session_info_follows_the_session_and_its_cost() {
    let d = Daemon::start();
    let dir = TempDir::new("info");
    mock_session(
        &d,
        "s",
        json!({"directory": dir.path(), "title": "Info", "agentMode": "max"}),
    )
    .await;
    let i = d.info("s").await;
    assert_eq!(i["sessionId"], "s");
    assert_eq!(i["agent"], "mock");
    assert_eq!(i["agentMode"], "max");
    assert_eq!(i["permissionMode"], "bypass");
    assert_eq!(i["directory"], dir.path().display().to_string());
    assert_eq!(i["title"], "Info");
    assert_eq!(i["status"], "idle");
    assert_eq!(i["ended"], false);
    assert_eq!(i["turns"], 0);
    assert_eq!(i["eventCount"], 1);
    assert_cost(&i["cost"], 0.0);
    assert!(i["nativeSessionId"].is_null());

    let mut t = Tail::new(&d, "s");
    d.message("s", "ask").await;
    let events = t.event("question.requested").await;
    let qid = of_type(&events, "question.requested")[0]["data"]["question_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let i = d.wait_status("s", "awaiting_input", WAIT).await;
    assert_eq!(i["turns"], 1);
    let reply = json!({"answers": [["jest"], ["e2e"]]});
    let path = format!("/v1/sessions/s/questions/{qid}/reply");
    assert_eq!(post(&d, &path, Some(reply)).await.0, 204);
    t.turns_ended(1).await;
    let i = d.wait_status("s", "idle", WAIT).await;
    assert_cost(&i["cost"], 3.0);
    let native = i["nativeSessionId"]
        .as_str()
        .expect("the agent's id is known");
    assert!(!native.is_empty());

    d.message("s", "stream a b c").await;
    t.turns_ended(2).await;
    let i = d.wait_status("s", "idle", WAIT).await;
    assert_eq!(i["turns"], 2);
    assert_cost(&i["cost"], 5.5);

    d.message("s", "hang").await;
    wait_agent_started(&mut t, 3).await;
    let i = d.info("s").await;
    assert_eq!(i["status"], "running");
    assert_eq!(i["turns"], 3);
    assert!(i["updatedAt"].as_u64().unwrap() >= i["createdAt"].as_u64().unwrap());
    assert_eq!(post(&d, "/v1/sessions/s/terminate", None).await.0, 204);

    let events = all_events(&d, "s").await;
    let i = d.info("s").await;
    assert_eq!(i["status"], "ended");
    assert_eq!(i["ended"], true);
    assert_eq!(i["turns"], 3);
    assert_eq!(i["turns"], count(&events, "turn.started"));
    assert_eq!(i["eventCount"], events.len());
    assert_eq!(i["nativeSessionId"], native);
    let turn_total: f64 = turn_ends(&events).iter().map(|m| credits(&m["cost"])).sum();
    assert_cost(&i["cost"], turn_total);
    let ended = &of_type(&events, "session.ended")[0]["data"];
    assert_cost(&ended["cost"], turn_total);
    assert_cost(&ended["cost"], 5.5);
    assert_well_formed(&events);
    d.stop();
}

#[tokio::test]
async fn sessions_are_listed_newest_first() {
    let d = Daemon::start();
    // Names that sort against the creation order: a tie on the clock must not reorder them.
    let ids = ["z-1", "y-2", "x-3", "m-4", "c-5", "b-6", "a-7"];
    for id in ids {
        mock_session(&d, id, json!({})).await;
    }
    let v: Value = d.get("/v1/sessions").await.json().await.unwrap();
    let listed: Vec<&str> = v["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["sessionId"].as_str())
        .collect();
    let mut want = ids.to_vec();
    want.reverse();
    assert_eq!(listed, want);
    let created: Vec<u64> = v["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["createdAt"].as_u64())
        .collect();
    assert!(created.windows(2).all(|w| w[0] >= w[1]), "{created:?}");
    for s in v["sessions"].as_array().unwrap() {
        assert_eq!(s["agent"], "mock");
        assert_eq!(s["status"], "idle");
        assert_eq!(s["eventCount"], 1);
        let events = all_events(&d, s["sessionId"].as_str().unwrap()).await;
        assert_well_formed(&events);
    }
    d.stop();
}

/// Paths of the host a client must never see: the agent program, the daemon's data, the
/// source tree, and `dir`.
fn host_paths(d: &Daemon, dir: &Path) -> Vec<String> {
    [
        binary().as_path(),
        d.data_dir.as_path(),
        Path::new(env!("CARGO_MANIFEST_DIR")),
        dir,
    ]
    .iter()
    .map(|p| p.display().to_string())
    .collect()
}

fn assert_no_host_path(what: &str, text: &str, paths: &[String]) {
    for p in paths {
        assert!(!text.contains(p.as_str()), "{what} names the host path {p}");
    }
}

#[tokio::test]
async fn a_directory_missing_when_a_turn_starts_fails_only_that_turn_naming_no_host_path() {
    let d = Daemon::start();
    let tmp = TempDir::new("missing-dir");
    let dir = tmp.path().join("work");
    std::fs::create_dir(&dir).unwrap();
    mock_session(&d, "s", json!({"directory": dir})).await;
    std::fs::remove_dir(&dir).unwrap();
    let paths = host_paths(&d, &dir);
    let mut t = Tail::new(&d, "s");
    // Twice while it is missing: each turn fails, the session takes the next message.
    for turn in 1..=2 {
        let sent = post(
            &d,
            "/v1/sessions/s/messages",
            Some(json!({"message": "echo lost"})),
        )
        .await;
        assert_eq!(sent.0, 204, "{}", sent.1);
        let events = t.turns_ended(turn).await;
        let end = turn_ends(&events)[turn - 1];
        assert_eq!(end["status"], "failed", "{end}");
        let errors = of_type(&events, "error");
        assert_eq!(errors.len(), turn, "{errors:?}");
        assert_eq!(errors[turn - 1]["data"]["code"], "directory_missing");
        let message = errors[turn - 1]["data"]["message"].as_str().unwrap_or("");
        assert!(message.contains("directory"), "{message}");
        assert_eq!(count(&events, "session.ended"), 0);
        assert_no_host_path("the events", &Value::from(events).to_string(), &paths);
        let info = d.wait_status("s", "idle", WAIT).await;
        assert_eq!(info["ended"], false);
    }
    // Once the directory is back, turns run again.
    std::fs::create_dir(&dir).unwrap();
    d.message("s", "echo ok").await;
    let events = t.turns_ended(3).await;
    assert_eq!(turn_ends(&events)[2]["status"], "completed");
    assert_eq!(assistant_texts(&events), vec!["ok"]);
    assert_well_formed(&events);
    d.stop();
}

#[tokio::test]
async fn a_prompt_over_the_argument_limit_affects_only_its_own_turn() {
    let d = Daemon::start();
    mock_session(&d, "s", json!({})).await;
    let text = "y".repeat(200 * 1024);
    d.message("s", &format!("echo {text}")).await;
    let mut t = Tail::new(&d, "s");
    let events = t.turns_ended(1).await;
    let end = turn_ends(&events)[0];
    let errors = of_type(&events, "error");
    if end["status"] == "failed" {
        // As an argument, the prompt is longer than one may be (128 KiB): a clear failure.
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0]["data"]["code"], "input_too_long");
        let message = end["message"].as_str().unwrap_or("");
        assert!(message.contains("too long"), "{message}");
    } else {
        // On stdin, it arrives whole.
        assert_eq!(end["status"], "completed", "{end}");
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(assistant_texts(&events), vec![text]);
    }
    assert_eq!(count(&events, "session.ended"), 0);
    let paths = host_paths(&d, &d.data_dir);
    assert_no_host_path("the events", &Value::from(events).to_string(), &paths);
    let info = d.wait_status("s", "idle", WAIT).await;
    assert_eq!(info["ended"], false);
    d.message("s", "echo ok").await;
    let events = t.turns_ended(2).await;
    assert_eq!(turn_ends(&events)[1]["status"], "completed");
    assert_eq!(
        assistant_texts(&events).last().map(String::as_str),
        Some("ok")
    );
    assert_well_formed(&events);
    d.stop();
}

// ----- 3. concurrency -----------------------------------------------------------------------

#[tokio::test]
async fn concurrent_sessions_each_get_exactly_their_own_events() {
    let d = Daemon::start();
    mock_session(&d, "one", json!({})).await;
    mock_session(&d, "two", json!({})).await;
    d.message("one", "flood 5000").await;
    d.message("two", "flood 5000").await;
    let mut a = Tail::new(&d, "one");
    let mut b = Tail::new(&d, "two");
    let (one, two) = tokio::join!(a.turns_ended(1), b.turns_ended(1));
    assert_flood(&one, "one", 5000);
    assert_flood(&two, "two", 5000);
    assert_well_formed(&one);
    assert_well_formed(&two);
    d.stop();
}

// ----- 4. shutdown --------------------------------------------------------------------------

#[tokio::test]
async fn sigterm_interrupts_the_running_turn_and_the_daemon_exits_cleanly() {
    let d = Daemon::start();
    mock_session(&d, "s", json!({})).await;
    let mut sse = d.sse("/v1/sessions/s/events/sse").await;
    d.message("s", "hang").await;
    let mut events = sse
        .until(WAIT, |e| {
            e["type"] == "item.completed"
                && part(&e["data"]["item"], "status")
                    .is_some_and(|p| p["label"] == "codebuff.start")
        })
        .await;
    assert_eq!(
        events.last().map(|e| e["type"].clone()),
        Some(json!("item.completed")),
        "the agent started: {:?}",
        types(&events)
    );
    let stopping = tokio::task::spawn_blocking(move || {
        let t = Instant::now();
        d.stop();
        t.elapsed()
    });
    events.extend(sse.until(WAIT, |e| e["type"] == "turn.ended").await);
    let took = stopping.await.expect("stop() passed");
    assert!(
        took < Duration::from_secs(10),
        "the daemon took {took:?} to exit"
    );
    let end = turn_ends(&events);
    assert_eq!(end.len(), 1, "{:?}", types(&events));
    assert_eq!(end[0]["status"], "interrupted", "{}", end[0]);
    assert_eq!(count(&events, "session.ended"), 0);
    assert_well_formed(&events);
}

// ----- 5. process cleanup -------------------------------------------------------------------

#[tokio::test]
async fn no_agent_process_outlives_a_terminated_hang() {
    let d = Daemon::start();
    let dir = TempDir::new("cleanup");
    mock_session(&d, "s", json!({"directory": dir.path()})).await;
    let mut t = Tail::new(&d, "s");
    d.message("s", "tools").await;
    t.turns_ended(1).await;
    d.wait_status("s", "idle", WAIT).await;
    assert_no_agent_left(&d).await;

    d.message("s", "hang").await;
    wait_agent_started(&mut t, 2).await;
    let members = session_members(d.pid());
    assert!(
        members.len() >= 2,
        "the agent runs in the daemon's session: {members:?}"
    );
    assert_eq!(post(&d, "/v1/sessions/s/terminate", None).await.0, 204);
    assert_no_agent_left(&d).await;
    let events = all_events(&d, "s").await;
    assert_eq!(count(&events, "session.ended"), 1);
    assert_well_formed(&events);
    d.stop();
}
