//! Codebuff's `ask_user` questions as ACP client requests, and the client's answers as the
//! session's answers (one list of values per question). Pure.
//!
//! With a client that presents forms (`clientCapabilities.elicitation.form`), the questions are
//! one `elicitation/create` form scoped to the session and the `ask_user` tool call: per
//! question `qN` (N from 1) a single-choice string (`oneOf` its options) or a multi-choice array,
//! plus `qN_other`, free text that replaces the choice (Codebuff accepts a free answer to every
//! question). `accept` answers, `decline` and `cancel` skip the questions.
//!
//! Without forms, a `session/request_permission` offers the first question's options (`allow_once`
//! each) and "Skip" (`reject_once`): choosing an option answers the first question, the others
//! stay unanswered.

use std::collections::BTreeMap;

use agent_client_protocol::v1::schema::{
    CreateElicitationRequest, ElicitationAction, ElicitationContentValue, ElicitationFormMode,
    ElicitationSchema, ElicitationSessionScope, EnumOption, MultiSelectPropertySchema,
    PermissionOption, PermissionOptionKind, RequestPermissionOutcome, RequestPermissionRequest,
    SessionId, StringPropertySchema, ToolCallId, ToolCallUpdate, ToolCallUpdateFields, ToolKind,
};

use crate::universal::{QuestionData, QuestionSpec};

/// The option id of "Skip" in the fallback permission request.
const SKIP: &str = "skip";

/// How the client answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// One list of values per question (empty: unanswered).
    Answers(Vec<Vec<String>>),
    /// The user declined to answer.
    Skip,
}

/// The property of question `index` (0-based).
fn property(index: usize) -> String {
    format!("q{}", index + 1)
}

fn other_property(index: usize) -> String {
    format!("q{}_other", index + 1)
}

