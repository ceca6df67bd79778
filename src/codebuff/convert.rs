//! `convert_codebuff`: the per-session converter from Codebuff agent lines to universal events.
//!
//! One [`CodebuffConverter`] lives as long as its session. It owns the state that makes the
//! lifecycle rules of `universal-events.md` §3 hold across lines and turns: which items are open,
//! the stable `itm_N` id of every native id, subagents (for `parent_id`), tool inputs (for file
//! references in results), pending questions and costs. Each input line turns into zero or more
//! [`EventDraft`]s, pushed onto the caller's buffer; the caller stamps sequence and time.

use super::text_buf::TextBuf;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde_json::value::RawValue;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::answer::{answer_line, skip_line, AnswerError};
use super::event::{
    ErrorEvent, FinishEvent, OtherEvent, ParseError, PrintModeEvent, ReasoningDeltaEvent,
    StartEvent, SubagentEvent, TextEvent, ToolCallEvent, ToolProgressEvent, ToolResultEvent,
};
use super::tools;
use crate::universal::{
    AgentUnparsedData, ContentPart, Cost, ErrorData, EventData, EventDraft, Item, ItemDeltaData,
    ItemEventData, ItemKind, ItemRole, ItemStatus, QuestionData, QuestionStatus, RawLine,
    ReasoningVisibility, SessionEndReason, SessionEndedData, StderrOutput, TerminatedBy, TurnData,
    TurnMetadata, TurnPhase, TurnStatus,
};

/// Error codes on failed runs that end the session (`codebuff-agent.md` §1).
const FATAL_CODES: &[&str] = &["auth_failed", "out_of_credits"];

/// Which output stream of the agent a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    fn name(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

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

/// Why a question could not be resolved.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum QuestionError {
    #[error("unknown question id `{0}`")]
    Unknown(String),
    #[error("question `{0}` is already resolved")]
    AlreadyResolved(String),
    #[error("invalid answers: {0}")]
    InvalidAnswers(#[from] AnswerError),
}

/// The owner of streamed text: `None` for the root agent, else a subagent id (or, for reasoning
/// of a run we cannot place, that run id).
type Owner = Option<String>;

#[derive(Debug)]
struct OpenText {
    item_id: String,
    native_item_id: Option<String>,
    parent_id: Option<String>,
    text: TextBuf,
    deltas: usize,
}

#[derive(Debug)]
struct OpenReasoning {
    owner: Owner,
    open: OpenText,
}

#[derive(Debug)]
struct Subagent {
    item: Item,
    open: bool,
}

#[derive(Debug)]
struct ToolCallInfo {
    name: String,
    input: Value,
}

#[derive(Debug, Default)]
struct Turn {
    id: Option<String>,
    ended: bool,
    fatal: Option<(String, String)>,
    last_error_code: Option<String>,
}

/// Converts one session's Codebuff lines to universal event drafts (`codebuff-agent.md` §3).
#[derive(Debug, Default)]
pub struct CodebuffConverter {
    next_item: u64,
    turns: u64,
    ids: HashMap<&'static str, HashMap<String, String>>,
    native_session_id: Option<String>,
    subagents: HashMap<String, Subagent>,
    messages: HashMap<Owner, OpenText>,
    reasoning: HashMap<String, OpenReasoning>,
    reasoning_segments: HashMap<String, u32>,
    results: HashMap<String, OpenText>,
    calls: HashMap<String, ToolCallInfo>,
    questions: HashMap<String, QuestionData>,
    resolved_questions: HashSet<String>,
    turn: Turn,
    session_cost: Cost,
    line_numbers: [u64; 2],
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
            next_item: last_item,
            turns,
            native_session_id,
            session_cost,
            questions: pending_questions
                .into_iter()
                .map(|q| (q.question_id.clone(), q))
                .collect(),
            resolved_questions,
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

    /// Restores the conversation id of a session loaded from storage.
    pub fn set_native_session_id(&mut self, id: Option<String>) {
        self.native_session_id = id;
    }

    /// The number the next fresh `itm_N` will get (persisted so a restored session goes on).
    pub fn next_item(&self) -> u64 {
        self.next_item + 1
    }

    /// The session's total cost so far.
    pub fn session_cost(&self) -> Cost {
        self.session_cost
    }

    /// True once the current turn has its `turn.ended`.
    pub fn turn_ended(&self) -> bool {
        self.turn.ended
    }

