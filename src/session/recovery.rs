//! Rebuilding a session from its log after a daemon restart (pure: events in, state out).
//!
//! A daemon that died mid-turn (crash, `kill -9`, machine restart) left a turn without
//! `turn.ended` and items without `item.completed`. [`LogSummary`] reads the log once and knows
//! what the converter needs to go on (last item id, turns, cost, conversation id, pending
//! questions) and what the interrupted turn needs to end properly.

use std::collections::{BTreeMap, HashSet};

use crate::universal::{
    ContentPart, Cost, EventData, EventDraft, Item, ItemEventData, ItemKind, ItemRole, ItemStatus,
    PermissionData, PermissionStatus, QuestionData, TurnData, TurnMetadata, TurnPhase, TurnStatus,
    UniversalEvent,
};

/// What a session's log says about its state.
#[derive(Debug, Default)]
pub struct LogSummary {
    /// The highest `itm_N` used.
    pub last_item: u64,
    /// `turn.started` events seen.
    pub turns: u64,
    /// The session's cost: the sum of its turns' costs.
    pub cost: Cost,
    pub native_session_id: Option<String>,
    /// Questions requested and not resolved.
    pub pending_questions: BTreeMap<String, QuestionData>,
    pub resolved_questions: HashSet<String>,
    /// Permission requests requested and not resolved (their turn was interrupted).
    pub pending_permissions: BTreeMap<String, PermissionData>,
    /// The turn still open at the end of the log, if any: its id and its open items.
    pub open_turn: Option<OpenTurn>,
    /// True when the log holds `session.ended`.
    pub session_ended: bool,
    pub last_sequence: u64,
    /// [`super::info::prompt_preview`] of the first user message, for `SessionInfo`.
    pub first_prompt: Option<String>,
}

/// A turn the log never ended.
#[derive(Debug, Default)]
pub struct OpenTurn {
    pub turn_id: Option<String>,
    /// Items started and not completed, by id, in start order.
    pub open_items: Vec<Item>,
}

impl LogSummary {
    /// Takes one event into account (events must come in sequence order).
    pub fn observe(&mut self, e: &UniversalEvent) {
        self.last_sequence = e.sequence;
        if let Some(id) = &e.native_session_id {
            self.native_session_id = Some(id.to_string());
        }
        match &e.data {
            EventData::TurnStarted(t) => {
                self.turns += 1;
                self.open_turn = Some(OpenTurn {
                    turn_id: t.turn_id.clone(),
                    open_items: Vec::new(),
                });
            }
            EventData::TurnEnded(t) => {
                self.open_turn = None;
                if let Some(m) = &t.metadata {
                    self.cost = self.cost.plus(m.cost);
                }
            }
            EventData::ItemStarted(ItemEventData { item }) => {
                self.note_item(&item.item_id);
                if self.first_prompt.is_none()
                    && item.kind == ItemKind::Message
                    && item.role == Some(ItemRole::User)
                {
                    self.first_prompt = item.content.iter().find_map(|part| match part {
                        ContentPart::Text { text } => Some(super::info::prompt_preview(text)),
                        _ => None,
                    });
                }
                if let Some(turn) = &mut self.open_turn {
                    turn.open_items.push(item.clone());
                }
            }
            EventData::ItemCompleted(ItemEventData { item }) => {
                self.note_item(&item.item_id);
                if let Some(turn) = &mut self.open_turn {
                    turn.open_items.retain(|i| i.item_id != item.item_id);
                }
            }
            EventData::ItemDelta(d) => {
                if let Some(turn) = &mut self.open_turn {
                    if let Some(item) = turn.open_items.iter_mut().find(|i| i.item_id == *d.item_id)
                    {
                        append_delta(item, &d.delta);
                    }
                }
            }
            EventData::QuestionRequested(q) => {
                self.pending_questions
                    .insert(q.question_id.clone(), QuestionData::clone(q));
            }
            EventData::QuestionResolved(q) => {
                self.pending_questions.remove(&q.question_id);
                self.resolved_questions.insert(q.question_id.clone());
            }
            EventData::PermissionRequested(p) => {
                self.pending_permissions
                    .insert(p.permission_id.clone(), PermissionData::clone(p));
            }
            EventData::PermissionResolved(p) => {
                self.pending_permissions.remove(&p.permission_id);
            }
            EventData::SessionEnded(_) => self.session_ended = true,
            _ => {}
        }
    }

    fn note_item(&mut self, id: &str) {
        if let Some(n) = id.strip_prefix("itm_").and_then(|n| n.parse::<u64>().ok()) {
            self.last_item = self.last_item.max(n);
        }
    }

    /// The events that end the open turn as interrupted: its open items completed as failed,
    /// then `turn.ended` with `status: "interrupted"` (rule 5). Empty when no turn is open.
    pub fn interrupted_turn(&self, message: &str) -> Vec<EventDraft> {
        self.close_open_turn(TurnStatus::Interrupted, None, message)
    }

