//! The agent's stderr as reported in `session.ended` for errors: a bounded head and tail.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Lines kept whole when the output is short.
const ALL_LINES: usize = 70;
/// Lines kept from the start when the output is long.
const HEAD_LINES: usize = 20;
/// Lines kept from the end when the output is long.
const TAIL_LINES: usize = 50;
/// Characters kept of each line.
const LINE_CHARS: usize = 500;

/// `stderr` = `{head?, tail?, truncated, total_lines?}`: up to 70 lines all in `head`; beyond,
/// the first 20 in `head` and the last 50 in `tail`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StderrOutput {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub head: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub tail: Option<String>,
    pub truncated: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub total_lines: Option<usize>,
}

/// Lines of [`StderrOutput::last_lines`].
pub const LAST_LINES: usize = 20;

impl StderrOutput {
    /// The last [`LAST_LINES`] lines kept, joined with `\n` (a failed turn's `stderr_tail`).
    pub fn last_lines(&self) -> Option<String> {
        let kept = if self.truncated {
            self.tail.as_deref()
        } else {
            self.head.as_deref()
        }?;
        let lines: Vec<&str> = kept.split('\n').collect();
        let from = lines.len().saturating_sub(LAST_LINES);
        Some(lines[from..].join("\n"))
    }
}

/// Collects stderr lines in bounded memory (at most 120 short lines) while a process runs.
#[derive(Debug, Clone, Default)]
pub struct StderrCollector {
    first: Vec<String>,
    last: VecDeque<String>,
    total: usize,
}

impl StderrCollector {
    /// Records one line (without its terminator); the line is cut at 500 characters.
    pub fn push(&mut self, line: &str) {
        let line = cut_chars(line, LINE_CHARS);
        self.total += 1;
        if self.first.len() < ALL_LINES {
            self.first.push(line.to_owned());
        }
        if self.total > HEAD_LINES {
            if self.last.len() == TAIL_LINES {
                self.last.pop_front();
            }
            self.last.push_back(line.to_owned());
        }
    }

    /// How many lines were pushed.
    pub fn total_lines(&self) -> usize {
        self.total
    }

    /// The report: `None` when nothing was written.
    pub fn output(&self) -> Option<StderrOutput> {
        if self.total == 0 {
            return None;
        }
        if self.total <= ALL_LINES {
            return Some(StderrOutput {
                head: Some(self.first.join("\n")),
                tail: None,
                truncated: false,
                total_lines: Some(self.total),
            });
        }
        let tail: Vec<&str> = self.last.iter().map(String::as_str).collect();
        Some(StderrOutput {
            head: Some(self.first[..HEAD_LINES].join("\n")),
            tail: Some(tail.join("\n")),
            truncated: true,
            total_lines: Some(self.total),
        })
    }
}

fn cut_chars(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_stderr_is_kept_whole_in_head() {
        let mut c = StderrCollector::default();
        for i in 0..70 {
            c.push(&format!("line {i}"));
        }
        let out = c.output().expect("output");
        assert!(!out.truncated);
        assert_eq!(out.total_lines, Some(70));
        assert_eq!(out.head.as_deref().map(|h| h.lines().count()), Some(70));
        assert_eq!(out.tail, None);
    }

    #[test]
    fn long_stderr_keeps_first_20_and_last_50() {
        let mut c = StderrCollector::default();
        for i in 0..1000 {
            c.push(&format!("line {i}"));
        }
        let out = c.output().expect("output");
        assert!(out.truncated);
        assert_eq!(out.total_lines, Some(1000));
        let head = out.head.expect("head");
        let tail = out.tail.expect("tail");
        assert_eq!(head.lines().next(), Some("line 0"));
        assert_eq!(head.lines().last(), Some("line 19"));
        assert_eq!(tail.lines().count(), 50);
        assert_eq!(tail.lines().next(), Some("line 950"));
        assert_eq!(tail.lines().last(), Some("line 999"));
    }

    #[test]
    fn lines_are_cut_at_500_characters() {
        let mut c = StderrCollector::default();
        c.push(&"é".repeat(600));
        let head = c.output().and_then(|o| o.head).expect("head");
        assert_eq!(head.chars().count(), 500);
    }

    #[test]
    fn nothing_written_reports_nothing() {
        assert_eq!(StderrCollector::default().output(), None);
    }
}
