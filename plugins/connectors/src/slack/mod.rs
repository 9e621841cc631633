//! The Slack connector (being built).

use crate::{ConnectorError, SlackConfig};
use std::sync::Arc;
use toolyard::{Controller, ToolDef};

/// The Slack connector.
#[derive(Debug, Clone)]
pub struct Slack {}

impl Slack {
    /// A connector with the settings of `config`.
    pub fn new(_config: &SlackConfig) -> Result<Self, ConnectorError> {
        Ok(Slack {})
    }
}

impl Controller for Slack {
    fn tools(self: &Arc<Self>) -> Vec<ToolDef> {
        Vec::new()
    }
}
