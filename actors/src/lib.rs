//! The server engine of Toolyard: the actors of an MCP server and the request path.
//!
//! A [`Server`] is a supervisor over one handler actor per feature (the tool, resource and
//! prompt catalogs owning their registries, completion, custom methods) and an EventBus. Each stdio or
//! in-memory connection and each legacy HTTP session is a Connection actor. Requests do not
//! cross actors on the hot path: a connection launches `tools/call` straight from the shared
//! registry snapshot with a [`Reply`](transport::Reply) that writes to the connection's
//! [`Sink`](transport::Sink); user code runs
//! in tasks with a [`RequestContext`]. Tools may run as tasks ([`TaskStore`]).
//! `docs/semantics.md` is the contract and `docs/architecture.md` the map.
//!
//! Transport authors (stdio, HTTP, NATS) find what they need in [`transport`].

mod audience;
mod connection;
mod context;
mod error;
mod event_bus;
mod exec;
mod forward;
mod gate;
mod handlers;
mod http_call;
mod lifecycle;
mod middleware;
mod moment;
mod mrtr;
mod outbound;
mod registry;
mod reply;
mod request_trace;
mod resource;
mod route;
mod server;
mod sink;
mod tasks;
mod tool;
mod uri_template;

pub mod transport {
    //! What a transport author needs, and only they: a [`ConnectionHandle`] to feed a
    //! connection's bytes in, a [`Sink`] (or your own [`MessageSink`]) that takes its
    //! answers out, [`Delivery`] for stateless requests served through
    //! [`Server::serve_stateless`](crate::Server::serve_stateless), the [`Reply`] every
    //! request is answered through, and the request gate ([`modern_gate`]) a transport calls
    //! when it must refuse a request in its own terms (an HTTP status) before handing it on,
    //! and [`run_or_spawn`] for a transport that takes requests off a queue of its own.
    pub use crate::connection::ConnectionHandle;
    pub use crate::connection::Delivery;
    pub use crate::exec::run_or_spawn;
    pub use crate::gate::{modern as modern_gate, GateError};
    pub use crate::reply::Reply;
    pub use crate::sink::{MessageSink, Sink};
}

pub use audience::{Audience, ForAudiences, Reach};
pub use context::{Caller, InputError, RequestContext, TaskRole, TASK_HANDOFF};
pub use error::{HandlerError, ToolError};
pub use event_bus::{Event, EventTap, SubscriptionWatcher};
pub use forward::{ForwardFn, RawArgs, RawResult, RawResultError};
pub use handlers::custom::MethodFn;
pub use http_call::{
    http_call_observer, set_http_call_observer, HttpCallObserver, HttpCallOutcome,
    ObservedHttpCall, OutgoingHttpCall,
};
pub use lifecycle::{Lifecycle, LifecycleEvent, Readiness};
pub use middleware::{
    Completion, Layer, Layers, Messaging, Observe, Outcome, Peer, RequestInfo, SessionInfo,
    SpanIds, TransportTrace,
};
pub use moment::Moment;
pub use mrtr::StateSealer;
pub use request_trace::{
    request_baggage, request_traceparent, request_tracestate, set_log_span, Traceparent,
};
pub use resource::{
    CompleteFn, CompletionTarget, Completions, PromptDef, PromptFn, ResourceDef, ResourceFn,
    ResourceRequest, SubscribeCheckFn, TemplateDef,
};
pub use server::{Limits, ListSettings, Server, ServerConfig, StartError, UnknownToolFn};
pub use tasks::{
    InMemoryTaskStore, NewTask, StoreFuture, TaskGeneration, TaskOutcome, TaskPage, TaskRecord,
    TaskSettings, TaskStore, TaskStoreError, TaskUpdate,
};
pub use tool::{
    empty_object_schema, BoxFuture, DefinitionError, IntoCallToolResult, Json, ToolArgs, ToolDef,
    ToolFn,
};
pub use uri_template::UriTemplate;
