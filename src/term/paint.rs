//! Colour for stderr, decided once: `--color always|never`, or `auto` = stderr is a terminal,
//! `NO_COLOR` is unset and `TERM` is not `dumb`.

use owo_colors::OwoColorize;

use super::format::Style;
use super::settings::ColorChoice;

/// Paints text in a style, or leaves it plain.
#[derive(Debug, Clone, Copy)]
pub struct Paint {
    on: bool,
}

impl Paint {
    /// The decision for `choice`, given whether stderr is a terminal and the environment.
    pub fn new(
        choice: ColorChoice,
        stderr_tty: bool,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Paint {
        let on = match choice {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => {
                stderr_tty
                    && env("NO_COLOR").is_none_or(|v| v.is_empty())
                    && env("TERM").as_deref() != Some("dumb")
            }
        };
        Paint { on }
    }

    /// No colour at all.
    pub fn plain() -> Paint {
        Paint { on: false }
    }

    pub fn enabled(self) -> bool {
        self.on
    }

    /// `text` in `style`.
    pub fn paint(self, style: Style, text: &str) -> String {
        if !self.on {
            return text.to_owned();
        }
        match style {
            Style::Plain => text.to_owned(),
            Style::Dim => text.dimmed().to_string(),
            Style::Tool => text.cyan().to_string(),
            Style::Error => text.red().to_string(),
            Style::Warn => text.yellow().to_string(),
            Style::Ok => text.green().to_string(),
            Style::Bold => text.bold().to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_needs_a_terminal_and_no_no_color() {
        let none = |_: &str| None;
        let no_color = |k: &str| (k == "NO_COLOR").then(|| "1".to_owned());
        assert!(Paint::new(ColorChoice::Auto, true, &none).enabled());
        assert!(!Paint::new(ColorChoice::Auto, false, &none).enabled());
        assert!(!Paint::new(ColorChoice::Auto, true, &no_color).enabled());
        assert!(Paint::new(ColorChoice::Always, false, &no_color).enabled());
        assert!(!Paint::new(ColorChoice::Never, true, &none).enabled());
        assert_eq!(Paint::plain().paint(Style::Error, "x"), "x");
        assert_ne!(Paint { on: true }.paint(Style::Error, "x"), "x");
    }
}
