//! What Codebuff's tools mean for universal content: file references from tool inputs and
//! results, failure detection, and `ask_user` questions (`docs/codebuff-events.md` §1.2, `docs/agent-command.md` §4).

use serde_json::Value;

use crate::universal::{ContentPart, FileAction, QuestionOption, QuestionSpec};

/// True for the tools whose input the converter reads (file references, questions).
pub fn reads_input(tool: &str) -> bool {
    matches!(
        tool,
        "write_file" | "str_replace" | "apply_patch" | "read_files" | "ask_user"
    )
}

/// True for the tools whose result the converter reads (diffs, answers).
pub fn reads_result(tool: &str) -> bool {
    matches!(
        tool,
        "write_file" | "str_replace" | "apply_patch" | "ask_user"
    )
}

/// The `file_ref` parts a tool call implies, from its name and input.
pub fn call_file_refs(tool: &str, input: &Value) -> Vec<ContentPart> {
    let path = || input.get("path").and_then(Value::as_str);
    match tool {
        "write_file" => path().map(|p| vec![file_ref(p, FileAction::Write, None)]),
        "str_replace" => path().map(|p| vec![file_ref(p, FileAction::Patch, None)]),
        "apply_patch" => {
            let op = input.get("operation").unwrap_or(input);
            let path = op.get("path").and_then(Value::as_str);
            let diff = op.get("diff").and_then(Value::as_str).map(str::to_owned);
            let action = match op.get("type").and_then(Value::as_str) {
                Some("update_file") => FileAction::Patch,
                _ => FileAction::Write,
            };
            path.map(|p| vec![file_ref(p, action, diff)])
        }
        "read_files" => input.get("paths").and_then(Value::as_array).map(|paths| {
            paths
                .iter()
                .filter_map(|p| p.as_str().or_else(|| p.get("path")?.as_str()))
                .map(|p| file_ref(p, FileAction::Read, None))
                .collect()
        }),
        _ => None,
    }
    .unwrap_or_default()
}

/// The `file_ref` parts with diffs that a tool result reports (`unifiedDiff`), using the call's
/// input for the path when the result does not name the file.
pub fn result_file_refs(
    tool: &str,
    call_input: Option<&Value>,
    output: &Value,
) -> Vec<ContentPart> {
    let action = match tool {
        "write_file" => FileAction::Write,
        "str_replace" | "apply_patch" => FileAction::Patch,
        _ => return Vec::new(),
    };
    let mut refs = Vec::new();
    for value in json_values(output) {
        let Some(diff) = value
            .get("unifiedDiff")
            .or_else(|| value.get("patch"))
            .and_then(Value::as_str)
        else {
            continue;
        };
        let path = value
            .get("file")
            .or_else(|| value.get("path"))
            .and_then(Value::as_str)
            .or_else(|| call_input?.get("path")?.as_str())
            .or_else(|| call_input?.get("operation")?.get("path")?.as_str());
        if let Some(path) = path {
            refs.push(file_ref(path, action, Some(diff.to_owned())));
        }
    }
    refs
}

/// True when a tool result reports a failure (`{"errorMessage": …}` in a json output).
pub fn result_failed(output: &Value) -> bool {
    json_values(output).any(|v| v.get("errorMessage").is_some())
}

/// The `value`s of a `ToolResultOutput[]` that are `{type:"json"}` (or the value itself when the
/// output is not in that shape).
pub fn json_values(output: &Value) -> impl Iterator<Item = &Value> {
    let items: Box<dyn Iterator<Item = &Value>> = match output {
        Value::Array(parts) => {
            Box::new(
                parts
                    .iter()
                    .filter_map(|p| match p.get("type").and_then(Value::as_str) {
                        Some("json") => p.get("value"),
                        Some(_) => None,
                        None => Some(p),
                    }),
            )
        }
        other => Box::new(std::iter::once(other)),
    };
    items
}

/// The questions of an `ask_user` input (`{questions:[{question, header?, options, multiSelect}]}`).
pub fn ask_user_questions(input: &Value) -> Vec<QuestionSpec> {
    let Some(questions) = input.get("questions").and_then(Value::as_array) else {
        return Vec::new();
    };
    questions
        .iter()
        .map(|q| QuestionSpec {
            question: str_field(q, "question").unwrap_or_default(),
            header: str_field(q, "header"),
            options: q
                .get("options")
                .and_then(Value::as_array)
                .map(|opts| opts.iter().map(question_option).collect())
                .unwrap_or_default(),
            multi_select: q
                .get("multiSelect")
                .or_else(|| q.get("multi_select"))
                .and_then(Value::as_bool)
                .unwrap_or(false),
        })
        .collect()
}