    /// The events that end the open turn with `status` (and `code`, when given): its open
    /// items completed as failed, then `turn.ended`. Empty when no turn is open.
    pub fn close_open_turn(
        &self,
        status: TurnStatus,
        code: Option<&str>,
        message: &str,
    ) -> Vec<EventDraft> {
        let Some(turn) = &self.open_turn else {
            return Vec::new();
        };
        // Requests nobody answered are rejected: the agent that asked is gone.
        let mut drafts: Vec<EventDraft> = self
            .pending_permissions
            .values()
            .map(|p| {
                let mut metadata = p.metadata.clone().unwrap_or_else(|| serde_json::json!({}));
                if let Some(m) = metadata.as_object_mut() {
                    m.insert("reply".into(), "reject".into());
                    m.insert("decidedBy".into(), "daemon".into());
                    m.insert("reason".into(), message.into());
                }
                EventDraft::synthetic(EventData::PermissionResolved(Box::new(PermissionData {
                    permission_id: p.permission_id.clone(),
                    action: p.action.clone(),
                    status: PermissionStatus::Reject,
                    metadata: Some(metadata),
                })))
            })
            .collect();
        drafts.extend(turn.open_items.iter().map(|item| {
            let mut item = item.clone();
            item.status = ItemStatus::Failed;
            EventDraft::synthetic(EventData::ItemCompleted(ItemEventData { item }))
        }));
        drafts.push(EventDraft::synthetic(EventData::TurnEnded(Box::new(
            TurnData {
                phase: TurnPhase::Ended,
                turn_id: turn.turn_id.clone(),
                metadata: Some(TurnMetadata {
                    status,
                    cost: Cost::default(),
                    cost_reported: false,
                    session_cost: Some(self.cost),
                    exit_code: None,
                    signal: None,
                    agent_id: None,
                    code: code.map(str::to_owned),
                    message: Some(message.to_owned()),
                    stderr_tail: None,
                }),
            },
        ))));
        drafts
    }
}

/// Adds streamed text to the item's last text-like part, so the failed completion carries what
/// was streamed before the interruption.
fn append_delta(item: &mut Item, delta: &str) {
    use crate::universal::ContentPart;
    match std::sync::Arc::make_mut(&mut item.content).last_mut() {
        Some(ContentPart::Text { text }) | Some(ContentPart::Reasoning { text, .. }) => {
            text.push_str(delta)
        }
        Some(ContentPart::ToolResult { output, .. }) => output.push_str(delta),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codebuff::CodebuffConverter;
    use crate::store::StoredEvent;

    /// Replays Codebuff lines through the converter into stamped events.
    fn log(lines: &[&str], end: bool) -> Vec<UniversalEvent> {
        let mut c = CodebuffConverter::new();
        let mut drafts = Vec::new();
        c.begin_turn(Some("first"), &mut drafts);
        for l in lines {
            c.convert_stdout_line(bytes::Bytes::copy_from_slice(l.as_bytes()), &mut drafts);
        }
        if end {
            c.end_turn(
                crate::codebuff::TurnOutcome {
                    status: TurnStatus::Completed,
                    exit_code: Some(0),
                    signal: None,
                    message: None,
                    stderr: None,
                },
                &mut drafts,
            );
        }
        StoredEvent::stamp_all(
            &mut drafts,
            1,
            &"t".into(),
            &"s".into(),
            c.native_session_id(),
        )
        .iter()
        .map(|e| e.decode().unwrap())
        .collect()
    }

    #[test]
    fn a_finished_log_has_no_open_turn() {
        let events = log(
            &[
                r#"{"type":"start","sessionId":"n1","messageHistoryLength":0}"#,
                r#"{"type":"text","text":"hi"}"#,
                r#"{"type":"finish","totalCost":4}"#,
            ],
            true,
        );
        let mut s = LogSummary::default();
        events.iter().for_each(|e| s.observe(e));
        assert!(s.open_turn.is_none());
        assert_eq!(s.turns, 1);
        assert_eq!(s.cost, Cost::from_credits(4.0));
        assert_eq!(s.native_session_id.as_deref(), Some("n1"));
        assert_eq!(s.last_item, 3);
        assert!(s.interrupted_turn("x").is_empty());
        assert_eq!(s.first_prompt.as_deref(), Some("first"));
    }

    #[test]
    fn an_interrupted_turn_fails_its_open_items_and_ends_interrupted() {
        let events = log(
            &[
                r#"{"type":"start","sessionId":"n1","messageHistoryLength":0}"#,
                r#"{"type":"tool_call","toolCallId":"q1","toolName":"ask_user","input":{"questions":[{"question":"?","options":[{"label":"a"},{"label":"b"}]}]}}"#,
                r#"{"type":"text_delta","text":"par"}"#,
                r#"{"type":"text_delta","text":"tial"}"#,
            ],
            false,
        );
        let mut s = LogSummary::default();
        events.iter().for_each(|e| s.observe(e));
        assert!(s.pending_questions.contains_key("q1"));
        let drafts = s.interrupted_turn("the daemon restarted");
        // The open message is completed (failed) with what was streamed, then the turn ends.
        let EventData::ItemCompleted(ItemEventData { item }) = &drafts[0].data else {
            panic!("first draft completes the open item")
        };
        assert_eq!(item.status, ItemStatus::Failed);
        assert_eq!(
            *item.content,
            vec![crate::universal::ContentPart::Text {
                text: "partial".into()
            }]
        );
        let EventData::TurnEnded(t) = &drafts.last().unwrap().data else {
            panic!("last draft ends the turn")
        };
        assert_eq!(t.metadata.as_ref().unwrap().status, TurnStatus::Interrupted);
        assert_eq!(t.turn_id.as_deref(), Some("turn_1"));
    }
}
