//! `/healthz` and `/readyz` alone, for a process that serves MCP some other way (a NATS
//! worker serves on the bus): an orchestrator's liveness and readiness probes read the
//! server's lifecycle, as the MCP router's own `/readyz` does.

use crate::Server;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// A router of `/healthz` (200 `ok` while the process answers at all: a wedged runtime
/// fails it) and `/readyz` (200 when the server has started, is not stopping and no
/// required component is down; otherwise 503; the JSON body says which and why).
pub fn health_router(server: Server) -> axum::Router {
    axum::Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(move || std::future::ready(readyz(&server))))
}

fn readyz(server: &Server) -> Response {
    let readiness = server.lifecycle().readiness();
    let status = if readiness.ready {
        "ready"
    } else if readiness.down.iter().any(|d| d.3) {
        "not-ready"
    } else {
        // Started and nothing required down: it is stopping (or not started yet).
        "shutting-down"
    };
    let down = down_json(&readiness);
    let code = if readiness.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        code,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        serde_json::json!({"status": status, "down": down}).to_string(),
    )
        .into_response()
}

/// The components down, as both `/readyz` bodies list them.
pub(crate) fn down_json(readiness: &toolyard_actors::Readiness) -> Vec<serde_json::Value> {
    readiness
        .down
        .iter()
        .map(|(kind, name, reason, required)| {
            serde_json::json!({"kind": kind, "name": name, "reason": reason, "required": required})
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn get_status(base: &str, path: &str) -> (u16, serde_json::Value) {
        let r = reqwest::get(format!("{base}{path}")).await.unwrap();
        let status = r.status().as_u16();
        let bytes = r.bytes().await.unwrap();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null),
        )
    }

    #[tokio::test]
    async fn readyz_follows_the_servers_required_components_and_healthz_stays_ok() {
        let server = crate::ServerBuilder::new("probed", "1")
            .start()
            .await
            .unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let app = health_router(server.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        assert_eq!(get_status(&base, "/healthz").await.0, 200);
        assert_eq!(get_status(&base, "/readyz").await.0, 200);
        server
            .lifecycle()
            .publish(crate::LifecycleEvent::ComponentDown {
                kind: "nats",
                name: "bus".into(),
                reason: "disconnected".into(),
                required: true,
            });
        let (status, body) = get_status(&base, "/readyz").await;
        assert_eq!(status, 503);
        assert_eq!(body["status"], "not-ready");
        assert_eq!(body["down"][0]["name"], "bus");
        assert_eq!(get_status(&base, "/healthz").await.0, 200);
        server
            .lifecycle()
            .publish(crate::LifecycleEvent::ComponentUp {
                kind: "nats",
                name: "bus".into(),
            });
        assert_eq!(get_status(&base, "/readyz").await.0, 200);
        server.lifecycle().publish(crate::LifecycleEvent::Stopping);
        let (status, body) = get_status(&base, "/readyz").await;
        assert_eq!(status, 503);
        assert_eq!(body["status"], "shutting-down");
    }
}
