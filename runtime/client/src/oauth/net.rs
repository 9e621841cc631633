//! The few HTTP exchanges OAuth needs (GET a JSON document, POST a form or JSON), with a
//! timeout and a body size cap on each, so a slow or hostile endpoint cannot hang or bloat
//! the client. Bodies are never logged: token responses carry secrets.

use super::error::OAuthError;
use reqwest::header::{ACCEPT, CONTENT_TYPE};
use reqwest::{Client, RequestBuilder, Response, StatusCode};
use serde::de::DeserializeOwned;
use std::time::Duration;

/// Every OAuth HTTP exchange gives up after this long.
pub(super) const TIMEOUT: Duration = Duration::from_secs(30);
/// Metadata and token responses larger than this are refused.
const MAX_BODY: usize = 1024 * 1024;

/// The answer to a GET of a JSON document.
pub(super) enum Fetched<T> {
    /// 200 with a document that parsed.
    Found(T),
    /// Anything else: a status that is not 200 or a body that is not the document; the
    /// caller tries its next candidate URL.
    Missing(String),
}

/// A response's status and (size-capped) body.
pub(super) struct Answer {
    pub(super) status: StatusCode,
    pub(super) body: Vec<u8>,
}

fn http_error(url: &str, e: reqwest::Error) -> OAuthError {
    let e = e.without_url();
    let mut message = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        message.push_str(": ");
        message.push_str(&s.to_string());
        source = s.source();
    }
    OAuthError::Http {
        url: url.to_owned(),
        message,
    }
}

async fn read_capped(url: &str, mut resp: Response) -> Result<Answer, OAuthError> {
    let status = resp.status();
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| http_error(url, e))? {
        if body.len() + chunk.len() > MAX_BODY {
            return Err(OAuthError::Http {
                url: url.to_owned(),
                message: format!("response body larger than {MAX_BODY} bytes"),
            });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Answer { status, body })
}

/// Sends a request and reads the answer.
pub(super) async fn send(url: &str, rb: RequestBuilder) -> Result<Answer, OAuthError> {
    let resp = rb
        .timeout(TIMEOUT)
        .send()
        .await
        .map_err(|e| http_error(url, e))?;
    read_capped(url, resp).await
}

/// GETs a JSON document. Transport failures are errors; a non-200 answer or a body that is
/// not the document is [`Fetched::Missing`].
pub(super) async fn get_json<T: DeserializeOwned>(
    client: &Client,
    url: &str,
) -> Result<Fetched<T>, OAuthError> {
    let answer = send(url, client.get(url).header(ACCEPT, "application/json")).await?;
    if answer.status != StatusCode::OK {
        return Ok(Fetched::Missing(format!("HTTP {}", answer.status.as_u16())));
    }
    match serde_json::from_slice(&answer.body) {
        Ok(doc) => Ok(Fetched::Found(doc)),
        Err(e) => Ok(Fetched::Missing(format!("not a valid document: {e}"))),
    }
}

/// POSTs `application/x-www-form-urlencoded` parameters, with HTTP Basic client
/// authentication when `basic` is given (RFC 6749 §2.3.1: both parts form-encoded first).
pub(super) async fn post_form(
    client: &Client,
    url: &str,
    params: &[(&str, &str)],
    basic: Option<(&str, &str)>,
) -> Result<Answer, OAuthError> {
    let body = {
        let mut body = url::form_urlencoded::Serializer::new(String::new());
        for (k, v) in params {
            body.append_pair(k, v);
        }
        body.finish()
    };
    let mut rb = client
        .post(url)
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(ACCEPT, "application/json")
        .body(body);
    if let Some((id, secret)) = basic {
        let id: String = url::form_urlencoded::byte_serialize(id.as_bytes()).collect();
        let secret: String = url::form_urlencoded::byte_serialize(secret.as_bytes()).collect();
        rb = rb.basic_auth(id, Some(secret));
    }
    send(url, rb).await
}

/// POSTs a JSON body.
pub(super) async fn post_json(
    client: &Client,
    url: &str,
    body: &serde_json::Value,
) -> Result<Answer, OAuthError> {
    let rb = client
        .post(url)
        .header(CONTENT_TYPE, "application/json")
        .header(ACCEPT, "application/json")
        .body(body.to_string());
    send(url, rb).await
}

/// The `error` and `error_description` of an OAuth error body (RFC 6749 §5.2), or a short
/// summary of whatever else came back.
pub(super) fn oauth_error(body: &[u8]) -> (String, Option<String>) {
    #[derive(serde::Deserialize)]
    struct ErrorBody {
        error: String,
        error_description: Option<String>,
    }
    match serde_json::from_slice::<ErrorBody>(body) {
        Ok(e) => (e.error, e.error_description),
        // Not echoed: a misbehaving server could reflect the request (and its secrets).
        Err(_) => (
            format!("non-OAuth error response ({} bytes)", body.len()),
            None,
        ),
    }
}
