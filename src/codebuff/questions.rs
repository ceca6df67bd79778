//! The question book of one session: the `ask_user` questions its agent asked and whether each
//! is still open, so every `question.requested` gets exactly one `question.resolved`
//! (`docs/universal-events.md` §3 rule 7) and an answer reaches only a question that waits.

use std::collections::{HashMap, HashSet};

use super::answer::{answer_line, skip_line, AnswerError};
use crate::universal::{EventData, EventDraft, QuestionData, QuestionStatus};

/// Why a question could not be resolved.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum QuestionError {
    #[error("unknown question id `{0}`")]
    Unknown(String),
    #[error("question `{0}` is already resolved")]
    AlreadyResolved(String),
    #[error("invalid answers: {0}")]
    InvalidAnswers(#[from] AnswerError),
}

/// The session's questions: open ones by id, and the ids of resolved ones.
#[derive(Debug, Default)]
pub(crate) struct QuestionBook {
    open: HashMap<String, QuestionData>,
    resolved: HashSet<String>,
}

impl QuestionBook {
    /// The book of a session restored from its log.
    pub(crate) fn restored(open: Vec<QuestionData>, resolved: HashSet<String>) -> Self {
        QuestionBook {
            open: open
                .into_iter()
                .map(|q| (q.question_id.clone(), q))
                .collect(),
            resolved,
        }
    }

    /// Notes a question the agent just asked.
    pub(crate) fn ask(&mut self, question: QuestionData) {
        self.open.insert(question.question_id.clone(), question);
    }

    /// True while some question waits for an answer.
    pub(crate) fn has_open(&self) -> bool {
        !self.open.is_empty()
    }

    /// How many are open.
    pub(crate) fn open_count(&self) -> usize {
        self.open.len()
    }

    /// The open question with this id.
    pub(crate) fn open(&self, question_id: &str) -> Option<&QuestionData> {
        self.open.get(question_id)
    }

