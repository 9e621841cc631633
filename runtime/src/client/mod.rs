//! The MCP client: transports that connect a [`Client`](toolyard_actors::client::Client) to
//! servers (a spawned process over stdio, Streamable HTTP, HTTP+SSE, in-memory), OAuth, and
//! the named [`ClientRegistry`](registry::ClientRegistry).

#[cfg(feature = "client-http")]
pub mod auth;
#[cfg(feature = "client-http")]
pub mod http;
pub mod memory;
#[cfg(feature = "client-http")]
pub mod oauth;
pub mod orphans;
pub mod registry;
#[cfg(feature = "client-http")]
pub mod sse;
pub mod stdio;

pub use toolyard_actors::client::*;
