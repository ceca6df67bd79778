//! The mock agent's side of the `ask_user` relay (`docs/agent-command.md` §4): waiting for the
//! daemon's answer line on stdin, turning it into the tool's result, and saying it back.
//!
//! Lines for another tool call and lines that do not parse are ignored (with a note on stderr);
//! end of input and the question timeout count as a skip.

use std::time::{Duration, Instant};

use super::stdin;

use serde_json::{json, Map, Value};

/// Default question timeout, as in the real adapter.
const DEFAULT_TIMEOUT_SECONDS: f64 = 600.0;

/// What the user did with the question.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Reply {
    /// One normalised answer object per answered question.
    Answered(Vec<Value>),
    /// Declined, timed out, or stdin closed.
    Skipped,
}

impl Reply {
    /// The `ask_user` tool result value: `{answers:[…]}` or `{skipped:true}`.
    pub(super) fn result_value(&self) -> Value {
        match self {
            Reply::Answered(answers) => json!({"answers": answers}),
            Reply::Skipped => json!({"skipped": true}),
        }
    }

    /// The agent's reply repeating the answer in words, e.g. `You chose: vitest; unit, snapshot`.
    pub(super) fn describe(&self) -> String {
        let answers = match self {
            Reply::Skipped => return "You skipped the question.".to_owned(),
            Reply::Answered(answers) if answers.is_empty() => {
                return "You chose nothing.".to_owned()
            }
            Reply::Answered(answers) => answers,
        };
        let parts: Vec<String> = answers
            .iter()
            .map(|a| {
                if let Some(label) = a.get("selectedOption").and_then(Value::as_str) {
                    label.to_owned()
                } else if let Some(labels) = a.get("selectedOptions").and_then(Value::as_array) {
                    let labels: Vec<&str> = labels.iter().filter_map(Value::as_str).collect();
                    if labels.is_empty() {
                        "nothing".to_owned()
                    } else {
                        labels.join(", ")
                    }
                } else {
                    a.get("otherText")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned()
                }
            })
            .collect();
        format!("You chose: {}", parts.join("; "))
    }
}

/// The question timeout from `CODEBUFF_QUESTION_TIMEOUT_SECONDS` (default 600 s; invalid or
/// non-positive values fall back to the default).
pub(super) fn question_timeout(raw: Option<&str>) -> Option<Duration> {
    let seconds = raw
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .unwrap_or(DEFAULT_TIMEOUT_SECONDS);
    Duration::try_from_secs_f64(seconds).ok()
}

/// Reads the reply to `tool_call_id` from stdin, waiting at most `timeout` (`None`: forever).
pub(super) fn wait_for_reply(tool_call_id: &str, timeout: Option<Duration>) -> Reply {
    let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
    loop {
        match stdin::next_line(deadline) {
            stdin::Next::Line(line) => {
                match parse_reply_line(&String::from_utf8_lossy(&line), tool_call_id) {
                    Ok(reply) => return reply,
                    Err(why) => eprintln!("mock-agent: ignoring stdin line: {why}"),
                }
            }
            stdin::Next::TimedOut => {
                eprintln!("mock-agent: question {tool_call_id} timed out; skipping");
                return Reply::Skipped;
            }
            stdin::Next::Closed => {
                eprintln!("mock-agent: stdin closed before an answer; skipping");
                return Reply::Skipped;
            }
        }
    }
}

/// Interprets one stdin line as the reply to `tool_call_id`; `Err` says why it is ignored.
pub(super) fn parse_reply_line(line: &str, tool_call_id: &str) -> Result<Reply, String> {
    let v: Value = serde_json::from_str(line.trim()).map_err(|e| format!("not JSON ({e})"))?;
    let id = v.get("toolCallId").and_then(Value::as_str);
    let kind = v.get("type").and_then(Value::as_str);
    if id != Some(tool_call_id) {
        return Err(format!("for another tool call ({id:?})"));
    }
    match kind {
        Some("ask_user_skip") => Ok(Reply::Skipped),
        Some("ask_user_answer") => {
            let answers = v
                .get("answers")
                .and_then(Value::as_array)
                .ok_or("answer line without an `answers` array")?;
            answers
                .iter()
                .map(normalise_answer)
                .collect::<Result<_, _>>()
                .map(Reply::Answered)
        }
        other => Err(format!("unexpected type {other:?}")),
    }
}

