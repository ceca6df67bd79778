//! Gives drafts their place in a session's log: dense sequence numbers, event ids, time, and
//! the session ids of the envelope (`universal-events.md` §1, §3 rule 1).

use std::sync::Arc;

use crate::universal::{
    EventData, EventDraft, SessionMetadata, SessionStartedData, UniversalEvent,
};

/// Stamps drafts of one session into envelopes. Pure: time is passed in.
#[derive(Debug, Clone)]
pub struct Recorder {
    session_id: Arc<str>,
    next_sequence: u64,
    /// The last native session id seen, shared by the events that carry it.
    native: Option<Arc<str>>,
}

impl Recorder {
    /// A recorder for a session whose log already holds `recorded` events.
    pub fn new(session_id: impl Into<Arc<str>>, recorded: u64) -> Self {
        Recorder {
            session_id: session_id.into(),
            next_sequence: recorded + 1,
            native: None,
        }
    }

    /// The session's `session.started` draft (always event 1).
    pub fn session_started(metadata: SessionMetadata) -> EventDraft {
        EventDraft::synthetic(EventData::SessionStarted(SessionStartedData { metadata }))
    }

    /// Places one draft at the next sequence.
    pub fn record(
        &mut self,
        draft: EventDraft,
        time: Arc<str>,
        native_session_id: Option<&str>,
    ) -> UniversalEvent {
        let sequence = self.next_sequence;
        self.next_sequence += 1;
        if self.native.as_deref() != native_session_id {
            self.native = native_session_id.map(Arc::from);
        }
        UniversalEvent::from_draft(
            draft,
            sequence,
            time,
            self.session_id.clone(),
            self.native.clone(),
        )
    }
}
