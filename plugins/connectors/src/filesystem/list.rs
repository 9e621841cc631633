//! The listing tools: `list_directory`, `list_directory_with_sizes`, `directory_tree`,
//! `get_file_info` and `list_allowed_directories`, in the reference server's output formats.

use super::errors::{failed, invalid, io};
use super::walk::{self, Visit};
use super::Inner;
use cap_std::fs::{Dir, Metadata, MetadataExt, PermissionsExt};
use globset::GlobMatcher;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use toolyard::HandlerError;

/// `list_directory_with_sizes`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct SizesArgs {
    /// The directory.
    pub(crate) path: String,
    /// `name` (default) or `size` (largest first).
    #[serde(default, rename = "sortBy")]
    pub(crate) sort_by: SortBy,
}

/// How `list_directory_with_sizes` sorts.
#[derive(Debug, Default, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum SortBy {
    /// By name.
    #[default]
    Name,
    /// Largest first.
    Size,
}

/// `directory_tree`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct TreeArgs {
    /// The directory.
    pub(crate) path: String,
    /// Glob patterns (relative to `path`) of entries to leave out.
    #[serde(default, rename = "excludePatterns")]
    pub(crate) exclude_patterns: Vec<String>,
}

/// The entries of a directory: (name, is a directory, size; 0 unless `sizes`).
fn entries(dir: &Dir, cap: usize, sizes: bool) -> std::io::Result<Vec<(String, bool, u64)>> {
    let mut out = Vec::new();
    for entry in dir.entries()? {
        let entry = entry?;
        let is_dir = entry.file_type().map(|t| t.is_dir()).unwrap_or(false);
        let size = if is_dir || !sizes {
            0
        } else {
            entry.metadata().map(|m| m.len()).unwrap_or(0)
        };
        out.push((
            entry.file_name().to_string_lossy().into_owned(),
            is_dir,
            size,
        ));
        if out.len() >= cap {
            break;
        }
    }
    out.sort();
    Ok(out)
}

fn open_dir(inner: &Inner, path: &str) -> Result<(Dir, String), HandlerError> {
    let target = inner.roots.resolve(path)?;
    let shown = target.shown();
    let dir = target
        .root
        .dir
        .open_dir(target.rel())
        .map_err(|e| io(&shown, &e))?;
    Ok((dir, shown))
}

/// `list_directory`: `[DIR] name` / `[FILE] name` lines.
pub(crate) fn list(inner: &Inner, path: &str) -> Result<String, HandlerError> {
    let (dir, shown) = open_dir(inner, path)?;
    let cap = inner.walk.max_entries.saturating_mul(10);
    let list = entries(&dir, cap, false).map_err(|e| io(&shown, &e))?;
    let mut out: Vec<String> = list
        .iter()
        .map(|(name, is_dir, _)| format!("{} {name}", if *is_dir { "[DIR]" } else { "[FILE]" }))
        .collect();
    if list.len() >= cap {
        out.push(format!("[listing stopped after {cap} entries]"));
    }
    Ok(out.join("\n"))
}

/// Bytes for people: `0 B`, `512 B`, `1.50 KB`.
fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KB", "MB", "GB", "TB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    #[allow(clippy::cast_precision_loss, reason = "a display value")]
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.2} {}", UNITS[unit])
}

/// `list_directory_with_sizes`: the listing with sizes and totals.
pub(crate) fn list_with_sizes(inner: &Inner, a: &SizesArgs) -> Result<String, HandlerError> {
    let (dir, shown) = open_dir(inner, &a.path)?;
    let cap = inner.walk.max_entries.saturating_mul(10);
    let mut list = entries(&dir, cap, true).map_err(|e| io(&shown, &e))?;
    if let SortBy::Size = a.sort_by {
        list.sort_by(|x, y| y.2.cmp(&x.2).then_with(|| x.0.cmp(&y.0)));
    }
    let mut lines: Vec<String> = list
        .iter()
        .map(|(name, is_dir, size)| {
            let kind = if *is_dir { "[DIR] " } else { "[FILE]" };
            let size = if *is_dir { String::new() } else { human(*size) };
            format!("{kind} {name:<30} {size:>10}")
        })
        .collect();
    let files = list.iter().filter(|e| !e.1).count();
    let dirs = list.len() - files;
    let total: u64 = list.iter().map(|e| e.2).sum();
    lines.push(String::new());
    lines.push(format!("Total: {files} files, {dirs} directories"));
    lines.push(format!("Combined size: {}", human(total)));
    Ok(lines.join("\n"))
}

