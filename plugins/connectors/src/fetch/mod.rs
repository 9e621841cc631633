//! The fetch connector: `fetch(url, max_length, start_index, raw)` as the reference
//! `mcp-server-fetch` has it (HTML to Markdown, pagination by `start_index`, the truncation
//! hint), with what the reference lacks: an SSRF guard (`guard`), robots.txt read by RFC 9309
//! (`robots`: a 5xx or an unreachable file disallows), and byte and time limits.

mod fetcher;
mod guard;
mod robots;

use crate::tool::{tool, Effect, Text};
use crate::{ConnectorError, FetchConfig};
pub(crate) use fetcher::Fetcher;
use fetcher::{Page, Settings};
use schemars::JsonSchema;
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;
use toolyard::proto::{GetPromptResult, Prompt, PromptArgument, PromptMessage, Role};
use toolyard::{Controller, DefinitionError, HandlerError, PromptDef, ToolDef};

/// The product token robots.txt groups are matched against.
const ROBOTS_TOKEN: &str = "ToolyardFetch";

/// The fetch connector, a controller of one tool.
#[derive(Clone)]
pub struct Fetch {
    fetcher: Arc<Fetcher>,
}

impl std::fmt::Debug for Fetch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fetch")
            .field("ignore_robots", &self.fetcher.settings.ignore_robots)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
struct FetchArgs {
    /// The URL to fetch.
    url: String,
    /// The most characters to return (default 5000).
    #[serde(default = "default_max_length")]
    #[schemars(range(min = 1, max = 999_999))]
    max_length: u64,
    /// Return output starting at this character index, to read on after a truncated answer.
    #[serde(default)]
    start_index: u64,
    /// The page as it came, without converting HTML to Markdown.
    #[serde(default)]
    raw: bool,
}

fn default_max_length() -> u64 {
    5000
}

impl Fetch {
    /// A fetcher with the settings of `config`.
    pub fn new(config: &FetchConfig) -> Result<Self, ConnectorError> {
        let fetch = Fetch {
            fetcher: Arc::new(fetcher_for(config)?),
        };
        fetch.definitions()?;
        Ok(fetch)
    }

    fn definitions(&self) -> Result<Vec<ToolDef>, DefinitionError> {
        let fetcher = self.fetcher.clone();
        Ok(vec![tool(
            "fetch",
            "Fetches a URL from the internet and returns its contents, HTML as Markdown. Long pages come in parts: call again with start_index to read on. Private and local addresses are refused.",
            Effect::Egress,
            move |_ctx, a: FetchArgs| {
                let fetcher = fetcher.clone();
                async move { run(&fetcher, a).await.map(Text) }
            },
        )?])
    }
}

/// The guarded fetcher of `config` (the tool's, and the one `web_search` reads result pages
/// with).
pub(crate) fn fetcher_for(config: &FetchConfig) -> Result<Fetcher, ConnectorError> {
    let user_agent = config.user_agent.clone().unwrap_or_else(|| {
        format!(
            "{ROBOTS_TOKEN}/{} (Toolyard; autonomous; +https://github.com/toolyard/toolyard)",
            env!("CARGO_PKG_VERSION")
        )
    });
    let settings = Settings {
        allow: guard::AllowList::new(&config.allow_hosts),
        user_agent,
        robots_token: ROBOTS_TOKEN.to_owned(),
        ignore_robots: config.ignore_robots_txt,
        max_bytes: config.max_bytes.max(1),
        timeout: Duration::from_millis(config.timeout_ms.max(1)),
        max_redirects: config.max_redirects,
    };
    Fetcher::new(settings).map_err(|message| ConnectorError::Config {
        connector: "fetch",
        message,
    })
}

/// `url` fetched through `fetcher` and turned into Markdown (other text as it is): what
/// `web_search` includes with a result.
pub(crate) async fn page_markdown(fetcher: &Fetcher, url: &str) -> Result<String, HandlerError> {
    prompt_text(fetcher, url).await
}

impl Controller for Fetch {
    fn tools(self: &Arc<Self>) -> Vec<ToolDef> {
        // Checked in `new`; an error here would be a bug, logged rather than a panic.
        self.definitions().unwrap_or_else(|e| {
            tracing::error!(error = %e, "fetch connector: a tool definition was refused");
            Vec::new()
        })
    }

    fn prompts(self: &Arc<Self>) -> Vec<PromptDef> {
        vec![prompt(self.fetcher.clone())]
    }
}

