//! Loopback ports for tests, chosen so that the tests running beside them cannot take them.
//!
//! The usual trick, binding port 0 and dropping the listener, races with every other test on
//! the machine: the kernel hands the same port to the next `bind(0)` or outgoing connection,
//! and a test that expected nothing to listen there reaches another test's server (CI saw
//! exactly that). So:
//! - a port where nothing must answer is *held* by a bound socket that never listens
//!   ([`ClosedPort`]): connecting is refused, and nobody else can bind it while it lives;
//! - a port for a server process to bind ([`free_port`]) is taken from below the kernel's
//!   ephemeral range, where `bind(0)` and outgoing connections never land, so only another
//!   caller of this function could pick it in the moment before the process binds it.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::sync::atomic::{AtomicU32, Ordering};
use tokio::net::TcpSocket;

/// A loopback port where connections are refused for as long as this value lives.
pub struct ClosedPort {
    _socket: TcpSocket,
    port: u16,
}

impl ClosedPort {
    /// Binds a socket to `127.0.0.1:0` without listening on it. Needs no runtime.
    pub fn new() -> ClosedPort {
        let socket = TcpSocket::new_v4().expect("a TCP socket");
        socket
            .bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
            .expect("bind a loopback port");
        let port = socket.local_addr().expect("a bound port").port();
        ClosedPort {
            _socket: socket,
            port,
        }
    }

    /// The port: refused on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }
}

impl Default for ClosedPort {
    fn default() -> Self {
        ClosedPort::new()
    }
}

/// A loopback port that was free a moment ago, outside the kernel's ephemeral range, for a
/// server process to bind.
pub fn free_port() -> u16 {
    free_ports(1)[0]
}

/// `n` distinct such ports.
pub fn free_ports(n: usize) -> Vec<u16> {
    // Below the ephemeral range (Linux's default starts at 32768); 10000 up, under the ports
    // well-known services use.
    let top = ephemeral_start().clamp(11_000, 32_768);
    let span = u32::from(top - 10_000);
    // Spread callers across the range: the process id sets each process's start, a counter
    // the next pick within it.
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let seed = std::process::id().wrapping_mul(2_654_435_761);
    // Held until all `n` are chosen, so they differ.
    let mut held = Vec::with_capacity(n);
    for _ in 0..span {
        if held.len() == n {
            break;
        }
        let k = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = 10_000 + (seed.wrapping_add(k.wrapping_mul(7_919)) % span) as u16;
        if let Ok(l) = TcpListener::bind((Ipv4Addr::LOCALHOST, port)) {
            held.push((l, port));
        }
    }
    assert_eq!(held.len(), n, "no {n} free loopback ports below {top}");
    held.into_iter().map(|(_, port)| port).collect()
}

/// The lower end of `net.ipv4.ip_local_port_range`.
fn ephemeral_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_port_refuses_connections_and_cannot_be_bound() {
        let closed = ClosedPort::new();
        let addr = (Ipv4Addr::LOCALHOST, closed.port());
        let refused = std::net::TcpStream::connect(addr).unwrap_err();
        assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);
        assert!(TcpListener::bind(addr).is_err());
    }

    #[test]
    fn free_ports_are_distinct_bindable_and_below_the_ephemeral_range() {
        let ports = free_ports(3);
        assert_eq!(
            ports.iter().collect::<std::collections::HashSet<_>>().len(),
            3
        );
        for p in ports {
            assert!(p >= 10_000 && p < ephemeral_start().max(11_000), "{p}");
            TcpListener::bind((Ipv4Addr::LOCALHOST, p)).unwrap();
        }
    }
}
