//! The one way the SaaS connectors (GitHub, Slack, Google Drive) talk to their APIs: the
//! tree's reqwest with a deadline per request, a cap on every body read, `Retry-After`
//! waited out when it is short and reported when it is not, one retry of an idempotent
//! request that met a 5xx, and errors that say what happened in words a model and an
//! operator can act on: never a URL (it may carry a query with user data), never a header.
//!
//! What each API means by its statuses (GitHub's `x-ratelimit-remaining: 0`, Slack's
//! `ok: false`, Drive's `403 rateLimitExceeded`) is each connector's business: [`Api::send`]
//! hands back every answer it does not wait out, and [`Reply::error_for_status`] turns the
//! rest into an [`ApiError`].

use crate::ConnectorError;
use reqwest::header::{HeaderMap, RETRY_AFTER};
use reqwest::StatusCode;
use serde::de::DeserializeOwned;
use std::time::{Duration, SystemTime};
use toolyard::HandlerError;

/// How a connector's API client behaves.
#[derive(Debug, Clone)]
pub(crate) struct ApiSettings {
    /// The service's name in messages ("GitHub", "Slack", "Google Drive").
    pub service: &'static str,
    /// The longest one request may take, body included.
    pub timeout: Duration,
    /// The most bytes of a body read.
    pub max_body: usize,
    /// A `Retry-After` at most this long is waited out (twice at most per call).
    pub max_retry_wait: Duration,
}

/// An HTTP client for one service.
#[derive(Debug, Clone)]
pub(crate) struct Api {
    client: reqwest::Client,
    settings: ApiSettings,
}

/// An answer, its body read whole (within the cap).
#[derive(Debug)]
pub(crate) struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
    service: &'static str,
}

/// Why a request has no usable answer. Each message is the tool error the caller sees.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ApiError {
    /// No answer: the connection failed or was refused.
    #[error("{service} could not be reached: {message}")]
    Unreachable {
        service: &'static str,
        message: String,
    },
    /// No complete answer within the deadline.
    #[error("{service} did not answer within {} ms", .after.as_millis())]
    Timeout {
        service: &'static str,
        after: Duration,
    },
    /// The body is larger than the cap.
    #[error("{service} sent more than {limit} bytes; ask for less (a smaller page or range)")]
    TooLarge { service: &'static str, limit: usize },
    /// The service is rate limiting this client.
    #[error("{service} is rate limiting these requests{}", retry_hint(*.retry_after))]
    RateLimited {
        service: &'static str,
        retry_after: Option<Duration>,
    },
    /// The credentials were refused (expired, revoked, or without the scope needed).
    #[error("{service} refused the credentials (HTTP {status}): {detail}")]
    Unauthorized {
        service: &'static str,
        status: u16,
        detail: String,
    },
    /// Any other unsuccessful status.
    #[error("{service} answered HTTP {status}: {detail}")]
    Status {
        service: &'static str,
        status: u16,
        detail: String,
    },
    /// The body is not what the API documents.
    #[error("{service} sent an answer that could not be read: {message}")]
    Malformed {
        service: &'static str,
        message: String,
    },
}

fn retry_hint(after: Option<Duration>) -> String {
    match after {
        Some(d) => format!("; retry after {} s", d.as_secs().max(1)),
        None => String::new(),
    }
}

impl From<ApiError> for HandlerError {
    fn from(e: ApiError) -> HandlerError {
        HandlerError::failed(e.to_string())
    }
}

impl Api {
    /// A client with these settings and the runtime's User-Agent.
    pub(crate) fn new(settings: ApiSettings) -> Result<Api, ConnectorError> {
        let client = reqwest::Client::builder()
            .timeout(settings.timeout)
            .connect_timeout(settings.timeout.min(Duration::from_secs(10)))
            .user_agent(concat!("Toolyard/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ConnectorError::Config {
                connector: "http",
                message: format!("cannot build the HTTP client: {e}"),
            })?;
        Ok(Api { client, settings })
    }

