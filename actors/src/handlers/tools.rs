//! The tool catalog and the tool call.
//!
//! The ToolCatalog actor owns the tool registry: it registers and removes tools (and tells
//! listeners `tools/list_changed`) and answers `tools/list`. A `tools/call` never passes
//! through it: [`call`] starts from the registry's shared snapshot, right where the request
//! was read, polled once in place and spawned only if it is not ready (`exec`), so a
//! restarting catalog delays no call and one slow tool delays nothing.

use crate::context::{RequestContext, TaskRole};
use crate::error::HandlerError;
use crate::exec::{self, Binding, Digest, RetryInput};
use crate::forward::{ForwardFn, RawArgs, RawResult};
use crate::mrtr::StateSealer;
use crate::registry::{list_page, Registry};
use crate::reply::Reply;
use crate::tasks::{self, CallPlan, TaskHint, Tasks};
use crate::tool::{Handler, ToolArgs, ToolDef};
use crate::ListSettings;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::sync::Arc;
use toolyard_proto::method;
use toolyard_proto::{CallToolResult, ErrorObject, InputResponses, ListToolsResult};

/// `tools/call` params as parsed once at the edge; arguments stay raw until validated.
/// `M` is what `_meta` is read into: the request's meta, or `IgnoredAny` where the edge has
/// read it already (the router: parsing it again was a `RequestMeta` built and dropped for
/// every modern call).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CallParams<M = Option<Box<toolyard_proto::RequestMeta>>> {
    /// Tool name.
    pub name: String,
    /// Raw arguments.
    #[serde(default)]
    pub arguments: Option<Box<RawValue>>,
    /// Modern retry: answers to the previous round's input requests.
    #[serde(default)]
    pub input_responses: Option<InputResponses>,
    /// Modern retry: the previous round's sealed state.
    #[serde(default)]
    pub request_state: Option<String>,
    /// 2025-11-25: run the call as a task.
    #[serde(default)]
    pub task: Option<TaskHint>,
    /// The request's `_meta`, when the edge reads it together with the rest (a direct
    /// launch); taken out before the call runs.
    #[serde(rename = "_meta", default)]
    pub meta: M,
}

impl CallParams<serde::de::IgnoredAny> {
    /// The params with no `_meta` (it was read elsewhere).
    pub(crate) fn without_meta(self) -> CallParams {
        CallParams {
            name: self.name,
            arguments: self.arguments,
            input_responses: self.input_responses,
            request_state: self.request_state,
            task: self.task,
            meta: None,
        }
    }
}

/// Messages of the ToolCatalog.
pub(crate) enum ToolMsg {
    /// `tools/list`.
    List {
        /// Pagination cursor.
        cursor: Option<String>,
        /// Who asks: what it may see ([`crate::Audience`]).
        principal: Option<Arc<str>>,
        /// Where the answer goes.
        reply: Reply,
    },
    /// Fails the actor (supervision tests and fault injection).
    #[doc(hidden)]
    Crash,
}

pub(crate) struct ToolCatalog;

pub(crate) struct ToolState {
    pub(crate) registry: Arc<Registry<ToolDef>>,
    pub(crate) list: ListSettings,
}

impl Actor for ToolCatalog {
    type Msg = ToolMsg;
    type State = ToolState;
    type Arguments = ToolState;

    async fn pre_start(
        &self,
        _myself: ActorRef<ToolMsg>,
        args: ToolState,
    ) -> Result<ToolState, ActorProcessingErr> {
        Ok(args)
    }

    async fn handle(
        &self,
        _myself: ActorRef<ToolMsg>,
        msg: ToolMsg,
        state: &mut ToolState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            ToolMsg::List {
                cursor,
                principal,
                reply,
            } => list(state, cursor.as_deref(), principal.as_deref(), reply),
            ToolMsg::Crash => return Err("tool handler crash requested".into()),
        }
        Ok(())
    }
}

fn list(state: &ToolState, cursor: Option<&str>, principal: Option<&str>, reply: Reply) {
    let modern = reply.is_modern();
    match list_page(
        &state.registry,
        cursor,
        &state.list,
        modern,
        principal,
        |d| d.tool.clone(),
    ) {
        Ok(p) => reply.ok(&ListToolsResult {
            tools: p.items,
            next_cursor: p.next_cursor,
            ttl_ms: p.ttl_ms,
            cache_scope: p.cache_scope,
            result_type: None,
            meta: None,
        }),
        Err(e) => reply.err(e),
    }
}

