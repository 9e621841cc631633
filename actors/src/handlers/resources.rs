//! The ResourceHandler actor: static resources, URI templates matched in reverse, reads run
//! in tasks.

use crate::context::RequestContext;
use crate::exec::{self, Binding, Digest, RetryInput};
use crate::mrtr::StateSealer;
use crate::registry::{list_page, Registry};
use crate::reply::Reply;
use crate::resource::{ResourceDef, ResourceRequest, TemplateDef};
use crate::ListSettings;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use serde::Deserialize;
use std::sync::Arc;
use toolyard_proto::error::code;
use toolyard_proto::method;
use toolyard_proto::{
    ErrorObject, InputResponses, ListResourceTemplatesResult, ListResourcesResult,
    ReadResourceResult,
};

/// `resources/read` params.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ReadParams {
    /// The URI to read.
    pub uri: String,
    /// Modern retry answers.
    #[serde(default)]
    pub input_responses: Option<InputResponses>,
    /// Modern retry state.
    #[serde(default)]
    pub request_state: Option<String>,
}

/// Messages of the ResourceHandler.
pub(crate) enum ResourceMsg {
    /// `resources/list`.
    List {
        /// Cursor.
        cursor: Option<String>,
        /// Who asks: what it may see ([`crate::Audience`]).
        principal: Option<Arc<str>>,
        /// Answer.
        reply: Reply,
    },
    /// `resources/templates/list`.
    ListTemplates {
        /// Cursor.
        cursor: Option<String>,
        /// Who asks: what it may see ([`crate::Audience`]).
        principal: Option<Arc<str>>,
        /// Answer.
        reply: Reply,
    },
    /// `resources/read`.
    Read {
        /// Params.
        params: ReadParams,
        /// Context.
        ctx: RequestContext,
        /// Answer.
        reply: Reply,
    },
    /// Fails the actor (supervision tests).
    #[doc(hidden)]
    Crash,
}

pub(crate) struct ResourceHandler;

pub(crate) struct ResourceState {
    pub(crate) resources: Arc<Registry<ResourceDef>>,
    pub(crate) templates: Arc<Registry<TemplateDef>>,
    pub(crate) sealer: StateSealer,
    pub(crate) list: ListSettings,
}

impl Actor for ResourceHandler {
    type Msg = ResourceMsg;
    type State = ResourceState;
    type Arguments = ResourceState;

    async fn pre_start(
        &self,
        _myself: ActorRef<ResourceMsg>,
        args: ResourceState,
    ) -> Result<ResourceState, ActorProcessingErr> {
        Ok(args)
    }

    async fn handle(
        &self,
        _myself: ActorRef<ResourceMsg>,
        msg: ResourceMsg,
        state: &mut ResourceState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            ResourceMsg::List {
                cursor,
                principal,
                reply,
            } => {
                let modern = reply.is_modern();
                let page = list_page(
                    &state.resources,
                    cursor.as_deref(),
                    &state.list,
                    modern,
                    principal.as_deref(),
                    |d| d.resource.clone(),
                );
                match page {
                    Ok(p) => reply.ok(&ListResourcesResult {
                        resources: p.items,
                        next_cursor: p.next_cursor,
                        ttl_ms: p.ttl_ms,
                        cache_scope: p.cache_scope,
                        result_type: None,
                        meta: None,
                    }),
                    Err(e) => reply.err(e),
                }
            }
            ResourceMsg::ListTemplates {
                cursor,
                principal,
                reply,
            } => {
                let modern = reply.is_modern();
                let page = list_page(
                    &state.templates,
                    cursor.as_deref(),
                    &state.list,
                    modern,
                    principal.as_deref(),
                    |d| d.template.clone(),
                );
                match page {
                    Ok(p) => reply.ok(&ListResourceTemplatesResult {
                        resource_templates: p.items,
                        next_cursor: p.next_cursor,
                        ttl_ms: p.ttl_ms,
                        cache_scope: p.cache_scope,
                        result_type: None,
                        meta: None,
                    }),
                    Err(e) => reply.err(e),
                }
            }
            ResourceMsg::Read { params, ctx, reply } => read(state, params, ctx, reply),
            ResourceMsg::Crash => return Err("resource handler crash requested".into()),
        }
        Ok(())
    }
}

fn read(state: &ResourceState, params: ReadParams, ctx: RequestContext, reply: Reply) {
    // What the caller may not see it cannot read: answered as a URI nothing serves.
    let principal = ctx.principal();
    let found = match state.resources.get_for(&params.uri, principal) {
        Some(def) => Some((def.read.clone(), Default::default())),
        None => state
            .templates
            .load()
            .values()
            .filter_map(|t| t.for_caller(principal))
            .find_map(|t| {
                t.matcher
                    .matches(&params.uri)
                    .map(|vars| (t.read.clone(), vars))
            }),
    };
    let Some((read, vars)) = found else {
        let modern = reply.is_modern();
        return reply.err(not_found(&params.uri, modern));
    };
    let sealer = state.sealer.clone();
    let modern = reply.is_modern();
    let list = state.list;
    tokio::spawn(async move {
        let binding = Binding {
            method: method::RESOURCES_READ,
            digest: Digest::Target,
            target: params.uri.clone(),
        };
        let retry = RetryInput {
            input_responses: params.input_responses,
            request_state: params.request_state,
        };
        if let Err(e) = exec::restore_round(&ctx, &sealer, &binding, retry) {
            return reply.err(e);
        }
        let request = ResourceRequest {
            uri: params.uri,
            vars,
        };
        let fut = read(ctx.clone(), request);
        let fut = async move {
            fut.await.map(|mut read: ReadResourceResult| {
                if modern {
                    read.ttl_ms.get_or_insert(list.resource_ttl_ms);
                    read.cache_scope
                        .get_or_insert(toolyard_proto::CacheScope::Private);
                } else {
                    (read.ttl_ms, read.cache_scope) = (None, None);
                }
                read.result_type = None;
                read
            })
        };
        exec::run(ctx, reply, sealer, binding, fut, |_| None).await
    });
}

/// The answer to a read of a URI nothing serves (to this caller).
pub(crate) fn not_found(uri: &str, modern: bool) -> ErrorObject {
    // 2026-07-28 moved "resource not found" to -32602; legacy revisions use -32002.
    let code = if modern {
        code::INVALID_PARAMS
    } else {
        code::RESOURCE_NOT_FOUND_LEGACY
    };
    ErrorObject::new(code, format!("Resource not found: {uri}"))
        .with_data(serde_json::json!({ "uri": uri }))
}