    /// The underlying client, to build requests with.
    #[allow(dead_code, reason = "not every connector needs it")]
    pub(crate) fn client(&self) -> &reqwest::Client {
        &self.client
    }

    /// The service's name in messages.
    #[allow(dead_code, reason = "not every connector needs it")]
    pub(crate) fn service(&self) -> &'static str {
        self.settings.service
    }

    /// Sends the request `build` makes (called again for each attempt) and reads its body.
    ///
    /// A `429`, or a `403`/`503` carrying `Retry-After`, is waited out when the wait is at
    /// most `max_retry_wait` (twice at most) and is [`ApiError::RateLimited`] otherwise. An
    /// `idempotent` request that met a 502/503/504 or a failed connection is sent once more
    /// after a short pause; a request that may change something is never repeated (a
    /// 429 means the service did not act on it, so that one is). Every other status comes
    /// back as a [`Reply`].
    pub(crate) async fn send(
        &self,
        idempotent: bool,
        build: impl Fn(&reqwest::Client) -> reqwest::RequestBuilder,
    ) -> Result<Reply, ApiError> {
        let service = self.settings.service;
        let mut waits = 0;
        let mut retried = false;
        loop {
            let sent = crate::trace::send(build(&self.client)).await;
            let response = match sent {
                Ok(r) => r,
                Err(e) if e.is_timeout() => {
                    return Err(ApiError::Timeout {
                        service,
                        after: self.settings.timeout,
                    })
                }
                Err(e) if idempotent && !retried && e.is_connect() => {
                    retried = true;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
                Err(e) => {
                    return Err(ApiError::Unreachable {
                        service,
                        message: describe(&e),
                    })
                }
            };
            let status = response.status();
            let wait = retry_after(response.headers());
            let limited = status == StatusCode::TOO_MANY_REQUESTS
                || (wait.is_some()
                    && matches!(
                        status,
                        StatusCode::FORBIDDEN | StatusCode::SERVICE_UNAVAILABLE
                    ));
            if limited {
                match wait {
                    Some(d) if waits < 2 && d <= self.settings.max_retry_wait => {
                        waits += 1;
                        tokio::time::sleep(d).await;
                        continue;
                    }
                    _ => {
                        return Err(ApiError::RateLimited {
                            service,
                            retry_after: wait,
                        })
                    }
                }
            }
            if idempotent
                && !retried
                && matches!(
                    status,
                    StatusCode::BAD_GATEWAY
                        | StatusCode::SERVICE_UNAVAILABLE
                        | StatusCode::GATEWAY_TIMEOUT
                )
            {
                retried = true;
                tokio::time::sleep(Duration::from_millis(300)).await;
                continue;
            }
            return self.read(response).await;
        }
    }

    async fn read(&self, mut response: reqwest::Response) -> Result<Reply, ApiError> {
        let service = self.settings.service;
        let limit = self.settings.max_body;
        if response.content_length().is_some_and(|n| n > limit as u64) {
            return Err(ApiError::TooLarge { service, limit });
        }
        let mut body = Vec::new();
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    if body.len() + chunk.len() > limit {
                        return Err(ApiError::TooLarge { service, limit });
                    }
                    body.extend_from_slice(&chunk);
                }
                Ok(None) => break,
                Err(e) if e.is_timeout() => {
                    return Err(ApiError::Timeout {
                        service,
                        after: self.settings.timeout,
                    })
                }
                Err(e) => {
                    return Err(ApiError::Unreachable {
                        service,
                        message: describe(&e),
                    })
                }
            }
        }
        Ok(Reply {
            status: response.status(),
            headers: response.headers().clone(),
            body,
            service,
        })
    }
}

