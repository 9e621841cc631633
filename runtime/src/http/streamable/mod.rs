//! The Streamable HTTP endpoint: POST for messages, GET for a legacy session's stream,
//! DELETE to end a legacy session.
//!
//! This file holds the three handlers; `edge` checks a modern request's headers, `respond`
//! answers a request as JSON or SSE, `session` keeps legacy sessions and their replay buffers.

mod edge;
mod respond;
mod session;

use edge::{check_modern, has_protocol_meta};
use respond::{replay_stream, respond, Route, StreamGuard};
use session::SharedSessionSink;
pub(crate) use session::{new_session_id, spawn_reaper, NullSink, Session, SessionSink, Sessions};

use crate::http::HttpState;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use toolyard_actors::transport::Sink;
use toolyard_actors::TransportTrace;
use toolyard_proto::jsonrpc::{self, Incoming};
use toolyard_proto::method;
use toolyard_proto::{ErrorObject, ProtocolVersion, RequestId};

const SESSION_HEADER: &str = "mcp-session-id";
const VERSION_HEADER: &str = "mcp-protocol-version";
const METHOD_HEADER: &str = "mcp-method";
const NAME_HEADER: &str = "mcp-name";

#[allow(
    clippy::needless_pass_by_value,
    reason = "takes ownership: callers hand the value over and never use it again, so a borrow would only add noise at every call site"
)]
fn json_error(status: StatusCode, id: Option<&RequestId>, error: ErrorObject) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        jsonrpc::error_bytes(id, &error),
    )
        .into_response()
}

/// The request's own W3C trace headers (`traceparent`, with its `tracestate`, and
/// `baggage`), if it has any: what `_meta` does not carry, the request takes from here.
pub(crate) fn transport_trace_of(headers: &HeaderMap) -> Option<Arc<TransportTrace>> {
    let traceparent = header_str(headers, "traceparent");
    TransportTrace::of(
        traceparent,
        traceparent.and_then(|_| header_str(headers, "tracestate")),
        header_str(headers, "baggage"),
    )
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
}

fn accepts(headers: &HeaderMap, what: &str) -> bool {
    match headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) {
        None => true,
        Some(a) => a.split(',').any(|p| {
            let p = p.split(';').next().unwrap_or("").trim();
            p == what || p == "*/*" || (p == "application/*" && what.starts_with("application/"))
        }),
    }
}

