//! The handlers: what each Codebuff event type turns into (`docs/codebuff-events.md` §2), one
//! method per type, called by [`CodebuffConverter::convert_event`]. They keep the tool calls a
//! result needs (its name and input, for file references) and open and close streamed items
//! through [`OpenItems`](crate::codebuff::open_items::OpenItems); turns, subagents and cost keep
//! their own books.

use std::sync::Arc;

use serde_json::{Map, Value};

use super::cost;
use super::subagents::Subagents;
use super::turn::Finished;
use super::{whole_item, CodebuffConverter};
use crate::codebuff::event::{
    ErrorEvent, FinishEvent, OtherEvent, PermissionRequestEvent, ReasoningDeltaEvent, StartEvent,
    SubagentEvent, TextEvent, ToolCallEvent, ToolProgressEvent, ToolResultEvent,
};
use crate::codebuff::ids::{ItemIds, Namespace};
use crate::codebuff::open_items::{OpenItem, Owner, Streamed};
use crate::codebuff::permissions::PermissionRequest;
use crate::codebuff::tools;
use crate::universal::{
    ContentPart, ErrorData, EventData, EventDraft, Item, ItemEventData, ItemKind, ItemRole,
    ItemStatus, QuestionData, QuestionStatus, RawLine,
};

/// What the converter keeps of a tool call for its result.
#[derive(Debug)]
pub(super) struct ToolCallInfo {
    name: String,
    input: Value,
}

