//! The GitHub connector (being built).

use crate::{ConnectorError, GithubConfig};
use std::sync::Arc;
use toolyard::{Controller, ToolDef};

/// The GitHub connector.
#[derive(Debug, Clone)]
pub struct Github {}

impl Github {
    /// A connector with the settings of `config`.
    pub fn new(_config: &GithubConfig) -> Result<Self, ConnectorError> {
        Ok(Github {})
    }
}

impl Controller for Github {
    fn tools(self: &Arc<Self>) -> Vec<ToolDef> {
        Vec::new()
    }
}
