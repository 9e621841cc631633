//! The web search connector: one provider-neutral `web_search(query, count, cursor, ...)`
//! tool over SearXNG (keyless, the default), Brave or Tavily, speaking each provider's real
//! wire format (`providers`) against a configurable base URL. Results are structured content;
//! a `429` is waited out once when its `Retry-After` is short, and reported with the wait
//! otherwise. The API key is never printed.
//!
//! With `with_content`, the top results' pages are read through the fetch connector's
//! guarded fetcher (its SSRF guard, robots.txt, byte and time limits; the `[connectors.fetch]`
//! settings when that section is there, the defaults otherwise) and included as Markdown
//! excerpts. `include_domains` / `exclude_domains` filter the provider's page of results.

mod providers;

use crate::tool::{tool, Effect};
use crate::{ConnectorError, SearchConfig};
pub use providers::Hit;
use providers::{Freshness, Provider, Query, SafeSearch};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;
use toolyard::{Controller, DefinitionError, HandlerError, Json, ToolDef};

/// The largest response body read from a provider.
const MAX_BODY: usize = 4 * 1024 * 1024;

/// With `with_content`, at most this many results have their pages read.
pub const MAX_CONTENT_RESULTS: usize = 5;

/// The default and the largest `content_length`, in characters.
const DEFAULT_CONTENT_LENGTH: u32 = 2_000;
const MAX_CONTENT_LENGTH: u32 = 20_000;

struct Inner {
    provider: Provider,
    base_url: String,
    api_key: Option<String>,
    client: reqwest::Client,
    max_results: u32,
    max_retry_wait: Duration,
    /// Reads result pages for `with_content`.
    pages: Arc<crate::fetch::Fetcher>,
}

/// The web search connector, a controller of one tool.
#[derive(Clone)]
pub struct Search {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Search {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key is a secret: never printed.
        f.debug_struct("Search")
            .field("provider", &self.inner.provider.name())
            .field("base_url", &self.inner.base_url)
            .finish_non_exhaustive()
    }
}

/// `web_search`'s answer.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Results {
    /// The query searched.
    pub query: String,
    /// The provider asked.
    pub provider: String,
    /// The results, best first.
    pub results: Vec<Hit>,
    /// Pass as `cursor` for the next page; absent on the last.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct SearchArgs {
    /// What to search for.
    query: String,
    /// How many results (1-20; default the server's setting).
    #[serde(default)]
    #[schemars(range(min = 1, max = 20))]
    count: Option<u32>,
    /// `next_cursor` of a previous answer, for the next page.
    #[serde(default)]
    cursor: Option<String>,
    /// A language code (e.g. `en`).
    #[serde(default)]
    language: Option<String>,
    /// Adult-content filtering.
    #[serde(default)]
    safesearch: Option<SafeSearch>,
    /// Only results from the last day, week, month or year.
    #[serde(default)]
    freshness: Option<Freshness>,
    /// Also read the top results' pages (at most 5) and include each as a Markdown excerpt
    /// (`content`, or `content_error` saying why it could not be read).
    #[serde(default)]
    with_content: bool,
    /// The longest excerpt, in characters (default 2000, at most 20000).
    #[serde(default)]
    #[schemars(range(min = 1, max = 20_000))]
    content_length: Option<u32>,
    /// Keep only results from these domains (and their subdomains).
    #[serde(default)]
    include_domains: Vec<String>,
    /// Drop results from these domains (and their subdomains).
    #[serde(default)]
    exclude_domains: Vec<String>,
}

fn bad(message: impl Into<String>) -> ConnectorError {
    ConnectorError::Config {
        connector: "search",
        message: message.into(),
    }
}

/// `${VAR}` is read from the environment; anything else is the key itself.
fn expand_key(key: &str) -> Result<String, ConnectorError> {
    match key.strip_prefix("${").and_then(|k| k.strip_suffix('}')) {
        Some(var) => std::env::var(var)
            .map_err(|_| bad(format!("`api_key` names ${{{var}}}, which is not set"))),
        None => Ok(key.to_owned()),
    }
}

impl Search {
    /// A search connector with the settings of `config`; result pages (`with_content`) are
    /// read with the fetch connector's defaults.
    pub fn new(config: &SearchConfig) -> Result<Self, ConnectorError> {
        Self::with_fetch(config, &crate::FetchConfig::new())
    }

