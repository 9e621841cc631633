//! The SSRF guard: which addresses a fetch may reach.
//!
//! Only `http`/`https`, only ports 80 and 443, and only public addresses, unless the
//! operator lists the host in `allow_hosts`. IP literals are judged as the `url` crate
//! normalizes them (so `0x7f.1`, `2130706433` and `127.1` are all 127.0.0.1), IPv6 forms that
//! embed an IPv4 address (mapped, NAT64, 6to4, Teredo) are judged by that address, and names
//! are judged by what they resolve to, in the resolver reqwest connects through: there is no
//! gap between the check and the connection for a DNS answer to change in.

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

/// Hosts the operator allows even though they are not public.
#[derive(Debug, Clone, Default)]
pub(crate) struct AllowList(Arc<Vec<String>>);

impl AllowList {
    pub(crate) fn new(hosts: &[String]) -> AllowList {
        AllowList(Arc::new(hosts.iter().map(|h| normalize_host(h)).collect()))
    }

    pub(crate) fn allows(&self, host: &str) -> bool {
        let host = normalize_host(host);
        self.0.contains(&host)
    }
}

/// Lower case, without IPv6 brackets or a trailing dot.
fn normalize_host(host: &str) -> String {
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .trim_end_matches('.')
        .to_ascii_lowercase()
}

fn v4_in(ip: Ipv4Addr, net: [u8; 4], prefix: u32) -> bool {
    let mask = if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - prefix)
    };
    (u32::from(ip) & mask) == (u32::from(Ipv4Addr::from(net)) & mask)
}

fn v6_in(ip: Ipv6Addr, net: Ipv6Addr, prefix: u32) -> bool {
    let mask = if prefix == 0 {
        0
    } else {
        u128::MAX << (128 - prefix)
    };
    (u128::from(ip) & mask) == (u128::from(net) & mask)
}

/// A globally reachable IPv4 address (not one of the special-purpose ranges).
fn public_v4(ip: Ipv4Addr) -> bool {
    const SPECIAL: [([u8; 4], u32); 15] = [
        ([0, 0, 0, 0], 8),       // "this network"
        ([10, 0, 0, 0], 8),      // private
        ([100, 64, 0, 0], 10),   // shared address space (CGNAT)
        ([127, 0, 0, 0], 8),     // loopback
        ([169, 254, 0, 0], 16),  // link-local (cloud metadata)
        ([172, 16, 0, 0], 12),   // private
        ([192, 0, 0, 0], 24),    // IETF protocol assignments
        ([192, 0, 2, 0], 24),    // documentation
        ([192, 88, 99, 0], 24),  // 6to4 relay anycast
        ([192, 168, 0, 0], 16),  // private
        ([198, 18, 0, 0], 15),   // benchmarking
        ([198, 51, 100, 0], 24), // documentation
        ([203, 0, 113, 0], 24),  // documentation
        ([224, 0, 0, 0], 4),     // multicast
        ([240, 0, 0, 0], 4),     // reserved, broadcast
    ];
    !SPECIAL.iter().any(|(net, prefix)| v4_in(ip, *net, *prefix))
}

/// The IPv4 address an IPv6 address carries, for the forms that carry one.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let bits = u128::from(ip);
    let low32 = Ipv4Addr::from((bits & 0xffff_ffff) as u32);
    if v6_in(ip, Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0, 0), 96) // IPv4-mapped
        || v6_in(ip, Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0), 96) // NAT64
        || v6_in(ip, Ipv6Addr::new(0x64, 0xff9b, 1, 0, 0, 0, 0, 0), 48) // local NAT64
        || v6_in(ip, Ipv6Addr::UNSPECIFIED, 96)
    // IPv4-compatible (deprecated)
    {
        return Some(low32);
    }
    if v6_in(ip, Ipv6Addr::new(0x2002, 0, 0, 0, 0, 0, 0, 0), 16) {
        // 6to4: the IPv4 address is bits 16..48.
        return Some(Ipv4Addr::from(((bits >> 80) & 0xffff_ffff) as u32));
    }
    if v6_in(ip, Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0), 32) {
        // Teredo: the client's address, inverted, in the last 32 bits.
        return Some(Ipv4Addr::from(!((bits & 0xffff_ffff) as u32)));
    }
    None
}

