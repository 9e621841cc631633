//! GitHub's REST and GraphQL APIs on top of the shared [`Api`]: the headers GitHub expects,
//! the bearer token (a PAT or an App installation token), conditional GETs through the
//! [`EtagCache`], the primary rate limit (`x-ratelimit-remaining: 0` stops all requests
//! until `x-ratelimit-reset`, reported as a clear tool error), `Link` pagination, and
//! GraphQL's `errors` array. Secondary rate limits (`403`/`429` with `Retry-After`) are
//! waited out or reported by [`Api::send`].
//!
//! The installation token, the ETag cache and the rate-limit state are the connector's
//! state ([`GithubState`]), owned by its actor under a supervisor: requests run in the
//! calls' tasks and only read and update that state through the actor.

use super::auth::{Credentials, Installation};
use super::cache::{Cached, EtagCache};
use crate::actor::{Flight, Supervised};
use crate::http::{Api, ApiError, Reply};
use reqwest::{Method, StatusCode};
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use toolyard::HandlerError;

/// The REST API version every request asks for.
pub(crate) const API_VERSION: &str = "2022-11-28";

/// The media type of GitHub's JSON.
const JSON_MEDIA: &str = "application/vnd.github+json";

/// The GitHub connector's mutable state, owned by its actor.
pub(crate) struct GithubState {
    /// A GitHub App's installation token (unused with a plain token).
    pub(crate) token: Flight<Installation, ApiError>,
    /// Conditional-request answers.
    cache: EtagCache,
    /// While set and in the future, no request is sent: the primary rate limit is used up.
    limited_until: Option<SystemTime>,
}

impl GithubState {
    fn new(cache_entries: usize) -> GithubState {
        GithubState {
            token: Flight::default(),
            cache: EtagCache::new(cache_entries),
            limited_until: None,
        }
    }

    /// `Some` while the primary rate limit is used up: until when, and how long is left.
    fn limited(&mut self) -> Option<(SystemTime, Duration)> {
        let t = self.limited_until?;
        match t.duration_since(SystemTime::now()) {
            Ok(left) if !left.is_zero() => Some((t, left)),
            _ => {
                self.limited_until = None;
                None
            }
        }
    }
}

/// A GitHub API client for one set of credentials.
#[derive(Debug)]
pub(crate) struct Client {
    api: Api,
    base: String,
    graphql: String,
    credentials: Credentials,
    state: Supervised<GithubState>,
}

/// One page of a REST listing.
#[derive(Debug)]
pub(crate) struct Page {
    /// The JSON answer.
    pub value: Value,
    /// The page after this one, from the `Link` header's `rel="next"`.
    pub next_page: Option<u32>,
}

/// A GET's raw answer (for diffs and raw file contents).
#[derive(Debug)]
pub(crate) struct Raw {
    pub body: Arc<[u8]>,
    pub link: Option<String>,
}

impl Client {
    pub(crate) fn new(
        api: Api,
        base: String,
        graphql: String,
        credentials: Credentials,
        cache_entries: usize,
    ) -> Client {
        Client {
            api,
            base,
            graphql,
            credentials,
            state: Supervised::new("github", move || GithubState::new(cache_entries)),
        }
    }

    /// The connector's state actor.
    pub(crate) fn state(&self) -> &Supervised<GithubState> {
        &self.state
    }

    fn url(&self, path: &str, query: &[(&str, String)]) -> Result<reqwest::Url, HandlerError> {
        let mut url = reqwest::Url::parse(&format!("{}{path}", self.base))
            .map_err(|_| HandlerError::failed("the GitHub base URL cannot form a request URL"))?;
        if !query.is_empty() {
            let mut pairs = url.query_pairs_mut();
            for (k, v) in query {
                pairs.append_pair(k, v);
            }
        }
        Ok(url)
    }

    /// Refuses to send while the primary rate limit is used up.
    async fn check_limit(&self) -> Result<(), HandlerError> {
        match self.state.call(GithubState::limited).await? {
            Some((t, left)) => Err(limited(t, left)),
            None => Ok(()),
        }
    }