    /// A search connector reading result pages with the settings of `fetch` (its
    /// `allow_hosts`, robots.txt choice and limits).
    pub fn with_fetch(
        config: &SearchConfig,
        fetch: &crate::FetchConfig,
    ) -> Result<Self, ConnectorError> {
        let pages = Arc::new(crate::fetch::fetcher_for(fetch)?);
        let provider = match config.provider.as_str() {
            "searxng" => Provider::Searxng,
            "brave" => Provider::Brave,
            "tavily" => Provider::Tavily,
            other => {
                return Err(bad(format!(
                    "unknown provider `{other}`: expected `searxng`, `brave` or `tavily`"
                )))
            }
        };
        let base_url = match (&config.base_url, provider.default_base_url()) {
            (Some(url), _) => url.clone(),
            (None, Some(url)) => url.to_owned(),
            (None, None) => {
                return Err(bad(
                    "`base_url` is needed for SearXNG (the instance's address)",
                ))
            }
        };
        let api_key = config.api_key.as_deref().map(expand_key).transpose()?;
        if api_key.is_none() && provider != Provider::Searxng {
            return Err(bad(format!("`api_key` is needed for {}", provider.name())));
        }
        let client = reqwest::Client::builder()
            .timeout(Duration::from_millis(config.timeout_ms.max(1)))
            .user_agent(concat!("Toolyard/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| bad(format!("cannot build the HTTP client: {e}")))?;
        let search = Search {
            inner: Arc::new(Inner {
                provider,
                base_url,
                api_key,
                client,
                max_results: config.max_results.clamp(1, 20),
                max_retry_wait: Duration::from_millis(config.max_retry_wait_ms),
                pages,
            }),
        };
        search.definitions()?;
        Ok(search)
    }

    fn definitions(&self) -> Result<Vec<ToolDef>, DefinitionError> {
        let inner = self.inner.clone();
        Ok(vec![tool(
            "web_search",
            "Search the web. Returns results with title, url and snippet; pass next_cursor as cursor for more. with_content also reads the top results' pages and includes Markdown excerpts.",
            Effect::Egress,
            move |_ctx, a: SearchArgs| {
                let inner = inner.clone();
                async move { inner.search(a).await.map(Json) }
            },
        )?])
    }
}

impl Controller for Search {
    fn tools(self: &Arc<Self>) -> Vec<ToolDef> {
        // Checked in `new`; an error here would be a bug, logged rather than a panic.
        self.definitions().unwrap_or_else(|e| {
            tracing::error!(error = %e, "search connector: a tool definition was refused");
            Vec::new()
        })
    }
}

/// Seconds in a `Retry-After` header (the HTTP-date form is not waited for).
fn retry_after(response: &reqwest::Response) -> Option<u64> {
    response
        .headers()
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

impl Inner {
    async fn search(&self, a: SearchArgs) -> Result<Results, HandlerError> {
        if a.query.trim().is_empty() {
            return Err(HandlerError::invalid_arguments("query is empty"));
        }
        let page = match &a.cursor {
            None => 0,
            Some(c) => c
                .strip_prefix('p')
                .and_then(|n| n.parse::<u32>().ok())
                .filter(|n| *n < 1000)
                .ok_or_else(|| {
                    HandlerError::invalid_arguments("cursor is not one this tool gave")
                })?,
        };
        let q = Query {
            text: a.query.clone(),
            count: a.count.unwrap_or(self.max_results).clamp(1, 20),
            page,
            language: a.language,
            safesearch: a.safesearch,
            freshness: a.freshness,
        };
        let name = self.provider.name();
        let mut waited = false;
        let response = loop {
            let request =
                self.provider
                    .request(&self.client, &self.base_url, self.api_key.as_deref(), &q);
            let response = crate::trace::send(request)
                .await
                .map_err(|e| HandlerError::failed(format!("{name}: {}", e.without_url())))?;
            if response.status() == reqwest::StatusCode::TOO_MANY_REQUESTS {
                let wait = retry_after(&response);
                match wait {
                    Some(secs) if !waited && Duration::from_secs(secs) <= self.max_retry_wait => {
                        waited = true;
                        tokio::time::sleep(Duration::from_secs(secs)).await;
                        continue;
                    }
                    Some(secs) => {
                        return Err(HandlerError::failed(format!(
                            "{name} is rate limiting: retry after {secs} s"
                        )))
                    }
                    None => return Err(HandlerError::failed(format!("{name} is rate limiting"))),
                }
            }
            break response;
        };
        let status = response.status();
        if !status.is_success() {
            let hint = match (self.provider, status.as_u16()) {
                (Provider::Searxng, 403) => " (is `json` in the instance's search.formats?)",
                (_, 401 | 403) => " (the API key was refused)",
                _ => "",
            };
            return Err(HandlerError::failed(format!(
                "{name} answered HTTP {}{hint}",
                status.as_u16()
            )));
        }
        let mut response = response;
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| HandlerError::failed(format!("{name}: {}", e.without_url())))?
        {
            if body.len() + chunk.len() > MAX_BODY {
                return Err(HandlerError::failed(format!(
                    "{name}: the response is larger than {MAX_BODY} bytes"
                )));
            }
            body.extend_from_slice(&chunk);
        }
        let found = self
            .provider
            .parse(&body, &q)
            .map_err(HandlerError::failed)?;
        let next_cursor = (found.more && !found.hits.is_empty()).then(|| format!("p{}", page + 1));
        let mut results: Vec<Hit> = found
            .hits
            .into_iter()
            .filter(|h| domain_kept(&h.url, &a.include_domains, &a.exclude_domains))
            .collect();
        if a.with_content {
            let length = a
                .content_length
                .unwrap_or(DEFAULT_CONTENT_LENGTH)
                .clamp(1, MAX_CONTENT_LENGTH) as usize;
            self.read_pages(&mut results, length).await;
        }
        Ok(Results {
            query: a.query,
            provider: name.to_owned(),
            next_cursor,
            results,
        })
    }

    /// Reads the top results' pages at once, each within the fetcher's limits.
    async fn read_pages(&self, results: &mut [Hit], length: usize) {
        let mut reads = tokio::task::JoinSet::new();
        for (i, hit) in results.iter().take(MAX_CONTENT_RESULTS).enumerate() {
            let (pages, url) = (self.pages.clone(), hit.url.clone());
            reads.spawn(async move { (i, crate::fetch::page_markdown(&pages, &url).await) });
        }
        while let Some(read) = reads.join_next().await {
            let Ok((i, outcome)) = read else { continue };
            let Some(hit) = results.get_mut(i) else {
                continue;
            };
            match outcome {
                Ok(text) => hit.content = Some(excerpt(&text, length)),
                Err(e) => hit.content_error = Some(e.to_string()),
            }
        }
    }
}

/// `text` cut to `length` characters, saying so when cut.
fn excerpt(text: &str, length: usize) -> String {
    match text.char_indices().nth(length) {
        Some((end, _)) => format!("{} [...]", &text[..end]),
        None => text.to_owned(),
    }
}

/// Whether `url`'s host passes the domain filters (a domain covers its subdomains).
fn domain_kept(url: &str, include: &[String], exclude: &[String]) -> bool {
    if include.is_empty() && exclude.is_empty() {
        return true;
    }
    let Some(host) = url::Url::parse(url).ok().and_then(|u| {
        u.host_str()
            .map(|h| h.trim_end_matches('.').to_ascii_lowercase())
    }) else {
        return include.is_empty();
    };
    let covers = |domain: &String| {
        let d = domain
            .trim()
            .trim_start_matches("*.")
            .trim_start_matches('.')
            .trim_end_matches('.')
            .to_ascii_lowercase();
        !d.is_empty()
            && (host == d
                || host
                    .strip_suffix(&d)
                    .is_some_and(|rest| rest.ends_with('.')))
    };
    (include.is_empty() || include.iter().any(covers)) && !exclude.iter().any(covers)
}

#[cfg(test)]
mod tests {
    use super::{domain_kept, excerpt};

    #[test]
    fn a_domain_covers_its_subdomains_and_nothing_that_merely_ends_like_it() {
        let inc = vec!["example.org".to_owned()];
        assert!(domain_kept("https://example.org/a", &inc, &[]));
        assert!(domain_kept("https://docs.Example.org./a", &inc, &[]));
        assert!(!domain_kept("https://badexample.org/a", &inc, &[]));
        assert!(!domain_kept("not a url", &inc, &[]));
        let exc = vec!["*.ads.example.org".to_owned()];
        assert!(!domain_kept("https://x.ads.example.org/", &inc, &exc));
        assert!(domain_kept("https://www.example.org/", &inc, &exc));
    }

    #[test]
    fn excerpts_are_cut_by_characters() {
        assert_eq!(excerpt("héllo", 2), "hé [...]");
        assert_eq!(excerpt("héllo", 5), "héllo");
    }
}
