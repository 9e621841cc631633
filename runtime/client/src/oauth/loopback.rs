//! The authorization handler for desktop and command-line clients (RFC 8252 §7.3): listen on
//! the loopback redirect URI, send the user to the authorization URL in their browser, and
//! take the one request the browser makes back to the loopback address. Listening starts
//! before the browser opens, so a fast authorization server cannot redirect into nothing.

use super::flow::AuthorizationHandler;
use crate::auth::AuthError;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use toolyard_proto::BoxFuture;
use url::Url;

/// A request to the loopback listener larger than this is dropped.
const MAX_REQUEST: usize = 16 * 1024;
/// One connection gets this long to send its request.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

type Opener = dyn Fn(&Url) -> Result<(), AuthError> + Send + Sync;

/// An [`AuthorizationHandler`] that receives the redirect on the loopback address of the
/// redirect URI (`http://127.0.0.1:PORT/...`, `http://[::1]:PORT/...` or
/// `http://localhost:PORT/...`). How the user gets to the authorization URL is up to the
/// opener: [`LoopbackRedirect::system_browser`] starts the desktop's browser.
#[derive(Clone)]
pub struct LoopbackRedirect {
    open: Arc<Opener>,
    timeout: Duration,
}

impl std::fmt::Debug for LoopbackRedirect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoopbackRedirect")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl LoopbackRedirect {
    /// A handler that calls `open` with the authorization URL (to start a browser, or print
    /// the URL for the user) once it is listening. Waits up to 5 minutes for the redirect.
    pub fn new(open: impl Fn(&Url) -> Result<(), AuthError> + Send + Sync + 'static) -> Self {
        LoopbackRedirect {
            open: Arc::new(open),
            timeout: Duration::from_secs(300),
        }
    }

    /// A handler that opens the URL in the system browser (`xdg-open`, `open`, or the
    /// Windows URL handler).
    pub fn system_browser() -> Self {
        Self::new(|url| {
            let url = url.as_str();
            #[cfg(target_os = "macos")]
            let mut cmd = std::process::Command::new("open");
            #[cfg(target_os = "windows")]
            let mut cmd = {
                let mut c = std::process::Command::new("rundll32");
                c.arg("url.dll,FileProtocolHandler");
                c
            };
            #[cfg(not(any(target_os = "macos", target_os = "windows")))]
            let mut cmd = std::process::Command::new("xdg-open");
            cmd.arg(url)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .map(drop)
                .map_err(|e| AuthError(format!("could not start a browser: {e}")))
        })
    }

    /// How long to wait for the user to finish authorizing.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }
}

/// Where to listen for `redirect_uri`: its loopback address and port.
fn listen_address(redirect: &Url) -> Result<SocketAddr, AuthError> {
    if redirect.scheme() != "http" {
        return Err(AuthError(format!(
            "the loopback redirect URI must be http, not {}",
            redirect.scheme()
        )));
    }
    let ip = match redirect.host() {
        Some(url::Host::Ipv4(ip)) if ip.is_loopback() => IpAddr::V4(ip),
        Some(url::Host::Ipv6(ip)) if ip.is_loopback() => IpAddr::V6(ip),
        Some(url::Host::Domain("localhost")) => IpAddr::V4(Ipv4Addr::LOCALHOST),
        _ => {
            return Err(AuthError(format!(
                "the redirect URI {redirect} is not a loopback address"
            )))
        }
    };
    let port = redirect.port_or_known_default().unwrap_or(80);
    Ok(SocketAddr::new(ip, port))
}

/// Reads one request head and answers it; returns the request target when it is a GET of
/// `path`.
async fn serve_one(mut stream: TcpStream, path: &str) -> Option<String> {
    let mut buf = Vec::with_capacity(1024);
    let read = async {
        let mut chunk = [0u8; 1024];
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < MAX_REQUEST {
            let n = stream.read(&mut chunk).await.ok()?;
            if n == 0 {
                return None;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        Some(())
    };
    tokio::time::timeout(READ_TIMEOUT, read).await.ok()??;
    let head = String::from_utf8_lossy(&buf);
    let mut parts = head.lines().next()?.split(' ');
    let (method, target) = (parts.next()?, parts.next()?.to_owned());
    let matches = method == "GET" && target.split('?').next() == Some(path);
    let (status, body) = if matches {
        (
            "200 OK",
            "<!doctype html><title>Authorized</title><p>Authorization finished. You can close this window.",
        )
    } else {
        ("404 Not Found", "<!doctype html><title>Not found</title>")
    };
    let answer = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\nCache-Control: no-store\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(answer.as_bytes()).await;
    let _ = stream.shutdown().await;
    matches.then_some(target)
}

impl AuthorizationHandler for LoopbackRedirect {
    fn authorize(&self, url: Url) -> BoxFuture<Result<Url, AuthError>> {
        let this = self.clone();
        Box::pin(async move {
            let redirect = url
                .query_pairs()
                .find(|(k, _)| k == "redirect_uri")
                .and_then(|(_, v)| Url::parse(&v).ok())
                .ok_or_else(|| {
                    AuthError("the authorization URL carries no redirect_uri".to_owned())
                })?;
            let addr = listen_address(&redirect)?;
            let listener = match TcpListener::bind(addr).await {
                Ok(l) => l,
                // `localhost` may resolve to either loopback address.
                Err(_) if redirect.host_str() == Some("localhost") => TcpListener::bind(
                    SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), addr.port()),
                )
                .await
                .map_err(|e| AuthError(format!("listening on {addr}: {e}")))?,
                Err(e) => return Err(AuthError(format!("listening on {addr}: {e}"))),
            };
            (this.open)(&url)?;
            let path = redirect.path().to_owned();
            let wait = async {
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        continue;
                    };
                    if let Some(target) = serve_one(stream, &path).await {
                        return redirect
                            .join(&target)
                            .map_err(|e| AuthError(format!("unusable redirect request: {e}")));
                    }
                }
            };
            tokio::time::timeout(this.timeout, wait)
                .await
                .map_err(|_| {
                    AuthError(format!(
                        "no authorization response within {} s",
                        this.timeout.as_secs()
                    ))
                })?
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_addresses_only() {
        let addr = |u: &str| listen_address(&Url::parse(u).unwrap());
        assert_eq!(
            addr("http://127.0.0.1:8976/cb").unwrap(),
            "127.0.0.1:8976".parse().unwrap()
        );
        assert_eq!(
            addr("http://[::1]:9/cb").unwrap(),
            "[::1]:9".parse().unwrap()
        );
        assert_eq!(
            addr("http://localhost/cb").unwrap(),
            "127.0.0.1:80".parse().unwrap()
        );
        assert!(addr("http://example.com:80/cb").is_err());
        assert!(addr("https://127.0.0.1/cb").is_err());
    }
}
