//! The HTTP-level checks of a modern (2026-07-28) request before it is handed on: the
//! request gate (shared with every transport) answered as status 400, and the agreement of
//! the `MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name` and `Mcp-Param-*` headers with the
//! body (SEP-2243).

use super::{header_str, json_error, METHOD_HEADER, NAME_HEADER, VERSION_HEADER};
use crate::http::HttpState;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::Deserialize;
use toolyard_actors::transport::{modern_gate, GateError};
use toolyard_proto::error::code;
use toolyard_proto::jsonrpc::{self, Request};
use toolyard_proto::method::{self, NameField};
use toolyard_proto::{ErrorObject, RequestId, RequestMeta};

#[derive(Deserialize, Default)]
struct ModernHead {
    #[serde(rename = "_meta", default)]
    meta: Option<RequestMeta>,
    #[serde(default)]
    name: Option<serde_json::Value>,
    #[serde(default)]
    uri: Option<serde_json::Value>,
    /// Kept raw: parsed only for tools that mirror arguments into headers.
    #[serde(default)]
    arguments: Option<Box<serde_json::value::RawValue>>,
    #[serde(default, rename = "taskId")]
    task_id: Option<serde_json::Value>,
}

/// Decodes a header value: the `=?base64?...?=` sentinel form, or plain visible ASCII.
pub(super) fn decode_header(raw: &axum::http::HeaderValue) -> Result<String, String> {
    let text = raw
        .to_str()
        .map_err(|_| "header value has characters outside visible ASCII".to_owned())?;
    if let Some(inner) = text
        .strip_prefix("=?base64?")
        .and_then(|t| t.strip_suffix("?="))
    {
        use base64::Engine;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(inner)
            .map_err(|e| format!("invalid base64 in header value: {e}"))?;
        return String::from_utf8(bytes).map_err(|_| "base64 header value is not UTF-8".into());
    }
    if text
        .bytes()
        .any(|b| b != b'\t' && !(0x20..=0x7e).contains(&b))
    {
        return Err("header value has characters outside visible ASCII".into());
    }
    Ok(text.to_owned())
}

/// Whether a header's text stands for the body's value (numbers compare numerically).
fn same_value(header: &str, body: &serde_json::Value) -> bool {
    match body {
        serde_json::Value::String(s) => s == header,
        serde_json::Value::Bool(b) => header == if *b { "true" } else { "false" },
        serde_json::Value::Number(n) => match (n.as_f64(), header.trim().parse::<f64>()) {
            (Some(a), Ok(b)) => a == b,
            _ => false,
        },
        _ => false,
    }
}

/// `Mcp-Param-*` headers of a tools/call must mirror the tool's `x-mcp-header` arguments.
/// A tool the caller may not see (`Audience`) has none to check: its call is answered as an
/// unknown tool's, and a header mismatch would tell the caller it is there.
// The error is a ready response, built once on the rare rejection path.
#[allow(clippy::result_large_err)]
fn check_param_headers(
    state: &HttpState,
    headers: &HeaderMap,
    req: &Request,
    tool: Option<&str>,
    principal: Option<&str>,
    arguments: Option<&serde_json::value::RawValue>,
) -> Result<(), Response> {
    let def = tool.and_then(|t| state.server.tool_for(t, principal));
    let Some(def) = def else {
        return Ok(());
    };
    if def.header_params().is_empty() {
        return Ok(());
    }
    let arguments: Option<serde_json::Value> =
        arguments.and_then(|raw| serde_json::from_str(raw.get()).ok());
    let arguments = arguments.as_ref();
    for p in def.header_params() {
        let header_name = format!("mcp-param-{}", p.header.to_ascii_lowercase());
        let path = p.path.join(".");
        let mut value = arguments;
        for key in &p.path {
            value = value.and_then(|v| v.get(key));
        }
        let value = value.filter(|v| !v.is_null());
        match (headers.get(&header_name), value) {
            (None, None) => {}
            (None, Some(_)) => {
                return Err(mismatch(
                    &req.id,
                    format!(
                        "Header mismatch: missing Mcp-Param-{} header for argument `{path}`",
                        p.header
                    ),
                ))
            }
            (Some(_), None) => {
                return Err(mismatch(
                    &req.id,
                    format!(
                    "Header mismatch: Mcp-Param-{} header present but argument `{path}` is absent",
                    p.header
                ),
                ))
            }
            (Some(raw), Some(body)) => {
                let decoded = decode_header(raw).map_err(|why| {
                    mismatch(
                        &req.id,
                        format!("Header mismatch: Mcp-Param-{}: {why}", p.header),
                    )
                })?;
                if !same_value(&decoded, body) {
                    return Err(mismatch(
                        &req.id,
                        format!("Header mismatch: Mcp-Param-{} header value '{decoded}' does not match argument `{path}`", p.header),
                    ));
                }
            }
        }
    }
    Ok(())
}

