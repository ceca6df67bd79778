//! The text of an item while it streams: every delta is appended, and the whole text is
//! needed once, when the item completes.

/// The largest block (see [`TextBuf`]).
const MAX_BLOCK: usize = 16 * 1024;

/// Text kept in blocks, so appending never copies what is already there and a long text
/// wastes at most one block: a `String` grown by doubling holds up to twice its length (and
/// three times while it reallocates), which for many sessions streaming long items at once
/// was the largest part of the daemon's memory.
#[derive(Debug, Default)]
pub(super) struct TextBuf {
    blocks: Vec<String>,
    len: usize,
}

impl TextBuf {
    /// Appends `text`.
    pub fn push_str(&mut self, text: &str) {
        match self.blocks.last_mut() {
            Some(block) if block.capacity() - block.len() >= text.len() => block.push_str(text),
            _ => {
                // Blocks grow with the text (short texts stay small), up to MAX_BLOCK.
                let size = text.len().max(self.len.clamp(64, MAX_BLOCK));
                let mut block = String::with_capacity(size);
                block.push_str(text);
                self.blocks.push(block);
            }
        }
        self.len += text.len();
    }

    /// Replaces the text.
    pub fn set(&mut self, text: String) {
        self.len = text.len();
        self.blocks = vec![text];
    }

    /// The whole text.
    pub fn to_text(&self) -> String {
        let mut text = String::with_capacity(self.len);
        for block in &self.blocks {
            text.push_str(block);
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_is_every_piece_in_order() {
        let mut buf = TextBuf::default();
        assert_eq!(buf.to_text(), "");
        let mut want = String::new();
        for i in 0..20_000 {
            let piece = format!("{i}:é;");
            buf.push_str(&piece);
            want.push_str(&piece);
        }
        buf.push_str(&"x".repeat(100_000));
        want.push_str(&"x".repeat(100_000));
        assert_eq!(buf.to_text(), want);
        let held: usize = buf.blocks.iter().map(String::capacity).sum();
        assert!(
            held <= want.len() + MAX_BLOCK,
            "{held} bytes held for {}",
            want.len()
        );
        buf.set("new".into());
        assert_eq!(buf.to_text(), "new");
    }
}
