//! The CompletionHandler actor: argument completers for prompts and resource templates.

use crate::context::RequestContext;
use crate::registry::Registry;
use crate::reply::Reply;
use crate::resource::{CompleteFn, CompletionTarget, Completions, PromptDef, TemplateDef};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Arc;

/// The most values one completion answer carries, as the spec caps it.
const MAX_VALUES: usize = 100;

/// `completion/complete` params.
#[derive(Debug, Deserialize)]
pub(crate) struct CompleteParams {
    /// What is being completed.
    #[serde(rename = "ref")]
    pub reference: CompletionRef,
    /// The argument and its partial value.
    pub argument: CompletionArgument,
    /// Other arguments already filled in.
    #[serde(default)]
    pub context: Option<CompletionContext>,
}

/// `ref` of a completion request.
#[derive(Debug, Deserialize)]
#[serde(tag = "type")]
pub(crate) enum CompletionRef {
    /// A prompt argument.
    #[serde(rename = "ref/prompt")]
    Prompt {
        /// Prompt name.
        name: String,
    },
    /// A resource template variable.
    #[serde(rename = "ref/resource")]
    Resource {
        /// The URI template.
        uri: String,
    },
}

/// The argument being completed.
#[derive(Debug, Deserialize)]
pub(crate) struct CompletionArgument {
    /// Its name.
    pub name: String,
    /// What the user typed so far.
    pub value: String,
}

/// Previously resolved arguments.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct CompletionContext {
    /// By name.
    #[serde(default)]
    pub arguments: Option<HashMap<String, String>>,
}

/// Messages of the CompletionHandler.
// Request variants are large and frequent, the others small and rare: boxing the frequent
// one would add an allocation per request to save memory on rare messages.
#[allow(clippy::large_enum_variant)]
pub(crate) enum CompletionMsg {
    /// `completion/complete`.
    Complete {
        /// Params.
        params: CompleteParams,
        /// Who asks (a prompt or template it may not see completes to nothing), and the
        /// context the completer gets.
        ctx: RequestContext,
        /// Answer.
        reply: Reply,
    },
    /// Add or replace a completer.
    Register(CompletionTarget, CompleteFn),
}

pub(crate) struct CompletionHandler;

pub(crate) struct CompletionState {
    pub(crate) completers: HashMap<CompletionTarget, CompleteFn>,
    /// Where a prompt's or template's audience is looked up.
    pub(crate) prompts: Arc<Registry<PromptDef>>,
    pub(crate) templates: Arc<Registry<TemplateDef>>,
}

impl CompletionState {
    /// Whether a caller with `principal` may see what `target` completes an argument of
    /// (an [`Audience`](crate::Audience)'s): else it is as unknown as a prompt or template
    /// the server does not have.
    fn admits(&self, target: &CompletionTarget, principal: Option<&str>) -> bool {
        match target {
            CompletionTarget::Prompt(name, _) => {
                let prompts = self.prompts.load();
                prompts
                    .get(name)
                    .is_none_or(|p| p.for_caller(principal).is_some())
            }
            CompletionTarget::Resource(uri_template, _) => self
                .templates
                .load()
                .get(uri_template)
                .is_none_or(|t| t.for_caller(principal).is_some()),
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Completion {
    values: Vec<String>,
    total: usize,
    has_more: bool,
}

#[derive(Serialize)]
struct CompleteAnswer {
    completion: Completion,
}

impl Actor for CompletionHandler {
    type Msg = CompletionMsg;
    type State = CompletionState;
    type Arguments = CompletionState;

    async fn pre_start(
        &self,
        _myself: ActorRef<CompletionMsg>,
        args: CompletionState,
    ) -> Result<CompletionState, ActorProcessingErr> {
        Ok(args)
    }

    async fn handle(
        &self,
        _myself: ActorRef<CompletionMsg>,
        msg: CompletionMsg,
        state: &mut CompletionState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            CompletionMsg::Register(target, f) => {
                state.completers.insert(target, f);
            }
            CompletionMsg::Complete { params, ctx, reply } => {
                let target = match params.reference {
                    CompletionRef::Prompt { name } => {
                        CompletionTarget::Prompt(name, params.argument.name)
                    }
                    CompletionRef::Resource { uri } => {
                        CompletionTarget::Resource(uri, params.argument.name)
                    }
                };
                let context = params.context.and_then(|c| c.arguments).unwrap_or_default();
                let completer = state
                    .completers
                    .get(&target)
                    .filter(|_| state.admits(&target, ctx.principal()))
                    .cloned();
                let value = params.argument.value;
                tokio::spawn(async move {
                    let found = match completer {
                        Some(f) => f(ctx, value, context).await,
                        // Unknown targets (and those the caller may not see) complete to
                        // nothing rather than failing: the client asked for suggestions, and
                        // there are none.
                        None => Completions::default(),
                    };
                    let mut values = found.values;
                    let listed = values.len();
                    values.truncate(MAX_VALUES);
                    reply.ok(&CompleteAnswer {
                        completion: Completion {
                            has_more: found.has_more.unwrap_or(false) || listed > values.len(),
                            total: found.total.unwrap_or(listed).max(values.len()),
                            values,
                        },
                    })
                });
            }
        }
        Ok(())
    }
}