impl CodebuffConverter {
    pub(super) fn start(&mut self, e: StartEvent, raw: Option<RawLine>, out: &mut Vec<EventDraft>) {
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

    pub(super) fn text_delta(
        &mut self,
        e: TextEvent,
        raw: Option<RawLine>,
        out: &mut Vec<EventDraft>,
    ) {
        let owner = self.subagents.owner(e.agent_id.as_deref());
        self.open.close_reasoning_of(&owner, out);
        self.message_of(owner, &raw, out).append(e.text, raw, out);
    }

    pub(super) fn text(&mut self, e: TextEvent, raw: Option<RawLine>, out: &mut Vec<EventDraft>) {
        let owner = self.subagents.owner(e.agent_id.as_deref());
        self.open.close_reasoning_of(&owner, out);
        let mut message = match self.open.take_message(&owner) {
            Some(message) => message,
            None => new_message(&mut self.ids, &self.subagents, &owner, raw.clone(), out),
        };
        message.set_text(e.text);
        message.complete(ItemStatus::Completed, raw, out);
    }

    pub(super) fn reasoning_delta(
        &mut self,
        e: ReasoningDeltaEvent,
        raw: Option<RawLine>,
        out: &mut Vec<EventDraft>,
    ) {
        let run_id = e.run_id.clone().unwrap_or_default();
        if self.open.reasoning(&run_id).is_none() {
            let owner = match (&e.agent_id, &e.run_id) {
                (Some(a), _) if self.subagents.knows(a) => Owner::Agent(a.clone()),
                (_, Some(r)) if self.subagents.knows(r) => Owner::Agent(r.clone()),
                _ if e.ancestor_run_ids.is_empty() => Owner::Root,
                _ => Owner::Agent(run_id.clone()),
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
            let parent_id = self.subagents.parent_of(owner.agent_id());
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

    pub(super) fn tool_call(
        &mut self,
        e: ToolCallEvent,
        raw: Option<RawLine>,
        out: &mut Vec<EventDraft>,
    ) {
        let owner = self.subagents.owner(e.agent_id.as_deref());
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
            parent_id: self.subagents.parent_of(e.agent_id.as_deref()),
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
                EventData::QuestionRequested(Box::new(data)),
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

    pub(super) fn tool_progress(
        &mut self,
        e: ToolProgressEvent,
        raw: Option<RawLine>,
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
                self.subagents.parent_of(agent),
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

    pub(super) fn tool_result(
        &mut self,
        e: ToolResultEvent,
        raw: Option<RawLine>,
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
            parent_id: self.subagents.parent_of(agent),
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

    pub(super) fn subagent_start(
        &mut self,
        e: SubagentEvent,
        raw: Option<RawLine>,
        out: &mut Vec<EventDraft>,
    ) {
        self.subagents.start(&mut self.ids, e, raw, out);
    }

    /// A subagent's own open items complete with it, and so does reasoning of runs placed
    /// under no known subagent.
    pub(super) fn subagent_finish(
        &mut self,
        e: SubagentEvent,
        raw: Option<RawLine>,
        out: &mut Vec<EventDraft>,
    ) {
        let owner = Owner::Agent(e.agent_id.clone());
        self.open.close_owned_by(&owner, ItemStatus::Completed, out);
        let subagents = &self.subagents;
        self.open
            .close_reasoning_unless(|o| o.agent_id().is_none_or(|id| subagents.knows(id)), out);
        self.subagents.finish(&mut self.ids, e, raw, out);
    }

    /// A request the policy answers becomes `permission.resolved` and a reply line in the
    /// outbox; any other, `permission.requested`, open until answered.
    pub(super) fn permission_request(
        &mut self,
        e: PermissionRequestEvent,
        raw: Option<RawLine>,
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

    pub(super) fn error(&mut self, e: ErrorEvent, raw: Option<RawLine>, out: &mut Vec<EventDraft>) {
        let code = e
            .code
            .clone()
            .or_else(|| e.source.clone())
            .unwrap_or_else(|| "agent_error".to_owned());
        self.turn.record_error(&code, &e.message, e.fatal);
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
        out.push(EventDraft::from_agent(
            EventData::Error(Box::new(data)),
            raw,
        ));
    }

    /// A `cost` event: the run's running total so far; an invalid one is ignored, and said.
    pub(super) fn cost(
        &mut self,
        total_cost: f64,
        raw: Option<RawLine>,
        out: &mut Vec<EventDraft>,
    ) {
        if cost::is_valid(total_cost) {
            self.spending.progress(total_cost);
        } else {
            out.push(invalid_cost("cost", total_cost, raw));
        }
    }

    /// The run says it is done: its items complete and its cost counts; the turn ends when
    /// the agent's exit confirms it ([`CodebuffConverter::end_turn`]). A second `finish` is a status line.
    pub(super) fn finish(
        &mut self,
        e: FinishEvent,
        raw: Option<RawLine>,
        out: &mut Vec<EventDraft>,
    ) {
        if !self.turn.running() {
            let detail = serde_json::json!({"agentId": e.agent_id, "totalCost": e.total_cost});
            self.status_item("codebuff.finish", Some(detail.to_string()), raw, out);
            return;
        }
        self.close_everything(ItemStatus::Completed, out);
        // A negative or non-finite total would refill the session's budget: ignored, said.
        let total = match e.total_cost {
            Some(total) if !cost::is_valid(total) => {
                out.push(invalid_cost("finish", total, raw.clone()));
                None
            }
            total => total,
        };
        let cost = self.spending.finished(total);
        self.turn.finish(Finished {
            cost,
            cost_reported: total.is_some(),
            agent_id: e.agent_id,
            raw,
        });
    }

    pub(super) fn other(&mut self, e: OtherEvent, raw: Option<RawLine>, out: &mut Vec<EventDraft>) {
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

    /// The open message of `owner`, opened (with its `item.started`, from a clone of `raw`) if
    /// it is not: a line is cloned only then (its reference count is touched from several
    /// threads).
    fn message_of(
        &mut self,
        owner: Owner,
        raw: &Option<RawLine>,
        out: &mut Vec<EventDraft>,
    ) -> &mut OpenItem {
        let (ids, subagents) = (&mut self.ids, &self.subagents);
        self.open.message_or_open(owner, |owner| {
            new_message(ids, subagents, owner, raw.clone(), out)
        })
    }

    /// A status line from the agent (start, fork types, …): started and completed at once.
    pub(super) fn status_item(
        &mut self,
        label: &str,
        detail: Option<String>,
        raw: Option<RawLine>,
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

/// A new assistant message of `owner`, under its subagent if it is one (its `item.started` into
/// `out`).
fn new_message(
    ids: &mut ItemIds,
    subagents: &Subagents,
    owner: &Owner,
    raw: Option<RawLine>,
    out: &mut Vec<EventDraft>,
) -> OpenItem {
    OpenItem::open(
        ids.fresh(),
        None,
        subagents.parent_of(owner.agent_id()),
        Streamed::Message,
        raw,
        out,
    )
}

/// The `error` saying that a reported cost was ignored (code `invalid_cost`).
fn invalid_cost(event: &str, credits: f64, raw: Option<RawLine>) -> EventDraft {
    let data = ErrorData {
        message: format!(
            "the agent reported a cost of {credits} credits in `{event}`; a cost must be a finite number of at least 0, so it was ignored"
        ),
        code: Some("invalid_cost".to_owned()),
        details: Some(serde_json::json!({"event": event, "totalCost": credits.to_string()})),
    };
    EventDraft::from_agent(EventData::Error(Box::new(data)), raw)
}