/// What starting a `tools/call` needs: the registry snapshot source, the MRTR sealer and
/// the task store. These are shared, read-mostly values, so a call starts in the caller's
/// own task (the transport's reader or an HTTP handler) without a hop through the
/// ToolCatalog actor, which stays the registry's only writer and answers `tools/list`.
pub(crate) struct CallSite<'a> {
    pub(crate) registry: &'a Registry<ToolDef>,
    pub(crate) sealer: &'a StateSealer,
    pub(crate) tasks: Option<&'a Arc<Tasks>>,
    pub(crate) unknown: &'a arc_swap::ArcSwapOption<crate::server::UnknownToolFn>,
}

/// Starts a tool call: checks run here, the tool's own code runs in [`exec::run_or_spawn`].
#[allow(
    clippy::needless_pass_by_value,
    reason = "takes ownership: callers hand the value over and never use it again, so a borrow would only add noise at every call site"
)]
pub(crate) fn call(site: CallSite<'_>, params: CallParams, ctx: RequestContext, reply: Reply) {
    // A tool the caller may not see is one it cannot call, answered as unknown.
    let def = site.registry.get_for(&params.name, ctx.principal());
    let Some(def) = def else {
        let explained = site
            .unknown
            .load()
            .as_ref()
            .and_then(|explain| explain(&params.name));
        return reply.err(explained.unwrap_or_else(|| {
            ErrorObject::invalid_params(format!("Unknown tool: {}", params.name))
        }));
    };
    if let Some(required) = &def.required_capabilities {
        if !ctx.client_capabilities().satisfies(required) {
            return reply.err(
                ErrorObject::missing_capability(serde_json::Value::Object(required.clone()))
                    .with_message(format!(
                        "Tool `{}` requires client capabilities the caller did not declare",
                        params.name
                    )),
            );
        }
    }
    let sealer = site.sealer.clone();
    // Only task-capable tools, and calls asking for a task, look further.
    let mut plan = None;
    if def.task_support.is_some() || params.task.is_some() {
        match ctx.task_role() {
            TaskRole::Own => match tasks::plan_call(site.tasks, &def, params.task.as_ref(), &ctx) {
                Ok(Some((p, task_ctx))) => plan = Some((Box::new(CallPlan::Task(p)), task_ctx)),
                Ok(None) => {}
                Err(e) => return reply.err(e),
            },
            TaskRole::HandOff if def.deferred_task && ctx.is_modern() => {
                let (p, task_ctx) = tasks::plan_handoff(&ctx);
                plan = Some((Box::new(p), task_ctx));
            }
            TaskRole::HandOff | TaskRole::Body => {}
        }
    }
    let is_task = plan.is_some();
    let (plan, ctx) = match plan {
        Some((plan, task_ctx)) => (Some(plan), task_ctx),
        None => (None, ctx),
    };
    let params = CallInput::from(params);
    // Each kind of handler gets a future of its own, allocated whole per call: a
    // forwarding call's is not sized for a typed call's larger state (and stays under
    // the 1 KiB past which glibc's malloc consolidates its fast bins on every call).
    let call: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> = match &def.handler {
        Handler::Typed(_) => Box::pin(run_call(def, params, ctx, reply, sealer, plan)),
        Handler::Forwarding(f) => {
            let f = f.clone();
            Box::pin(run_forwarding(f, params, ctx, reply, sealer, plan))
        }
    };
    if is_task {
        tokio::spawn(call);
    } else {
        exec::run_or_spawn(call);
    }
}

