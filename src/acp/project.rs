//! The projection: universal events in, ACP `session/update`s (and what the door must do about
//! questions, permissions and turn endings) out. Pure: one [`Projector`] per followed log, fed
//! the events in order; a live turn and a `session/load` replay go through the same code
//! (`docs/acp.md` lists the mapping).
//!
//! | universal | ACP |
//! | --- | --- |
//! | user `message` item | `user_message_chunk` (replay only: a live client knows its prompt) |
//! | assistant `message` deltas | `agent_message_chunk` (`messageId` = the item id) |
//! | reasoning deltas | `agent_thought_chunk` |
//! | `tool_call` item | `tool_call` (pending; kind, title, `locations`, `rawInput`), then `in_progress` |
//! | `tool_result` item | `tool_call_update` (completed / failed, `diff` / output content, `rawOutput`) |
//! | subagent status item | `tool_call` kind `other`; its children carry `_meta.codebuff.parentToolCallId` |
//! | `write_todos` call | `plan` |
//! | `error` | `notice` (when the client presents notices) |
//! | `turn.ended` | open calls failed; `usage_update` with the session's cumulative cost |

use std::collections::HashMap;
use std::path::PathBuf;

use agent_client_protocol::v1::schema::{
    ContentBlock, ContentChunk, Cost as AcpCost, MessageId, Meta, Notice, NoticeSeverity,
    ResourceLink, SessionUpdate, ToolCall, ToolCallContent, ToolCallStatus, ToolCallUpdate,
    ToolCallUpdateFields, ToolKind, UsageUpdate,
};
use serde_json::{json, Value};

use super::coalesce::ChunkKind;
use super::tools;
use crate::session::{TurnEnd, TurnTracker};
use crate::universal::{
    ContentPart, Cost, EventData, Item, ItemKind, ItemRole, ItemStatus, PermissionData,
    QuestionData, TurnStatus,
};

/// The `_meta` namespace of everything codebuffd adds to ACP types.
pub const META_KEY: &str = "codebuff";

/// How the events are shown.
#[derive(Debug, Clone)]
pub struct ProjectorOptions {
    /// The session's directory: tool paths are relative to it, ACP wants them absolute.
    pub cwd: PathBuf,
    /// Replaying history (`session/load`): user messages are shown, nobody is asked anything.
    pub replay: bool,
    /// The client presents `notice` updates (`clientCapabilities.session.notices`).
    pub notices: bool,
}

/// What the door has to do for one event.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Send this `session/update`.
    Update(SessionUpdate),
    /// The agent asks the user (live only): ask the client. `tool_call_id` is the ACP id of the
    /// `ask_user` call.
    Ask {
        question: QuestionData,
        tool_call_id: Option<String>,
    },
    /// A question was answered or rejected (by anyone): stop asking the client.
    QuestionResolved(String),
    /// The agent asks permission (live only): ask the client.
    Permission {
        request: PermissionData,
        tool_call_id: Option<String>,
    },
    /// A permission request was answered: stop asking the client.
    PermissionResolved(String),
    /// The turn is over: the engine's verdict (its `turn.ended`, or the session's end).
    TurnEnded(TurnEnd),
    /// The session is over (no turn was open).
    SessionEnded,
}

/// What an open message item streams into.
#[derive(Debug, Clone)]
enum Stream {
    Message(MessageId),
    Thought(MessageId),
    /// A subagent's message: collected into the subagent's tool call when complete.
    SubagentText(String),
    /// Not shown (a subagent's reasoning, items of unknown subagents).
    Hidden,
}

/// A tool call waiting for its result.
#[derive(Debug, Clone)]
struct Call {
    /// The ACP tool call id (the call item's `itm_N`); `None` for hidden calls.
    acp_id: Option<String>,
    tool: String,
    /// Diffs the call itself carried (`apply_patch`), shown again with the result.
    diffs: Vec<ToolCallContent>,
}

/// A running subagent.
#[derive(Debug, Clone, Default)]
struct Subagent {
    /// Its completed messages, shown as its tool call's content.
    texts: Vec<String>,
}

