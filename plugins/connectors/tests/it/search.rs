//! `web_search` against a local fake speaking each provider's real wire format: SearXNG's
//! `GET /search?format=json`, Brave's `GET /res/v1/web/search` with `X-Subscription-Token`,
//! Tavily's `POST /search` with a bearer key; and `429` with `Retry-After`.

use crate::support::Tools;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use toolyard_connectors::search::Search;
use toolyard_connectors::SearchConfig;

#[derive(Clone, Default)]
struct Fake {
    /// Requests answered with 429 before the real answer, and the Retry-After to send.
    throttle: Arc<Mutex<(usize, u64)>>,
    calls: Arc<AtomicUsize>,
    seen: Arc<Mutex<Vec<String>>>,
}

fn json_reply(status: StatusCode, body: Value) -> Response {
    (
        status,
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response()
}

async fn answer(
    State(fake): State<Fake>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    Query(params): Query<HashMap<String, String>>,
    body: Bytes,
) -> Response {
    fake.calls.fetch_add(1, Ordering::Relaxed);
    fake.seen.lock().unwrap().push(format!("{method} {uri}"));
    {
        let mut throttle = fake.throttle.lock().unwrap();
        if throttle.0 > 0 {
            throttle.0 -= 1;
            return (
                StatusCode::TOO_MANY_REQUESTS,
                [("retry-after", throttle.1.to_string())],
                "slow down",
            )
                .into_response();
        }
    }
    let header = |name: &str| crate::support::header_text(&headers, name);
    match (method.as_str(), uri.path()) {
        ("GET", "/search") => {
            if params.get("format").map(String::as_str) != Some("json") {
                return json_reply(StatusCode::FORBIDDEN, json!({}));
            }
            let page: u32 = params
                .get("pageno")
                .and_then(|p| p.parse().ok())
                .unwrap_or(1);
            let q = params.get("q").cloned().unwrap_or_default();
            let results: Vec<Value> = if page > 2 {
                vec![]
            } else {
                (0..20)
                    .map(|i| json!({"url": format!("https://example.org/{page}/{i}"), "title": format!("{q} {page}.{i}"),
                        "content": "snippet", "engine": "duckduckgo", "score": 1.5, "category": "general"}))
                    .collect()
            };
            json_reply(
                StatusCode::OK,
                json!({"query": q, "number_of_results": 40, "results": results, "answers": [],
                    "corrections": [], "infoboxes": [], "suggestions": [], "unresponsive_engines": []}),
            )
        }
        ("GET", "/res/v1/web/search") => {
            if header("x-subscription-token") != "brave-key" {
                return json_reply(
                    StatusCode::UNAUTHORIZED,
                    json!({"type": "ErrorResponse", "error": {"status": 401, "code": "SUBSCRIPTION_TOKEN_INVALID"}}),
                );
            }
            let offset: u32 = params
                .get("offset")
                .and_then(|p| p.parse().ok())
                .unwrap_or(0);
            json_reply(
                StatusCode::OK,
                json!({"type": "search", "query": {"original": params.get("q"), "more_results_available": offset < 1},
                "web": {"type": "search", "results": [
                    {"title": format!("Brave {offset}"), "url": "https://brave.example/1", "description": "desc", "page_age": "2026-01-02T00:00:00"}
                ]}}),
            )
        }
        ("POST", "/search") => {
            if header("authorization") != "Bearer tvly-key" {
                return json_reply(
                    StatusCode::UNAUTHORIZED,
                    json!({"detail": {"error": "Unauthorized"}}),
                );
            }
            let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            json_reply(
                StatusCode::OK,
                json!({"query": request["query"], "answer": null, "images": [], "response_time": 0.5,
                    "results": [{"title": "Tavily hit", "url": "https://tavily.example/a", "content": "text",
                        "score": 0.9, "published_date": "2026-02-03", "max": request["max_results"]}]}),
            )
        }
        _ => json_reply(StatusCode::NOT_FOUND, json!({})),
    }
}

async fn fake(fake: Fake) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new().fallback(answer).with_state(fake);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}")
}

async fn tools(config: SearchConfig) -> Tools {
    Tools::with(Search::new(&config).expect("the connector starts")).await
}

