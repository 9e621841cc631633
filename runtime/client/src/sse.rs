//! The 2024-11-05 HTTP+SSE client transport and the `text/event-stream` parser both HTTP
//! transports read with. How it works is documented on [`SseTransport`].

use super::auth::AuthProvider;
use super::http::{content_type, deliver, error_body, pump, HttpBase, HttpOptions};
use crate::{
    EventSink, OutboundKind, OutboundMessage, Transport, TransportError, TransportEvent,
    TransportLink,
};
use reqwest::header::{ACCEPT, CONTENT_TYPE};
use reqwest::Method;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::AbortHandle;
use toolyard_proto::BoxFuture;
use toolyard_proto::RequestId;

/// The default for [`SseTransport::endpoint_timeout`].
pub const DEFAULT_ENDPOINT_TIMEOUT: Duration = Duration::from_secs(10);

/// A client transport over the 2024-11-05 HTTP+SSE transport.
///
/// # How it works
///
/// The 2024-11-05 HTTP+SSE client transport, and the `text/event-stream` parser both HTTP
/// transports read with.
///
/// The old transport has two endpoints: a long-lived `GET` SSE stream (e.g. `/sse`) whose
/// first event, `endpoint`, names the URL to POST messages to; every answer, notification and
/// server request then arrives on that one stream as a `message` event, and each POST is only
/// acknowledged (202). So [`SseTransport::start`] returns once the endpoint is known, a send
/// is a POST whose failure fails only its request, and the end of the stream is the end of
/// the connection ([`TransportEvent::Closed`]). Cancelling a request closes nothing here:
/// the client's `notifications/cancelled` is the only way to tell the server.
///
/// ```no_run
/// use toolyard_client::SseTransport;
///
/// let transport = SseTransport::new("http://127.0.0.1:8080/sse");
/// ```
pub struct SseTransport {
    url: String,
    config: HttpOptions,
    endpoint_timeout: Duration,
    /// The first event must be `endpoint` (the fallback from Streamable HTTP: anything else
    /// means the URL is not an HTTP+SSE endpoint).
    strict: bool,
}

impl std::fmt::Debug for SseTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SseTransport")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl SseTransport {
    /// A transport to the SSE endpoint at `url` (e.g. `http://127.0.0.1:8080/sse`).
    pub fn new(url: impl Into<String>) -> Self {
        SseTransport {
            url: url.into(),
            config: HttpOptions::default(),
            endpoint_timeout: DEFAULT_ENDPOINT_TIMEOUT,
            strict: false,
        }
    }

    /// The transport [`StreamableHttpTransport::auto`](crate::StreamableHttpTransport::auto)
    /// falls back to: its options, and a stream whose first event must be `endpoint`.
    pub(crate) fn fallback(url: &str, config: HttpOptions, endpoint_timeout: Duration) -> Self {
        SseTransport {
            url: url.to_owned(),
            config,
            endpoint_timeout,
            strict: true,
        }
    }

    /// Sends this header on every HTTP request (the GET and every POST).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.config.headers.push((name.into(), value.into()));
        self
    }

    /// Where the `Authorization` header comes from; a 401/403 asks it once for better
    /// credentials.
    pub fn auth(mut self, provider: Arc<dyn AuthProvider>) -> Self {
        self.config.auth = Some(provider);
        self
    }

    /// Uses this HTTP client instead of building one.
    pub fn client(mut self, client: reqwest::Client) -> Self {
        self.config.client = Some(client);
        self
    }

    /// The largest SSE event accepted; a bigger one closes the connection.
    pub fn max_message_bytes(mut self, bytes: usize) -> Self {
        self.config.max_message_bytes = bytes;
        self
    }

    /// How long establishing a connection may take.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.config.connect_timeout = timeout;
        self
    }

    /// How long `start` waits for the stream and its `endpoint` event. Default 10 s.
    pub fn endpoint_timeout(mut self, timeout: Duration) -> Self {
        self.endpoint_timeout = timeout;
        self
    }
}

