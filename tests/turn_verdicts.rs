//! One log, one answer: how a turn ended, as every door projects it.
//!
//! One table of logs (a turn's universal events from its `turn.started`, as the ACP and
//! WebSocket doors read them) and, for each, one expected verdict: status, cause, reason, the
//! turn's and the session's cost, the answer. Each log runs through the engine's
//! `session::TurnTracker` and through each door's own projection, called as the pure functions
//! the doors run on the log: the ACP door's `Projector` and prompt `answer` (stop reason or
//! JSON-RPC error, and its `usage_update`), the WebSocket door's `TurnProjection`
//! (`prompt-response` / `prompt-error`), the terminal's `TurnWatch`, exit status and ending
//! lines. Where the doors' protocols say it differently, the mapping is the one documented in
//! `docs/universal-events.md` §5 ("What each door says") and asserted here as such.

use std::path::PathBuf;
use std::time::Duration;

use codebuffd::acp::project::{Effect, Projector, ProjectorOptions, META_KEY};
use codebuffd::session::{SessionInfo, TurnEnd, TurnTracker};
use codebuffd::term::error::exit;
use codebuffd::term::format::Style;
use codebuffd::term::turn::{ending_lines, exit_code, Stop, TurnResult, TurnWatch};
use codebuffd::universal::{Cost, EventData, TurnStatus, UniversalEvent};
use codebuffd::ws::server::ServerAction;
use codebuffd::ws::turn::TurnProjection;
use serde_json::{json, Value};

/// The session's cost before the turn, as the ACP door reads it when the prompt starts.
const COST_BEFORE: f64 = 5.0;
/// The session's cost as `info()` says it when the WebSocket door answers (a later turn may
/// have run meanwhile: the log's `session_cost` wins when there is one).
const INFO_COST: f64 = 7.0;
/// The session's budget (the WebSocket door reports what is left of it).
const BUDGET: f64 = 20.0;
/// The causes that mean a credential is missing or refused.
const AUTH_CAUSES: [&str; 2] = ["auth_failed", "credentials_missing"];

/// The verdict every door must project.
#[derive(Debug)]
struct Expect {
    status: TurnStatus,
    /// The stable code of why the turn did not complete (`None`: it completed).
    cause: Option<&'static str>,
    /// Why, in words (`None`: it completed).
    reason: Option<&'static str>,
    turn_credits: f64,
    /// The session's cost after the turn, as the log says it (`None`: a log older than
    /// `session_cost`).
    session_credits: Option<f64>,
    answer: Option<&'static str>,
}

struct Case {
    name: &'static str,
    log: Vec<Value>,
    expect: Expect,
}

fn started() -> Value {
    json!({"type": "turn.started", "data": {"phase": "started", "turn_id": "turn_1"}})
}

fn item(id: &str, kind: &str, role: &str, text: &str, status: &str) -> Value {
    json!({"item_id": id, "native_item_id": null, "parent_id": null, "kind": kind, "role": role,
        "content": [{"type": "text", "text": text}], "status": status})
}

fn user(text: &str) -> Vec<Value> {
    let i = item("itm_1", "message", "user", text, "completed");
    vec![
        json!({"type": "item.started", "data": {"item": i}}),
        json!({"type": "item.completed", "data": {"item": i}}),
    ]
}

/// An assistant message streamed in one delta and completed.
fn said(id: &str, text: &str) -> Vec<Value> {
    vec![
        json!({"type": "item.started", "data": {"item": item(id, "message", "assistant", "", "in_progress")}}),
        json!({"type": "item.delta", "data": {"item_id": id, "native_item_id": null, "delta": text}}),
        json!({"type": "item.completed", "data": {"item": item(id, "message", "assistant", text, "completed")}}),
    ]
}

/// An assistant message the turn's end found open: the daemon completes it as failed.
fn cut_off(id: &str, text: &str) -> Vec<Value> {
    vec![
        json!({"type": "item.started", "data": {"item": item(id, "message", "assistant", "", "in_progress")}}),
        json!({"type": "item.delta", "data": {"item_id": id, "native_item_id": null, "delta": text}}),
        json!({"type": "item.completed", "data": {"item": item(id, "message", "assistant", text, "failed")}}),
    ]
}