/// A globally reachable address: judged by its embedded IPv4 address where it has one.
pub(crate) fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => public_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = embedded_v4(v6) {
                return public_v4(v4);
            }
            const SPECIAL: [(Ipv6Addr, u32); 6] = [
                (Ipv6Addr::UNSPECIFIED, 128),
                (Ipv6Addr::LOCALHOST, 128),
                (Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0), 7), // unique local
                (Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0), 10), // link-local
                (Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0), 8), // multicast
                (Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0), 32), // documentation
            ];
            let discard = v6_in(v6, Ipv6Addr::new(0x100, 0, 0, 0, 0, 0, 0, 0), 64);
            !discard && !SPECIAL.iter().any(|(net, prefix)| v6_in(v6, *net, *prefix))
        }
    }
}

/// Why a URL may not be fetched.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refused {
    #[error("only http and https URLs can be fetched")]
    Scheme,
    #[error("the URL has no host")]
    NoHost,
    #[error("only ports 80 and 443 can be fetched (allow_hosts lifts this for a host)")]
    Port,
    #[error("Access denied: {0} is not a public address (allow_hosts lifts this for a host)")]
    Address(String),
    #[error(
        "Access denied: {0} resolves to no public address (allow_hosts lifts this for a host)"
    )]
    Resolved(String),
}

/// Checks what can be checked before connecting: scheme, port, an IP literal host.
pub(crate) fn check_url(url: &reqwest::Url, allow: &AllowList) -> Result<(), Refused> {
    if !matches!(url.scheme(), "http" | "https") {
        return Err(Refused::Scheme);
    }
    let host = url.host_str().ok_or(Refused::NoHost)?;
    if allow.allows(host) {
        return Ok(());
    }
    let literal = match url.host() {
        Some(url::Host::Ipv4(v4)) => Some(IpAddr::V4(v4)),
        Some(url::Host::Ipv6(v6)) => Some(IpAddr::V6(v6)),
        _ => None,
    };
    if let Some(ip) = literal {
        if !is_public(ip) {
            return Err(Refused::Address(host.to_owned()));
        }
    }
    if !matches!(url.port_or_known_default(), Some(80 | 443)) {
        return Err(Refused::Port);
    }
    Ok(())
}

/// Resolves names and keeps only the public addresses (all of them for an allowed host), so
/// reqwest can only connect to vetted addresses.
#[derive(Debug, Clone)]
pub(crate) struct GuardedResolver {
    pub(crate) allow: AllowList,
}

