//! The MCP client: a `Client` actor per connection and a cheap, cloneable [`Client`] handle.
//!
//! The actor owns the transport link and the pending table (request id -> reply); callers
//! await their reply in their own task, where timeouts, progress and multi-round-trip retries
//! are handled, so the actor's loop only routes messages.

mod transport;

pub use transport::{
    OutboundKind, OutboundMessage, Transport, TransportError, TransportEvent, TransportLink,
};
