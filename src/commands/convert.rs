//! `codebuffd convert`: replays a Codebuff JSON-lines stream and prints the universal events a
//! new session's single turn would record.
//!
//! It goes through the daemon's own path: the agent's lines are framed by the same
//! [`LineFramer`] as a live agent's stdout, fed to the converter by the same [`TurnDriver`],
//! the turn ends by the same [`TurnDriver::outcome`], and the drafts are stamped by the
//! store's [`StoredEvent::stamp_all`]. Used to inspect captures and to produce the golden
//! files; errors in the input never stop it, only I/O failures do.

use std::io::{self, BufWriter, Read, Write};
use std::sync::Arc;

use crate::agent::{Frame, LineFramer, OutputStream, ProcessEvent};
use crate::codebuff::CodebuffConverter;
use crate::session::{Ending, SessionSettings, TurnDriver};
use crate::store::StoredEvent;
use crate::universal::{format_time, EventDraft};

/// Settings of one conversion.
#[derive(Debug, Clone)]
pub struct ConvertOptions {
    /// The session id the events carry.
    pub session_id: String,
    /// The user's prompt; when given, the turn records the user item.
    pub prompt: Option<String>,
    /// Keep each event's `raw` agent line.
    pub include_raw: bool,
    /// Longest accepted line in bytes; longer lines become `agent.unparsed`.
    pub max_line_bytes: usize,
    /// A fixed time for every event (reproducible output); else the clock at each line.
    pub fixed_time: Option<String>,
}

/// Converts `input` to universal events written to `output`, one JSON object per line.
/// Returns the number of events written.
pub fn convert_stream(
    input: &mut dyn Read,
    output: &mut dyn Write,
    options: &ConvertOptions,
) -> io::Result<u64> {
    let mut out = EventWriter {
        out: BufWriter::new(output),
        session_id: options.session_id.as_str().into(),
        options,
        written: 0,
    };
    let mut converter = CodebuffConverter::new();
    let mut driver = TurnDriver::new(options.max_line_bytes);
    let mut drafts = vec![SessionSettings::for_convert().started_event()];
    converter.begin_turn(options.prompt.as_deref(), &mut drafts);
    out.write(&converter, &mut drafts)?;

    let mut framer = LineFramer::new(options.max_line_bytes);
    let mut buf = vec![0u8; 64 * 1024];
    let mut io_result = Ok(());
    loop {
        let n = match input.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        framer.push(&buf[..n], &mut |frame| {
            driver.take(&mut converter, stdout_event(frame), &mut drafts);
            if io_result.is_ok() {
                io_result = out.write(&converter, &mut drafts);
            }
        });
        io_result
            .as_ref()
            .map_err(|e| io::Error::new(e.kind(), e.to_string()))?;
    }
    framer.finish(&mut |frame| {
        driver.take(&mut converter, stdout_event(frame), &mut drafts);
    });
    // Without `finish` the turn ends here; a fatal failure also ends the session.
    let outcome = driver.outcome(&converter, None, Ending::OutputEnded);
    converter.end_turn(outcome, &mut drafts);
    out.write(&converter, &mut drafts)?;
    out.out.flush()?;
    Ok(out.written)
}

/// A framed line of the stream as the agent's stdout would deliver it.
fn stdout_event(frame: Frame<'_>) -> ProcessEvent {
    match frame {
        Frame::Line(line) => ProcessEvent::Line {
            stream: OutputStream::Stdout,
            line: bytes::Bytes::copy_from_slice(line),
        },
        Frame::Oversized { length, prefix } => ProcessEvent::Oversized {
            stream: OutputStream::Stdout,
            length,
            prefix: prefix.to_vec(),
        },
    }
}

/// Stamps drafts as the store would and prints them.
struct EventWriter<'a, W: Write> {
    out: BufWriter<W>,
    session_id: Arc<str>,
    options: &'a ConvertOptions,
    written: u64,
}

impl<W: Write> EventWriter<'_, W> {
    fn write(
        &mut self,
        converter: &CodebuffConverter,
        drafts: &mut Vec<EventDraft>,
    ) -> io::Result<()> {
        if drafts.is_empty() {
            return Ok(());
        }
        let time: Arc<str> = match &self.options.fixed_time {
            Some(t) => t.as_str().into(),
            None => format_time(time::OffsetDateTime::now_utc()).into(),
        };
        let events = StoredEvent::stamp_all(
            drafts,
            self.written + 1,
            &time,
            &self.session_id,
            converter.native_session_id(),
        );
        for event in events {
            self.out
                .write_all(event.json(self.options.include_raw).as_bytes())?;
            self.out.write_all(b"\n")?;
            self.written += 1;
        }
        Ok(())
    }
}
