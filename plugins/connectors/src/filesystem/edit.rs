//! `edit_file`'s text surgery, apart from any I/O: each edit replaces the first exact match
//! of its old text; failing that, a run of lines equal to the old lines up to surrounding
//! whitespace, re-indented to where it was found. The result is shown as a unified diff.

use schemars::JsonSchema;
use serde::Deserialize;

/// One replacement.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub(crate) struct Edit {
    /// Text to search for (exactly, or line by line ignoring surrounding whitespace).
    #[serde(rename = "oldText")]
    pub(crate) old_text: String,
    /// Text to put in its place.
    #[serde(rename = "newText")]
    pub(crate) new_text: String,
}

/// Line endings as `\n` only, so edits written with either ending match.
pub(crate) fn normalize_newlines(s: &str) -> String {
    s.replace("\r\n", "\n")
}

fn indent_of(line: &str) -> &str {
    &line[..line.len() - line.trim_start().len()]
}

/// Applies `edits` in order; the error names the first edit that matched nothing.
pub(crate) fn apply(original: &str, edits: &[Edit]) -> Result<String, String> {
    let mut content = normalize_newlines(original);
    for (i, edit) in edits.iter().enumerate() {
        let old = normalize_newlines(&edit.old_text);
        let new = normalize_newlines(&edit.new_text);
        if old.is_empty() {
            return Err(format!("edit {}: oldText is empty", i + 1));
        }
        if let Some(at) = content.find(&old) {
            content.replace_range(at..at + old.len(), &new);
            continue;
        }
        content = replace_loose(&content, &old, &new)
            .ok_or_else(|| format!("Could not find exact match for edit:\n{}", edit.old_text))?;
    }
    Ok(content)
}

/// The line-wise, whitespace-insensitive match of `old` in `content`, replaced by `new`.
fn replace_loose(content: &str, old: &str, new: &str) -> Option<String> {
    let lines: Vec<&str> = content.split('\n').collect();
    let old_lines: Vec<&str> = old.split('\n').collect();
    if old_lines.len() > lines.len() {
        return None;
    }
    let start = (0..=lines.len() - old_lines.len()).find(|&s| {
        old_lines
            .iter()
            .zip(&lines[s..])
            .all(|(o, l)| o.trim() == l.trim())
    })?;
    let found_indent = indent_of(lines[start]);
    let old_indent = indent_of(old_lines[0]);
    let replacement: Vec<String> = new
        .split('\n')
        .enumerate()
        .map(|(i, line)| {
            if i == 0 {
                format!("{found_indent}{}", line.trim_start())
            } else if let Some(rest) = line.strip_prefix(old_indent) {
                // Keep the line's indentation relative to the edit's first line.
                format!("{found_indent}{rest}")
            } else {
                line.to_owned()
            }
        })
        .collect();
    let mut out: Vec<String> = lines[..start].iter().map(|s| (*s).to_owned()).collect();
    out.extend(replacement);
    out.extend(
        lines[start + old_lines.len()..]
            .iter()
            .map(|s| (*s).to_owned()),
    );
    Some(out.join("\n"))
}

/// A git-style unified diff of `before` → `after`, labelled with `path`.
pub(crate) fn unified_diff(path: &str, before: &str, after: &str) -> String {
    let diff = similar::TextDiff::from_lines(before, after);
    let body = diff
        .unified_diff()
        .context_radius(3)
        .header(&format!("{path}\toriginal"), &format!("{path}\tmodified"))
        .to_string();
    format!("Index: {path}\n===================================================================\n{body}")
}

/// `diff` in a Markdown fence longer than any run of backticks inside it.
pub(crate) fn fenced(diff: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in diff.chars() {
        if c == '`' {
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    let fence = "`".repeat((longest + 1).max(3));
    format!("{fence}diff\n{diff}{fence}\n\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edit(old: &str, new: &str) -> Edit {
        Edit {
            old_text: old.into(),
            new_text: new.into(),
        }
    }

    #[test]
    fn an_exact_match_is_replaced_once() {
        let out = apply("a b a", &[edit("a", "x")]).unwrap();
        assert_eq!(out, "x b a");
    }

    #[test]
    fn a_loose_match_keeps_the_found_indentation() {
        let src = "fn f() {\n    let a = 1;\n        let b = 2;\n}\n";
        let out = apply(
            src,
            &[edit(
                "let a = 1;\n    let b = 2;",
                "let a = 3;\n    let b = 4;",
            )],
        )
        .unwrap();
        assert_eq!(out, "fn f() {\n    let a = 3;\n        let b = 4;\n}\n");
    }

    #[test]
    fn no_match_names_the_edit() {
        let err = apply("abc", &[edit("zzz", "y")]).unwrap_err();
        assert!(err.contains("zzz"), "{err}");
    }

    #[test]
    fn the_fence_outgrows_backticks_inside() {
        assert!(fenced("+ ````x\n").starts_with("`````diff"));
    }
}
