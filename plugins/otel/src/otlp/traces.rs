//! Sending span batches over OTLP/HTTP: the bodies [`encode`](super::encode) writes, sent
//! with the workspace's reqwest, configured and retried as opentelemetry-otlp's HTTP exporter
//! is (the standard variables, the OTLP/HTTP retry rules), which it replaces for traces only:
//! metrics and log records are few per request and stay with opentelemetry-otlp, and so does
//! gRPC. Why: see [`encode`](super::encode) and [`processor`](super::processor).

use crate::error::TelemetryError;
use crate::export::ReqwestOnTokio;
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Uri};
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use prost::Message;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `OTEL_EXPORTER_OTLP_TIMEOUT`'s default.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// The endpoint when nothing names one (the OTLP/HTTP default).
const DEFAULT_ENDPOINT: &str = "http://localhost:4318";
/// The recommended OTLP retry policy (opentelemetry-otlp's too): 3 retries, backoff from
/// 100 ms doubling to 1.6 s, up to 100 ms of jitter, all within the export timeout.
const RETRIES: u32 = 3;
const FIRST_DELAY: Duration = Duration::from_millis(100);
const MAX_DELAY: Duration = Duration::from_millis(1600);
const MAX_JITTER_MS: u64 = 100;
/// A `Retry-After` longer than this is capped (the export timeout bounds it anyway).
const MAX_RETRY_AFTER: Duration = Duration::from_secs(600);

/// Sends span batches to an OTLP/HTTP collector's `/v1/traces`.
#[derive(Debug)]
pub(crate) struct HttpSpanSender {
    client: Arc<ReqwestOnTokio>,
    endpoint: Uri,
    headers: HeaderMap,
    timeout: Duration,
}

/// Reads a variable, empty counting as unset.
fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

impl HttpSpanSender {
    /// `base` is the configured endpoint (the flag's or the file's), to which `/v1/traces`
    /// is appended; without it `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is used as it is, else
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` plus `/v1/traces`, else `http://localhost:4318/v1/traces`.
    /// Headers: `OTEL_EXPORTER_OTLP_TRACES_HEADERS`, else `OTEL_EXPORTER_OTLP_HEADERS`
    /// (`key=value` pairs, comma separated, values percent-decoded). Timeout (per export,
    /// retries included): `OTEL_EXPORTER_OTLP_TRACES_TIMEOUT`, else `OTEL_EXPORTER_OTLP_TIMEOUT`
    /// (milliseconds), else 10 s. Compression other than `none` is refused: this build
    /// compresses nothing, and a collector would rather be told than sent what it did not ask.
    pub(crate) fn new(
        client: Arc<ReqwestOnTokio>,
        base: Option<&str>,
    ) -> Result<HttpSpanSender, TelemetryError> {
        let (endpoint, from) = match base.filter(|b| !b.trim().is_empty()) {
            Some(b) => (with_path(b), "the configured endpoint"),
            None => match var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
                Some(e) => (e, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
                None => match var("OTEL_EXPORTER_OTLP_ENDPOINT") {
                    Some(b) => (with_path(&b), "OTEL_EXPORTER_OTLP_ENDPOINT"),
                    None => (with_path(DEFAULT_ENDPOINT), "the default endpoint"),
                },
            },
        };
        let endpoint = endpoint.parse::<Uri>().map_err(|e| {
            TelemetryError::Exporter(format!("invalid endpoint {endpoint:?} ({from}): {e}"))
        })?;
        let headers = var("OTEL_EXPORTER_OTLP_TRACES_HEADERS")
            .or_else(|| var("OTEL_EXPORTER_OTLP_HEADERS"))
            .map(|h| parse_headers(&h))
            .unwrap_or_default();
        let timeout = [
            "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
            "OTEL_EXPORTER_OTLP_TIMEOUT",
        ]
        .iter()
        .find_map(|v| var(v).and_then(|ms| ms.trim().parse::<u64>().ok()))
        .map_or(DEFAULT_TIMEOUT, Duration::from_millis);
        for name in [
            "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION",
            "OTEL_EXPORTER_OTLP_COMPRESSION",
        ] {
            if let Some(c) = var(name) {
                if c.trim().eq_ignore_ascii_case("none") {
                    break;
                }
                return Err(TelemetryError::Exporter(format!(
                    "{name}={c}: traces are sent uncompressed (set it to none or unset it)"
                )));
            }
        }
        Ok(HttpSpanSender {
            client,
            endpoint,
            headers,
            timeout,
        })
    }

    /// Sends one encoded batch, retrying as the OTLP/HTTP rules say, all within the export
    /// timeout.
    pub(crate) async fn send(&self, body: Bytes) -> OTelSdkResult {
        let start = Instant::now();
        let mut delay = FIRST_DELAY;
        let mut attempt = 0;
        loop {
            let budget = self.timeout.saturating_sub(start.elapsed());
            let failure = match self.send_once(body.clone(), budget).await {
                Ok(answer) => {
                    note_partial_success(&answer);
                    return Ok(());
                }
                Err(f) => f,
            };
            let wait = match failure.retry_after {
                Some(server) => server.max(delay),
                None => (delay + jitter()).min(MAX_DELAY),
            };
            if !failure.retryable()
                || attempt >= RETRIES
                || wait >= self.timeout.saturating_sub(start.elapsed())
            {
                return Err(OTelSdkError::InternalFailure(format!(
                    "OTLP span export to {} failed after {} attempt(s): {}",
                    self.endpoint,
                    attempt + 1,
                    failure.message
                )));
            }
            attempt += 1;
            pause(wait).await;
            delay = (delay * 2).min(MAX_DELAY);
        }
    }