    /// The fatal failure (code, message) the current turn's run reported, if any.
    pub fn fatal_error(&self) -> Option<(&str, &str)> {
        self.turn
            .fatal
            .as_ref()
            .map(|(c, m)| (c.as_str(), m.as_str()))
    }

    /// The turn status the run's own error events suggest (`timeout`, `aborted`), else `failed`.
    pub fn failure_status(&self) -> TurnStatus {
        match self.turn.last_error_code.as_deref() {
            Some("timeout") => TurnStatus::TimedOut,
            Some("aborted") => TurnStatus::Cancelled,
            _ => TurnStatus::Failed,
        }
    }

    /// Opens a turn for a user message: `turn.started` and, when there is a prompt, the user
    /// item (rule 2).
    pub fn begin_turn(&mut self, prompt: Option<&str>, out: &mut Vec<EventDraft>) {
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
        let Some(prompt) = prompt else {
            return;
        };
        let item = Item {
            item_id: self.fresh_id(),
            native_item_id: None,
            parent_id: None,
            kind: ItemKind::Message,
            role: Some(ItemRole::User),
            content: Arc::new(vec![ContentPart::Text {
                text: prompt.to_owned(),
            }]),
            status: ItemStatus::Completed,
        };
        let mut started = item.clone();
        started.status = ItemStatus::InProgress;
        out.push(EventDraft::synthetic(EventData::ItemStarted(
            ItemEventData { item: started },
        )));
        out.push(EventDraft::synthetic(EventData::ItemCompleted(
            ItemEventData { item },
        )));
    }

    /// Closes the turn when the run did not (no `finish`): open items fail, a synthetic
    /// `turn.ended` carries the outcome, and a fatal run failure also ends the session (rules 5, 6).
    /// Returns true when the session ended.
    pub fn end_turn(&mut self, outcome: TurnOutcome, out: &mut Vec<EventDraft>) -> bool {
        if !self.turn.ended {
            self.close_everything(ItemStatus::Failed, out);
            self.turn.ended = true;
            out.push(EventDraft::synthetic(EventData::TurnEnded(TurnData {
                phase: TurnPhase::Ended,
                turn_id: self.turn.id.clone(),
                metadata: Some(TurnMetadata {
                    status: outcome.status,
                    cost: Cost::default(),
                    cost_reported: false,
                    exit_code: outcome.exit_code,
                    signal: outcome.signal,
                    agent_id: None,
                    message: outcome.message.clone(),
                }),
            })));
        }
        let Some((_, message)) = self.turn.fatal.take() else {
            return false;
        };
        out.push(EventDraft::synthetic(EventData::SessionEnded(
            SessionEndedData {
                reason: SessionEndReason::Error,
                terminated_by: TerminatedBy::Agent,
                message: Some(message),
                exit_code: outcome.exit_code,
                stderr: outcome.stderr,
                cost: self.session_cost,
            },
        )));
        true
    }

    /// Records that the turn failed before the agent could run (its command cannot start, no
    /// credential): a synthetic `error`, and the failure is fatal, so [`Self::end_turn`] also
    /// ends the session (rule 6).
    pub fn fail_to_start(&mut self, message: &str, out: &mut Vec<EventDraft>) {
        let code = "agent_start_failed";
        self.turn.fatal = Some((code.to_owned(), message.to_owned()));
        self.turn.last_error_code = Some(code.to_owned());
        out.push(EventDraft::synthetic(EventData::Error(ErrorData {
            message: message.to_owned(),
            code: Some(code.to_owned()),
            details: None,
        })));
    }

    /// Converts one stdout line (without its terminator). Never fails: a line that is not an
    /// event becomes `agent.unparsed`.
    pub fn convert_stdout_line(&mut self, line: &[u8], out: &mut Vec<EventDraft>) {
        self.line_numbers[0] += 1;
        match parse_line(line) {
            Ok((event, raw)) => self.convert_event(event, Some(Arc::new(raw)), out),
            Err((error, raw)) => {
                let location = format!("stdout:{}", self.line_numbers[0]);
                out.push(unparsed(error, location, line, raw))
            }
        }
    }