/// The reference server's `fetch` prompt: the page (as Markdown) as one user message, so a
/// user can put a page into the conversation. The same guard, robots.txt and limits as the
/// tool; the whole page up to the byte limit, no pagination. A failed fetch is a message
/// saying why (as the reference has it), a missing `url` an invalid-params error.
fn prompt(fetcher: Arc<Fetcher>) -> PromptDef {
    PromptDef::new(
        Prompt {
            name: "fetch".to_owned(),
            title: None,
            description: Some("Fetch a URL and extract its contents as markdown".to_owned()),
            arguments: Some(vec![PromptArgument {
                name: "url".to_owned(),
                title: None,
                description: Some("URL to fetch".to_owned()),
                required: Some(true),
            }]),
            icons: None,
            meta: None,
        },
        Arc::new(move |_ctx, args| {
            let fetcher = fetcher.clone();
            Box::pin(async move {
                let Some(url) = args.get("url").filter(|u| !u.is_empty()).cloned() else {
                    return Err(HandlerError::invalid_arguments("URL is required"));
                };
                let (description, text) = match prompt_text(&fetcher, &url).await {
                    Ok(text) => (format!("Contents of {url}"), text),
                    Err(e) => (format!("Failed to fetch {url}"), e.to_string()),
                };
                Ok(GetPromptResult {
                    description: Some(description),
                    messages: vec![PromptMessage::text(Role::User, text)],
                    meta: None,
                    result_type: None,
                })
            })
        }),
    )
}

async fn prompt_text(fetcher: &Fetcher, url: &str) -> Result<String, HandlerError> {
    let page = fetcher
        .fetch(url)
        .await
        .map_err(|e| HandlerError::failed(e.to_string()))?;
    let max_bytes = fetcher.settings.max_bytes;
    let (content, prefix) = crate::tool::blocking(move || render(page, false, max_bytes)).await?;
    Ok(format!("{prefix}{content}"))
}

async fn run(fetcher: &Fetcher, a: FetchArgs) -> Result<String, HandlerError> {
    if a.max_length == 0 || a.max_length >= 1_000_000 {
        return Err(HandlerError::invalid_arguments(
            "max_length must be between 1 and 999999",
        ));
    }
    let page = fetcher
        .fetch(&a.url)
        .await
        .map_err(|e| HandlerError::failed(e.to_string()))?;
    let max_bytes = fetcher.settings.max_bytes;
    let raw = a.raw;
    let (content, prefix) = crate::tool::blocking(move || render(page, raw, max_bytes)).await?;
    Ok(paginate(
        &a.url,
        &content,
        &prefix,
        usize::try_from(a.start_index).unwrap_or(usize::MAX),
        usize::try_from(a.max_length).unwrap_or(usize::MAX),
    ))
}

/// The page as text: (content, prefix). Binary content is refused.
fn render(page: Page, raw: bool, max_bytes: u64) -> Result<(String, String), HandlerError> {
    let Page {
        url,
        content_type: ct,
        body,
        cut,
        ..
    } = page;
    let text_like = ct.is_empty()
        || ct.starts_with("text/")
        || ["json", "xml", "javascript", "yaml", "csv"]
            .iter()
            .any(|k| ct.contains(k));
    let sniff = &body[..body.len().min(1024)];
    if !text_like || sniff.contains(&0) {
        return Err(HandlerError::failed(format!(
            "{} is binary content ({}); fetch returns text only",
            url,
            if ct.is_empty() {
                "no content type"
            } else {
                &ct
            }
        )));
    }
    let text = String::from_utf8(body)
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
    let head: String = text.chars().take(100).collect();
    let is_html =
        head.to_ascii_lowercase().contains("<html") || ct.contains("text/html") || ct.is_empty();
    let (mut content, prefix) = if is_html && !raw {
        let converter = htmd::HtmlToMarkdown::builder()
            .skip_tags(vec!["script", "style", "noscript", "head", "svg", "iframe"])
            .build();
        let md = converter
            .convert(&text)
            .map_err(|e| HandlerError::failed(format!("the page could not be converted: {e}")))?;
        (md, String::new())
    } else {
        let shown = if ct.is_empty() {
            "unknown"
        } else {
            ct.as_str()
        };
        (
            text,
            format!("Content type {shown} cannot be simplified to markdown, but here is the raw content:\n"),
        )
    };
    if cut {
        content.push_str(&format!(
            "\n\n[the response was cut at the limit of {max_bytes} bytes]"
        ));
    }
    Ok((content, prefix))
}

/// One window of `content`, in characters, with the reference server's truncation hint.
fn paginate(url: &str, content: &str, prefix: &str, start: usize, max: usize) -> String {
    let total = content.chars().count();
    if start >= total {
        return "<error>No more content available.</error>".to_owned();
    }
    let part: String = content.chars().skip(start).take(max).collect();
    let taken = part.chars().count();
    let mut out = format!("{prefix}Contents of {url}:\n{part}");
    if start + taken < total {
        out.push_str(&format!(
            "\n\n<error>Content truncated. Call the fetch tool with a start_index of {} to get more content.</error>",
            start + taken
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::paginate;

    #[test]
    fn pages_are_cut_by_characters_with_a_hint_to_read_on() {
        let out = paginate("u", "héllo world", "", 0, 5);
        assert!(out.starts_with("Contents of u:\nhéllo\n\n<error>Content truncated."));
        assert!(out.contains("start_index of 5"));
        assert_eq!(
            paginate("u", "héllo", "", 5, 5),
            "<error>No more content available.</error>"
        );
        assert_eq!(paginate("u", "héllo", "", 2, 10), "Contents of u:\nllo");
    }
}
