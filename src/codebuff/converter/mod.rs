//! `convert_codebuff`: the per-session converter from Codebuff agent lines to universal events.
//!
//! One [`CodebuffConverter`] lives as long as its session. It dispatches each event to its
//! handler (`handlers.rs`) and owns the state that makes the lifecycle rules of
//! `docs/universal-events.md` §3 hold across lines and turns: the turn (`turn.rs`), the open
//! streamed items ([`OpenItems`]), the stable `itm_N` of every native id ([`ItemIds`]),
//! subagents for `parent_id` (`subagents.rs`), tool inputs (for file references in results), the
//! questions and permission requests waiting for the user (`books.rs`) and costs (`cost.rs`).
//! Each input line turns into zero or more [`EventDraft`]s, pushed onto the caller's buffer;
//! the caller stamps sequence and time.

mod books;
mod cost;
mod handlers;
mod subagents;
#[cfg(test)]
mod tests;
mod turn;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::event::PrintModeEvent;
use super::ids::ItemIds;
use super::intake::{Intake, LineIntake, Stream};
use super::open_items::OpenItems;
use super::permissions::PermissionBook;
use super::questions::QuestionBook;
use crate::universal::{
    ContentPart, Cost, EventData, EventDraft, Item, ItemEventData, ItemKind, ItemRole, ItemStatus,
    QuestionData, RawLine, TurnStatus,
};
use cost::Spending;
use handlers::ToolCallInfo;
use subagents::Subagents;
use turn::Turn;
pub use turn::TurnOutcome;

/// Converts one session's Codebuff lines to universal event drafts (`docs/codebuff-events.md`).
#[derive(Debug, Default)]
pub struct CodebuffConverter {
    ids: ItemIds,
    turns: u64,
    native_session_id: Option<String>,
    intake: LineIntake,
    open: OpenItems,
    subagents: Subagents,
    /// Reasoning segments seen per run (a run's later segments get `runId#N`).
    reasoning_segments: HashMap<String, u32>,
    calls: HashMap<String, ToolCallInfo>,
    questions: QuestionBook,
    permissions: PermissionBook,
    /// Lines for the agent's stdin the conversion decided on (the policy's permission
    /// replies), for the caller to write.
    outbox: Vec<String>,
    turn: Turn,
    spending: Spending,
}

impl CodebuffConverter {
    /// A converter for a new session.
    pub fn new() -> Self {
        Self::default()
    }

    /// A converter for a session restored from its log (daemon restart): fresh `itm_N` ids go
    /// on after `last_item`, turns after `turns`, the cost total and conversation id carry over,
    /// and questions still pending can be answered.
    pub fn restored(
        last_item: u64,
        turns: u64,
        native_session_id: Option<String>,
        session_cost: Cost,
        pending_questions: Vec<QuestionData>,
        resolved_questions: HashSet<String>,
    ) -> Self {
        CodebuffConverter {
            ids: ItemIds::after(last_item),
            turns,
            native_session_id,
            spending: Spending::restored(session_cost),
            questions: QuestionBook::restored(pending_questions, resolved_questions),
            turn: Turn::restored(),
            ..Self::default()
        }
    }

    /// The agent's conversation id, once a `start` announced it (for `--continue`).
    pub fn native_session_id(&self) -> Option<&str> {
        self.native_session_id.as_deref()
    }

    /// The session's total cost so far.
    pub fn session_cost(&self) -> Cost {
        self.spending.session()
    }

    /// The session's cost with what the running turn has spent so far.
    pub fn cost_with_running_turn(&self) -> Cost {
        self.spending.with_running_turn(self.turn.running())
    }

    // ----- turns ------------------------------------------------------------------------------

    /// True once the current turn has its `turn.ended`.
    pub fn turn_ended(&self) -> bool {
        self.turn.ended()
    }

    /// True once the current turn's run said `finish` (its ending waits for the exit).
    pub fn run_finished(&self) -> bool {
        self.turn.run_finished()
    }

    /// The turn status the run's own error events suggest (`timeout`, `aborted`), else `failed`.
    pub fn failure_status(&self) -> TurnStatus {
        self.turn.failure_status()
    }

    /// Opens a turn for a user message: `turn.started` and, when there is a prompt, the user
    /// item (rule 2).
    pub fn begin_turn(&mut self, prompt: Option<&str>, out: &mut Vec<EventDraft>) {
        let content = prompt.map(|text| {
            vec![ContentPart::Text {
                text: text.to_owned(),
            }]
        });
        self.open_turn(content, out);
    }

    /// Opens a turn whose user item has this content (text, images).
    pub fn begin_turn_with(&mut self, content: Vec<ContentPart>, out: &mut Vec<EventDraft>) {
        self.open_turn(Some(content), out);
    }

    fn open_turn(&mut self, content: Option<Vec<ContentPart>>, out: &mut Vec<EventDraft>) {
        self.turns += 1;
        let (turn, started) = Turn::open(self.turns);
        self.turn = turn;
        self.spending.turn_opened();
        out.push(started);
        let Some(content) = content else {
            return;
        };
        let item = Item {
            item_id: self.ids.fresh(),
            native_item_id: None,
            parent_id: None,
            kind: ItemKind::Message,
            role: Some(ItemRole::User),
            content: Arc::new(content),
            status: ItemStatus::Completed,
        };
        push_synthetic_whole(item, out);
    }

