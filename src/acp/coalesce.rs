//! Merging consecutive text chunks of one message (or thought) into one `session/update`, for
//! the updates of events already in the log together (one page read by `prompt.rs` or
//! `replay.rs`): a client that falls behind the agent gets fewer, larger chunks. Separate from
//! the projection (`project.rs`), which turns one event into updates and knows nothing of pages.

use agent_client_protocol::v1::schema::{ContentBlock, ContentChunk, MessageId, SessionUpdate};

/// The most text one merged chunk carries.
const MAX_MERGED_TEXT: usize = 64 * 1024;

/// Which text chunk the deltas of an item go out as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkKind {
    /// `agent_message_chunk`.
    Message,
    /// `agent_thought_chunk`.
    Thought,
}

impl ChunkKind {
    /// The update carrying `text` of message `id`.
    pub fn update(self, text: &str, id: &MessageId) -> SessionUpdate {
        let chunk = ContentChunk::new(ContentBlock::from(text)).message_id(id.clone());
        match self {
            ChunkKind::Message => SessionUpdate::AgentMessageChunk(chunk),
            ChunkKind::Thought => SessionUpdate::AgentThoughtChunk(chunk),
        }
    }
}

/// Merges consecutive text chunks of one message (or one thought) into one update, for the
/// updates of events already in the log together (one page read): when the client falls
/// behind the agent, it gets fewer, larger chunks; nothing is ever held back to be merged (the
/// caller flushes at the end of each page).
#[derive(Debug, Default)]
pub struct Coalescer {
    pending: Option<SessionUpdate>,
}

impl Coalescer {
    /// Takes the next update; pushes onto `out` what is ready to send.
    pub fn push(&mut self, update: SessionUpdate, out: &mut Vec<SessionUpdate>) {
        if let Some(pending) = &mut self.pending {
            if merge(pending, &update) {
                return;
            }
        }
        if let Some(ready) = self.pending.take() {
            out.push(ready);
        }
        match update {
            SessionUpdate::AgentMessageChunk(_) | SessionUpdate::AgentThoughtChunk(_) => {
                self.pending = Some(update)
            }
            other => out.push(other),
        }
    }

    /// The update held back, if any (at the end of a page, before anything else is done).
    pub fn flush(&mut self) -> Option<SessionUpdate> {
        self.pending.take()
    }

    /// Appends `text` to the chunk held back when [`Coalescer::push`] of
    /// `kind.update(text, id)` would merge it there: the same merge without building the
    /// update (a streamed answer's deltas are most of what a door sends). False when it would
    /// not merge: the caller then pushes the update.
    pub fn append(&mut self, kind: ChunkKind, id: &MessageId, text: &str) -> bool {
        let chunk = match (&mut self.pending, kind) {
            (Some(SessionUpdate::AgentMessageChunk(a)), ChunkKind::Message)
            | (Some(SessionUpdate::AgentThoughtChunk(a)), ChunkKind::Thought) => a,
            _ => return false,
        };
        if chunk.meta.is_some() || chunk.message_id.as_ref() != Some(id) {
            return false;
        }
        match &mut chunk.content {
            ContentBlock::Text(x)
                if x.annotations.is_none() && x.text.len() + text.len() <= MAX_MERGED_TEXT =>
            {
                x.text.push_str(text);
                true
            }
            _ => false,
        }
    }
}