fn error(code: &str, message: &str) -> Value {
    json!({"type": "error", "data": {"message": message, "code": code, "details": null}})
}

fn credits(c: f64) -> Value {
    json!({"credits": c, "usd": c / 100.0})
}

/// `turn.ended` with `metadata` (`session_cost` left out when `None`).
fn ended(status: &str, turn: f64, reported: bool, session: Option<f64>, extra: Value) -> Value {
    let mut meta = json!({"status": status, "cost": credits(turn), "cost_reported": reported});
    if let Some(s) = session {
        meta["session_cost"] = credits(s);
    }
    if let (Some(m), Some(extra)) = (meta.as_object_mut(), extra.as_object()) {
        m.extend(extra.clone());
    }
    json!({"type": "turn.ended", "data": {"phase": "ended", "turn_id": "turn_1", "metadata": meta}})
}

fn session_ended(reason: &str, message: Option<&str>, cost: f64) -> Value {
    json!({"type": "session.ended", "data": {"reason": reason, "terminated_by": "daemon",
        "message": message, "cost": credits(cost)}})
}

fn log(parts: Vec<Vec<Value>>) -> Vec<Value> {
    parts.into_iter().flatten().collect()
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "a completed turn",
            log: log(vec![
                vec![started()],
                user("hi"),
                said("itm_2", "thinking out loud"),
                said("itm_3", "the answer"),
                vec![ended("completed", 2.5, true, Some(9.0), json!({}))],
            ]),
            expect: Expect {
                status: TurnStatus::Completed,
                cause: None,
                reason: None,
                turn_credits: 2.5,
                session_credits: Some(9.0),
                answer: Some("the answer"),
            },
        },
        Case {
            name: "a completed turn whose run reported no cost",
            log: log(vec![
                vec![started()],
                user("hi"),
                said("itm_2", "done"),
                vec![ended("completed", 0.0, false, Some(5.0), json!({}))],
            ]),
            expect: Expect {
                status: TurnStatus::Completed,
                cause: None,
                reason: None,
                turn_credits: 0.0,
                session_credits: Some(5.0),
                answer: Some("done"),
            },
        },
        Case {
            name: "a failed turn (the agent's error, then its exit)",
            log: log(vec![
                vec![started()],
                user("hi"),
                vec![
                    error("backend_error", "Codebuff backend unreachable"),
                    ended(
                        "failed",
                        0.4,
                        true,
                        Some(5.4),
                        json!({"exit_code": 3, "message": "the agent exited with status 3",
                            "stderr_tail": "fetch failed"}),
                    ),
                ],
            ]),
            expect: Expect {
                status: TurnStatus::Failed,
                cause: Some("backend_error"),
                reason: Some("Codebuff backend unreachable (the agent exited with status 3)"),
                turn_credits: 0.4,
                session_credits: Some(5.4),
                answer: None,
            },
        },
        Case {
            name: "a turn whose credential was refused",
            log: log(vec![
                vec![started()],
                user("hi"),
                vec![ended(
                    "failed",
                    0.0,
                    false,
                    Some(5.0),
                    json!({"exit_code": 1, "code": "auth_failed", "message": "the API key was refused"}),
                )],
            ]),
            expect: Expect {
                status: TurnStatus::Failed,
                cause: Some("auth_failed"),
                reason: Some("the API key was refused"),
                turn_credits: 0.0,
                session_credits: Some(5.0),
                answer: None,
            },
        },
        Case {
            name: "a turn whose agent could not start: no credential",
            log: log(vec![
                vec![started()],
                user("hi"),
                vec![
                    error("credentials_missing", "no Codebuff credential"),
                    ended(
                        "failed",
                        0.0,
                        false,
                        Some(5.0),
                        json!({"message": "the agent could not start"}),
                    ),
                ],
            ]),
            expect: Expect {
                status: TurnStatus::Failed,
                cause: Some("credentials_missing"),
                reason: Some("no Codebuff credential (the agent could not start)"),
                turn_credits: 0.0,
                session_credits: Some(5.0),
                answer: None,
            },
        },
        Case {
            name: "the agent crashed (killed by a signal, open items failed)",
            log: log(vec![
                vec![started()],
                user("hi"),
                cut_off("itm_2", "half an"),
                vec![ended(
                    "failed",
                    0.0,
                    false,
                    Some(5.0),
                    json!({"signal": 9, "message": "the agent was killed by signal 9",
                        "stderr_tail": "Segmentation fault"}),
                )],
            ]),
            expect: Expect {
                status: TurnStatus::Failed,
                cause: Some("failed"),
                reason: Some("the agent was killed by signal 9"),
                turn_credits: 0.0,
                session_credits: Some(5.0),
                answer: Some("half an"),
            },
        },
        Case {
            name: "a cancelled turn (the agent's `aborted` is what it said)",
            log: log(vec![
                vec![started()],
                user("hi"),
                said("itm_2", "partial"),
                vec![
                    error("aborted", "the run was aborted"),
                    ended(
                        "cancelled",
                        1.0,
                        true,
                        Some(6.0),
                        json!({"message": "cancelled"}),
                    ),
                ],
            ]),
            expect: Expect {
                status: TurnStatus::Cancelled,
                cause: Some("cancelled"),
                reason: Some("the run was aborted (cancelled)"),
                turn_credits: 1.0,
                session_credits: Some(6.0),
                answer: Some("partial"),
            },
        },
        Case {
            name: "the session was terminated before the turn ended",
            log: log(vec![
                vec![started()],
                user("hi"),
                vec![session_ended("terminated", None, 5.0)],
            ]),
            expect: Expect {
                status: TurnStatus::Cancelled,
                cause: Some("session_ended"),
                reason: Some("the session ended before the turn did"),
                turn_credits: 0.0,
                session_credits: Some(5.0),
                answer: None,
            },
        },
        Case {
            name: "the session ended with an error before the turn ended (older versions)",
            log: log(vec![
                vec![started()],
                user("hi"),
                vec![session_ended("error", Some("out of credits"), 5.0)],
            ]),
            expect: Expect {
                status: TurnStatus::Failed,
                cause: Some("session_ended"),
                reason: Some("out of credits"),
                turn_credits: 0.0,
                session_credits: Some(5.0),
                answer: None,
            },
        },
        Case {
            name: "a daemon restart interrupted the turn",
            log: log(vec![
                vec![started()],
                user("hi"),
                cut_off("itm_2", "I was saying"),
                vec![ended(
                    "interrupted",
                    0.0,
                    false,
                    Some(5.0),
                    json!({"message": "the daemon stopped during this turn and was restarted"}),
                )],
            ]),
            expect: Expect {
                status: TurnStatus::Interrupted,
                cause: Some("interrupted"),
                reason: Some("the daemon stopped during this turn and was restarted"),
                turn_credits: 0.0,
                session_credits: Some(5.0),
                answer: Some("I was saying"),
            },
        },
        Case {
            name: "a turn that timed out",
            log: log(vec![
                vec![started()],
                user("hi"),
                vec![ended(
                    "timed_out",
                    0.2,
                    true,
                    Some(5.2),
                    json!({"message": "the turn took longer than 600 s"}),
                )],
            ]),
            expect: Expect {
                status: TurnStatus::TimedOut,
                cause: Some("timed_out"),
                reason: Some("the turn took longer than 600 s"),
                turn_credits: 0.2,
                session_credits: Some(5.2),
                answer: None,
            },
        },
        Case {
            name: "a turn stopped by the session's budget",
            log: log(vec![
                vec![started()],
                user("hi"),
                vec![ended(
                    "budget_exhausted",
                    15.0,
                    true,
                    Some(20.0),
                    json!({"code": "budget_exhausted", "message": "the session's credit budget (20) is spent"}),
                )],
            ]),
            expect: Expect {
                status: TurnStatus::BudgetExhausted,
                cause: Some("budget_exhausted"),
                reason: Some("the session's credit budget (20) is spent"),
                turn_credits: 15.0,
                session_credits: Some(20.0),
                answer: None,
            },
        },
        Case {
            name: "the log could not be written (store error)",
            log: log(vec![
                vec![started()],
                user("hi"),
                vec![ended(
                    "failed",
                    0.0,
                    false,
                    Some(5.0),
                    json!({"code": "store_error", "message": "the event log could not be written"}),
                )],
            ]),
            expect: Expect {
                status: TurnStatus::Failed,
                cause: Some("store_error"),
                reason: Some("the event log could not be written"),
                turn_credits: 0.0,
                session_credits: Some(5.0),
                answer: None,
            },
        },
        Case {
            name: "a completed turn in a log older than `session_cost`",
            log: log(vec![
                vec![started()],
                user("hi"),
                said("itm_2", "old"),
                vec![ended("completed", 1.5, true, None, json!({}))],
            ]),
            expect: Expect {
                status: TurnStatus::Completed,
                cause: None,
                reason: None,
                turn_credits: 1.5,
                session_credits: None,
                answer: Some("old"),
            },
        },
        Case {
            name: "`turn.ended` without metadata (no version writes one)",
            log: log(vec![
                vec![started()],
                user("hi"),
                vec![
                    json!({"type": "turn.ended", "data": {"phase": "ended", "turn_id": "turn_1"}}),
                ],
            ]),
            expect: Expect {
                status: TurnStatus::Interrupted,
                cause: Some("interrupted"),
                reason: Some("the log does not say how the turn ended"),
                turn_credits: 0.0,
                session_credits: None,
                answer: None,
            },
        },
    ]
}

