//! The operator's roots, and turning a client's path into a root plus a path beneath it.
//!
//! A path is first normalized lexically (`.` and `..` resolved as text, NUL refused) and
//! matched against the roots component by component (`/data` does not contain
//! `/data-evil`), in the form the operator wrote and in its canonical form (for roots under a
//! symlinked directory such as macOS's `/tmp`). What remains is always a plain relative path,
//! and every operation opens it through the root's directory capability (cap-std: openat2
//! with `RESOLVE_BENEATH` on Linux, a checked component walk elsewhere), so a symlink that
//! leads outside, dangling or not, fails at the open itself: there is no window between a
//! check and the use.

use super::errors::{denied_outside, invalid};
use crate::ConnectorError;
use cap_std::fs::Dir;
use std::path::{Component, Path, PathBuf};
use toolyard::HandlerError;

/// One allowed directory.
pub(crate) struct Root {
    /// How paths under it are shown: the operator's spelling, normalized.
    shown: PathBuf,
    /// Spellings a client's path may start with (configured, canonical).
    forms: Vec<PathBuf>,
    /// The capability every operation goes through.
    pub(crate) dir: Dir,
}

/// The allowed directories, longest first so nested roots win.
pub(crate) struct Roots {
    roots: Vec<Root>,
    /// In the operator's order, for `list_allowed_directories`.
    listed: Vec<PathBuf>,
}

/// A client's path, resolved: a root and a relative path of plain components beneath it.
pub(crate) struct Target<'a> {
    pub(crate) root: &'a Root,
    rel: PathBuf,
}

impl Target<'_> {
    /// The relative path for the root's capability (`.` for the root itself).
    pub(crate) fn rel(&self) -> &Path {
        if self.rel.as_os_str().is_empty() {
            Path::new(".")
        } else {
            &self.rel
        }
    }

    /// The target is the root itself.
    pub(crate) fn is_root(&self) -> bool {
        self.rel.as_os_str().is_empty()
    }

    /// The path as clients see it (under the root's shown form).
    pub(crate) fn shown(&self) -> String {
        self.root.shown.join(&self.rel).display().to_string()
    }

    /// The parent's relative path and the last component (`None` for a root).
    pub(crate) fn split(&self) -> Option<(&Path, &std::ffi::OsStr)> {
        let name = self.rel.file_name()?;
        let parent = match self.rel.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        Some((parent, name))
    }
}

/// `path` with `.` and `..` resolved as text; `None` if it is not absolute.
fn normalize(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    let mut absolute = false;
    for c in path.components() {
        match c {
            Component::Prefix(p) => out.push(p.as_os_str()),
            Component::RootDir => {
                absolute = true;
                out.push(Component::RootDir.as_os_str());
            }
            Component::CurDir => {}
            Component::ParentDir => {
                // At the top, `..` stays there (as the kernel does).
                out.pop();
            }
            Component::Normal(n) => out.push(n),
        }
    }
    absolute.then_some(out)
}

impl Roots {
    /// Opens the configured roots; each must be an existing directory.
    pub(crate) fn open(paths: &[PathBuf]) -> Result<Roots, ConnectorError> {
        let bad = |message: String| ConnectorError::Config {
            connector: "filesystem",
            message,
        };
        if paths.is_empty() {
            return Err(bad("`roots` is empty: name at least one directory".into()));
        }
        let mut roots = Vec::new();
        let mut listed = Vec::new();
        for configured in paths {
            let canonical = std::fs::canonicalize(configured).map_err(|e| {
                bad(format!(
                    "root `{}` is not usable: {e}",
                    configured.display()
                ))
            })?;
            let shown = if configured.is_absolute() {
                normalize(configured).unwrap_or_else(|| canonical.clone())
            } else {
                canonical.clone()
            };
            let dir =
                Dir::open_ambient_dir(&canonical, cap_std::ambient_authority()).map_err(|e| {
                    bad(format!(
                        "root `{}` is not a directory: {e}",
                        shown.display()
                    ))
                })?;
            let mut forms = vec![shown.clone()];
            if canonical != shown {
                forms.push(canonical);
            }
            listed.push(shown.clone());
            roots.push(Root { shown, forms, dir });
        }
        // Longest first: a path under a nested root resolves to the nested one.
        roots.sort_by_key(|r| std::cmp::Reverse(r.shown.components().count()));
        Ok(Roots { roots, listed })
    }

