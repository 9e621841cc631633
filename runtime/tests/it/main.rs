//! The `toolyard` library's integration tests, in process: servers built with the builder and
//! the macros, the typed client over the in-memory transport and over real HTTP on
//! 127.0.0.1, tasks, the OAuth resource server (one binary keeps link time low).
#![allow(
    clippy::needless_pass_by_value,
    clippy::unused_async,
    clippy::match_wildcard_for_single_variants,
    reason = "tests write tools the way users do (owned arguments, async without awaiting, as the macros require) and match only the variant they expect"
)]

mod audience;
mod client;
mod client_http;
mod client_oauth;
mod core;
mod http_auth;
mod macros;
mod tasks;
