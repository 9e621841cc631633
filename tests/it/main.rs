//! The `toolyard` binary's system tests: our own binary as a subprocess over stdio and HTTP,
//! with the official SDK clients and third-party MCP servers (one binary keeps link time low).

mod client_cli;
mod client_interop;
mod client_stdio;
mod gateway;
mod gateway_faults;
mod gateway_interop;
mod http;
mod interop;
mod interop_http;
mod stdio;