/// reqwest's error without its URL, and the innermost cause (the useful part).
fn describe(e: &reqwest::Error) -> String {
    let mut cause: &dyn std::error::Error = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    let inner = cause.to_string();
    if e.is_connect() {
        format!("connection failed ({inner})")
    } else if e.is_body() || e.is_decode() {
        format!("the body broke off ({inner})")
    } else {
        inner
    }
}

/// `Retry-After` as seconds or as an HTTP date.
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let text = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(secs) = text.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let when = httpdate::parse_http_date(text).ok()?;
    Some(
        when.duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

impl Reply {
    /// The body as `T`.
    pub(crate) fn json<T: DeserializeOwned>(&self) -> Result<T, ApiError> {
        serde_json::from_slice(&self.body).map_err(|e| ApiError::Malformed {
            service: self.service,
            message: format!("expected JSON ({e})"),
        })
    }

    /// A header's value as text.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name)?.to_str().ok()
    }

    /// The reply itself when its status is 2xx (or 304); otherwise the error it stands for,
    /// with the service's own message when the body has one (`message`, `error.message`,
    /// `error_description` or `error`), cut to 300 characters.
    pub(crate) fn error_for_status(self) -> Result<Reply, ApiError> {
        if self.status.is_success() || self.status == StatusCode::NOT_MODIFIED {
            return Ok(self);
        }
        let detail = self.detail();
        let status = self.status.as_u16();
        let service = self.service;
        Err(match status {
            401 => ApiError::Unauthorized {
                service,
                status,
                detail,
            },
            _ => ApiError::Status {
                service,
                status,
                detail,
            },
        })
    }

    /// The service's own words about an error, or the status's reason.
    pub(crate) fn detail(&self) -> String {
        let from_json = serde_json::from_slice::<serde_json::Value>(&self.body)
            .ok()
            .and_then(|v| {
                let pick = |v: &serde_json::Value| v.as_str().map(str::to_owned);
                pick(&v["message"])
                    .or_else(|| pick(&v["error"]["message"]))
                    .or_else(|| pick(&v["error_description"]))
                    .or_else(|| pick(&v["error"]))
            });
        let text = from_json.unwrap_or_else(|| {
            self.status
                .canonical_reason()
                .unwrap_or("unknown status")
                .to_owned()
        });
        let mut text: String = text.chars().filter(|c| !c.is_control()).collect();
        if text.chars().count() > 300 {
            text = text.chars().take(300).collect::<String>() + "…";
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    #[test]
    fn retry_after_reads_seconds_and_http_dates() {
        let mut h = HeaderMap::new();
        h.insert(RETRY_AFTER, HeaderValue::from_static("7"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(7)));
        let later = SystemTime::now() + Duration::from_secs(120);
        h.insert(
            RETRY_AFTER,
            HeaderValue::from_str(&httpdate::fmt_http_date(later)).unwrap(),
        );
        let d = retry_after(&h).unwrap();
        assert!(
            d > Duration::from_secs(100) && d <= Duration::from_secs(120),
            "{d:?}"
        );
        h.insert(RETRY_AFTER, HeaderValue::from_static("soon"));
        assert_eq!(retry_after(&h), None);
    }

    #[test]
    fn an_error_reply_carries_the_services_own_message_cut_short() {
        let reply = Reply {
            status: StatusCode::NOT_FOUND,
            headers: HeaderMap::new(),
            body: br#"{"message":"Not Found","documentation_url":"x"}"#.to_vec(),
            service: "GitHub",
        };
        assert_eq!(
            reply.error_for_status().unwrap_err().to_string(),
            "GitHub answered HTTP 404: Not Found"
        );
        let reply = Reply {
            status: StatusCode::UNAUTHORIZED,
            headers: HeaderMap::new(),
            body: format!(r#"{{"error":{{"message":"{}"}}}}"#, "x".repeat(400)).into_bytes(),
            service: "Google Drive",
        };
        let e = reply.error_for_status().unwrap_err();
        assert!(matches!(e, ApiError::Unauthorized { .. }));
        assert!(e.to_string().ends_with('…'));
    }
}