    /// Notes `x-ratelimit-remaining: 0`; a refused request (403/429) becomes the error.
    async fn note_limit(&self, reply: &Reply) -> Result<(), HandlerError> {
        if reply.header("x-ratelimit-remaining").map(str::trim) != Some("0") {
            return Ok(());
        }
        let Some(reset) = reply
            .header("x-ratelimit-reset")
            .and_then(|r| r.trim().parse::<u64>().ok())
        else {
            return Ok(());
        };
        let at = UNIX_EPOCH + Duration::from_secs(reset);
        self.state.call(move |s| s.limited_until = Some(at)).await?;
        if matches!(
            reply.status,
            StatusCode::FORBIDDEN | StatusCode::TOO_MANY_REQUESTS
        ) {
            let left = at
                .duration_since(SystemTime::now())
                .unwrap_or(Duration::ZERO);
            return Err(limited(at, left));
        }
        Ok(())
    }

    /// Sends one request with the credentials, GitHub's headers, and (for a GET) the
    /// cached ETag; a refused App token is exchanged once more.
    async fn send(
        &self,
        method: Method,
        url: &reqwest::Url,
        accept: &str,
        body: Option<Vec<u8>>,
        cached: Option<&Cached>,
    ) -> Result<Reply, HandlerError> {
        self.check_limit().await?;
        // GraphQL queries (a POST) change nothing either.
        let idempotent = matches!(method, Method::GET | Method::HEAD | Method::PUT)
            || url.as_str() == self.graphql;
        let mut retried = false;
        loop {
            let token = self
                .credentials
                .bearer(&self.api, &self.base, &self.state)
                .await?;
            let reply = self
                .api
                .send(idempotent, |c| {
                    let mut r = c
                        .request(method.clone(), url.clone())
                        .bearer_auth(token.expose())
                        .header("accept", accept)
                        .header("x-github-api-version", API_VERSION);
                    if let Some(hit) = cached {
                        r = r.header("if-none-match", &hit.etag);
                    }
                    if let Some(b) = &body {
                        r = r.header("content-type", "application/json").body(b.clone());
                    }
                    r
                })
                .await?;
            self.note_limit(&reply).await?;
            if reply.status == StatusCode::UNAUTHORIZED
                && !retried
                && self.credentials.refused(&token, &self.state).await?
            {
                retried = true;
                continue;
            }
            return Ok(reply);
        }
    }

    /// A GET with conditional-request caching; the body and `Link` header.
    pub(crate) async fn get_raw(
        &self,
        path: &str,
        query: &[(&str, String)],
        accept: &str,
    ) -> Result<Raw, HandlerError> {
        let url = self.url(path, query)?;
        let key = format!("{accept} {url}");
        let lookup = key.clone();
        let cached = self.state.call(move |s| s.cache.get(&lookup)).await?;
        let reply = self
            .send(Method::GET, &url, accept, None, cached.as_ref())
            .await?;
        if reply.status == StatusCode::NOT_MODIFIED {
            if let Some(hit) = cached {
                return Ok(Raw {
                    body: hit.body,
                    link: hit.link,
                });
            }
        }
        let reply = reply.error_for_status()?;
        if reply.status == StatusCode::NOT_MODIFIED {
            return Err(HandlerError::failed(
                "GitHub answered 304 Not Modified to a request without a cached answer",
            ));
        }
        let link = reply.header("link").map(str::to_owned);
        let body: Arc<[u8]> = Arc::from(reply.body);
        if let Some(etag) = reply.headers.get("etag").and_then(|v| v.to_str().ok()) {
            let entry = Cached {
                etag: etag.to_owned(),
                body: body.clone(),
                link: link.clone(),
            };
            self.state.call(move |s| s.cache.put(&key, entry)).await?;
        }
        Ok(Raw { body, link })
    }

    /// A GET of JSON, with the next page from the `Link` header.
    pub(crate) async fn get(
        &self,
        path: &str,
        query: &[(&str, String)],
    ) -> Result<Page, HandlerError> {
        let raw = self.get_raw(path, query, JSON_MEDIA).await?;
        let value = json(&raw.body)?;
        Ok(Page {
            value,
            next_page: raw.link.as_deref().and_then(next_page),
        })
    }

    /// A POST, PUT or PATCH of `body`; the JSON answer (`null` for an empty one).
    pub(crate) async fn write(
        &self,
        method: Method,
        path: &str,
        body: &Value,
    ) -> Result<Value, HandlerError> {
        let url = self.url(path, &[])?;
        let bytes = serde_json::to_vec(body)
            .map_err(|e| HandlerError::failed(format!("cannot encode the request: {e}")))?;
        let reply = self
            .send(method, &url, JSON_MEDIA, Some(bytes), None)
            .await?
            .error_for_status()?;
        if reply.body.iter().all(u8::is_ascii_whitespace) {
            return Ok(Value::Null);
        }
        json(&reply.body)
    }

