//! Subagents: every subagent a run started gets one `status` item (label `subagent`, stable
//! `itm_N` from its agent id), which is the `parent_id` of everything it says and completes when
//! it finishes or its turn ends. Known subagents are remembered for the whole session, so text
//! of a later turn still finds its parent.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::whole_item;
use crate::codebuff::event::SubagentEvent;
use crate::codebuff::ids::{item_number, ItemIds, Namespace};
use crate::codebuff::open_items::Owner;
use crate::universal::{
    ContentPart, EventData, EventDraft, Item, ItemEventData, ItemKind, ItemRole, ItemStatus,
    RawLine,
};

/// A subagent's status item and whether it is still running.
#[derive(Debug)]
struct Subagent {
    item: Item,
    open: bool,
}

/// The session's subagents, by agent id.
#[derive(Debug, Default)]
pub(super) struct Subagents {
    by_id: HashMap<String, Subagent>,
}

impl Subagents {
    /// Whether a subagent with this id ever started.
    pub(super) fn knows(&self, agent_id: &str) -> bool {
        self.by_id.contains_key(agent_id)
    }

    /// The text owner for an event's `agentId`: a known subagent, else the root agent.
    pub(super) fn owner(&self, agent_id: Option<&str>) -> Owner {
        match agent_id {
            Some(id) if self.knows(id) => Owner::Agent(id.to_owned()),
            _ => Owner::Root,
        }
    }

    /// The `parent_id` for an event carrying this agent id: the subagent's item, if it is one.
    pub(super) fn parent_of(&self, agent_id: Option<&str>) -> Option<String> {
        self.by_id.get(agent_id?).map(|s| s.item.item_id.clone())
    }

    /// `subagent_start`: its item starts (`item.started`) and stays open.
    pub(super) fn start(
        &mut self,
        ids: &mut ItemIds,
        e: SubagentEvent,
        raw: Option<RawLine>,
        out: &mut Vec<EventDraft>,
    ) {
        let item = self.item(ids, &e);
        let mut started = item.clone();
        started.status = ItemStatus::InProgress;
        out.push(EventDraft::from_agent(
            EventData::ItemStarted(ItemEventData { item: started }),
            raw,
        ));
        self.by_id.insert(e.agent_id, Subagent { item, open: true });
    }