    /// Converts one stderr line if it is a JSON event (the legacy CLI wrote `error` events
    /// there). Returns false for a plain log line, which the caller keeps as diagnostics.
    pub fn convert_stderr_line(&mut self, line: &[u8], out: &mut Vec<EventDraft>) -> bool {
        self.line_numbers[1] += 1;
        let looks_like_json = line.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
        if !looks_like_json {
            return false;
        }
        match parse_line(line) {
            Ok((event, raw)) => {
                self.convert_event(event, Some(Arc::new(raw)), out);
                true
            }
            Err(_) => false,
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
        let n = &mut self.line_numbers[stream as usize];
        *n += 1;
        let location = format!("{}:{}", stream.name(), n);
        let shown = String::from_utf8_lossy(&prefix[..prefix.len().min(1024)]).into_owned();
        unparsed(
            format!("line of {length} bytes exceeds the limit of {limit} bytes; skipped"),
            location,
            prefix,
            RawLine::Text(shown),
        )
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
        let pending = self.pending(question_id)?;
        let line = answer_line(question_id, &pending.questions, &answers)?;
        let data = self.resolve(question_id, Some(answers));
        Ok((data, line))
    }

    /// Records that the user declined a pending question: the draft and the skip line.
    pub fn reject_question(
        &mut self,
        question_id: &str,
    ) -> Result<(EventDraft, String), QuestionError> {
        self.pending(question_id)?;
        Ok((self.resolve(question_id, None), skip_line(question_id)))
    }

    /// True while some question waits for an answer.
    pub fn has_pending_questions(&self) -> bool {
        !self.questions.is_empty()
    }

    /// The pending question with this id.
    pub fn pending_question(&self, question_id: &str) -> Option<&QuestionData> {
        self.questions.get(question_id)
    }

    /// The ids of the pending questions, sorted.
    pub fn pending_question_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.questions.keys().cloned().collect();
        ids.sort();
        ids
    }

    fn pending(&self, question_id: &str) -> Result<&QuestionData, QuestionError> {
        match self.questions.get(question_id) {
            Some(q) => Ok(q),
            None if self.resolved_questions.contains(question_id) => {
                Err(QuestionError::AlreadyResolved(question_id.to_owned()))
            }
            None => Err(QuestionError::Unknown(question_id.to_owned())),
        }
    }

    fn resolve(&mut self, question_id: &str, answers: Option<Vec<Vec<String>>>) -> EventDraft {
        let mut data = self
            .questions
            .remove(question_id)
            .expect("pending question checked by caller");
        self.resolved_questions.insert(question_id.to_owned());
        data.status = match answers {
            Some(_) => QuestionStatus::Answered,
            None => QuestionStatus::Rejected,
        };
        data.response = answers
            .as_ref()
            .and_then(|a| a.first())
            .map(|first| first.join(", "));
        data.answers = answers;
        EventDraft::synthetic(EventData::QuestionResolved(data))
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
        self.close_reasoning_of(&owner, out);
        let open = self.open_message(&owner, raw.clone(), out);
        open.text.push_str(&e.text);
        open.deltas += 1;
        let delta = ItemDeltaData {
            item_id: open.item_id.clone(),
            native_item_id: open.native_item_id.clone(),
            delta: e.text,
        };
        out.push(EventDraft::from_agent(EventData::ItemDelta(delta), raw));
    }

    fn text(&mut self, e: TextEvent, raw: Option<Arc<RawLine>>, out: &mut Vec<EventDraft>) {
        let owner = self.owner(e.agent_id.as_deref());
        self.close_reasoning_of(&owner, out);
        self.open_message(&owner, raw.clone(), out);
        let mut open = self.messages.remove(&owner).expect("opened above");
        open.text.set(e.text);
        complete_text(open, ItemStatus::Completed, text_part, raw, out);
    }