pub(super) fn has_protocol_meta(req: &Request) -> bool {
    jsonrpc::params::<ModernHead>(req.params.as_deref())
        .ok()
        .and_then(|h| h.meta)
        .is_some_and(|m| m.protocol_version.is_some())
}

fn mismatch(id: &RequestId, message: String) -> Response {
    json_error(
        StatusCode::BAD_REQUEST,
        Some(id),
        ErrorObject::new(code::HEADER_MISMATCH, message),
    )
}

/// The HTTP-level checks of a modern request: `_meta`, version, and the SEP-2243 headers.
#[allow(clippy::result_large_err)]
pub(super) fn check_modern(
    state: &HttpState,
    headers: &HeaderMap,
    req: &Request,
    principal: Option<&str>,
) -> Result<RequestMeta, Response> {
    let head: ModernHead = jsonrpc::params(req.params.as_deref())
        .map_err(|e| json_error(StatusCode::BAD_REQUEST, Some(&req.id), e))?;
    let meta = head.meta.unwrap_or_default();
    let Some(version) = meta.protocol_version.as_deref() else {
        return Err(json_error(
            StatusCode::BAD_REQUEST,
            Some(&req.id),
            ErrorObject::invalid_params(format!(
                "Bad Request: no Mcp-Session-Id, and `_meta` lacks `{}` (protocol 2026-07-28)",
                toolyard_proto::meta::PROTOCOL_VERSION
            )),
        ));
    };
    if let Some(h) = header_str(headers, VERSION_HEADER) {
        if h != version {
            return Err(mismatch(
                &req.id,
                format!("Header mismatch: MCP-Protocol-Version header '{h}' does not match _meta version '{version}'"),
            ));
        }
    }
    match modern_gate(&req.method, version, &meta) {
        // A removed method is answered by the server after the header checks (404).
        Ok(_) | Err(GateError::RemovedInModern { .. }) => {}
        Err(e) => {
            return Err(json_error(
                StatusCode::BAD_REQUEST,
                Some(&req.id),
                e.to_error(),
            ))
        }
    }
    match header_str(headers, METHOD_HEADER) {
        None => {
            return Err(mismatch(
                &req.id,
                "Header mismatch: missing Mcp-Method header".into(),
            ))
        }
        Some(m) if m != req.method => {
            return Err(mismatch(
                &req.id,
                format!(
                    "Header mismatch: Mcp-Method header value '{m}' does not match body value '{}'",
                    req.method
                ),
            ))
        }
        _ => {}
    }
    let named = method::client_request(&req.method)
        .and_then(|spec| spec.mcp_name)
        .map(|field| match field {
            NameField::Name => head.name.clone(),
            NameField::Uri => head.uri.clone(),
            NameField::TaskId => head.task_id.clone(),
        });
    if let Some(body) = named {
        let body = body.as_ref().and_then(|v| v.as_str());
        let header = match headers.get(NAME_HEADER) {
            None => {
                return Err(mismatch(
                    &req.id,
                    "Header mismatch: missing Mcp-Name header".into(),
                ))
            }
            Some(raw) => decode_header(raw)
                .map_err(|why| mismatch(&req.id, format!("Header mismatch: Mcp-Name: {why}")))?,
        };
        if let Some(b) = body {
            if header != b {
                return Err(mismatch(
                    &req.id,
                    format!("Header mismatch: Mcp-Name header value '{header}' does not match body value '{b}'"),
                ));
            }
        }
    }
    if req.method == method::TOOLS_CALL {
        check_param_headers(
            state,
            headers,
            req,
            head.name.as_ref().and_then(|v| v.as_str()),
            principal,
            head.arguments.as_deref(),
        )?;
    }
    Ok(meta)
}
