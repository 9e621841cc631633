//! The `toolyard` crate's integration tests (one binary keeps link time low).

mod client;
mod client_cli;
mod client_http;
mod client_interop;
mod client_oauth;
mod client_stdio;
mod core;
mod gateway;
mod gateway_faults;
mod gateway_interop;
mod host_pool;
mod http;
mod http_auth;
mod interop;
mod interop_http;
#[allow(dead_code)]
#[path = "../../../tests/interop/support.rs"]
mod interop_support;
mod macros;
mod stdio;
mod tasks;
