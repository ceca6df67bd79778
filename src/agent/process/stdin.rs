//! The stdin writer: one task per agent writes the queued lines in order, so an answer never
//! overtakes the turn line, and tells each waiting caller whether its line was written.

use std::io;

use tokio::io::AsyncWriteExt;
use tokio::process::ChildStdin;
use tokio::sync::mpsc;

/// A line for the agent's stdin, and who waits for it to be written.
pub(super) struct StdinLine {
    pub(super) bytes: Vec<u8>,
    pub(super) done: Option<tokio::sync::oneshot::Sender<io::Result<()>>>,
}

pub(super) fn closed() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "the agent's stdin is closed")
}

/// Writes queued lines to the agent's stdin in order, until the queue is dropped (then stdin
/// closes) or a write fails (the agent closed its end: later lines fail too).
pub(super) async fn write_stdin(
    mut pipe: ChildStdin,
    mut lines: mpsc::UnboundedReceiver<StdinLine>,
) {
    while let Some(line) = lines.recv().await {
        let written = match pipe.write_all(&line.bytes).await {
            Ok(()) => pipe.flush().await,
            Err(e) => Err(e),
        };
        let failed = written.is_err();
        if let Some(done) = line.done {
            let _ = done.send(written);
        }
        if failed {
            lines.close();
            while let Some(line) = lines.recv().await {
                if let Some(done) = line.done {
                    let _ = done.send(Err(closed()));
                }
            }
            return;
        }
    }
}