#[tokio::test]
async fn searxng_results_are_structured_and_paged_by_cursor() {
    let f = Fake::default();
    let base = fake(f.clone()).await;
    let t = tools(SearchConfig::new("searxng", Some(base))).await;
    let r = t
        .call("web_search", json!({"query": "rust actors", "count": 3, "freshness": "week", "safesearch": "strict"}))
        .await;
    r.ok();
    let out = &r.raw["structuredContent"];
    assert_eq!(out["provider"], "searxng");
    assert_eq!(out["results"].as_array().unwrap().len(), 3);
    assert_eq!(
        out["results"][0],
        json!({"title": "rust actors 1.0", "url": "https://example.org/1/0", "snippet": "snippet",
            "score": 1.5, "source": "searxng:duckduckgo"})
    );
    assert_eq!(out["next_cursor"], "p1");
    let seen = f.seen.lock().unwrap().clone();
    assert!(
        seen[0].contains("format=json")
            && seen[0].contains("time_range=week")
            && seen[0].contains("safesearch=2"),
        "{seen:?}"
    );
    let next = t
        .call(
            "web_search",
            json!({"query": "rust actors", "cursor": "p1"}),
        )
        .await;
    next.ok();
    assert_eq!(
        next.raw["structuredContent"]["results"][0]["title"],
        "rust actors 2.0"
    );
    let last = t
        .call(
            "web_search",
            json!({"query": "rust actors", "cursor": "p2"}),
        )
        .await;
    last.ok();
    assert!(last.raw["structuredContent"].get("next_cursor").is_none());
    let forged = t
        .call("web_search", json!({"query": "x", "cursor": "../../admin"}))
        .await;
    assert!(forged.err().contains("cursor"), "{}", forged.text);
}

#[tokio::test]
async fn brave_and_tavily_speak_their_own_formats_with_their_keys() {
    let f = Fake::default();
    let base = fake(f.clone()).await;
    let mut brave = SearchConfig::new("brave", Some(base.clone()));
    brave.api_key = Some("brave-key".into());
    let t = tools(brave).await;
    let r = t
        .call("web_search", json!({"query": "q", "freshness": "day"}))
        .await;
    r.ok();
    let out = &r.raw["structuredContent"];
    assert_eq!(out["results"][0]["title"], "Brave 0");
    assert_eq!(out["results"][0]["published"], "2026-01-02T00:00:00");
    assert_eq!(out["next_cursor"], "p1");
    assert!(f
        .seen
        .lock()
        .unwrap()
        .last()
        .unwrap()
        .contains("freshness=pd"));
    let mut wrong = SearchConfig::new("brave", Some(base.clone()));
    wrong.api_key = Some("nope".into());
    let r = tools(wrong)
        .await
        .call("web_search", json!({"query": "q"}))
        .await;
    assert!(r.err().contains("API key was refused"), "{}", r.text);
    assert!(!r.text.contains("nope"));

    std::env::set_var("TOOLYARD_TEST_TAVILY_KEY", "tvly-key");
    let mut tavily = SearchConfig::new("tavily", Some(base));
    tavily.api_key = Some("${TOOLYARD_TEST_TAVILY_KEY}".into());
    let t = tools(tavily).await;
    let r = t
        .call("web_search", json!({"query": "q", "count": 7}))
        .await;
    r.ok();
    let out = &r.raw["structuredContent"];
    assert_eq!(out["results"][0]["source"], "tavily");
    assert_eq!(out["results"][0]["score"], 0.9);
    assert!(out.get("next_cursor").is_none());
}

#[tokio::test]
async fn a_short_retry_after_is_waited_out_and_a_long_one_reported() {
    let f = Fake::default();
    *f.throttle.lock().unwrap() = (1, 1);
    let base = fake(f.clone()).await;
    let t = tools(SearchConfig::new("searxng", Some(base.clone()))).await;
    let started = std::time::Instant::now();
    let r = t.call("web_search", json!({"query": "q"})).await;
    r.ok();
    assert!(started.elapsed() >= std::time::Duration::from_millis(900));
    assert_eq!(f.calls.load(Ordering::Relaxed), 2);
    *f.throttle.lock().unwrap() = (5, 120);
    let r = t.call("web_search", json!({"query": "q"})).await;
    assert!(r.err().contains("retry after 120 s"), "{}", r.text);
}

#[tokio::test]
async fn search_settings_are_checked_at_start_and_keys_never_printed() {
    assert!(Search::new(&SearchConfig::new("searxng", None)).is_err());
    assert!(Search::new(&SearchConfig::new("bing", Some("http://x".into()))).is_err());
    assert!(Search::new(&SearchConfig::new("brave", None)).is_err());
    let mut unset = SearchConfig::new("brave", None);
    unset.api_key = Some("${TOOLYARD_TEST_UNSET_KEY_VAR}".into());
    let err = Search::new(&unset).unwrap_err().to_string();
    assert!(err.contains("TOOLYARD_TEST_UNSET_KEY_VAR"), "{err}");
    let mut set = SearchConfig::new("brave", None);
    set.api_key = Some("hunter2".into());
    assert!(!format!("{set:?}").contains("hunter2"));
    assert!(!format!("{:?}", Search::new(&set).unwrap()).contains("hunter2"));
}
