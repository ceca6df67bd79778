//! Reading a session's recorded universal events in tests: events by type, the items they
//! complete, the assistant's texts and deltas, turn endings, and dense sequences. Shared by
//! every suite that looks at a log (polled, streamed or converted).

use serde_json::Value;

/// The `type` of every event, in order.
pub fn types(events: &[Value]) -> Vec<&str> {
    events.iter().filter_map(|e| e["type"].as_str()).collect()
}

/// How many events are of type `ty`.
pub fn count(events: &[Value], ty: &str) -> usize {
    events.iter().filter(|e| e["type"] == ty).count()
}

/// The events of type `ty`, in order.
pub fn of_type<'e>(events: &'e [Value], ty: &str) -> Vec<&'e Value> {
    events.iter().filter(|e| e["type"] == ty).collect()
}

/// The `sequence` of every event, in order.
pub fn sequences(events: &[Value]) -> Vec<u64> {
    events
        .iter()
        .map(|e| e["sequence"].as_u64().expect("sequence"))
        .collect()
}

/// Asserts that the events are sequences `1..=n`, each exactly once, in order.
pub fn assert_dense(events: &[Value]) {
    assert_dense_from(events, 1);
}

/// Asserts that the events are sequences `first..first + n`, each exactly once, in order,
/// reporting the first gap or duplicate.
pub fn assert_dense_from(events: &[Value], first: u64) {
    let last = first + events.len() as u64;
    for (i, e) in events.iter().enumerate() {
        assert_eq!(
            e["sequence"],
            first + i as u64,
            "event at position {i} out of place (gap or duplicate; want {first}..{last}): {e}"
        );
    }
}

/// The items of every `item.completed`, in order.
pub fn completed_items(events: &[Value]) -> Vec<&Value> {
    events
        .iter()
        .filter(|e| e["type"] == "item.completed")
        .map(|e| &e["data"]["item"])
        .collect()
}

/// The first content part of `item` of type `ty`.
pub fn part<'i>(item: &'i Value, ty: &str) -> Option<&'i Value> {
    item["content"].as_array()?.iter().find(|p| p["type"] == ty)
}

/// The texts of the completed assistant messages, in order.
pub fn assistant_texts(events: &[Value]) -> Vec<String> {
    completed_items(events)
        .into_iter()
        .filter(|i| i["kind"] == "message" && i["role"] == "assistant")
        .filter_map(|i| part(i, "text")?["text"].as_str().map(str::to_owned))
        .collect()
}

/// The deltas of one item, in order.
pub fn deltas<'e>(events: &'e [Value], item_id: &str) -> Vec<&'e str> {
    events
        .iter()
        .filter(|e| e["type"] == "item.delta" && e["data"]["item_id"] == item_id)
        .filter_map(|e| e["data"]["delta"].as_str())
        .collect()
}

/// The `metadata` of every `turn.ended`, in order.
pub fn turn_ends(events: &[Value]) -> Vec<&Value> {
    of_type(events, "turn.ended")
        .into_iter()
        .map(|e| &e["data"]["metadata"])
        .collect()
}