    /// The roots in the operator's order, as shown.
    pub(crate) fn listed(&self) -> &[PathBuf] {
        &self.listed
    }

    /// These roots narrowed by a client's (absolute paths): their intersection. A client
    /// root inside one of these becomes a root of its own, opened through the enclosing
    /// root's capability (so it cannot lead outside it, and what it holds cannot lead out
    /// of it); one of these inside a client root stays whole; a client root that is neither
    /// adds nothing. The result may be empty: the client asked for places none of which the
    /// operator allows.
    pub(crate) fn narrow(&self, client: &[PathBuf]) -> Roots {
        let mut roots: Vec<Root> = Vec::new();
        let mut listed: Vec<PathBuf> = Vec::new();
        let mut keep = |root: Root, roots: &mut Vec<Root>| {
            if !listed.contains(&root.shown) {
                listed.push(root.shown.clone());
                roots.push(root);
            }
        };
        for path in client {
            let Some(path) = normalize(path) else {
                continue;
            };
            // Inside an operator root (the deepest first): narrows it.
            let inside = self.roots.iter().find_map(|root| {
                root.forms
                    .iter()
                    .find_map(|form| path.strip_prefix(form).ok())
                    .map(|rel| (root, rel.to_path_buf()))
            });
            if let Some((root, rel)) = inside {
                let dir = if rel.as_os_str().is_empty() {
                    root.dir.try_clone()
                } else {
                    root.dir.open_dir(&rel)
                };
                match dir {
                    Ok(dir) => keep(
                        Root {
                            shown: root.shown.join(&rel),
                            forms: root.forms.iter().map(|f| f.join(&rel)).collect(),
                            dir,
                        },
                        &mut roots,
                    ),
                    Err(e) => {
                        tracing::debug!(error = %e, "filesystem: a client root is not a usable directory; ignored");
                    }
                }
                continue;
            }
            // Operator roots inside it stay whole.
            for root in self
                .roots
                .iter()
                .filter(|root| root.forms.iter().any(|form| form.starts_with(&path)))
            {
                if let Ok(dir) = root.dir.try_clone() {
                    keep(
                        Root {
                            shown: root.shown.clone(),
                            forms: root.forms.clone(),
                            dir,
                        },
                        &mut roots,
                    );
                }
            }
        }
        roots.sort_by_key(|r| std::cmp::Reverse(r.shown.components().count()));
        Roots { roots, listed }
    }

    /// Resolves a client's path: absolute under a root, or relative to the first root.
    pub(crate) fn resolve(&self, input: &str) -> Result<Target<'_>, HandlerError> {
        if input.contains('\0') {
            return Err(invalid("the path contains a NUL byte"));
        }
        if input.is_empty() {
            return Err(invalid("the path is empty"));
        }
        let given = Path::new(input);
        let absolute = if given.is_absolute() {
            given.to_path_buf()
        } else {
            let first = self.listed.first().ok_or_else(denied_outside)?;
            first.join(given)
        };
        let normalized = normalize(&absolute).ok_or_else(denied_outside)?;
        for root in &self.roots {
            for form in &root.forms {
                // Path::strip_prefix compares whole components.
                if let Ok(rel) = normalized.strip_prefix(form) {
                    return Ok(Target {
                        root,
                        rel: rel.to_path_buf(),
                    });
                }
            }
        }
        Err(denied_outside())
    }
}

#[cfg(test)]
mod tests {
    use super::normalize;
    use std::path::{Path, PathBuf};

    #[test]
    fn dot_dot_is_resolved_as_text_and_stops_at_the_top() {
        assert_eq!(
            normalize(Path::new("/a/b/../c/./d")),
            Some(PathBuf::from("/a/c/d"))
        );
        assert_eq!(
            normalize(Path::new("/../../etc")),
            Some(PathBuf::from("/etc"))
        );
        assert_eq!(normalize(Path::new("a/b")), None);
    }
}