/// Ready unless closing or the server's lifecycle says otherwise (a required component
/// down, see `Lifecycle::readiness`); the body lists what is down either way.
pub(crate) async fn readyz(State(state): State<Arc<HttpState>>) -> Response {
    let readiness = state.server.lifecycle().readiness();
    let status_text = if state.closing.is_cancelled() {
        "shutting-down"
    } else if readiness.ready {
        "ready"
    } else {
        "not-ready"
    };
    let down = super::health::down_json(&readiness);
    let body = serde_json::json!({
        "status": status_text,
        "sessions": state.sessions.len(),
        "streams": state.counters.streams.load(Ordering::Relaxed),
        "inFlight": state.counters.in_flight.load(Ordering::Relaxed),
        "tasks": state.server.running_tasks(),
        "down": down,
    });
    let status = if status_text == "ready" {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// The authenticated caller the OAuth layer put in the request, if any.
pub(crate) type Caller = Option<axum::Extension<super::auth::Principal>>;

pub(crate) fn principal_of(caller: Caller) -> Option<Arc<str>> {
    caller.map(|axum::Extension(p)| p.0)
}

/// The client's address, when the server was started with connect info (`serve_http`
/// does; a router mounted elsewhere may not).
pub(crate) type Remote = Option<axum::Extension<axum::extract::ConnectInfo<std::net::SocketAddr>>>;

pub(crate) fn peer_of(remote: Remote) -> Option<Arc<toolyard_actors::Peer>> {
    remote.map(|axum::Extension(axum::extract::ConnectInfo(a))| {
        Arc::new(toolyard_actors::Peer::http(a))
    })
}

pub(crate) async fn post(
    State(state): State<Arc<HttpState>>,
    caller: Caller,
    remote: Remote,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let principal = principal_of(caller);
    let peer = peer_of(remote);
    // The HTTP request's own trace context (an ingress or a client instrumenting its HTTP
    // calls): the request's span links it; with its baggage, it stands in for what `_meta`
    // does not carry.
    let transport_trace = transport_trace_of(&headers);
    let content_type = header_str(&headers, "content-type").unwrap_or("");
    if !content_type.starts_with("application/json") {
        return json_error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            None,
            ErrorObject::invalid_request(
                "Unsupported Media Type: Content-Type must be application/json",
            ),
        );
    }
    let accept_json = accepts(&headers, "application/json");
    let accept_sse = accepts(&headers, "text/event-stream");
    if !accept_json && !accept_sse {
        return json_error(
            StatusCode::NOT_ACCEPTABLE,
            None,
            ErrorObject::invalid_request(
                "Not Acceptable: Accept must include application/json and text/event-stream",
            ),
        );
    }
    let message = match jsonrpc::parse(&body) {
        Ok(m) => m,
        Err(r) => return json_error(StatusCode::BAD_REQUEST, r.id.as_ref(), r.error),
    };
    let session_id = header_str(&headers, SESSION_HEADER).map(str::to_owned);

    if let Incoming::Request(req) = &message {
        // A modern request named `initialize` is a removed method, not a new session.
        if req.method == method::INITIALIZE && session_id.is_none() && !has_protocol_meta(req) {
            return initialize(
                state,
                message,
                accept_json,
                principal,
                peer,
                transport_trace,
            )
            .await;
        }
    }
    if let Some(id) = session_id {
        let Some(session) = state.sessions.get(&id, &principal) else {
            return json_error(
                StatusCode::NOT_FOUND,
                None,
                ErrorObject::invalid_request(
                    "Session not found: it expired or was deleted; initialize again",
                ),
            );
        };
        if let Some(v) = header_str(&headers, VERSION_HEADER) {
            if ProtocolVersion::parse(v).is_none_or(|v| !v.is_legacy()) {
                return json_error(
                    StatusCode::BAD_REQUEST,
                    None,
                    ErrorObject::invalid_request(format!(
                        "Bad Request: unsupported MCP-Protocol-Version header '{v}'"
                    )),
                );
            }
        }
        session.touch();
        return match message {
            Incoming::Request(req) => {
                respond(
                    &state,
                    req,
                    accept_json,
                    peer,
                    transport_trace,
                    Route::Session {
                        session,
                        announce: None,
                    },
                )
                .await
            }
            other => {
                session.handle.deliver(other, None);
                StatusCode::ACCEPTED.into_response()
            }
        };
    }
    match message {
        Incoming::Request(req) => {
            let meta = match check_modern(&state, &headers, &req, principal.as_deref()) {
                Ok(meta) => meta,
                Err(r) => return r,
            };
            // Only a listen stream needs the (shared) connection's listener table; every
            // other modern request is served without an actor hop.
            let direct = (req.method != method::SUBSCRIPTIONS_LISTEN).then_some(meta);
            respond(
                &state,
                req,
                accept_json,
                peer,
                transport_trace,
                Route::Stateless { principal, direct },
            )
            .await
        }
        // Modern notifications (e.g. a cancellation) and stray responses need no session:
        // cancelling a modern request is closing its response stream.
        _ => StatusCode::ACCEPTED.into_response(),
    }
}

async fn initialize(
    state: Arc<HttpState>,
    message: Incoming,
    accept_json: bool,
    principal: Option<Arc<str>>,
    peer: Option<Arc<toolyard_actors::Peer>>,
    transport_trace: Option<Arc<TransportTrace>>,
) -> Response {
    if state.sessions.len() >= state.config.max_sessions {
        return json_error(
            StatusCode::SERVICE_UNAVAILABLE,
            None,
            ErrorObject::internal("too many live sessions; try again later"),
        );
    }
    let Incoming::Request(req) = message else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let id = new_session_id();
    let sink = Arc::new(SessionSink::default());
    let handle = match state
        .server
        .connect_from(
            Sink::new(SharedSessionSink(sink.clone())),
            Some(id.clone().into()),
            principal.clone(),
            peer.as_deref().cloned(),
        )
        .await
    {
        Ok(h) => h,
        Err(e) => {
            return json_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                Some(&req.id),
                ErrorObject::internal(e.to_string()),
            )
        }
    };
    let session = Arc::new(Session::new(handle.clone(), sink, principal));
    state.sessions.insert(id.clone(), session.clone());
    respond(
        &state,
        req,
        accept_json,
        peer,
        transport_trace,
        Route::Session {
            session,
            announce: Some(id),
        },
    )
    .await
}