/// `{questionIndex, selectedOption | selectedOptions | otherText}`, keeping only those keys.
fn normalise_answer(answer: &Value) -> Result<Value, String> {
    let index = answer
        .get("questionIndex")
        .and_then(Value::as_u64)
        .ok_or_else(|| format!("answer without a questionIndex: {answer}"))?;
    let mut out = Map::new();
    out.insert("questionIndex".into(), index.into());
    if let Some(label) = answer.get("selectedOption").and_then(Value::as_str) {
        out.insert("selectedOption".into(), label.into());
    } else if let Some(labels) = answer.get("selectedOptions").and_then(Value::as_array) {
        if !labels.iter().all(Value::is_string) {
            return Err(format!("selectedOptions must be strings: {answer}"));
        }
        out.insert("selectedOptions".into(), Value::Array(labels.clone()));
    } else if let Some(text) = answer.get("otherText").and_then(Value::as_str) {
        out.insert("otherText".into(), text.into());
    } else {
        return Err(format!("answer selects nothing: {answer}"));
    }
    Ok(Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codebuff::{answer_line, skip_line};
    use crate::universal::{QuestionOption, QuestionSpec};

    const ANSWER: &str = r#"{"type":"ask_user_answer","toolCallId":"ask-1","answers":[{"questionIndex":0,"selectedOption":"vitest"},{"questionIndex":1,"selectedOptions":["unit","snapshot"]}]}"#;

    #[test]
    fn answer_line_becomes_the_answers_result_and_is_said_back() {
        let reply = parse_reply_line(ANSWER, "ask-1").unwrap();
        assert_eq!(
            reply.result_value(),
            json!({"answers": [
                {"questionIndex": 0, "selectedOption": "vitest"},
                {"questionIndex": 1, "selectedOptions": ["unit", "snapshot"]},
            ]})
        );
        assert_eq!(reply.describe(), "You chose: vitest; unit, snapshot");
    }

    #[test]
    fn skip_line_becomes_skipped() {
        let reply =
            parse_reply_line(r#"{"type":"ask_user_skip","toolCallId":"ask-1"}"#, "ask-1").unwrap();
        assert_eq!(reply, Reply::Skipped);
        assert_eq!(reply.result_value(), json!({"skipped": true}));
        assert_eq!(reply.describe(), "You skipped the question.");
    }

    #[test]
    fn free_text_answers_are_kept_and_said_back() {
        let line = r#"{"type":"ask_user_answer","toolCallId":"a","answers":[{"questionIndex":0,"otherText":"bun","extra":1}]}"#;
        let reply = parse_reply_line(line, "a").unwrap();
        assert_eq!(
            reply.result_value(),
            json!({"answers": [{"questionIndex": 0, "otherText": "bun"}]})
        );
        assert_eq!(reply.describe(), "You chose: bun");
    }

    #[test]
    fn other_tool_calls_and_malformed_lines_are_ignored() {
        for line in [
            "not json",
            "{broken",
            r#"{"type":"ask_user_skip","toolCallId":"other"}"#,
            r#"{"type":"ask_user_answer","toolCallId":"ask-1"}"#,
            r#"{"type":"ask_user_answer","toolCallId":"ask-1","answers":[{"selectedOption":"x"}]}"#,
            r#"{"type":"ask_user_answer","toolCallId":"ask-1","answers":[{"questionIndex":0}]}"#,
            r#"{"type":"something","toolCallId":"ask-1"}"#,
        ] {
            assert!(parse_reply_line(line, "ask-1").is_err(), "{line}");
        }
    }

    #[test]
    fn the_daemons_answer_and_skip_lines_are_understood() {
        let questions = vec![
            QuestionSpec {
                question: "Which test framework?".into(),
                header: None,
                options: ["vitest", "jest"]
                    .map(|l| QuestionOption {
                        label: l.into(),
                        description: None,
                    })
                    .to_vec(),
                multi_select: false,
            },
            QuestionSpec {
                question: "Which kinds of tests?".into(),
                header: None,
                options: ["unit", "snapshot", "e2e"]
                    .map(|l| QuestionOption {
                        label: l.into(),
                        description: None,
                    })
                    .to_vec(),
                multi_select: true,
            },
        ];
        let answers = vec![
            vec!["vitest".to_owned()],
            vec!["unit".to_owned(), "snapshot".to_owned()],
        ];
        let line = answer_line("ask-1", &questions, &answers).unwrap();
        assert_eq!(
            parse_reply_line(&line, "ask-1").unwrap(),
            parse_reply_line(ANSWER, "ask-1").unwrap()
        );
        assert_eq!(
            parse_reply_line(&skip_line("ask-1"), "ask-1").unwrap(),
            Reply::Skipped
        );
    }

    #[test]
    fn question_timeout_defaults_to_ten_minutes() {
        assert_eq!(question_timeout(None), Some(Duration::from_secs(600)));
        assert_eq!(
            question_timeout(Some("0.5")),
            Some(Duration::from_millis(500))
        );
        for bad in ["", "abc", "-1", "0", "inf", "NaN"] {
            assert_eq!(
                question_timeout(Some(bad)),
                Some(Duration::from_secs(600)),
                "{bad}"
            );
        }
    }
}