/// Turns one session's events into ACP updates; keeps only what the running turn needs (open
/// items, calls waiting for results, running subagents) and the session's cost.
#[derive(Debug)]
pub struct Projector {
    options: ProjectorOptions,
    streams: HashMap<String, Stream>,
    calls: HashMap<String, Call>,
    subagents: HashMap<String, Subagent>,
    /// The ACP id of the last `spawn_agents` call: the subagents it starts point at it.
    last_spawn: Option<String>,
    /// The open turn's verdict in the making.
    tracker: TurnTracker,
    /// The session's cost: the last `turn.ended`'s `session_cost` (or, in a log older than
    /// that field, the cost given at the start plus the turns seen).
    cost: Cost,
    /// A turn started and has not ended yet.
    turn_open: bool,
}

fn meta(value: Value) -> Meta {
    let mut m = Meta::new();
    m.insert(META_KEY.to_owned(), value);
    m
}

impl Projector {
    /// A projector for a log read from its start (or from a turn, with the session's cost so
    /// far in `cost`).
    pub fn new(options: ProjectorOptions, cost: Cost) -> Projector {
        Projector {
            options,
            streams: HashMap::new(),
            calls: HashMap::new(),
            subagents: HashMap::new(),
            last_spawn: None,
            tracker: TurnTracker::new(),
            cost,
            turn_open: false,
        }
    }

    /// True between a `turn.started` and its `turn.ended`.
    pub fn turn_open(&self) -> bool {
        self.turn_open
    }

    /// The session's cost as of the last turn seen end.
    pub fn cost(&self) -> Cost {
        self.cost
    }

    /// The `usage_update` of the session's cost: `cost` in USD, the exact credits in
    /// `_meta.codebuff.credits` (Codebuff reports no token counts: `used` and `size` are 0).
    pub fn usage(&self, turn: Option<Value>) -> SessionUpdate {
        let mut m = json!({"credits": self.cost.credits});
        if let Some(turn) = turn {
            m["turn"] = turn;
        }
        SessionUpdate::UsageUpdate(
            UsageUpdate::new(0, 0)
                .cost(AcpCost::new(self.cost.usd, "USD"))
                .meta(meta(m)),
        )
    }

    /// The chunk kind and message id the deltas of `item_id` go out as; `None` for deltas
    /// that are not shown (a subagent's text, hidden items). An `item.delta` has no other
    /// effect: a door may project deltas with this alone ([`super::coalesce::Coalescer::append`]).
    pub fn delta_stream(&self, item_id: &str) -> Option<(ChunkKind, &MessageId)> {
        match self.streams.get(item_id)? {
            Stream::Message(id) => Some((ChunkKind::Message, id)),
            Stream::Thought(id) => Some((ChunkKind::Thought, id)),
            Stream::SubagentText(_) | Stream::Hidden => None,
        }
    }

