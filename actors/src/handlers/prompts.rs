//! The PromptHandler actor: the prompt registry; each `prompts/get` runs in a task.

use crate::context::RequestContext;
use crate::exec::{self, Binding, Digest, RetryInput};
use crate::mrtr::{digest, StateSealer};
use crate::registry::{list_page, Registry};
use crate::reply::Reply;
use crate::resource::PromptDef;
use crate::ListSettings;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use toolyard_proto::method;
use toolyard_proto::{ErrorObject, InputResponses, ListPromptsResult};

/// `prompts/get` params.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct GetParams {
    /// Prompt name.
    pub name: String,
    /// Arguments (string values).
    #[serde(default)]
    pub arguments: Option<HashMap<String, String>>,
    /// Modern retry answers.
    #[serde(default)]
    pub input_responses: Option<InputResponses>,
    /// Modern retry state.
    #[serde(default)]
    pub request_state: Option<String>,
}

/// Messages of the PromptHandler.
pub(crate) enum PromptMsg {
    /// `prompts/list`.
    List {
        /// Cursor.
        cursor: Option<String>,
        /// Who asks: what it may see ([`crate::Audience`]).
        principal: Option<Arc<str>>,
        /// Answer.
        reply: Reply,
    },
    /// `prompts/get`.
    Get {
        /// Params.
        params: GetParams,
        /// Context.
        ctx: RequestContext,
        /// Answer.
        reply: Reply,
    },
}

pub(crate) struct PromptHandler;

pub(crate) struct PromptState {
    pub(crate) registry: Arc<Registry<PromptDef>>,
    pub(crate) sealer: StateSealer,
    pub(crate) list: ListSettings,
}

impl Actor for PromptHandler {
    type Msg = PromptMsg;
    type State = PromptState;
    type Arguments = PromptState;

    async fn pre_start(
        &self,
        _myself: ActorRef<PromptMsg>,
        args: PromptState,
    ) -> Result<PromptState, ActorProcessingErr> {
        Ok(args)
    }

    async fn handle(
        &self,
        _myself: ActorRef<PromptMsg>,
        msg: PromptMsg,
        state: &mut PromptState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            PromptMsg::List {
                cursor,
                principal,
                reply,
            } => {
                let modern = reply.is_modern();
                let page = list_page(
                    &state.registry,
                    cursor.as_deref(),
                    &state.list,
                    modern,
                    principal.as_deref(),
                    |d| d.prompt.clone(),
                );
                match page {
                    Ok(p) => reply.ok(&ListPromptsResult {
                        prompts: p.items,
                        next_cursor: p.next_cursor,
                        ttl_ms: p.ttl_ms,
                        cache_scope: p.cache_scope,
                        result_type: None,
                        meta: None,
                    }),
                    Err(e) => reply.err(e),
                }
            }
            PromptMsg::Get { params, ctx, reply } => get(state, params, ctx, reply),
        }
        Ok(())
    }
}

fn get(state: &PromptState, params: GetParams, ctx: RequestContext, reply: Reply) {
    let def = state.registry.get_for(&params.name, ctx.principal());
    let Some(def) = def else {
        return reply.err(ErrorObject::invalid_params(format!(
            "Unknown prompt: {}",
            params.name
        )));
    };
    let args = params.arguments.unwrap_or_default();
    let missing: Vec<&str> = def
        .prompt
        .arguments
        .iter()
        .flatten()
        .filter(|a| a.required == Some(true) && !args.contains_key(&a.name))
        .map(|a| a.name.as_str())
        .collect();
    if !missing.is_empty() {
        return reply.err(ErrorObject::invalid_params(format!(
            "Missing required argument(s) of prompt `{}`: {}",
            params.name,
            missing.join(", ")
        )));
    }
    let sealer = state.sealer.clone();
    let get = def.get.clone();
    tokio::spawn(async move {
        let sorted: BTreeMap<_, _> = args.iter().collect();
        let canonical = serde_json::to_string(&sorted).unwrap_or_default();
        let binding = Binding {
            method: method::PROMPTS_GET,
            digest: Digest::Ready(digest(&[params.name.as_bytes(), canonical.as_bytes()])),
            target: params.name,
        };
        let retry = RetryInput {
            input_responses: params.input_responses,
            request_state: params.request_state,
        };
        if let Err(e) = exec::restore_round(&ctx, &sealer, &binding, retry) {
            return reply.err(e);
        }
        let fut = get(ctx.clone(), args);
        exec::run(ctx, reply, sealer, binding, fut, |_| None).await
    });
}
