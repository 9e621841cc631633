//! The MCP client, whole: a `Client` actor per connection and a cheap, cloneable [`Client`]
//! handle, the transports ([`StdioTransport`] spawns a server, [`StreamableHttpTransport`],
//! [`SseTransport`]), OAuth 2.1 ([`oauth`]), the named [`ClientRegistry`] and the orphan
//! watchdog ([`orphans`]).
//!
//! The actor owns the connection's lifecycle and the server's requests and notifications; a
//! request does not pass through it: callers register in the shared pending table (request
//! id -> reply), write through the link, and await their reply in their own task, where
//! timeouts, progress and multi-round-trip retries are handled; the transport's reader hands
//! responses straight back (`pending.rs`).
//!
//! This crate depends on `toolyard-proto` only, not on the server engine: an agent or a NATS
//! bridge can hold clients without carrying a server. The in-memory transport, which joins a
//! client to a server in the same process, lives with the server in the `toolyard` crate.

mod actor;
#[cfg(feature = "http")]
mod auth;
mod cache;
mod error;
mod handle;
mod handlers;
#[cfg(feature = "http")]
mod http;
#[cfg(feature = "http")]
pub mod oauth;
mod observe;
pub mod orphans;
mod pending;
mod registry;
#[cfg(feature = "http")]
mod sse;
mod stdio;
mod transport;

#[cfg(feature = "http")]
pub use auth::{AuthChallenge, AuthError, AuthProvider, StaticToken};
#[cfg(feature = "http")]
pub use http::{StreamableHttpTransport, DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_MESSAGE_BYTES};
pub use registry::{ClientEntry, ClientRegistry, ClientsConfig, RegistryError};
#[cfg(feature = "http")]
pub use sse::{SseTransport, DEFAULT_ENDPOINT_TIMEOUT};
pub use stdio::StdioTransport;

pub use error::ClientError;
pub use handle::{
    Client, ClientBuilder, ProtocolChoice, RequestOptions, ServerSession, Subscription,
};
pub use handlers::{
    elicit_handler, fixed_roots, sample_handler, ElicitHandler, LogCallback, Notice,
    NoticeCallback, ProgressCallback, QuestionHandler, Questions, RootsHandler, SampleHandler,
};
pub use observe::{
    default_observer, set_default_observer, ObservedRequest, OutgoingRequest, RequestObserver,
    RequestOutcome,
};
pub use transport::{
    ClientGone, EventSink, OutboundKind, OutboundMessage, Transport, TransportError,
    TransportEvent, TransportLink, Undelivered,
};