/// A node of `directory_tree`'s JSON.
#[derive(Debug, Serialize)]
struct Node {
    name: String,
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    children: Option<Vec<Node>>,
}

/// Compiles glob patterns; `*` does not cross `/`, `**` does.
pub(crate) fn globs(patterns: &[String]) -> Result<Vec<GlobMatcher>, HandlerError> {
    patterns
        .iter()
        .map(|p| {
            globset::GlobBuilder::new(p)
                .literal_separator(true)
                .build()
                .map(|g| g.compile_matcher())
                .map_err(|e| invalid(format!("invalid glob pattern `{p}`: {e}")))
        })
        .collect()
}

/// `directory_tree`: nested `{name, type, children}` JSON, within the walk limits.
pub(crate) fn tree(inner: &Inner, a: &TreeArgs) -> Result<String, HandlerError> {
    let (dir, shown) = open_dir(inner, &a.path)?;
    // As the reference server: a pattern also matches at any depth and below a match.
    let widened: Vec<String> = a
        .exclude_patterns
        .iter()
        .flat_map(|p| [p.clone(), format!("**/{p}"), format!("**/{p}/**")])
        .collect();
    let excludes = globs(&widened)?;
    // Children of each directory, keyed by its relative path ("" = the start).
    let mut children: HashMap<String, Vec<(String, String, bool)>> = HashMap::new();
    let outcome = walk::walk(dir, inner.walk, |e| {
        if excludes.iter().any(|g| g.is_match(&e.rel)) {
            return Visit::Skip;
        }
        let parent = e
            .rel
            .rsplit_once('/')
            .map(|(p, _)| p.to_owned())
            .unwrap_or_default();
        children
            .entry(parent)
            .or_default()
            .push((e.name.clone(), e.rel.clone(), e.is_dir));
        Visit::Descend
    })
    .map_err(|e| io(&shown, &e))?;
    if let Some(stop) = outcome.stopped {
        return Err(failed(format!(
            "directory_tree of {shown} {stop}; use a narrower path or excludePatterns"
        )));
    }
    fn build(key: &str, children: &mut HashMap<String, Vec<(String, String, bool)>>) -> Vec<Node> {
        let list = children.remove(key).unwrap_or_default();
        list.into_iter()
            .map(|(name, rel, is_dir)| Node {
                name,
                kind: if is_dir { "directory" } else { "file" },
                children: is_dir.then(|| build(&rel, children)),
            })
            .collect()
    }
    let nodes = build("", &mut children);
    serde_json::to_string_pretty(&nodes).map_err(|e| failed(e.to_string()))
}

/// A time as RFC 3339 UTC (seconds).
fn rfc3339(t: &std::io::Result<cap_std::time::SystemTime>) -> String {
    let Ok(t) = *t else {
        return "unknown".to_owned();
    };
    let Ok(since) = t.into_std().duration_since(std::time::UNIX_EPOCH) else {
        return "unknown".to_owned();
    };
    let secs = since.as_secs();
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

fn info_lines(meta: &Metadata) -> String {
    [
        format!("size: {}", meta.len()),
        format!("created: {}", rfc3339(&meta.created())),
        format!("modified: {}", rfc3339(&meta.modified())),
        format!("accessed: {}", rfc3339(&meta.accessed())),
        format!("isDirectory: {}", meta.is_dir()),
        format!("isFile: {}", meta.is_file()),
        format!("permissions: {:o}", meta.permissions().mode() & 0o777),
        format!("links: {}", meta.nlink()),
    ]
    .join("\n")
}

/// `get_file_info`.
pub(crate) fn info(inner: &Inner, path: &str) -> Result<String, HandlerError> {
    let target = inner.roots.resolve(path)?;
    let shown = target.shown();
    let meta = target
        .root
        .dir
        .metadata(target.rel())
        .map_err(|e| io(&shown, &e))?;
    Ok(info_lines(&meta))
}

/// `list_allowed_directories`.
pub(crate) fn allowed(inner: &Inner) -> String {
    let dirs: Vec<String> = inner
        .roots
        .listed()
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    if dirs.is_empty() {
        // The client's roots and the operator's have nothing in common.
        return "Allowed directories: none (no directory the client named is inside the directories this server allows)".to_owned();
    }
    format!("Allowed directories:\n{}", dirs.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::human;

    #[test]
    fn sizes_read_like_the_reference_server() {
        assert_eq!(human(0), "0 B");
        assert_eq!(human(1023), "1023 B");
        assert_eq!(human(1536), "1.50 KB");
        assert_eq!(human(3 * 1024 * 1024), "3.00 MB");
    }
}
