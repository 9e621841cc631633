//! The actors of a Toolyard MCP server.
//!
//! A [`Server`] is a supervisor over a Router, one handler actor per feature (tools,
//! resources, prompts, completion), an EventBus and ParkedCalls. Each transport connection is
//! a Connection actor. Requests are cast from the connection straight to the handler with a
//! [`Reply`] that writes to the connection's [`Sink`]; user code runs in tasks with a
//! [`RequestContext`]. Tools may run as tasks ([`tasks`]). `docs/semantics.md` in the
//! repository is the contract.

pub mod client;
pub(crate) mod connection;
mod context;
mod error;
mod event_bus;
mod exec;
mod handlers;
pub mod middleware;
mod mrtr;
mod outbound;
mod parked;
mod registry;
mod reply;
mod resource;
mod router;
mod server;
mod sink;
pub mod tasks;
mod tool;
mod uri_template;

pub use connection::Delivery;
pub use context::{Caller, InputError, RequestContext};
pub use error::{HandlerError, ToolError};
pub use event_bus::Event;
pub use middleware::{Completion, Layer, Layers, Outcome, RequestInfo};
pub use mrtr::StateSealer;
pub use parked::ParkedMsg;
pub use reply::Reply;
pub use resource::{
    CompleteFn, CompletionTarget, PromptDef, PromptFn, ResourceDef, ResourceFn, ResourceRequest,
    TemplateDef,
};
pub use router::MethodFn;
pub use server::{
    ConnectionHandle, Limits, ListSettings, Server, ServerConfig, StartError, UnknownToolFn,
};
pub use sink::{MessageSink, Sink};
pub use tasks::{
    InMemoryTaskStore, NewTask, StoreFuture, TaskGeneration, TaskOutcome, TaskPage, TaskRecord,
    TaskSettings, TaskStore, TaskStoreError, TaskUpdate,
};
pub use tool::{
    empty_object_schema, BoxFuture, DefinitionError, HeaderParam, IntoCallToolResult, Json,
    ToolArgs, ToolDef, ToolFn,
};
pub use uri_template::UriTemplate;