    /// Ends the turn once the agent's output is over (rule 5): `completed` with the run's cost
    /// when it said `finish`, reported no fatal error and `outcome` completed (the exit was
    /// clean); otherwise open items fail and `turn.ended` carries the outcome, the failure's
    /// code and message (and the cost the run reported, if it did).
    pub fn end_turn(&mut self, outcome: TurnOutcome, out: &mut Vec<EventDraft>) {
        let Some(ending) = self.turn.end(outcome, &mut self.spending) else {
            return;
        };
        if ending.fail_open_items {
            self.close_everything(ItemStatus::Failed, out);
        }
        out.push(ending.turn_ended);
    }

    /// Records that the turn failed before the agent could run (its command cannot start): a
    /// synthetic `error` with `code`. The turn then ends with [`Self::end_turn`]; the session
    /// goes on.
    pub fn fail_to_start(&mut self, code: &str, message: &str, out: &mut Vec<EventDraft>) {
        out.push(self.turn.fail_to_start(code, message));
    }

    /// Completes every open item (end of a turn), then the subagents still running; each in
    /// the order they were opened.
    fn close_everything(&mut self, status: ItemStatus, out: &mut Vec<EventDraft>) {
        self.open.close_all(status, out);
        self.subagents.close_running(status, out);
    }

    // ----- lines and events -------------------------------------------------------------------

    /// Converts one stdout line (without its terminator). Never fails: a line that is not an
    /// event becomes `agent.unparsed`; a blank line carries nothing.
    pub fn convert_stdout_line(&mut self, line: bytes::Bytes, out: &mut Vec<EventDraft>) {
        match self.intake.stdout(line) {
            Intake::Event(event, raw) => self.convert_event(event, Some(raw), out),
            Intake::Unparsed(draft) => out.push(draft),
            Intake::Blank | Intake::Diagnostic => {}
        }
    }

    /// Converts one stderr line if it is a JSON event. Returns false for a plain log line,
    /// which the caller keeps as diagnostics.
    pub fn convert_stderr_line(&mut self, line: &[u8], out: &mut Vec<EventDraft>) -> bool {
        match self.intake.stderr(line) {
            Intake::Event(event, raw) => {
                self.convert_event(event, Some(raw), out);
                true
            }
            Intake::Unparsed(draft) => {
                out.push(draft);
                true
            }
            Intake::Blank | Intake::Diagnostic => false,
        }
    }

    /// Reports a line that was longer than the reader's limit and was skipped.
    pub fn oversized_line(
        &mut self,
        stream: Stream,
        length: usize,
        limit: usize,
        prefix: &[u8],
    ) -> EventDraft {
        self.intake.oversized(stream, length, limit, prefix)
    }

    /// Converts one parsed event.
    pub fn convert_event(
        &mut self,
        event: PrintModeEvent,
        raw: Option<RawLine>,
        out: &mut Vec<EventDraft>,
    ) {
        match event {
            PrintModeEvent::Start(e) => self.start(*e, raw, out),
            PrintModeEvent::TextDelta(e) => self.text_delta(e, raw, out),
            PrintModeEvent::Text(e) => self.text(e, raw, out),
            PrintModeEvent::ReasoningDelta(e) => self.reasoning_delta(e, raw, out),
            PrintModeEvent::ToolCall(e) => self.tool_call(*e, raw, out),
            PrintModeEvent::ToolProgress(e) => self.tool_progress(*e, raw, out),
            PrintModeEvent::ToolResult(e) => self.tool_result(*e, raw, out),
            PrintModeEvent::SubagentStart(e) => self.subagent_start(*e, raw, out),
            PrintModeEvent::SubagentFinish(e) => self.subagent_finish(*e, raw, out),
            PrintModeEvent::Error(e) => self.error(*e, raw, out),
            PrintModeEvent::Finish(e) => self.finish(*e, raw, out),
            PrintModeEvent::Download(e) => {
                let detail = serde_json::json!({"type": "download", "version": e.version, "status": e.status});
                self.status_item("download", Some(detail.to_string()), raw, out);
            }
            PrintModeEvent::PermissionRequest(e) => self.permission_request(*e, raw, out),
            PrintModeEvent::Cost(e) => self.cost(e.total_cost, raw, out),
            PrintModeEvent::Other(e) => self.other(*e, raw, out),
        }
    }
}

/// An item that starts and completes at once (tool calls, results, status lines).
fn whole_item(item: Item, raw: Option<RawLine>, out: &mut Vec<EventDraft>) {
    let mut started = item.clone();
    started.status = ItemStatus::InProgress;
    out.push(EventDraft::from_agent(
        EventData::ItemStarted(ItemEventData { item: started }),
        raw.clone(),
    ));
    out.push(EventDraft::from_agent(
        EventData::ItemCompleted(ItemEventData { item }),
        raw,
    ));
}

/// [`whole_item`] for an item the daemon made up (the user's message).
fn push_synthetic_whole(item: Item, out: &mut Vec<EventDraft>) {
    let mut started = item.clone();
    started.status = ItemStatus::InProgress;
    out.push(EventDraft::synthetic(EventData::ItemStarted(
        ItemEventData { item: started },
    )));
    out.push(EventDraft::synthetic(EventData::ItemCompleted(
        ItemEventData { item },
    )));
}