    /// The ids of the open questions, sorted.
    pub(crate) fn open_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.open.keys().cloned().collect();
        ids.sort();
        ids
    }

    /// Resolves an open question with the user's answers (one list per question): the
    /// `question.resolved` draft and the line for the agent's stdin.
    pub(crate) fn answer(
        &mut self,
        question_id: &str,
        answers: Vec<Vec<String>>,
    ) -> Result<(EventDraft, String), QuestionError> {
        let question = self.waiting(question_id)?;
        let line = answer_line(question_id, &question.questions, &answers)?;
        Ok((self.close(question_id, Some(answers)), line))
    }

    /// Resolves an open question as declined: the draft and the skip line.
    pub(crate) fn reject(
        &mut self,
        question_id: &str,
    ) -> Result<(EventDraft, String), QuestionError> {
        self.waiting(question_id)?;
        Ok((self.close(question_id, None), skip_line(question_id)))
    }

    /// Resolves an open question from what the agent reported (its `ask_user` result), if it
    /// is still open: answered with `answers`, or rejected without.
    pub(crate) fn settle(
        &mut self,
        question_id: &str,
        answers: Option<Vec<Vec<String>>>,
    ) -> Option<EventDraft> {
        self.open
            .contains_key(question_id)
            .then(|| self.close(question_id, answers))
    }

    fn waiting(&self, question_id: &str) -> Result<&QuestionData, QuestionError> {
        match self.open.get(question_id) {
            Some(q) => Ok(q),
            None if self.resolved.contains(question_id) => {
                Err(QuestionError::AlreadyResolved(question_id.to_owned()))
            }
            None => Err(QuestionError::Unknown(question_id.to_owned())),
        }
    }

    /// Closes an open question (the caller checked it is open).
    fn close(&mut self, question_id: &str, answers: Option<Vec<Vec<String>>>) -> EventDraft {
        let mut data = self
            .open
            .remove(question_id)
            .unwrap_or_else(|| QuestionData {
                question_id: question_id.to_owned(),
                prompt: String::new(),
                options: Vec::new(),
                response: None,
                status: QuestionStatus::Requested,
                questions: Vec::new(),
                answers: None,
            });
        self.resolved.insert(question_id.to_owned());
        data.status = match answers {
            Some(_) => QuestionStatus::Answered,
            None => QuestionStatus::Rejected,
        };
        data.response = answers
            .as_ref()
            .and_then(|a| a.first())
            .map(|first| first.join(", "));
        data.answers = answers;
        EventDraft::synthetic(EventData::QuestionResolved(Box::new(data)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::universal::{QuestionOption, QuestionSpec};

    fn question(id: &str) -> QuestionData {
        QuestionData {
            question_id: id.into(),
            prompt: "Which runner?".into(),
            options: vec!["vitest".into(), "jest".into()],
            response: None,
            status: QuestionStatus::Requested,
            questions: vec![QuestionSpec {
                question: "Which runner?".into(),
                header: None,
                options: ["vitest", "jest"]
                    .iter()
                    .map(|l| QuestionOption {
                        label: (*l).into(),
                        description: None,
                    })
                    .collect(),
                multi_select: false,
            }],
            answers: None,
        }
    }

    fn resolved(draft: &EventDraft) -> &QuestionData {
        match &draft.data {
            EventData::QuestionResolved(q) => q,
            other => panic!("expected question.resolved, got {other:?}"),
        }
    }

    #[test]
    fn an_answer_resolves_the_question_once_and_gives_the_stdin_line() {
        let mut book = QuestionBook::default();
        book.ask(question("q1"));
        assert!(book.has_open());
        let (draft, line) = book.answer("q1", vec![vec!["vitest".into()]]).unwrap();
        let q = resolved(&draft);
        assert_eq!(q.status, QuestionStatus::Answered);
        assert_eq!(q.response.as_deref(), Some("vitest"));
        assert!(line.contains("\"selectedOption\":\"vitest\""), "{line}");
        assert!(!book.has_open());
        assert_eq!(
            book.answer("q1", vec![vec!["jest".into()]]),
            Err(QuestionError::AlreadyResolved("q1".into()))
        );
    }

    #[test]
    fn unknown_ids_and_bad_answers_are_refused_and_leave_the_question_open() {
        let mut book = QuestionBook::default();
        book.ask(question("q1"));
        assert_eq!(
            book.reject("nope"),
            Err(QuestionError::Unknown("nope".into()))
        );
        assert!(matches!(
            book.answer("q1", vec![vec!["a".into()], vec!["b".into()]]),
            Err(QuestionError::InvalidAnswers(_))
        ));
        assert!(book.open("q1").is_some());
    }

    #[test]
    fn a_rejection_gives_the_skip_line() {
        let mut book = QuestionBook::default();
        book.ask(question("q1"));
        let (draft, line) = book.reject("q1").unwrap();
        assert_eq!(resolved(&draft).status, QuestionStatus::Rejected);
        assert!(line.contains("ask_user_skip"), "{line}");
    }

    #[test]
    fn settling_from_the_agents_result_touches_only_open_questions() {
        let mut book = QuestionBook::default();
        book.ask(question("q1"));
        let draft = book.settle("q1", Some(vec![vec!["jest".into()]])).unwrap();
        assert_eq!(
            resolved(&draft).answers,
            Some(vec![vec!["jest".to_owned()]])
        );
        assert!(book.settle("q1", None).is_none());
    }

    #[test]
    fn a_restored_book_knows_open_and_resolved_questions() {
        let resolved_ids = HashSet::from(["q0".to_owned()]);
        let mut book = QuestionBook::restored(vec![question("q2"), question("q1")], resolved_ids);
        assert_eq!(book.open_ids(), vec!["q1", "q2"]);
        assert_eq!(
            book.reject("q0"),
            Err(QuestionError::AlreadyResolved("q0".into()))
        );
    }
}