    /// Projects one event, pushing what it means onto `out`.
    pub fn apply(&mut self, data: &EventData, out: &mut Vec<Effect>) {
        match data {
            EventData::ItemStarted(d) => self.item_started(&d.item, out),
            EventData::ItemDelta(d) => {
                if let Some((kind, id)) = self.delta_stream(&d.item_id) {
                    out.push(Effect::Update(kind.update(&d.delta, id)));
                }
                return;
            }
            EventData::ItemCompleted(d) => self.item_completed(&d.item, out),
            EventData::QuestionRequested(q) if !self.options.replay => {
                out.push(Effect::Ask {
                    tool_call_id: self
                        .calls
                        .get(&q.question_id)
                        .and_then(|c| c.acp_id.clone()),
                    question: QuestionData::clone(q),
                });
            }
            EventData::QuestionResolved(q) => {
                out.push(Effect::QuestionResolved(q.question_id.clone()))
            }
            EventData::PermissionRequested(p) if !self.options.replay => {
                let call = p
                    .metadata
                    .as_ref()
                    .and_then(|m| m.get("toolCallId"))
                    .and_then(Value::as_str);
                out.push(Effect::Permission {
                    tool_call_id: call
                        .and_then(|c| self.calls.get(c))
                        .and_then(|c| c.acp_id.clone()),
                    request: PermissionData::clone(p),
                });
            }
            EventData::PermissionResolved(p) => {
                out.push(Effect::PermissionResolved(p.permission_id.clone()))
            }
            EventData::Error(e) if self.options.notices => {
                let mut notice = Notice::new(NoticeSeverity::Warning, e.message.clone());
                notice.description = e.code.clone();
                out.push(Effect::Update(SessionUpdate::Notice(notice)));
            }
            EventData::TurnStarted(_) => {
                self.tracker = TurnTracker::new();
                self.turn_open = true;
            }
            EventData::SessionEnded(_) if !self.turn_open => {
                out.push(Effect::SessionEnded);
                return;
            }
            _ => {}
        }
        if let Some(end) = self.tracker.take(data) {
            let end = end.clone();
            self.tracker = TurnTracker::new();
            self.turn_ended(end, out);
        }
    }

    fn item_started(&mut self, item: &Item, out: &mut Vec<Effect>) {
        match (item.kind, item.role) {
            // A live client knows its own prompt.
            (ItemKind::Message, Some(ItemRole::User)) if !self.options.replay => {}
            (ItemKind::Message, Some(ItemRole::User)) => {
                for block in user_blocks(&item.content) {
                    out.push(Effect::Update(SessionUpdate::UserMessageChunk(
                        ContentChunk::new(block).message_id(MessageId::from(item.item_id.clone())),
                    )));
                }
            }
            (ItemKind::Message, _) => {
                let reasoning = matches!(item.content.first(), Some(ContentPart::Reasoning { .. }));
                let stream = match item.parent_id.as_deref() {
                    Some(parent) if self.subagents.contains_key(parent) && !reasoning => {
                        Stream::SubagentText(parent.to_owned())
                    }
                    Some(_) => Stream::Hidden,
                    None if reasoning => Stream::Thought(MessageId::from(item.item_id.clone())),
                    None => Stream::Message(MessageId::from(item.item_id.clone())),
                };
                self.streams.insert(item.item_id.clone(), stream);
            }
            (ItemKind::ToolCall, _) => self.call_started(item, out),
            (ItemKind::Status, _) => {
                let Some(label) = subagent_label(item) else {
                    return;
                };
                let input = item.content.iter().find_map(|p| match p {
                    ContentPart::Json { json } => Some(json.clone()),
                    _ => None,
                });
                let parent = self.parent_call(item).or_else(|| self.last_spawn.clone());
                let call = ToolCall::new(item.item_id.clone(), label)
                    .kind(ToolKind::Other)
                    .status(ToolCallStatus::InProgress)
                    .raw_input(input)
                    .meta(meta(json!({"subagent": true, "parentToolCallId": parent})));
                self.subagents
                    .insert(item.item_id.clone(), Subagent::default());
                out.push(Effect::Update(SessionUpdate::ToolCall(call)));
            }
            _ => {}
        }
    }

    /// The ACP id of the subagent call an item belongs to.
    fn parent_call(&self, item: &Item) -> Option<String> {
        item.parent_id
            .as_ref()
            .filter(|p| self.subagents.contains_key(*p))
            .cloned()
    }