impl Transport for SseTransport {
    fn start(
        self: Box<Self>,
        events: EventSink,
    ) -> BoxFuture<Result<Arc<dyn TransportLink>, TransportError>> {
        Box::pin(async move {
            let base = HttpBase::new(&self.url, self.config)?;
            let mut parser = SseParser::new(base.max_message_bytes);
            let (mut resp, endpoint) = tokio::time::timeout(
                self.endpoint_timeout,
                open(&base, &mut parser, &events, self.strict),
            )
            .await
            .map_err(|_| {
                TransportError::Io(format!(
                    "no endpoint event from {} within {:?}",
                    base.url, self.endpoint_timeout
                ))
            })??;
            let reader_events = events.clone();
            let reader = tokio::spawn(async move {
                let end = pump(&reader_events, &mut resp, &mut parser, None).await;
                let error = match end {
                    Ok(_) => TransportError::Io("the SSE stream ended".into()),
                    Err(e) => e,
                };
                let _ = reader_events.send(TransportEvent::Closed(error));
            });
            Ok(Arc::new(SseLink(Arc::new(SseInner {
                base,
                endpoint,
                events,
                runtime: tokio::runtime::Handle::current(),
                state: Mutex::new(SseState {
                    reader: Some(reader.abort_handle()),
                    posts: Vec::new(),
                    closed: false,
                }),
            }))) as Arc<dyn TransportLink>)
        })
    }
}

/// Opens the stream and reads it up to the `endpoint` event; messages before it (there
/// should be none) are reported, or, when `strict`, make it fail.
async fn open(
    base: &HttpBase,
    parser: &mut SseParser,
    events: &EventSink,
    strict: bool,
) -> Result<(reqwest::Response, url::Url), TransportError> {
    let mut resp = base
        .exchange(Method::GET, &base.url, 1, |rb| {
            rb.header(ACCEPT, "text/event-stream")
        })
        .await?;
    let status = resp.status();
    if !status.is_success() {
        return Err(TransportError::Http {
            status: status.as_u16(),
            body: error_body(resp, 512).await,
        });
    }
    let kind = content_type(&resp);
    if !kind.starts_with("text/event-stream") {
        return Err(TransportError::Malformed(format!(
            "the SSE endpoint answered with Content-Type {kind:?}"
        )));
    }
    let mut batch = Vec::new();
    let mut endpoint = None;
    while endpoint.is_none() {
        let Some(chunk) = resp.chunk().await.map_err(super::http::io_error)? else {
            return Err(TransportError::Io(
                "the SSE stream ended before the endpoint event".into(),
            ));
        };
        parser
            .feed(&chunk, &mut batch)
            .map_err(TransportError::Malformed)?;
        for event in batch.drain(..) {
            match event.event.as_str() {
                "endpoint" if endpoint.is_none() => {
                    endpoint = Some(resolve(&base.url, &event.data)?)
                }
                other if strict && endpoint.is_none() => {
                    return Err(TransportError::Malformed(format!(
                        "the SSE stream's first event is {:?}, not `endpoint`",
                        if other.is_empty() { "message" } else { other }
                    )));
                }
                "" | "message" if !event.data.is_empty() => {
                    deliver(events, event.data, None);
                }
                _ => {}
            }
        }
    }
    let endpoint = endpoint.unwrap_or_else(|| base.url.clone());
    Ok((resp, endpoint))
}

/// The endpoint announced as `data`, resolved against the SSE URL; it must stay on the same
/// origin (otherwise our messages, and credentials, would go to whoever the stream names).
fn resolve(sse_url: &url::Url, data: &[u8]) -> Result<url::Url, TransportError> {
    let text = std::str::from_utf8(data)
        .map_err(|_| TransportError::Malformed("the endpoint event is not UTF-8".into()))?
        .trim();
    let endpoint = sse_url
        .join(text)
        .map_err(|e| TransportError::Malformed(format!("bad endpoint {text:?}: {e}")))?;
    if endpoint.origin() != sse_url.origin() {
        return Err(TransportError::Malformed(format!(
            "the endpoint {endpoint} is not on the origin of {sse_url}"
        )));
    }
    Ok(endpoint)
}

struct SseInner {
    base: HttpBase,
    endpoint: url::Url,
    events: EventSink,
    runtime: tokio::runtime::Handle,
    state: Mutex<SseState>,
}

struct SseState {
    reader: Option<AbortHandle>,
    posts: Vec<AbortHandle>,
    closed: bool,
}

struct SseLink(Arc<SseInner>);

