//! The filesystem tools' error messages. They name paths only as the client sees them (under
//! an allowed root) and never the host paths outside the roots: not the roots' own list, not
//! where a refused symlink points.

use std::io;
use toolyard::HandlerError;

/// The path is outside every root.
pub(crate) fn denied_outside() -> HandlerError {
    HandlerError::failed(
        "Access denied: the path is outside the allowed directories (see list_allowed_directories)",
    )
}

/// A bad argument.
pub(crate) fn invalid(message: impl Into<String>) -> HandlerError {
    HandlerError::invalid_arguments(message.into())
}

/// A failure with a message.
pub(crate) fn failed(message: impl Into<String>) -> HandlerError {
    HandlerError::failed(message.into())
}

/// An I/O error on `shown` (a path under a root). std's I/O errors carry no path; cap-std's
/// refusal of a path that leads out of its root is the one message rewritten.
pub(crate) fn io(shown: &str, e: &io::Error) -> HandlerError {
    failed(describe(shown, e))
}

/// The text of [`io`].
pub(crate) fn describe(shown: &str, e: &io::Error) -> String {
    match e.kind() {
        // cap-std's "a path led outside of the filesystem" has no OS error code.
        io::ErrorKind::PermissionDenied if e.raw_os_error().is_none() => {
            format!("Access denied: {shown} leads outside the allowed directories")
        }
        io::ErrorKind::NotFound => format!("{shown}: no such file or directory"),
        io::ErrorKind::AlreadyExists => format!("{shown}: already exists"),
        _ => match e.raw_os_error() {
            // EXDEV (a cross-root rename) and ELOOP are the kernel's own words for a symlink
            // that may not be followed; say what they mean here.
            Some(18) => format!("{shown}: cannot be moved across filesystems"),
            Some(40) => format!("Access denied: {shown} has too many levels of symbolic links"),
            _ => format!("{shown}: {e}"),
        },
    }
}