    fn call_started(&mut self, item: &Item, out: &mut Vec<Effect>) {
        let Some((tool, arguments, call_id)) = item.content.iter().find_map(|p| match p {
            ContentPart::ToolCall {
                name,
                arguments,
                call_id,
            } => Some((name.as_str(), arguments.as_str(), call_id.as_str())),
            _ => None,
        }) else {
            return;
        };
        let input: Value = serde_json::from_str(arguments).unwrap_or(Value::Null);
        if tools::hidden(tool) {
            if tool == tools::TODO_TOOL {
                if let Some(plan) = tools::plan(&input) {
                    out.push(Effect::Update(SessionUpdate::Plan(plan)));
                }
            }
            self.calls.insert(
                call_id.to_owned(),
                Call {
                    acp_id: None,
                    tool: tool.to_owned(),
                    diffs: Vec::new(),
                },
            );
            return;
        }
        let cwd = &self.options.cwd;
        let diffs = tools::diffs(cwd, &item.content);
        let acp_id = item.item_id.clone();
        let call = ToolCall::new(acp_id.clone(), tools::title(tool, &input))
            .kind(tools::kind(tool, &input))
            .status(ToolCallStatus::Pending)
            .locations(tools::locations(cwd, &item.content))
            .content(diffs.clone())
            .raw_input(input)
            .meta(meta(json!({
                "toolName": tool,
                "toolCallId": call_id,
                "parentToolCallId": self.parent_call(item),
            })));
        if tools::spawns_agents(tool) {
            self.last_spawn = Some(acp_id.clone());
        }
        self.calls.insert(
            call_id.to_owned(),
            Call {
                acp_id: Some(acp_id),
                tool: tool.to_owned(),
                diffs,
            },
        );
        out.push(Effect::Update(SessionUpdate::ToolCall(call)));
    }

    fn item_completed(&mut self, item: &Item, out: &mut Vec<Effect>) {
        match item.kind {
            ItemKind::Message => {
                if let Some(Stream::SubagentText(parent)) = self.streams.remove(&item.item_id) {
                    let text: String = item
                        .content
                        .iter()
                        .filter_map(|p| match p {
                            ContentPart::Text { text } => Some(text.as_str()),
                            _ => None,
                        })
                        .collect();
                    if let Some(sub) = self.subagents.get_mut(&parent) {
                        if !text.is_empty() {
                            sub.texts.push(text);
                        }
                        let content: Vec<ToolCallContent> =
                            sub.texts.iter().map(|t| t.as_str().into()).collect();
                        out.push(update(
                            &parent,
                            ToolCallUpdateFields::new().content(content),
                        ));
                    }
                }
            }
            ItemKind::ToolCall => {
                let call_id = item.content.iter().find_map(|p| match p {
                    ContentPart::ToolCall { call_id, .. } => Some(call_id.as_str()),
                    _ => None,
                });
                let Some(acp_id) = call_id
                    .and_then(|c| self.calls.get(c))
                    .and_then(|c| c.acp_id.clone())
                else {
                    return;
                };
                let status = match item.status {
                    ItemStatus::Failed => ToolCallStatus::Failed,
                    _ => ToolCallStatus::InProgress,
                };
                if status == ToolCallStatus::Failed {
                    if let Some(c) = call_id {
                        self.calls.remove(c);
                    }
                }
                out.push(update(&acp_id, ToolCallUpdateFields::new().status(status)));
            }
            ItemKind::ToolResult => self.result_completed(item, out),
            ItemKind::Status => {
                if let Some(sub) = self.subagents.remove(&item.item_id) {
                    let status = final_status(item.status);
                    let content: Vec<ToolCallContent> =
                        sub.texts.into_iter().map(ToolCallContent::from).collect();
                    let mut fields = ToolCallUpdateFields::new().status(status);
                    if !content.is_empty() {
                        fields = fields.content(content);
                    }
                    out.push(update(&item.item_id, fields));
                }
            }
            _ => {}
        }
    }

    fn result_completed(&mut self, item: &Item, out: &mut Vec<Effect>) {
        let Some((call_id, output)) = item.content.iter().find_map(|p| match p {
            ContentPart::ToolResult { call_id, output } => {
                Some((call_id.as_str(), output.as_str()))
            }
            _ => None,
        }) else {
            return;
        };
        let Some(call) = self.calls.remove(call_id) else {
            return;
        };
        let Some(acp_id) = call.acp_id else {
            return;
        };
        if self.last_spawn.as_deref() == Some(acp_id.as_str()) {
            self.last_spawn = None;
        }
        let output: Value =
            serde_json::from_str(output).unwrap_or_else(|_| Value::String(output.to_owned()));
        let mut content = tools::diffs(&self.options.cwd, &item.content);
        if content.is_empty() {
            content = call.diffs;
        }
        if let Some(text) = tools::result_text(&call.tool, &output) {
            content.push(text.into());
        }
        let mut fields = ToolCallUpdateFields::new()
            .status(final_status(item.status))
            .raw_output(output);
        if !content.is_empty() {
            fields = fields.content(content);
        }
        out.push(update(&acp_id, fields));
    }

