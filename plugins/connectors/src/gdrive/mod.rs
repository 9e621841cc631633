//! The Google Drive connector (being built).

use crate::{ConnectorError, GdriveConfig};
use std::sync::Arc;
use toolyard::{Controller, ToolDef};

/// The Google Drive connector.
#[derive(Debug, Clone)]
pub struct Gdrive {}

impl Gdrive {
    /// A connector with the settings of `config`.
    pub fn new(_config: &GdriveConfig) -> Result<Self, ConnectorError> {
        Ok(Gdrive {})
    }
}

impl Controller for Gdrive {
    fn tools(self: &Arc<Self>) -> Vec<ToolDef> {
        Vec::new()
    }
}