    /// A GraphQL query; `data`, or the first of GraphQL's `errors` as the tool error.
    pub(crate) async fn graphql(
        &self,
        query: &str,
        variables: Value,
    ) -> Result<Value, HandlerError> {
        let url = reqwest::Url::parse(&self.graphql)
            .map_err(|_| HandlerError::failed("the GitHub GraphQL URL is not a URL"))?;
        let body = serde_json::to_vec(&serde_json::json!({"query": query, "variables": variables}))
            .map_err(|e| HandlerError::failed(format!("cannot encode the query: {e}")))?;
        // A query changes nothing: safe to repeat after a 502/503/504.
        let reply = self
            .send(Method::POST, &url, "application/json", Some(body), None)
            .await?
            .error_for_status()?;
        let mut answer = json(&reply.body)?;
        if let Some(first) = answer["errors"].as_array().and_then(|e| e.first()) {
            let message = first["message"].as_str().unwrap_or("unknown error");
            let message: String = message
                .chars()
                .filter(|c| !c.is_control())
                .take(300)
                .collect();
            return Err(HandlerError::failed(format!("GitHub GraphQL: {message}")));
        }
        match answer.get_mut("data").map(Value::take) {
            Some(data) if !data.is_null() => Ok(data),
            _ => Err(HandlerError::failed(
                "GitHub sent a GraphQL answer without data",
            )),
        }
    }
}

fn json(body: &[u8]) -> Result<Value, HandlerError> {
    serde_json::from_slice(body).map_err(|e| {
        HandlerError::failed(format!(
            "GitHub sent an answer that could not be read: expected JSON ({e})"
        ))
    })
}

fn limited(at: SystemTime, left: Duration) -> HandlerError {
    HandlerError::failed(format!(
        "GitHub rate limited until {} (in {} s): the API rate limit of these credentials is used up; no request was sent",
        httpdate::fmt_http_date(at),
        left.as_secs().max(1)
    ))
}

/// The `page` of the `rel="next"` URL in a `Link` header.
pub(crate) fn next_page(link: &str) -> Option<u32> {
    link.split(',').find_map(|part| {
        let (target, params) = part.split_once(';')?;
        if !params
            .split(';')
            .any(|p| matches!(p.trim(), r#"rel="next""# | "rel=next"))
        {
            return None;
        }
        let url = target.trim().strip_prefix('<')?.strip_suffix('>')?;
        let query = url.split_once('?')?.1;
        query.split('&').find_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            (k == "page").then(|| v.parse().ok()).flatten()
        })
    })
}

/// A repository file path as URL path segments: each segment percent-encoded, `..`, `.`
/// and empty segments refused (a path must not climb out of `contents/`).
pub(crate) fn encode_path(path: &str) -> Result<String, HandlerError> {
    let trimmed = path.trim_matches('/');
    if trimmed.is_empty() {
        return Ok(String::new());
    }
    let mut out = String::with_capacity(trimmed.len());
    for (i, segment) in trimmed.split('/').enumerate() {
        if segment.is_empty() || segment == "." || segment == ".." {
            return Err(HandlerError::invalid_arguments(
                "path must not contain empty, `.` or `..` segments",
            ));
        }
        if i > 0 {
            out.push('/');
        }
        for b in segment.bytes() {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
                out.push(char::from(b));
            } else {
                out.push_str(&format!("%{b:02X}"));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_page_comes_from_the_link_headers_rel_next() {
        let link = r#"<https://api.github.com/repositories/1/issues?per_page=2&page=3>; rel="next", <https://api.github.com/repositories/1/issues?per_page=2&page=9>; rel="last""#;
        assert_eq!(next_page(link), Some(3));
        let last = r#"<https://api.github.com/x?page=1>; rel="prev", <https://api.github.com/x?page=1>; rel="first""#;
        assert_eq!(next_page(last), None);
    }

    #[test]
    fn file_paths_are_encoded_per_segment_and_cannot_climb() {
        assert_eq!(encode_path("/src/a b#?.rs").unwrap(), "src/a%20b%23%3F.rs");
        assert_eq!(encode_path("").unwrap(), "");
        assert_eq!(encode_path("/").unwrap(), "");
        assert!(encode_path("a/../b").is_err());
        assert!(encode_path("a//b").is_err());
        assert!(encode_path("./a").is_err());
    }
}
