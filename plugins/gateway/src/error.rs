//! What the plugin host's pools fail with. Every message names the source and never holds a
//! secret (environment values and header values are scrubbed before they get here).

use std::fmt;
use std::time::Duration;
use toolyard_client::ClientError;

/// Getting a connection to a source failed.
///
/// `Display` and `Error` are written by hand rather than derived with `thiserror`: the field
/// naming the source is called `source`, which `thiserror` would take for the underlying
/// error.
#[derive(Debug)]
pub enum HostError {
    /// The circuit is open: the source crashed too often and is only probed until it recovers.
    Unhealthy {
        /// The source.
        source: String,
        /// Its last error.
        reason: String,
    },
    /// A connection could not be started (spawn failure, handshake failure or refusal).
    Connect {
        /// The source.
        source: String,
        /// Why.
        error: ClientError,
    },
    /// No connection within the deadline: the source did not start within its startup
    /// timeout, or every process of a pool stayed busy for the call timeout.
    Timeout {
        /// The source.
        source: String,
    },
    /// The source was shut down.
    Stopped {
        /// The source.
        source: String,
    },
    /// The source crashed and its restart backoff lasts longer than a lease may wait.
    Backoff {
        /// The source.
        source: String,
        /// When the next start may be attempted.
        retry_in: Duration,
    },
    /// The source cannot be reached by this build (a remote source without the
    /// `client-http` feature).
    Unsupported {
        /// The source.
        source: String,
        /// What is missing.
        reason: String,
    },
}

impl HostError {
    /// The source the error is about.
    pub fn source_name(&self) -> &str {
        match self {
            HostError::Unhealthy { source, .. }
            | HostError::Connect { source, .. }
            | HostError::Timeout { source }
            | HostError::Stopped { source }
            | HostError::Backoff { source, .. }
            | HostError::Unsupported { source, .. } => source,
        }
    }
}

impl fmt::Display for HostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostError::Unhealthy { source, reason } => {
                write!(f, "source `{source}` is unhealthy: {reason}")
            }
            HostError::Connect { source, error } => {
                write!(f, "source `{source}` could not be started: {error}")
            }
            HostError::Timeout { source } => write!(f, "source `{source}` timed out"),
            HostError::Stopped { source } => write!(f, "source `{source}` is stopped"),
            HostError::Backoff { source, retry_in } => write!(
                f,
                "source `{source}` is restarting after a crash; next attempt in {retry_in:?}"
            ),
            HostError::Unsupported { source, reason } => {
                write!(f, "source `{source}` cannot be used: {reason}")
            }
        }
    }
}

impl std::error::Error for HostError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            HostError::Connect { error, .. } => Some(error),
            _ => None,
        }
    }
}