    fn turn_ended(&mut self, end: TurnEnd, out: &mut Vec<Effect>) {
        self.turn_open = false;
        // Whatever is still open ended with the turn, without a result.
        let mut open: Vec<String> = self
            .calls
            .drain()
            .filter_map(|(_, c)| c.acp_id)
            .chain(self.subagents.drain().map(|(id, _)| id))
            .collect();
        open.sort_by_key(|id| item_number(id));
        for id in open {
            out.push(update(
                &id,
                ToolCallUpdateFields::new().status(ToolCallStatus::Failed),
            ));
        }
        self.streams.clear();
        self.last_spawn = None;
        self.cost = end
            .session_cost
            .unwrap_or_else(|| self.cost.plus(end.turn_cost));
        if self.options.replay && self.options.notices && end.status != TurnStatus::Completed {
            let mut notice = Notice::new(
                NoticeSeverity::Warning,
                format!("The turn ended: {}", end.status.as_str()),
            );
            notice.description = end.message.clone();
            out.push(Effect::Update(SessionUpdate::Notice(notice)));
        }
        out.push(Effect::Update(self.usage(Some(json!({
            "id": end.turn_id,
            "status": end.status.as_str(),
            "credits": end.turn_cost.credits,
            "costReported": end.cost_reported,
            "code": end.code,
        })))));
        out.push(Effect::TurnEnded(end));
    }
}

/// `itm_N`'s N, to order ids as the log created them.
fn item_number(id: &str) -> u64 {
    id.strip_prefix("itm_")
        .and_then(|n| n.parse().ok())
        .unwrap_or(u64::MAX)
}

fn update(id: &str, fields: ToolCallUpdateFields) -> Effect {
    Effect::Update(SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
        id.to_owned(),
        fields,
    )))
}

fn final_status(status: ItemStatus) -> ToolCallStatus {
    match status {
        ItemStatus::Failed => ToolCallStatus::Failed,
        _ => ToolCallStatus::Completed,
    }
}

/// The title of a subagent status item (its display name), if it is one.
fn subagent_label(item: &Item) -> Option<String> {
    item.content.iter().find_map(|p| match p {
        ContentPart::Status { label, detail } if label == "subagent" => {
            Some(detail.clone().unwrap_or_else(|| "Subagent".to_owned()))
        }
        _ => None,
    })
}

/// The content blocks of a user message: its text, and its images as links to their files.
fn user_blocks(content: &[ContentPart]) -> Vec<ContentBlock> {
    content
        .iter()
        .filter_map(|p| match p {
            ContentPart::Text { text } if !text.is_empty() => {
                Some(ContentBlock::from(text.clone()))
            }
            ContentPart::Image { path, mime } => {
                let name = std::path::Path::new(path)
                    .file_name()
                    .map_or_else(|| path.clone(), |n| n.to_string_lossy().into_owned());
                let mut link = ResourceLink::new(name, file_uri(path));
                link.mime_type = mime.clone();
                Some(ContentBlock::ResourceLink(link))
            }
            _ => None,
        })
        .collect()
}

/// A `file://` URI for an absolute path (characters outside the URI grammar escaped).
fn file_uri(path: &str) -> String {
    let mut uri = String::from("file://");
    for b in path.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'/' | b'-' | b'_' | b'.' | b'~' => {
                uri.push(b as char)
            }
            _ => uri.push_str(&format!("%{b:02X}")),
        }
    }
    uri
}

#[cfg(test)]
mod tests;
