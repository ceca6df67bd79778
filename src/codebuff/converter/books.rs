//! The converter's face over its two books of things waiting for the user: questions
//! (`ask_user`, [`QuestionBook`](crate::codebuff::questions::QuestionBook)) and permission
//! requests ([`PermissionBook`](crate::codebuff::permissions::PermissionBook), with the
//! session's policy). The handlers fill them from agent lines; the session answers through
//! these methods, and the answers become drafts plus lines for the agent's stdin.

use super::CodebuffConverter;
use crate::codebuff::permissions::{DecidedBy, PermissionError, PermissionMode, PermissionReply};
use crate::codebuff::questions::QuestionError;
use crate::universal::{EventDraft, QuestionData};

impl CodebuffConverter {
    /// Sets the session's permission mode (how requests are answered without asking).
    pub fn set_permission_mode(&mut self, mode: PermissionMode) {
        self.permissions.set_mode(mode);
    }

    /// Takes the lines for the agent's stdin the conversion decided on (permission replies
    /// of the policy), in order.
    pub fn take_outbox(&mut self) -> Vec<String> {
        std::mem::take(&mut self.outbox)
    }

    /// Answers an open permission request: `permission.resolved` (into `out`) and the reply
    /// line for the agent.
    pub fn resolve_permission(
        &mut self,
        id: &str,
        reply: PermissionReply,
        decided_by: DecidedBy,
        reason: Option<&str>,
        out: &mut Vec<EventDraft>,
    ) -> Result<String, PermissionError> {
        let (draft, line) = self.permissions.resolve(id, reply, decided_by, reason)?;
        out.push(draft);
        Ok(line)
    }

    /// True while some permission request waits for an answer.
    pub fn has_pending_permissions(&self) -> bool {
        self.permissions.has_open()
    }

    /// How many permission requests are open.
    pub fn pending_permission_count(&self) -> usize {
        self.permissions.open_count()
    }

    /// The ids of the open permission requests, sorted.
    pub fn pending_permission_ids(&self) -> Vec<String> {
        self.permissions.open_ids()
    }

    /// Records the user's answer to a pending question: returns the `question.resolved` draft
    /// and the line to write to the agent's stdin (rule 7: once per question).
    pub fn answer_question(
        &mut self,
        question_id: &str,
        answers: Vec<Vec<String>>,
    ) -> Result<(EventDraft, String), QuestionError> {
        self.questions.answer(question_id, answers)
    }

    /// Records that the user declined a pending question: the draft and the skip line.
    pub fn reject_question(
        &mut self,
        question_id: &str,
    ) -> Result<(EventDraft, String), QuestionError> {
        self.questions.reject(question_id)
    }

    /// True while some question waits for an answer.
    pub fn has_pending_questions(&self) -> bool {
        self.questions.has_open()
    }

    /// The pending question with this id.
    pub fn pending_question(&self, question_id: &str) -> Option<&QuestionData> {
        self.questions.open(question_id)
    }

    /// How many questions are open.
    pub fn pending_question_count(&self) -> usize {
        self.questions.open_count()
    }

    /// The ids of the pending questions, sorted.
    pub fn pending_question_ids(&self) -> Vec<String> {
        self.questions.open_ids()
    }
}
