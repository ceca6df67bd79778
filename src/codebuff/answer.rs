//! The `ask_user` answer lines the daemon writes to a running agent's stdin (`docs/agent-command.md` §4).

use serde_json::{json, Value};

use crate::universal::QuestionSpec;

/// Why answers could not be turned into an answer line.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AnswerError {
    #[error("{given} answer lists for {expected} question(s)")]
    WrongCount { given: usize, expected: usize },
    #[error("question {index} takes one answer, got {given}")]
    TooMany { index: usize, given: usize },
}

/// The `ask_user_answer` line (without newline) for `answers`, one inner list per question.
///
/// A value that matches an option label selects it (`selectedOption` for single-select,
/// `selectedOptions` for multi-select); a single value that matches no label is free text
/// (`otherText`). An empty inner list leaves that question unanswered.
pub fn answer_line(
    tool_call_id: &str,
    questions: &[QuestionSpec],
    answers: &[Vec<String>],
) -> Result<String, AnswerError> {
    if !questions.is_empty() && answers.len() > questions.len() {
        return Err(AnswerError::WrongCount {
            given: answers.len(),
            expected: questions.len(),
        });
    }
    let mut out = Vec::with_capacity(answers.len());
    for (index, values) in answers.iter().enumerate() {
        if values.is_empty() {
            continue;
        }
        let spec = questions.get(index);
        let is_label = |v: &String| spec.is_some_and(|q| q.options.iter().any(|o| &o.label == v));
        let multi = spec.is_some_and(|q| q.multi_select);
        let all_labels = values.iter().all(is_label);
        let entry: Value = if multi && all_labels {
            json!({"questionIndex": index, "selectedOptions": values})
        } else if values.len() == 1 && all_labels {
            json!({"questionIndex": index, "selectedOption": values[0]})
        } else if values.len() == 1 || multi {
            json!({"questionIndex": index, "otherText": values.join(", ")})
        } else {
            return Err(AnswerError::TooMany {
                index,
                given: values.len(),
            });
        };
        out.push(entry);
    }
    Ok(json!({"type": "ask_user_answer", "toolCallId": tool_call_id, "answers": out}).to_string())
}

/// The `ask_user_skip` line (without newline): the user declined to answer.
pub fn skip_line(tool_call_id: &str) -> String {
    json!({"type": "ask_user_skip", "toolCallId": tool_call_id}).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::universal::QuestionOption;

    fn q(multi: bool, labels: &[&str]) -> QuestionSpec {
        QuestionSpec {
            question: "?".into(),
            header: None,
            options: labels
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
    fn labels_select_and_other_values_are_free_text() {
        let qs = [
            q(false, &["vitest", "jest"]),
            q(true, &["unit", "snapshot", "e2e"]),
        ];
        let line = answer_line(
            "call_1",
            &qs,
            &[
                vec!["vitest".into()],
                vec!["unit".into(), "snapshot".into()],
            ],
        )
        .unwrap();
        assert_eq!(
            line,
            r#"{"type":"ask_user_answer","toolCallId":"call_1","answers":[{"questionIndex":0,"selectedOption":"vitest"},{"questionIndex":1,"selectedOptions":["unit","snapshot"]}]}"#
        );
        let line = answer_line("c", &qs, &[vec!["mocha please".into()]]).unwrap();
        assert!(line.contains(r#"{"questionIndex":0,"otherText":"mocha please"}"#));
    }

    #[test]
    fn single_select_refuses_two_labels() {
        let qs = [q(false, &["a", "b"])];
        assert_eq!(
            answer_line("c", &qs, &[vec!["a".into(), "b".into()]]),
            Err(AnswerError::TooMany { index: 0, given: 2 })
        );
        assert!(answer_line("c", &qs, &[vec![], vec![]]).is_err());
    }

    #[test]
    fn skip_line_names_the_call() {
        assert_eq!(
            skip_line("x"),
            r#"{"type":"ask_user_skip","toolCallId":"x"}"#
        );
    }
}
