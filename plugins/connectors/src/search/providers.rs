//! The search providers' real wire formats: SearXNG's JSON API (keyless, the default), Brave's
//! Web Search API and Tavily's search endpoint, each turned into the same [`Hit`]s. Each is a
//! request builder plus a response parser; the HTTP round trip and rate-limit handling are
//! shared (`mod.rs`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One search result, the same for every provider.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Hit {
    /// The page's title.
    pub title: String,
    /// Its URL.
    pub url: String,
    /// The provider's snippet.
    pub snippet: String,
    /// When it was published, as the provider says it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub published: Option<String>,
    /// The provider's relevance score.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub score: Option<f64>,
    /// The provider (and engine, for SearXNG).
    pub source: String,
    /// With `with_content`: the page as Markdown, cut to `content_length` characters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// With `with_content`: why the page could not be read (refused by the address guard
    /// or robots.txt, an HTTP error, binary content, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content_error: Option<String>,
}

/// A search request, provider-neutral.
#[derive(Debug, Clone)]
pub(crate) struct Query {
    pub(crate) text: String,
    pub(crate) count: u32,
    /// The page (0-based) the cursor points at.
    pub(crate) page: u32,
    pub(crate) language: Option<String>,
    pub(crate) safesearch: Option<SafeSearch>,
    pub(crate) freshness: Option<Freshness>,
}

/// How strictly adult content is filtered.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum SafeSearch {
    /// No filtering.
    Off,
    /// The provider's default.
    Moderate,
    /// Strict filtering.
    Strict,
}

/// How recent results must be.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Freshness {
    /// The last day.
    Day,
    /// The last week.
    Week,
    /// The last month.
    Month,
    /// The last year.
    Year,
}

impl Freshness {
    fn word(self) -> &'static str {
        match self {
            Freshness::Day => "day",
            Freshness::Week => "week",
            Freshness::Month => "month",
            Freshness::Year => "year",
        }
    }
}

/// What one provider page gave.
pub(crate) struct Found {
    pub(crate) hits: Vec<Hit>,
    /// Another page exists.
    pub(crate) more: bool,
}

/// The configured provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Provider {
    /// SearXNG's JSON API (`format=json` must be enabled on the instance).
    Searxng,
    /// Brave Search API (`X-Subscription-Token`).
    Brave,
    /// Tavily (`Authorization: Bearer`).
    Tavily,
}

