//! Item ids of one session: the daemon's `itm_N`, fresh for every new item, and the same one
//! every time a native id comes back (`docs/universal-events.md` §3 rule 4).
//!
//! A tool call and its result share Codebuff's `toolCallId` but are different items, so native
//! ids are mapped per [`Namespace`].

use std::collections::HashMap;

/// Which kind of native id a mapping is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Namespace {
    /// A `tool_call`'s `toolCallId`.
    ToolCall,
    /// A `tool_result`'s (or `tool_progress`'s) `toolCallId`.
    ToolResult,
    /// A subagent's `agentId`.
    Agent,
    /// A reasoning run (`runId`, and `runId#N` for its later segments).
    Reasoning,
}

/// Hands out `itm_N` ids, dense from 1 (or after the last id of a restored log).
#[derive(Debug, Default)]
pub(crate) struct ItemIds {
    last: u64,
    native: HashMap<Namespace, HashMap<String, String>>,
}

impl ItemIds {
    /// Ids that go on after `last` (a session restored from its log).
    pub(crate) fn after(last: u64) -> Self {
        ItemIds {
            last,
            native: HashMap::new(),
        }
    }

    /// A new id.
    pub(crate) fn fresh(&mut self) -> String {
        self.last += 1;
        format!("itm_{}", self.last)
    }

    /// The id of a native id in a namespace: the one it got before, else a fresh one.
    pub(crate) fn for_native(&mut self, namespace: Namespace, native: &str) -> String {
        if let Some(id) = self.native.get(&namespace).and_then(|ids| ids.get(native)) {
            return id.clone();
        }
        let id = self.fresh();
        self.native
            .entry(namespace)
            .or_default()
            .insert(native.to_owned(), id.clone());
        id
    }
}

/// The `N` of `itm_N`, for ordering items as they were opened (`u64::MAX` for other ids).
pub(crate) fn item_number(item_id: &str) -> u64 {
    item_id
        .strip_prefix("itm_")
        .and_then(|n| n.parse().ok())
        .unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_ids_are_dense_from_one() {
        let mut ids = ItemIds::default();
        assert_eq!(ids.fresh(), "itm_1");
        assert_eq!(ids.fresh(), "itm_2");
    }

    #[test]
    fn a_restored_session_goes_on_after_its_last_id() {
        let mut ids = ItemIds::after(41);
        assert_eq!(ids.fresh(), "itm_42");
    }

    #[test]
    fn a_native_id_keeps_its_item_id_within_its_namespace() {
        let mut ids = ItemIds::default();
        let call = ids.for_native(Namespace::ToolCall, "t1");
        let result = ids.for_native(Namespace::ToolResult, "t1");
        assert_eq!(call, "itm_1");
        assert_eq!(result, "itm_2");
        assert_eq!(ids.for_native(Namespace::ToolCall, "t1"), call);
        assert_eq!(ids.for_native(Namespace::ToolResult, "t1"), result);
        assert_eq!(ids.fresh(), "itm_3");
    }

    #[test]
    fn item_numbers_order_items_and_put_foreign_ids_last() {
        assert_eq!(item_number("itm_12"), 12);
        assert_eq!(item_number("other"), u64::MAX);
        assert_eq!(item_number("itm_x"), u64::MAX);
    }
}
