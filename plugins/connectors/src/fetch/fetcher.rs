//! Getting a page: redirects followed by hand (at most `max_redirects`, each hop checked by
//! the guard again), robots.txt asked first, the body read up to a byte cap, everything
//! within one time limit, through a client that connects only via the guarded resolver and
//! never through a proxy (a proxy would resolve names itself, past the guard).

use super::guard::{check_url, AllowList, GuardedResolver, Refused};
use super::robots::Rules;
use reqwest::header::{CONTENT_TYPE, LOCATION, USER_AGENT};
use reqwest::Url;
use std::sync::Arc;
use std::time::Duration;

/// Why a fetch failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FetchError {
    #[error(transparent)]
    Refused(#[from] Refused),
    #[error("the URL does not parse: {0}")]
    Url(String),
    #[error("request failed: {0}")]
    Http(String),
    #[error("the fetch ran past its time limit of {0} ms")]
    Timeout(u128),
    #[error("more than {0} redirects")]
    Redirects(usize),
    #[error("{0}")]
    Robots(String),
    #[error("HTTP status {0}")]
    Status(u16),
}

/// A fetched response.
pub(crate) struct Page {
    pub(crate) url: Url,
    pub(crate) status: u16,
    pub(crate) content_type: String,
    pub(crate) body: Vec<u8>,
    /// The body was longer than the cap.
    pub(crate) cut: bool,
}

/// The settings of a fetcher.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) allow: AllowList,
    pub(crate) user_agent: String,
    pub(crate) robots_token: String,
    pub(crate) ignore_robots: bool,
    pub(crate) max_bytes: u64,
    pub(crate) timeout: Duration,
    pub(crate) max_redirects: usize,
}

/// The guarded HTTP client.
pub(crate) struct Fetcher {
    client: reqwest::Client,
    resolver: GuardedResolver,
    pub(crate) settings: Settings,
}

fn http_error(e: reqwest::Error) -> FetchError {
    // The resolver's refusal travels inside reqwest's connect error; say it plainly.
    let mut source: Option<&dyn std::error::Error> = Some(&e);
    while let Some(s) = source {
        if let Some(refused) = s.downcast_ref::<Refused>() {
            return FetchError::Refused(refused.clone());
        }
        source = s.source();
    }
    if e.is_timeout() {
        return FetchError::Http("timed out".to_owned());
    }
    FetchError::Http(e.without_url().to_string())
}

impl Fetcher {
    pub(crate) fn new(settings: Settings) -> Result<Fetcher, String> {
        let resolver = GuardedResolver {
            allow: settings.allow.clone(),
        };
        let client = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .dns_resolver(Arc::new(resolver.clone()))
            .connect_timeout(settings.timeout.min(Duration::from_secs(10)))
            .timeout(settings.timeout)
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
        Ok(Fetcher {
            client,
            resolver,
            settings,
        })
    }

    /// GET `url`, following redirects, reading at most `cap` bytes of the final body.
    async fn get(&self, url: Url, cap: u64) -> Result<Page, FetchError> {
        let mut current = url;
        for _ in 0..=self.settings.max_redirects {
            check_url(&current, &self.settings.allow)?;
            if let Some(url::Host::Domain(name)) = current.host() {
                // Early, for a clear error; the resolver enforces it at connect time anyway.
                self.resolver.lookup(name).await?;
            }
            let request = self
                .client
                .get(current.clone())
                .header(USER_AGENT, &self.settings.user_agent);
            let mut response = crate::trace::send(request).await.map_err(http_error)?;
            let status = response.status();
            if status.is_redirection() {
                if let Some(next) = response
                    .headers()
                    .get(LOCATION)
                    .and_then(|l| l.to_str().ok())
                {
                    current = current
                        .join(next)
                        .map_err(|e| FetchError::Url(e.to_string()))?;
                    continue;
                }
            }
            let content_type = response
                .headers()
                .get(CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_ascii_lowercase();
            let mut body = Vec::new();
            let mut cut = false;
            let cap = usize::try_from(cap).unwrap_or(usize::MAX);
            while let Some(chunk) = response.chunk().await.map_err(http_error)? {
                let room = cap - body.len();
                if chunk.len() > room {
                    body.extend_from_slice(&chunk[..room]);
                    cut = true;
                    break;
                }
                body.extend_from_slice(&chunk);
            }
            return Ok(Page {
                url: current,
                status: status.as_u16(),
                content_type,
                body,
                cut,
            });
        }
        Err(FetchError::Redirects(self.settings.max_redirects))
    }

    /// The robots rules of `url`'s origin (RFC 9309: 4xx allows all; 5xx and an unreachable
    /// file disallow all).
    async fn robots(&self, url: &Url) -> Result<Rules, FetchError> {
        let mut robots_url = url.clone();
        robots_url.set_path("/robots.txt");
        robots_url.set_query(None);
        robots_url.set_fragment(None);
        match self.get(robots_url, 512 * 1024).await {
            Ok(page) => Ok(match page.status {
                200..=299 => Rules::parse(
                    &String::from_utf8_lossy(&page.body),
                    &self.settings.robots_token,
                ),
                401 | 403 => Rules::deny_all(),
                400..=499 => Rules::allow_all(),
                _ => Rules::deny_all(),
            }),
            Err(FetchError::Refused(r)) => Err(FetchError::Refused(r)),
            Err(_) => Ok(Rules::deny_all()),
        }
    }

    /// Fetches a page for a tool call: robots first (unless ignored), then the page, within
    /// the time limit; a non-success status is an error.
    pub(crate) async fn fetch(&self, raw_url: &str) -> Result<Page, FetchError> {
        let url = Url::parse(raw_url).map_err(|e| FetchError::Url(e.to_string()))?;
        check_url(&url, &self.settings.allow)?;
        let work = async {
            if !self.settings.ignore_robots {
                let rules = self.robots(&url).await?;
                let path = match url.query() {
                    Some(q) => format!("{}?{q}", url.path()),
                    None => url.path().to_owned(),
                };
                if !rules.allows(&path) {
                    return Err(FetchError::Robots(format!(
                        "The site's robots.txt does not allow autonomous fetching of {path} \
                         (or it could not be read, which RFC 9309 treats as disallow)"
                    )));
                }
            }
            let page = self.get(url, self.settings.max_bytes).await?;
            if page.status >= 400 {
                return Err(FetchError::Status(page.status));
            }
            Ok(page)
        };
        match tokio::time::timeout(self.settings.timeout, work).await {
            Ok(outcome) => outcome,
            Err(_) => Err(FetchError::Timeout(self.settings.timeout.as_millis())),
        }
    }
}
