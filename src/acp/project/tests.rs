//! The projection's tests: universal events in, the ACP updates they become, checked as JSON.

use super::*;
use crate::universal::{
    ErrorData, FileAction, ItemDeltaData, ItemEventData, QuestionStatus, TurnData, TurnMetadata,
    TurnPhase,
};
use std::sync::Arc;

fn projector(replay: bool) -> Projector {
    Projector::new(
        ProjectorOptions {
            cwd: PathBuf::from("/work"),
            replay,
            notices: true,
        },
        Cost::default(),
    )
}

fn item(
    id: &str,
    kind: ItemKind,
    role: ItemRole,
    parent: Option<&str>,
    content: Vec<ContentPart>,
    status: ItemStatus,
) -> Item {
    Item {
        item_id: id.into(),
        native_item_id: None,
        parent_id: parent.map(Into::into),
        kind,
        role: Some(role),
        content: Arc::new(content),
        status,
    }
}

fn started(i: Item) -> EventData {
    EventData::ItemStarted(ItemEventData { item: i })
}

fn completed(mut i: Item, status: ItemStatus) -> EventData {
    i.status = status;
    EventData::ItemCompleted(ItemEventData { item: i })
}

fn delta(id: &str, text: &str) -> EventData {
    EventData::ItemDelta(ItemDeltaData {
        item_id: id.into(),
        native_item_id: None,
        delta: text.into(),
    })
}

fn turn_ended(status: TurnStatus, credits: f64) -> EventData {
    EventData::TurnEnded(Box::new(TurnData {
        phase: TurnPhase::Ended,
        turn_id: Some("turn_1".into()),
        metadata: Some(TurnMetadata {
            status,
            cost: Cost::from_credits(credits),
            cost_reported: true,
            session_cost: None,
            exit_code: None,
            signal: None,
            agent_id: None,
            code: None,
            message: None,
            stderr_tail: None,
        }),
    }))
}

fn call_item(id: &str, name: &str, args: Value, call_id: &str, extra: Vec<ContentPart>) -> Item {
    let mut content = vec![ContentPart::ToolCall {
        name: name.into(),
        arguments: args.to_string(),
        call_id: call_id.into(),
    }];
    content.extend(extra);
    item(
        id,
        ItemKind::ToolCall,
        ItemRole::Assistant,
        None,
        content,
        ItemStatus::InProgress,
    )
}

fn result_item(id: &str, call_id: &str, output: Value, extra: Vec<ContentPart>) -> Item {
    let mut content = vec![ContentPart::ToolResult {
        call_id: call_id.into(),
        output: output.to_string(),
    }];
    content.extend(extra);
    item(
        id,
        ItemKind::ToolResult,
        ItemRole::Tool,
        None,
        content,
        ItemStatus::InProgress,
    )
}

/// Every update of `events`, as JSON.
fn run(p: &mut Projector, events: &[EventData]) -> Vec<Value> {
    let mut out = Vec::new();
    for e in events {
        p.apply(e, &mut out);
    }
    out.into_iter()
        .filter_map(|e| match e {
            Effect::Update(u) => Some(serde_json::to_value(u).unwrap()),
            _ => None,
        })
        .collect()
}

#[test]
fn assistant_deltas_are_message_chunks_and_reasoning_is_thought() {
    let mut p = projector(false);
    let msg = item(
        "itm_3",
        ItemKind::Message,
        ItemRole::Assistant,
        None,
        vec![ContentPart::Text { text: "".into() }],
        ItemStatus::InProgress,
    );
    let thought = item(
        "itm_4",
        ItemKind::Message,
        ItemRole::Assistant,
        None,
        vec![ContentPart::Reasoning {
            text: "".into(),
            visibility: crate::universal::ReasoningVisibility::Public,
        }],
        ItemStatus::InProgress,
    );
    let updates = run(
        &mut p,
        &[
            started(thought.clone()),
            delta("itm_4", "hmm"),
            completed(thought, ItemStatus::Completed),
            started(msg.clone()),
            delta("itm_3", "Hel"),
            delta("itm_3", "lo"),
            completed(msg, ItemStatus::Completed),
            delta("itm_3", "late"),
        ],
    );
    assert_eq!(
        updates,
        vec![
            json!({"sessionUpdate":"agent_thought_chunk","content":{"type":"text","text":"hmm"},"messageId":"itm_4"}),
            json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Hel"},"messageId":"itm_3"}),
            json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"lo"},"messageId":"itm_3"}),
        ]
    );
}

#[test]
fn user_messages_show_only_in_replay() {
    let user = item(
        "itm_1",
        ItemKind::Message,
        ItemRole::User,
        None,
        vec![
            ContentPart::Text { text: "hi".into() },
            ContentPart::Image {
                path: "/d/a b.png".into(),
                mime: Some("image/png".into()),
            },
        ],
        ItemStatus::InProgress,
    );
    assert!(run(&mut projector(false), &[started(user.clone())]).is_empty());
    let updates = run(&mut projector(true), &[started(user)]);
    assert_eq!(
        updates,
        vec![
            json!({"sessionUpdate":"user_message_chunk","content":{"type":"text","text":"hi"},"messageId":"itm_1"}),
            json!({"sessionUpdate":"user_message_chunk","content":{"type":"resource_link","name":"a b.png","uri":"file:///d/a%20b.png","mimeType":"image/png"},"messageId":"itm_1"}),
        ]
    );
}

