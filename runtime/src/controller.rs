//! Controllers: impl blocks whose `#[tool]`, `#[resource]` and `#[prompt]` methods become a
//! server's tools, resources and prompts (several controllers per server).

use crate::{PromptDef, ResourceDef, TemplateDef, ToolDef};
use std::sync::Arc;
use toolyard_proto::{
    ContentBlock, GetPromptResult, PromptMessage, ReadResourceResult, ResourceContents, Role,
};

/// What `#[toolyard::controller]` implements for an impl block.
pub trait Controller: Send + Sync + 'static {
    /// The controller's tools.
    fn tools(self: &Arc<Self>) -> Vec<ToolDef> {
        Vec::new()
    }
    /// The controller's static resources.
    fn resources(self: &Arc<Self>) -> Vec<ResourceDef> {
        Vec::new()
    }
    /// The controller's resource templates.
    fn templates(self: &Arc<Self>) -> Vec<TemplateDef> {
        Vec::new()
    }
    /// The controller's prompts.
    fn prompts(self: &Arc<Self>) -> Vec<PromptDef> {
        Vec::new()
    }
}

/// What a `#[prompt]` method may return.
pub trait IntoPromptResult {
    /// Converts into the protocol result.
    fn into_prompt_result(self) -> GetPromptResult;
}

impl IntoPromptResult for GetPromptResult {
    fn into_prompt_result(self) -> GetPromptResult {
        self
    }
}

impl IntoPromptResult for Vec<PromptMessage> {
    fn into_prompt_result(self) -> GetPromptResult {
        GetPromptResult {
            description: None,
            messages: self,
            meta: None,
            result_type: None,
        }
    }
}

impl IntoPromptResult for String {
    fn into_prompt_result(self) -> GetPromptResult {
        vec![PromptMessage {
            role: Role::User,
            content: ContentBlock::text(self),
        }]
        .into_prompt_result()
    }
}

/// What a `#[resource]` method may return; `uri` is the URI that was read. Return a whole
/// `ReadResourceResult` to set its `_meta`, `ttlMs` or `cacheScope`.
pub trait IntoReadResult {
    /// Converts into the read's result.
    fn into_read_result(self, uri: &str, mime_type: Option<&str>) -> ReadResourceResult;
}

impl IntoReadResult for String {
    fn into_read_result(self, uri: &str, mime_type: Option<&str>) -> ReadResourceResult {
        ResourceContents::text(
            uri,
            Some(mime_type.unwrap_or("text/plain").to_owned()),
            self,
        )
        .into_read_result(uri, mime_type)
    }
}

impl IntoReadResult for ResourceContents {
    fn into_read_result(self, _uri: &str, _mime: Option<&str>) -> ReadResourceResult {
        ReadResourceResult::new(vec![self])
    }
}

impl IntoReadResult for Vec<ResourceContents> {
    fn into_read_result(self, _uri: &str, _mime: Option<&str>) -> ReadResourceResult {
        ReadResourceResult::new(self)
    }
}

impl IntoReadResult for ReadResourceResult {
    fn into_read_result(self, _uri: &str, _mime: Option<&str>) -> ReadResourceResult {
        self
    }
}
