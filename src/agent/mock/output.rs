//! The mock agent's stdout: one compact JSON object per line, never interleaved.
//!
//! Two threads write here: the scenario (every event but the last) and the supervisor (the
//! terminal `finish` or the aborting `error`). [`Output`] serialises them behind one lock and,
//! once the supervisor has written the last line, refuses further writes, so nothing follows
//! `finish` or an abort. [`Emitter`] is the scenario's side: it builds the event shapes of
//! `docs/codebuff-events.md` §1 and flushes after each line.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use crate::sync::LockExt;

/// Bytes buffered before a write reaches the pipe (when lines are not flushed one by one).
const BUFFER_BYTES: usize = 64 * 1024;

/// Why a line could not be written.
#[derive(Debug)]
pub(super) enum EmitError {
    /// The supervisor has written the last line (the run was aborted or timed out).
    Closed,
    /// stdout failed, typically EPIPE: the reader has gone.
    Io(io::Error),
}

impl From<io::Error> for EmitError {
    fn from(e: io::Error) -> Self {
        EmitError::Io(e)
    }
}

/// The shared, line-atomic stdout.
pub(super) struct Output {
    inner: Mutex<Inner>,
    /// Set before the supervisor takes the lock to close, so a busy writer (`flood`) stops
    /// competing for it at once.
    closing: AtomicBool,
}

struct Inner {
    writer: BufWriter<Box<dyn Write + Send>>,
    closed: bool,
}

impl Output {
    /// stdout, written through a duplicate of fd 1 with our own buffer (bypassing std's
    /// line-buffered `Stdout`, whose per-line flushing would cap the flood rate).
    pub(super) fn stdout() -> io::Result<Output> {
        let fd = io::stdout().as_fd().try_clone_to_owned()?;
        Ok(Output::new(Box::new(File::from(fd))))
    }

    /// An output over any writer (tests use an in-memory one).
    pub(super) fn new(writer: Box<dyn Write + Send>) -> Output {
        Output {
            inner: Mutex::new(Inner {
                writer: BufWriter::with_capacity(BUFFER_BYTES, writer),
                closed: false,
            }),
            closing: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panicking scenario thread must not take the supervisor's last line with it.
        self.inner.lock_unpoisoned()
    }

    /// Writes `line` (without its newline); flushes if `flush`.
    pub(super) fn line(&self, line: &[u8], flush: bool) -> Result<(), EmitError> {
        if self.closing.load(Ordering::Relaxed) {
            return Err(EmitError::Closed);
        }
        let mut inner = self.lock();
        if inner.closed {
            return Err(EmitError::Closed);
        }
        inner.writer.write_all(line)?;
        inner.writer.write_all(b"\n")?;
        if flush {
            inner.writer.flush()?;
        }
        Ok(())
    }

    /// Flushes buffered lines.
    pub(super) fn flush(&self) -> Result<(), EmitError> {
        let mut inner = self.lock();
        if inner.closed {
            return Err(EmitError::Closed);
        }
        inner.writer.flush()?;
        Ok(())
    }

    /// Writes the run's last line (if any), flushes, and refuses every later write.
    ///
    /// Waits at most `grace` for the lock: a scenario blocked writing into a full pipe must not
    /// keep an aborted run alive forever. Returns whether the line was written.
    pub(super) fn close_with(&self, last: Option<&[u8]>, grace: Duration) -> io::Result<bool> {
        self.closing.store(true, Ordering::Relaxed);
        let deadline = Instant::now() + grace;
        let mut inner = loop {
            match self.inner.try_lock() {
                Ok(guard) => break guard,
                Err(TryLockError::Poisoned(e)) => break e.into_inner(),
                Err(TryLockError::WouldBlock) if Instant::now() < deadline => {
                    thread::sleep(Duration::from_millis(1));
                }
                Err(TryLockError::WouldBlock) => return Ok(false),
            }
        };
        if inner.closed {
            return Ok(false);
        }
        inner.closed = true;
        if let Some(line) = last {
            inner.writer.write_all(line)?;
            inner.writer.write_all(b"\n")?;
        }
        inner.writer.flush()?;
        Ok(last.is_some())
    }
}

/// The scenario's writer: event builders over a shared [`Output`], one flushed line each.
pub(super) struct Emitter {
    out: Arc<Output>,
    buf: Vec<u8>,
}

impl Emitter {
    pub(super) fn new(out: Arc<Output>) -> Emitter {
        Emitter {
            out,
            buf: Vec::with_capacity(256),
        }
    }

    /// Any event, as one compact JSON line.
    pub(super) fn event(&mut self, event: &Value) -> Result<(), EmitError> {
        self.buf.clear();
        // Serialising a `Value` into a `Vec` cannot fail.
        let _ = serde_json::to_writer(&mut self.buf, event);
        self.out.line(&self.buf, true)
    }

