//! Recognises a command line that is exactly one simple POSIX shell command, and its words, so an
//! `always` answer for `git status` can be applied to a later `git status --short` and to nothing
//! that merely starts the same way (`git status || touch x`, `ls $(touch x)`).
//!
//! Conservative on purpose: a line is simple only when the shell could not run anything but the
//! program its first word names. Everything the shell would treat as more than words is refused:
//! operators and separators (`;` `&` `|` `<` `>` `(` `)`, newlines: lists, pipelines, redirections,
//! here-documents, subshells, process substitution), expansions that can run or hide code (`$…`
//! and backticks outside single quotes), brace groups and expansion, comments, a leading variable
//! assignment (`PATH=… ls`), reserved words (`if`, `!`, `time` …) and unterminated quotes. Quotes
//! and backslashes are removed as the shell removes them, so `'git' "status"` is `git status`.
//! Words holding an unquoted glob character are marked, since their meaning depends on the files.

/// A word of a simple command after quote removal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Word {
    /// The word as the program receives it (quotes and escapes removed).
    pub text: String,
    /// True when an unquoted `*`, `?` or `[` makes the shell expand the word to file names.
    pub glob: bool,
}

/// Reserved words that make the line a compound command or change how it runs.
const RESERVED: [&str; 18] = [
    "!", "{", "}", "[[", "]]", "if", "then", "else", "elif", "fi", "case", "esac", "for", "while",
    "until", "do", "done", "function",
];

/// Programs that run another command given in their arguments (or the shell's own code): an
/// `always` for them would allow anything, so their prefix is the whole line.
const RUNNERS: [&str; 22] = [
    "sh", "bash", "dash", "zsh", "ksh", "fish", "eval", "exec", "source", ".", "command",
    "builtin", "env", "xargs", "sudo", "su", "doas", "nohup", "timeout", "nice", "time", "coproc",
];

/// The words of `line` when it is one simple command; `None` when the line is empty or anything
/// else (see the module's comment).
pub fn simple_command(line: &str) -> Option<Vec<Word>> {
    let mut words = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ' ' || *c == '\t') {
            chars.next();
        }
        let Some(&first) = chars.peek() else { break };
        if first == '#' {
            return None;
        }
        let mut word = Word {
            text: String::new(),
            glob: false,
        };
        let mut quoted = false;
        while let Some(&c) = chars.peek() {
            match c {
                ' ' | '\t' => break,
                '\n' | '\r' | ';' | '&' | '|' | '<' | '>' | '(' | ')' | '`' | '$' | '{' | '}' => {
                    return None
                }
                '\'' => {
                    chars.next();
                    quoted = true;
                    loop {
                        match chars.next()? {
                            '\'' => break,
                            '\n' | '\r' => return None,
                            c => word.text.push(c),
                        }
                    }
                }
                '"' => {
                    chars.next();
                    quoted = true;
                    loop {
                        match chars.next()? {
                            '"' => break,
                            '$' | '`' | '\n' | '\r' => return None,
                            '\\' => match chars.next()? {
                                c @ ('"' | '\\') => word.text.push(c),
                                '$' | '`' | '\n' | '\r' => return None,
                                c => {
                                    word.text.push('\\');
                                    word.text.push(c);
                                }
                            },
                            c => word.text.push(c),
                        }
                    }
                }
                '\\' => {
                    chars.next();
                    quoted = true;
                    match chars.next()? {
                        '\n' | '\r' => return None,
                        c => word.text.push(c),
                    }
                }
                c => {
                    chars.next();
                    if matches!(c, '*' | '?' | '[') {
                        word.glob = true;
                    }
                    word.text.push(c);
                }
            }
        }
        if words.is_empty() && !quoted {
            if RESERVED.contains(&word.text.as_str()) {
                return None;
            }
            if word.text.contains('=') {
                return None;
            }
        }
        words.push(word);
    }
    (!words.is_empty()).then_some(words)
}

/// What an `always` for `line` allows later: its program and, when there is one, its subcommand
/// (`npm test`, `git status`, `ls`) when the line is one simple command of a program that runs no
/// other command; otherwise `None` (only the very same line may be allowed again).
pub fn command_prefix(line: &str) -> Option<Vec<String>> {
    let words = simple_command(line)?;
    let program = &words[0];
    if program.glob || program.text.is_empty() || RUNNERS.contains(&base_name(&program.text)) {
        return None;
    }
    let mut prefix = vec![program.text.clone()];
    if let Some(sub) = words.get(1) {
        let subcommand = !sub.glob
            && !sub.text.is_empty()
            && !sub.text.starts_with('-')
            && sub
                .text
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | ':'));
        if subcommand {
            prefix.push(sub.text.clone());
        }
    }
    Some(prefix)
}

