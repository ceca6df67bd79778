//! The agent's questions (`ask_user`) and permission requests, answered in the terminal: asked
//! inline on a terminal (numbered options, several for a multi-select, free text for another
//! answer; a one-line `approve? [y]es/[a]lways/[n]o`), taken from `--answers` otherwise, or
//! else skipped / rejected with a notice on stderr.
//!
//! Reading the terminal goes through the line editor on `/dev/tty` (never stdout, which carries
//! only data), on a blocking thread; Ctrl-C at a prompt cancels the turn.

use std::path::Path;

use serde_json::Value;

use super::approval::request_lines;
use super::error::ClientError;
use super::format::one_line;
use super::format::Style;
use super::view::View;
use crate::session::PermissionReply;
use crate::universal::{PermissionData, QuestionData, QuestionSpec};

/// Where answers come from.
pub enum Asker {
    /// Someone at the terminal.
    Terminal,
    /// `--answers`.
    Book(AnswerBook),
    /// No one: questions are skipped, requests rejected.
    Nobody,
}

/// What to do about a question.
#[derive(Debug, PartialEq)]
pub enum QuestionReply {
    /// One list of answers per question.
    Answer(Vec<Vec<String>>),
    Skip,
    /// Ctrl-C at the prompt: cancel the turn.
    CancelTurn,
}

/// What to do about a permission request: the engine's reply, or cancel the turn.
#[derive(Debug, PartialEq)]
pub enum PermissionAnswer {
    Reply(PermissionReply),
    CancelTurn,
}

/// `--answers`: a JSON object (or `@FILE` holding one).
#[derive(Debug, Clone, Default)]
pub struct AnswerBook {
    map: serde_json::Map<String, Value>,
}

impl AnswerBook {
    /// Reads `--answers`' value.
    pub fn parse(text: &str) -> Result<AnswerBook, ClientError> {
        let text = match text.strip_prefix('@') {
            Some(path) => std::fs::read_to_string(path).map_err(|e| {
                ClientError::usage(format!("cannot read --answers file {path}: {e}"))
            })?,
            None => text.to_owned(),
        };
        match serde_json::from_str(&text) {
            Ok(Value::Object(map)) => Ok(AnswerBook { map }),
            _ => Err(ClientError::usage(
                "--answers must be a JSON object: {\"<question or header>\": \"answer\" | [\"a\", \"b\"], \"permissions\": \"once\" | \"always\" | \"reject\" | {\"<tool>\": …}}",
            )),
        }
    }

    /// The answers to a question, each of its questions looked up by text, header, the
    /// question's id with `#N` (1-based), or `*`; `None` when one of them has no answer.
    pub fn question(&self, q: &QuestionData) -> Option<Vec<Vec<String>>> {
        let specs = q.specs();
        let mut answers = Vec::new();
        for (i, spec) in specs.iter().enumerate() {
            let keys = [
                Some(spec.question.clone()),
                spec.header.clone(),
                Some(format!("{}#{}", q.question_id, i + 1)),
                (specs.len() == 1).then(|| q.question_id.clone()),
                Some("*".to_owned()),
            ];
            let value = keys.iter().flatten().find_map(|k| self.map.get(k))?;
            answers.push(match value {
                Value::String(s) => vec![s.clone()],
                Value::Array(items) => items
                    .iter()
                    .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
                    .collect(),
                other => vec![other.to_string()],
            });
        }
        Some(answers)
    }

    /// The reply to a permission request of tool `tool`.
    pub fn permission(&self, tool: &str) -> Option<PermissionReply> {
        let value = self.map.get("permissions")?;
        let text = match value {
            Value::String(s) => s.as_str(),
            Value::Object(by_tool) => by_tool.get(tool).or_else(|| by_tool.get("*"))?.as_str()?,
            _ => return None,
        };
        reply_word(text)
    }
}

/// `once` / `always` / `reject` (and `y`, `yes`, `a`, `n`, `no`).
fn reply_word(text: &str) -> Option<PermissionReply> {
    match text.trim().to_ascii_lowercase().as_str() {
        "once" | "y" | "yes" | "allow" => Some(PermissionReply::Once),
        "always" | "a" => Some(PermissionReply::Always),
        "reject" | "n" | "no" | "deny" | "" => Some(PermissionReply::Reject),
        _ => None,
    }
}

