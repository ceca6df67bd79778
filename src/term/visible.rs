//! What the agent wrote, made safe to show: its text reaches the terminal as text, never as
//! commands. A control character in an agent's output (or in anything it influences: tool
//! names, commands, paths, errors, question texts, session titles) could otherwise write the
//! clipboard (OSC 52), retitle the window (OSC 0/2), clear the screen (CSI 2J), plant a
//! hyperlink (OSC 8) or move the cursor to forge lines. Every control character is written as
//! a visible escape instead (`\e]52;…`); line breaks and tabs stay. The client's own colours
//! are added after this, so they still work.
//!
//! Used by everything the client shows a person: the live view (`view.rs`), `sessions
//! show/list/events`, error lines, and the answer on stdout when stdout is a terminal. Raw
//! data — `--json`, and the answer on a stdout that is not a terminal — is left as it is.

use std::borrow::Cow;
use std::fmt::Write;

/// `text` with every control character but `\n` and `\t` written as a visible escape: `\e` for
/// ESC, `\a`, `\b`, `\r` (a `\r\n` line end stays a line end), `\xNN` for the other C0
/// controls and DEL, `\u{NN}` for the C1 controls (U+0080–U+009F, which some terminals obey).
pub fn visible(text: &str) -> Cow<'_, str> {
    if !text
        .chars()
        .any(|c| is_control(c) && c != '\n' && c != '\t')
    {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\n' | '\t' => out.push(c),
            '\r' if chars.peek() == Some(&'\n') => {}
            '\x1b' => out.push_str("\\e"),
            '\x07' => out.push_str("\\a"),
            '\x08' => out.push_str("\\b"),
            '\r' => out.push_str("\\r"),
            c if is_control(c) && u32::from(c) < 0x80 => {
                let _ = write!(out, "\\x{:02x}", u32::from(c));
            }
            c if is_control(c) => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// C0 controls, DEL and the C1 controls.
fn is_control(c: char) -> bool {
    matches!(u32::from(c), 0..=0x1f | 0x7f..=0x9f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_sequences_become_visible_text() {
        assert_eq!(
            visible("copy \x1b]52;c;cHduZWQ=\x07 done"),
            "copy \\e]52;c;cHduZWQ=\\a done"
        );
        assert_eq!(visible("\x1b[2J\x1b]0;title\x07"), "\\e[2J\\e]0;title\\a");
        assert_eq!(
            visible("\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\"),
            "\\e]8;;http://x\\e\\link\\e]8;;\\e\\"
        );
        assert_eq!(
            visible("a\rb\x08\x00\x7f\u{9b}2J"),
            "a\\rb\\b\\x00\\x7f\\u{9b}2J"
        );
    }

    #[test]
    fn text_lines_and_tabs_stay_as_they_are() {
        let plain = "línea 1\n\tcolumn 2 — ✓\n";
        assert!(matches!(visible(plain), Cow::Borrowed(_)));
        assert_eq!(visible("one\r\ntwo\r\n"), "one\ntwo\n");
    }
}