    fn reasoning_delta(
        &mut self,
        e: ReasoningDeltaEvent,
        raw: Option<Arc<RawLine>>,
        out: &mut Vec<EventDraft>,
    ) {
        let run_id = e.run_id.clone().unwrap_or_default();
        if !self.reasoning.contains_key(&run_id) {
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
                Some(n) => self.id_for("reasoning", n),
                None => self.fresh_id(),
            };
            let parent_id = owner.as_deref().and_then(|o| self.parent_of(Some(o)));
            let open = OpenText {
                item_id,
                native_item_id: native,
                parent_id,
                text: TextBuf::default(),
                deltas: 0,
            };
            out.push(EventDraft::from_agent(
                EventData::ItemStarted(ItemEventData {
                    item: text_item(&open, reasoning_part("")),
                }),
                raw.clone(),
            ));
            self.reasoning
                .insert(run_id.clone(), OpenReasoning { owner, open });
        }
        let open = &mut self.reasoning.get_mut(&run_id).expect("inserted").open;
        open.text.push_str(&e.text);
        open.deltas += 1;
        let delta = ItemDeltaData {
            item_id: open.item_id.clone(),
            native_item_id: open.native_item_id.clone(),
            delta: e.text,
        };
        out.push(EventDraft::from_agent(EventData::ItemDelta(delta), raw));
    }

    fn tool_call(
        &mut self,
        e: ToolCallEvent,
        raw: Option<Arc<RawLine>>,
        out: &mut Vec<EventDraft>,
    ) {
        let owner = self.owner(e.agent_id.as_deref());
        self.close_reasoning_of(&owner, out);
        if let Some(open) = self.messages.remove(&owner) {
            complete_text(open, ItemStatus::Completed, text_part, None, out);
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
            item_id: self.id_for("tool_call", &e.tool_call_id),
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
            self.questions.insert(e.tool_call_id.clone(), data.clone());
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
        let delta_text = match &e.output {
            Value::String(s) => s.clone(),
            Value::Null => String::new(),
            other => other.to_string(),
        };
        if !self.results.contains_key(&e.tool_call_id) {
            let agent = e.agent_id.as_deref().or(e.parent_agent_id.as_deref());
            let open = OpenText {
                item_id: self.id_for("tool_result", &e.tool_call_id),
                native_item_id: Some(e.tool_call_id.clone()),
                parent_id: self.parent_of(agent),
                text: TextBuf::default(),
                deltas: 0,
            };
            let mut item = text_item(&open, result_part(&e.tool_call_id, ""));
            item.kind = ItemKind::ToolResult;
            item.role = Some(ItemRole::Tool);
            out.push(EventDraft::from_agent(
                EventData::ItemStarted(ItemEventData { item }),
                raw.clone(),
            ));
            self.results.insert(e.tool_call_id.clone(), open);
        }
        let open = self.results.get_mut(&e.tool_call_id).expect("inserted");
        open.text.push_str(&delta_text);
        open.deltas += 1;
        let delta = ItemDeltaData {
            item_id: open.item_id.clone(),
            native_item_id: open.native_item_id.clone(),
            delta: delta_text,
        };
        out.push(EventDraft::from_agent(EventData::ItemDelta(delta), raw));
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
        let status = if failed {
            ItemStatus::Failed
        } else {
            ItemStatus::Completed
        };
        let item = Item {
            item_id: self.id_for("tool_result", &e.tool_call_id),
            native_item_id: Some(e.tool_call_id.clone()),
            parent_id: self.parent_of(agent),
            kind: ItemKind::ToolResult,
            role: Some(ItemRole::Tool),
            content: Arc::new(content),
            status,
        };
        if self.results.remove(&e.tool_call_id).is_some() {
            out.push(EventDraft::from_agent(
                EventData::ItemCompleted(ItemEventData { item }),
                raw.clone(),
            ));
        } else {
            whole_item(item, raw.clone(), out);
        }
        if tool_name == "ask_user" && self.questions.contains_key(&e.tool_call_id) {
            let count = self.questions[&e.tool_call_id].questions.len();
            let answers = tools::ask_user_answers(&output, count);
            let mut draft = self.resolve(&e.tool_call_id, answers);
            draft.synthetic = false;
            draft.raw = raw;
            out.push(draft);
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
        self.close_owned_by(&owner, ItemStatus::Completed, out);
        let stray: Vec<String> = self
            .reasoning
            .iter()
            .filter(|(_, r)| matches!(&r.owner, Some(o) if !self.subagents.contains_key(o)))
            .map(|(k, _)| k.clone())
            .collect();
        for run in stray {
            let r = self.reasoning.remove(&run).expect("listed");
            complete_text(r.open, ItemStatus::Completed, reasoning_part, None, out);
        }
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

    fn error(&mut self, e: ErrorEvent, raw: Option<Arc<RawLine>>, out: &mut Vec<EventDraft>) {
        let code = e
            .code
            .clone()
            .or_else(|| e.source.clone())
            .unwrap_or_else(|| "agent_error".to_owned());
        if FATAL_CODES.contains(&code.as_str()) {
            self.turn.fatal = Some((code.clone(), e.message.clone()));
        }
        self.turn.last_error_code = Some(code.clone());
        let mut details = Map::new();
        if let Some(source) = e.source {
            details.insert("source".into(), Value::String(source));
        }
        if let Some(status) = e.status_code {
            details.insert("statusCode".into(), status);
        }
        let data = ErrorData {
            message: e.message,
            code: Some(code),
            details: (!details.is_empty()).then_some(Value::Object(details)),
        };
        out.push(EventDraft::from_agent(EventData::Error(data), raw));
    }

    fn finish(&mut self, e: FinishEvent, raw: Option<Arc<RawLine>>, out: &mut Vec<EventDraft>) {
        if self.turn.ended {
            let detail = serde_json::json!({"agentId": e.agent_id, "totalCost": e.total_cost});
            self.status_item("codebuff.finish", Some(detail.to_string()), raw, out);
            return;
        }
        self.close_everything(ItemStatus::Completed, out);
        let cost = Cost::from_credits(e.total_cost.unwrap_or(0.0));
        self.session_cost = self.session_cost.plus(cost);
        self.turn.ended = true;
        out.push(EventDraft::from_agent(
            EventData::TurnEnded(TurnData {
                phase: TurnPhase::Ended,
                turn_id: self.turn.id.clone(),
                metadata: Some(TurnMetadata {
                    status: TurnStatus::Completed,
                    cost,
                    cost_reported: e.total_cost.is_some(),
                    exit_code: None,
                    signal: None,
                    agent_id: e.agent_id,
                    message: None,
                }),
            }),
            raw,
        ));
    }

    fn other(&mut self, e: OtherEvent, raw: Option<Arc<RawLine>>, out: &mut Vec<EventDraft>) {
        if e.is_fork_type() {
            let detail = Value::Object(e.fields).to_string();
            self.status_item(&e.event_type, Some(detail), raw, out);
            return;
        }
        let item = Item {
            item_id: self.fresh_id(),
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

    fn fresh_id(&mut self) -> String {
        self.next_item += 1;
        format!("itm_{}", self.next_item)
    }

    /// The stable `itm_N` for a native id in a namespace (tool calls and their results share a
    /// native id but are different items).
    fn id_for(&mut self, namespace: &'static str, native: &str) -> String {
        if let Some(id) = self.ids.get(namespace).and_then(|ids| ids.get(native)) {
            return id.clone();
        }
        let id = self.fresh_id();
        self.ids
            .entry(namespace)
            .or_default()
            .insert(native.to_owned(), id.clone());
        id
    }

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

    fn open_message(
        &mut self,
        owner: &Owner,
        raw: Option<Arc<RawLine>>,
        out: &mut Vec<EventDraft>,
    ) -> &mut OpenText {
        if !self.messages.contains_key(owner) {
            let open = OpenText {
                item_id: self.fresh_id(),
                native_item_id: None,
                parent_id: self.parent_of(owner.as_deref()),
                text: TextBuf::default(),
                deltas: 0,
            };
            out.push(EventDraft::from_agent(
                EventData::ItemStarted(ItemEventData {
                    item: text_item(&open, text_part("")),
                }),
                raw,
            ));
            self.messages.insert(owner.clone(), open);
        }
        self.messages.get_mut(owner).expect("inserted")
    }

    fn close_reasoning_of(&mut self, owner: &Owner, out: &mut Vec<EventDraft>) {
        if self.reasoning.is_empty() {
            return;
        }
        let runs: Vec<String> = self
            .reasoning
            .iter()
            .filter(|(_, r)| &r.owner == owner)
            .map(|(k, _)| k.clone())
            .collect();
        for run in runs {
            let r = self.reasoning.remove(&run).expect("listed");
            complete_text(r.open, ItemStatus::Completed, reasoning_part, None, out);
        }
    }

    /// Completes the open message and reasoning of one owner.
    fn close_owned_by(&mut self, owner: &Owner, status: ItemStatus, out: &mut Vec<EventDraft>) {
        self.close_reasoning_of(owner, out);
        if let Some(open) = self.messages.remove(owner) {
            complete_text(open, status, text_part, None, out);
        }
    }

    /// Completes every open item (end of a turn); progress-only tool results always fail.
    /// Open items are completed in the order they were opened.
    fn close_everything(&mut self, status: ItemStatus, out: &mut Vec<EventDraft>) {
        let mut reasoning: Vec<OpenReasoning> = self.reasoning.drain().map(|(_, r)| r).collect();
        reasoning.sort_by_key(|r| item_number(&r.open.item_id));
        for r in reasoning {
            complete_text(r.open, status, reasoning_part, None, out);
        }
        let mut messages: Vec<OpenText> = self.messages.drain().map(|(_, m)| m).collect();
        messages.sort_by_key(|m| item_number(&m.item_id));
        for m in messages {
            complete_text(m, status, text_part, None, out);
        }
        let mut results: Vec<(String, OpenText)> = self.results.drain().collect();
        results.sort_by_key(|(_, r)| item_number(&r.item_id));
        for (call_id, r) in results {
            let part = move |text: &str| result_part(&call_id, text);
            let mut drafts = Vec::new();
            complete_text(r, ItemStatus::Failed, part, None, &mut drafts);
            for mut d in drafts {
                if let EventData::ItemCompleted(ItemEventData { item }) = &mut d.data {
                    item.kind = ItemKind::ToolResult;
                    item.role = Some(ItemRole::Tool);
                }
                out.push(d);
            }
        }
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
            item_id: self.id_for("agent", &e.agent_id),
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
            item_id: self.fresh_id(),
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

/// The `N` of `itm_N`, for ordering items as they were opened.
fn item_number(item_id: &str) -> u64 {
    item_id
        .strip_prefix("itm_")
        .and_then(|n| n.parse().ok())
        .unwrap_or(u64::MAX)
}

/// Parses a line into an event and its verbatim raw form, or says why it is not one.
fn parse_line(line: &[u8]) -> Result<(PrintModeEvent, RawLine), (String, RawLine)> {
    let text = match std::str::from_utf8(line) {
        Ok(t) => t.trim_end_matches('\r'),
        Err(e) => {
            let raw = RawLine::Text(String::from_utf8_lossy(line).into_owned());
            return Err((format!("invalid UTF-8: {e}"), raw));
        }
    };
    match PrintModeEvent::parse(text) {
        Ok(event) => {
            let raw = serde_json::from_str::<Box<RawValue>>(text)
                .map(RawLine::Json)
                .unwrap_or_else(|_| RawLine::Text(text.to_owned()));
            Ok((event, raw))
        }
        Err(err @ ParseError::NotJson(_)) => Err((err.to_string(), RawLine::Text(text.to_owned()))),
        Err(err) => {
            let raw = serde_json::from_str::<Box<RawValue>>(text)
                .map(RawLine::Json)
                .unwrap_or_else(|_| RawLine::Text(text.to_owned()));
            Err((err.to_string(), raw))
        }
    }
}

fn unparsed(error: String, location: String, bytes: &[u8], raw: RawLine) -> EventDraft {
    let hash = Sha256::digest(bytes);
    let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
    EventDraft::from_agent(
        EventData::AgentUnparsed(AgentUnparsedData {
            error,
            location,
            raw_hash: Some(format!("sha256:{hex}")),
        }),
        Some(Arc::new(raw)),
    )
}

fn text_part(text: &str) -> ContentPart {
    ContentPart::Text {
        text: text.to_owned(),
    }
}

fn reasoning_part(text: &str) -> ContentPart {
    ContentPart::Reasoning {
        text: text.to_owned(),
        visibility: ReasoningVisibility::Public,
    }
}

fn result_part(call_id: &str, output: &str) -> ContentPart {
    ContentPart::ToolResult {
        call_id: call_id.to_owned(),
        output: output.to_owned(),
    }
}

/// An in-progress assistant item with one content part.
fn text_item(open: &OpenText, part: ContentPart) -> Item {
    Item {
        item_id: open.item_id.clone(),
        native_item_id: open.native_item_id.clone(),
        parent_id: open.parent_id.clone(),
        kind: ItemKind::Message,
        role: Some(ItemRole::Assistant),
        content: Arc::new(vec![part]),
        status: ItemStatus::InProgress,
    }
}

/// Completes a streamed item; one that never got a delta first gets its whole text as a
/// synthetic delta (rule 3).
fn complete_text(
    open: OpenText,
    status: ItemStatus,
    part: impl Fn(&str) -> ContentPart,
    raw: Option<Arc<RawLine>>,
    out: &mut Vec<EventDraft>,
) {
    let text = open.text.to_text();
    if open.deltas == 0 {
        out.push(EventDraft::synthetic(EventData::ItemDelta(ItemDeltaData {
            item_id: open.item_id.clone(),
            native_item_id: open.native_item_id.clone(),
            delta: text.clone(),
        })));
    }
    let mut item = text_item(&open, part(&text));
    item.status = status;
    let data = EventData::ItemCompleted(ItemEventData { item });
    out.push(match raw {
        Some(raw) => EventDraft::from_agent(data, Some(raw)),
        None => EventDraft::synthetic(data),
    });
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
