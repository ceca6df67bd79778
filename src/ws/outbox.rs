//! A connection's outgoing queue: every task of the connection (acks, prompts, followed
//! topics) hands its messages to one writer task, in order, through a bounded channel. A
//! client that reads slowly holds up only its own connection's tasks, each at its own cursor.

use axum::extract::ws::{CloseFrame, Message, WebSocket};
use futures_util::stream::SplitSink;
use futures_util::SinkExt;
use tokio::sync::mpsc;

use super::server::{ServerAction, ServerMessage};

/// Messages queued per connection before its tasks wait for the client.
const CAPACITY: usize = 256;

/// What the writer sends.
#[derive(Debug)]
pub enum Outgoing {
    Text(String),
    /// A close frame, then nothing more.
    Close {
        code: u16,
        reason: String,
    },
}

/// The sending side of a connection's queue.
#[derive(Debug, Clone)]
pub struct Outbox(mpsc::Sender<Outgoing>);

impl Outbox {
    /// A queue and the writer task's end of it.
    pub fn new() -> (Outbox, mpsc::Receiver<Outgoing>) {
        let (tx, rx) = mpsc::channel(CAPACITY);
        (Outbox(tx), rx)
    }

    /// Queues a message; false once the connection is gone.
    pub async fn send(&self, message: &ServerMessage) -> bool {
        self.text(message.to_text()).await
    }

    /// Queues a server action.
    pub async fn action(&self, data: ServerAction) -> bool {
        self.send(&ServerMessage::Action {
            data: Box::new(data),
        })
        .await
    }

    /// Queues JSON text made elsewhere.
    pub async fn text(&self, text: String) -> bool {
        self.0.send(Outgoing::Text(text)).await.is_ok()
    }

    /// True once the writer is gone (the connection closed).
    pub fn is_closed(&self) -> bool {
        self.0.is_closed()
    }

    /// Queues a close frame.
    pub async fn close(&self, code: u16, reason: String) {
        let _ = self.0.send(Outgoing::Close { code, reason }).await;
    }
}

/// Writes what is queued until the queue closes or a close frame went out, then closes the
/// socket.
pub async fn write(mut sink: SplitSink<WebSocket, Message>, mut rx: mpsc::Receiver<Outgoing>) {
    while let Some(out) = rx.recv().await {
        let result = match out {
            Outgoing::Text(text) => sink.send(Message::Text(text.into())).await,
            Outgoing::Close { code, reason } => {
                let frame = CloseFrame {
                    code,
                    reason: reason.into(),
                };
                let _ = sink.send(Message::Close(Some(frame))).await;
                break;
            }
        };
        if result.is_err() {
            // The client is gone: the reader notices too.
            break;
        }
    }
    let _ = sink.close().await;
}