    /// A line that is not an event at all (the `garbage` scenario).
    pub(super) fn raw(&mut self, line: &str) -> Result<(), EmitError> {
        self.out.line(line.as_bytes(), true)
    }

    /// A pre-formatted line, left in the buffer (the `flood` scenario); see [`Emitter::flush`].
    pub(super) fn buffered(&mut self, line: &[u8]) -> Result<(), EmitError> {
        self.out.line(line, false)
    }

    /// A pre-formatted line, flushed at once (the paced `flood` scenario).
    pub(super) fn flushed(&mut self, line: &[u8]) -> Result<(), EmitError> {
        self.out.line(line, true)
    }

    /// Flushes lines written with [`Emitter::buffered`].
    pub(super) fn flush(&mut self) -> Result<(), EmitError> {
        self.out.flush()
    }

    /// `start`: first line of every run. `agentId` only on a continued conversation.
    pub(super) fn start(
        &mut self,
        agent_id: Option<&str>,
        history: u64,
        session_id: &str,
    ) -> Result<(), EmitError> {
        let mut e = Map::new();
        e.insert("type".into(), "start".into());
        if let Some(agent_id) = agent_id {
            e.insert("agentId".into(), agent_id.into());
        }
        e.insert("messageHistoryLength".into(), history.into());
        e.insert("sessionId".into(), session_id.into());
        self.event(&Value::Object(e))
    }

    /// `text_delta`: one streamed chunk; `agent` only for subagent text.
    pub(super) fn text_delta(&mut self, text: &str, agent: Option<&str>) -> Result<(), EmitError> {
        let mut e = json!({"type": "text_delta", "text": text});
        if let Some(agent) = agent {
            e["agentId"] = agent.into();
        }
        self.event(&e)
    }

    /// `text`: a consolidated segment; `agent` only for subagent text.
    pub(super) fn text(&mut self, text: &str, agent: Option<&str>) -> Result<(), EmitError> {
        let e = match agent {
            Some(agent) => json!({"type": "text", "agentId": agent, "text": text}),
            None => json!({"type": "text", "text": text}),
        };
        self.event(&e)
    }

    /// A streamed segment as the shim emits it: word chunks as `text_delta`s, then the `text`.
    pub(super) fn stream(&mut self, text: &str, agent: Option<&str>) -> Result<(), EmitError> {
        for chunk in word_chunks(text) {
            self.text_delta(chunk, agent)?;
        }
        self.text(text, agent)
    }

    /// `reasoning_delta` of the root run (`ancestorRunIds` empty).
    pub(super) fn reasoning_delta(&mut self, text: &str, run_id: &str) -> Result<(), EmitError> {
        self.event(&json!({
            "type": "reasoning_delta", "text": text, "runId": run_id, "ancestorRunIds": [],
        }))
    }

    /// `tool_call` by `agent` (`"main-agent"` for the root; a subagent also names its parent).
    pub(super) fn tool_call(
        &mut self,
        id: &str,
        name: &str,
        input: Value,
        agent: &str,
        parent: Option<&str>,
    ) -> Result<(), EmitError> {
        let mut e = json!({"type": "tool_call", "toolCallId": id, "toolName": name, "input": input,
            "agentId": agent});
        if let Some(parent) = parent {
            e["parentAgentId"] = parent.into();
        }
        e["includeToolCall"] = true.into();
        self.event(&e)
    }

    /// `tool_result` with one JSON output. `parent` is set for a subagent's result, and is
    /// (upstream quirk) the subagent's own id.
    pub(super) fn tool_result(
        &mut self,
        id: &str,
        name: &str,
        value: Value,
        parent: Option<&str>,
    ) -> Result<(), EmitError> {
        let mut e = json!({"type": "tool_result", "toolCallId": id, "toolName": name,
            "output": [{"type": "json", "value": value}]});
        if let Some(parent) = parent {
            e["parentAgentId"] = parent.into();
        }
        self.event(&e)
    }