pub(crate) async fn get(
    State(state): State<Arc<HttpState>>,
    caller: Caller,
    headers: HeaderMap,
) -> Response {
    let principal = principal_of(caller);
    let Some(id) = header_str(&headers, SESSION_HEADER) else {
        return (
            StatusCode::METHOD_NOT_ALLOWED,
            [(header::ALLOW, "POST")],
            "GET needs an Mcp-Session-Id (legacy sessions); 2026-07-28 uses subscriptions/listen",
        )
            .into_response();
    };
    if !accepts(&headers, "text/event-stream") {
        return StatusCode::NOT_ACCEPTABLE.into_response();
    }
    let Some(session) = state.sessions.get(id, &principal) else {
        return json_error(
            StatusCode::NOT_FOUND,
            None,
            ErrorObject::invalid_request("Session not found"),
        );
    };
    session.touch();
    if let Some(last) = header_str(&headers, "last-event-id") {
        let parsed = last
            .split_once('-')
            .and_then(|(s, q)| Some((s.parse::<u64>().ok()?, q.parse::<u64>().ok()?)));
        let Some((stream_id, seq)) = parsed else {
            return (StatusCode::BAD_REQUEST, "malformed Last-Event-ID").into_response();
        };
        let Some(replay) = session.stream(stream_id) else {
            return (StatusCode::NOT_FOUND, "that stream is no longer available").into_response();
        };
        let attached = replay.lock().unwrap_or_else(|p| p.into_inner()).attach(seq);
        return replay_stream(&state, stream_id, attached, false);
    }
    let (tx, rx) = mpsc::unbounded_channel();
    session.sink.attach(tx);
    state.counters.streams.fetch_add(1, Ordering::Relaxed);
    let counted = StreamGuard {
        cancel: CancellationToken::new(),
        state: state.clone(),
        answered: true,
    };
    let closing = state.closing.clone();
    let stream =
        futures_util::stream::unfold((rx, counted, closing), |(mut rx, g, closing)| async move {
            let next = tokio::select! {
                m = rx.recv() => m,
                _ = closing.cancelled() => None,
            };
            let bytes = next?;
            let event = Event::default()
                .event("message")
                .data(String::from_utf8_lossy(&bytes));
            Some((Ok::<_, Infallible>(event), (rx, g, closing)))
        });
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(state.config.keep_alive))
        .into_response()
}

pub(crate) async fn delete(
    State(state): State<Arc<HttpState>>,
    caller: Caller,
    headers: HeaderMap,
) -> Response {
    let principal = principal_of(caller);
    let Some(id) = header_str(&headers, SESSION_HEADER) else {
        return (StatusCode::METHOD_NOT_ALLOWED, [(header::ALLOW, "POST")]).into_response();
    };
    match state.sessions.remove_for(id, &principal) {
        Some(s) => {
            s.close();
            StatusCode::OK.into_response()
        }
        None => StatusCode::NOT_FOUND.into_response(),
    }
}
