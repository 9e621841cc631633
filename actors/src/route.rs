//! Routing: method name -> the handler that serves it ([`route`]), the shared table of
//! handler actors ([`Routes`]), and the `server/discover` result.
//!
//! The routing table is read-mostly and shared ([`Routes`] behind an `ArcSwap`): the
//! connection looks the handler up and casts the request straight to it (or, for
//! `tools/call`, starts the call in place), so the request path has no hop through a routing
//! actor. When the supervisor restarts a handler it stores a new table. Methods no built-in
//! handler owns go to the [`CustomMethods`](crate::handlers::custom) actor.

use crate::context::RequestContext;
use crate::event_bus::BusMsg;
use crate::handlers::completion::{CompleteParams, CompletionMsg};
use crate::handlers::custom::CustomMsg;
use crate::handlers::prompts::{GetParams, PromptMsg};
use crate::handlers::resources::{ReadParams, ResourceMsg};
use crate::handlers::tools::{CallParams, ToolMsg};
use crate::reply::Reply;
use crate::server::ServerCore;
use crate::tasks::Tasks;
use ractor::ActorRef;
use serde::Deserialize;
use serde_json::value::RawValue;
use std::sync::Arc;
use toolyard_proto::method;
use toolyard_proto::{jsonrpc, DiscoverResult, ProtocolVersion};

/// The handler actors of a server.
#[derive(Clone)]
pub(crate) struct Routes {
    pub(crate) custom: ActorRef<CustomMsg>,
    pub(crate) tools: ActorRef<ToolMsg>,
    pub(crate) resources: ActorRef<ResourceMsg>,
    pub(crate) prompts: ActorRef<PromptMsg>,
    pub(crate) completion: ActorRef<CompletionMsg>,
    pub(crate) bus: ActorRef<BusMsg>,
    /// Present when the server has a task store.
    pub(crate) tasks: Option<Arc<Tasks>>,
}

/// The `server/discover` result.
pub(crate) fn discover(core: &ServerCore) -> DiscoverResult {
    let mut meta = serde_json::Map::new();
    meta.insert(
        toolyard_proto::meta::SERVER_INFO.into(),
        serde_json::to_value(&core.info).unwrap_or_default(),
    );
    DiscoverResult {
        supported_versions: ProtocolVersion::supported_strs()
            .into_iter()
            .map(String::from)
            .collect(),
        capabilities: core.modern_capabilities.clone(),
        instructions: core.instructions.clone(),
        ttl_ms: Some(core.list.ttl_ms),
        cache_scope: Some(core.list.cache_scope),
        result_type: None,
        meta: Some(meta),
    }
}

#[derive(Deserialize, Default)]
struct Paginated {
    #[serde(default)]
    cursor: Option<String>,
}

/// Routes a request both generations share to its handler actor (`tools/call` starts
/// right here, from the shared registry: see `handlers::tools::call`).
pub(crate) fn route(
    core: &ServerCore,
    routes: &Routes,
    method: &str,
    params: Option<Box<RawValue>>,
    ctx: RequestContext,
    reply: Reply,
) {
    fn parsed<T: for<'de> Deserialize<'de>>(
        params: &Option<Box<RawValue>>,
        reply: Reply,
    ) -> Option<(T, Reply)> {
        match jsonrpc::params::<T>(params.as_deref()) {
            Ok(p) => Some((p, reply)),
            Err(e) => {
                reply.err(e);
                None
            }
        }
    }
    // A cast only fails when the actor is gone; the message (and its Reply) comes back and
    // is dropped, which answers the caller with an internal error.
    match method {
        method::TOOLS_CALL => {
            // `_meta` was read before the request got here (its context is `ctx`).
            let call = parsed::<CallParams<serde::de::IgnoredAny>>(&params, reply);
            if let Some((params, reply)) = call {
                crate::handlers::tools::call(core.call_site(), params.without_meta(), ctx, reply);
            }
        }
        method::TOOLS_LIST => {
            if let Some((p, reply)) = parsed::<Paginated>(&params, reply) {
                let _ = routes.tools.cast(ToolMsg::List {
                    cursor: p.cursor,
                    principal: ctx.principal_shared(),
                    reply,
                });
            }
        }
        method::RESOURCES_LIST => {
            if let Some((p, reply)) = parsed::<Paginated>(&params, reply) {
                let _ = routes.resources.cast(ResourceMsg::List {
                    cursor: p.cursor,
                    principal: ctx.principal_shared(),
                    reply,
                });
            }
        }
        method::RESOURCES_TEMPLATES_LIST => {
            if let Some((p, reply)) = parsed::<Paginated>(&params, reply) {
                let _ = routes.resources.cast(ResourceMsg::ListTemplates {
                    cursor: p.cursor,
                    principal: ctx.principal_shared(),
                    reply,
                });
            }
        }
        method::RESOURCES_READ => {
            if let Some((params, reply)) = parsed::<ReadParams>(&params, reply) {
                let _ = routes
                    .resources
                    .cast(ResourceMsg::Read { params, ctx, reply });
            }
        }
        method::PROMPTS_LIST => {
            if let Some((p, reply)) = parsed::<Paginated>(&params, reply) {
                let _ = routes.prompts.cast(PromptMsg::List {
                    cursor: p.cursor,
                    principal: ctx.principal_shared(),
                    reply,
                });
            }
        }
        method::PROMPTS_GET => {
            if let Some((params, reply)) = parsed::<GetParams>(&params, reply) {
                let _ = routes.prompts.cast(PromptMsg::Get { params, ctx, reply });
            }
        }
        method::COMPLETION_COMPLETE => {
            if let Some((params, reply)) = parsed::<CompleteParams>(&params, reply) {
                let _ = routes
                    .completion
                    .cast(CompletionMsg::Complete { params, ctx, reply });
            }
        }
        method::TASKS_GET
        | method::TASKS_UPDATE
        | method::TASKS_CANCEL
        | method::TASKS_RESULT
        | method::TASKS_LIST
            if routes.tasks.is_some() =>
        {
            if let Some(tasks) = &routes.tasks {
                crate::tasks::handle(tasks, method, params, ctx, reply);
            }
        }
        _ => {
            let _ = routes.custom.cast(CustomMsg::Other {
                method: method.to_owned(),
                params,
                ctx,
                reply,
            });
        }
    }
}
