//! The gateway's admin API, beside MCP on the HTTP server and behind its own bearer token:
//!
//! - `GET /admin/sources`: every source with health, restarts and exposed names;
//! - `POST /admin/sources`: add a source (the JSON form of a `[[sources]]` entry);
//! - `DELETE /admin/sources/{name}`: remove one;
//! - `POST /admin/sources/{name}/refresh`: discover its items again.
//!
//! The token is compared in constant time; without a token configured the API is not
//! mounted at all.

use super::config::{resolve_source, GatewaySection, SourceConfig};
use super::gateway::{Gateway, GatewayError};
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::json;
use std::path::PathBuf;
use std::sync::Arc;

struct Admin {
    gateway: Gateway,
    token: String,
    base_dir: PathBuf,
    section: GatewaySection,
}

/// The admin routes for `gateway`, accepting `Authorization: Bearer <token>`; sources added
/// through it resolve relative paths against `base_dir`.
pub fn admin_router(
    gateway: Gateway,
    token: String,
    base_dir: PathBuf,
    section: GatewaySection,
) -> axum::Router {
    let admin = Arc::new(Admin {
        gateway,
        token,
        base_dir,
        section,
    });
    axum::Router::new()
        .route("/admin/sources", get(list).post(add))
        .route("/admin/sources/{name}", axum::routing::delete(remove))
        .route("/admin/sources/{name}/refresh", post(refresh))
        .with_state(admin)
}

/// A JSON body (axum's `json` feature stays off: this is the one place that wants it).
#[allow(
    clippy::needless_pass_by_value,
    reason = "takes ownership: callers hand the value over and never use it again, so a borrow would only add noise at every call site"
)]
fn json_body(status: StatusCode, value: serde_json::Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        value.to_string(),
    )
        .into_response()
}

fn authorized(admin: &Admin, headers: &HeaderMap) -> bool {
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default();
    let expected = admin.token.as_bytes();
    let same = given.len() == expected.len()
        && given
            .bytes()
            .zip(expected)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0;
    same
}

fn unauthorized() -> Response {
    let mut r = json_body(
        StatusCode::UNAUTHORIZED,
        json!({"error": "the admin API needs its bearer token"}),
    );
    r.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        header::HeaderValue::from_static("Bearer"),
    );
    r
}

#[allow(
    clippy::needless_pass_by_value,
    reason = "takes ownership: callers hand the value over and never use it again, so a borrow would only add noise at every call site"
)]
fn failure(e: GatewayError) -> Response {
    let status = match e {
        GatewayError::Duplicate(_) => StatusCode::CONFLICT,
        GatewayError::Unknown(_) => StatusCode::NOT_FOUND,
        GatewayError::Actor(_) => StatusCode::INTERNAL_SERVER_ERROR,
        _ => StatusCode::BAD_GATEWAY,
    };
    json_body(status, json!({"error": e.to_string()}))
}

async fn list(State(admin): State<Arc<Admin>>, headers: HeaderMap) -> Response {
    if !authorized(&admin, &headers) {
        return unauthorized();
    }
    json_body(StatusCode::OK, json!({ "sources": admin.gateway.status() }))
}

async fn add(
    State(admin): State<Arc<Admin>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    if !authorized(&admin, &headers) {
        return unauthorized();
    }
    let config: SourceConfig = match serde_json::from_slice(&body) {
        Ok(c) => c,
        Err(e) => {
            return json_body(
                StatusCode::BAD_REQUEST,
                json!({"error": format!("invalid source: {e}")}),
            )
        }
    };
    let spec = match resolve_source(&config, &admin.base_dir, &admin.section) {
        Ok(spec) => spec,
        Err(e) => return json_body(StatusCode::BAD_REQUEST, json!({"error": e.to_string()})),
    };
    let name = spec.name.clone();
    match admin.gateway.add_source(spec).await {
        Ok(()) => json_body(StatusCode::CREATED, json!({"added": name})),
        Err(e) => failure(e),
    }
}

async fn remove(
    State(admin): State<Arc<Admin>>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Response {
    if !authorized(&admin, &headers) {
        return unauthorized();
    }
    match admin.gateway.remove_source(&name).await {
        Ok(()) => json_body(StatusCode::OK, json!({"removed": name})),
        Err(e) => failure(e),
    }
}

async fn refresh(
    State(admin): State<Arc<Admin>>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Response {
    if !authorized(&admin, &headers) {
        return unauthorized();
    }
    match admin.gateway.refresh(&name).await {
        Ok(()) => json_body(StatusCode::OK, json!({"refreshed": name})),
        Err(e) => failure(e),
    }
}
