//! Helpers for the tests that use an `EventStore` directly (`store_suite.rs`, `store_open.rs`):
//! records, drafts with every kind of raw line, appends, a runtime, and the Postgres gate.

use codebuffd::store::{EventStore, SessionRecord};
use codebuffd::universal::{ErrorData, EventData, EventDraft, RawLine, TurnData, TurnPhase};

/// The variable naming the test database (`.ci/postgres.sh start` prints a URL for it).
pub const POSTGRES_URL: &str = "CODEBUFFD_TEST_POSTGRES_URL";

/// The test database's URL. The tests that need one are `#[ignore]`d (so a run without one
/// counts them as ignored, not passed) and `.ci/run` runs them with `--ignored`; asked to run
/// without the variable, they fail here.
pub fn postgres_url() -> String {
    match std::env::var(POSTGRES_URL) {
        Ok(url) if !url.is_empty() => url,
        _ => panic!(
            "{POSTGRES_URL} is not set: this test needs a Postgres database \
             (`.ci/postgres.sh start` prints a URL for it)"
        ),
    }
}

pub fn record(id: &str, created_at: u64) -> SessionRecord {
    SessionRecord::new(id, "mock", serde_json::json!({}), "daemon-1", created_at)
}

/// An agent event with a raw line: JSON, text, or none, depending on `n`.
pub fn draft(n: u64) -> EventDraft {
    let data = EventData::Error(Box::new(ErrorData {
        message: format!("event {n}"),
        code: None,
        details: None,
    }));
    let raw = match n % 3 {
        0 => None,
        1 => Some(RawLine::Json(
            format!(r#"{{"type":"text","n":{n},"s":"é\u0000"}}"#).into(),
        )),
        _ => Some(RawLine::Text(format!("not json {n} \u{0} ünïcode \"q\""))),
    };
    EventDraft::from_agent(data, raw)
}

pub fn turn_started() -> EventDraft {
    EventDraft::synthetic(EventData::TurnStarted(Box::new(TurnData {
        phase: TurnPhase::Started,
        turn_id: Some("turn_2".into()),
        metadata: None,
    })))
}

pub fn turn_ended() -> EventDraft {
    EventDraft::synthetic(EventData::TurnEnded(Box::new(TurnData {
        phase: TurnPhase::Ended,
        turn_id: Some("turn_1".into()),
        metadata: None,
    })))
}

/// The record of session `id` as `load_sessions` returns it.
pub fn find_record(store: &dyn EventStore, id: &str) -> SessionRecord {
    let loaded = store.load_sessions().unwrap();
    loaded.into_iter().find(|r| r.session_id == id).unwrap()
}

pub fn append(store: &dyn EventStore, id: &str, mut drafts: Vec<EventDraft>) -> u64 {
    store
        .append(
            id,
            &mut drafts,
            "2025-01-01T00:00:00.000Z".into(),
            Some("native"),
        )
        .unwrap()
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}