/// `bash` for `/usr/bin/bash`.
fn base_name(program: &str) -> &str {
    program.rsplit('/').next().unwrap_or(program)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(line: &str) -> Option<Vec<String>> {
        simple_command(line).map(|w| w.into_iter().map(|w| w.text).collect())
    }

    fn prefix(line: &str) -> Option<String> {
        command_prefix(line).map(|p| p.join(" "))
    }

    #[test]
    fn plain_words_quotes_and_escapes_are_one_simple_command() {
        assert_eq!(texts("ls -la"), Some(vec!["ls".into(), "-la".into()]));
        assert_eq!(
            texts("  git   status\t--short "),
            Some(vec!["git".into(), "status".into(), "--short".into()])
        );
        assert_eq!(
            texts(r#"'git' "status" a\ b 'x;y' "p|q" '$(no)'"#),
            Some(vec![
                "git".into(),
                "status".into(),
                "a b".into(),
                "x;y".into(),
                "p|q".into(),
                "$(no)".into()
            ])
        );
        assert_eq!(
            texts(r#"echo "a\"b" "c\d""#),
            Some(vec!["echo".into(), "a\"b".into(), "c\\d".into()])
        );
        assert_eq!(
            texts("grep -r foo=bar src"),
            Some(vec![
                "grep".into(),
                "-r".into(),
                "foo=bar".into(),
                "src".into()
            ])
        );
        let words = simple_command("ls *.rs 'x*'").unwrap();
        assert!(words[1].glob && !words[2].glob);
    }

    #[test]
    fn lists_pipelines_redirections_and_expansions_are_not_simple() {
        for line in [
            "git status --short || touch x",
            "git status && touch x",
            "ls -la; touch x",
            "ls -la ;touch x",
            "ls & touch x",
            "ls $(touch x)",
            "ls `touch x`",
            "ls \"$(touch x)\"",
            "ls \"`touch x`\"",
            "ls | sh -c 'touch x'",
            "ls > /dev/null",
            "ls 2>/dev/null",
            "ls >/dev/null; touch x",
            "ls < /etc/passwd",
            "cat <<EOF\nx\nEOF",
            "diff <(ls) <(ls a)",
            "(touch x)",
            "ls (x)",
            "{ touch x; }",
            "ls {a,b}",
            "ls\ntouch x",
            "ls\rtouch x",
            "ls \\\ntouch x",
            "ls $HOME",
            "ls ${HOME}",
            "ls \"$HOME\"",
            "ls $'\\x41'",
            "ls $((1+1))",
            "ls # ; touch x",
            "# comment",
            "PATH=/tmp/evil ls",
            "A=1 ls",
            "! ls",
            "if true; then ls; fi",
            "ls 'unterminated",
            "ls \"unterminated",
            "ls \\",
            "",
            "   ",
        ] {
            assert_eq!(simple_command(line), None, "{line:?}");
            assert_eq!(command_prefix(line), None, "{line:?}");
        }
    }

    #[test]
    fn prefixes_keep_program_and_subcommand() {
        assert_eq!(prefix("npm test -- --watch").as_deref(), Some("npm test"));
        assert_eq!(prefix("git status").as_deref(), Some("git status"));
        assert_eq!(prefix("git status --short").as_deref(), Some("git status"));
        assert_eq!(prefix("'git' status").as_deref(), Some("git status"));
        assert_eq!(prefix("ls -la").as_deref(), Some("ls"));
        assert_eq!(prefix("ls").as_deref(), Some("ls"));
        assert_eq!(prefix("rm -rf build").as_deref(), Some("rm"));
        assert_eq!(prefix("cargo build:x").as_deref(), Some("cargo build:x"));
        assert_eq!(prefix("ls *.rs").as_deref(), Some("ls"));
        assert_eq!(prefix("ls src*").as_deref(), Some("ls"));
        assert_eq!(prefix("echo gated-ok > gated-cmd.txt"), None);
    }

    #[test]
    fn programs_that_run_other_commands_have_no_prefix() {
        for line in [
            "sh -c 'touch x'",
            "bash script.sh",
            "/bin/sh -c ls",
            "env ls",
            "xargs rm",
            "sudo ls",
            "timeout 5 ls",
            "nohup ls",
            "eval ls",
            "exec ls",
            ". ./x",
            "l? -la",
            "'' ls",
        ] {
            assert_eq!(prefix(line), None, "{line:?}");
        }
        // Quoted reserved words and assignments are ordinary words.
        assert_eq!(prefix("'if' x").as_deref(), Some("if x"));
        assert_eq!(prefix("'A=1' ls").as_deref(), Some("A=1 ls"));
    }
}
