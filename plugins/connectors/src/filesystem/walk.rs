//! A bounded walk under a directory for `directory_tree`, `search_files` and `grep`: depth,
//! entry count and wall time are capped (the reference server has no limits, so one call on a
//! large tree could run for minutes), symlinks are reported but never followed, and every
//! directory is opened through its parent's capability.

use cap_std::fs::Dir;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The caps of one walk.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) max_depth: usize,
    pub(crate) max_entries: usize,
    pub(crate) timeout: Duration,
}

/// Why a walk stopped early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    Entries(usize),
    Time(Duration),
}

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stop::Entries(n) => write!(f, "visited the limit of {n} entries"),
            Stop::Time(t) => write!(f, "ran for the limit of {} ms", t.as_millis()),
        }
    }
}

/// One entry met on a walk.
pub(crate) struct Entry<'a> {
    /// Relative to the walk's start, `/`-separated.
    pub(crate) rel: String,
    /// The file name.
    pub(crate) name: String,
    /// A directory (not a symlink to one).
    pub(crate) is_dir: bool,
    /// The directory holding it.
    pub(crate) parent: &'a Dir,
}

/// What the visitor wants next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Visit {
    /// Go on (into the entry, if it is a directory).
    Descend,
    /// Do not enter this directory.
    Skip,
    /// Stop the walk.
    Stop,
}

/// What a walk reports at the end.
#[derive(Debug, Default)]
pub(crate) struct Outcome {
    /// Stopped early, and why.
    pub(crate) stopped: Option<Stop>,
    /// Some directories were deeper than the limit and not entered.
    pub(crate) depth_cut: bool,
}

/// Walks `start` depth-first in name order, calling `visit` for every entry.
pub(crate) fn walk(
    start: Dir,
    limits: Limits,
    mut visit: impl FnMut(&Entry<'_>) -> Visit,
) -> std::io::Result<Outcome> {
    let began = Instant::now();
    let mut seen = 0usize;
    let mut outcome = Outcome::default();
    // (directory, its path relative to the start, its depth)
    let mut stack: Vec<(Dir, PathBuf, usize)> = vec![(start, PathBuf::new(), 0)];
    while let Some((dir, rel, depth)) = stack.pop() {
        let mut children: Vec<(String, bool)> = Vec::new();
        for entry in dir.entries()? {
            let Ok(entry) = entry else { continue };
            let is_dir = entry.file_type().map(|t| t.is_dir()).unwrap_or(false);
            children.push((entry.file_name().to_string_lossy().into_owned(), is_dir));
        }
        children.sort();
        let mut subdirs = Vec::new();
        for (name, is_dir) in children {
            seen += 1;
            if seen > limits.max_entries {
                outcome.stopped = Some(Stop::Entries(limits.max_entries));
                return Ok(outcome);
            }
            if began.elapsed() > limits.timeout {
                outcome.stopped = Some(Stop::Time(limits.timeout));
                return Ok(outcome);
            }
            let child_rel = rel.join(&name);
            let entry = Entry {
                rel: child_rel.to_string_lossy().replace('\\', "/"),
                name: name.clone(),
                is_dir,
                parent: &dir,
            };
            match visit(&entry) {
                Visit::Stop => return Ok(outcome),
                Visit::Skip => {}
                Visit::Descend if is_dir => {
                    if depth + 1 >= limits.max_depth {
                        outcome.depth_cut = true;
                    } else if let Ok(sub) = dir.open_dir(&name) {
                        subdirs.push((sub, child_rel, depth + 1));
                    }
                }
                Visit::Descend => {}
            }
        }
        // Reversed so the stack pops them in name order.
        stack.extend(subdirs.into_iter().rev());
    }
    Ok(outcome)
}