/// The log's events as the doors read them back (envelopes decoded like the log serves them).
fn events(lines: &[Value]) -> Vec<EventData> {
    lines
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let mut e = json!({"event_id": format!("evt_{}", i + 1), "sequence": i + 1,
                "time": "2026-01-01T00:00:00.000Z", "session_id": "s",
                "native_session_id": null, "synthetic": false, "source": "agent", "raw": null});
            e["type"] = v["type"].clone();
            e["data"] = v["data"].clone();
            serde_json::from_value::<UniversalEvent>(e)
                .unwrap_or_else(|err| panic!("event {v}: {err}"))
                .data
        })
        .collect()
}

/// The engine's verdict: the event that ends the turn is the log's last.
fn tracker(log: &[EventData]) -> TurnEnd {
    let mut tracker = TurnTracker::new();
    for (i, data) in log.iter().enumerate() {
        if let Some(end) = tracker.take(data) {
            assert_eq!(i + 1, log.len(), "the turn ended before the log did");
            return end.clone();
        }
    }
    panic!("the tracker saw no end")
}

/// What the ACP door answers `session/prompt` with (the JSON of the response or the error),
/// and the `_meta.codebuff` of the last `usage_update` it sent.
fn acp(log: &[EventData], client_cancelled: bool) -> (Result<Value, Value>, Value) {
    let options = ProjectorOptions {
        cwd: PathBuf::from("/work"),
        replay: false,
        notices: false,
    };
    let mut projector = Projector::new(options, Cost::from_credits(COST_BEFORE));
    let mut effects = Vec::new();
    let mut usage = Value::Null;
    for (i, data) in log.iter().enumerate() {
        projector.apply(data, &mut effects);
        for effect in effects.drain(..) {
            let end = match effect {
                Effect::Update(update) => {
                    let update = serde_json::to_value(&update).expect("an update");
                    if update["sessionUpdate"] == "usage_update" {
                        usage = update["_meta"][META_KEY].clone();
                    }
                    continue;
                }
                Effect::TurnEnded(end) => Some(end),
                Effect::SessionEnded => None,
                _ => continue,
            };
            assert_eq!(i + 1, log.len(), "the turn ended before the log did");
            let answer = codebuffd::acp::prompt::answer(end.as_ref(), client_cancelled)
                .map(|r| serde_json::to_value(r).expect("a response"))
                .map_err(|e| serde_json::to_value(e).expect("an error"));
            return (answer, usage);
        }
    }
    panic!("the ACP door saw no end")
}

