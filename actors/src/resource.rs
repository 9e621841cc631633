//! Resource and prompt definitions: static resources, URI templates, prompts, completers.

use crate::context::RequestContext;
use crate::error::HandlerError;
use crate::exec::Judge;
use crate::tool::{BoxFuture, DefinitionError};
use crate::uri_template::UriTemplate;
use std::collections::HashMap;
use std::sync::Arc;
use toolyard_proto::{
    GetPromptResult, Prompt, ReadResourceResult, Resource, ResourceContents, ResourceTemplate,
};

/// What a resource reader gets: the requested URI and, for templates, its variables.
#[derive(Debug, Clone)]
pub struct ResourceRequest {
    /// The URI asked for.
    pub uri: String,
    /// Template variables (empty for a static resource).
    pub vars: HashMap<String, String>,
}

/// Reads a resource.
pub type ResourceFn = Arc<
    dyn Fn(
            RequestContext,
            ResourceRequest,
        ) -> BoxFuture<Result<Vec<ResourceContents>, HandlerError>>
        + Send
        + Sync,
>;

/// A static resource.
pub struct ResourceDef {
    pub(crate) resource: Resource,
    pub(crate) read: ResourceFn,
}

impl ResourceDef {
    /// A resource and its reader.
    pub fn new(resource: Resource, read: ResourceFn) -> Self {
        ResourceDef { resource, read }
    }

    /// Wraps the reader (telemetry, auditing); the resource is unchanged.
    pub fn map_reader(mut self, wrap: impl FnOnce(ResourceFn) -> ResourceFn) -> Self {
        self.read = wrap(self.read);
        self
    }
}

/// A resource template: URIs matching it are read by one reader.
pub struct TemplateDef {
    pub(crate) template: ResourceTemplate,
    pub(crate) matcher: UriTemplate,
    pub(crate) read: ResourceFn,
}

impl TemplateDef {
    /// A template and its reader; the URI template must parse.
    pub fn new(template: ResourceTemplate, read: ResourceFn) -> Result<Self, DefinitionError> {
        let matcher = UriTemplate::parse(&template.uri_template)
            .map_err(|e| DefinitionError::Template(template.uri_template.clone(), e))?;
        Ok(TemplateDef {
            template,
            matcher,
            read,
        })
    }
}

/// Produces a prompt's messages from its arguments.
pub type PromptFn = Arc<
    dyn Fn(
            RequestContext,
            HashMap<String, String>,
        ) -> BoxFuture<Result<GetPromptResult, HandlerError>>
        + Send
        + Sync,
>;

/// Suggests values for an argument: gets the partial value and the other arguments already
/// filled in, returns candidates.
pub type CompleteFn =
    Arc<dyn Fn(String, HashMap<String, String>) -> BoxFuture<Vec<String>> + Send + Sync>;

/// A prompt.
pub struct PromptDef {
    pub(crate) prompt: Prompt,
    pub(crate) get: PromptFn,
}

impl PromptDef {
    /// A prompt and its producer.
    pub fn new(prompt: Prompt, get: PromptFn) -> Self {
        PromptDef { prompt, get }
    }

    /// Wraps the producer (telemetry, auditing); the prompt is unchanged.
    pub fn map_producer(mut self, wrap: impl FnOnce(PromptFn) -> PromptFn) -> Self {
        self.get = wrap(self.get);
        self
    }
}

/// What a completer is attached to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CompletionTarget {
    /// An argument of a prompt: (prompt name, argument name).
    Prompt(String, String),
    /// A variable of a resource template: (URI template, variable name).
    Resource(String, String),
}

impl Judge for ReadResourceResult {}
impl Judge for GetPromptResult {}
