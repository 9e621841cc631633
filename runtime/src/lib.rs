//! Toolyard: an actor-based, embeddable runtime for the Model Context Protocol (MCP).
//!
//! Build a server from tools, resources and prompts — written as `#[tool]` / `#[resource]` /
//! `#[prompt]` methods of controllers, as plain closures, or fully dynamically — then serve it
//! over stdio ([`serve_stdio`]), HTTP (`http`) or in-process (a [`client::Client`] over a
//! [`MemoryTransport`]). Both MCP
//! generations are served side by side: the stateless 2026-07-28 revision and the
//! session-based ones (2025-11-25 and older).
//!
//! ```no_run
//! use toolyard::{ServerBuilder, tool_fn};
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! struct Echo { message: String }
//! let server = ServerBuilder::new("demo", "1.0")
//!     .tool(tool_fn("echo", "Echoes the message", |_ctx, a: Echo| async move { Ok(a.message) })?)
//!     .start()
//!     .await?;
//! toolyard::serve_stdio(&server, Default::default()).await?;
//! # Ok(()) }
//! ```

mod builder;
mod config;
mod controller;
#[cfg(feature = "http")]
pub mod http;
#[cfg(feature = "client")]
mod memory_transport;
mod stdio;

pub use builder::{schema_for, tool_fn, BuildError, ServerBuilder};
pub use config::{
    Config, ConfigError, PromptArgSpec, ServerSection, StaticResource, StaticTool, TemplatePrompt,
};
pub use controller::{Controller, IntoPromptResult, IntoReadResult};
#[cfg(feature = "client")]
pub use memory_transport::MemoryTransport;
pub use stdio::{serve_io, serve_stdio, StdioOptions};

pub use toolyard_actors::transport;
pub use toolyard_actors::{
    empty_object_schema, Audience, BoxFuture, Caller, CompleteFn, Completion, CompletionTarget,
    Completions, DefinitionError, Event, ForAudiences, ForwardFn, HandlerError, InputError,
    IntoCallToolResult, Json, Layer, Layers, Lifecycle, LifecycleEvent, Limits, ListSettings,
    Messaging, MethodFn, Moment, Observe, Outcome, Peer, PromptDef, PromptFn, RawArgs, RawResult,
    RawResultError, Reach, Readiness, RequestContext, RequestInfo, ResourceDef, ResourceFn,
    ResourceRequest, Server, ServerConfig, SessionInfo, SpanIds, StartError, StateSealer,
    SubscribeCheckFn, SubscriptionWatcher, TaskRole, TemplateDef, ToolArgs, ToolDef, ToolError,
    ToolFn, TransportTrace, UnknownToolFn, UriTemplate, TASK_HANDOFF,
};
pub use toolyard_actors::{
    http_call_observer, request_baggage, request_traceparent, request_tracestate,
    set_http_call_observer, set_log_span, HttpCallObserver, HttpCallOutcome, ObservedHttpCall,
    OutgoingHttpCall, Traceparent,
};
pub use toolyard_actors::{
    InMemoryTaskStore, NewTask, StoreFuture, TaskGeneration, TaskOutcome, TaskPage, TaskRecord,
    TaskSettings, TaskStore, TaskStoreError, TaskUpdate,
};
/// The MCP client (the `toolyard-client` crate).
#[cfg(feature = "client")]
pub use toolyard_client as client;
pub use toolyard_macros::{controller, prompt, resource, tool};
/// The protocol types.
pub use toolyard_proto as proto;

/// Items the macros expand to. Not a public API.
#[doc(hidden)]
pub mod __private {
    pub use crate::builder::schema_object_for;
    pub use crate::controller::{Controller, IntoPromptResult, IntoReadResult};
    pub use schemars;
    pub use serde;
    pub use serde_json;
    pub use std::sync::Arc;
    pub use toolyard_actors::{
        BoxFuture, DefinitionError, EventTap, HandlerError, IntoCallToolResult, PromptDef,
        PromptFn, RequestContext, ResourceDef, ResourceFn, ResourceRequest, TemplateDef, ToolArgs,
        ToolDef, ToolFn,
    };
    pub use toolyard_proto::{
        JsonObject, Prompt, PromptArgument, Resource, ResourceTemplate, Tool, ToolAnnotations,
    };
}