#[test]
fn a_file_edit_goes_pending_in_progress_completed_with_its_diff() {
    let mut p = projector(false);
    let call = call_item(
        "itm_4",
        "write_file",
        json!({"path":"hello.txt","content":"hi\n"}),
        "c1",
        vec![ContentPart::FileRef {
            path: "hello.txt".into(),
            action: FileAction::Write,
            diff: None,
        }],
    );
    let output = json!([{"type":"json","value":{"file":"hello.txt","message":"Created new file","unifiedDiff":"@@ -0,0 +1,1 @@\n+hi\n"}}]);
    let result = result_item(
        "itm_9",
        "c1",
        output.clone(),
        vec![ContentPart::FileRef {
            path: "hello.txt".into(),
            action: FileAction::Write,
            diff: Some("@@ -0,0 +1,1 @@\n+hi\n".into()),
        }],
    );
    let updates = run(
        &mut p,
        &[
            started(call.clone()),
            completed(call, ItemStatus::Completed),
            started(result.clone()),
            completed(result, ItemStatus::Completed),
        ],
    );
    assert_eq!(updates.len(), 3, "{updates:#?}");
    assert_eq!(
        updates[0],
        json!({"sessionUpdate":"tool_call","toolCallId":"itm_4","title":"Write hello.txt",
            "kind":"edit","locations":[{"path":"/work/hello.txt"}],
            "rawInput":{"path":"hello.txt","content":"hi\n"},
            "_meta":{"codebuff":{"toolName":"write_file","toolCallId":"c1","parentToolCallId":null}}})
    );
    assert_eq!(
        updates[1],
        json!({"sessionUpdate":"tool_call_update","toolCallId":"itm_4","status":"in_progress"})
    );
    assert_eq!(
        updates[2],
        json!({"sessionUpdate":"tool_call_update","toolCallId":"itm_4","status":"completed",
            "content":[{"type":"diff","path":"/work/hello.txt","newText":"hi\n"}],
            "rawOutput": output})
    );
}

#[test]
fn a_failed_command_shows_its_output_and_fails() {
    let mut p = projector(false);
    let call = call_item(
        "itm_5",
        "run_terminal_command",
        json!({"command":"false"}),
        "c2",
        vec![],
    );
    let result = result_item(
        "itm_6",
        "c2",
        json!([{"type":"json","value":{"errorMessage":"boom"}}]),
        vec![],
    );
    let updates = run(
        &mut p,
        &[
            started(call.clone()),
            completed(call, ItemStatus::Completed),
            completed(result, ItemStatus::Failed),
        ],
    );
    assert_eq!(updates[0]["kind"], "execute");
    assert_eq!(updates[0]["title"], "Run `false`");
    assert_eq!(updates[2]["status"], "failed");
    assert_eq!(
        updates[2]["content"],
        json!([{"type":"content","content":{"type":"text","text":"boom"}}])
    );
}

#[test]
fn subagents_are_tool_calls_their_children_point_at() {
    let mut p = projector(false);
    let spawn = call_item(
        "itm_4",
        "spawn_agents",
        json!({"agents":[{"agent_type":"file-picker"}]}),
        "s1",
        vec![],
    );
    let sub = item(
        "itm_5",
        ItemKind::Status,
        ItemRole::System,
        None,
        vec![
            ContentPart::Status {
                label: "subagent".into(),
                detail: Some("File Picker".into()),
            },
            ContentPart::Json {
                json: json!({"agentType":"file-picker"}),
            },
        ],
        ItemStatus::InProgress,
    );
    let mut read = call_item("itm_6", "read_files", json!({"paths":["a"]}), "r1", vec![]);
    read.parent_id = Some("itm_5".into());
    let text = item(
        "itm_7",
        ItemKind::Message,
        ItemRole::Assistant,
        Some("itm_5"),
        vec![ContentPart::Text { text: "".into() }],
        ItemStatus::InProgress,
    );
    let mut done_text = text.clone();
    done_text.content = Arc::new(vec![ContentPart::Text {
        text: "a holds it".into(),
    }]);
    let updates = run(
        &mut p,
        &[
            started(spawn.clone()),
            completed(spawn, ItemStatus::Completed),
            started(sub.clone()),
            started(read),
            started(text),
            delta("itm_7", "a holds it"),
            completed(done_text, ItemStatus::Completed),
            completed(sub, ItemStatus::Completed),
        ],
    );
    let kinds: Vec<&str> = updates
        .iter()
        .map(|u| u["sessionUpdate"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "tool_call",
            "tool_call_update",
            "tool_call",
            "tool_call",
            "tool_call_update",
            "tool_call_update"
        ],
        "the subagent's text is no agent message: {updates:#?}"
    );
    assert_eq!(updates[2]["toolCallId"], "itm_5");
    // `other` is ACP's default kind, left out on the wire.
    assert!(updates[2].get("kind").is_none());
    assert_eq!(updates[2]["title"], "File Picker");
    assert_eq!(updates[2]["_meta"]["codebuff"]["parentToolCallId"], "itm_4");
    assert_eq!(updates[3]["_meta"]["codebuff"]["parentToolCallId"], "itm_5");
    assert_eq!(
        updates[4]["content"],
        json!([{"type":"content","content":{"type":"text","text":"a holds it"}}])
    );
    assert_eq!(updates[5]["status"], "completed");
}

