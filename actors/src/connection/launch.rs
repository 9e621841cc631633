//! Starting a request that passed its checks: the layers' start hooks, its context and
//! answer channel, then the tool call in place or a cast to its handler
//! ([`launch`]); and serving a stateless modern request without a connection
//! ([`serve_stateless`]). [`Delivery`] says where one request's answer goes.

use crate::context::{Caller, Channel, ContextInner, Parent, RequestContext, Round, TaskRole};
use crate::gate;
use crate::handlers::tools::CallParams;
use crate::middleware::{RequestInfo, TransportTrace, Watch};
use crate::moment::Moment;
use crate::reply::{InflightRelease, Reply};
use crate::route::route;
use crate::server::ServerCore;
use crate::sink::Sink;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;
use toolyard_proto::jsonrpc::{self, Request};
use toolyard_proto::method;
use toolyard_proto::{ErrorObject, ProgressToken, ProtocolVersion, RequestMeta};

use super::inflight::Inflight;

/// Where one request's answer and notifications go, when not to the connection's own sink
/// (an HTTP POST's response stream), and the token that stream's closing cancels.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// The request's own sink.
    pub sink: Sink,
    /// Cancelled when the response stream closes.
    pub cancel: CancellationToken,
    /// Whether the request enters the connection's in-flight table (so
    /// `notifications/cancelled` can find it). Sessionless requests share one connection and
    /// may reuse ids, so they are not tracked.
    pub track: bool,
    /// The authenticated caller of this request, when the transport established one per
    /// request (sessionless HTTP); otherwise the connection's principal applies.
    pub principal: Option<Arc<str>>,
    /// Where this request came from, when the transport knows it per request (HTTP);
    /// otherwise the connection's peer applies.
    pub peer: Option<Arc<crate::middleware::Peer>>,
    /// The transport's own W3C trace headers for this request (HTTP's, NATS'), if any.
    pub transport_trace: Option<Arc<TransportTrace>>,
}

/// The parts of a request's `_meta` a running request still needs.
#[derive(Default)]
pub(crate) struct LaunchMeta {
    pub(crate) progress_token: Option<ProgressToken>,
    pub(crate) traceparent: Option<String>,
    pub(crate) tracestate: Option<String>,
    pub(crate) baggage: Option<String>,
}

impl LaunchMeta {
    /// What an edge read of `_meta` leaves for the context.
    pub(super) fn of(meta: Option<Box<RequestMeta>>) -> Option<Box<LaunchMeta>> {
        meta.and_then(|m| Self::from_meta(*m))
    }

    /// `None` when the request has none of them (the usual case: no allocation).
    pub(super) fn from_meta(meta: RequestMeta) -> Option<Box<LaunchMeta>> {
        if meta.progress_token.is_none() && meta.traceparent.is_none() && meta.baggage.is_none() {
            return None;
        }
        Some(Box::new(LaunchMeta {
            progress_token: meta.progress_token,
            traceparent: meta.traceparent,
            tracestate: meta.tracestate,
            baggage: meta.baggage,
        }))
    }
}

/// A request that passed its connection's (or the HTTP edge's) checks, ready to run.
pub(crate) struct Launch {
    pub(crate) req: Request,
    /// `tools/call` params already read at the edge (then `req.params` is not read again).
    pub(crate) call: Option<CallParams>,
    pub(crate) version: ProtocolVersion,
    pub(crate) caller: Arc<Caller>,
    pub(crate) channel: Channel,
    /// What the request's context keeps of its `_meta` (the rest was read at the edge):
    /// boxed, so the launch stays small to move.
    pub(crate) meta: Option<Box<LaunchMeta>>,
    pub(crate) modern: bool,
    pub(crate) out: Sink,
    pub(crate) cancel: CancellationToken,
    pub(crate) session_id: Option<Arc<str>>,
    pub(crate) release: Option<Arc<Inflight>>,
    /// The delivery's [`Delivery::transport_trace`].
    pub(crate) transport_trace: Option<Arc<TransportTrace>>,
}

