//! Answering what the agent asked: questions (`ask_user`) and permission requests, recorded in
//! the log (`question.resolved`, `permission.resolved`) before the answer goes to the agent; and
//! the prompt that carries answers to a run that no longer waits for them.

use super::actor::Actor;
use super::SessionError;
use crate::agent::AgentProcess;
use crate::codebuff::{DecidedBy, QuestionError};
use crate::universal::{EventData, PermissionReply, QuestionData};

impl Actor {
    /// Answers a permission request of the running turn: records `permission.resolved` and
    /// hands the answer to the agent.
    pub(super) async fn resolve_permission(
        &mut self,
        process: &mut AgentProcess,
        id: &str,
        answer: PermissionReply,
        decided_by: DecidedBy,
        reason: Option<&str>,
    ) -> Result<(), SessionError> {
        let line = self
            .converter
            .resolve_permission(id, answer, decided_by, reason, &mut self.drafts)
            .map_err(|e| SessionError::InvalidRequest(e.to_string()))?;
        if !self.flush().await {
            return Err(SessionError::StoreUnavailable(
                self.store_failure.clone().unwrap_or_default(),
            ));
        }
        if let Err(error) = process.queue_line(&line) {
            tracing::warn!(session = %self.id, %error, "the agent no longer reads its stdin");
        }
        Ok(())
    }

    /// Records `question.resolved` and returns the resolved question and the stdin line.
    pub(super) async fn resolve_question(
        &mut self,
        question_id: &str,
        answers: Option<Vec<Vec<String>>>,
    ) -> Result<(QuestionData, String), SessionError> {
        let resolved = match answers {
            Some(answers) => self.converter.answer_question(question_id, answers),
            None => self.converter.reject_question(question_id),
        };
        let (draft, line) = resolved.map_err(|e| match e {
            QuestionError::Unknown(_)
            | QuestionError::AlreadyResolved(_)
            | QuestionError::InvalidAnswers(_) => SessionError::InvalidRequest(e.to_string()),
        })?;
        let question = match &draft.data {
            EventData::QuestionResolved(question) => question.clone(),
            _ => {
                return Err(SessionError::InvalidRequest(format!(
                    "question `{question_id}` could not be resolved"
                )))
            }
        };
        self.drafts.push(draft);
        if !self.flush().await {
            return Err(SessionError::StoreUnavailable(
                self.store_failure.clone().unwrap_or_default(),
            ));
        }
        Ok((*question, line))
    }

    /// Drafts `question.resolved` (rejected) for every question still pending from a run that
    /// is over, when the conversation moves on (a new turn) or the session ends: nobody can
    /// answer them any more (rule 7: one `question.resolved` per `question.requested`).
    pub(super) fn reject_stale_questions(&mut self) {
        for id in self.converter.pending_question_ids() {
            if let Ok((draft, _skip_line)) = self.converter.reject_question(&id) {
                self.drafts.push(draft);
            }
        }
    }
}

/// The prompt that carries an answer to a run that is no longer waiting for it.
pub(super) fn answer_prompt(question: &QuestionData) -> String {
    let mut text = String::from("Answers to your questions:");
    let answers = question.answers.clone().unwrap_or_default();
    for (i, q) in question.questions.iter().enumerate() {
        let answer = answers
            .get(i)
            .filter(|a| !a.is_empty())
            .map(|a| a.join(", "))
            .unwrap_or_else(|| "(no answer)".to_owned());
        text.push_str(&format!("\n- {}: {}", q.question, answer));
    }
    if question.questions.is_empty() {
        text.push_str(&format!(" {}", answers.concat().join(", ")));
    }
    text
}
