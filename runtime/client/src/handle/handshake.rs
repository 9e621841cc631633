//! The handshake and version negotiation: [`ProtocolChoice`], the `server/discover` probe,
//! legacy `initialize` (and re-initializing an expired session), and the
//! [`ServerSession`] they leave behind. Kept apart from the per-request plumbing.

use super::client::{lock, Client};
use super::request::{parse_result, to_value, Era, RequestOptions};
use crate::error::ClientError;
use crate::transport::TransportError;
use serde_json::Map;
use std::sync::Arc;
use toolyard_proto::{
    meta, DiscoverResult, Implementation, InitializeResult, ProtocolVersion, ServerCapabilities,
};

/// Which protocol generation to speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProtocolChoice {
    /// Probe with `server/discover`; fall back to `initialize` when the server is legacy.
    #[default]
    Auto,
    /// Speak 2026-07-28 only.
    Modern,
    /// `initialize` with this revision, without probing.
    Legacy(ProtocolVersion),
}

/// What the client learned about the server in the handshake.
#[derive(Debug, Clone)]
pub struct ServerSession {
    /// The revision in use.
    pub protocol_version: ProtocolVersion,
    /// Who the server is (`serverInfo`; on a modern server, from discover's `_meta`).
    pub server_info: Option<Implementation>,
    /// What the server offers.
    pub capabilities: ServerCapabilities,
    /// How to use the server.
    pub instructions: Option<String>,
}

impl Client {
    pub(super) async fn handshake(&self) -> Result<(), ClientError> {
        match self.inner.protocol {
            ProtocolChoice::Legacy(v) => self.initialize(v).await,
            ProtocolChoice::Modern => match self.discover().await {
                Ok(_) => Ok(()),
                Err(e) => Err(ClientError::Initialization(format!(
                    "the server does not speak 2026-07-28: {e}"
                ))),
            },
            ProtocolChoice::Auto => match self.probe().await {
                Probe::Modern => Ok(()),
                Probe::Legacy(v) => match self.initialize(v).await {
                    // A modern server whose answer to the probe came too late (a slow
                    // start) refuses `initialize` with -32022: it is modern after all.
                    Err(ClientError::Rpc(e))
                        if e.code == toolyard_proto::error::code::UNSUPPORTED_PROTOCOL_VERSION =>
                    {
                        self.discover().await.map(drop).map_err(|d| {
                            ClientError::Initialization(format!(
                                "the server refused initialize ({}) and server/discover ({d})",
                                e.message
                            ))
                        })
                    }
                    other => other,
                },
                Probe::Failed(e) => Err(e),
            },
        }
    }

    /// `server/discover` with the probe timeout; tells the generation apart as the
    /// versioning page says: a modern answer or a modern error means modern, any other
    /// error (or silence) means legacy.
    async fn probe(&self) -> Probe {
        let opts = RequestOptions::default().timeout(self.inner.probe_timeout);
        match self.discover_with(opts).await {
            Ok(_) => Probe::Modern,
            Err(ClientError::Rpc(e))
                if e.code == toolyard_proto::error::code::UNSUPPORTED_PROTOCOL_VERSION =>
            {
                let supported: Vec<String> = e
                    .data
                    .as_ref()
                    .and_then(|d| d.get("supported"))
                    .and_then(|s| serde_json::from_value(s.clone()).ok())
                    .unwrap_or_default();
                match supported
                    .iter()
                    .filter_map(|v| ProtocolVersion::parse(v))
                    .filter(|v| v.is_legacy())
                    .max()
                {
                    Some(v) => Probe::Legacy(v),
                    None => Probe::Failed(ClientError::Initialization(format!(
                        "no protocol version in common (the server supports {supported:?})"
                    ))),
                }
            }
            Err(ClientError::Transport(
                e @ (TransportError::Exited(_)
                | TransportError::Closed
                | TransportError::Malformed(_)),
            )) => Probe::Failed(ClientError::Transport(e)),
            Err(ClientError::Auth(e)) => Probe::Failed(ClientError::Auth(e)),
            Err(ClientError::Transport(TransportError::Io(e))) => {
                Probe::Failed(ClientError::Transport(TransportError::Io(e)))
            }
            Err(ClientError::Closed) => Probe::Failed(ClientError::Closed),
            Err(_) => Probe::Legacy(ProtocolVersion::LATEST_LEGACY),
        }
    }