/// Runs the layers' start hooks, builds the request's context and answer channel, and casts
/// the request to its handler.
pub(crate) fn launch(core: &ServerCore, l: Launch) {
    let Launch {
        req,
        call,
        version,
        caller,
        channel,
        meta,
        modern,
        out,
        cancel,
        session_id,
        release,
        transport_trace,
    } = l;
    let watch = if core.layers.is_empty() || !core.layers.observe(&req.method) {
        None
    } else {
        let info = RequestInfo {
            method: shared_name(&req.method),
            target: match &call {
                Some(c) => Some(shared_name(&c.name)),
                None => target_of(&req),
            },
            id: req.id.clone(),
            protocol_version: Some(version),
            session_id: session_id.clone(),
            principal: caller.principal.clone(),
            peer: caller.peer.clone(),
            traceparent: meta
                .as_ref()
                .and_then(|m| m.traceparent.as_deref())
                .map(Into::into),
            tracestate: meta
                .as_ref()
                .and_then(|m| m.tracestate.as_deref())
                .map(Into::into),
            transport_trace: transport_trace.clone(),
            arguments: if core.layers.captures() {
                arguments_of(&req, call.as_ref())
            } else {
                None
            },
            started: Moment::now(),
        };
        match core.layers.start(&info) {
            Ok(completions) => Some(Box::new(Watch {
                info,
                completions,
                captures: core.layers.captures(),
            })),
            Err(e) => {
                if let Some(r) = &release {
                    r.release(&req.id);
                }
                out.send(jsonrpc::error_bytes(Some(&req.id), &e));
                return;
            }
        }
    };
    // A tracing layer's span is the parent of what the handler calls out to; else the
    // caller's own context goes on as it came: `_meta`'s, else the transport's (an HTTP or
    // NATS `traceparent` header). Baggage goes on as it came, with or without a context.
    let layer_trace = watch
        .as_ref()
        .and_then(|w| w.completions.iter().rev().find_map(|c| c.handler_trace()));
    // `_meta`'s parts are moved into the context, not copied.
    let LaunchMeta {
        progress_token,
        traceparent: meta_parent,
        tracestate: meta_state,
        baggage: meta_baggage,
    } = meta.map(|m| *m).unwrap_or_default();
    let transport = transport_trace.as_deref();
    let (traceparent, tracestate) = match (layer_trace, meta_parent) {
        (Some((parent, state)), _) => (Some(parent), state),
        (None, Some(parent)) => (Some(Parent::Text(parent)), meta_state),
        (None, None) => match transport {
            Some(TransportTrace {
                traceparent: Some(parent),
                tracestate,
                ..
            }) => (
                Some(Parent::Text(parent.to_string())),
                tracestate.as_deref().map(Into::into),
            ),
            _ => (None, None),
        },
    };
    let baggage =
        meta_baggage.or_else(|| transport.and_then(|t| t.baggage.as_deref()).map(Into::into));
    let trace = (traceparent.is_some() || baggage.is_some()).then(|| {
        Arc::new(crate::context::TraceContext {
            parent: traceparent,
            tracestate,
            baggage,
        })
    });
    let mut reply = Reply::new(req.id.clone(), out.clone(), modern).with_watch(watch);
    if let Some(r) = release {
        reply = reply.with_release(r);
    }
    let ctx = RequestContext {
        inner: Arc::new(ContextInner {
            id: req.id,
            version,
            caller,
            cancel,
            trace,
            progress_token,
            sink: out,
            channel,
            session_id,
            task: None,
        }),
    };
    match call {
        Some(params) => crate::handlers::tools::call(core.call_site(), params, ctx, reply),
        None => route(core, &core.routes(), &req.method, req.params, ctx, reply),
    }
}

/// The tool, prompt or resource a request names (`params.name` or `params.uri`), for the
/// layers; read only when layers are installed, and only for the methods that name one (a
/// listing, a ping or a completion is not parsed again for it).
/// A `tools/call`'s arguments as JSON text, from the edge's parse when there was one.
fn arguments_of(req: &Request, call: Option<&CallParams>) -> Option<Arc<str>> {
    if req.method != method::TOOLS_CALL {
        return None;
    }
    if let Some(c) = call {
        return c.arguments.as_deref().map(|a| a.get().into());
    }
    #[derive(serde::Deserialize)]
    struct Arguments<'a> {
        #[serde(borrow)]
        arguments: Option<&'a serde_json::value::RawValue>,
    }
    let params = req.params.as_deref()?;
    let a: Arguments<'_> = serde_json::from_str(params.get()).ok()?;
    a.arguments.map(|a| a.get().into())
}

