//! Streamed items that are still open: assistant messages (per agent), reasoning (per run) and
//! tool results that got progress before their result. Each grows by deltas through one
//! [`OpenItem::append`] and ends with one [`OpenItem::complete`], which keeps rule 3 of
//! `docs/universal-events.md` §3: an item completed without a delta first gets its whole text
//! as one synthetic delta.

use std::collections::HashMap;
use std::sync::Arc;

use super::ids::item_number;
use super::text_buf::TextBuf;
use crate::universal::{
    ContentPart, EventData, EventDraft, Item, ItemDeltaData, ItemEventData, ItemKind, ItemRole,
    ItemStatus, RawLine, ReasoningVisibility,
};

/// Who streams a piece of text: each owner has at most one open message (and reasoning is
/// closed per owner), so text of two agents never interleaves in one item.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Owner {
    /// The agent the user talks to.
    Root,
    /// A subagent, by its id; for reasoning of a run that cannot be placed under a known
    /// subagent, that run's id.
    Agent(String),
}

impl Owner {
    /// The subagent (or run) id, `None` for the root agent.
    pub(crate) fn agent_id(&self) -> Option<&str> {
        match self {
            Owner::Root => None,
            Owner::Agent(id) => Some(id),
        }
    }
}

/// What an open item streams.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Streamed {
    /// Assistant text (`text_delta`, then `text`).
    Message,
    /// Reasoning (`reasoning_delta`).
    Reasoning,
    /// Partial output of a tool call (`tool_progress`).
    ToolResult { call_id: String },
}

/// One open item and the text it has streamed.
#[derive(Debug)]
pub(crate) struct OpenItem {
    /// Shared with each delta drafted (see [`ItemDeltaData::item_id`]).
    pub item_id: Arc<str>,
    pub native_item_id: Option<String>,
    pub parent_id: Option<String>,
    streamed: Streamed,
    text: TextBuf,
    deltas: usize,
}

impl OpenItem {
    /// Opens an item and drafts its `item.started` (empty content) into `out`.
    pub(crate) fn open(
        item_id: String,
        native_item_id: Option<String>,
        parent_id: Option<String>,
        streamed: Streamed,
        raw: Option<RawLine>,
        out: &mut Vec<EventDraft>,
    ) -> OpenItem {
        let open = OpenItem {
            item_id: item_id.into(),
            native_item_id,
            parent_id,
            streamed,
            text: TextBuf::default(),
            deltas: 0,
        };
        out.push(EventDraft::from_agent(
            EventData::ItemStarted(ItemEventData {
                item: open.item("", ItemStatus::InProgress),
            }),
            raw,
        ));
        open
    }

    /// Adds a delta: the text grows and an `item.delta` is drafted.
    pub(crate) fn append(
        &mut self,
        delta: String,
        raw: Option<RawLine>,
        out: &mut Vec<EventDraft>,
    ) {
        self.text.push_str(&delta);
        self.deltas += 1;
        out.push(EventDraft::from_agent(
            EventData::ItemDelta(ItemDeltaData {
                item_id: self.item_id.clone(),
                native_item_id: self.native_item_id.clone(),
                delta,
            }),
            raw,
        ));
    }

    /// Replaces the text with its consolidated form (a `text` event after its deltas).
    pub(crate) fn set_text(&mut self, text: String) {
        self.text.set(text);
    }

    /// Completes the item with `status`: a synthetic delta with the whole text if it never got
    /// one, then `item.completed` (from the agent line `raw`, else synthetic).
    pub(crate) fn complete(
        self,
        status: ItemStatus,
        raw: Option<RawLine>,
        out: &mut Vec<EventDraft>,
    ) {
        let text = self.text.to_text();
        if self.deltas == 0 {
            out.push(EventDraft::synthetic(EventData::ItemDelta(ItemDeltaData {
                item_id: self.item_id.clone(),
                native_item_id: self.native_item_id.clone(),
                delta: text.clone(),
            })));
        }
        let data = EventData::ItemCompleted(ItemEventData {
            item: self.item(&text, status),
        });
        out.push(match raw {
            Some(raw) => EventDraft::from_agent(data, Some(raw)),
            None => EventDraft::synthetic(data),
        });
    }

    /// The item with `text` as its one content part.
    fn item(&self, text: &str, status: ItemStatus) -> Item {
        let (kind, role, part) = match &self.streamed {
            Streamed::Message => (
                ItemKind::Message,
                ItemRole::Assistant,
                ContentPart::Text {
                    text: text.to_owned(),
                },
            ),
            Streamed::Reasoning => (
                ItemKind::Message,
                ItemRole::Assistant,
                ContentPart::Reasoning {
                    text: text.to_owned(),
                    visibility: ReasoningVisibility::Public,
                },
            ),
            Streamed::ToolResult { call_id } => (
                ItemKind::ToolResult,
                ItemRole::Tool,
                ContentPart::ToolResult {
                    call_id: call_id.clone(),
                    output: text.to_owned(),
                },
            ),
        };
        Item {
            item_id: self.item_id.to_string(),
            native_item_id: self.native_item_id.clone(),
            parent_id: self.parent_id.clone(),
            kind,
            role: Some(role),
            content: Arc::new(vec![part]),
            status,
        }
    }
}

