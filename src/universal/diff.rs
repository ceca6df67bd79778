//! The unified diff of two texts, as `file_ref.diff` carries it (hunks only, no `---`/`+++`
//! header, as in Codebuff's results). The mock agent writes its edits' diffs with it, and the
//! terminal client shows the diff of a write it is asked to approve.

/// Lines of context around a change.
const CONTEXT_LINES: usize = 3;

/// A unified diff from `old` to `new`, hunks only (no `---`/`+++` header, as in Codebuff's
/// results): one hunk spanning the changed region with up to three context lines. Empty when
/// the texts are equal.
pub fn unified_diff(old: &str, new: &str) -> String {
    let a: Vec<&str> = old.split_inclusive('\n').collect();
    let b: Vec<&str> = new.split_inclusive('\n').collect();
    if a == b {
        return String::new();
    }
    let prefix = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let max_suffix = a.len().min(b.len()) - prefix;
    let suffix = a
        .iter()
        .rev()
        .zip(b.iter().rev())
        .take(max_suffix)
        .take_while(|(x, y)| x == y)
        .count();
    let start = prefix.saturating_sub(CONTEXT_LINES);
    let tail = suffix.min(CONTEXT_LINES);
    let (a_end, b_end) = (a.len() - suffix + tail, b.len() - suffix + tail);

    let mut out = format!(
        "@@ -{} +{} @@\n",
        hunk_range(start, a_end - start),
        hunk_range(start, b_end - start)
    );
    let mut push = |mark: char, line: &str| {
        out.push(mark);
        out.push_str(line);
        if !line.ends_with('\n') {
            out.push_str("\n\\ No newline at end of file\n");
        }
    };
    for line in &a[start..prefix] {
        push(' ', line);
    }
    for line in &a[prefix..a.len() - suffix] {
        push('-', line);
    }
    for line in &b[prefix..b.len() - suffix] {
        push('+', line);
    }
    for line in &a[a.len() - suffix..a_end] {
        push(' ', line);
    }
    out
}

/// `start,count` of a hunk side; an empty side names the line before it (`0,0` at the top).
fn hunk_range(start: usize, count: usize) -> String {
    if count == 0 {
        format!("{start},0")
    } else {
        format!("{},{count}", start + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_of_a_new_file_adds_every_line() {
        assert_eq!(unified_diff("", "a\nb\n"), "@@ -0,0 +1,2 @@\n+a\n+b\n");
    }

    #[test]
    fn diff_keeps_three_context_lines_around_a_change() {
        let old = "1\n2\n3\n4\n5\n6\n7\n8\n9\n";
        let new = "1\n2\n3\n4\nfive\n6\n7\n8\n9\n";
        assert_eq!(
            unified_diff(old, new),
            "@@ -2,7 +2,7 @@\n 2\n 3\n 4\n-5\n+five\n 6\n 7\n 8\n"
        );
    }

    #[test]
    fn diff_marks_a_missing_final_newline_and_is_empty_for_equal_texts() {
        assert_eq!(
            unified_diff("x\n", "x\ny"),
            "@@ -1,1 +1,2 @@\n x\n+y\n\\ No newline at end of file\n"
        );
        assert_eq!(unified_diff("same\n", "same\n"), "");
        assert_eq!(unified_diff("gone\n", ""), "@@ -1,1 +0,0 @@\n-gone\n");
    }
}
