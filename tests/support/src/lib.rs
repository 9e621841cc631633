//! Test support for Toolyard's test binaries (`publish = false`): the raw in-process JSON-RPC
//! client, the interop runner that drives the official SDK clients, and the demo set.

mod interop;
mod raw_client;

pub use interop::{cache, repo, run_client, ServerProcess, Target};
pub use raw_client::{RawClient, RawClientError};
pub use toolyard_demo::demo;
