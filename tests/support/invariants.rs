//! Checks the lifecycle rules of `docs/universal-events.md` §3 on a recorded event list.
//!
//! Shared by the golden tests and the daemon's integration tests: every stream the daemon can
//! produce must pass these, whatever the agent did.

#![allow(dead_code)]

use std::collections::{HashMap, HashSet};

use serde_json::Value;

/// Returns every violated rule (empty when the stream is well-formed).
pub fn violations(events: &[Value]) -> Vec<String> {
    let mut errs = Vec::new();
    let mut started: HashMap<String, usize> = HashMap::new();
    let mut completed: HashSet<String> = HashSet::new();
    let mut deltas: HashMap<String, usize> = HashMap::new();
    let mut ask_calls: HashSet<String> = HashSet::new();
    let mut questions: HashMap<String, usize> = HashMap::new();
    let mut open_turn = false;
    let mut session_ended = false;

    for (i, e) in events.iter().enumerate() {
        let seq = e["sequence"].as_u64().unwrap_or(0);
        let ty = e["type"].as_str().unwrap_or("");
        let at = format!("event {seq} ({ty})");
        if seq != i as u64 + 1 {
            errs.push(format!("{at}: sequence should be {}", i + 1));
        }
        if e["event_id"] != format!("evt_{seq}") {
            errs.push(format!("{at}: event_id {}", e["event_id"]));
        }
        let synthetic = e["synthetic"].as_bool().unwrap_or(false);
        let want_source = if synthetic { "daemon" } else { "agent" };
        if e["source"] != want_source {
            errs.push(format!(
                "{at}: source {} with synthetic={synthetic}",
                e["source"]
            ));
        }
        if (i == 0) != (ty == "session.started") {
            errs.push(format!(
                "{at}: session.started must be event 1 and only event 1"
            ));
        }
        if session_ended {
            errs.push(format!("{at}: event after session.ended"));
        }
        let d = &e["data"];
        match ty {
            "turn.started" => {
                if open_turn {
                    errs.push(format!("{at}: turn started while another is open"));
                }
                open_turn = true;
            }
            "turn.ended" => {
                if !open_turn {
                    errs.push(format!("{at}: turn.ended without an open turn"));
                }
                open_turn = false;
                if !d["metadata"]["cost"]["credits"].is_number() {
                    errs.push(format!("{at}: turn.ended without metadata.cost"));
                }
                if d["metadata"]["status"].as_str().is_none() {
                    errs.push(format!("{at}: turn.ended without metadata.status"));
                }
            }
            "session.ended" => {
                session_ended = true;
                if !d["cost"]["credits"].is_number() {
                    errs.push(format!("{at}: session.ended without cost"));
                }
            }
            "item.started" => {
                let item = &d["item"];
                let id = item["item_id"].as_str().unwrap_or("").to_owned();
                if !id.starts_with("itm_") {
                    errs.push(format!("{at}: item id {id:?}"));
                }
                if started.insert(id.clone(), i).is_some() {
                    errs.push(format!("{at}: item {id} started twice"));
                }
                if let Some(parent) = item["parent_id"].as_str() {
                    if !started.contains_key(parent) {
                        errs.push(format!("{at}: parent {parent} of {id} never started"));
                    }
                }
                if item["kind"] == "tool_call" && tool_name(item) == Some("ask_user") {
                    if let Some(call) = item["native_item_id"].as_str() {
                        ask_calls.insert(call.to_owned());
                    }
                }
            }
            "item.delta" => {
                let id = d["item_id"].as_str().unwrap_or("");
                if !started.contains_key(id) || completed.contains(id) {
                    errs.push(format!("{at}: delta for {id} outside started..completed"));
                }
                *deltas.entry(id.to_owned()).or_default() += 1;
            }
            "item.completed" => {
                let item = &d["item"];
                let id = item["item_id"].as_str().unwrap_or("").to_owned();
                if !started.contains_key(&id) {
                    errs.push(format!("{at}: item {id} completed before it started"));
                }
                if !completed.insert(id.clone()) {
                    errs.push(format!("{at}: item {id} completed twice"));
                }
                if item["status"] == "in_progress" {
                    errs.push(format!("{at}: item {id} completed in_progress"));
                }
                let needs_delta = item["kind"] == "message" && item["role"] != "user";
                if needs_delta && deltas.get(&id).copied().unwrap_or(0) == 0 {
                    errs.push(format!("{at}: message {id} completed without a delta"));
                }
            }
            "question.requested" => {
                let qid = d["question_id"].as_str().unwrap_or("").to_owned();
                if !ask_calls.contains(&qid) {
                    errs.push(format!("{at}: question {qid} is not an ask_user call id"));
                }
                questions.insert(qid, 0);
            }
            "question.resolved" => {
                let qid = d["question_id"].as_str().unwrap_or("");
                match questions.get_mut(qid) {
                    Some(n) => {
                        *n += 1;
                        if *n > 1 {
                            errs.push(format!("{at}: question {qid} resolved twice"));
                        }
                    }
                    None => errs.push(format!("{at}: question {qid} resolved, never requested")),
                }
            }
            _ => {}
        }
    }
    for id in started.keys() {
        if !completed.contains(id) {
            errs.push(format!("item {id} started but never completed"));
        }
    }
    if open_turn {
        errs.push("a turn never ended".to_owned());
    }
    errs
}

fn tool_name(item: &Value) -> Option<&str> {
    item["content"]
        .as_array()?
        .iter()
        .find(|p| p["type"] == "tool_call")?["name"]
        .as_str()
}

/// Panics with every violation listed.
pub fn assert_well_formed(events: &[Value]) {
    let errs = violations(events);
    assert!(
        errs.is_empty(),
        "lifecycle violations:\n{}",
        errs.join("\n")
    );
}
