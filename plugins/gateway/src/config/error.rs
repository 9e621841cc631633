//! [`SourceError`]: why a source cannot be registered. Every step of the configuration
//! (expansion, the sections' checks, resolution) reports with it, so it stands apart.

use crate::manifest::ManifestError;
use toolyard_proto::ProtocolVersion;

/// A source that cannot be registered, naming it and the problem. Never holds a value of
/// an environment variable, a header or a token.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// A source without a name.
    #[error("a source has an empty name")]
    EmptyName,
    /// Two sources with the same name.
    #[error("source name `{name}` is used more than once")]
    DuplicateName {
        /// The name.
        name: String,
    },
    /// Two sources with the same prefix: their names would collide.
    #[error("sources `{first}` and `{second}` both use the prefix `{prefix}`")]
    DuplicatePrefix {
        /// The prefix.
        prefix: String,
        /// One source.
        first: String,
        /// The other.
        second: String,
    },
    /// Not exactly one of `plugin`, `command`, `url`.
    #[error("source `{source_name}`: give exactly one of `plugin`, `command` or `url` (found {})",
        if found.is_empty() { "none".to_owned() } else { found.join(", ") })]
    LaunchChoice {
        /// The source.
        source_name: String,
        /// Which of them were given.
        found: Vec<&'static str>,
    },
    /// The plugin's manifest is missing or wrong.
    #[error("source `{source_name}`: {error}")]
    Manifest {
        /// The source.
        source_name: String,
        /// What is wrong with the manifest.
        #[source]
        error: ManifestError,
    },
    /// A command neither on `PATH` nor an existing file.
    #[error("source `{source_name}`: command `{command}` not found (neither on PATH nor an existing file)")]
    CommandNotFound {
        /// The source.
        source_name: String,
        /// The command.
        command: String,
    },
    /// `${VAR}` names a variable that is not set in Toolyard's environment.
    #[error("source `{source_name}`: {field} uses ${{{var}}}, which is not set")]
    UnsetVariable {
        /// The source (`[gateway]` for the admin token).
        source_name: String,
        /// Where (`env GITHUB_TOKEN`, `header Authorization`, `admin_token`).
        field: String,
        /// The unset variable.
        var: String,
    },
    /// A `${` without its `}`.
    #[error("source `{source_name}`: {field} has an unterminated `${{`")]
    BadReference {
        /// The source.
        source_name: String,
        /// Where.
        field: String,
    },
    /// A variable or header the manifest requires has no value.
    #[error("source `{source_name}`: required {kind} `{name}` has no value (set it in the source's `{key}`)",
        key = if *kind == "header" { "headers" } else { "env" })]
    MissingRequired {
        /// The source.
        source_name: String,
        /// `environment variable` or `header`.
        kind: &'static str,
        /// Its name.
        name: String,
    },
    /// A protocol version we do not speak.
    #[error("source `{source_name}`: unknown protocol version {version:?} (known: {})",
        ProtocolVersion::supported_strs().join(", "))]
    UnknownProtocol {
        /// The source.
        source_name: String,
        /// The version.
        version: String,
    },
    /// Any other inconsistent setting.
    #[error("source `{source_name}`: {message}")]
    Invalid {
        /// The source.
        source_name: String,
        /// What is wrong.
        message: String,
    },
    /// Several problems, each on its own line.
    #[error("{} problems with sources:{}", .0.len(), .0.iter().map(|e| format!("\n  - {e}")).collect::<String>())]
    Several(Vec<SourceError>),
}

impl SourceError {
    pub(super) fn from_many(mut errors: Vec<SourceError>) -> SourceError {
        match errors.pop() {
            Some(only) if errors.is_empty() => only,
            Some(last) => {
                errors.push(last);
                SourceError::Several(errors)
            }
            None => SourceError::Several(errors),
        }
    }

    /// The problems one by one (a [`SourceError::Several`] flattened).
    pub fn into_vec(self) -> Vec<SourceError> {
        match self {
            SourceError::Several(v) => v.into_iter().flat_map(SourceError::into_vec).collect(),
            e => vec![e],
        }
    }
}