impl SseInner {
    async fn post(&self, message: &OutboundMessage) -> Result<(), TransportError> {
        let headers = match &message.kind {
            OutboundKind::Request { headers, .. }
            | OutboundKind::Notification { headers, .. }
            | OutboundKind::Response { headers } => headers,
        };
        let resp = self
            .base
            .exchange(Method::POST, &self.endpoint, 1, |mut rb| {
                rb = rb.header(CONTENT_TYPE, "application/json");
                for (k, v) in headers {
                    rb = rb.header(k.as_str(), v.as_str());
                }
                rb.body(message.body.clone())
            })
            .await?;
        let status = resp.status();
        if status.is_success() {
            return Ok(());
        }
        Err(TransportError::Http {
            status: status.as_u16(),
            body: error_body(resp, 512).await,
        })
    }
}

impl TransportLink for SseLink {
    fn send(&self, message: OutboundMessage) {
        let id: Option<RequestId> = match &message.kind {
            OutboundKind::Request { id, .. } => Some(id.clone()),
            _ => None,
        };
        let mut state = self.0.state.lock().unwrap_or_else(|p| p.into_inner());
        if state.closed {
            if let Some(id) = id {
                let _ = self.0.events.send(TransportEvent::RequestFailed {
                    id,
                    error: TransportError::Closed,
                });
            }
            return;
        }
        let inner = self.0.clone();
        state.posts.retain(|t| !t.is_finished());
        let task = self.0.runtime.spawn(async move {
            if let Err(error) = inner.post(&message).await {
                match id {
                    Some(id) => {
                        let _ = inner
                            .events
                            .send(TransportEvent::RequestFailed { id, error });
                    }
                    None => tracing::warn!(%error, "an MCP message could not be delivered"),
                }
            }
        });
        state.posts.push(task.abort_handle());
    }

    fn cancel(&self, _id: &RequestId) {
        // The answer comes on the shared stream; there is nothing of the request's own to
        // close (the client's notifications/cancelled tells the server).
    }

    fn close(&self) -> BoxFuture<()> {
        let inner = self.0.clone();
        Box::pin(async move {
            {
                let mut state = inner.state.lock().unwrap_or_else(|p| p.into_inner());
                if state.closed {
                    return;
                }
                state.closed = true;
                if let Some(reader) = state.reader.take() {
                    reader.abort();
                }
                for post in state.posts.drain(..) {
                    post.abort();
                }
            }
            let _ = inner
                .events
                .send(TransportEvent::Closed(TransportError::Closed));
        })
    }
}

/// One server-sent event.
#[derive(Debug)]
pub(crate) struct SseEvent {
    /// The `event` field; empty when none was given (a `message`).
    pub(crate) event: String,
    /// The `data` lines, joined with `\n`.
    pub(crate) data: Vec<u8>,
}

/// An incremental `text/event-stream` parser following the WHATWG rules: lines end with
/// CR, LF or CRLF; `data` lines accumulate; a blank line dispatches; `id` (the last event
/// id, kept across events and reconnections) and `retry` are remembered.
#[derive(Debug)]
pub(crate) struct SseParser {
    line: Vec<u8>,
    /// The previous chunk ended with CR: a leading LF belongs to it.
    after_cr: bool,
    /// At the start of the stream (a UTF-8 BOM is skipped there).
    at_start: bool,
    data: Vec<u8>,
    has_data: bool,
    event: String,
    id_buffer: String,
    last_event_id: String,
    retry: Option<Duration>,
    max: usize,
}

impl SseParser {
    /// A parser refusing events (and lines) over `max` bytes.
    pub(crate) fn new(max: usize) -> Self {
        SseParser {
            line: Vec::new(),
            after_cr: false,
            at_start: true,
            data: Vec::new(),
            has_data: false,
            event: String::new(),
            id_buffer: String::new(),
            last_event_id: String::new(),
            retry: None,
            max,
        }
    }

    /// The id to resume from (`Last-Event-ID`), if the server gave one.
    pub(crate) fn last_event_id(&self) -> Option<&str> {
        (!self.last_event_id.is_empty()).then_some(self.last_event_id.as_str())
    }

    /// The reconnection delay the server asked for.
    pub(crate) fn retry(&self) -> Option<Duration> {
        self.retry
    }

    /// A new connection continues the stream: drop the unfinished line and event, keep the
    /// last event id and retry.
    pub(crate) fn reconnected(&mut self) {
        self.line.clear();
        self.after_cr = false;
        self.at_start = true;
        self.data.clear();
        self.has_data = false;
        self.event.clear();
        self.id_buffer = self.last_event_id.clone();
    }

