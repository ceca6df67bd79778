//! Reading a server-sent event stream from its raw bytes, checking the framing as it goes
//! (`docs/http-api.md`, "SSE framing"): each event is exactly an `id: <sequence>` line, a
//! compact-JSON `data: ` line and a blank line; a comment (`: keep-alive`) is a frame of its own.

use std::pin::Pin;
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use serde_json::Value;
use tokio::time::Instant;

/// Longest wait for any one frame (the machine is loaded; no timing is asserted).
pub const FRAME_WAIT: Duration = Duration::from_secs(60);

/// One SSE frame.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    /// `id: <sequence>` then `data: <json>`.
    Event { id: u64, data: Value },
    /// A `: <text>` comment.
    Comment(String),
}

/// What a wait for the next frame ended with.
enum Read {
    Frame(Frame),
    /// The server ended the stream.
    Closed,
    /// The connection failed.
    Failed(reqwest::Error),
    TimedOut,
}

/// An open SSE response, read one frame at a time.
pub struct SseReader {
    body: Pin<Box<dyn Stream<Item = reqwest::Result<axum::body::Bytes>> + Send>>,
    buf: Vec<u8>,
    /// Start of the unconsumed bytes in `buf`.
    pos: usize,
    /// Where to resume looking for the end of the current frame.
    scan: usize,
}

impl SseReader {
    pub fn new(resp: reqwest::Response) -> SseReader {
        SseReader {
            body: Box::pin(resp.bytes_stream()),
            buf: Vec::new(),
            pos: 0,
            scan: 0,
        }
    }

    /// The next frame, unless the stream ends, fails or `deadline` passes first.
    async fn read(&mut self, deadline: Instant) -> Read {
        loop {
            let from = self.scan.max(self.pos);
            if let Some(at) = self.buf[from..].windows(2).position(|w| w == b"\n\n") {
                let end = from + at;
                let frame = parse_block(&self.buf[self.pos..end]);
                self.pos = end + 2;
                self.scan = self.pos;
                return Read::Frame(frame);
            }
            self.scan = self.buf.len().saturating_sub(1).max(self.pos);
            if self.pos > 0 {
                self.buf.drain(..self.pos);
                self.scan -= self.pos;
                self.pos = 0;
            }
            match tokio::time::timeout_at(deadline, self.body.next()).await {
                Err(_) => return Read::TimedOut,
                Ok(None) => return Read::Closed,
                Ok(Some(Err(e))) => return Read::Failed(e),
                Ok(Some(Ok(chunk))) => self.buf.extend_from_slice(&chunk),
            }
        }
    }

    /// The next frame; `None` when the server closed the stream (between frames). Panics when
    /// nothing arrives within [`FRAME_WAIT`] or the connection fails.
    pub async fn next(&mut self) -> Option<Frame> {
        match self.read(Instant::now() + FRAME_WAIT).await {
            Read::Frame(frame) => Some(frame),
            Read::Closed => {
                assert!(
                    self.buf.is_empty(),
                    "stream closed mid-frame: {:?}",
                    String::from_utf8_lossy(&self.buf)
                );
                None
            }
            Read::Failed(e) => panic!("SSE body error: {e}"),
            Read::TimedOut => panic!(
                "no SSE frame within {FRAME_WAIT:?}; buffered: {:?}",
                String::from_utf8_lossy(&self.buf)
            ),
        }
    }

    /// The next event, skipping comments; `None` at the end of the stream.
    pub async fn next_event(&mut self) -> Option<(u64, Value)> {
        loop {
            match self.next().await? {
                Frame::Event { id, data } => return Some((id, data)),
                Frame::Comment(_) => {}
            }
        }
    }

    /// Events until (and including) the first of type `until`; panics if the stream ends first.
    pub async fn events_until(&mut self, until: &str) -> Vec<Value> {
        let mut out = Vec::new();
        loop {
            let (_, e) = self
                .next_event()
                .await
                .unwrap_or_else(|| panic!("the stream closed before {until}"));
            let done = e["type"] == until;
            out.push(e);
            if done {
                return out;
            }
        }
    }

    /// Events until one satisfies `pred` (inclusive), the stream ends or fails, or `limit`
    /// passes, whichever comes first.
    pub async fn until(&mut self, limit: Duration, pred: impl Fn(&Value) -> bool) -> Vec<Value> {
        let deadline = Instant::now() + limit;
        let mut out = Vec::new();
        loop {
            match self.read(deadline).await {
                Read::Frame(Frame::Event { data, .. }) => {
                    let done = pred(&data);
                    out.push(data);
                    if done {
                        return out;
                    }
                }
                Read::Frame(Frame::Comment(_)) => {}
                Read::Closed | Read::Failed(_) | Read::TimedOut => return out,
            }
        }
    }

    /// Reads (and drops) whatever still comes; true when the stream ends (or its connection
    /// fails) within `limit`.
    pub async fn closes_within(&mut self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            match tokio::time::timeout_at(deadline, self.body.next()).await {
                Err(_) => return false,
                Ok(Some(Ok(_))) => continue,
                Ok(Some(Err(_)) | None) => return true,
            }
        }
    }
}

/// Parses one frame (without its terminating blank line) and checks the framing.
fn parse_block(block: &[u8]) -> Frame {
    let text = std::str::from_utf8(block).expect("SSE frames are UTF-8");
    let lines: Vec<&str> = text.split('\n').collect();
    if lines.iter().all(|l| l.starts_with(':')) {
        return Frame::Comment(lines[0][1..].trim_start().to_owned());
    }
    assert_eq!(lines.len(), 2, "an event is `id:` then `data:`: {text:?}");
    let id = lines[0]
        .strip_prefix("id: ")
        .unwrap_or_else(|| panic!("first line is `id: `: {text:?}"));
    let data = lines[1]
        .strip_prefix("data: ")
        .unwrap_or_else(|| panic!("second line is `data: `: {text:?}"));
    let id: u64 = id.parse().expect("the id is a sequence number");
    let value: Value = serde_json::from_str(data).expect("data is JSON");
    assert_eq!(
        serde_json::to_string(&value).unwrap(),
        data,
        "data is compact JSON"
    );
    assert_eq!(value["sequence"], id, "id is the event's sequence");
    Frame::Event { id, data: value }
}
