//! The REPL's line editor: the history file (`$XDG_STATE_HOME/codebuffd/history`, else
//! `~/.local/state/codebuffd/history`, the last 1,000 lines) and reading one line at the prompt.

use std::path::PathBuf;

use rustyline::error::ReadlineError;
use rustyline::DefaultEditor;

use super::error::ClientError;

/// Lines of history kept.
const HISTORY: usize = 1000;

/// A line read at the prompt.
pub enum Read {
    Line(String),
    /// Ctrl-C: the line is dropped.
    Interrupted,
    /// Ctrl-D.
    Eof,
}

/// The lines typed, in this run and the earlier ones.
pub struct LineEditor {
    file: Option<PathBuf>,
    lines: Vec<String>,
}

impl LineEditor {
    /// The editor with the history of earlier runs.
    pub fn load() -> LineEditor {
        let file = history_file();
        let lines = file
            .as_ref()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .map(|text| text.lines().map(str::to_owned).collect())
            .unwrap_or_default();
        LineEditor { file, lines }
    }

    /// Reads a line on a blocking thread, with an editor made for it and dropped after: an
    /// editor holds the terminal's SIGINT handler while it lives, and a turn needs Ctrl-C to
    /// reach the client (and the question prompts make editors of their own).
    pub async fn read(&mut self, prompt: String) -> Result<Read, ClientError> {
        let history = std::mem::take(&mut self.lines);
        let (lines, read) = tokio::task::spawn_blocking(move || read_line(history, &prompt))
            .await
            .map_err(|e| ClientError::failed(e.to_string()))??;
        self.lines = lines;
        Ok(read)
    }

    /// Writes the history file (its last lines); a failure loses only the history.
    pub fn save(&self) {
        let Some(path) = &self.file else { return };
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let keep = self.lines.len().saturating_sub(HISTORY);
        let mut text = self.lines[keep..].join("\n");
        text.push('\n');
        let _ = std::fs::write(path, text);
    }
}

fn read_line(history: Vec<String>, prompt: &str) -> Result<(Vec<String>, Read), ClientError> {
    let config = rustyline::Config::builder()
        .behavior(rustyline::config::Behavior::PreferTerm)
        .auto_add_history(true)
        .max_history_size(HISTORY)
        .map_err(|e| ClientError::failed(e.to_string()))?
        .build();
    let mut editor =
        DefaultEditor::with_config(config).map_err(|e| ClientError::failed(e.to_string()))?;
    for line in &history {
        let _ = editor.add_history_entry(line.as_str());
    }
    let read = match editor.readline(prompt) {
        Ok(line) => Read::Line(line),
        Err(ReadlineError::Interrupted) => Read::Interrupted,
        Err(ReadlineError::Eof) => Read::Eof,
        Err(e) => {
            return Err(ClientError::failed(format!(
                "cannot read the terminal: {e}"
            )))
        }
    };
    let history = editor.history().iter().cloned().collect();
    Ok((history, read))
}

/// Where the line history is kept.
fn history_file() -> Option<PathBuf> {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let dir = env("XDG_STATE_HOME")
        .map(PathBuf::from)
        .or_else(|| env("HOME").map(|h| PathBuf::from(h).join(".local/state")))?;
    Some(dir.join("codebuffd/history"))
}
