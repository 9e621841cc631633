//! The writing tools: `write_file`, `edit_file`, `create_directory`, `move_file` and
//! `delete_path`. None is offered in read-only mode.
//!
//! A file is never written in place: the new contents go to a fresh temporary file (created
//! exclusively) in the target's directory, which is then renamed over the target. The rename
//! replaces a symlink at the target instead of following it, so a link planted inside a root
//! (pointing outside, dangling or not) cannot redirect a write.

use super::edit::{self, Edit};
use super::errors::{failed, invalid, io};
use super::roots::Target;
use super::Inner;
use cap_std::fs::{Dir, OpenOptions};
use schemars::JsonSchema;
use serde::Deserialize;
use std::ffi::OsStr;
use std::io::{Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use toolyard::HandlerError;

/// `write_file`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct WriteArgs {
    /// The file to create or overwrite.
    pub(crate) path: String,
    /// Its new contents.
    pub(crate) content: String,
}

/// `edit_file`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct EditArgs {
    /// The file to edit.
    pub(crate) path: String,
    /// Replacements, applied in order.
    pub(crate) edits: Vec<Edit>,
    /// Show the diff without writing.
    #[serde(default, rename = "dryRun")]
    pub(crate) dry_run: bool,
}

/// `move_file`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct MoveArgs {
    /// What to move.
    pub(crate) source: String,
    /// Where to; must not exist.
    pub(crate) destination: String,
}

/// `delete_path`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct DeleteArgs {
    /// The file, symlink or directory to delete.
    pub(crate) path: String,
    /// Delete a non-empty directory with everything in it.
    #[serde(default)]
    pub(crate) recursive: bool,
}

/// The parent directory (a capability beneath the root) and the file's name.
fn parent_of<'t>(target: &'t Target<'_>) -> Result<(Dir, &'t OsStr), HandlerError> {
    let shown = target.shown();
    let (parent, name) = target
        .split()
        .ok_or_else(|| failed(format!("{shown} is an allowed root, not a file")))?;
    let dir = target
        .root
        .dir
        .open_dir(parent)
        .map_err(|e| io(&shown, &e))?;
    Ok((dir, name))
}

/// Writes `bytes` to a temporary file beside `name`, then renames it over `name`.
fn replace(dir: &Dir, name: &OsStr, bytes: &[u8], shown: &str) -> Result<(), HandlerError> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let tmp = format!(
        ".{}.{}-{}.toolyard-tmp",
        name.to_string_lossy(),
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    let written = dir.open_with(&tmp, &options).and_then(|mut f| {
        f.write_all(bytes)?;
        f.flush()
    });
    if let Err(e) = written {
        let _ = dir.remove_file(&tmp);
        return Err(io(shown, &e));
    }
    if let Err(e) = dir.rename(&tmp, dir, name) {
        let _ = dir.remove_file(&tmp);
        return Err(io(shown, &e));
    }
    Ok(())
}

/// `write_file`.
pub(crate) fn write(inner: &Inner, a: &WriteArgs) -> Result<String, HandlerError> {
    let target = inner.roots.resolve(&a.path)?;
    let shown = target.shown();
    let (dir, name) = parent_of(&target)?;
    if let Ok(meta) = dir.symlink_metadata(name) {
        if meta.is_dir() {
            return Err(failed(format!("{shown} is a directory")));
        }
    }
    replace(&dir, name, a.content.as_bytes(), &shown)?;
    Ok(format!("Successfully wrote to {shown}"))
}

/// `edit_file`: the diff, and the edited file unless `dryRun`.
pub(crate) fn edit_file(inner: &Inner, a: &EditArgs) -> Result<String, HandlerError> {
    let target = inner.roots.resolve(&a.path)?;
    let shown = target.shown();
    let (dir, name) = parent_of(&target)?;
    let file = dir.open(name).map_err(|e| io(&shown, &e))?;
    let size = file.metadata().map_err(|e| io(&shown, &e))?.len();
    if size > inner.max_read_bytes {
        return Err(failed(format!(
            "{shown} is {size} bytes, over the limit of {} bytes",
            inner.max_read_bytes
        )));
    }
    let mut bytes = Vec::new();
    file.take(inner.max_read_bytes)
        .read_to_end(&mut bytes)
        .map_err(|e| io(&shown, &e))?;
    let original =
        String::from_utf8(bytes).map_err(|_| failed(format!("{shown} is not UTF-8 text")))?;
    let edited = edit::apply(&original, &a.edits).map_err(failed)?;
    let before = edit::normalize_newlines(&original);
    let diff = edit::unified_diff(&shown, &before, &edited);
    if !a.dry_run {
        replace(&dir, name, edited.as_bytes(), &shown)?;
    }
    Ok(edit::fenced(&diff))
}

/// `create_directory`: with its parents; fine if it exists.
pub(crate) fn create_directory(inner: &Inner, path: &str) -> Result<String, HandlerError> {
    let target = inner.roots.resolve(path)?;
    let shown = target.shown();
    target
        .root
        .dir
        .create_dir_all(target.rel())
        .map_err(|e| io(&shown, &e))?;
    Ok(format!("Successfully created directory {shown}"))
}

/// `move_file`: refuses an existing destination.
pub(crate) fn move_file(inner: &Inner, a: &MoveArgs) -> Result<String, HandlerError> {
    let from = inner.roots.resolve(&a.source)?;
    let to = inner.roots.resolve(&a.destination)?;
    let (from_shown, to_shown) = (from.shown(), to.shown());
    let (from_dir, from_name) = parent_of(&from)?;
    let (to_dir, to_name) = parent_of(&to)?;
    from_dir
        .symlink_metadata(from_name)
        .map_err(|e| io(&from_shown, &e))?;
    if to_dir.symlink_metadata(to_name).is_ok() {
        return Err(failed(format!("{to_shown}: Destination already exists")));
    }
    from_dir
        .rename(from_name, &to_dir, to_name)
        .map_err(|e| io(&from_shown, &e))?;
    Ok(format!("Successfully moved {from_shown} to {to_shown}"))
}

/// `delete_path`: a file or symlink (the link, not its target), an empty directory, or with
/// `recursive` any directory; never a root.
pub(crate) fn delete(inner: &Inner, a: &DeleteArgs) -> Result<String, HandlerError> {
    let target = inner.roots.resolve(&a.path)?;
    let shown = target.shown();
    if target.is_root() {
        return Err(invalid("refusing to delete an allowed root"));
    }
    let (dir, name) = parent_of(&target)?;
    let meta = dir.symlink_metadata(name).map_err(|e| io(&shown, &e))?;
    let name = Path::new(name);
    let outcome = if meta.is_dir() {
        if a.recursive {
            dir.remove_dir_all(name)
        } else {
            dir.remove_dir(name).map_err(|e| {
                if e.raw_os_error() == Some(39) {
                    std::io::Error::other("directory not empty (pass recursive: true)")
                } else {
                    e
                }
            })
        }
    } else {
        dir.remove_file(name)
    };
    outcome.map_err(|e| io(&shown, &e))?;
    Ok(format!("Successfully deleted {shown}"))
}
