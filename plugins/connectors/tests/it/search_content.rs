//! `web_search` with `with_content`: the top results' pages read through the fetch
//! connector's guarded fetcher, as Markdown excerpts; and the domain filters. One local
//! server plays a SearXNG instance (its JSON API) and the sites its results point at.

use crate::support::Tools;
use axum::extract::{Query, State};
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use toolyard::ServerBuilder;
use toolyard_connectors::ConnectorsConfig;

#[derive(Clone, Default)]
struct Site {
    /// The result URLs `/search` answers with.
    results: Arc<Mutex<Vec<String>>>,
    /// The paths asked for.
    hits: Arc<Mutex<Vec<String>>>,
}

impl Site {
    fn hit(&self, path: &str) -> bool {
        self.hits.lock().unwrap().iter().any(|p| p == path)
    }
    fn pages_hit(&self) -> usize {
        self.hits
            .lock()
            .unwrap()
            .iter()
            .filter(|p| p.starts_with("/pages/"))
            .count()
    }
}

async fn answer(
    State(site): State<Site>,
    uri: Uri,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    site.hits.lock().unwrap().push(uri.path().to_owned());
    let html = |body: String| {
        (
            StatusCode::OK,
            [("content-type", "text/html; charset=utf-8")],
            body,
        )
            .into_response()
    };
    match uri.path() {
        "/search" => {
            let q = params.get("q").cloned().unwrap_or_default();
            let results: Vec<Value> = site
                .results
                .lock()
                .unwrap()
                .iter()
                .enumerate()
                .map(|(i, url)| json!({"url": url, "title": format!("{q} {i}"), "content": "snippet", "engine": "fake"}))
                .collect();
            (
                StatusCode::OK,
                [("content-type", "application/json")],
                json!({"query": q, "results": results}).to_string(),
            )
                .into_response()
        }
        "/pages/long" => html(format!(
            "<html><body><h1>Long page</h1><p>{}</p><script>evil()</script></body></html>",
            "word ".repeat(2000)
        )),
        "/pages/short" => {
            html("<html><body><h2>Short</h2><p>A <b>bold</b> claim.</p></body></html>".to_owned())
        }
        "/pages/binary" => (
            StatusCode::OK,
            [("content-type", "application/octet-stream")],
            vec![0u8, 1, 2, 3],
        )
            .into_response(),
        _ => (StatusCode::NOT_FOUND, "missing").into_response(),
    }
}

/// The site on 127.0.0.1 and its base URL.
async fn site() -> (Site, String) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let site = Site::default();
    let app = axum::Router::new()
        .fallback(answer)
        .with_state(site.clone());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (site, base)
}

/// `web_search` from a config file's sections.
async fn tools(toml: &str) -> Tools {
    let config = ConnectorsConfig::parse(toml).unwrap();
    Tools::start(config.install(ServerBuilder::new("search", "0")).unwrap()).await
}

#[tokio::test]
async fn with_content_reads_the_top_pages_through_the_fetch_guard_as_capped_markdown() {
    let (site, base) = site().await;
    *site.results.lock().unwrap() = vec![
        format!("{base}/pages/long"),
        format!("{base}/pages/short"),
        format!("{base}/pages/binary"),
        // A private address the allow-list does not name: refused before connecting.
        "http://10.255.255.1/private".to_owned(),
        format!("{base}/pages/missing"),
        // Past the fifth result: not read.
        format!("{base}/pages/short?sixth"),
    ];
    // [connectors.fetch] is there: its allow-list lets the pages on 127.0.0.1 be read.
    let t = tools(&format!(
        "[connectors.search]\nbase_url = \"{base}\"\n[connectors.fetch]\nallow_hosts = [\"127.0.0.1\"]\n"
    ))
    .await;
    let def = t.definition("web_search").await;
    for arg in [
        "with_content",
        "content_length",
        "include_domains",
        "exclude_domains",
    ] {
        assert!(def["inputSchema"]["properties"][arg].is_object(), "{arg}");
    }
    let r = t
        .call(
            "web_search",
            json!({"query": "q", "with_content": true, "content_length": 100}),
        )
        .await;
    r.ok();
    let results = r.raw["structuredContent"]["results"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(results.len(), 6);
    let long = results[0]["content"].as_str().unwrap();
    assert!(long.starts_with("# Long page"), "{long}");
    assert!(
        long.ends_with(" [...]") && long.chars().count() == 100 + 6,
        "{long}"
    );
    assert!(!long.contains("evil()"), "{long}");
    assert_eq!(
        results[1]["content"].as_str().unwrap(),
        "## Short\n\nA **bold** claim."
    );
    let binary = results[2]["content_error"].as_str().unwrap();
    assert!(binary.contains("binary"), "{binary}");
    assert!(results[2].get("content").is_none());
    let private = results[3]["content_error"].as_str().unwrap();
    assert!(private.contains("10.255.255.1"), "{private}");
    assert!(results[4]["content_error"]
        .as_str()
        .unwrap()
        .contains("404"));
    assert!(results[5].get("content").is_none() && results[5].get("content_error").is_none());
    assert_eq!(site.pages_hit(), 4, "the sixth page was read");
    // Without with_content no page is read.
    let before = site.pages_hit();
    let r = t.call("web_search", json!({"query": "q"})).await;
    r.ok();
    assert!(r.raw["structuredContent"]["results"][0]
        .get("content")
        .is_none());
    assert_eq!(site.pages_hit(), before);
}

#[tokio::test]
async fn without_a_fetch_section_result_pages_on_private_addresses_are_refused() {
    let (site, base) = site().await;
    *site.results.lock().unwrap() = vec![format!("{base}/pages/short")];
    let t = tools(&format!("[connectors.search]\nbase_url = \"{base}\"\n")).await;
    let r = t
        .call("web_search", json!({"query": "q", "with_content": true}))
        .await;
    r.ok();
    let hit = &r.raw["structuredContent"]["results"][0];
    assert!(hit.get("content").is_none(), "{hit}");
    let why = hit["content_error"].as_str().unwrap();
    assert!(why.contains("127.0.0.1"), "{why}");
    assert!(
        !site.hit("/pages/short"),
        "the guard let a loopback page be read"
    );
}

#[tokio::test]
async fn domain_filters_keep_included_domains_and_their_subdomains_and_drop_excluded_ones() {
    let (site, base) = site().await;
    *site.results.lock().unwrap() = [
        "https://example.org/a",
        "https://docs.example.org/b",
        "https://ads.example.org/c",
        "https://badexample.org/d",
        "https://other.net/e",
    ]
    .map(str::to_owned)
    .to_vec();
    let t = tools(&format!("[connectors.search]\nbase_url = \"{base}\"\n")).await;
    let urls = |r: &crate::support::Reply| -> Vec<String> {
        r.raw["structuredContent"]["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["url"].as_str().unwrap().to_owned())
            .collect()
    };
    let r = t
        .call(
            "web_search",
            json!({"query": "q", "include_domains": ["example.org"], "exclude_domains": ["ads.example.org"]}),
        )
        .await;
    assert_eq!(
        urls(&r),
        ["https://example.org/a", "https://docs.example.org/b"]
    );
    let r = t
        .call(
            "web_search",
            json!({"query": "q", "exclude_domains": ["example.org"]}),
        )
        .await;
    assert_eq!(
        urls(&r),
        ["https://badexample.org/d", "https://other.net/e"]
    );
}
