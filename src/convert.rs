//! `codebuffd convert`: replays a Codebuff JSON-lines stream through the converter and prints
//! the universal events a new session's single turn would record.
//!
//! Used to inspect captures and to produce the golden files; errors in the input never stop
//! it, only I/O failures do.

use std::io::{self, BufWriter, Read, Write};

use crate::agent::{Frame, LineFramer};
use crate::codebuff::{CodebuffConverter, Stream, TurnOutcome};
use crate::session::Recorder;
use crate::universal::{format_time, EventDraft, SessionMetadata};

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
    let mut out = BufWriter::new(output);
    let mut writer = EventWriter {
        recorder: Recorder::new(options.session_id.as_str(), 0),
        options,
        written: 0,
    };
    let mut converter = CodebuffConverter::new();
    let mut drafts = Vec::new();

    drafts.push(Recorder::session_started(SessionMetadata {
        agent: Some("codebuff".into()),
        agent_mode: Some("build".into()),
        model: None,
        permission_mode: Some("bypass".into()),
        variant: None,
    }));
    converter.begin_turn(options.prompt.as_deref(), &mut drafts);
    writer.write(&mut out, &converter, &mut drafts)?;

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
            convert_frame(&mut converter, frame, options.max_line_bytes, &mut drafts);
            if io_result.is_ok() {
                io_result = writer.write(&mut out, &converter, &mut drafts);
            }
        });
        io_result
            .as_ref()
            .map_err(|e| io::Error::new(e.kind(), e.to_string()))?;
    }
    framer.finish(&mut |frame| {
        convert_frame(&mut converter, frame, options.max_line_bytes, &mut drafts);
    });
    // Without `finish` the turn ends here as failed; a fatal failure also ends the session.
    let message = (!converter.turn_ended())
        .then(|| "the agent's output ended without a `finish` event".to_owned());
    converter.end_turn(
        TurnOutcome {
            status: converter.failure_status(),
            exit_code: None,
            signal: None,
            message,
            stderr: None,
        },
        &mut drafts,
    );
    writer.write(&mut out, &converter, &mut drafts)?;
    out.flush()?;
    Ok(writer.written)
}

/// Converts one framed stdout line; blank lines carry nothing and are skipped.
fn convert_frame(
    converter: &mut CodebuffConverter,
    frame: Frame<'_>,
    limit: usize,
    drafts: &mut Vec<EventDraft>,
) {
    match frame {
        Frame::Line(line) if line.iter().all(u8::is_ascii_whitespace) => {}
        Frame::Line(line) => converter.convert_stdout_line(line, drafts),
        Frame::Oversized { length, prefix } => {
            drafts.push(converter.oversized_line(Stream::Stdout, length, limit, prefix))
        }
    }
}

struct EventWriter<'a> {
    recorder: Recorder,
    options: &'a ConvertOptions,
    written: u64,
}

impl EventWriter<'_> {
    fn write(
        &mut self,
        out: &mut dyn Write,
        converter: &CodebuffConverter,
        drafts: &mut Vec<EventDraft>,
    ) -> io::Result<()> {
        if drafts.is_empty() {
            return Ok(());
        }
        let time: std::sync::Arc<str> = match &self.options.fixed_time {
            Some(t) => t.as_str().into(),
            None => format_time(time::OffsetDateTime::now_utc()).into(),
        };
        for draft in drafts.drain(..) {
            let event = self
                .recorder
                .record(draft, time.clone(), converter.native_session_id());
            serde_json::to_writer(&mut *out, &event.view(self.options.include_raw))?;
            out.write_all(b"\n")?;
            self.written += 1;
        }
        Ok(())
    }
}
