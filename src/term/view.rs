//! The human view on stderr: writes the pieces `render.rs` makes, keeps track of where the
//! cursor is (mid-line while text streams), and on a terminal shows a spinner with the turn's
//! elapsed time and what is happening while nothing streams. Without a terminal there is no
//! spinner and no colour; with `--quiet` only errors and what needs an answer are written.
//! Every text is shown, never obeyed (`visible.rs`), before the view's own colours are added.

use std::io::Write;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::echo::EchoOff;
use super::format::Style;
use super::paint::Paint;
use super::render::Piece;
use super::visible::visible;

/// How often the spinner moves.
const TICK: Duration = Duration::from_millis(100);

/// The stderr side of a turn.
pub struct View {
    paint: Paint,
    /// stderr is a terminal: a spinner is shown.
    tty: bool,
    quiet: bool,
    spinner: Option<ProgressBar>,
    activity: String,
    /// Where the turn's clock started.
    since: Instant,
    /// The cursor is at the start of a line.
    at_line_start: bool,
    /// Write to stdout instead (`sessions events`, where the view is the data).
    stdout: bool,
    /// The terminal's echo, off while a turn runs (`echo.rs`).
    echo: Option<EchoOff>,
}

impl View {
    pub fn new(paint: Paint, tty: bool, quiet: bool) -> View {
        View {
            paint,
            tty,
            quiet,
            spinner: None,
            activity: String::new(),
            since: Instant::now(),
            at_line_start: true,
            stdout: false,
            echo: None,
        }
    }

    /// The same view on stdout, without a spinner.
    pub fn to_stdout(mut self) -> View {
        self.stdout = true;
        self.tty = false;
        self
    }

    pub fn paint(&self) -> Paint {
        self.paint
    }

    /// A new turn: the spinner's clock restarts, and on a terminal what is typed is not
    /// echoed until the turn's output is finished.
    pub fn start_turn(&mut self) {
        self.since = Instant::now();
        if self.tty && self.echo.is_none() {
            self.echo = EchoOff::new();
        }
    }

    /// Writes pieces.
    pub fn show(&mut self, pieces: &[Piece]) {
        for piece in pieces {
            match piece {
                Piece::Text(text) | Piece::Reasoning(text) if self.quiet => {
                    let _ = text;
                }
                Piece::Text(text) => self.stream(text, Style::Plain),
                Piece::Reasoning(text) => self.stream(text, Style::Dim),
                Piece::Break => {
                    if !self.at_line_start {
                        self.write("\n");
                        self.at_line_start = true;
                    }
                }
                Piece::Line(style, text) => {
                    if self.quiet && *style != Style::Error {
                        continue;
                    }
                    self.line(*style, text);
                }
                Piece::Activity(what) => {
                    self.activity.clone_from(what);
                    self.spin();
                }
            }
        }
    }

    /// Writes a whole line (on a line of its own).
    pub fn line(&mut self, style: Style, text: &str) {
        let text = format!("{}\n", self.paint.paint(style, &visible(text)));
        let newline = !self.at_line_start;
        match &self.spinner {
            Some(bar) => bar.suspend(|| {
                let mut err = std::io::stderr().lock();
                if newline {
                    let _ = err.write_all(b"\n");
                }
                let _ = err.write_all(text.as_bytes());
                let _ = err.flush();
            }),
            None => {
                if newline {
                    self.write("\n");
                }
                self.write(&text);
            }
        }
        self.at_line_start = true;
    }

    /// A notice that is shown even with `--quiet` (what the user must know).
    pub fn notice(&mut self, style: Style, text: &str) {
        self.line(style, text);
    }

    fn stream(&mut self, text: &str, style: Style) {
        if text.is_empty() {
            return;
        }
        self.stop_spinner();
        let painted = self.paint.paint(style, &visible(text));
        self.write(&painted);
        self.at_line_start = text.ends_with('\n');
    }

    fn write(&self, text: &str) {
        if self.stdout {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(text.as_bytes());
            let _ = out.flush();
        } else {
            let mut err = std::io::stderr().lock();
            let _ = err.write_all(text.as_bytes());
            let _ = err.flush();
        }
    }

    /// Shows the spinner with the current activity, when the cursor is at a line start.
    fn spin(&mut self) {
        if !self.tty || !self.at_line_start || self.quiet {
            return;
        }
        match &self.spinner {
            Some(bar) => bar.set_message(self.activity.clone()),
            None => {
                let style = ProgressStyle::with_template("{spinner:.cyan} {msg} {elapsed:.dim}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner());
                let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr())
                    .with_style(style)
                    .with_message(self.activity.clone())
                    .with_elapsed(self.since.elapsed());
                bar.enable_steady_tick(TICK);
                self.spinner = Some(bar);
            }
        }
    }

    /// Hides the spinner (before a prompt, at the end of a turn, when text streams).
    pub fn stop_spinner(&mut self) {
        if let Some(bar) = self.spinner.take() {
            bar.finish_and_clear();
        }
    }

    /// Ends the turn's output: no spinner, the cursor at a line start.
    pub fn finish(&mut self) {
        self.stop_spinner();
        self.show(&[Piece::Break]);
        self.echo = None;
    }
}

impl Drop for View {
    fn drop(&mut self) {
        self.stop_spinner();
    }
}