impl Provider {
    /// The provider's public endpoint, if it has one.
    pub(crate) fn default_base_url(self) -> Option<&'static str> {
        match self {
            Provider::Searxng => None,
            Provider::Brave => Some("https://api.search.brave.com"),
            Provider::Tavily => Some("https://api.tavily.com"),
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Provider::Searxng => "searxng",
            Provider::Brave => "brave",
            Provider::Tavily => "tavily",
        }
    }

    /// Builds the HTTP request for `q`.
    pub(crate) fn request(
        self,
        client: &reqwest::Client,
        base: &str,
        key: Option<&str>,
        q: &Query,
    ) -> reqwest::RequestBuilder {
        let base = base.trim_end_matches('/');
        match self {
            Provider::Searxng => {
                let mut params: Vec<(&str, String)> = vec![
                    ("q", q.text.clone()),
                    ("format", "json".to_owned()),
                    ("pageno", (q.page + 1).to_string()),
                ];
                if let Some(l) = &q.language {
                    params.push(("language", l.clone()));
                }
                if let Some(s) = q.safesearch {
                    let level = match s {
                        SafeSearch::Off => "0",
                        SafeSearch::Moderate => "1",
                        SafeSearch::Strict => "2",
                    };
                    params.push(("safesearch", level.to_owned()));
                }
                if let Some(f) = q.freshness {
                    params.push(("time_range", f.word().to_owned()));
                }
                let mut r = client.get(format!("{base}/search")).query(&params);
                if let Some(k) = key {
                    r = r.bearer_auth(k);
                }
                r
            }
            Provider::Brave => {
                let mut params: Vec<(&str, String)> = vec![
                    ("q", q.text.clone()),
                    ("count", q.count.min(20).to_string()),
                    ("offset", q.page.to_string()),
                ];
                if let Some(l) = &q.language {
                    params.push(("search_lang", l.clone()));
                }
                if let Some(s) = q.safesearch {
                    let level = match s {
                        SafeSearch::Off => "off",
                        SafeSearch::Moderate => "moderate",
                        SafeSearch::Strict => "strict",
                    };
                    params.push(("safesearch", level.to_owned()));
                }
                if let Some(f) = q.freshness {
                    let code = match f {
                        Freshness::Day => "pd",
                        Freshness::Week => "pw",
                        Freshness::Month => "pm",
                        Freshness::Year => "py",
                    };
                    params.push(("freshness", code.to_owned()));
                }
                client
                    .get(format!("{base}/res/v1/web/search"))
                    .query(&params)
                    .header("Accept", "application/json")
                    .header("X-Subscription-Token", key.unwrap_or_default())
            }
            Provider::Tavily => {
                let mut body = serde_json::json!({
                    "query": q.text,
                    "max_results": q.count.min(20),
                    "search_depth": "basic",
                });
                if let Some(f) = q.freshness {
                    body["time_range"] = f.word().into();
                }
                client
                    .post(format!("{base}/search"))
                    .bearer_auth(key.unwrap_or_default())
                    .header("Content-Type", "application/json")
                    .body(body.to_string())
            }
        }
    }

    /// Parses a successful response body.
    pub(crate) fn parse(self, body: &[u8], q: &Query) -> Result<Found, String> {
        let bad =
            |e: serde_json::Error| format!("the {} response does not parse: {e}", self.name());
        match self {
            Provider::Searxng => {
                let r: SearxngResponse = serde_json::from_slice(body).map_err(bad)?;
                let more = !r.results.is_empty();
                let hits = r
                    .results
                    .into_iter()
                    .take(q.count as usize)
                    .map(|x| Hit {
                        title: x.title,
                        url: x.url,
                        snippet: x.content.unwrap_or_default(),
                        published: x.published_date,
                        score: x.score,
                        source: match x.engine {
                            Some(e) => format!("searxng:{e}"),
                            None => "searxng".to_owned(),
                        },
                        content: None,
                        content_error: None,
                    })
                    .collect();
                Ok(Found { hits, more })
            }
            Provider::Brave => {
                let r: BraveResponse = serde_json::from_slice(body).map_err(bad)?;
                let more = r
                    .query
                    .and_then(|q| q.more_results_available)
                    .unwrap_or(false)
                    && q.page < 9;
                let hits = r
                    .web
                    .map(|w| w.results)
                    .unwrap_or_default()
                    .into_iter()
                    .map(|x| Hit {
                        title: x.title,
                        url: x.url,
                        snippet: x.description.unwrap_or_default(),
                        published: x.page_age.or(x.age),
                        score: None,
                        source: "brave".to_owned(),
                        content: None,
                        content_error: None,
                    })
                    .collect();
                Ok(Found { hits, more })
            }
            Provider::Tavily => {
                let r: TavilyResponse = serde_json::from_slice(body).map_err(bad)?;
                let hits = r
                    .results
                    .into_iter()
                    .map(|x| Hit {
                        title: x.title,
                        url: x.url,
                        snippet: x.content.unwrap_or_default(),
                        published: x.published_date,
                        score: x.score,
                        source: "tavily".to_owned(),
                        content: None,
                        content_error: None,
                    })
                    .collect();
                Ok(Found { hits, more: false })
            }
        }
    }
}

#[derive(Deserialize)]
struct SearxngResponse {
    #[serde(default)]
    results: Vec<SearxngResult>,
}

#[derive(Deserialize)]
struct SearxngResult {
    url: String,
    #[serde(default)]
    title: String,
    content: Option<String>,
    engine: Option<String>,
    score: Option<f64>,
    #[serde(rename = "publishedDate")]
    published_date: Option<String>,
}

#[derive(Deserialize)]
struct BraveResponse {
    query: Option<BraveQuery>,
    web: Option<BraveWeb>,
}

#[derive(Deserialize)]
struct BraveQuery {
    more_results_available: Option<bool>,
}

#[derive(Deserialize)]
struct BraveWeb {
    #[serde(default)]
    results: Vec<BraveResult>,
}

#[derive(Deserialize)]
struct BraveResult {
    #[serde(default)]
    title: String,
    url: String,
    description: Option<String>,
    age: Option<String>,
    page_age: Option<String>,
}

#[derive(Deserialize)]
struct TavilyResponse {
    #[serde(default)]
    results: Vec<TavilyResult>,
}

#[derive(Deserialize)]
struct TavilyResult {
    #[serde(default)]
    title: String,
    url: String,
    content: Option<String>,
    score: Option<f64>,
    published_date: Option<String>,
}
