//! The converter as a whole, on plain lines: dispatch, the handlers and how they share the
//! books (the golden files in `fixtures/` cover whole captured runs).

use super::*;
use crate::codebuff::{DecidedBy, PermissionMode, PermissionReply, QuestionError};
use crate::universal::{ItemDeltaData, PermissionStatus};

fn feed(converter: &mut CodebuffConverter, lines: &[&str]) -> Vec<EventDraft> {
    let mut out = Vec::new();
    for line in lines {
        converter.convert_stdout_line(bytes::Bytes::copy_from_slice(line.as_bytes()), &mut out);
    }
    out
}

fn types(out: &[EventDraft]) -> Vec<&'static str> {
    out.iter().map(|d| d.data.event_type()).collect()
}

fn item(draft: &EventDraft) -> &Item {
    match &draft.data {
        EventData::ItemStarted(d) | EventData::ItemCompleted(d) => &d.item,
        other => panic!("expected an item event, got {other:?}"),
    }
}

fn delta(draft: &EventDraft) -> &ItemDeltaData {
    match &draft.data {
        EventData::ItemDelta(d) => d,
        other => panic!("expected item.delta, got {other:?}"),
    }
}

fn turn_metadata(draft: &EventDraft) -> &crate::universal::TurnMetadata {
    match &draft.data {
        EventData::TurnEnded(d) => d.metadata.as_ref().unwrap(),
        other => panic!("expected turn.ended, got {other:?}"),
    }
}

fn clean_exit() -> TurnOutcome {
    TurnOutcome {
        status: TurnStatus::Completed,
        exit_code: Some(0),
        signal: None,
        message: None,
        stderr: None,
    }
}

