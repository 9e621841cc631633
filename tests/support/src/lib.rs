//! Test support for Toolyard's test binaries (`publish = false`): the raw in-process JSON-RPC
//! client, the interop runner that drives the official SDK clients, the demo set, seeded
//! message mutation, and real `nats-server` processes (one server or a JetStream cluster, with fault injection).

mod interop;
mod mutation;
mod nats;
mod otlp;
mod ports;
mod raw_client;

pub use interop::{cache, repo, run_client, ServerProcess, Target};
pub use mutation::{mutate, Xorshift};
pub use nats::{nats_server_bin, old_nats_server_bin, NatsCluster, NatsServer};
pub use otlp::{OtlpReceiver, ReceivedLog, ReceivedPoint, ReceivedSpan};
pub use ports::{free_port, free_ports, ClosedPort};
pub use raw_client::{RawClient, RawClientError};
pub use toolyard_demo::demo;