/// What the WebSocket door answers a `prompt` with.
fn ws(log: &[EventData]) -> ServerAction {
    let mut turn = TurnProjection::new("p1", "s");
    let mut actions = Vec::new();
    for (i, data) in log.iter().enumerate() {
        if turn.take(data, &mut actions) {
            assert_eq!(i + 1, log.len(), "the turn ended before the log did");
            return turn.finish(&info(), None);
        }
    }
    panic!("the WebSocket door saw no end")
}

/// The session as `info()` says it when the WebSocket door answers (read from its JSON, as
/// the terminal's `--url` transport reads it: fields added later keep their defaults).
fn info() -> SessionInfo {
    serde_json::from_value(json!({
        "sessionId": "s", "agent": "codebuff", "agentMode": "build", "permissionMode": "bypass",
        "model": null, "variant": null, "nativeSessionId": null, "ended": false,
        "eventCount": 20, "createdAt": 0, "updatedAt": 0, "directory": "/work", "title": null,
        "status": "idle", "budget": BUDGET, "remaining": BUDGET - INFO_COST,
        "cost": credits(INFO_COST), "turns": 1,
    }))
    .expect("a SessionInfo")
}

/// The terminal's verdict (through its `TurnWatch`, as `exec` follows the log).
fn term(log: &[EventData]) -> TurnEnd {
    let mut watch = TurnWatch::default();
    for (i, data) in log.iter().enumerate() {
        if !watch.admits(data) {
            continue;
        }
        if let Some(end) = watch.take(data) {
            assert_eq!(i + 1, log.len(), "the turn ended before the log did");
            return end;
        }
    }
    panic!("the terminal saw no end")
}

