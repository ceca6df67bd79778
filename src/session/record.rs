//! A session's live state and its stored record, both directions in one place: what the actor
//! writes ([`to_record`]) is exactly what a restarted daemon reads back ([`from_record`]).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use super::info::{EndState, SessionStatus};
use super::settings::SessionSettings;
use crate::store::{RunningProcess, SessionRecord};
use crate::sync::LockExt;
use crate::universal::Cost;

/// The changing part of `SessionInfo`, written by the session's actor, read by anyone.
#[derive(Debug, Clone)]
pub(crate) struct Live {
    pub status: SessionStatus,
    /// The agent mode of the next turns (`build`, `free`, `max`, `plan`); it can change.
    pub agent_mode: String,
    pub end: Option<EndState>,
    pub native_session_id: Option<String>,
    pub cost: Cost,
    pub turns: u64,
    pub event_count: u64,
    pub updated_at: u64,
    /// [`super::info::prompt_preview`] of the first prompt, once a turn has begun (a restored
    /// session gets it back from its log, see `recovery.rs`).
    pub first_prompt: Option<String>,
}

impl Live {
    /// A session just created: idle, with its `session.started` as its only event.
    pub(crate) fn created(now: u64, agent_mode: &str) -> Live {
        Live {
            status: SessionStatus::Idle,
            agent_mode: agent_mode.to_owned(),
            end: None,
            native_session_id: None,
            cost: Cost::default(),
            turns: 0,
            event_count: 1,
            updated_at: now,
            first_prompt: None,
        }
    }
}

/// [`Live`] shared between the actor and the manager.
#[derive(Debug, Clone)]
pub(crate) struct Shared(Arc<Mutex<Live>>);

impl Shared {
    pub(crate) fn new(live: Live) -> Shared {
        Shared(Arc::new(Mutex::new(live)))
    }

    /// The live state, locked (briefly: never across an await or I/O).
    pub(crate) fn lock(&self) -> MutexGuard<'_, Live> {
        self.0.lock_unpoisoned()
    }

    /// A copy of the live state.
    pub(crate) fn snapshot(&self) -> Live {
        self.lock().clone()
    }
}

/// Milliseconds since the epoch, for `SessionInfo`.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// What the record of a session says besides its settings.
pub(crate) struct RecordOf<'a> {
    pub session_id: &'a str,
    pub settings: &'a SessionSettings,
    pub live: &'a Live,
    pub created_at: u64,
    /// The agent process of the running turn, if one runs.
    pub running: Option<RunningProcess>,
    /// The daemon that runs the session (its instance id).
    pub owner: &'a str,
}

/// The stored record of a session.
pub(crate) fn to_record(of: RecordOf<'_>) -> SessionRecord {
    let live = of.live;
    let (end_reason, end_message) = match &live.end {
        None => (None, None),
        Some(EndState::Terminated) => (Some(END_TERMINATED.to_owned()), None),
        Some(EndState::Error(m)) => (Some(END_ERROR.to_owned()), Some(m.clone())),
    };
    SessionRecord {
        session_id: of.session_id.to_owned(),
        agent: of.settings.agent.id().to_owned(),
        created_at: of.created_at,
        updated_at: live.updated_at,
        settings: {
            let mut settings = of.settings.to_json();
            settings["agentMode"] = live.agent_mode.clone().into();
            // What lists show of an untitled session, also where another engine runs it.
            if let Some(first) = &live.first_prompt {
                settings["firstPrompt"] = first.clone().into();
            }
            settings
        },
        native_session_id: live.native_session_id.clone(),
        status: live.status.as_str().to_owned(),
        ended: live.end.is_some(),
        end_reason,
        end_message,
        cost_credits: live.cost.credits,
        turns: live.turns,
        event_count: live.event_count,
        running: of.running,
        owner: of.owner.to_owned(),
    }
}

const END_TERMINATED: &str = "terminated";
const END_ERROR: &str = "error";

/// A stored session, read back.
#[derive(Debug)]
pub(crate) struct Restored {
    pub settings: SessionSettings,
    pub live: Live,
    pub created_at: u64,
    /// The agent process a turn was running when the record was written.
    pub running: Option<RunningProcess>,
}