/// `name` (a request's method, or the tool it calls) as a shared string. The same few
/// names come again and again, so the last ones seen are kept per thread and shared: a
/// layer's `RequestInfo` then costs no allocation for them (two per observed call before).
fn shared_name(name: &str) -> Arc<str> {
    const KEPT: usize = 16;
    thread_local! {
        static NAMES: std::cell::RefCell<Vec<Arc<str>>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    NAMES.with(|names| {
        let mut names = names.borrow_mut();
        if let Some(known) = names.iter().rev().find(|n| ***n == *name) {
            return known.clone();
        }
        let fresh: Arc<str> = name.into();
        if names.len() == KEPT {
            names.remove(0);
        }
        names.push(fresh.clone());
        fresh
    })
}

fn target_of(req: &Request) -> Option<Arc<str>> {
    #[derive(serde::Deserialize)]
    struct Target {
        name: Option<String>,
        uri: Option<String>,
    }
    if !matches!(
        req.method.as_str(),
        method::TOOLS_CALL
            | method::PROMPTS_GET
            | method::RESOURCES_READ
            | method::RESOURCES_SUBSCRIBE
            | method::RESOURCES_UNSUBSCRIBE
    ) {
        return None;
    }
    let params = req.params.as_deref()?;
    let t: Target = serde_json::from_str(params.get()).ok()?;
    t.name.or(t.uri).map(Into::into)
}

/// Serves a modern request without a connection actor (sessionless HTTP): the edge already
/// checked `_meta`; `server/discover` is answered here; `subscriptions/listen` needs a
/// connection (its listener table) and is refused with -32603 if it arrives here.
pub(crate) fn serve_stateless(
    core: &ServerCore,
    req: Request,
    meta: RequestMeta,
    d: Delivery,
    task_role: TaskRole,
) {
    let fail = |e: ErrorObject| {
        d.sink.send(jsonrpc::error_bytes(Some(&req.id), &e));
    };
    // Public API: the request may not come from `jsonrpc::parse`, which refuses these.
    if let Some(e) = req
        .params
        .as_deref()
        .and_then(|p| jsonrpc::not_an_object(p.get()))
    {
        return fail(e);
    }
    let requested = meta.protocol_version.as_deref().unwrap_or_default();
    let version = match gate::modern(&req.method, requested, &meta) {
        Ok(v) => v,
        Err(e) => return fail(e.to_error()),
    };
    match req.method.as_str() {
        method::SERVER_DISCOVER => {
            if let Ok(b) =
                jsonrpc::result_bytes(&req.id, &crate::route::discover(core), Some("complete"))
            {
                d.sink.send(b);
            }
            return;
        }
        method::SUBSCRIPTIONS_LISTEN => {
            return fail(ErrorObject::internal(
                "subscriptions/listen needs a connection",
            ))
        }
        _ => {}
    }
    let caller = Arc::new(Caller {
        capabilities: meta.client_capabilities.clone().unwrap_or_default(),
        info: meta.client_info.clone(),
        principal: d.principal.clone(),
        peer: d.peer.clone(),
        task_role,
    });
    let channel = Channel::Modern {
        log_level: meta.log_level,
        round: Mutex::new(Round::default()),
    };
    launch(
        core,
        Launch {
            req,
            call: None,
            version,
            caller,
            channel,
            meta: LaunchMeta::from_meta(meta),
            modern: true,
            out: d.sink,
            cancel: d.cancel,
            session_id: None,
            release: None,
            transport_trace: d.transport_trace,
        },
    );
}

#[cfg(test)]
mod tests {
    use super::shared_name;
    use std::sync::Arc;

    #[test]
    fn a_name_seen_again_is_shared_and_the_oldest_of_many_is_let_go() {
        let first = shared_name("tools/call");
        assert!(Arc::ptr_eq(&first, &shared_name("tools/call")));
        assert_eq!(&*shared_name("echo"), "echo");
        for i in 0..16 {
            let _ = shared_name(&format!("tool{i}"));
        }
        // Sixteen newer names pushed it out: a fresh copy, equal but not shared.
        let again = shared_name("tools/call");
        assert_eq!(again, first);
        assert!(!Arc::ptr_eq(&first, &again));
    }
}
