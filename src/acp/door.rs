//! The door's state for one ACP connection: the engine's session manager, what the client can
//! do (from `initialize`), and per session the order of its prompts and their cancellation.
//! Turns, processes and the log stay the engine's; the door only remembers what the
//! connection needs.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use agent_client_protocol::v1::schema::ClientCapabilities;
use tokio::sync::watch;

use super::transport::Outbox;
use crate::agent::AgentKind;
use crate::session::SessionManager;
use crate::sync::LockExt;
use crate::universal::Cost;

/// What the door is started with.
#[derive(Debug, Clone)]
pub struct AcpOptions {
    /// The agent of the sessions `session/new` creates.
    pub agent: AgentKind,
    /// The engine's data directory (prompt images are written under it).
    pub data_dir: PathBuf,
}

/// What the client said it can do.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientAbilities {
    /// `elicitation.form`: questions become forms.
    pub forms: bool,
    /// `session.notices`: agent errors become notices.
    pub notices: bool,
}

impl ClientAbilities {
    /// The abilities `initialize` advertised.
    pub fn of(caps: &ClientCapabilities) -> ClientAbilities {
        ClientAbilities {
            forms: caps.elicitation.as_ref().is_some_and(|e| e.supports_form()),
            notices: caps.session.as_ref().is_some_and(|s| s.notices.is_some()),
        }
    }
}

/// A session as this connection uses it.
#[derive(Debug)]
pub struct SessionSlot {
    /// The number the next prompt takes, in the order prompts arrive (the dispatch loop takes
    /// it, before the prompt's task runs).
    next_ticket: AtomicU64,
    /// The number of the prompt whose turn it is; the others wait for theirs.
    serving: watch::Sender<u64>,
    /// Prompts done before their turn came (they failed early): skipped when it comes.
    done_early: Mutex<std::collections::BTreeSet<u64>>,
    /// Counts `session/cancel`s: a prompt that sees it change was cancelled, and client
    /// requests of the session's turn watch it.
    cancels: watch::Sender<u64>,
    /// The session's cost as of the last turn this connection saw end (or replayed).
    cost: Mutex<Option<Cost>>,
}

impl SessionSlot {
    fn new() -> SessionSlot {
        SessionSlot {
            next_ticket: AtomicU64::new(0),
            serving: watch::Sender::new(0),
            done_early: Mutex::new(std::collections::BTreeSet::new()),
            cancels: watch::Sender::new(0),
            cost: Mutex::new(None),
        }
    }

    /// A place in the session's queue of prompts, taken as the prompt arrives; it also
    /// remembers the cancels so far (a cancel after it cancels the prompt).
    pub fn ticket(self: &Arc<Self>) -> Ticket {
        Ticket {
            number: self.next_ticket.fetch_add(1, Ordering::SeqCst),
            cancels_before: self.cancels(),
            slot: self.clone(),
        }
    }

    /// True while a prompt is running or waiting.
    pub fn prompting(&self) -> bool {
        *self.serving.borrow() < self.next_ticket.load(Ordering::SeqCst)
    }

    /// The number of cancels so far.
    pub fn cancels(&self) -> u64 {
        *self.cancels.borrow()
    }

    /// A receiver that changes at each cancel.
    pub fn watch_cancels(&self) -> watch::Receiver<u64> {
        self.cancels.subscribe()
    }

    /// The session's cost through the last turn the connection saw end, if it saw one.
    pub fn cost(&self) -> Option<Cost> {
        *self.cost.lock_unpoisoned()
    }

    /// Records the session's cost through a turn's end.
    pub fn set_cost(&self, cost: Cost) {
        *self.cost.lock_unpoisoned() = Some(cost);
    }

    /// Records a cancel: the running prompt and every queued one are cancelled.
    pub fn cancel(&self) {
        self.cancels.send_modify(|n| *n += 1);
    }
}

/// A prompt's place in its session's queue: its turn comes when the prompts before it are
/// done; dropping it (done, failed, or the task stopped) lets the next one go.
#[derive(Debug)]
pub struct Ticket {
    number: u64,
    /// The session's cancels when the prompt arrived.
    pub cancels_before: u64,
    pub slot: Arc<SessionSlot>,
}

impl Ticket {
    /// Waits until the prompts before this one are done.
    pub async fn wait_turn(&self) {
        let mut serving = self.slot.serving.subscribe();
        let _ = serving.wait_for(|n| *n >= self.number).await;
    }

    /// True when the session was cancelled since the prompt arrived.
    pub fn cancelled(&self) -> bool {
        self.slot.cancels() != self.cancels_before
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut early = self.slot.done_early.lock_unpoisoned();
        early.insert(self.number);
        // The turn passes on past every prompt that is done, never past one still running.
        self.slot.serving.send_modify(|serving| {
            while early.remove(serving) {
                *serving += 1;
            }
        });
    }
}

/// The door's state, shared by the connection's handlers and tasks.
pub struct Door {
    pub manager: Arc<SessionManager>,
    pub options: AcpOptions,
    pub outbox: Arc<Outbox>,
    client: Mutex<ClientAbilities>,
    slots: Mutex<HashMap<String, Arc<SessionSlot>>>,
    /// The tasks answering requests (prompts, loads …), stopped when the connection ends.
    tasks: Mutex<Vec<tokio::task::AbortHandle>>,
}

impl Door {
    /// The state of a new connection.
    pub fn new(manager: Arc<SessionManager>, options: AcpOptions, outbox: Arc<Outbox>) -> Door {
        Door {
            manager,
            options,
            outbox,
            client: Mutex::new(ClientAbilities::default()),
            slots: Mutex::new(HashMap::new()),
            tasks: Mutex::new(Vec::new()),
        }
    }

    /// Runs `task` on the runtime (off the connection's dispatch loop), until it ends or the
    /// connection does.
    pub fn spawn(&self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        let handle = tokio::spawn(task).abort_handle();
        let mut tasks = self.tasks.lock_unpoisoned();
        tasks.retain(|t| !t.is_finished());
        tasks.push(handle);
    }

    /// Stops every task still running (the connection is over).
    pub fn stop_tasks(&self) {
        let tasks = std::mem::take(&mut *self.tasks.lock_unpoisoned());
        for task in tasks {
            task.abort();
        }
    }

    /// Remembers what the client can do.
    pub fn set_client(&self, abilities: ClientAbilities) {
        *self.client.lock_unpoisoned() = abilities;
    }

    /// What the client can do.
    pub fn client(&self) -> ClientAbilities {
        *self.client.lock_unpoisoned()
    }

    /// The connection's state of a session (made on first use).
    pub fn slot(&self, session_id: &str) -> Arc<SessionSlot> {
        let mut slots = self.slots.lock_unpoisoned();
        slots
            .entry(session_id.to_owned())
            .or_insert_with(|| Arc::new(SessionSlot::new()))
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn prompts_take_turns_in_the_order_they_came_even_when_one_fails_early() {
        let slot = Arc::new(SessionSlot::new());
        let first = slot.ticket();
        let second = slot.ticket();
        let third = slot.ticket();
        assert!(slot.prompting());
        // The second fails before its turn: the third must still wait for the first.
        drop(second);
        let waiting = tokio::spawn(async move {
            third.wait_turn().await;
            third.cancelled()
        });
        first.wait_turn().await;
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "the third ran while the first did");
        slot.cancel();
        drop(first);
        assert!(
            waiting.await.unwrap(),
            "a cancel after it arrived cancels it"
        );
        assert!(!slot.prompting());
    }
}
