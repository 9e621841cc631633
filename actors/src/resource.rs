//! Resource and prompt definitions: static resources, URI templates, prompts, completers.

use crate::audience::{Audience, Audienced};
use crate::context::RequestContext;
use crate::error::HandlerError;
use crate::exec::Judge;
use crate::tool::{BoxFuture, DefinitionError};
use crate::uri_template::UriTemplate;
use std::collections::HashMap;
use std::sync::Arc;
use toolyard_proto::{GetPromptResult, Prompt, ReadResourceResult, Resource, ResourceTemplate};

/// What a resource reader gets: the requested URI and, for templates, its variables.
#[derive(Debug, Clone)]
pub struct ResourceRequest {
    /// The URI asked for.
    pub uri: String,
    /// Template variables (empty for a static resource).
    pub vars: HashMap<String, String>,
}

/// Reads a resource. The whole result, not only its contents: a reader that relays another
/// server's answer (a gateway's) keeps that answer's `_meta`, `ttlMs` and `cacheScope`. A
/// result without `ttlMs` or `cacheScope` gets the server's (`ListConfig`) for a
/// 2026-07-28 caller; a legacy caller gets neither. `Vec<ResourceContents>` converts into
/// one (`.into()`).
pub type ResourceFn = Arc<
    dyn Fn(RequestContext, ResourceRequest) -> BoxFuture<Result<ReadResourceResult, HandlerError>>
        + Send
        + Sync,
>;

/// Decides whether the caller of `resources/subscribe` (or of a `subscriptions/listen` that
/// names the URI) may hear of the resource's changes: `Err` refuses, answered like a failed
/// `resources/read`, and nothing is recorded. A provider whose reads depend on the caller
/// (client roots narrowing a filesystem) installs one, else a change notification would tell
/// a caller about a resource it may not read. Runs in a task, before the subscription counts.
pub type SubscribeCheckFn = Arc<
    dyn Fn(RequestContext, ResourceRequest) -> BoxFuture<Result<(), HandlerError>> + Send + Sync,
>;

/// A static resource.
pub struct ResourceDef {
    pub(crate) resource: Resource,
    pub(crate) read: ResourceFn,
    pub(crate) check: Option<SubscribeCheckFn>,
    pub(crate) audience: Option<Audience>,
}

impl ResourceDef {
    /// A resource and its reader.
    pub fn new(resource: Resource, read: ResourceFn) -> Self {
        ResourceDef {
            resource,
            read,
            check: None,
            audience: None,
        }
    }

    /// Checks each subscription to this resource with `check` first (see
    /// [`SubscribeCheckFn`]).
    pub fn check_subscriptions(mut self, check: SubscribeCheckFn) -> Self {
        self.check = Some(check);
        self
    }

    /// Shows, reads and lets subscribe to the resource only for callers `audience` admits
    /// ([`Audience`]): to anyone else its URI is one the server does not know.
    pub fn for_audience(mut self, audience: Audience) -> Self {
        self.audience = Some(audience);
        self
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
    pub(crate) check: Option<SubscribeCheckFn>,
    pub(crate) audience: Option<Audience>,
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
            check: None,
            audience: None,
        })
    }

    /// Checks each subscription to a URI this template matches with `check` first (see
    /// [`SubscribeCheckFn`]).
    pub fn check_subscriptions(mut self, check: SubscribeCheckFn) -> Self {
        self.check = Some(check);
        self
    }

    /// Shows the template, and reads and lets subscribe to the URIs it matches, only for
    /// callers `audience` admits ([`Audience`]): to anyone else they are URIs the server
    /// does not know (a later template that matches them may still serve them).
    pub fn for_audience(mut self, audience: Audience) -> Self {
        self.audience = Some(audience);
        self
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

/// Suggests values for an argument: gets the request's context (who asks, its trace), the
/// partial value and the other arguments already filled in, returns candidates (`.collect()`
/// an iterator of `String`s, or say how many there are in all with [`Completions::total`]).
/// The context is what a completer that relays another server's answer (a gateway's) sends
/// on: the caller's principal and trace.
pub type CompleteFn = Arc<
    dyn Fn(RequestContext, String, HashMap<String, String>) -> BoxFuture<Completions> + Send + Sync,
>;

/// What a completer found. The answer carries at most 100 values; `total` and `has_more`
/// default to what the values say, and a completer that knows better (one that relays
/// another server's answer, or pages a large set) says so.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Completions {
    /// Candidates, best first.
    pub values: Vec<String>,
    /// How many candidates there are in all, if known beyond `values`.
    pub total: Option<usize>,
    /// Whether there are more than `values` holds.
    pub has_more: Option<bool>,
}

impl From<Vec<String>> for Completions {
    fn from(values: Vec<String>) -> Self {
        Completions {
            values,
            total: None,
            has_more: None,
        }
    }
}

/// Another server's answer relayed as it is: its own count and "more" flag, not just what
/// fits in the answer (a gateway's completer).
impl From<toolyard_proto::CompleteResult> for Completions {
    fn from(result: toolyard_proto::CompleteResult) -> Self {
        let completion = result.completion;
        Completions {
            values: completion.values,
            total: completion.total.and_then(|t| usize::try_from(t).ok()),
            has_more: completion.has_more,
        }
    }
}

impl FromIterator<String> for Completions {
    fn from_iter<I: IntoIterator<Item = String>>(iter: I) -> Self {
        Completions::from(iter.into_iter().collect::<Vec<_>>())
    }
}

/// A prompt.
pub struct PromptDef {
    pub(crate) prompt: Prompt,
    pub(crate) get: PromptFn,
    pub(crate) audience: Option<Audience>,
}

impl PromptDef {
    /// A prompt and its producer.
    pub fn new(prompt: Prompt, get: PromptFn) -> Self {
        PromptDef {
            prompt,
            get,
            audience: None,
        }
    }

    /// Shows and gets the prompt only for callers `audience` admits ([`Audience`]): to
    /// anyone else it is a prompt the server does not know.
    pub fn for_audience(mut self, audience: Audience) -> Self {
        self.audience = Some(audience);
        self
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

impl Audienced for ResourceDef {
    fn audience(&self) -> Option<&Audience> {
        self.audience.as_ref()
    }
    fn listed_alike(&self, other: &Self) -> bool {
        self.resource == other.resource
    }
}

impl Audienced for TemplateDef {
    fn audience(&self) -> Option<&Audience> {
        self.audience.as_ref()
    }
    fn listed_alike(&self, other: &Self) -> bool {
        self.template == other.template
    }
}

impl Audienced for PromptDef {
    fn audience(&self) -> Option<&Audience> {
        self.audience.as_ref()
    }
    fn listed_alike(&self, other: &Self) -> bool {
        self.prompt == other.prompt
    }
}
