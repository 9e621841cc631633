//! The NATS bridge of Toolyard: tools served by any number of worker processes on a NATS
//! bus and exposed by any number of gateways, with their resources and prompts.
//!
//! - A [`Worker`] serves a Toolyard `Server`'s tools, resources and prompts on the bus, in a
//!   queue group, so one more worker is more capacity. Each request is served like a
//!   2026-07-28 HTTP request (`Server::serve_stateless`), and its messages go back as frames.
//! - [`RemoteTools`] is the gateway side: it follows the catalog bucket the workers write and
//!   exposes their tools, resources, resource templates and prompts through a server,
//!   forwarding each call, read and prompt over the bus.
//! - [`EventRelay`] is the cluster event bus: the `list_changed` and `resources/updated`
//!   events raised in one process reach the subscribers of every gateway.
//! - [`wire`] is the wire (subjects, headers, frames, codes), compatible with
//!   nats-mcp-gateway's v1 where it has one; `docs/nats.md` specifies it for other clients.

mod catalog;
mod config;
mod error;
mod events;
mod remote;
pub mod wire;
mod worker;

pub use catalog::{CatalogEntry, BUCKET as CATALOG_BUCKET, HEARTBEAT};
pub use config::{NatsConfig, NatsSection};
pub use error::NatsError;
pub use events::{events_subject, EventRelay, WireEvent, ORIGIN as ORIGIN_HEADER};
pub use remote::{RemoteConfig, RemoteTools};
pub use worker::{Worker, WorkerConfig};

/// Connects to a NATS server the way the bridge wants it: named, retrying the first
/// connection (a worker may start before the broker), reconnecting for ever. `url` may list
/// a cluster's servers separated by commas: the connection moves to another when its server
/// goes away.
pub async fn connect(url: &str, name: &str) -> Result<async_nats::Client, NatsError> {
    let urls: Vec<&str> = url
        .split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .collect();
    async_nats::ConnectOptions::new()
        .name(name)
        .retry_on_initial_connect()
        .connect(urls)
        .await
        .map_err(|e| NatsError::Connect {
            url: url.to_owned(),
            reason: e.to_string(),
        })
}
