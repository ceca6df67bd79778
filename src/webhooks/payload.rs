//! The body of a delivery (`docs/webhooks.md`):
//! `{"type": <event type>, "timestamp": <the event's time>, "data": {"sessionId": …,
//! "event": <the universal event, byte for byte as the log serves it>, "cost": …}}`, with
//! `data.cost` (credits and USD) for `turn.ended` (that turn's) and `session.ended` (the
//! session's).
//!
//! Made from the outbox row alone, the same bytes at every attempt.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::universal::Cost;

/// What the body takes from the event besides the event itself.
#[derive(Deserialize)]
struct Envelope {
    #[serde(default)]
    time: Option<String>,
    #[serde(default)]
    data: Option<Data>,
}

#[derive(Deserialize)]
struct Data {
    /// `session.ended`.
    #[serde(default)]
    cost: Option<Cost>,
    /// `turn.ended`.
    #[serde(default)]
    metadata: Option<Metadata>,
}

#[derive(Deserialize)]
struct Metadata {
    #[serde(default)]
    cost: Option<Cost>,
}

#[derive(Serialize)]
struct Body<'a> {
    #[serde(rename = "type")]
    event_type: &'a str,
    timestamp: Option<String>,
    data: BodyData<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct BodyData<'a> {
    session_id: &'a str,
    event: &'a RawValue,
    #[serde(skip_serializing_if = "Option::is_none")]
    cost: Option<Cost>,
}

/// The body of the delivery of `event` (a stored event's JSON) of `session_id`.
pub fn body(event_type: &str, session_id: &str, event: &str) -> Vec<u8> {
    let envelope: Option<Envelope> = serde_json::from_str(event).ok();
    let time = envelope.as_ref().and_then(|e| e.time.clone());
    let cost = envelope
        .and_then(|e| e.data)
        .and_then(|d| match event_type {
            "session.ended" => d.cost,
            "turn.ended" => d.metadata.and_then(|m| m.cost),
            _ => None,
        });
    // Stored events are JSON; were one not, it would be sent as a JSON string.
    let raw =
        RawValue::from_string(event.to_owned()).or_else(|_| serde_json::value::to_raw_value(event));
    let Ok(raw) = raw else {
        return Vec::new();
    };
    serde_json::to_vec(&Body {
        event_type,
        timestamp: time,
        data: BodyData {
            session_id,
            event: &raw,
            cost,
        },
    })
    .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn turn_ended_carries_its_cost_and_the_event_verbatim() {
        let event = r#"{"event_id":"evt_9","sequence":9,"time":"2026-01-02T03:04:05.678Z","session_id":"s","type":"turn.ended","data":{"phase":"ended","metadata":{"status":"completed","cost":{"credits":12.5,"usd":0.125},"cost_reported":true}},"raw":null}"#;
        let body = body("turn.ended", "s", event);
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["type"], "turn.ended");
        assert_eq!(v["timestamp"], "2026-01-02T03:04:05.678Z");
        assert_eq!(v["data"]["sessionId"], "s");
        assert_eq!(v["data"]["cost"]["credits"], 12.5);
        assert_eq!(v["data"]["cost"]["usd"], 0.125);
        assert_eq!(v["data"]["event"]["sequence"], 9);
        assert!(String::from_utf8(body).unwrap().contains(event));
    }

    #[test]
    fn other_events_have_no_cost() {
        let event = r#"{"sequence":3,"time":"t","type":"question.requested","data":{"question_id":"q"},"raw":null}"#;
        let v: serde_json::Value =
            serde_json::from_slice(&body("question.requested", "s", event)).unwrap();
        assert!(v["data"].get("cost").is_none(), "{v}");
        assert_eq!(v["data"]["event"]["data"]["question_id"], "q");
    }
}