/// Appends `next`'s text to `into` when both are text chunks of the same message (or
/// thought).
fn merge(into: &mut SessionUpdate, next: &SessionUpdate) -> bool {
    let (a, b) = match (into, next) {
        (SessionUpdate::AgentMessageChunk(a), SessionUpdate::AgentMessageChunk(b))
        | (SessionUpdate::AgentThoughtChunk(a), SessionUpdate::AgentThoughtChunk(b)) => (a, b),
        _ => return false,
    };
    if a.message_id.is_none()
        || a.message_id != b.message_id
        || a.meta.is_some()
        || b.meta.is_some()
    {
        return false;
    }
    match (&mut a.content, &b.content) {
        (ContentBlock::Text(x), ContentBlock::Text(y))
            if x.annotations.is_none()
                && y.annotations.is_none()
                && x.text.len() + y.text.len() <= MAX_MERGED_TEXT =>
        {
            x.text.push_str(&y.text);
            true
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_client_protocol::v1::schema::{ContentChunk, MessageId};
    use serde_json::Value;

    fn text_chunk(text: &str, item_id: &str) -> ContentChunk {
        ContentChunk::new(ContentBlock::from(text)).message_id(MessageId::from(item_id.to_owned()))
    }

    #[test]
    fn append_merges_exactly_what_push_would() {
        let id = |s: &str| MessageId::from(s.to_owned());
        let cases: [(ChunkKind, &str, &str); 6] = [
            (ChunkKind::Message, "itm_1", "a"),
            (ChunkKind::Message, "itm_1", "b"),
            (ChunkKind::Thought, "itm_1", "c"),
            (ChunkKind::Thought, "itm_1", "d"),
            (ChunkKind::Message, "itm_2", "e"),
            (ChunkKind::Message, "itm_2", "x"),
        ];
        let (mut pushed, mut pushed_out) = (Coalescer::default(), Vec::new());
        let (mut appended, mut appended_out) = (Coalescer::default(), Vec::new());
        for (kind, item, text) in cases {
            pushed.push(kind.update(text, &id(item)), &mut pushed_out);
            if !appended.append(kind, &id(item), text) {
                appended.push(kind.update(text, &id(item)), &mut appended_out);
            }
        }
        pushed_out.extend(pushed.flush());
        appended_out.extend(appended.flush());
        assert_eq!(appended_out, pushed_out);
        assert_eq!(appended_out.len(), 3);
        // Nothing held back: nothing to append to.
        assert!(!appended.append(ChunkKind::Message, &id("itm_2"), "f"));
        // A chunk never grows past the limit.
        let big = "y".repeat(MAX_MERGED_TEXT);
        appended.push(
            ChunkKind::Message.update(&big, &id("itm_3")),
            &mut appended_out,
        );
        assert!(!appended.append(ChunkKind::Message, &id("itm_3"), "z"));
    }

    #[test]
    fn consecutive_chunks_of_one_message_merge_and_nothing_else_does() {
        let chunk = |id: &str, text: &str| SessionUpdate::AgentMessageChunk(text_chunk(text, id));
        let thought = |id: &str, text: &str| SessionUpdate::AgentThoughtChunk(text_chunk(text, id));
        let mut c = Coalescer::default();
        let mut out = Vec::new();
        for u in [
            chunk("itm_3", "a"),
            chunk("itm_3", "b"),
            thought("itm_4", "t"),
            thought("itm_4", "u"),
            chunk("itm_3", "c"),
            chunk("itm_5", "d"),
        ] {
            c.push(u, &mut out);
        }
        c.push(
            SessionUpdate::Plan(agent_client_protocol::v1::schema::Plan::new(vec![])),
            &mut out,
        );
        assert!(c.flush().is_none());
        let json: Vec<Value> = out
            .iter()
            .map(|u| serde_json::to_value(u).unwrap())
            .collect();
        let texts: Vec<(&str, &str)> = json
            .iter()
            .map(|u| {
                (
                    u["sessionUpdate"].as_str().unwrap(),
                    u["content"]["text"].as_str().unwrap_or(""),
                )
            })
            .collect();
        assert_eq!(
            texts,
            [
                ("agent_message_chunk", "ab"),
                ("agent_thought_chunk", "tu"),
                ("agent_message_chunk", "c"),
                ("agent_message_chunk", "d"),
                ("plan", "")
            ]
        );
        // The last chunk of a page is held until the page ends.
        c.push(chunk("itm_6", "e"), &mut out);
        assert!(c.flush().is_some());
    }
}
