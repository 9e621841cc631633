//! The request gate: which generation a request belongs to and whether that generation
//! serves it, decided in one place for every transport (stdio, in-memory, HTTP, and whatever
//! calls [`Server::serve_stateless`](crate::Server::serve_stateless)).
//!
//! A request is modern (2026-07-28) when its `_meta` names a protocol version, legacy
//! otherwise. A modern request must name a modern version and carry its client capabilities,
//! and may not use a method 2026-07-28 removed. The method properties come from
//! [`toolyard_proto::method::CLIENT_REQUESTS`]. Transport-specific checks (the HTTP
//! `Mcp-Method`/`Mcp-Name` headers) stay with the transport, which calls [`modern`] too.

use toolyard_proto::{method, ErrorObject, ProtocolVersion, RequestMeta};

/// Why the gate refused a modern request. Mapped once to its JSON-RPC error by
/// [`GateError::to_error`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GateError {
    /// `_meta` names a version this server does not serve as modern.
    #[error("Unsupported protocol version: {0}")]
    UnsupportedVersion(String),
    /// `_meta` lacks the client capabilities every modern request carries.
    #[error(
        "`_meta` must carry `{}` on every 2026-07-28 request",
        toolyard_proto::meta::CLIENT_CAPABILITIES
    )]
    MissingCapabilities,
    /// The method exists only in the session-based revisions.
    #[error("Method not found: `{method}` does not exist in protocol {version}")]
    RemovedInModern {
        /// The method.
        method: String,
        /// The version the request asked for.
        version: ProtocolVersion,
    },
}

impl GateError {
    /// The JSON-RPC error to answer with (-32602 for `_meta` problems and unsupported
    /// versions carry the supported list, -32601 for removed methods).
    pub fn to_error(&self) -> ErrorObject {
        match self {
            GateError::UnsupportedVersion(v) => ErrorObject::unsupported_version(v),
            GateError::MissingCapabilities => ErrorObject::invalid_params(self.to_string()),
            GateError::RemovedInModern { method, .. } => {
                ErrorObject::method_not_found(method).with_message(self.to_string())
            }
        }
    }
}

/// The modern version `requested`, if it is one.
pub(crate) fn modern_version(requested: &str) -> Result<ProtocolVersion, GateError> {
    match ProtocolVersion::parse(requested) {
        Some(v) if !v.is_legacy() => Ok(v),
        _ => Err(GateError::UnsupportedVersion(requested.to_owned())),
    }
}

/// Checks a request whose `_meta` names the protocol version `requested`: the version, the
/// capabilities, the method. Gives the negotiated version.
pub fn modern(
    method_name: &str,
    requested: &str,
    meta: &RequestMeta,
) -> Result<ProtocolVersion, GateError> {
    let version = modern_version(requested)?;
    if meta.client_capabilities.is_none() {
        return Err(GateError::MissingCapabilities);
    }
    if method::removed_in_modern(method_name) {
        return Err(GateError::RemovedInModern {
            method: method_name.to_owned(),
            version,
        });
    }
    Ok(version)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(caps: bool) -> RequestMeta {
        let mut m = RequestMeta::default();
        if caps {
            m.client_capabilities = Some(Default::default());
        }
        m
    }

    #[test]
    fn a_modern_request_needs_a_modern_version_capabilities_and_a_method_it_still_has() {
        assert_eq!(
            modern("tools/call", "2026-07-28", &meta(true)),
            Ok(ProtocolVersion::parse("2026-07-28").unwrap())
        );
        assert_eq!(
            modern("tools/call", "2025-06-18", &meta(true)),
            Err(GateError::UnsupportedVersion("2025-06-18".into()))
        );
        assert_eq!(
            modern("tools/call", "2026-07-28", &meta(false)),
            Err(GateError::MissingCapabilities)
        );
        let removed = modern("initialize", "2026-07-28", &meta(true)).unwrap_err();
        assert_eq!(
            removed.to_error().code,
            toolyard_proto::error::code::METHOD_NOT_FOUND
        );
        assert!(removed
            .to_string()
            .contains("does not exist in protocol 2026-07-28"));
        // Custom methods are the router's business, not the gate's.
        assert!(modern("x/custom", "2026-07-28", &meta(true)).is_ok());
    }
}