#[test]
fn a_turn_opens_with_the_users_item_and_ids_count_on() {
    let mut c = CodebuffConverter::new();
    let mut out = Vec::new();
    c.begin_turn(Some("hi"), &mut out);
    assert_eq!(
        types(&out),
        ["turn.started", "item.started", "item.completed"]
    );
    assert!(out.iter().all(|d| d.synthetic));
    let user = item(&out[2]);
    assert_eq!(
        (user.item_id.as_str(), user.role),
        ("itm_1", Some(ItemRole::User))
    );

    let mut c = CodebuffConverter::restored(41, 2, None, Cost::default(), vec![], HashSet::new());
    assert!(c.turn_ended());
    let mut out = Vec::new();
    c.begin_turn(None, &mut out);
    assert_eq!(types(&out), ["turn.started"]);
    match &out[0].data {
        EventData::TurnStarted(d) => assert_eq!(d.turn_id.as_deref(), Some("turn_3")),
        other => panic!("{other:?}"),
    }
    let out = feed(&mut c, &[r#"{"type":"text","text":"x"}"#]);
    assert_eq!(item(&out[0]).item_id, "itm_42");
}

#[test]
fn deltas_then_text_make_one_message_with_the_consolidated_text() {
    let mut c = CodebuffConverter::new();
    let out = feed(
        &mut c,
        &[
            r#"{"type":"text_delta","text":"Hel"}"#,
            r#"{"type":"text_delta","text":"lo"}"#,
            r#"{"type":"text","text":"Hello."}"#,
        ],
    );
    assert_eq!(
        types(&out),
        ["item.started", "item.delta", "item.delta", "item.completed"]
    );
    assert!(out.iter().all(|d| !d.synthetic && d.raw.is_some()));
    assert_eq!(delta(&out[2]).delta, "lo");
    assert_eq!(
        *item(&out[3]).content,
        vec![ContentPart::Text {
            text: "Hello.".into()
        }]
    );
}

#[test]
fn text_without_deltas_gets_one_synthetic_delta() {
    let mut c = CodebuffConverter::new();
    let out = feed(&mut c, &[r#"{"type":"text","text":"whole"}"#]);
    assert_eq!(
        types(&out),
        ["item.started", "item.delta", "item.completed"]
    );
    assert!(out[1].synthetic);
    assert_eq!(delta(&out[1]).delta, "whole");
}

#[test]
fn reasoning_closes_when_its_agent_moves_on_to_text() {
    let mut c = CodebuffConverter::new();
    let out = feed(
        &mut c,
        &[
            r#"{"type":"reasoning_delta","text":"think","runId":"r1"}"#,
            r#"{"type":"text_delta","text":"answer"}"#,
        ],
    );
    assert_eq!(
        types(&out),
        [
            "item.started",
            "item.delta",
            "item.completed",
            "item.started",
            "item.delta"
        ]
    );
    let reasoning = item(&out[2]);
    assert_eq!(reasoning.native_item_id.as_deref(), Some("r1"));
    assert!(matches!(
        reasoning.content[0],
        ContentPart::Reasoning { .. }
    ));
    assert_ne!(item(&out[3]).item_id, reasoning.item_id);
}

#[test]
fn a_tool_call_and_its_result_are_two_items_sharing_the_call_id() {
    let mut c = CodebuffConverter::new();
    let out = feed(
        &mut c,
        &[
            r#"{"type":"tool_call","toolCallId":"t1","toolName":"str_replace","input":{"path":"a.txt","replacements":[]}}"#,
            r#"{"type":"tool_result","toolCallId":"t1","output":[{"type":"json","value":{"file":"a.txt","errorMessage":"no such file"}}]}"#,
        ],
    );
    assert_eq!(
        types(&out),
        [
            "item.started",
            "item.completed",
            "item.started",
            "item.completed"
        ]
    );
    let (call, result) = (item(&out[1]), item(&out[3]));
    assert_eq!(
        (call.kind, result.kind),
        (ItemKind::ToolCall, ItemKind::ToolResult)
    );
    assert_ne!(call.item_id, result.item_id);
    match &call.content[0] {
        ContentPart::ToolCall {
            name,
            arguments,
            call_id,
        } => {
            assert_eq!((name.as_str(), call_id.as_str()), ("str_replace", "t1"));
            assert_eq!(arguments, r#"{"path":"a.txt","replacements":[]}"#);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        result.status,
        ItemStatus::Failed,
        "an errorMessage fails it"
    );
    assert!(
        matches!(&result.content[0], ContentPart::ToolResult { call_id, .. } if call_id == "t1")
    );
}

#[test]
fn progress_opens_the_result_that_its_tool_result_completes() {
    let mut c = CodebuffConverter::new();
    let out = feed(
        &mut c,
        &[
            r#"{"type":"tool_progress","toolCallId":"t1","output":"50%"}"#,
            r#"{"type":"tool_result","toolCallId":"t1","toolName":"run_terminal_command","output":"done"}"#,
        ],
    );
    assert_eq!(
        types(&out),
        ["item.started", "item.delta", "item.completed"]
    );
    assert_eq!(item(&out[0]).item_id, item(&out[2]).item_id);
    assert_eq!(delta(&out[1]).delta, "50%");
}

#[test]
fn a_subagents_text_hangs_under_it_and_closes_with_it() {
    let mut c = CodebuffConverter::new();
    let out = feed(
        &mut c,
        &[
            r#"{"type":"subagent_start","agentId":"sub1","agentType":"researcher"}"#,
            r#"{"type":"text_delta","text":"found","agentId":"sub1"}"#,
            r#"{"type":"text_delta","text":"root","agentId":"unknown"}"#,
            r#"{"type":"subagent_finish","agentId":"sub1"}"#,
        ],
    );
    let sub = item(&out[0]).item_id.clone();
    let sub_text = item(&out[1]);
    assert_eq!(sub_text.parent_id.as_deref(), Some(sub.as_str()));
    let root_text = item(&out[3]);
    assert_eq!(root_text.parent_id, None, "an unknown agent is the root's");
    // The finish closes the subagent's message (not the root's), then the subagent.
    let closing: Vec<(&str, &str)> = out[5..]
        .iter()
        .map(|d| (d.data.event_type(), item(d).item_id.as_str()))
        .collect();
    assert_eq!(
        closing,
        [
            ("item.completed", sub_text.item_id.as_str()),
            ("item.completed", sub.as_str())
        ]
    );
}

#[test]
fn finish_completes_open_items_and_the_clean_exit_ends_the_turn_with_its_cost() {
    let mut c = CodebuffConverter::new();
    let mut out = Vec::new();
    c.begin_turn(Some("go"), &mut out);
    let out = feed(
        &mut c,
        &[
            r#"{"type":"text_delta","text":"partial"}"#,
            r#"{"type":"cost","totalCost":2}"#,
        ],
    );
    assert_eq!(c.cost_with_running_turn().credits, 2.0);
    assert_eq!(types(&out), ["item.started", "item.delta"]);
    let out = feed(
        &mut c,
        &[r#"{"type":"finish","agentId":"base","totalCost":3}"#],
    );
    assert_eq!(types(&out), ["item.completed"]);
    assert!(c.run_finished() && !c.turn_ended());
    assert_eq!(c.session_cost().credits, 3.0);
    assert_eq!(c.cost_with_running_turn().credits, 3.0);
    let again = feed(&mut c, &[r#"{"type":"finish","totalCost":9}"#]);
    assert_eq!(
        types(&again),
        ["item.started", "item.completed"],
        "a status line"
    );
    let mut out = Vec::new();
    c.end_turn(clean_exit(), &mut out);
    assert_eq!(types(&out), ["turn.ended"]);
    let meta = turn_metadata(&out[0]);
    assert_eq!(
        (meta.status, meta.cost.credits),
        (TurnStatus::Completed, 3.0)
    );
    assert_eq!(meta.session_cost.map(|c| c.credits), Some(3.0));
    assert_eq!(c.session_cost().credits, 3.0);
    let mut out = Vec::new();
    c.end_turn(clean_exit(), &mut out);
    assert!(out.is_empty(), "a turn ends once");
}

#[test]
fn a_fatal_error_fails_the_turn_and_its_open_items() {
    let mut c = CodebuffConverter::new();
    let mut out = Vec::new();
    c.begin_turn(None, &mut out);
    let out = feed(
        &mut c,
        &[
            r#"{"type":"subagent_start","agentId":"s"}"#,
            r#"{"type":"text_delta","text":"half"}"#,
            r#"{"type":"error","message":"backend down","code":"backend_error","fatal":true}"#,
        ],
    );
    match &out[3].data {
        EventData::Error(e) => {
            assert_eq!(e.code.as_deref(), Some("backend_error"));
            assert_eq!(e.details.as_ref().unwrap()["fatal"], true);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(c.failure_status(), TurnStatus::Failed);
    let mut out = Vec::new();
    c.end_turn(clean_exit(), &mut out);
    assert_eq!(
        types(&out),
        ["item.completed", "item.completed", "turn.ended"]
    );
    assert!(out[..2]
        .iter()
        .all(|d| item(d).status == ItemStatus::Failed));
    let meta = turn_metadata(&out[2]);
    assert_eq!(meta.status, TurnStatus::Failed);
    assert_eq!(meta.message.as_deref(), Some("backend down"));
}

#[test]
fn lines_that_are_no_events_are_kept_or_dropped_but_never_fail() {
    let mut c = CodebuffConverter::new();
    let out = feed(&mut c, &["", "not json", r#"{"type":"phase","name":"x"}"#]);
    assert_eq!(
        types(&out),
        ["agent.unparsed", "item.started", "item.completed"]
    );
    assert_eq!(
        item(&out[2]).content[0],
        ContentPart::Status {
            label: "phase".into(),
            detail: Some(r#"{"type":"phase","name":"x"}"#.into())
        }
    );
    let mut stderr = Vec::new();
    assert!(!c.convert_stderr_line(b"plain log line", &mut stderr));
    assert!(c.convert_stderr_line(br#"{"type":"text","text":"t"}"#, &mut stderr));
    assert_eq!(
        types(&stderr),
        ["item.started", "item.delta", "item.completed"]
    );
}

#[test]
fn start_announces_the_conversation_id() {
    let mut c = CodebuffConverter::new();
    assert_eq!(c.native_session_id(), None);
    let out = feed(
        &mut c,
        &[r#"{"type":"start","sessionId":"conv-1","agentId":"base"}"#],
    );
    assert_eq!(c.native_session_id(), Some("conv-1"));
    assert_eq!(
        item(&out[1]).content[0],
        ContentPart::Status {
            label: "codebuff.start".into(),
            detail: Some("agentId=base messageHistoryLength=0".into())
        }
    );
}

#[test]
fn ask_user_opens_a_question_the_user_answers_once() {
    let mut c = CodebuffConverter::new();
    let out = feed(
        &mut c,
        &[
            r#"{"type":"tool_call","toolCallId":"q1","toolName":"ask_user","input":{"questions":[{"question":"Which?","options":[{"label":"a"},{"label":"b"}]}]}}"#,
        ],
    );
    assert_eq!(
        types(&out),
        ["item.started", "item.completed", "question.requested"]
    );
    assert!(c.has_pending_questions());
    assert_eq!(c.pending_question_ids(), ["q1"]);
    assert_eq!(c.pending_question("q1").unwrap().options, ["a", "b"]);
    let (draft, line) = c.answer_question("q1", vec![vec!["b".into()]]).unwrap();
    assert_eq!(draft.data.event_type(), "question.resolved");
    assert!(line.contains("q1"), "{line}");
    assert!(!c.has_pending_questions());
    assert!(matches!(
        c.reject_question("q1"),
        Err(QuestionError::AlreadyResolved(_))
    ));
}

#[test]
fn permission_requests_ask_the_user_or_the_policy_answers_into_the_outbox() {
    let mut c = CodebuffConverter::new();
    c.set_permission_mode(PermissionMode::Default);
    let out = feed(
        &mut c,
        &[
            r#"{"type":"permission_request","requestId":"p1","toolName":"run_terminal_command","command":"ls"}"#,
        ],
    );
    assert_eq!(types(&out), ["permission.requested"]);
    assert!(
        !out[0].synthetic && out[0].raw.is_some(),
        "the agent's own line"
    );
    assert!(c.take_outbox().is_empty());
    assert!(c.has_pending_permissions());
    assert_eq!(c.pending_permission_ids(), ["p1"]);
    let mut out = Vec::new();
    let line = c
        .resolve_permission(
            "p1",
            PermissionReply::Reject,
            DecidedBy::User,
            Some("no"),
            &mut out,
        )
        .unwrap();
    assert!(line.contains(r#""decision":"reject""#), "{line}");
    match &out[0].data {
        EventData::PermissionResolved(p) => assert_eq!(p.status, PermissionStatus::Reject),
        other => panic!("{other:?}"),
    }
    assert!(!c.has_pending_permissions());

    c.set_permission_mode(PermissionMode::Bypass);
    let out = feed(
        &mut c,
        &[
            r#"{"type":"permission_request","requestId":"p2","toolName":"write_file","paths":["a"]}"#,
        ],
    );
    assert_eq!(types(&out), ["permission.resolved"]);
    assert!(out[0].synthetic);
    let outbox = c.take_outbox();
    assert_eq!(outbox.len(), 1);
    assert!(outbox[0].contains(r#""requestId":"p2""#) && outbox[0].contains("allow"));
    assert!(c.take_outbox().is_empty());
}

#[test]
fn a_turn_that_cannot_start_says_why_and_ends_failed() {
    let mut c = CodebuffConverter::new();
    let mut out = Vec::new();
    c.begin_turn(None, &mut out);
    c.fail_to_start("agent_not_found", "no such command", &mut out);
    c.end_turn(
        TurnOutcome {
            status: c.failure_status(),
            exit_code: None,
            signal: None,
            message: Some("no such command".into()),
            stderr: None,
        },
        &mut out,
    );
    assert_eq!(types(&out), ["turn.started", "error", "turn.ended"]);
    let meta = turn_metadata(&out[2]);
    assert_eq!(meta.status, TurnStatus::Failed);
    assert_eq!(meta.message.as_deref(), Some("no such command"));
    assert_eq!(meta.cost.credits, 0.0);
    assert!(!meta.cost_reported);
}