fn result(end: TurnEnd, stopped_by: Option<Stop>) -> TurnResult {
    TurnResult {
        end,
        elapsed: Duration::from_millis(1200),
        stopped_by,
    }
}

fn approx(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn every_door_gives_the_engines_verdict_for_the_same_log() {
    for case in cases() {
        let name = case.name;
        let e = &case.expect;
        let log = events(&case.log);

        // The engine's verdict.
        let end = tracker(&log);
        assert_eq!(end.status, e.status, "{name}: status");
        assert_eq!(end.completed(), e.cause.is_none(), "{name}: completed");
        if let (Some(cause), Some(reason)) = (e.cause, e.reason) {
            assert_eq!(end.cause(), cause, "{name}: cause");
            assert_eq!(end.reason(), reason, "{name}: reason");
        }
        assert!(
            approx(end.turn_cost.credits, e.turn_credits),
            "{name}: turn cost"
        );
        assert_eq!(
            end.session_cost.map(|c| c.credits),
            e.session_credits,
            "{name}: session cost"
        );
        assert_eq!(end.answer.as_deref(), e.answer, "{name}: answer");

        // The terminal: the same verdict, whole.
        let seen = term(&log);
        assert_eq!(seen, end, "{name}: the terminal's verdict");
        acp_says(name, e, &log);
        ws_says(name, e, &log);
        term_says(name, e, seen);
    }
}

/// ACP: `end_turn` for a completed turn, `cancelled` for a cancelled one, else a JSON-RPC
/// error carrying the status, cause and reason (`-32000` for refused or missing credentials,
/// else `-32603`); its `usage_update` carries the session's cost and the turn's status.
fn acp_says(name: &str, e: &Expect, log: &[EventData]) {
    let (answer, usage) = acp(log, false);
    match (e.status, answer) {
        (TurnStatus::Completed, Ok(r)) => assert_eq!(r["stopReason"], "end_turn", "{name}"),
        (TurnStatus::Cancelled, Ok(r)) => assert_eq!(r["stopReason"], "cancelled", "{name}"),
        (status, Err(error)) if status != TurnStatus::Completed => {
            let cause = e.cause.unwrap_or_default();
            let rpc = if AUTH_CAUSES.contains(&cause) {
                -32000
            } else {
                -32603
            };
            assert_eq!(error["code"], rpc, "{name}: {error}");
            assert_eq!(error["message"], e.reason.unwrap_or_default(), "{name}");
            assert_eq!(error["data"]["code"], cause, "{name}");
            assert_eq!(error["data"]["status"], json!(status), "{name}");
            assert!(
                approx(
                    error["data"]["credits"].as_f64().unwrap_or(-1.0),
                    e.turn_credits
                ),
                "{name}: {error}"
            );
        }
        (_, answer) => panic!("{name}: ACP answered {answer:?}"),
    }
    // The session's cost: the log's, else (an older log) the cost at the prompt's start plus
    // the turn's.
    let session = e.session_credits.unwrap_or(COST_BEFORE + e.turn_credits);
    assert!(
        approx(usage["credits"].as_f64().unwrap_or(-1.0), session),
        "{name}: {usage}"
    );
    assert_eq!(usage["turn"]["status"], json!(e.status), "{name}: {usage}");
}

/// WebSocket: `prompt-response` (its output's status, answer and cost, the session's cost in
/// `sessionState`) for a completed turn; `prompt-error` with the cause as `error` and the
/// reason as `message` otherwise — a cancelled turn included (the protocol has no other way to
/// say it). The balance is what the session's cost leaves of its budget.
fn ws_says(name: &str, e: &Expect, log: &[EventData]) {
    // The session's cost: the log's, else (an older log) what the session says now.
    let session = e.session_credits.unwrap_or(INFO_COST);
    match ws(log) {
        ServerAction::PromptResponse {
            session_state,
            output,
            ..
        } => {
            assert_eq!(e.status, TurnStatus::Completed, "{name}");
            assert_eq!(output.status, "completed", "{name}");
            assert_eq!(output.value, e.answer.unwrap_or_default(), "{name}");
            assert!(approx(output.cost.credits, e.turn_credits), "{name}");
            assert_eq!(output.turn_id.as_deref(), Some("turn_1"), "{name}");
            assert!(
                approx(
                    session_state["cost"]["credits"].as_f64().unwrap_or(-1.0),
                    session
                ),
                "{name}: {session_state}"
            );
            assert_eq!(
                session_state["remainingBalance"],
                json!(BUDGET - session),
                "{name}"
            );
        }
        ServerAction::PromptError {
            message,
            error,
            remaining_balance,
            ..
        } => {
            assert_ne!(e.status, TurnStatus::Completed, "{name}");
            assert_eq!(error.as_deref(), e.cause, "{name}");
            assert_eq!(Some(message.as_str()), e.reason, "{name}");
            assert_eq!(remaining_balance, Some(BUDGET - session), "{name}");
        }
        other => panic!("{name}: the WebSocket door answered {other:?}"),
    }
}

/// Terminal: exit status 0 for a completed turn, 130 for a cancelled one (143 when the user's
/// SIGTERM cancelled it), 3 when the budget is spent or a credential is missing or refused
/// (where ACP answers "authentication required"), else 1; a turn that did not complete is
/// explained on stderr by the reason (a warning when cancelled by someone else, an error
/// otherwise — nothing when the user cancelled it); the closing line says the status and both
/// costs (the turn's only when the log does not say the session's).
fn term_says(name: &str, e: &Expect, seen: TurnEnd) {
    let code = match e.status {
        TurnStatus::Completed => exit::OK,
        TurnStatus::Cancelled => exit::CANCELLED,
        TurnStatus::BudgetExhausted => exit::BUDGET_OR_CREDENTIALS,
        TurnStatus::Failed if AUTH_CAUSES.contains(&e.cause.unwrap_or_default()) => {
            exit::BUDGET_OR_CREDENTIALS
        }
        TurnStatus::Failed | TurnStatus::TimedOut | TurnStatus::Interrupted => exit::FAILED,
    };
    let by_others = result(seen.clone(), None);
    assert_eq!(exit_code(&by_others), code, "{name}: exit status");
    let lines = ending_lines(&by_others, "s", true);
    let (closing_style, closing) = lines.last().cloned().expect("a closing line");
    match e.reason {
        None => assert_eq!(lines.len(), 1, "{name}: {lines:?}"),
        Some(reason) => {
            let style = if e.status == TurnStatus::Cancelled {
                Style::Warn
            } else {
                Style::Error
            };
            assert_eq!(
                lines[0],
                (style, format!("codebuffd: {reason}")),
                "{name}: {lines:?}"
            );
        }
    }
    let word = json!(e.status)
        .as_str()
        .unwrap_or_default()
        .replace('_', " ");
    assert!(closing.contains(&word), "{name}: {closing}");
    assert_eq!(
        closing_style,
        if e.status == TurnStatus::Completed {
            Style::Ok
        } else if e.status == TurnStatus::Cancelled {
            Style::Warn
        } else {
            Style::Error
        },
        "{name}"
    );
    assert!(
        closing.contains(&format!("{:.2} credits", e.turn_credits)),
        "{name}: {closing}"
    );
    match e.session_credits {
        Some(s) => assert!(
            closing.contains(&format!("{s:.2} in the session")),
            "{name}: {closing}"
        ),
        None => assert!(!closing.contains("in the session"), "{name}: {closing}"),
    }
    // The user's own cancel needs no explaining; after SIGTERM the exit says so.
    if e.status == TurnStatus::Cancelled {
        let by_user = result(seen, Some(Stop::Terminate));
        assert_eq!(exit_code(&by_user), exit::TERMINATED, "{name}");
        assert_eq!(ending_lines(&by_user, "s", false), vec![], "{name}");
    }
}

#[test]
fn acp_answers_cancelled_for_a_prompt_the_client_cancelled_whatever_its_turn_did() {
    // ACP's own rule (`session/cancel`): the prompt answers `cancelled` even when the turn
    // then completed or failed. The other doors report the turn as it ended.
    for case in cases() {
        let (answer, _) = acp(&events(&case.log), true);
        let answer = answer.unwrap_or_else(|e| panic!("{}: {e}", case.name));
        assert_eq!(answer["stopReason"], "cancelled", "{}", case.name);
    }
}

#[test]
fn the_terminal_skips_the_end_of_a_turn_that_ran_ahead_of_its_own() {
    // The terminal follows the log from before its message was queued, so the rest of a turn
    // that was running then goes by first; ACP and the WebSocket door start at their own
    // turn's `turn.started`. The earlier turn's end is not this turn's.
    let ahead = log(vec![
        said("itm_2", "first answer"),
        vec![ended(
            "failed",
            0.0,
            false,
            Some(5.0),
            json!({"message": "not this turn"}),
        )],
    ]);
    let mine = cases().remove(0);
    let all = events(&[ahead.clone(), mine.log.clone()].concat());
    let mut watch = TurnWatch::default();
    let mut admitted = 0;
    let mut verdicts = Vec::new();
    for data in &all {
        if watch.admits(data) {
            admitted += 1;
            verdicts.extend(watch.take(data));
        }
    }
    assert_eq!(admitted, mine.log.len());
    assert_eq!(verdicts, vec![tracker(&events(&mine.log))]);
}

#[test]
fn a_session_ended_before_the_turn_started_ends_it_by_the_sessions_reason() {
    // A queued message whose session ended first: the terminal (which reads the log from
    // before its message) takes the engine's verdict; ACP and the WebSocket door never read
    // such a log — their `turn.started` never comes, and the engine refuses the queued prompt
    // instead (`cancelled` in ACP, `prompt-error` on the WebSocket).
    let log = events(&[session_ended("error", Some("out of credits"), 5.0)]);
    let end = tracker(&log);
    assert_eq!(end.status, TurnStatus::Failed);
    assert_eq!(end.cause(), "session_ended");
    assert_eq!(term(&log), end);
    assert_eq!(exit_code(&result(end, None)), exit::FAILED);
}
