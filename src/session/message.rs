//! A user's message to a session: its text and the images that come with it.

use crate::agent::TurnImage;
use crate::universal::ContentPart;

use super::SessionError;

/// What a user sends for one turn.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UserMessage {
    pub text: String,
    /// Images for the model (paths the agent can read, with their media types).
    pub images: Vec<TurnImage>,
}

impl UserMessage {
    /// A message of text only.
    pub fn text(text: impl Into<String>) -> UserMessage {
        UserMessage {
            text: text.into(),
            images: Vec::new(),
        }
    }

    /// Checks the message before it is queued: it must reach the agent whole.
    pub fn validate(&self) -> Result<(), SessionError> {
        if self.text.contains('\0') || self.images.iter().any(|i| i.path.contains('\0')) {
            return Err(SessionError::InvalidRequest(
                "the message must not contain a NUL character".into(),
            ));
        }
        Ok(())
    }

    /// The content of the turn's user item: the text, then an image part per image.
    pub fn content(&self) -> Vec<ContentPart> {
        let mut parts = vec![ContentPart::Text {
            text: self.text.clone(),
        }];
        parts.extend(self.images.iter().map(|i| ContentPart::Image {
            path: i.path.clone(),
            mime: Some(i.mime.clone()),
        }));
        parts
    }
}

impl From<String> for UserMessage {
    fn from(text: String) -> Self {
        UserMessage::text(text)
    }
}

impl From<&str> for UserMessage {
    fn from(text: &str) -> Self {
        UserMessage::text(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nul_characters_are_refused() {
        assert!(UserMessage::text("a\0b").validate().is_err());
        assert!(UserMessage::text("fine").validate().is_ok());
    }

    #[test]
    fn images_become_image_parts_after_the_text() {
        let m = UserMessage {
            text: "look".into(),
            images: vec![TurnImage {
                path: "/tmp/a.png".into(),
                mime: "image/png".into(),
            }],
        };
        let parts = m.content();
        assert_eq!(parts.len(), 2);
        assert!(matches!(&parts[1], ContentPart::Image { path, .. } if path == "/tmp/a.png"));
    }
}
