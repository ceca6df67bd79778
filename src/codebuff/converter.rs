//! `convert_codebuff`: the per-session converter from Codebuff agent lines to universal events.
//!
//! One [`CodebuffConverter`] lives as long as its session. It dispatches each event to its
//! handler and owns the state that makes the lifecycle rules of `docs/universal-events.md` §3
//! hold across lines and turns: the open streamed items ([`OpenItems`]), the stable `itm_N` of
//! every native id ([`ItemIds`]), subagents (for `parent_id`), tool inputs (for file references
//! in results), the questions ([`QuestionBook`]) and costs. Each input line turns into zero or
//! more [`EventDraft`]s, pushed onto the caller's buffer; the caller stamps sequence and time.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde_json::{Map, Value};

use super::event::{
    ErrorEvent, FinishEvent, OtherEvent, PermissionRequestEvent, PrintModeEvent,
    ReasoningDeltaEvent, StartEvent, SubagentEvent, TextEvent, ToolCallEvent, ToolProgressEvent,
    ToolResultEvent,
};
use super::ids::{item_number, ItemIds, Namespace};
use super::intake::{Intake, LineIntake, Stream};
use super::open_items::{OpenItem, OpenItems, Owner, Streamed};
use super::permissions::{
    DecidedBy, PermissionBook, PermissionError, PermissionMode, PermissionReply, PermissionRequest,
};
use super::questions::{QuestionBook, QuestionError};
use super::tools;
use crate::universal::{
    ContentPart, Cost, ErrorData, EventData, EventDraft, Item, ItemEventData, ItemKind, ItemRole,
    ItemStatus, QuestionData, QuestionStatus, RawLine, StderrOutput, TurnData, TurnMetadata,
    TurnPhase, TurnStatus,
};

/// How a turn ended when the agent's run did not end it with `finish`: what the caller saw.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnOutcome {
    pub status: TurnStatus,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub message: Option<String>,
    /// The agent's stderr, for `session.ended` when the run failed fatally.
    pub stderr: Option<StderrOutput>,
}

/// A subagent's status item and whether it is still running.
#[derive(Debug)]
struct Subagent {
    item: Item,
    open: bool,
}

/// What the converter keeps of a tool call for its result.
#[derive(Debug)]
struct ToolCallInfo {
    name: String,
    input: Value,
}

/// The run's `finish`, held until the agent's exit confirms it (an agent may still fail after
/// it: `docs/agent-command.md` §2.1).
#[derive(Debug)]
struct Finished {
    cost: Cost,
    cost_reported: bool,
    agent_id: Option<String>,
    raw: Option<Arc<RawLine>>,
}

/// The running turn.
#[derive(Debug, Default)]
struct Turn {
    id: Option<String>,
    ended: bool,
    finished: Option<Finished>,
    /// The run's cost so far (its `cost` events), before its `finish` says the total.
    cost_so_far: f64,
    /// The failure (code, message) the run reported with a fatal `error`, if any.
    failure: Option<(String, String)>,
    last_error_code: Option<String>,
}