#[test]
fn todos_are_a_plan_not_a_tool_call() {
    let mut p = projector(false);
    let todos = call_item(
        "itm_4",
        "write_todos",
        json!({"todos":[{"task":"x","completed":false}]}),
        "t1",
        vec![],
    );
    let result = result_item("itm_5", "t1", json!([]), vec![]);
    let updates = run(
        &mut p,
        &[
            started(todos.clone()),
            completed(todos, ItemStatus::Completed),
            completed(result, ItemStatus::Completed),
        ],
    );
    assert_eq!(
        updates,
        vec![
            json!({"sessionUpdate":"plan","entries":[{"content":"x","priority":"medium","status":"pending"}]})
        ]
    );
}

#[test]
fn a_turn_end_fails_open_calls_and_reports_the_cumulative_cost() {
    let mut p = projector(false);
    let call = call_item(
        "itm_4",
        "run_terminal_command",
        json!({"command":"sleep 9"}),
        "c",
        vec![],
    );
    let mut out = Vec::new();
    p.apply(&started(call), &mut out);
    p.apply(&turn_ended(TurnStatus::Completed, 150.0), &mut out);
    p.apply(&turn_ended(TurnStatus::Cancelled, 50.0), &mut out);
    let updates: Vec<Value> = out
        .iter()
        .filter_map(|e| match e {
            Effect::Update(u) => Some(serde_json::to_value(u).unwrap()),
            _ => None,
        })
        .collect();
    assert_eq!(
        updates[1],
        json!({"sessionUpdate":"tool_call_update","toolCallId":"itm_4","status":"failed"})
    );
    assert_eq!(updates[2]["sessionUpdate"], "usage_update");
    assert_eq!(updates[2]["cost"], json!({"amount":1.5,"currency":"USD"}));
    assert_eq!(updates[2]["_meta"]["codebuff"]["credits"], 150.0);
    assert_eq!(updates[3]["cost"], json!({"amount":2.0,"currency":"USD"}));
    assert_eq!(
        updates[3]["_meta"]["codebuff"]["turn"]["status"],
        "cancelled"
    );
    assert_eq!(updates[3]["_meta"]["codebuff"]["turn"]["credits"], 50.0);
    let ends: Vec<&TurnEnd> = out
        .iter()
        .filter_map(|e| match e {
            Effect::TurnEnded(t) => Some(t),
            _ => None,
        })
        .collect();
    assert_eq!(ends.len(), 2);
    assert_eq!(ends[1].status, TurnStatus::Cancelled);
    // A log older than `session_cost`: the projector adds the turns up itself.
    assert_eq!(ends[1].session_cost, None);
    assert_eq!(p.cost().credits, 200.0);
}

#[test]
fn questions_are_asked_live_only_with_their_tool_call() {
    let ask = call_item("itm_4", "ask_user", json!({"questions":[]}), "q1", vec![]);
    let question = EventData::QuestionRequested(Box::new(QuestionData {
        question_id: "q1".into(),
        prompt: "Which?".into(),
        options: vec![],
        response: None,
        status: QuestionStatus::Requested,
        questions: vec![],
        answers: None,
    }));
    let mut out = Vec::new();
    let mut live = projector(false);
    live.apply(&started(ask.clone()), &mut out);
    live.apply(&question, &mut out);
    assert!(matches!(
        out.last(),
        Some(Effect::Ask { tool_call_id: Some(id), .. }) if id == "itm_4"
    ));
    let mut out = Vec::new();
    let mut replay = projector(true);
    replay.apply(&started(ask), &mut out);
    replay.apply(&question, &mut out);
    assert!(!out.iter().any(|e| matches!(e, Effect::Ask { .. })));
}

#[test]
fn errors_are_notices_when_the_client_shows_them() {
    let error = EventData::Error(Box::new(ErrorData {
        message: "overloaded".into(),
        code: Some("provider-error".into()),
        details: None,
    }));
    let updates = run(&mut projector(false), std::slice::from_ref(&error));
    assert_eq!(
        updates,
        vec![
            json!({"sessionUpdate":"notice","severity":"warning","title":"overloaded","description":"provider-error"})
        ]
    );
    let mut quiet = Projector::new(
        ProjectorOptions {
            cwd: PathBuf::from("/"),
            replay: false,
            notices: false,
        },
        Cost::default(),
    );
    assert!(run(&mut quiet, &[error]).is_empty());
}