    /// `subagent_finish`: its open item completes; one that never started (or finished
    /// already) starts and completes at once.
    pub(super) fn finish(
        &mut self,
        ids: &mut ItemIds,
        e: SubagentEvent,
        raw: Option<RawLine>,
        out: &mut Vec<EventDraft>,
    ) {
        match self.by_id.get_mut(&e.agent_id) {
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
                let item = self.item(ids, &e);
                whole_item(item.clone(), raw, out);
                self.by_id
                    .insert(e.agent_id, Subagent { item, open: false });
            }
        }
    }

    /// Completes the subagents still running with `status` (their turn ended), in the order
    /// they started.
    pub(super) fn close_running(&mut self, status: ItemStatus, out: &mut Vec<EventDraft>) {
        let mut running: Vec<&mut Subagent> = self.by_id.values_mut().filter(|s| s.open).collect();
        running.sort_by_key(|sub| item_number(&sub.item.item_id));
        for sub in running {
            sub.open = false;
            let mut item = sub.item.clone();
            item.status = status;
            out.push(EventDraft::synthetic(EventData::ItemCompleted(
                ItemEventData { item },
            )));
        }
    }

    /// The status item of a subagent: its label (display name, else type, else id) and the
    /// details the event gave, under its parent subagent if it has a known one.
    fn item(&self, ids: &mut ItemIds, e: &SubagentEvent) -> Item {
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
            item_id: ids.for_native(Namespace::Agent, &e.agent_id),
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(agent_id: &str, parent: Option<&str>) -> SubagentEvent {
        serde_json::from_value(serde_json::json!({
            "agentId": agent_id,
            "agentType": "file-picker",
            "parentAgentId": parent,
            "prompt": "find it",
        }))
        .unwrap()
    }

    fn item_of(draft: &EventDraft) -> (&'static str, &Item) {
        match &draft.data {
            EventData::ItemStarted(d) => ("item.started", &d.item),
            EventData::ItemCompleted(d) => ("item.completed", &d.item),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn owners_and_parents_are_known_subagents_only() {
        let mut subs = Subagents::default();
        let mut ids = ItemIds::default();
        let mut out = Vec::new();
        assert_eq!(subs.owner(Some("a")), Owner::Root);
        subs.start(&mut ids, event("a", None), None, &mut out);
        assert_eq!(subs.owner(Some("a")), Owner::Agent("a".into()));
        assert_eq!(subs.owner(Some("b")), Owner::Root);
        assert_eq!(subs.owner(None), Owner::Root);
        assert_eq!(
            subs.parent_of(Some("a")),
            Some(item_of(&out[0]).1.item_id.clone())
        );
        assert_eq!(subs.parent_of(Some("b")), None);
        assert_eq!(subs.parent_of(None), None);
    }

    #[test]
    fn a_subagent_starts_and_finishes_as_one_item_under_its_parent() {
        let mut subs = Subagents::default();
        let mut ids = ItemIds::default();
        let mut out = Vec::new();
        subs.start(&mut ids, event("outer", None), None, &mut out);
        subs.start(&mut ids, event("inner", Some("outer")), None, &mut out);
        subs.finish(&mut ids, event("inner", Some("outer")), None, &mut out);
        let seen: Vec<(&str, &str, Option<&str>, ItemStatus)> = out
            .iter()
            .map(item_of)
            .map(|(t, i)| (t, i.item_id.as_str(), i.parent_id.as_deref(), i.status))
            .collect();
        let (outer, inner) = (seen[0].1, seen[1].1);
        assert_ne!(outer, inner);
        assert_eq!(
            seen,
            [
                ("item.started", outer, None, ItemStatus::InProgress),
                ("item.started", inner, Some(outer), ItemStatus::InProgress),
                ("item.completed", inner, Some(outer), ItemStatus::Completed),
            ]
        );
        let content = &item_of(&out[2]).1.content;
        assert_eq!(
            content[0],
            ContentPart::Status {
                label: "subagent".into(),
                detail: Some("file-picker".into())
            }
        );
        match &content[1] {
            ContentPart::Json { json } => {
                assert_eq!(json["parentAgentId"], "outer");
                assert_eq!(json["prompt"], "find it");
                assert!(json.get("model").is_none());
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_finish_without_a_start_is_a_whole_item() {
        let mut subs = Subagents::default();
        let mut ids = ItemIds::default();
        let mut out = Vec::new();
        subs.finish(&mut ids, event("late", None), None, &mut out);
        let types: Vec<&str> = out.iter().map(|d| item_of(d).0).collect();
        assert_eq!(types, ["item.started", "item.completed"]);
        assert!(subs.knows("late"));
        let mut out = Vec::new();
        subs.close_running(ItemStatus::Failed, &mut out);
        assert!(out.is_empty(), "a finished subagent is not running");
    }

    #[test]
    fn the_running_ones_close_in_starting_order_with_the_turns_status() {
        let mut subs = Subagents::default();
        let mut ids = ItemIds::default();
        let mut out = Vec::new();
        for id in ["s1", "s2", "s3"] {
            subs.start(&mut ids, event(id, None), None, &mut out);
        }
        subs.finish(&mut ids, event("s2", None), None, &mut out);
        let mut out = Vec::new();
        subs.close_running(ItemStatus::Failed, &mut out);
        let closed: Vec<(Option<&str>, ItemStatus, bool)> = out
            .iter()
            .map(|d| {
                let (_, item) = item_of(d);
                (item.native_item_id.as_deref(), item.status, d.synthetic)
            })
            .collect();
        assert_eq!(
            closed,
            [
                (Some("s1"), ItemStatus::Failed, true),
                (Some("s3"), ItemStatus::Failed, true)
            ]
        );
        let mut out = Vec::new();
        subs.close_running(ItemStatus::Failed, &mut out);
        assert!(out.is_empty());
    }
}
