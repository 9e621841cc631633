//! Answering one request: as a JSON body when the answer is the first thing produced, as an
//! SSE stream otherwise (progress, logs and questions first), resumable for legacy sessions.
//! Closing the stream before the answer cancels the request.

use super::session::{Attached, Session, RETRY};
use super::{json_error, SESSION_HEADER};
use crate::http::HttpState;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use toolyard_actors::transport::{Delivery, Sink};
use toolyard_actors::TransportTrace;
use toolyard_proto::error::code;
use toolyard_proto::jsonrpc::Request;
use toolyard_proto::method::{self};
use toolyard_proto::{ErrorObject, RequestMeta};

/// Our serializer writes `{"jsonrpc":"2.0","id":<id>,"result"` / `,"error"` for the answer
/// of a request: recognizing it needs no parse.
pub(super) fn is_answer(bytes: &[u8], prefix: &[u8]) -> bool {
    bytes.starts_with(prefix)
        && (bytes[prefix.len()..].starts_with(b"\"result\"")
            || bytes[prefix.len()..].starts_with(b"\"error\""))
}

fn status_of_error(bytes: &[u8]) -> StatusCode {
    #[derive(Deserialize)]
    struct E {
        error: Option<ErrorObject>,
    }
    match serde_json::from_slice::<E>(bytes)
        .ok()
        .and_then(|e| e.error)
        .map(|e| e.code)
    {
        Some(code::METHOD_NOT_FOUND) => StatusCode::NOT_FOUND,
        Some(
            code::MISSING_REQUIRED_CLIENT_CAPABILITY
            | code::UNSUPPORTED_PROTOCOL_VERSION
            | code::HEADER_MISMATCH
            | code::INVALID_REQUEST
            | code::PARSE_ERROR,
        ) => StatusCode::BAD_REQUEST,
        _ => StatusCode::OK,
    }
}

/// Cancels the request when its response stream is dropped before the answer was sent.
pub(super) struct StreamGuard {
    pub(super) cancel: CancellationToken,
    pub(super) state: Arc<HttpState>,
    pub(super) answered: bool,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        if !self.answered {
            self.cancel.cancel();
        }
        self.state.counters.streams.fetch_sub(1, Ordering::Relaxed);
    }
}

