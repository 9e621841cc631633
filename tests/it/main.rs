//! The `toolyard` binary's system tests: our own binary as a subprocess over stdio and HTTP,
//! with the official SDK clients and third-party MCP servers (one binary keeps link time low).
#![allow(
    clippy::needless_pass_by_value,
    clippy::match_wildcard_for_single_variants,
    reason = "test helpers take what they check by value, and tests match only the variant they expect"
)]

#[cfg(feature = "agent")]
mod agent;
mod client_cli;
mod client_interop;
mod client_stdio;
#[cfg(feature = "connectors")]
mod connectors;
#[cfg(all(feature = "otel", feature = "nats"))]
mod deploy;
mod gateway;
mod gateway_faults;
mod gateway_interop;
mod gateway_parity;
mod http;
mod interop;
mod interop_http;
#[cfg(feature = "nats")]
mod nats;
#[cfg(feature = "nats")]
mod nats_auth;
#[cfg(feature = "nats")]
mod nats_interop;
#[cfg(all(feature = "otel", feature = "nats"))]
mod otel;
mod probe;
mod stdio;
