//! The error of setting a connector up (a bad root, an unreachable database URL, a connector
//! this build leaves out). Errors of single tool calls are tool results, not this type.

/// A connector could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ConnectorError {
    /// The config names a connector this build does not include.
    #[error("[connectors.{connector}] needs the `{feature}` feature of toolyard-connectors, which this build leaves out")]
    NotBuilt {
        /// The section.
        connector: &'static str,
        /// The cargo feature that adds it.
        feature: &'static str,
    },
    /// A setting is unusable.
    #[error("[connectors.{connector}]: {message}")]
    Config {
        /// The section.
        connector: &'static str,
        /// What is wrong.
        message: String,
    },
    /// A tool definition was refused by the runtime.
    #[error(transparent)]
    Definition(#[from] toolyard::DefinitionError),
}