struct InFlight(Arc<HttpState>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.counters.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Where a request goes and how its answer is shaped.
// Built and consumed within one call, never stored: boxing the larger variant would cost an
// allocation per modern request for nothing.
#[allow(clippy::large_enum_variant)]
pub(super) enum Route {
    /// A request of a legacy session: its connection tracks it, and a broken stream can be
    /// resumed with `Last-Event-ID`. `announce` is the session id to put in the response
    /// headers (the `initialize` that created the session).
    Session {
        session: Arc<Session>,
        announce: Option<String>,
    },
    /// A modern (2026-07-28) request on the shared sessionless connection: error answers get
    /// the HTTP status of their code. `direct` is its checked `_meta` when it is served
    /// without an actor hop (everything but `subscriptions/listen`).
    Stateless {
        principal: Option<Arc<str>>,
        direct: Option<RequestMeta>,
    },
}

/// Hands a request to a connection and answers with JSON when the first thing produced is
/// the answer, or with an SSE stream that ends with the answer otherwise.
pub(super) async fn respond(
    state: &Arc<HttpState>,
    req: Request,
    accept_json: bool,
    peer: Option<Arc<toolyard_actors::Peer>>,
    transport_trace: Option<Arc<TransportTrace>>,
    route: Route,
) -> Response {
    let (mut session, mut session_id, mut principal, mut direct) = (None, None, None, None);
    let handle = match route {
        Route::Session {
            session: s,
            announce,
        } => {
            session_id = announce;
            session.insert(s).handle.clone()
        }
        Route::Stateless {
            principal: p,
            direct: d,
        } => {
            principal = p;
            direct = d;
            state.stateless.clone()
        }
    };
    let modern = session.is_none();
    let track = session.is_some();
    state.counters.in_flight.fetch_add(1, Ordering::Relaxed);
    let in_flight = InFlight(state.clone());
    let (tx, mut rx) = mpsc::unbounded_channel();
    let cancel = CancellationToken::new();
    let mut prefix = Vec::with_capacity(32);
    prefix.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    let _ = serde_json::to_writer(&mut prefix, &req.id);
    prefix.push(b',');
    let delivery = Delivery {
        sink: Sink::channel(tx),
        cancel: cancel.clone(),
        track,
        principal,
        peer,
        transport_trace,
    };
    let id = req.id.clone();
    // In-flight calls may finish during a graceful shutdown; a listen stream never
    // finishes, so it is the one thing shutdown ends.
    let closing = if req.method == method::SUBSCRIPTIONS_LISTEN {
        state.closing.clone()
    } else {
        CancellationToken::new()
    };
    if let Some(meta) = direct {
        state.server.serve_stateless(req, meta, delivery);
    } else if !handle.deliver_request(req, delivery) {
        return json_error(
            StatusCode::NOT_FOUND,
            Some(&id),
            ErrorObject::invalid_request("Session not found: the session has ended"),
        );
    }
    let guard = |answered| StreamGuard {
        cancel: cancel.clone(),
        state: state.clone(),
        answered,
    };
    state.counters.streams.fetch_add(1, Ordering::Relaxed);
    let mut early = guard(false);
    let first = tokio::select! {
        m = rx.recv() => m,
        _ = closing.cancelled() => None,
    };
    let Some(first) = first else {
        return json_error(
            StatusCode::SERVICE_UNAVAILABLE,
            Some(&id),
            ErrorObject::internal("the server is shutting down"),
        );
    };
    let mut response = if is_answer(&first, &prefix) && accept_json {
        early.answered = true;
        drop(early);
        drop(in_flight);
        let status = if modern {
            status_of_error(&first)
        } else {
            StatusCode::OK
        };
        (status, [(header::CONTENT_TYPE, "application/json")], first).into_response()
    } else if let Some(session) = session {
        // Legacy: the call outlives a broken stream; the client resumes it with GET and
        // Last-Event-ID.
        early.answered = true;
        drop(early);
        resumable(state, &session, first, rx, prefix, in_flight)
    } else {
        early.answered = is_answer(&first, &prefix);
        let done = early.answered;
        let stream = futures_util::stream::unfold(
            (
                Some(first),
                rx,
                early,
                done,
                prefix,
                closing,
                Some(in_flight),
            ),
            |(pending, mut rx, mut guard, done, prefix, closing, in_flight)| async move {
                if let Some(bytes) = pending {
                    let event = Event::default()
                        .event("message")
                        .data(String::from_utf8_lossy(&bytes));
                    return Some((
                        Ok::<_, Infallible>(event),
                        (None, rx, guard, done, prefix, closing, in_flight),
                    ));
                }
                if done {
                    return None;
                }
                let next = tokio::select! {
                    m = rx.recv() => m,
                    _ = closing.cancelled() => None,
                };
                let bytes = next?;
                let answered = is_answer(&bytes, &prefix);
                if answered {
                    guard.answered = true;
                }
                let event = Event::default()
                    .event("message")
                    .data(String::from_utf8_lossy(&bytes));
                Some((
                    Ok(event),
                    (None, rx, guard, answered, prefix, closing, in_flight),
                ))
            },
        );
        Sse::new(stream)
            .keep_alive(KeepAlive::new().interval(state.config.keep_alive))
            .into_response()
    };
    if let Some(sid) = session_id {
        if let Ok(v) = HeaderValue::from_str(&sid) {
            response.headers_mut().insert(SESSION_HEADER, v);
        }
    }
    response
}

/// Pumps a legacy request's messages into its replay buffer and answers with a stream of
/// them: a priming event (id, empty data, `retry`), then every message with an event id.
fn resumable(
    state: &Arc<HttpState>,
    session: &Arc<Session>,
    first: Vec<u8>,
    mut rx: mpsc::UnboundedReceiver<Vec<u8>>,
    prefix: Vec<u8>,
    in_flight: InFlight,
) -> Response {
    let (stream_id, replay) = session.open_stream();
    let attached = replay.lock().unwrap_or_else(|p| p.into_inner()).attach(0);
    let pump = replay;
    tokio::spawn(async move {
        let _in_flight = in_flight;
        let mut next = Some(first);
        while let Some(bytes) = next.take() {
            let answered = is_answer(&bytes, &prefix);
            {
                let mut r = pump.lock().unwrap_or_else(|p| p.into_inner());
                r.push(String::from_utf8_lossy(&bytes).into());
                if answered {
                    r.done = true;
                    r.live = None;
                    return;
                }
            }
            next = rx.recv().await;
        }
        let mut r = pump.lock().unwrap_or_else(|p| p.into_inner());
        r.done = true;
        r.live = None;
    });
    replay_stream(state, stream_id, attached, true)
}

pub(super) fn replay_stream(
    state: &Arc<HttpState>,
    stream_id: u64,
    (backlog, live): Attached,
    priming: bool,
) -> Response {
    state.counters.streams.fetch_add(1, Ordering::Relaxed);
    let counted = StreamGuard {
        cancel: CancellationToken::new(),
        state: state.clone(),
        answered: true,
    };
    let event = move |seq: u64, data: &str| {
        Event::default()
            .event("message")
            .id(format!("{stream_id}-{seq}"))
            .data(data)
    };
    let head: Vec<Event> = priming
        .then(|| {
            Event::default()
                .id(format!("{stream_id}-0"))
                .retry(RETRY)
                .data("")
        })
        .into_iter()
        .chain(backlog.iter().map(|(seq, d)| event(*seq, d)))
        .collect();
    use futures_util::StreamExt;
    let head = futures_util::stream::iter(head.into_iter().map(Ok::<_, Infallible>));
    let tail = futures_util::stream::unfold((live, counted), move |(mut live, g)| async move {
        let (seq, data) = live.as_mut()?.recv().await?;
        Some((Ok(event(seq, &data)), (live, g)))
    });
    Sse::new(head.chain(tail))
        .keep_alive(KeepAlive::new().interval(state.config.keep_alive))
        .into_response()
}