/// A reasoning item and the agent it belongs to.
#[derive(Debug)]
struct OpenReasoning {
    owner: Owner,
    item: OpenItem,
}

/// Every open streamed item of a session.
#[derive(Debug, Default)]
pub(crate) struct OpenItems {
    /// Assistant messages, one per agent.
    messages: HashMap<Owner, OpenItem>,
    /// Reasoning, one per run id.
    reasoning: HashMap<String, OpenReasoning>,
    /// Tool results with progress, by tool call id.
    results: HashMap<String, OpenItem>,
}

impl OpenItems {
    /// The open message of `owner`, opened with `open(owner)` (which drafts its
    /// `item.started`) if there is none.
    pub(crate) fn message_or_open(
        &mut self,
        owner: Owner,
        open: impl FnOnce(&Owner) -> OpenItem,
    ) -> &mut OpenItem {
        self.messages.entry(owner).or_insert_with_key(open)
    }

    /// Takes the open message of `owner` out (to complete it).
    pub(crate) fn take_message(&mut self, owner: &Owner) -> Option<OpenItem> {
        self.messages.remove(owner)
    }

    /// The open reasoning of a run, if any.
    pub(crate) fn reasoning(&mut self, run_id: &str) -> Option<&mut OpenItem> {
        self.reasoning.get_mut(run_id).map(|r| &mut r.item)
    }

    /// Notes an opened reasoning item of a run that belongs to `owner`.
    pub(crate) fn insert_reasoning(
        &mut self,
        run_id: String,
        owner: Owner,
        item: OpenItem,
    ) -> &mut OpenItem {
        &mut self
            .reasoning
            .entry(run_id)
            .insert_entry(OpenReasoning { owner, item })
            .into_mut()
            .item
    }

    /// The open result of a tool call, if any.
    pub(crate) fn result(&mut self, call_id: &str) -> Option<&mut OpenItem> {
        self.results.get_mut(call_id)
    }

    /// Notes an opened tool result.
    pub(crate) fn insert_result(&mut self, call_id: String, item: OpenItem) -> &mut OpenItem {
        self.results.entry(call_id).insert_entry(item).into_mut()
    }

    /// Takes an open tool result out (its `tool_result` completes it).
    pub(crate) fn take_result(&mut self, call_id: &str) -> Option<OpenItem> {
        self.results.remove(call_id)
    }

    /// Completes the open reasoning of `owner` (it moved on to text or a tool call).
    pub(crate) fn close_reasoning_of(&mut self, owner: &Owner, out: &mut Vec<EventDraft>) {
        self.close_reasoning_where(|o| o == owner, out);
    }

    /// Completes the open reasoning whose owner no longer streams (`keep` says who does).
    pub(crate) fn close_reasoning_unless(
        &mut self,
        keep: impl Fn(&Owner) -> bool,
        out: &mut Vec<EventDraft>,
    ) {
        self.close_reasoning_where(|o| !keep(o), out);
    }

    fn close_reasoning_where(&mut self, pick: impl Fn(&Owner) -> bool, out: &mut Vec<EventDraft>) {
        if self.reasoning.is_empty() {
            return;
        }
        let runs: Vec<String> = self
            .reasoning
            .iter()
            .filter(|(_, r)| pick(&r.owner))
            .map(|(run, _)| run.clone())
            .collect();
        let mut items: Vec<OpenItem> = runs
            .iter()
            .filter_map(|run| self.reasoning.remove(run))
            .map(|r| r.item)
            .collect();
        items.sort_by_key(|i| item_number(&i.item_id));
        for item in items {
            item.complete(ItemStatus::Completed, None, out);
        }
    }

    /// Completes the open message and reasoning of one agent.
    pub(crate) fn close_owned_by(
        &mut self,
        owner: &Owner,
        status: ItemStatus,
        out: &mut Vec<EventDraft>,
    ) {
        self.close_reasoning_of(owner, out);
        if let Some(open) = self.messages.remove(owner) {
            open.complete(status, None, out);
        }
    }