    /// The same sender with another export timeout (retries included).
    #[cfg(test)]
    pub(crate) fn with_timeout(mut self, timeout: Duration) -> HttpSpanSender {
        self.timeout = timeout;
        self
    }

    /// One POST of the encoded batch.
    async fn send_once(&self, body: Bytes, budget: Duration) -> Result<Bytes, Failure> {
        let mut request = http::Request::new(body);
        *request.method_mut() = http::Method::POST;
        *request.uri_mut() = self.endpoint.clone();
        let headers = request.headers_mut();
        headers.clone_from(&self.headers);
        headers.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/x-protobuf"),
        );
        let response = self
            .client
            .send(request, Some(budget))
            .await
            .map_err(|e| Failure {
                status: None,
                retry_after: None,
                message: format!("network error: {e}"),
            })?;
        let status = response.status();
        if status.is_success() {
            return Ok(response.into_body());
        }
        Err(Failure {
            status: Some(status.as_u16()),
            retry_after: response
                .headers()
                .get(http::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(|s| Duration::from_secs(s).min(MAX_RETRY_AFTER)),
            message: format!("the collector answered {status}"),
        })
    }
}

/// `base` with `/v1/traces` appended (one slash between them).
fn with_path(base: &str) -> String {
    format!("{}/v1/traces", base.trim().trim_end_matches('/'))
}

/// `key=value,key2=value2`, values percent-decoded; a pair that is not a valid header is
/// left out (as opentelemetry-otlp leaves it out).
fn parse_headers(text: &str) -> HeaderMap {
    let mut map = HeaderMap::new();
    for pair in text.split(',') {
        let Some((key, value)) = pair.split_once('=') else {
            continue;
        };
        let value = percent_encoding::percent_decode_str(value.trim()).decode_utf8_lossy();
        if let (Ok(k), Ok(v)) = (
            HeaderName::try_from(key.trim()),
            HeaderValue::try_from(value.as_ref()),
        ) {
            map.append(k, v);
        }
    }
    map
}

/// Why one attempt failed.
#[derive(Debug)]
struct Failure {
    /// The collector's status; `None` when there was no answer (a network error).
    status: Option<u16>,
    retry_after: Option<Duration>,
    message: String,
}

impl Failure {
    /// The OTLP/HTTP rules: no answer, 429, 502, 503 and 504 are worth another try.
    fn retryable(&self) -> bool {
        matches!(self.status, None | Some(429 | 502 | 503 | 504))
    }
}

/// Up to `MAX_JITTER_MS` of jitter, so that exporters failing together do not retry together.
fn jitter() -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::from(d.subsec_nanos()));
    Duration::from_millis(nanos % (MAX_JITTER_MS + 1))
}

/// The span processor sends from a thread of its own, with no runtime: it sleeps the
/// thread. On a runtime's thread the task sleeps instead.
async fn pause(d: Duration) {
    if tokio::runtime::Handle::try_current().is_ok() {
        tokio::time::sleep(d).await;
    } else {
        std::thread::sleep(d);
    }
}

/// Logs what a collector's partial success says it rejected.
fn note_partial_success(body: &[u8]) {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
    let Ok(response) = ExportTraceServiceResponse::decode(body) else {
        return;
    };
    if let Some(partial) = response.partial_success {
        if partial.rejected_spans > 0 || !partial.error_message.is_empty() {
            tracing::warn!(
                rejected_spans = partial.rejected_spans,
                message = partial.error_message,
                "telemetry: the collector rejected spans"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_traces_path_is_appended_to_a_base_with_one_slash() {
        assert_eq!(with_path("http://c:4318"), "http://c:4318/v1/traces");
        assert_eq!(with_path("http://c:4318/"), "http://c:4318/v1/traces");
        assert_eq!(with_path("http://c/otlp/"), "http://c/otlp/v1/traces");
    }

    #[test]
    fn headers_are_comma_separated_pairs_with_percent_decoded_values_and_bad_pairs_left_out() {
        let map = parse_headers("api-key=a%20b, x-tenant = t1 ,no-equals,bad key=v,x-tenant=t2");
        assert_eq!(map.get("api-key").unwrap(), "a b");
        let tenants: Vec<_> = map.get_all("x-tenant").iter().collect();
        assert_eq!(tenants, ["t1", "t2"]);
        assert_eq!(map.len(), 3);
    }

    #[test]
    fn only_no_answer_429_and_the_gateway_errors_are_retried() {
        let f = |status| Failure {
            status,
            retry_after: None,
            message: String::new(),
        };
        for s in [None, Some(429), Some(502), Some(503), Some(504)] {
            assert!(f(s).retryable(), "{s:?}");
        }
        for s in [Some(400), Some(401), Some(404), Some(413), Some(500)] {
            assert!(!f(s).retryable(), "{s:?}");
        }
    }
}
