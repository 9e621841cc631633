//! The [`Client`] handle and its [`ClientBuilder`]: the handshake that picks the generation,
//! the per-request `_meta` and headers, timeouts that progress extends, cancellation when
//! the caller gives up, and the multi-round-trip loop of the modern generation.
//!
//! One concern per file: `builder` ([`ClientBuilder`] and `connect`), `client` (the
//! [`Client`] handle's shared state and accessors), `handshake` (generation negotiation,
//! [`ProtocolChoice`], [`ServerSession`]), `request` ([`RequestOptions`] and the request
//! plumbing), `meta` (a request's wire `_meta`), `ops` (the typed per-method calls) and
//! `subscription` ([`Subscription`]).

mod builder;
mod client;
mod handshake;
mod meta;
mod ops;
mod request;
mod subscription;

pub use builder::ClientBuilder;
pub use client::Client;
pub use handshake::{ProtocolChoice, ServerSession};
pub use request::RequestOptions;
pub use subscription::Subscription;