impl GuardedResolver {
    /// The addresses `host` may be reached at.
    pub(crate) async fn lookup(&self, host: &str) -> Result<Vec<SocketAddr>, Refused> {
        let found: Vec<SocketAddr> = tokio::net::lookup_host((host, 0))
            .await
            .map_err(|_| Refused::Resolved(host.to_owned()))?
            .collect();
        let allowed = self.allow.allows(host);
        let kept: Vec<SocketAddr> = found
            .into_iter()
            .filter(|a| allowed || is_public(a.ip()))
            .collect();
        if kept.is_empty() {
            return Err(Refused::Resolved(host.to_owned()));
        }
        Ok(kept)
    }
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let this = self.clone();
        Box::pin(async move {
            let addrs = this.lookup(name.as_str()).await?;
            let addrs: Addrs = Box::new(addrs.into_iter());
            Ok(addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn public(s: &str) -> bool {
        is_public(s.parse().unwrap())
    }

    #[test]
    fn special_purpose_ipv4_ranges_are_not_public() {
        for ip in [
            "0.0.0.0",
            "10.1.2.3",
            "100.64.0.1",
            "127.0.0.1",
            "127.255.255.254",
            "169.254.169.254",
            "172.16.0.1",
            "172.31.255.255",
            "192.0.0.8",
            "192.0.2.1",
            "192.168.1.1",
            "198.18.0.1",
            "198.51.100.7",
            "203.0.113.9",
            "224.0.0.1",
            "255.255.255.255",
        ] {
            assert!(!public(ip), "{ip}");
        }
        for ip in [
            "1.1.1.1",
            "8.8.8.8",
            "172.32.0.1",
            "100.128.0.1",
            "93.184.216.34",
        ] {
            assert!(public(ip), "{ip}");
        }
    }

    #[test]
    fn ipv6_forms_are_judged_by_the_ipv4_address_they_carry() {
        for ip in [
            "::",
            "::1",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "ff02::1",
            "2001:db8::1",
            "100::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::ffff:10.0.0.1",
            "64:ff9b::7f00:1",
            "64:ff9b:1::a00:1",
            "::127.0.0.1",
            "2002:7f00:1::1",
            "2002:a9fe:a9fe::1",
            "2001:0:4136:e378:8000:63bf:80ff:fffe", // Teredo for 127.0.0.1
        ] {
            assert!(!public(ip), "{ip}");
        }
        for ip in [
            "2606:4700:4700::1111",
            "::ffff:8.8.8.8",
            "2002:0808:0808::1",
        ] {
            assert!(public(ip), "{ip}");
        }
    }

    #[tokio::test]
    async fn the_resolver_reqwest_connects_through_drops_non_public_answers() {
        use std::str::FromStr;
        // What reqwest itself calls at connect time, after any pre-check: a name that
        // resolves only to loopback yields no address to connect to.
        let guarded = GuardedResolver {
            allow: AllowList::default(),
        };
        let name = Name::from_str("localhost").unwrap();
        let refused = guarded.resolve(name).await;
        assert!(refused.is_err());
        let allowed = GuardedResolver {
            allow: AllowList::new(&["localhost".to_owned()]),
        };
        let addrs: Vec<SocketAddr> = allowed
            .resolve(Name::from_str("localhost").unwrap())
            .await
            .unwrap()
            .collect();
        assert!(addrs.iter().all(|a| a.ip().is_loopback()) && !addrs.is_empty());
    }

    #[test]
    fn ip_literals_in_every_notation_are_refused_before_connecting() {
        let allow = AllowList::default();
        for url in [
            "http://127.0.0.1/",
            "http://127.1/",
            "http://0x7f.1/",
            "http://0x7f000001/",
            "http://2130706433/",
            "http://017700000001/",
            "http://0177.0.0.1/",
            "http://[::1]/",
            "http://[::ffff:127.0.0.1]/",
            "http://[::ffff:7f00:1]/",
            "http://0.0.0.0/",
            "http://169.254.169.254/latest/meta-data/",
            "https://[fe80::1%25eth0]/",
        ] {
            let Ok(parsed) = reqwest::Url::parse(url) else {
                continue; // refused by the parser already
            };
            assert!(
                matches!(check_url(&parsed, &allow), Err(Refused::Address(_))),
                "{url}: {:?}",
                check_url(&parsed, &allow)
            );
        }
        let parsed = reqwest::Url::parse("ftp://example.com/").unwrap();
        assert_eq!(check_url(&parsed, &allow), Err(Refused::Scheme));
        let parsed = reqwest::Url::parse("http://example.com:22/").unwrap();
        assert_eq!(check_url(&parsed, &allow), Err(Refused::Port));
        let allow = AllowList::new(&["127.0.0.1".to_owned(), "[::1]".to_owned()]);
        let parsed = reqwest::Url::parse("http://127.0.0.1:8080/").unwrap();
        assert_eq!(check_url(&parsed, &allow), Ok(()));
        let parsed = reqwest::Url::parse("http://[::1]:8080/").unwrap();
        assert_eq!(check_url(&parsed, &allow), Ok(()));
    }
}
