//! JSON-RPC 2.0 and Model Context Protocol types for both protocol generations.
//!
//! This crate does no I/O. It parses bytes into typed messages ([`jsonrpc::parse`]), serializes
//! typed messages into bytes, and names every MCP type of revisions 2026-07-28 and 2025-11-25
//! as the official schema does. Older revisions (2025-06-18, 2025-03-26, 2024-11-05) negotiate
//! as legacy and share the 2025-11-25 types.

pub mod error;
pub mod headers;
pub mod jsonrpc;
pub mod meta;
mod types;
mod version;

pub use error::ErrorObject;
pub use jsonrpc::{Incoming, RequestId};
pub use meta::RequestMeta;
pub use types::*;
pub use version::ProtocolVersion;

/// A boxed, sendable future: what the server's and the client's callbacks return (tool
/// handlers, transports, question handlers). Defined once here so both crates name one type.
pub type BoxFuture<T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'static>>;