/// Converts one session's Codebuff lines to universal event drafts (`docs/codebuff-events.md`).
#[derive(Debug, Default)]
pub struct CodebuffConverter {
    ids: ItemIds,
    turns: u64,
    native_session_id: Option<String>,
    intake: LineIntake,
    open: OpenItems,
    subagents: HashMap<String, Subagent>,
    /// Reasoning segments seen per run (a run's later segments get `runId#N`).
    reasoning_segments: HashMap<String, u32>,
    calls: HashMap<String, ToolCallInfo>,
    questions: QuestionBook,
    permissions: PermissionBook,
    /// Lines for the agent's stdin the conversion decided on (the policy's permission
    /// replies), for the caller to write.
    outbox: Vec<String>,
    turn: Turn,
    session_cost: Cost,
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
            session_cost,
            questions: QuestionBook::restored(pending_questions, resolved_questions),
            turn: Turn {
                ended: true,
                ..Turn::default()
            },
            ..Self::default()
        }
    }

    /// The agent's conversation id, once a `start` announced it (for `--continue`).
    pub fn native_session_id(&self) -> Option<&str> {
        self.native_session_id.as_deref()
    }

    /// The session's total cost so far.
    pub fn session_cost(&self) -> Cost {
        self.session_cost
    }

    /// True once the current turn has its `turn.ended`.
    pub fn turn_ended(&self) -> bool {
        self.turn.ended
    }

    /// Sets the session's permission mode (how requests are answered without asking).
    pub fn set_permission_mode(&mut self, mode: PermissionMode) {
        self.permissions.set_mode(mode);
    }

    /// Takes the lines for the agent's stdin the conversion decided on (permission replies
    /// of the policy), in order.
    pub fn take_outbox(&mut self) -> Vec<String> {
        std::mem::take(&mut self.outbox)
    }

    /// Answers an open permission request: `permission.resolved` (into `out`) and the reply
    /// line for the agent.
    pub fn resolve_permission(
        &mut self,
        id: &str,
        reply: PermissionReply,
        decided_by: DecidedBy,
        reason: Option<&str>,
        out: &mut Vec<EventDraft>,
    ) -> Result<String, PermissionError> {
        let (draft, line) = self.permissions.resolve(id, reply, decided_by, reason)?;
        out.push(draft);
        Ok(line)
    }

    /// True while some permission request waits for an answer.
    pub fn has_pending_permissions(&self) -> bool {
        self.permissions.has_open()
    }

    /// How many permission requests are open.
    pub fn pending_permission_count(&self) -> usize {
        self.permissions.open_count()
    }

    /// The ids of the open permission requests, sorted.
    pub fn pending_permission_ids(&self) -> Vec<String> {
        self.permissions.open_ids()
    }

    /// The session's cost with what the running turn has spent so far.
    pub fn cost_with_running_turn(&self) -> Cost {
        match &self.turn.finished {
            Some(_) => self.session_cost,
            None if self.turn.ended => self.session_cost,
            None => self
                .session_cost
                .plus(Cost::from_credits(self.turn.cost_so_far)),
        }
    }

    /// True once the current turn's run said `finish` (its ending waits for the exit).
    pub fn run_finished(&self) -> bool {
        self.turn.finished.is_some()
    }

    /// The turn status the run's own error events suggest (`timeout`, `aborted`), else `failed`.
    pub fn failure_status(&self) -> TurnStatus {
        status_for_code(self.turn.last_error_code.as_deref())
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
        let turn_id = format!("turn_{}", self.turns);
        self.turn = Turn {
            id: Some(turn_id.clone()),
            ..Turn::default()
        };
        out.push(EventDraft::synthetic(EventData::TurnStarted(TurnData {
            phase: TurnPhase::Started,
            turn_id: Some(turn_id),
            metadata: None,
        })));
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
        if self.turn.ended {
            return;
        }
        self.turn.ended = true;
        let finished = self.turn.finished.take();
        let failure = self.turn.failure.take();
        if let (Some(f), None, TurnStatus::Completed) = (&finished, &failure, outcome.status) {
            out.push(EventDraft::from_agent(
                EventData::TurnEnded(TurnData {
                    phase: TurnPhase::Ended,
                    turn_id: self.turn.id.clone(),
                    metadata: Some(TurnMetadata {
                        status: TurnStatus::Completed,
                        cost: f.cost,
                        cost_reported: f.cost_reported,
                        session_cost: Some(self.session_cost),
                        exit_code: None,
                        signal: None,
                        agent_id: f.agent_id.clone(),
                        code: None,
                        message: None,
                        stderr_tail: None,
                    }),
                }),
                f.raw.clone(),
            ));
            return;
        }
        self.close_everything(ItemStatus::Failed, out);
        let status = match (&failure, outcome.status) {
            // A clean exit after a fatal error: the error decides.
            (Some((code, _)), TurnStatus::Completed) => status_for_code(Some(code)),
            (_, status) => status,
        };
        let (code, message) = match failure {
            Some((code, message)) => (Some(code), Some(message)),
            None => (None, outcome.message),
        };
        // A run stopped before its `finish` still spent what its `cost` events said.
        let spent = match &finished {
            Some(f) => f.cost,
            None => {
                let spent = Cost::from_credits(self.turn.cost_so_far);
                self.session_cost = self.session_cost.plus(spent);
                spent
            }
        };
        let cost_reported =
            finished.as_ref().is_some_and(|f| f.cost_reported) || self.turn.cost_so_far > 0.0;
        // What the agent said on stderr explains a failure; a cancel or an interruption needs
        // no explaining.
        let stderr_tail = match status {
            TurnStatus::Failed | TurnStatus::TimedOut | TurnStatus::BudgetExhausted => outcome
                .stderr
                .as_ref()
                .and_then(crate::universal::StderrOutput::last_lines),
            _ => None,
        };
        out.push(EventDraft::synthetic(EventData::TurnEnded(TurnData {
            phase: TurnPhase::Ended,
            turn_id: self.turn.id.clone(),
            metadata: Some(TurnMetadata {
                status,
                cost: spent,
                cost_reported,
                session_cost: Some(self.session_cost),
                exit_code: outcome.exit_code,
                signal: outcome.signal,
                agent_id: finished.and_then(|f| f.agent_id),
                code,
                message,
                stderr_tail,
            }),
        })));
    }

    /// Records that the turn failed before the agent could run (its command cannot start): a
    /// synthetic `error` with `code`. The turn then ends with [`Self::end_turn`]; the session
    /// goes on.
    pub fn fail_to_start(&mut self, code: &str, message: &str, out: &mut Vec<EventDraft>) {
        self.turn.last_error_code = Some(code.to_owned());
        out.push(EventDraft::synthetic(EventData::Error(ErrorData {
            message: message.to_owned(),
            code: Some(code.to_owned()),
            details: None,
        })));
    }

    /// Converts one stdout line (without its terminator). Never fails: a line that is not an
    /// event becomes `agent.unparsed`; a blank line carries nothing.
    pub fn convert_stdout_line(&mut self, line: &[u8], out: &mut Vec<EventDraft>) {
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
        raw: Option<Arc<RawLine>>,
        out: &mut Vec<EventDraft>,
    ) {
        match event {
            PrintModeEvent::Start(e) => self.start(e, raw, out),
            PrintModeEvent::TextDelta(e) => self.text_delta(e, raw, out),
            PrintModeEvent::Text(e) => self.text(e, raw, out),
            PrintModeEvent::ReasoningDelta(e) => self.reasoning_delta(e, raw, out),
            PrintModeEvent::ToolCall(e) => self.tool_call(e, raw, out),
            PrintModeEvent::ToolProgress(e) => self.tool_progress(e, raw, out),
            PrintModeEvent::ToolResult(e) => self.tool_result(e, raw, out),
            PrintModeEvent::SubagentStart(e) => self.subagent_start(e, raw, out),
            PrintModeEvent::SubagentFinish(e) => self.subagent_finish(e, raw, out),
            PrintModeEvent::Error(e) => self.error(e, raw, out),
            PrintModeEvent::Finish(e) => self.finish(e, raw, out),
            PrintModeEvent::Download(e) => {
                let detail = serde_json::json!({"type": "download", "version": e.version, "status": e.status});
                self.status_item("download", Some(detail.to_string()), raw, out);
            }
            PrintModeEvent::PermissionRequest(e) => self.permission_request(e, raw, out),
            PrintModeEvent::Cost(e) => {
                if e.total_cost.is_finite() && e.total_cost > self.turn.cost_so_far {
                    self.turn.cost_so_far = e.total_cost;
                }
            }
            PrintModeEvent::Other(e) => self.other(e, raw, out),
        }
    }

    /// Records the user's answer to a pending question: returns the `question.resolved` draft
    /// and the line to write to the agent's stdin (rule 7: once per question).
    pub fn answer_question(
        &mut self,
        question_id: &str,
        answers: Vec<Vec<String>>,
    ) -> Result<(EventDraft, String), QuestionError> {
        self.questions.answer(question_id, answers)
    }

    /// Records that the user declined a pending question: the draft and the skip line.
    pub fn reject_question(
        &mut self,
        question_id: &str,
    ) -> Result<(EventDraft, String), QuestionError> {
        self.questions.reject(question_id)
    }

    /// True while some question waits for an answer.
    pub fn has_pending_questions(&self) -> bool {
        self.questions.has_open()
    }

    /// The pending question with this id.
    pub fn pending_question(&self, question_id: &str) -> Option<&QuestionData> {
        self.questions.open(question_id)
    }

    /// How many questions are open.
    pub fn pending_question_count(&self) -> usize {
        self.questions.open_count()
    }

    /// The ids of the open questions, sorted.
    pub fn pending_question_ids(&self) -> Vec<String> {
        self.questions.open_ids()
    }

    // ----- per event type -------------------------------------------------------------------

    fn start(&mut self, e: StartEvent, raw: Option<Arc<RawLine>>, out: &mut Vec<EventDraft>) {
        if let Some(id) = &e.session_id {
            self.native_session_id = Some(id.clone());
        }
        let detail = format!(
            "agentId={} messageHistoryLength={}",
            e.agent_id.as_deref().unwrap_or("none"),
            e.message_history_length.unwrap_or(0)
        );
        self.status_item("codebuff.start", Some(detail), raw, out);
    }

    fn text_delta(&mut self, e: TextEvent, raw: Option<Arc<RawLine>>, out: &mut Vec<EventDraft>) {
        let owner = self.owner(e.agent_id.as_deref());
        self.open.close_reasoning_of(&owner, out);
        self.message_of(&owner, raw.clone(), out)
            .append(e.text, raw, out);
    }

    fn text(&mut self, e: TextEvent, raw: Option<Arc<RawLine>>, out: &mut Vec<EventDraft>) {
        let owner = self.owner(e.agent_id.as_deref());
        self.open.close_reasoning_of(&owner, out);
        self.message_of(&owner, raw.clone(), out);
        if let Some(mut message) = self.open.take_message(&owner) {
            message.set_text(e.text);
            message.complete(ItemStatus::Completed, raw, out);
        }
    }

    fn reasoning_delta(
        &mut self,
        e: ReasoningDeltaEvent,
        raw: Option<Arc<RawLine>>,
        out: &mut Vec<EventDraft>,
    ) {
        let run_id = e.run_id.clone().unwrap_or_default();
        if self.open.reasoning(&run_id).is_none() {
            let owner = match (&e.agent_id, &e.run_id) {
                (Some(a), _) if self.subagents.contains_key(a) => Some(a.clone()),
                (_, Some(r)) if self.subagents.contains_key(r) => Some(r.clone()),
                _ if e.ancestor_run_ids.is_empty() => None,
                _ => Some(run_id.clone()),
            };
            let segment = self.reasoning_segments.entry(run_id.clone()).or_insert(0);
            *segment += 1;
            let native = match (*segment, &e.run_id) {
                (_, None) => None,
                (1, Some(r)) => Some(r.clone()),
                (n, Some(r)) => Some(format!("{r}#{n}")),
            };
            let item_id = match &native {
                Some(n) => self.ids.for_native(Namespace::Reasoning, n),
                None => self.ids.fresh(),
            };
            let parent_id = owner.as_deref().and_then(|o| self.parent_of(Some(o)));
            let item = OpenItem::open(
                item_id,
                native,
                parent_id,
                Streamed::Reasoning,
                raw.clone(),
                out,
            );
            self.open.insert_reasoning(run_id.clone(), owner, item);
        }
        if let Some(item) = self.open.reasoning(&run_id) {
            item.append(e.text, raw, out);
        }
    }

    fn tool_call(
        &mut self,
        e: ToolCallEvent,
        raw: Option<Arc<RawLine>>,
        out: &mut Vec<EventDraft>,
    ) {
        let owner = self.owner(e.agent_id.as_deref());
        self.open.close_reasoning_of(&owner, out);
        if let Some(message) = self.open.take_message(&owner) {
            message.complete(ItemStatus::Completed, None, out);
        }
        let arguments = e
            .input
            .as_ref()
            .map_or_else(|| "null".to_owned(), |raw| raw.get().to_owned());
        // Only the tools whose input means something to the daemon are parsed.
        let input = if tools::reads_input(&e.tool_name) {
            serde_json::from_str(&arguments).unwrap_or(Value::Null)
        } else {
            Value::Null
        };
        let mut content = vec![ContentPart::ToolCall {
            name: e.tool_name.clone(),
            arguments,
            call_id: e.tool_call_id.clone(),
        }];
        content.extend(tools::call_file_refs(&e.tool_name, &input));
        let item = Item {
            item_id: self.ids.for_native(Namespace::ToolCall, &e.tool_call_id),
            native_item_id: Some(e.tool_call_id.clone()),
            parent_id: self.parent_of(e.agent_id.as_deref()),
            kind: ItemKind::ToolCall,
            role: Some(ItemRole::Assistant),
            content: Arc::new(content),
            status: ItemStatus::Completed,
        };
        whole_item(item, raw.clone(), out);
        if e.tool_name == "ask_user" {
            let questions = tools::ask_user_questions(&input);
            let first = questions.first();
            let data = QuestionData {
                question_id: e.tool_call_id.clone(),
                prompt: first.map(|q| q.question.clone()).unwrap_or_default(),
                options: first
                    .map(|q| q.options.iter().map(|o| o.label.clone()).collect())
                    .unwrap_or_default(),
                response: None,
                status: QuestionStatus::Requested,
                questions,
                answers: None,
            };
            self.questions.ask(data.clone());
            out.push(EventDraft::from_agent(
                EventData::QuestionRequested(data),
                raw,
            ));
        }
        self.calls.insert(
            e.tool_call_id,
            ToolCallInfo {
                name: e.tool_name,
                input,
            },
        );
    }

    fn tool_progress(
        &mut self,
        e: ToolProgressEvent,
        raw: Option<Arc<RawLine>>,
        out: &mut Vec<EventDraft>,
    ) {
        let delta = match &e.output {
            Value::String(s) => s.clone(),
            Value::Null => String::new(),
            other => other.to_string(),
        };
        if self.open.result(&e.tool_call_id).is_none() {
            let agent = e.agent_id.as_deref().or(e.parent_agent_id.as_deref());
            let item = OpenItem::open(
                self.ids.for_native(Namespace::ToolResult, &e.tool_call_id),
                Some(e.tool_call_id.clone()),
                self.parent_of(agent),
                Streamed::ToolResult {
                    call_id: e.tool_call_id.clone(),
                },
                raw.clone(),
                out,
            );
            self.open.insert_result(e.tool_call_id.clone(), item);
        }
        if let Some(item) = self.open.result(&e.tool_call_id) {
            item.append(delta, raw, out);
        }
    }

    fn tool_result(
        &mut self,
        e: ToolResultEvent,
        raw: Option<Arc<RawLine>>,
        out: &mut Vec<EventDraft>,
    ) {
        let call = self.calls.get(&e.tool_call_id);
        let tool_name = e
            .tool_name
            .clone()
            .or_else(|| call.map(|c| c.name.clone()))
            .unwrap_or_default();
        // The output text is the agent's JSON as written (a legacy `result` string: its text);
        // it is parsed only when something in it matters here.
        let (output_text, is_legacy_text) = match (&e.output, &e.result) {
            (Some(output), _) => (output.get().to_owned(), false),
            (None, Some(result)) => match serde_json::from_str::<String>(result.get()) {
                Ok(text) => (text, true),
                Err(_) => (result.get().to_owned(), false),
            },
            (None, None) => (String::new(), true),
        };
        let output = if is_legacy_text {
            Value::String(output_text.clone())
        } else if tools::reads_result(&tool_name) || output_text.contains("\"errorMessage\"") {
            serde_json::from_str(&output_text).unwrap_or(Value::Null)
        } else {
            Value::Null
        };
        let failed = tools::result_failed(&output);
        let mut content = vec![ContentPart::ToolResult {
            call_id: e.tool_call_id.clone(),
            output: output_text,
        }];
        content.extend(tools::result_file_refs(
            &tool_name,
            call.map(|c| &c.input),
            &output,
        ));
        let agent = e.agent_id.as_deref().or(e.parent_agent_id.as_deref());
        let item = Item {
            item_id: self.ids.for_native(Namespace::ToolResult, &e.tool_call_id),
            native_item_id: Some(e.tool_call_id.clone()),
            parent_id: self.parent_of(agent),
            kind: ItemKind::ToolResult,
            role: Some(ItemRole::Tool),
            content: Arc::new(content),
            status: if failed {
                ItemStatus::Failed
            } else {
                ItemStatus::Completed
            },
        };
        if self.open.take_result(&e.tool_call_id).is_some() {
            out.push(EventDraft::from_agent(
                EventData::ItemCompleted(ItemEventData { item }),
                raw.clone(),
            ));
        } else {
            whole_item(item, raw.clone(), out);
        }
        if tool_name == "ask_user" {
            let count = self
                .questions
                .open(&e.tool_call_id)
                .map_or(0, |q| q.questions.len());
            let answers = tools::ask_user_answers(&output, count);
            if let Some(mut draft) = self.questions.settle(&e.tool_call_id, answers) {
                draft.synthetic = false;
                draft.raw = raw;
                out.push(draft);
            }
        }
    }

    fn subagent_start(
        &mut self,
        e: SubagentEvent,
        raw: Option<Arc<RawLine>>,
        out: &mut Vec<EventDraft>,
    ) {
        let item = self.subagent_item(&e);
        let mut started = item.clone();
        started.status = ItemStatus::InProgress;
        out.push(EventDraft::from_agent(
            EventData::ItemStarted(ItemEventData { item: started }),
            raw,
        ));
        self.subagents
            .insert(e.agent_id, Subagent { item, open: true });
    }

    fn subagent_finish(
        &mut self,
        e: SubagentEvent,
        raw: Option<Arc<RawLine>>,
        out: &mut Vec<EventDraft>,
    ) {
        let owner = Some(e.agent_id.clone());
        self.open.close_owned_by(&owner, ItemStatus::Completed, out);
        // Reasoning of runs placed under no known subagent ends with the subagent.
        let subagents = &self.subagents;
        self.open.close_reasoning_unless(
            |o| o.as_ref().is_none_or(|o| subagents.contains_key(o)),
            out,
        );
        match self.subagents.get_mut(&e.agent_id) {
            Some(sub) if sub.open => {
                sub.open = false;
                let mut item = sub.item.clone();
                item.status = ItemStatus::Completed;
                out.push(EventDraft::from_agent(
                    EventData::ItemCompleted(ItemEventData { item }),
                    raw,
                ));
            }
            _ => {
                let item = self.subagent_item(&e);
                whole_item(item.clone(), raw, out);
                self.subagents
                    .insert(e.agent_id, Subagent { item, open: false });
            }
        }
    }

    /// A request the policy answers becomes `permission.resolved` and a reply line in the
    /// outbox; any other, `permission.requested`, open until answered.
    fn permission_request(
        &mut self,
        e: PermissionRequestEvent,
        raw: Option<Arc<RawLine>>,
        out: &mut Vec<EventDraft>,
    ) {
        let kind = e.kind.unwrap_or_else(|| {
            if e.command.is_some() {
                "execute".into()
            } else {
                "edit".into()
            }
        });
        let title = e.title.unwrap_or_else(|| match &e.command {
            Some(command) => format!("Run `{command}`"),
            None => format!("{} {}", e.tool_name, e.paths.join(", ")),
        });
        let (mut draft, line) = self.permissions.request(PermissionRequest {
            request_id: e.request_id,
            tool_call_id: e.tool_call_id,
            tool_name: e.tool_name,
            kind,
            title,
            command: e.command,
            paths: e.paths,
            input: e.input,
        });
        if line.is_none() {
            // Asked of the user: the agent's own line.
            draft.synthetic = false;
            draft.raw = raw;
        }
        out.push(draft);
        self.outbox.extend(line);
    }

    fn error(&mut self, e: ErrorEvent, raw: Option<Arc<RawLine>>, out: &mut Vec<EventDraft>) {
        let code = e
            .code
            .clone()
            .or_else(|| e.source.clone())
            .unwrap_or_else(|| "agent_error".to_owned());
        if e.fatal {
            self.turn.failure = Some((code.clone(), e.message.clone()));
        }
        self.turn.last_error_code = Some(code.clone());
        let mut details = Map::new();
        if let Some(source) = e.source {
            details.insert("source".into(), Value::String(source));
        }
        if let Some(status) = e.status_code {
            details.insert("statusCode".into(), status);
        }
        if e.fatal {
            details.insert("fatal".into(), Value::Bool(true));
        }
        let data = ErrorData {
            message: e.message,
            code: Some(code),
            details: (!details.is_empty()).then_some(Value::Object(details)),
        };
        out.push(EventDraft::from_agent(EventData::Error(data), raw));
    }

    /// The run says it is done: its items complete and its cost counts; the turn ends when
    /// the agent's exit confirms it ([`Self::end_turn`]). A second `finish` is a status line.
    fn finish(&mut self, e: FinishEvent, raw: Option<Arc<RawLine>>, out: &mut Vec<EventDraft>) {
        if self.turn.ended || self.turn.finished.is_some() {
            let detail = serde_json::json!({"agentId": e.agent_id, "totalCost": e.total_cost});
            self.status_item("codebuff.finish", Some(detail.to_string()), raw, out);
            return;
        }
        self.close_everything(ItemStatus::Completed, out);
        let cost = Cost::from_credits(e.total_cost.unwrap_or(0.0));
        self.session_cost = self.session_cost.plus(cost);
        self.turn.finished = Some(Finished {
            cost,
            cost_reported: e.total_cost.is_some(),
            agent_id: e.agent_id,
            raw,
        });
    }

    fn other(&mut self, e: OtherEvent, raw: Option<Arc<RawLine>>, out: &mut Vec<EventDraft>) {
        if e.is_fork_type() {
            let detail = Value::Object(e.fields).to_string();
            self.status_item(&e.event_type, Some(detail), raw, out);
            return;
        }
        let item = Item {
            item_id: self.ids.fresh(),
            native_item_id: None,
            parent_id: None,
            kind: ItemKind::Unknown,
            role: None,
            content: Arc::new(vec![ContentPart::Json {
                json: Value::Object(e.fields),
            }]),
            status: ItemStatus::Completed,
        };
        whole_item(item, raw, out);
    }

    // ----- helpers ---------------------------------------------------------------------------

    /// The text owner for an event's `agentId`: a known subagent, else the root agent.
    fn owner(&self, agent_id: Option<&str>) -> Owner {
        agent_id
            .filter(|a| self.subagents.contains_key(*a))
            .map(str::to_owned)
    }

    /// The `parent_id` for an event carrying this agent id: the subagent's item, if it is one.
    fn parent_of(&self, agent_id: Option<&str>) -> Option<String> {
        self.subagents
            .get(agent_id?)
            .map(|s| s.item.item_id.clone())
    }

    /// The open message of `owner`, opened (with its `item.started`) if it is not.
    fn message_of(
        &mut self,
        owner: &Owner,
        raw: Option<Arc<RawLine>>,
        out: &mut Vec<EventDraft>,
    ) -> &mut OpenItem {
        if self.open.message(owner).is_none() {
            let item = OpenItem::open(
                self.ids.fresh(),
                None,
                self.parent_of(owner.as_deref()),
                Streamed::Message,
                raw,
                out,
            );
            return self.open.insert_message(owner.clone(), item);
        }
        // Checked just above; `message` cannot be missing here.
        self.open
            .message(owner)
            .unwrap_or_else(|| unreachable!("an open message was found"))
    }

    /// Completes every open item (end of a turn), then the subagents still running; each in
    /// the order they were opened.
    fn close_everything(&mut self, status: ItemStatus, out: &mut Vec<EventDraft>) {
        self.open.close_all(status, out);
        let mut subagents: Vec<&mut Subagent> =
            self.subagents.values_mut().filter(|s| s.open).collect();
        subagents.sort_by_key(|sub| item_number(&sub.item.item_id));
        for sub in subagents {
            sub.open = false;
            let mut item = sub.item.clone();
            item.status = status;
            out.push(EventDraft::synthetic(EventData::ItemCompleted(
                ItemEventData { item },
            )));
        }
    }

    fn subagent_item(&mut self, e: &SubagentEvent) -> Item {
        let label = e
            .display_name
            .clone()
            .or_else(|| e.agent_type.clone())
            .unwrap_or_else(|| e.agent_id.clone());
        let mut detail = Map::new();
        for (k, v) in [
            ("agentType", e.agent_type.clone().map(Value::String)),
            ("displayName", e.display_name.clone().map(Value::String)),
            (
                "parentAgentId",
                e.parent_agent_id.clone().map(Value::String),
            ),
            ("prompt", e.prompt.clone().map(Value::String)),
            ("params", e.params.clone()),
            ("model", e.model.clone().map(Value::String)),
        ] {
            if let Some(v) = v {
                detail.insert(k.to_owned(), v);
            }
        }
        Item {
            item_id: self.ids.for_native(Namespace::Agent, &e.agent_id),
            native_item_id: Some(e.agent_id.clone()),
            parent_id: self.parent_of(e.parent_agent_id.as_deref()),
            kind: ItemKind::Status,
            role: Some(ItemRole::System),
            content: Arc::new(vec![
                ContentPart::Status {
                    label: "subagent".to_owned(),
                    detail: Some(label),
                },
                ContentPart::Json {
                    json: Value::Object(detail),
                },
            ]),
            status: ItemStatus::Completed,
        }
    }

    /// A status line from the agent (start, fork types, …): started and completed at once.
    fn status_item(
        &mut self,
        label: &str,
        detail: Option<String>,
        raw: Option<Arc<RawLine>>,
        out: &mut Vec<EventDraft>,
    ) {
        let item = Item {
            item_id: self.ids.fresh(),
            native_item_id: None,
            parent_id: None,
            kind: ItemKind::Status,
            role: Some(ItemRole::System),
            content: Arc::new(vec![ContentPart::Status {
                label: label.to_owned(),
                detail,
            }]),
            status: ItemStatus::Completed,
        };
        whole_item(item, raw, out);
    }
}

/// The turn status an error code stands for: `timeout` timed out, `aborted` cancelled, any
/// other failure failed.
fn status_for_code(code: Option<&str>) -> TurnStatus {
    match code {
        Some("timeout") => TurnStatus::TimedOut,
        Some("aborted") => TurnStatus::Cancelled,
        _ => TurnStatus::Failed,
    }
}

/// An item that starts and completes at once (tool calls, results, status lines).
fn whole_item(item: Item, raw: Option<Arc<RawLine>>, out: &mut Vec<EventDraft>) {
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