/// Reads what the user typed for one option list: numbers pick options (several for a
/// multi-select, separated by spaces or commas), anything else is a free answer; empty is none.
pub fn parse_choice(spec: &QuestionSpec, typed: &str) -> Vec<String> {
    let typed = typed.trim();
    if typed.is_empty() {
        return Vec::new();
    }
    let picks: Option<Vec<usize>> = typed
        .split([',', ' '])
        .filter(|t| !t.is_empty())
        .map(|t| {
            t.parse::<usize>()
                .ok()
                .filter(|n| *n >= 1 && *n <= spec.options.len())
        })
        .collect();
    match picks {
        Some(picks) if spec.multi_select || picks.len() == 1 => {
            let mut labels: Vec<String> = Vec::new();
            for n in picks {
                let label = spec.options[n - 1].label.clone();
                if !labels.contains(&label) {
                    labels.push(label);
                }
            }
            labels
        }
        _ => vec![typed.to_owned()],
    }
}

/// Reads one line from the terminal; `None` for Ctrl-C, `Some("")` for Ctrl-D.
async fn read_line(prompt: String) -> Result<Option<String>, ClientError> {
    let read = tokio::task::spawn_blocking(move || {
        let config = rustyline::Config::builder()
            .behavior(rustyline::config::Behavior::PreferTerm)
            .auto_add_history(false)
            .build();
        let mut editor = rustyline::DefaultEditor::with_config(config)?;
        editor.readline(&prompt)
    })
    .await
    .map_err(|e| ClientError::failed(e.to_string()))?;
    match read {
        Ok(line) => Ok(Some(line)),
        Err(rustyline::error::ReadlineError::Interrupted) => Ok(None),
        Err(rustyline::error::ReadlineError::Eof) => Ok(Some(String::new())),
        Err(e) => Err(ClientError::failed(format!(
            "cannot read the terminal: {e}"
        ))),
    }
}

impl Asker {
    /// Gets the answers to `q`.
    pub async fn question(
        &self,
        q: &QuestionData,
        view: &mut View,
    ) -> Result<QuestionReply, ClientError> {
        match self {
            Asker::Book(book) => Ok(match book.question(q) {
                Some(answers) => QuestionReply::Answer(answers),
                None => {
                    view.notice(
                        Style::Warn,
                        &format!(
                            "codebuffd: --answers has no answer for “{}”: question skipped",
                            one_line(&q.prompt, 80)
                        ),
                    );
                    QuestionReply::Skip
                }
            }),
            Asker::Nobody => {
                view.notice(
                    Style::Warn,
                    &format!(
                        "codebuffd: the agent asks “{}” but no one is at a terminal (pass --answers): question skipped",
                        one_line(&q.prompt, 80)
                    ),
                );
                Ok(QuestionReply::Skip)
            }
            Asker::Terminal => {
                view.stop_spinner();
                let mut answers = Vec::new();
                for spec in q.specs() {
                    let head = spec
                        .header
                        .as_deref()
                        .map(|h| format!("{h}: "))
                        .unwrap_or_default();
                    view.notice(Style::Bold, &format!("? {head}{}", spec.question));
                    for (i, option) in spec.options.iter().enumerate() {
                        let description = option
                            .description
                            .as_deref()
                            .map(|d| format!(" — {d}"))
                            .unwrap_or_default();
                        view.notice(
                            Style::Plain,
                            &format!("  {}. {}{description}", i + 1, option.label),
                        );
                    }
                    let hint = if spec.multi_select {
                        "numbers (e.g. 1,3), or your own answer; empty to skip"
                    } else if spec.options.is_empty() {
                        "your answer; empty to skip"
                    } else {
                        "a number, or your own answer; empty to skip"
                    };
                    view.notice(Style::Dim, &format!("  ({hint})"));
                    let Some(typed) = read_line("  › ".to_owned()).await? else {
                        return Ok(QuestionReply::CancelTurn);
                    };
                    answers.push(parse_choice(&spec, &typed));
                }
                if answers.iter().all(Vec::is_empty) {
                    return Ok(QuestionReply::Skip);
                }
                Ok(QuestionReply::Answer(answers))
            }
        }
    }