/// Reads a stored record back; `last_sequence` is what its log really holds (the record may
/// lag behind it). `None` when the stored settings are unusable.
pub(crate) fn from_record(record: &SessionRecord, last_sequence: Option<u64>) -> Option<Restored> {
    let settings = SessionSettings::from_json(&record.settings)?;
    let end = match (record.ended, record.end_reason.as_deref()) {
        (false, _) => None,
        (true, Some(END_TERMINATED)) => Some(EndState::Terminated),
        (true, _) => Some(EndState::Error(
            record
                .end_message
                .clone()
                .unwrap_or_else(|| "the agent failed".into()),
        )),
    };
    let live = Live {
        agent_mode: settings.agent_mode.clone(),
        // A running or waiting turn did not survive its engine: it shows as running until
        // recovery has ended it in the log (then the actor makes it idle), so nobody who sees
        // the session idle reads a log whose last turn is still open.
        status: match (&end, SessionStatus::parse(&record.status)) {
            (Some(_), _) => SessionStatus::Ended,
            (None, Some(SessionStatus::Running | SessionStatus::AwaitingInput)) => {
                SessionStatus::Running
            }
            (None, _) => SessionStatus::Idle,
        },
        end,
        native_session_id: record.native_session_id.clone(),
        cost: Cost::from_credits(record.cost_credits),
        turns: record.turns,
        event_count: last_sequence.unwrap_or(record.event_count),
        updated_at: record.updated_at,
        // Written with the record once a turn began (older records: recovery reads it from
        // the log).
        first_prompt: record
            .settings
            .get("firstPrompt")
            .and_then(|p| p.as_str())
            .map(str::to_owned),
    };
    Some(Restored {
        settings,
        live,
        created_at: record.created_at,
        running: record.running.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::CreateRequest;

    fn settings() -> SessionSettings {
        SessionSettings::validate(
            CreateRequest {
                agent: "mock".into(),
                model: Some("m".into()),
                ..CreateRequest::default()
            },
            &crate::session::CreatePolicy::new(std::env::temp_dir()),
        )
        .unwrap()
    }

    fn round_trip(live: Live, running: Option<RunningProcess>) -> (SessionRecord, Restored) {
        let settings = settings();
        let record = to_record(RecordOf {
            session_id: "s1",
            settings: &settings,
            live: &live,
            created_at: 7,
            running,
            owner: "me",
        });
        let back = from_record(&record, None).expect("usable");
        (record, back)
    }

    #[test]
    fn a_live_session_survives_the_round_trip() {
        let live = Live {
            status: SessionStatus::Running,
            agent_mode: "max".into(),
            end: None,
            native_session_id: Some("n1".into()),
            cost: Cost::from_credits(12.5),
            turns: 3,
            event_count: 40,
            updated_at: 99,
            first_prompt: Some("fix the build".into()),
        };
        let running = Some(RunningProcess {
            pid: 10,
            pgid: 10,
            start_ticks: 5,
        });
        let (record, back) = round_trip(live, running.clone());
        assert_eq!(record.status, "running");
        assert_eq!(record.owner, "me");
        assert_eq!(back.running, running);
        assert_eq!(back.created_at, 7);
        let mut expected = settings().to_json();
        expected["agentMode"] = "max".into();
        assert_eq!(back.settings.to_json(), expected);
        // What was running stays running until recovery has ended the turn.
        assert_eq!(back.live.status, SessionStatus::Running);
        assert_eq!(back.live.native_session_id.as_deref(), Some("n1"));
        // The mode as it is now, not as it was created.
        assert_eq!(back.live.agent_mode, "max");
        assert_eq!(back.live.cost, Cost::from_credits(12.5));
        assert_eq!((back.live.turns, back.live.event_count), (3, 40));
    }

    #[test]
    fn an_open_turn_restores_as_running_anything_else_as_idle() {
        for (status, back_as) in [
            (SessionStatus::Idle, SessionStatus::Idle),
            (SessionStatus::Failed, SessionStatus::Idle),
            (SessionStatus::Running, SessionStatus::Running),
            (SessionStatus::AwaitingInput, SessionStatus::Running),
        ] {
            let live = Live {
                status,
                ..Live::created(1, "build")
            };
            let (_, back) = round_trip(live, None);
            assert_eq!(back.live.status, back_as, "{status:?}");
        }
    }

    #[test]
    fn how_a_session_ended_survives_the_round_trip() {
        for end in [EndState::Terminated, EndState::Error("no credits".into())] {
            let live = Live {
                status: SessionStatus::Ended,
                end: Some(end.clone()),
                ..Live::created(1, "build")
            };
            let (record, back) = round_trip(live, None);
            assert!(record.ended);
            assert_eq!(back.live.end, Some(end));
            assert_eq!(back.live.status, SessionStatus::Ended);
        }
    }

    #[test]
    fn the_log_knows_better_than_the_record_how_many_events_there_are() {
        let (record, _) = round_trip(Live::created(1, "build"), None);
        assert_eq!(from_record(&record, Some(12)).unwrap().live.event_count, 12);
    }

    #[test]
    fn unusable_settings_are_refused() {
        let (mut record, _) = round_trip(Live::created(1, "build"), None);
        record.settings = serde_json::json!({"agent": "claude"});
        assert!(from_record(&record, None).is_none());
    }
}