    /// Completes everything (the turn ends): reasoning, then messages with `status`, then tool
    /// results with progress but no result, which always fail; each group in opening order.
    pub(crate) fn close_all(&mut self, status: ItemStatus, out: &mut Vec<EventDraft>) {
        let mut reasoning: Vec<OpenItem> = self.reasoning.drain().map(|(_, r)| r.item).collect();
        reasoning.sort_by_key(|i| item_number(&i.item_id));
        for item in reasoning {
            item.complete(status, None, out);
        }
        let mut messages: Vec<OpenItem> = self.messages.drain().map(|(_, m)| m).collect();
        messages.sort_by_key(|i| item_number(&i.item_id));
        for item in messages {
            item.complete(status, None, out);
        }
        let mut results: Vec<OpenItem> = self.results.drain().map(|(_, r)| r).collect();
        results.sort_by_key(|i| item_number(&i.item_id));
        for item in results {
            item.complete(ItemStatus::Failed, None, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(id: &str, streamed: Streamed, out: &mut Vec<EventDraft>) -> OpenItem {
        OpenItem::open(id.into(), None, None, streamed, None, out)
    }

    fn types(out: &[EventDraft]) -> Vec<&'static str> {
        out.iter().map(|d| d.data.event_type()).collect()
    }

    fn completed(draft: &EventDraft) -> &Item {
        match &draft.data {
            EventData::ItemCompleted(ItemEventData { item }) => item,
            other => panic!("expected item.completed, got {other:?}"),
        }
    }

    #[test]
    fn deltas_accumulate_into_the_completed_item() {
        let mut out = Vec::new();
        let mut item = open("itm_1", Streamed::Message, &mut out);
        item.append("hel".into(), None, &mut out);
        item.append("lo".into(), None, &mut out);
        item.complete(ItemStatus::Completed, None, &mut out);
        assert_eq!(
            types(&out),
            ["item.started", "item.delta", "item.delta", "item.completed"]
        );
        assert_eq!(
            *completed(&out[3]).content,
            vec![ContentPart::Text {
                text: "hello".into()
            }]
        );
    }

    #[test]
    fn an_item_without_deltas_gets_its_whole_text_as_one_synthetic_delta() {
        let mut out = Vec::new();
        let mut item = open("itm_1", Streamed::Message, &mut out);
        item.set_text("whole".into());
        item.complete(ItemStatus::Completed, None, &mut out);
        assert_eq!(
            types(&out),
            ["item.started", "item.delta", "item.completed"]
        );
        assert!(out[1].synthetic);
        match &out[1].data {
            EventData::ItemDelta(d) => assert_eq!(d.delta, "whole"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn each_kind_completes_with_its_own_part_kind_and_role() {
        let mut out = Vec::new();
        let mut reasoning = open("itm_1", Streamed::Reasoning, &mut out);
        reasoning.append("hm".into(), None, &mut out);
        reasoning.complete(ItemStatus::Completed, None, &mut out);
        let item = completed(out.last().unwrap());
        assert_eq!(
            (item.kind, item.role),
            (ItemKind::Message, Some(ItemRole::Assistant))
        );
        assert!(matches!(item.content[0], ContentPart::Reasoning { .. }));

        let mut out = Vec::new();
        let call_id = "t1".to_owned();
        let mut result = open("itm_2", Streamed::ToolResult { call_id }, &mut out);
        result.append("partial".into(), None, &mut out);
        result.complete(ItemStatus::Failed, None, &mut out);
        let item = completed(out.last().unwrap());
        assert_eq!(
            (item.kind, item.role),
            (ItemKind::ToolResult, Some(ItemRole::Tool))
        );
        assert_eq!(
            item.content[0],
            ContentPart::ToolResult {
                call_id: "t1".into(),
                output: "partial".into()
            }
        );
    }

    #[test]
    fn closing_all_goes_in_opening_order_and_fails_unfinished_results() {
        let mut out = Vec::new();
        let mut items = OpenItems::default();
        let m2 = open("itm_2", Streamed::Message, &mut out);
        items.message_or_open(Owner::Agent("sub".into()), |_| m2);
        let m1 = open("itm_1", Streamed::Message, &mut out);
        items.message_or_open(Owner::Root, |_| m1);
        let r = open(
            "itm_3",
            Streamed::ToolResult {
                call_id: "t".into(),
            },
            &mut out,
        );
        items.insert_result("t".into(), r);
        let mut out = Vec::new();
        items.close_all(ItemStatus::Completed, &mut out);
        let done: Vec<(&str, ItemStatus)> = out
            .iter()
            .filter(|d| matches!(d.data, EventData::ItemCompleted(_)))
            .map(|d| (completed(d).item_id.as_str(), completed(d).status))
            .collect();
        assert_eq!(
            done,
            [
                ("itm_1", ItemStatus::Completed),
                ("itm_2", ItemStatus::Completed),
                ("itm_3", ItemStatus::Failed)
            ]
        );
    }

    #[test]
    fn reasoning_closes_per_owner() {
        let mut out = Vec::new();
        let mut items = OpenItems::default();
        let root = open("itm_1", Streamed::Reasoning, &mut out);
        items.insert_reasoning("r0".into(), Owner::Root, root);
        let sub = open("itm_2", Streamed::Reasoning, &mut out);
        items.insert_reasoning("r1".into(), Owner::Agent("sub".into()), sub);
        let mut out = Vec::new();
        items.close_reasoning_of(&Owner::Root, &mut out);
        assert!(items.reasoning("r0").is_none());
        assert!(items.reasoning("r1").is_some());
        items.close_reasoning_unless(|o| *o == Owner::Root, &mut out);
        assert!(items.reasoning("r1").is_none());
    }
}
