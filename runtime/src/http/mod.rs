//! Streamable HTTP (both generations) and the 2024-11-05 HTTP+SSE transport, on axum.
//!
//! Use [`router`] to mount MCP inside your own axum application (with your own layers), or
//! [`serve_http`] to run it standalone with graceful shutdown. Three kinds of traffic share
//! one endpoint:
//! - **modern** (2026-07-28) POSTs carry `_meta` and no session: each goes to a shared,
//!   sessionless connection with its own response stream;
//! - **legacy** sessions begin with `initialize`, get an `Mcp-Session-Id`, and are one
//!   Connection actor each; server-to-client messages of a request go on that POST's SSE
//!   stream, the rest on the session's GET stream;
//! - **HTTP+SSE** clients open `GET /sse` and POST to `/messages?sessionId=...`.

mod auth;
mod health;
mod legacy_sse;
mod security;
mod streamable;

use axum::routing::{get, post};
use std::net::SocketAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;
use toolyard_actors::Server;

pub use auth::{AccessClaims, JwksSource, OAuthConfig, OAuthConfigError, Principal};
pub use health::health_router;
pub use security::Security;

/// HTTP settings.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// The MCP endpoint path.
    pub path: String,
    /// Largest request body, in bytes (413 beyond).
    pub max_body_bytes: usize,
    /// Live legacy sessions at most (503 beyond).
    pub max_sessions: usize,
    /// A legacy session idle this long is closed.
    pub session_idle_timeout: Duration,
    /// SSE keep-alive comment interval.
    pub keep_alive: Duration,
    /// Host / Origin checks and bearer tokens.
    pub security: Security,
    /// More routes served beside MCP (e.g. the gateway's admin API), outside the MCP
    /// endpoint's authentication: they bring their own.
    pub extra_routes: Option<axum::Router>,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            path: "/mcp".into(),
            max_body_bytes: 4 * 1024 * 1024,
            max_sessions: 10_000,
            session_idle_timeout: Duration::from_secs(30 * 60),
            keep_alive: Duration::from_secs(15),
            security: Security::loopback(),
            extra_routes: None,
        }
    }
}

/// Live counts, for `/readyz` and tests.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) streams: AtomicUsize,
    pub(crate) in_flight: AtomicUsize,
}

/// Everything the handlers share.
pub(crate) struct HttpState {
    pub(crate) server: Server,
    pub(crate) config: HttpConfig,
    pub(crate) sessions: streamable::Sessions,
    pub(crate) stateless: toolyard_actors::transport::ConnectionHandle,
    pub(crate) counters: Counters,
    /// The OAuth resource server, when `config.security.oauth` is set.
    pub(crate) auth: Option<Arc<auth::OAuth>>,
    /// Cancelled at shutdown: open streams end.
    pub(crate) closing: tokio_util::sync::CancellationToken,
}

/// An axum router serving MCP at `config.path` (plus `/sse`, `/messages`, `/healthz`,
/// `/readyz`, and with `config.security.oauth` the Protected Resource Metadata at
/// `/.well-known/oauth-protected-resource` and that path followed by `config.path`).
pub async fn router(server: Server, config: HttpConfig) -> Result<axum::Router, crate::BuildError> {
    Ok(build(server, config, Default::default()).await?.0)
}

async fn build(
    server: Server,
    config: HttpConfig,
    closing: tokio_util::sync::CancellationToken,
) -> Result<(axum::Router, Arc<HttpState>), crate::BuildError> {
    let auth = match &config.security.oauth {
        Some(oauth) => Some(Arc::new(auth::OAuth::new(oauth, &config.path).await?)),
        None => None,
    };
    let stateless = server
        .connect(toolyard_actors::transport::Sink::new(streamable::NullSink))
        .await?;
    let state = Arc::new(HttpState {
        sessions: streamable::Sessions::default(),
        server,
        stateless,
        counters: Counters::default(),
        auth,
        config: config.clone(),
        closing,
    });
    streamable::spawn_reaper(&state);
    let mcp = post(streamable::post)
        .get(streamable::get)
        .delete(streamable::delete);
    let mut app = axum::Router::new()
        .route(&config.path, mcp)
        .route("/sse", get(legacy_sse::open))
        .route("/messages", post(legacy_sse::message))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(streamable::readyz));
    if let Some(auth) = &state.auth {
        app = auth.routes(app);
    }
    let app = app
        .layer(axum::extract::DefaultBodyLimit::max(config.max_body_bytes))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            security::check,
        ))
        .with_state(state.clone());
    let app = match &config.extra_routes {
        Some(extra) => app.merge(extra.clone()),
        None => app,
    };
    Ok((app, state))
}

/// Serves until SIGTERM or Ctrl-C, then stops accepting, lets in-flight requests finish
/// (up to `drain`), and returns.
pub async fn serve_http(
    server: Server,
    addr: SocketAddr,
    config: HttpConfig,
    drain: Duration,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    serve_http_on(server, listener, config, drain).await
}

/// [`serve_http`] on a listener already bound: its caller knows the address it serves on
/// (port 0 picks a free one) before serving, and a bind failure before saying it serves.
pub async fn serve_http_on(
    server: Server,
    listener: tokio::net::TcpListener,
    config: HttpConfig,
    drain: Duration,
) -> std::io::Result<()> {
    let closing = tokio_util::sync::CancellationToken::new();
    let (app, _state) = build(server, config, closing.clone())
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    use axum::serve::ListenerExt;
    let addr = listener.local_addr()?;
    // SSE answers are several writes: without TCP_NODELAY each waits for a delayed ACK.
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    tracing::info!(%addr, "serving MCP over HTTP");
    let signalled = closing.clone();
    // The client's address reaches telemetry as `client.address` (RequestInfo::peer).
    let app = app.into_make_service_with_connect_info::<SocketAddr>();
    let serve = axum::serve(listener, app).with_graceful_shutdown(async move {
        shutdown_signal().await;
        tracing::info!("shutting down: no new connections; draining in-flight requests");
        signalled.cancel();
    });
    let mut serve = tokio::spawn(async move { serve.await });
    tokio::select! {
        r = &mut serve => return r.map_err(std::io::Error::other)?,
        _ = closing.cancelled() => {}
    }
    if tokio::time::timeout(drain, serve).await.is_err() {
        tracing::warn!("in-flight requests did not finish within {drain:?}; exiting anyway");
    }
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}
