//! The MCP client: a `Client` actor per connection and a cheap, cloneable [`Client`] handle.
//!
//! The actor owns the transport link and the pending table (request id -> reply); callers
//! await their reply in their own task, where timeouts, progress and multi-round-trip retries
//! are handled, so the actor's loop only routes messages. Transports (a spawned process,
//! Streamable HTTP, HTTP+SSE, in-memory) implement [`Transport`] in the `toolyard` crate.

mod actor;
mod cache;
mod error;
mod handle;
mod handlers;
mod headers;
mod transport;

pub use error::ClientError;
pub use handle::{
    Client, ClientBuilder, ProtocolChoice, RequestOptions, ServerSession, Subscription,
};
pub use handlers::{
    elicit_handler, fixed_roots, sample_handler, ElicitHandler, LogCallback, Notice,
    NoticeCallback, ProgressCallback, QuestionHandler, Questions, RootsHandler, SampleHandler,
};
pub use transport::{
    ClientGone, EventSink, OutboundKind, OutboundMessage, Transport, TransportError,
    TransportEvent, TransportLink,
};