    /// `server/discover` (modern): what the server supports. Switches this client to the
    /// modern generation.
    pub async fn discover(&self) -> Result<DiscoverResult, ClientError> {
        self.discover_with(RequestOptions::default().timeout(self.inner.handshake_timeout))
            .await
    }

    async fn discover_with(&self, opts: RequestOptions) -> Result<DiscoverResult, ClientError> {
        let raw = self
            .round_trip("server/discover", &Map::new(), &opts, Era::Modern)
            .await?;
        let result: DiscoverResult = parse_result("server/discover", &raw)?;
        if !result
            .supported_versions
            .iter()
            .any(|v| v == ProtocolVersion::V2026_07_28.as_str())
        {
            return Err(ClientError::Initialization(format!(
                "the server supports {:?}, not 2026-07-28",
                result.supported_versions
            )));
        }
        let server_info = result
            .meta
            .as_ref()
            .and_then(|m| m.get(meta::SERVER_INFO))
            .and_then(|v| serde_json::from_value(v.clone()).ok());
        self.inner.session.store(Arc::new(Some(ServerSession {
            protocol_version: ProtocolVersion::V2026_07_28,
            server_info,
            capabilities: result.capabilities.clone(),
            instructions: result.instructions.clone(),
        })));
        self.inner.response_headers.store(Arc::new(vec![(
            "MCP-Protocol-Version".into(),
            ProtocolVersion::V2026_07_28.as_str().into(),
        )]));
        Ok(result)
    }

    async fn initialize(&self, version: ProtocolVersion) -> Result<(), ClientError> {
        let mut params = Map::new();
        params.insert("protocolVersion".into(), version.as_str().into());
        params.insert("capabilities".into(), to_value(&self.inner.capabilities));
        params.insert("clientInfo".into(), to_value(&self.inner.info));
        let opts = RequestOptions::default().timeout(self.inner.handshake_timeout);
        let raw = self
            .round_trip("initialize", &params, &opts, Era::Handshake)
            .await
            .map_err(|e| match e {
                e @ (ClientError::Transport(_) | ClientError::Auth(_) | ClientError::Closed) => e,
                ClientError::Rpc(e)
                    if e.code == toolyard_proto::error::code::UNSUPPORTED_PROTOCOL_VERSION =>
                {
                    ClientError::Rpc(e)
                }
                other => ClientError::Initialization(other.to_string()),
            })?;
        let result: InitializeResult = parse_result("initialize", &raw)?;
        let negotiated = ProtocolVersion::parse(&result.protocol_version)
            .filter(|v| v.is_legacy())
            .ok_or_else(|| {
                ClientError::Initialization(format!(
                    "the server chose protocol version {:?}, which this client does not speak",
                    result.protocol_version
                ))
            })?;
        self.inner.session.store(Arc::new(Some(ServerSession {
            protocol_version: negotiated,
            server_info: Some(result.server_info),
            capabilities: result.capabilities,
            instructions: result.instructions,
        })));
        self.inner.response_headers.store(Arc::new(vec![(
            "MCP-Protocol-Version".into(),
            negotiated.as_str().into(),
        )]));
        self.notify("notifications/initialized", Map::new()).await
    }

    pub(super) async fn reinitialize(&self) -> Result<(), ClientError> {
        let _one_at_a_time = self.inner.reinit.lock().await;
        let version = self
            .protocol_version()
            .filter(|v| v.is_legacy())
            .unwrap_or(ProtocolVersion::LATEST_LEGACY);
        tracing::info!(client = %self.inner.info.name, "the server forgot our session; initializing again");
        lock(&self.inner.cache).clear();
        self.initialize(version).await
    }
}

enum Probe {
    Modern,
    Legacy(ProtocolVersion),
    Failed(ClientError),
}
