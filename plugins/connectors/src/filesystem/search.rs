//! `search_files` (glob on the path relative to the start, as the reference server matches)
//! and `grep` (a regular expression over file contents, which the reference server lacks),
//! both on the bounded walk. Binary files and files over the read cap are skipped by `grep`.

use super::errors::{invalid, io};
use super::list::globs;
use super::walk::{self, Visit};
use super::Inner;
use schemars::JsonSchema;
use serde::Deserialize;
use std::io::{BufRead, BufReader, Read};
use toolyard::HandlerError;

/// `search_files`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct SearchArgs {
    /// Where to start.
    pub(crate) path: String,
    /// A glob on the path relative to `path` (`*.rs` here, `**/*.rs` at any depth).
    pub(crate) pattern: String,
    /// Globs of paths to leave out (directories matched are not entered).
    #[serde(default, rename = "excludePatterns")]
    pub(crate) exclude_patterns: Vec<String>,
}

/// `grep`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct GrepArgs {
    /// A file or a directory to search under.
    pub(crate) path: String,
    /// A regular expression (Rust `regex` syntax).
    pub(crate) pattern: String,
    /// Only files whose relative path (or, without a `/`, whose name) matches this glob.
    #[serde(default)]
    pub(crate) glob: Option<String>,
    /// Match regardless of case.
    #[serde(default)]
    pub(crate) case_insensitive: bool,
    /// Stop after this many matching lines (default 200).
    #[serde(default)]
    pub(crate) max_matches: Option<usize>,
}

fn joined(shown: &str, rel: &str) -> String {
    if rel.is_empty() {
        shown.to_owned()
    } else {
        format!("{}/{rel}", shown.trim_end_matches('/'))
    }
}

/// `search_files`: matching paths, one a line.
pub(crate) fn search(inner: &Inner, a: &SearchArgs) -> Result<String, HandlerError> {
    let target = inner.roots.resolve(&a.path)?;
    let shown = target.shown();
    let dir = target
        .root
        .dir
        .open_dir(target.rel())
        .map_err(|e| io(&shown, &e))?;
    let pattern = globs(std::slice::from_ref(&a.pattern))?;
    let excludes = globs(&a.exclude_patterns)?;
    let mut found = Vec::new();
    let outcome = walk::walk(dir, inner.walk, |e| {
        if excludes.iter().any(|g| g.is_match(&e.rel)) {
            return Visit::Skip;
        }
        if pattern.iter().any(|g| g.is_match(&e.rel)) {
            found.push(joined(&shown, &e.rel));
        }
        Visit::Descend
    })
    .map_err(|e| io(&shown, &e))?;
    let mut out = if found.is_empty() {
        "No matches found".to_owned()
    } else {
        found.join("\n")
    };
    if let Some(stop) = outcome.stopped {
        out.push_str(&format!("\n[search stopped: it {stop}]"));
    }
    if outcome.depth_cut {
        out.push_str(&format!(
            "\n[directories deeper than {} levels were not searched]",
            inner.walk.max_depth
        ));
    }
    Ok(out)
}

/// Searches one open file; returns false once `max` matches are reached.
fn grep_file(
    file: cap_std::fs::File,
    shown: &str,
    re: &regex::Regex,
    max: usize,
    out: &mut Vec<String>,
) -> bool {
    let mut reader = BufReader::new(file);
    // Binary: a NUL byte near the start.
    if let Ok(head) = reader.fill_buf() {
        if head.iter().take(8192).any(|b| *b == 0) {
            return true;
        }
    }
    let mut line = Vec::new();
    let mut number = 0usize;
    loop {
        line.clear();
        match reader.by_ref().read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return true,
            Ok(_) => {}
        }
        number += 1;
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches(['\n', '\r']);
        if re.is_match(text) {
            let shown_line: String = text.chars().take(500).collect();
            out.push(format!("{shown}:{number}:{shown_line}"));
            if out.len() >= max {
                return false;
            }
        }
    }
}

/// `grep`: `path:line:text` for every matching line.
pub(crate) fn grep(inner: &Inner, a: &GrepArgs) -> Result<String, HandlerError> {
    let re = regex::RegexBuilder::new(&a.pattern)
        .case_insensitive(a.case_insensitive)
        .size_limit(1 << 20)
        .build()
        .map_err(|e| invalid(format!("invalid regular expression: {e}")))?;
    let max = a.max_matches.unwrap_or(200).clamp(1, 10_000);
    let filter = match &a.glob {
        Some(g) => globs(std::slice::from_ref(g))?.into_iter().next(),
        None => None,
    };
    let by_name = a.glob.as_deref().is_some_and(|g| !g.contains('/'));
    let target = inner.roots.resolve(&a.path)?;
    let shown = target.shown();
    let meta = target
        .root
        .dir
        .metadata(target.rel())
        .map_err(|e| io(&shown, &e))?;
    let mut out = Vec::new();
    let mut note = String::new();
    if meta.is_file() {
        let file = target
            .root
            .dir
            .open(target.rel())
            .map_err(|e| io(&shown, &e))?;
        grep_file(file, &shown, &re, max, &mut out);
    } else {
        let dir = target
            .root
            .dir
            .open_dir(target.rel())
            .map_err(|e| io(&shown, &e))?;
        let cap = inner.max_read_bytes;
        let outcome = walk::walk(dir, inner.walk, |e| {
            if e.is_dir {
                return Visit::Descend;
            }
            if let Some(g) = &filter {
                let subject = if by_name { &e.name } else { &e.rel };
                if !g.is_match(subject) {
                    return Visit::Descend;
                }
            }
            let Ok(file) = e.parent.open(&e.name) else {
                return Visit::Descend;
            };
            let small = file.metadata().map(|m| m.is_file() && m.len() <= cap);
            if !matches!(small, Ok(true)) {
                return Visit::Descend;
            }
            if grep_file(file, &joined(&shown, &e.rel), &re, max, &mut out) {
                Visit::Descend
            } else {
                Visit::Stop
            }
        })
        .map_err(|e| io(&shown, &e))?;
        if let Some(stop) = outcome.stopped {
            note = format!("\n[search stopped: it {stop}]");
        }
    }
    let mut text = if out.is_empty() {
        "No matches found".to_owned()
    } else {
        out.join("\n")
    };
    if out.len() >= max {
        text.push_str(&format!("\n[stopped after {max} matches]"));
    }
    text.push_str(&note);
    Ok(text)
}