fn question_option(option: &Value) -> QuestionOption {
    match option {
        Value::String(label) => QuestionOption {
            label: label.clone(),
            description: None,
        },
        other => QuestionOption {
            label: str_field(other, "label").unwrap_or_default(),
            description: str_field(other, "description"),
        },
    }
}

/// Reads the answers an `ask_user` tool result carries, one list per question; `None` when the
/// user skipped (or the result is an error).
pub fn ask_user_answers(output: &Value, question_count: usize) -> Option<Vec<Vec<String>>> {
    let value = json_values(output).next()?;
    if value.get("skipped").and_then(Value::as_bool) == Some(true)
        || value.get("errorMessage").is_some()
    {
        return None;
    }
    let answers = value.get("answers")?.as_array()?;
    let mut out = vec![Vec::new(); question_count];
    for answer in answers {
        let index = answer
            .get("questionIndex")
            .and_then(Value::as_u64)
            .unwrap_or(0) as usize;
        if index >= out.len() {
            out.resize(index + 1, Vec::new());
        }
        let slot = &mut out[index];
        if let Some(one) = str_field(answer, "selectedOption") {
            slot.push(one);
        }
        if let Some(many) = answer.get("selectedOptions").and_then(Value::as_array) {
            slot.extend(many.iter().filter_map(Value::as_str).map(str::to_owned));
        }
        if let Some(other) = str_field(answer, "otherText") {
            slot.push(other);
        }
    }
    Some(out)
}

fn str_field(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_owned)
}

fn file_ref(path: &str, action: FileAction, diff: Option<String>) -> ContentPart {
    ContentPart::FileRef {
        path: path.to_owned(),
        action,
        diff,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn file_tools_give_file_refs() {
        assert_eq!(
            call_file_refs("write_file", &json!({"path":"a.txt","content":"x"})),
            vec![file_ref("a.txt", FileAction::Write, None)]
        );
        assert_eq!(
            call_file_refs("str_replace", &json!({"path":"b.rs","replacements":[]})),
            vec![file_ref("b.rs", FileAction::Patch, None)]
        );
        assert_eq!(
            call_file_refs(
                "read_files",
                &json!({"paths":["a", {"path":"b","offset":3}]})
            ),
            vec![
                file_ref("a", FileAction::Read, None),
                file_ref("b", FileAction::Read, None)
            ]
        );
        assert_eq!(
            call_file_refs(
                "apply_patch",
                &json!({"operation":{"type":"update_file","path":"c","diff":"@@"}})
            ),
            vec![file_ref("c", FileAction::Patch, Some("@@".into()))]
        );
        assert!(call_file_refs("run_terminal_command", &json!({"command":"ls"})).is_empty());
    }

    #[test]
    fn results_with_diffs_give_file_refs() {
        let out =
            json!([{"type":"json","value":{"file":"a.txt","message":"ok","unifiedDiff":"+x"}}]);
        assert_eq!(
            result_file_refs("write_file", None, &out),
            vec![file_ref("a.txt", FileAction::Write, Some("+x".into()))]
        );
        let out = json!([{"type":"json","value":{"message":"ok"}}]);
        assert!(result_file_refs("write_file", None, &out).is_empty());
    }

    #[test]
    fn error_messages_fail_results() {
        assert!(result_failed(
            &json!([{"type":"json","value":{"errorMessage":"no such file"}}])
        ));
        assert!(!result_failed(
            &json!([{"type":"json","value":{"stdout":"", "exitCode": 1}}])
        ));
    }

    #[test]
    fn ask_user_answers_are_read_per_question() {
        let out = json!([{"type":"json","value":{"answers":[
            {"questionIndex":0,"selectedOption":"vitest"},
            {"questionIndex":1,"selectedOptions":["unit","snapshot"]},
            {"questionIndex":2,"otherText":"later"}
        ]}}]);
        assert_eq!(
            ask_user_answers(&out, 3),
            Some(vec![
                vec!["vitest".to_owned()],
                vec!["unit".to_owned(), "snapshot".to_owned()],
                vec!["later".to_owned()]
            ])
        );
        assert_eq!(
            ask_user_answers(&json!([{"type":"json","value":{"skipped":true}}]), 1),
            None
        );
    }
}
