//! The 2024-11-05 HTTP+SSE transport: `GET /sse` opens a session and announces the POST
//! endpoint in an `endpoint` event; the client POSTs messages to `/messages?sessionId=...`
//! and every answer comes on the SSE stream.

use super::streamable::{
    new_session_id, principal_of, transport_trace_of, Caller, Session, SessionSink,
};
use super::HttpState;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::sync::mpsc;
use toolyard_actors::transport::Sink;
use toolyard_proto::jsonrpc;

struct Closer {
    state: Arc<HttpState>,
    id: String,
}

impl Drop for Closer {
    fn drop(&mut self) {
        if let Some(s) = self.state.sessions.remove(&self.id) {
            s.handle.close();
        }
        self.state.counters.streams.fetch_sub(1, Ordering::Relaxed);
    }
}

pub(crate) async fn open(
    State(state): State<Arc<HttpState>>,
    caller: Caller,
    remote: super::streamable::Remote,
) -> Response {
    let principal = principal_of(caller);
    let peer = super::streamable::peer_of(remote);
    if state.sessions.len() >= state.config.max_sessions {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    let id = new_session_id();
    let (tx, rx) = mpsc::unbounded_channel();
    let sink = Arc::new(SessionSink::default());
    let Ok(handle) = state
        .server
        .connect_from(
            Sink::channel(tx),
            Some(id.clone().into()),
            principal.clone(),
            peer.as_deref().cloned(),
        )
        .await
    else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    state
        .sessions
        .insert(id.clone(), Arc::new(Session::new(handle, sink, principal)));
    state.counters.streams.fetch_add(1, Ordering::Relaxed);
    let endpoint = Event::default()
        .event("endpoint")
        .data(format!("/messages?sessionId={id}"));
    let closer = Closer {
        state: state.clone(),
        id,
    };
    let closing = state.closing.clone();
    let first = futures_util::stream::once(async move { Ok::<_, Infallible>(endpoint) });
    let rest =
        futures_util::stream::unfold((rx, closer, closing), |(mut rx, c, closing)| async move {
            let next = tokio::select! {
                m = rx.recv() => m,
                _ = closing.cancelled() => None,
            };
            let bytes = next?;
            let event = Event::default()
                .event("message")
                .data(String::from_utf8_lossy(&bytes));
            Some((Ok(event), (rx, c, closing)))
        });
    use futures_util::StreamExt;
    Sse::new(first.chain(rest))
        .keep_alive(KeepAlive::new().interval(state.config.keep_alive))
        .into_response()
}

#[derive(Deserialize)]
pub(crate) struct SessionQuery {
    #[serde(rename = "sessionId")]
    session_id: String,
}

pub(crate) async fn message(
    State(state): State<Arc<HttpState>>,
    caller: Caller,
    Query(q): Query<SessionQuery>,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> Response {
    let Some(session) = state.sessions.get(&q.session_id, &principal_of(caller)) else {
        return (StatusCode::NOT_FOUND, "unknown session").into_response();
    };
    match jsonrpc::parse(&body) {
        Ok(m) => {
            // The POST's own trace headers stand in for what `_meta` does not carry.
            session
                .handle
                .deliver_with_trace(m, transport_trace_of(&headers));
            (StatusCode::ACCEPTED, "Accepted").into_response()
        }
        Err(r) => {
            // The error goes where every answer of this transport goes: the SSE stream.
            session.handle.receive(&body);
            (StatusCode::BAD_REQUEST, r.error.message.into_owned()).into_response()
        }
    }
}
