//! A session's messages waiting for their turn: bounded, in order, and cancellable as a whole.
//!
//! The manager counts a message in when it hands it to the actor (so a full queue is refused
//! at once, `queue_full`, without waiting for the actor), the actor counts it out when its turn
//! starts or it is dropped. Answers that resume a conversation jump the queue (they continue
//! the run that asked) and are not counted against the bound.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::oneshot;

use super::message::UserMessage;
use super::SessionError;

/// Messages a session holds waiting for their turn before it refuses more.
pub const MAX_QUEUED: usize = 64;

/// A message waiting for its turn; `started` gets the sequence of its `turn.started`.
pub(crate) struct Queued {
    pub message: UserMessage,
    pub started: Option<oneshot::Sender<Result<u64, SessionError>>>,
    /// Counted against [`MAX_QUEUED`] (client messages; not the daemon's own answer prompts).
    counted: bool,
}

impl Queued {
    /// Refuses the message: whoever waits for its turn gets `error`.
    fn refuse(self, error: impl FnOnce() -> SessionError) {
        if let Some(tx) = self.started {
            let _ = tx.send(Err(error()));
        }
    }
}

/// The count of a session's queued client messages, shared by its manager and its actor.
#[derive(Debug, Clone, Default)]
pub(crate) struct QueueCount(Arc<AtomicUsize>);

impl QueueCount {
    /// Counts a message in; refused (`queue_full`) when the session already holds
    /// [`MAX_QUEUED`].
    pub fn admit(&self) -> Result<(), SessionError> {
        self.0
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < MAX_QUEUED).then_some(n + 1)
            })
            .map(|_| ())
            .map_err(|_| SessionError::QueueFull(MAX_QUEUED))
    }

    pub fn release(&self) {
        let _ = self
            .0
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
    }
}

/// The actor's queue.
pub(crate) struct MessageQueue {
    waiting: VecDeque<Queued>,
    count: QueueCount,
}

impl MessageQueue {
    pub fn new(count: QueueCount) -> MessageQueue {
        MessageQueue {
            waiting: VecDeque::new(),
            count,
        }
    }

    /// A client message (already counted in by [`QueueCount::admit`]) joins the end.
    pub fn push(
        &mut self,
        message: UserMessage,
        started: Option<oneshot::Sender<Result<u64, SessionError>>>,
    ) {
        self.waiting.push_back(Queued {
            message,
            started,
            counted: true,
        });
    }

    /// The daemon's own prompt (an answer to a run that stopped waiting) goes first.
    pub fn push_front(&mut self, message: UserMessage) {
        self.waiting.push_front(Queued {
            message,
            started: None,
            counted: false,
        });
    }

    /// The next message whose turn it is.
    pub fn pop(&mut self) -> Option<Queued> {
        let next = self.waiting.pop_front()?;
        if next.counted {
            self.count.release();
        }
        Some(next)
    }

    /// How many messages wait.
    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    /// Drops every waiting message; whoever waits for one gets `error()`.
    pub fn refuse_all(&mut self, error: impl Fn() -> SessionError) {
        while let Some(q) = self.pop() {
            q.refuse(&error);
        }
    }
}

impl Drop for MessageQueue {
    fn drop(&mut self) {
        self.refuse_all(|| SessionError::ShuttingDown);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_refuses_at_once_and_frees_as_turns_start() {
        let count = QueueCount::default();
        let mut queue = MessageQueue::new(count.clone());
        for i in 0..MAX_QUEUED {
            count.admit().unwrap();
            queue.push(UserMessage::from(format!("m{i}")), None);
        }
        assert!(matches!(
            count.admit(),
            Err(SessionError::QueueFull(MAX_QUEUED))
        ));
        // The daemon's own answer prompt is never refused and not counted.
        queue.push_front(UserMessage::from("answers".to_owned()));
        assert_eq!(queue.pop().unwrap().message.text, "answers");
        assert!(count.admit().is_err());
        assert_eq!(queue.pop().unwrap().message.text, "m0");
        count.admit().unwrap();
    }

    #[tokio::test]
    async fn refusing_all_answers_every_waiter_and_empties_the_count() {
        let count = QueueCount::default();
        let mut queue = MessageQueue::new(count.clone());
        let mut waiters = Vec::new();
        for i in 0..3 {
            count.admit().unwrap();
            let (tx, rx) = oneshot::channel();
            queue.push(UserMessage::from(format!("m{i}")), Some(tx));
            waiters.push(rx);
        }
        queue.refuse_all(|| SessionError::Cancelled);
        assert!(queue.pop().is_none());
        for rx in waiters {
            assert!(matches!(rx.await.unwrap(), Err(SessionError::Cancelled)));
        }
        for _ in 0..MAX_QUEUED {
            count.admit().unwrap();
        }
    }
}