/// The message shown above the form: the question, or every question on its own line.
fn message(specs: &[QuestionSpec]) -> String {
    match specs {
        [one] => one.question.clone(),
        many => many
            .iter()
            .map(|q| format!("- {}", q.question))
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

/// The `elicitation/create` form for a question.
pub fn elicitation(
    session_id: &str,
    tool_call_id: Option<&str>,
    q: &QuestionData,
) -> CreateElicitationRequest {
    let specs = q.specs();
    let mut schema = ElicitationSchema::new();
    for (i, spec) in specs.iter().enumerate() {
        let title = spec.header.clone().unwrap_or_else(|| spec.question.clone());
        let options: Vec<EnumOption> = spec
            .options
            .iter()
            .map(|o| {
                EnumOption::new(o.label.clone(), o.label.clone()).description(o.description.clone())
            })
            .collect();
        if options.is_empty() {
            schema = schema.property(
                property(i),
                StringPropertySchema::new()
                    .title(title)
                    .description(spec.question.clone()),
                false,
            );
            continue;
        }
        schema = if spec.multi_select {
            schema.property(
                property(i),
                MultiSelectPropertySchema::titled(options)
                    .title(title)
                    .description(spec.question.clone()),
                false,
            )
        } else {
            schema.property(
                property(i),
                StringPropertySchema::new()
                    .title(title)
                    .description(spec.question.clone())
                    .one_of(options),
                false,
            )
        };
        schema = schema.property(
            other_property(i),
            StringPropertySchema::new()
                .title(format!(
                    "Other answer ({})",
                    spec.header.as_deref().unwrap_or("free text")
                ))
                .description("Instead of the choices above".to_owned()),
            false,
        );
    }
    let mut scope = ElicitationSessionScope::new(SessionId::new(session_id));
    if let Some(id) = tool_call_id {
        scope = scope.tool_call_id(ToolCallId::new(id));
    }
    CreateElicitationRequest::new(ElicitationFormMode::new(scope, schema), message(&specs))
}

/// The answers an `elicitation/create` response gives.
pub fn elicitation_answer(q: &QuestionData, action: &ElicitationAction) -> Answer {
    let ElicitationAction::Accept(accept) = action else {
        return Answer::Skip;
    };
    let empty = BTreeMap::new();
    let content = accept.content.as_ref().unwrap_or(&empty);
    let text = |v: Option<&ElicitationContentValue>| -> Vec<String> {
        match v {
            Some(ElicitationContentValue::String(s)) if !s.trim().is_empty() => vec![s.clone()],
            Some(ElicitationContentValue::StringArray(a)) => {
                a.iter().filter(|s| !s.is_empty()).cloned().collect()
            }
            Some(ElicitationContentValue::Integer(n)) => vec![n.to_string()],
            Some(ElicitationContentValue::Number(n)) => vec![n.to_string()],
            Some(ElicitationContentValue::Boolean(b)) => vec![b.to_string()],
            _ => Vec::new(),
        }
    };
    let answers: Vec<Vec<String>> = (0..q.specs().len())
        .map(|i| {
            let other = text(content.get(&other_property(i)));
            if other.is_empty() {
                text(content.get(&property(i)))
            } else {
                other
            }
        })
        .collect();
    if answers.iter().all(Vec::is_empty) {
        return Answer::Skip;
    }
    Answer::Answers(answers)
}

/// The fallback for clients without forms: a permission request whose options are the first
/// question's choices, and "Skip".
pub fn permission_fallback(
    session_id: &str,
    tool_call_id: Option<&str>,
    q: &QuestionData,
) -> RequestPermissionRequest {
    let specs = q.specs();
    let first = specs.first();
    let mut options: Vec<PermissionOption> = first
        .map(|s| {
            s.options
                .iter()
                .enumerate()
                .map(|(i, o)| {
                    PermissionOption::new(
                        format!("option-{i}"),
                        o.label.clone(),
                        PermissionOptionKind::AllowOnce,
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    options.push(PermissionOption::new(
        SKIP,
        "Skip",
        PermissionOptionKind::RejectOnce,
    ));
    let id = tool_call_id.map_or_else(|| format!("question-{}", q.question_id), str::to_owned);
    let fields = ToolCallUpdateFields::new()
        .title(message(&specs))
        .kind(ToolKind::Other);
    RequestPermissionRequest::new(
        SessionId::new(session_id),
        ToolCallUpdate::new(id, fields),
        options,
    )
}

/// The answers a fallback permission response gives.
pub fn permission_answer(q: &QuestionData, outcome: &RequestPermissionOutcome) -> Answer {
    let RequestPermissionOutcome::Selected(selected) = outcome else {
        return Answer::Skip;
    };
    let specs = q.specs();
    let chosen = selected
        .option_id
        .to_string()
        .strip_prefix("option-")
        .and_then(|i| i.parse::<usize>().ok())
        .and_then(|i| specs.first()?.options.get(i))
        .map(|o| o.label.clone());
    match chosen {
        Some(label) => {
            let mut answers = vec![Vec::new(); specs.len()];
            answers[0] = vec![label];
            Answer::Answers(answers)
        }
        None => Answer::Skip,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::universal::{QuestionOption, QuestionStatus};
    use agent_client_protocol::v1::schema::{ElicitationAcceptAction, SelectedPermissionOutcome};
    use serde_json::json;

    fn data() -> QuestionData {
        let opt = |l: &str, d: Option<&str>| QuestionOption {
            label: l.into(),
            description: d.map(Into::into),
        };
        QuestionData {
            question_id: "ask-1".into(),
            prompt: "Which test framework?".into(),
            options: vec!["vitest".into(), "jest".into()],
            response: None,
            status: QuestionStatus::Requested,
            questions: vec![
                QuestionSpec {
                    question: "Which test framework?".into(),
                    header: Some("Tests".into()),
                    options: vec![opt("vitest", Some("Fast")), opt("jest", None)],
                    multi_select: false,
                },
                QuestionSpec {
                    question: "Which kinds of tests?".into(),
                    header: Some("Kinds".into()),
                    options: vec![opt("unit", None), opt("e2e", None)],
                    multi_select: true,
                },
            ],
            answers: None,
        }
    }

    #[test]
    fn the_form_has_a_choice_and_a_free_answer_per_question() {
        let req = elicitation("s1", Some("itm_4"), &data());
        let json = serde_json::to_value(&req).unwrap();
        assert_eq!(json["mode"], "form");
        assert_eq!(json["sessionId"], "s1");
        assert_eq!(json["toolCallId"], "itm_4");
        assert_eq!(
            json["message"],
            "- Which test framework?\n- Which kinds of tests?"
        );
        let props = &json["requestedSchema"]["properties"];
        assert_eq!(props["q1"]["type"], "string");
        assert_eq!(props["q1"]["title"], "Tests");
        assert_eq!(
            props["q1"]["oneOf"],
            json!([{"const":"vitest","title":"vitest","description":"Fast"},{"const":"jest","title":"jest"}])
        );
        assert_eq!(props["q2"]["type"], "array");
        assert_eq!(props["q1_other"]["type"], "string");
        assert_eq!(props["q2_other"]["type"], "string");
        assert!(json["requestedSchema"].get("required").is_none());
    }

    #[test]
    fn accepted_forms_answer_and_free_text_wins() {
        let q = data();
        let mut content = BTreeMap::new();
        content.insert("q1".to_owned(), ElicitationContentValue::from("jest"));
        content.insert(
            "q1_other".to_owned(),
            ElicitationContentValue::from("bun test"),
        );
        content.insert(
            "q2".to_owned(),
            ElicitationContentValue::StringArray(vec!["unit".into(), "e2e".into()]),
        );
        let mut accept = ElicitationAcceptAction::new();
        accept.content = Some(content);
        assert_eq!(
            elicitation_answer(&q, &ElicitationAction::Accept(accept)),
            Answer::Answers(vec![
                vec!["bun test".into()],
                vec!["unit".into(), "e2e".into()]
            ])
        );
        assert_eq!(
            elicitation_answer(&q, &ElicitationAction::Decline),
            Answer::Skip
        );
        assert_eq!(
            elicitation_answer(&q, &ElicitationAction::Cancel),
            Answer::Skip
        );
        assert_eq!(
            elicitation_answer(
                &q,
                &ElicitationAction::Accept(ElicitationAcceptAction::new())
            ),
            Answer::Skip
        );
    }

    #[test]
    fn without_forms_the_first_question_s_options_are_permission_options() {
        let q = data();
        let req = permission_fallback("s1", Some("itm_4"), &q);
        let json = serde_json::to_value(&req).unwrap();
        assert_eq!(json["toolCall"]["toolCallId"], "itm_4");
        let kinds: Vec<(&str, &str)> = json["options"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| (o["name"].as_str().unwrap(), o["kind"].as_str().unwrap()))
            .collect();
        assert_eq!(
            kinds,
            [
                ("vitest", "allow_once"),
                ("jest", "allow_once"),
                ("Skip", "reject_once")
            ]
        );
        let pick = RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new("option-1"));
        assert_eq!(
            permission_answer(&q, &pick),
            Answer::Answers(vec![vec!["jest".into()], vec![]])
        );
        let skip = RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(SKIP));
        assert_eq!(permission_answer(&q, &skip), Answer::Skip);
        assert_eq!(
            permission_answer(&q, &RequestPermissionOutcome::Cancelled),
            Answer::Skip
        );
    }
}
