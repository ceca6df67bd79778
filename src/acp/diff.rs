//! Unified diffs as ACP wants them: ACP's `diff` tool call content carries the old and the new
//! text (`oldText`/`newText`), Codebuff reports a unified diff (`file_ref.diff`, from the tool
//! result's `unifiedDiff`). Pure.

/// The two sides of a diff: the text before (`None` for a file that did not exist) and after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sides {
    pub old_text: Option<String>,
    pub new_text: String,
}

/// The old and new text a unified diff shows: each hunk's context and removed lines on the old
/// side, its context and added lines on the new side, hunks one after the other (the lines
/// between hunks are not in the diff). A diff of a file that did not exist (one hunk starting at
/// `-0,0`) has no old side.
///
/// Text without a hunk header is not a unified diff: Codebuff reports a created file's whole
/// content that way, so it is the new side of a new file. `None` for an empty diff (nothing
/// changed).
pub fn sides(diff: &str) -> Option<Sides> {
    if diff.is_empty() {
        return None;
    }
    if !diff.lines().any(|l| l.starts_with("@@")) {
        return Some(Sides {
            old_text: None,
            new_text: diff.to_owned(),
        });
    }
    let mut old = String::new();
    let mut new = String::new();
    let mut created = true;
    let mut in_hunk = false;
    // Whether the last line of each side ended without a newline (`\ No newline at end of file`).
    let mut last: Option<char> = None;
    for line in diff.split_inclusive('\n') {
        if let Some(header) = line.strip_prefix("@@") {
            in_hunk = true;
            created &= header.trim_start().starts_with("-0,0 ");
            continue;
        }
        if !in_hunk || line.starts_with("--- ") || line.starts_with("+++ ") {
            continue;
        }
        if line.starts_with('\\') {
            // The previous line had no newline at the end of its file.
            let strip = |s: &mut String| {
                if s.ends_with('\n') {
                    s.pop();
                }
            };
            match last {
                Some('-') => strip(&mut old),
                Some('+') => strip(&mut new),
                Some(_) => {
                    strip(&mut old);
                    strip(&mut new);
                }
                None => {}
            }
            continue;
        }
        let (mark, text) = match line.chars().next() {
            Some(c @ ('+' | '-' | ' ')) => (c, &line[1..]),
            // An empty context line some tools write without its leading space.
            Some('\n') => (' ', line),
            _ => continue,
        };
        match mark {
            '-' => old.push_str(text),
            '+' => new.push_str(text),
            _ => {
                old.push_str(text);
                new.push_str(text);
            }
        }
        last = Some(mark);
    }
    Some(Sides {
        old_text: (!created).then_some(old),
        new_text: new,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hunk_gives_context_and_removed_lines_then_context_and_added_lines() {
        let diff = "@@ -1,3 +1,3 @@\n export function greet(name) {\n-  return 'Hello ' + name\n+  return 'Hello, ' + name\n }\n";
        let s = sides(diff).unwrap();
        assert_eq!(
            s.old_text.as_deref(),
            Some("export function greet(name) {\n  return 'Hello ' + name\n}\n")
        );
        assert_eq!(
            s.new_text,
            "export function greet(name) {\n  return 'Hello, ' + name\n}\n"
        );
    }

    #[test]
    fn a_diff_from_nothing_is_a_new_file() {
        let s = sides("@@ -0,0 +1,2 @@\n+a\n+b\n").unwrap();
        assert_eq!(s.old_text, None);
        assert_eq!(s.new_text, "a\nb\n");
    }

    #[test]
    fn text_without_hunks_is_a_created_file_s_content() {
        let s = sides("# TODO\n\n- write tests\n").unwrap();
        assert_eq!(s.old_text, None);
        assert_eq!(s.new_text, "# TODO\n\n- write tests\n");
        assert_eq!(sides(""), None);
    }

    #[test]
    fn file_headers_are_skipped_and_missing_final_newlines_kept() {
        let diff = "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-old\n\\ No newline at end of file\n+new\n\\ No newline at end of file\n";
        let s = sides(diff).unwrap();
        assert_eq!(s.old_text.as_deref(), Some("old"));
        assert_eq!(s.new_text, "new");
    }

    #[test]
    fn several_hunks_follow_each_other() {
        let diff = "@@ -1,1 +1,1 @@\n-a\n+A\n@@ -10,1 +10,1 @@\n-j\n+J\n";
        let s = sides(diff).unwrap();
        assert_eq!(s.old_text.as_deref(), Some("a\nj\n"));
        assert_eq!(s.new_text, "A\nJ\n");
    }
}