    /// Parses `chunk`, appending the events it completes to `out`.
    pub(crate) fn feed(&mut self, mut chunk: &[u8], out: &mut Vec<SseEvent>) -> Result<(), String> {
        if self.after_cr && chunk.first() == Some(&b'\n') {
            chunk = &chunk[1..];
        }
        if !chunk.is_empty() {
            self.after_cr = false;
        }
        while !chunk.is_empty() {
            match chunk.iter().position(|b| *b == b'\r' || *b == b'\n') {
                Some(end) => {
                    self.push_line_bytes(&chunk[..end])?;
                    let cr = chunk[end] == b'\r';
                    chunk = &chunk[end + 1..];
                    if cr {
                        match chunk.first() {
                            Some(b'\n') => chunk = &chunk[1..],
                            Some(_) => {}
                            None => self.after_cr = true,
                        }
                    }
                    self.line_done(out)?;
                }
                None => {
                    self.push_line_bytes(chunk)?;
                    chunk = &[];
                }
            }
        }
        Ok(())
    }

    fn push_line_bytes(&mut self, bytes: &[u8]) -> Result<(), String> {
        if self.line.len() + bytes.len() > self.max.saturating_add(16) {
            return Err(format!("an SSE line exceeds the {}-byte limit", self.max));
        }
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    fn line_done(&mut self, out: &mut Vec<SseEvent>) -> Result<(), String> {
        let mut line = std::mem::take(&mut self.line);
        if self.at_start {
            self.at_start = false;
            if line.starts_with("\u{FEFF}".as_bytes()) {
                line.drain(..3);
            }
        }
        if line.is_empty() {
            self.dispatch(out);
        } else if line[0] != b':' {
            let (field, value) = match line.iter().position(|b| *b == b':') {
                Some(colon) => {
                    let value = &line[colon + 1..];
                    (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
                }
                None => (&line[..], &[][..]),
            };
            match field {
                b"data" => {
                    if self.data.len() + value.len() + 1 > self.max {
                        return Err(format!("an SSE event exceeds the {}-byte limit", self.max));
                    }
                    if self.has_data {
                        self.data.push(b'\n');
                    }
                    self.data.extend_from_slice(value);
                    self.has_data = true;
                }
                b"event" => self.event = String::from_utf8_lossy(value).into_owned(),
                b"id" if !value.contains(&0) => {
                    self.id_buffer = String::from_utf8_lossy(value).into_owned()
                }
                b"retry" if !value.is_empty() && value.iter().all(u8::is_ascii_digit) => {
                    if let Ok(ms) = std::str::from_utf8(value).unwrap_or("").parse::<u64>() {
                        self.retry = Some(Duration::from_millis(ms));
                    }
                }
                _ => {}
            }
        }
        self.line = line;
        self.line.clear();
        Ok(())
    }

    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        self.last_event_id = self.id_buffer.clone();
        let event = std::mem::take(&mut self.event);
        if !std::mem::take(&mut self.has_data) {
            return;
        }
        out.push(SseEvent {
            event,
            data: std::mem::take(&mut self.data),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(chunks: &[&str]) -> (Vec<(String, String)>, SseParser) {
        let mut p = SseParser::new(1 << 20);
        let mut out = Vec::new();
        for c in chunks {
            p.feed(c.as_bytes(), &mut out).unwrap();
        }
        let events = out
            .into_iter()
            .map(|e| (e.event, String::from_utf8(e.data).unwrap()))
            .collect();
        (events, p)
    }

    #[test]
    fn events_fields_and_line_endings() {
        let (events, p) = parse(&[
            "\u{FEFF}: comment\r\nid: e1\rretry: 300\r",
            "\ndata:\n\nevent: endpoint\ndata: /messages?s=1\n\n",
            "data: {\"a\":1}\ndata:two\r\n\r\nid: e2\ndata: x",
        ]);
        assert_eq!(
            events,
            vec![
                (String::new(), String::new()),
                ("endpoint".into(), "/messages?s=1".into()),
                (String::new(), "{\"a\":1}\ntwo".into()),
            ]
        );
        // e2 belongs to an unfinished event.
        assert_eq!(p.last_event_id(), Some("e1"));
        assert_eq!(p.retry(), Some(Duration::from_millis(300)));
    }

    #[test]
    fn a_split_crlf_is_one_line_end_and_limits_hold() {
        let (events, _) = parse(&["data: a\r", "\n", "\r", "\n"]);
        assert_eq!(events, vec![(String::new(), "a".into())]);
        let mut p = SseParser::new(8);
        let mut out = Vec::new();
        assert!(p.feed(b"data: 0123456789\n\n", &mut out).is_err());
    }
}
