//! The door's state for one ACP connection: the engine's session manager, what the client can
//! do (from `initialize`), and per session its cancels and the prompts it runs (their order
//! is the engine's queue).
//! Turns, processes and the log stay the engine's; the door only remembers what the
//! connection needs.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use agent_client_protocol::v1::schema::ClientCapabilities;
use tokio::sync::watch;

use super::transport::Outbox;
use crate::session::{AgentKind, SessionManager};
use crate::sync::LockExt;

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

/// A session as this connection uses it: its cancels and how many of its prompts this
/// connection is running. The prompts themselves wait in the engine's queue of the session.
#[derive(Debug, Default)]
pub struct SessionSlot {
    /// Counts `session/cancel`s: a prompt that sees it change was cancelled (ACP answers it
    /// `cancelled` whatever its turn did), and client requests of the turn are withdrawn.
    cancels: watch::Sender<u64>,
    /// Prompts of this connection queued or running on the session.
    prompts: AtomicU64,
}

impl SessionSlot {
    /// True while a prompt of this connection is queued or running.
    pub fn prompting(&self) -> bool {
        self.prompts.load(Ordering::SeqCst) > 0
    }

    /// Counts a prompt in until the guard is dropped.
    pub fn prompt(self: &Arc<Self>) -> PromptGuard {
        self.prompts.fetch_add(1, Ordering::SeqCst);
        PromptGuard {
            cancels_before: self.cancels(),
            slot: self.clone(),
        }
    }

    /// The number of cancels so far.
    pub fn cancels(&self) -> u64 {
        *self.cancels.borrow()
    }

    /// A receiver that changes at each cancel.
    pub fn watch_cancels(&self) -> watch::Receiver<u64> {
        self.cancels.subscribe()
    }

    /// Records a cancel: the running prompt and every queued one are cancelled.
    pub fn cancel(&self) {
        self.cancels.send_modify(|n| *n += 1);
    }
}

/// A prompt of this connection, from its arrival to its answer.
#[derive(Debug)]
pub struct PromptGuard {
    /// The session's cancels when the prompt arrived: a later one cancels it.
    pub cancels_before: u64,
    pub slot: Arc<SessionSlot>,
}

impl PromptGuard {
    /// True when the session was cancelled since the prompt arrived.
    pub fn cancelled(&self) -> bool {
        self.slot.cancels() != self.cancels_before
    }
}

impl Drop for PromptGuard {
    fn drop(&mut self) {
        self.slot.prompts.fetch_sub(1, Ordering::SeqCst);
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
        slots.entry(session_id.to_owned()).or_default().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prompt_is_cancelled_by_a_cancel_after_it_arrived_only() {
        let slot = Arc::new(SessionSlot::default());
        slot.cancel();
        let first = slot.prompt();
        let second = slot.prompt();
        assert!(slot.prompting());
        assert!(!first.cancelled(), "a cancel before it arrived");
        slot.cancel();
        assert!(first.cancelled() && second.cancelled());
        drop(first);
        assert!(slot.prompting());
        drop(second);
        assert!(!slot.prompting());
    }
}