    /// `error` with either a `code` (failed run) or a `source` (non-fatal, the agent retries).
    pub(super) fn error(
        &mut self,
        message: &str,
        code: Option<&str>,
        source: Option<&str>,
    ) -> Result<(), EmitError> {
        self.event(&error_event(message, code, source))
    }
}

/// An `error` event (also written by the supervisor as the last line of an aborted run).
pub(super) fn error_event(message: &str, code: Option<&str>, source: Option<&str>) -> Value {
    let mut e = json!({"type": "error", "message": message});
    if let Some(code) = code {
        e["code"] = code.into();
    }
    if let Some(source) = source {
        e["source"] = source.into();
    }
    e
}

/// The `finish` event closing a normal run.
pub(super) fn finish_event(agent_id: &str, total_cost: f64) -> Value {
    json!({"type": "finish", "agentId": agent_id, "totalCost": total_cost})
}

/// Splits `text` into streaming chunks, one per word with the whitespace before it
/// (`"Hello big world"` → `"Hello"`, `" big"`, `" world"`); concatenated they give `text` back.
pub(super) fn word_chunks(text: &str) -> Vec<&str> {
    let mut chunks = Vec::new();
    let mut start = 0;
    let mut prev_space = false;
    for (i, c) in text.char_indices() {
        let space = c.is_whitespace();
        if space && !prev_space && i > start {
            chunks.push(&text[start..i]);
            start = i;
        }
        prev_space = space;
    }
    if start < text.len() {
        chunks.push(&text[start..]);
    }
    chunks
}

/// Formats one `flood` line into `buf` (cleared first), without allocating:
/// `{"type":"text_delta","text":"<i>:<unix_time_ns>;"}`.
pub(super) fn flood_line(buf: &mut Vec<u8>, i: u64, unix_time_ns: u64) {
    buf.clear();
    buf.extend_from_slice(br#"{"type":"text_delta","text":""#);
    push_decimal(buf, i);
    buf.push(b':');
    push_decimal(buf, unix_time_ns);
    buf.extend_from_slice(br#";"}"#);
}

/// Appends the decimal digits of `n`.
fn push_decimal(buf: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    buf.extend_from_slice(&digits[at..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer whose bytes the test can read back.
    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl Write for Sink {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Sink {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    #[test]
    fn word_chunks_keep_spaces_and_concatenate_back() {
        assert_eq!(
            word_chunks("Hello big  world"),
            ["Hello", " big", "  world"]
        );
        assert_eq!(word_chunks(" lead\nnext "), [" lead", "\nnext", " "]);
        assert_eq!(word_chunks("one"), ["one"]);
        assert!(word_chunks("").is_empty());
        let text = "été  — déjà vu\t!";
        assert_eq!(word_chunks(text).concat(), text);
    }

    #[test]
    fn flood_line_is_a_text_delta_with_index_and_time() {
        let mut buf = Vec::new();
        flood_line(&mut buf, 0, 0);
        assert_eq!(buf, br#"{"type":"text_delta","text":"0:0;"}"#);
        flood_line(&mut buf, 42, 1_700_000_000_123_456_789);
        let v: Value = serde_json::from_slice(&buf).unwrap();
        assert_eq!(
            v,
            json!({"type": "text_delta", "text": "42:1700000000123456789;"})
        );
        flood_line(&mut buf, u64::MAX, 10);
        assert_eq!(
            buf,
            br#"{"type":"text_delta","text":"18446744073709551615:10;"}"#
        );
    }

    #[test]
    fn emitter_writes_compact_lines_in_upstream_shapes() {
        let sink = Sink::default();
        let out = Arc::new(Output::new(Box::new(sink.clone())));
        let mut em = Emitter::new(out);
        em.start(None, 0, "s-1").unwrap();
        em.stream("Hi there", Some("sub-1")).unwrap();
        em.tool_result("c1", "read_files", json!([]), Some("sub-1"))
            .unwrap();
        let lines: Vec<String> = sink.text().lines().map(str::to_owned).collect();
        assert_eq!(
            lines,
            [
                r#"{"type":"start","messageHistoryLength":0,"sessionId":"s-1"}"#,
                r#"{"type":"text_delta","text":"Hi","agentId":"sub-1"}"#,
                r#"{"type":"text_delta","text":" there","agentId":"sub-1"}"#,
                r#"{"type":"text","agentId":"sub-1","text":"Hi there"}"#,
                r#"{"type":"tool_result","toolCallId":"c1","toolName":"read_files","output":[{"type":"json","value":[]}],"parentAgentId":"sub-1"}"#,
            ]
        );
    }

    #[test]
    fn nothing_is_written_after_the_last_line() {
        let sink = Sink::default();
        let out = Arc::new(Output::new(Box::new(sink.clone())));
        let mut em = Emitter::new(out.clone());
        em.buffered(b"{\"a\":1}").unwrap();
        let last = serde_json::to_vec(&error_event("aborted", Some("aborted"), None)).unwrap();
        assert!(out.close_with(Some(&last), Duration::from_secs(1)).unwrap());
        assert!(matches!(em.text("late", None), Err(EmitError::Closed)));
        assert!(!out.close_with(Some(b"{}"), Duration::from_secs(1)).unwrap());
        assert_eq!(
            sink.text(),
            "{\"a\":1}\n{\"type\":\"error\",\"message\":\"aborted\",\"code\":\"aborted\"}\n"
        );
    }
}
