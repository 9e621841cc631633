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
mod oauth_http;
#[cfg(all(feature = "otel", feature = "nats"))]
mod otel;
mod probe;
mod stdio;

/// Waits up to `within` for `child` (its stderr piped) to exit by itself; its exit status
/// and what it wrote on stderr. One that does not exit is killed and the test fails,
/// naming `what`.
pub(crate) fn exit_within(
    mut child: std::process::Child,
    within: std::time::Duration,
    what: &str,
) -> (std::process::ExitStatus, String) {
    use std::io::Read;
    let deadline = std::time::Instant::now() + within;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not exit within {within:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        pipe.read_to_string(&mut stderr).unwrap();
    }
    (status, stderr)
}
