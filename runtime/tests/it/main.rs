//! The `toolyard` crate's integration tests (one binary keeps link time low).

mod core;
mod http;
mod http_auth;
mod interop;
mod interop_http;
mod macros;
mod stdio;
mod tasks;