async fn run_call(
    def: Arc<ToolDef>,
    params: CallInput,
    ctx: RequestContext,
    reply: Reply,
    sealer: StateSealer,
    task: Option<Box<CallPlan>>,
) {
    let Handler::Typed(handler) = &def.handler else {
        // `call` sends forwarding tools to `run_forwarding`.
        return reply.err(ErrorObject::internal(
            "a forwarding tool reached the typed path",
        ));
    };
    let handler = handler.clone();
    let args: serde_json::Value = match &params.arguments {
        None => serde_json::Value::Object(Default::default()),
        Some(raw) => match serde_json::from_str(raw.get()) {
            Ok(v) => v,
            Err(e) => {
                return reply.ok(&CallToolResult::error_text(format!(
                    "Invalid arguments: {e}"
                )))
            }
        },
    };
    match def.validate(&args) {
        Ok(()) => {}
        Err(HandlerError::Protocol(e)) => return reply.err(e),
        Err(e) => return reply.ok(&CallToolResult::error_text(e.to_string())),
    }
    let binding = Binding {
        method: method::TOOLS_CALL,
        target: params.name,
        digest: if ctx.is_modern() {
            Digest::ToolArgs(params.arguments)
        } else {
            Digest::None
        },
    };
    let retry = RetryInput {
        input_responses: params.input_responses,
        request_state: params.request_state,
    };
    if let Err(e) = exec::restore_round(&ctx, &sealer, &binding, retry) {
        return reply.err(e);
    }
    let fut = handler(ctx.clone(), ToolArgs(args));
    match task {
        None => {
            exec::run(ctx, reply, sealer, binding, fut, |e: &HandlerError| {
                Some(CallToolResult::error_text(e.to_string()))
            })
            .await
        }
        // Boxed: a task-augmented call is rare and its driver's future large, and this
        // future is allocated whole for every call (smaller is cheaper to allocate).
        Some(plan) => {
            let on_failure = |e: &HandlerError| Some(CallToolResult::error_text(e.to_string()));
            Box::pin(tasks::drive(
                *plan, ctx, reply, sealer, binding, fut, on_failure,
            ))
            .await
        }
    }
}

/// What a call's future keeps of its params: taken apart before the future is made, so
/// the fields it never reads (the task hint, `_meta`) are not carried in it.
struct CallInput {
    name: String,
    arguments: Option<Box<RawValue>>,
    input_responses: Option<InputResponses>,
    request_state: Option<String>,
}

impl From<CallParams> for CallInput {
    fn from(p: CallParams) -> Self {
        CallInput {
            name: p.name,
            arguments: p.arguments,
            input_responses: p.input_responses,
            request_state: p.request_state,
        }
    }
}

/// A forwarding tool's call (`crate::forward`): the arguments go on as the caller's raw
/// JSON, parsed only when a modern round must be bound to them, and the upstream's raw
/// result is the answer.
async fn run_forwarding(
    handler: ForwardFn,
    params: CallInput,
    ctx: RequestContext,
    reply: Reply,
    sealer: StateSealer,
    task: Option<Box<CallPlan>>,
) {
    let args = match RawArgs::new(params.arguments) {
        Ok(args) => args,
        Err(e) => return reply.ok(&CallToolResult::error_text(e.to_string())),
    };
    // The arguments go to the handler: a modern call keeps their text for a round's digest.
    let digest = if ctx.is_modern() {
        Digest::ToolArgs(args.0.clone())
    } else {
        Digest::None
    };
    let binding = Binding {
        method: method::TOOLS_CALL,
        target: params.name,
        digest,
    };
    let retry = RetryInput {
        input_responses: params.input_responses,
        request_state: params.request_state,
    };
    if let Err(e) = exec::restore_round(&ctx, &sealer, &binding, retry) {
        return reply.err(e);
    }
    let fut = handler(ctx.clone(), args);
    match task {
        None => {
            exec::run(ctx, reply, sealer, binding, fut, |e: &HandlerError| {
                Some(RawResult::error_text(e.to_string()))
            })
            .await
        }
        Some(plan) => {
            let on_failure = |e: &HandlerError| Some(RawResult::error_text(e.to_string()));
            // Boxed, as in `run_call`.
            Box::pin(tasks::drive(
                *plan, ctx, reply, sealer, binding, fut, on_failure,
            ))
            .await
        }
    }
}

#[cfg(test)]
mod tests {
    /// The size of the future an async fn with these six arguments returns.
    fn future_size<A, B, C, D, E, G, F: std::future::Future>(
        _: impl Fn(A, B, C, D, E, G) -> F,
    ) -> usize {
        std::mem::size_of::<F>()
    }

    /// A call's future is allocated whole for every `tools/call`. glibc's malloc serves
    /// requests up to 1016 bytes from its per-thread cache; a larger one first consolidates
    /// the fast bins, which perf showed at 2-3% of a gateway's CPU. Keep both kinds under it
    /// (box what a rare path needs, take apart what is not carried to the end).
    #[test]
    fn a_calls_future_stays_under_the_size_glibc_serves_from_its_thread_cache() {
        let typed = future_size(super::run_call);
        let forwarding = future_size(super::run_forwarding);
        assert!(typed <= 1016, "the typed call's future is {typed} bytes");
        assert!(
            forwarding <= 1016,
            "the forwarding call's future is {forwarding} bytes"
        );
    }
}