    /// Gets the reply to a permission request of a session whose agent works in `dir` (where
    /// the files it wants to change are read, to show the change as a diff).
    pub async fn permission(
        &self,
        p: &PermissionData,
        view: &mut View,
        dir: &Path,
    ) -> Result<PermissionAnswer, ClientError> {
        let meta = p.metadata.clone().unwrap_or(Value::Null);
        let tool = meta["toolName"]
            .as_str()
            .unwrap_or(p.action.as_str())
            .to_owned();
        let what = meta["command"]
            .as_str()
            .map(|c| format!("$ {c}"))
            .or_else(|| meta["title"].as_str().map(str::to_owned))
            .unwrap_or_else(|| tool.clone());
        match self {
            Asker::Book(book) => Ok(PermissionAnswer::Reply(match book.permission(&tool) {
                Some(reply) => reply,
                None => {
                    view.notice(
                        Style::Warn,
                        &format!("codebuffd: --answers has no permission reply for {tool}: rejected ({what})"),
                    );
                    PermissionReply::Reject
                }
            })),
            Asker::Nobody => {
                view.notice(
                    Style::Warn,
                    &format!(
                        "codebuffd: {tool} asks permission but no one is at a terminal (pass --answers): rejected ({what})"
                    ),
                );
                Ok(PermissionAnswer::Reply(PermissionReply::Reject))
            }
            Asker::Terminal => {
                view.stop_spinner();
                // A command is shown whole (what `always` would allow too), a change as its
                // diff: the user approves exactly what they saw.
                let current = |path: &str| current_text(dir, path);
                for (style, line) in request_lines(&tool, &meta, &current) {
                    view.notice(style, &line);
                }
                if meta["command"].is_string() {
                    let always = match meta["alwaysPrefix"].as_str() {
                        Some(prefix) => format!("  [a]lways allows `{prefix} …` commands"),
                        None => "  [a]lways allows this exact command line only".to_owned(),
                    };
                    view.notice(Style::Dim, &always);
                }
                loop {
                    let Some(typed) =
                        read_line("  approve? [y]es/[a]lways/[n]o › ".to_owned()).await?
                    else {
                        return Ok(PermissionAnswer::CancelTurn);
                    };
                    match reply_word(&typed) {
                        Some(reply) => return Ok(PermissionAnswer::Reply(reply)),
                        None => view.notice(Style::Dim, "  (y, a or n)"),
                    }
                }
            }
        }
    }
}

/// The text of the file at `path` (relative to `dir`) as it is now; `None` when it does not
/// exist or cannot be read (a daemon on another machine), or is too large to diff.
fn current_text(dir: &Path, path: &str) -> Option<String> {
    const MAX: u64 = 1024 * 1024;
    let file = dir.join(path);
    if std::fs::metadata(&file).ok()?.len() > MAX {
        return None;
    }
    std::fs::read_to_string(file).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::universal::QuestionOption;

    fn spec(multi: bool) -> QuestionSpec {
        QuestionSpec {
            question: "Which?".into(),
            header: Some("Kinds".into()),
            options: ["unit", "snapshot", "e2e"]
                .iter()
                .map(|l| QuestionOption {
                    label: (*l).into(),
                    description: None,
                })
                .collect(),
            multi_select: multi,
        }
    }

    #[test]
    fn numbers_pick_options_and_text_is_free() {
        assert_eq!(parse_choice(&spec(false), "2"), ["snapshot"]);
        assert_eq!(parse_choice(&spec(true), "1, 3"), ["unit", "e2e"]);
        assert_eq!(parse_choice(&spec(true), "1 3 1"), ["unit", "e2e"]);
        // Several numbers for a single choice, or out of range: taken as typed.
        assert_eq!(parse_choice(&spec(false), "1 3"), ["1 3"]);
        assert_eq!(parse_choice(&spec(false), "9"), ["9"]);
        assert_eq!(parse_choice(&spec(false), "mocha"), ["mocha"]);
        assert!(parse_choice(&spec(false), "  ").is_empty());
    }

    #[test]
    fn the_answer_book_finds_questions_by_text_or_header() {
        let book = AnswerBook::parse(
            r#"{"Which test framework?": "vitest", "Kinds": ["unit", "e2e"], "permissions": {"write_file": "once", "*": "reject"}}"#,
        )
        .unwrap();
        let q = QuestionData {
            question_id: "q1".into(),
            prompt: "Which test framework?".into(),
            options: vec![],
            response: None,
            status: crate::universal::QuestionStatus::Requested,
            questions: vec![
                QuestionSpec {
                    question: "Which test framework?".into(),
                    header: Some("Tests".into()),
                    options: vec![],
                    multi_select: false,
                },
                spec(true),
            ],
            answers: None,
        };
        assert_eq!(
            book.question(&q),
            Some(vec![
                vec!["vitest".to_owned()],
                vec!["unit".to_owned(), "e2e".to_owned()]
            ])
        );
        assert_eq!(book.permission("write_file"), Some(PermissionReply::Once));
        assert_eq!(
            book.permission("run_terminal_command"),
            Some(PermissionReply::Reject)
        );
        assert!(AnswerBook::parse("[1]").is_err());
        let empty = AnswerBook::parse("{}").unwrap();
        assert_eq!(empty.question(&q), None);
        assert_eq!(empty.permission("write_file"), None);
    }
}
