//! The fetch connector against a local HTTP server on 127.0.0.1: pages, redirects (to
//! loopback, too), robots.txt variants, huge, slow and binary bodies. The SSRF tests aim at
//! loopback only, and check that the server was never reached.

use crate::support::Tools;
use axum::body::Body;
use axum::extract::State;
use axum::http::{header, StatusCode, Uri};
use axum::response::Response;
use serde_json::json;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use toolyard_connectors::fetch::Fetch;
use toolyard_connectors::FetchConfig;

#[derive(Debug, Clone, Copy)]
enum Robots {
    Missing,
    DenyPrivate,
    ServerError,
    Forbidden,
}

#[derive(Clone)]
struct Site {
    port: u16,
    robots: Robots,
    hits: Arc<Mutex<Vec<String>>>,
}

const PAGE: &str =
    "<!DOCTYPE html><html><head><title>T</title><style>p { color: red }</style></head>\
<body><h1>Title</h1><p>Hello <b>bold</b> and <a href=\"/next\">a link</a>.</p>\
<script>stealCookies()</script></body></html>";

fn reply(status: StatusCode, content_type: &str, body: impl Into<Body>) -> Response {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, content_type)
        .body(body.into())
        .unwrap()
}

fn redirect(to: String) -> Response {
    Response::builder()
        .status(StatusCode::FOUND)
        .header(header::LOCATION, to)
        .body(Body::empty())
        .unwrap()
}

async fn serve(State(site): State<Site>, uri: Uri) -> Response {
    let path = uri.path().to_owned();
    site.hits.lock().unwrap().push(path.clone());
    match path.as_str() {
        "/robots.txt" => match site.robots {
            Robots::Missing => reply(StatusCode::NOT_FOUND, "text/plain", "no"),
            Robots::DenyPrivate => reply(
                StatusCode::OK,
                "text/plain",
                "User-agent: *\nDisallow: /private\n",
            ),
            Robots::ServerError => reply(StatusCode::SERVICE_UNAVAILABLE, "text/plain", "down"),
            Robots::Forbidden => reply(StatusCode::FORBIDDEN, "text/plain", "no"),
        },
        "/page" => reply(StatusCode::OK, "text/html; charset=utf-8", PAGE),
        "/plain" => reply(StatusCode::OK, "text/plain", "just text"),
        "/binary" => reply(
            StatusCode::OK,
            "application/octet-stream",
            &b"\x00\x01\x02"[..],
        ),
        "/lying" => reply(StatusCode::OK, "text/plain", &b"%PDF-1.7\x00\x00binary"[..]),
        "/big" => reply(StatusCode::OK, "text/plain", "x".repeat(300_000)),
        "/slow" => {
            tokio::time::sleep(Duration::from_secs(5)).await;
            reply(StatusCode::OK, "text/plain", "late")
        }
        "/private/secret" => reply(StatusCode::OK, "text/plain", "SECRET"),
        "/redirect/local" => redirect(format!("http://127.0.0.1:{}/private/secret", site.port)),
        "/redirect/mapped" => redirect(format!(
            "http://[::ffff:127.0.0.1]:{}/private/secret",
            site.port
        )),
        "/redirect/relative" => redirect("/page".to_owned()),
        "/redirect/loop" => redirect("/redirect/loop".to_owned()),
        _ => reply(StatusCode::NOT_FOUND, "text/plain", "missing"),
    }
}

/// A site on 127.0.0.1 with the given robots.txt behaviour.
async fn site(robots: Robots) -> Site {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    let site = Site {
        port: addr.port(),
        robots,
        hits: Arc::default(),
    };
    let app = axum::Router::new().fallback(serve).with_state(site.clone());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    site
}

impl Site {
    fn url(&self, host: &str, path: &str) -> String {
        format!("http://{host}:{}{path}", self.port)
    }
    fn hit(&self, path: &str) -> bool {
        self.hits.lock().unwrap().iter().any(|p| p == path)
    }
    fn hits(&self) -> usize {
        self.hits.lock().unwrap().len()
    }
}

async fn tools(allow: &[&str], tweak: impl FnOnce(&mut FetchConfig)) -> Tools {
    let mut config = FetchConfig::new();
    config.allow_hosts = allow.iter().map(|h| (*h).to_owned()).collect();
    tweak(&mut config);
    Tools::with(Fetch::new(&config).expect("the connector starts")).await
}

#[tokio::test]
async fn fetch_turns_html_into_markdown_and_reads_on_with_start_index() {
    let s = site(Robots::Missing).await;
    let t = tools(&["127.0.0.1"], |_| {}).await;
    let def = t.definition("fetch").await;
    assert_eq!(def["annotations"]["openWorldHint"], true);
    let page = t
        .call("fetch", json!({"url": s.url("127.0.0.1", "/page")}))
        .await;
    let text = page.ok();
    assert!(
        text.starts_with(&format!("Contents of {}:\n", s.url("127.0.0.1", "/page"))),
        "{text}"
    );
    assert!(text.contains("# Title"), "{text}");
    assert!(text.contains("**bold**"), "{text}");
    assert!(text.contains("[a link](/next)"), "{text}");
    assert!(
        !text.contains("stealCookies") && !text.contains("color: red"),
        "{text}"
    );
    let first = t
        .call(
            "fetch",
            json!({"url": s.url("127.0.0.1", "/page"), "max_length": 10}),
        )
        .await;
    let first = first.ok();
    assert!(first.contains("<error>Content truncated. Call the fetch tool with a start_index of 10 to get more content.</error>"), "{first}");
    let rest = t
        .call(
            "fetch",
            json!({"url": s.url("127.0.0.1", "/page"), "start_index": 10}),
        )
        .await;
    assert!(!rest.ok().contains("Content truncated"));
    let past = t
        .call(
            "fetch",
            json!({"url": s.url("127.0.0.1", "/page"), "start_index": 100_000}),
        )
        .await;
    assert_eq!(past.ok(), "<error>No more content available.</error>");
    let bad = t
        .call(
            "fetch",
            json!({"url": s.url("127.0.0.1", "/page"), "max_length": 0}),
        )
        .await;
    bad.err();
}

#[tokio::test]
async fn raw_pages_and_other_text_come_back_as_they_are() {
    let s = site(Robots::Missing).await;
    let t = tools(&["127.0.0.1"], |_| {}).await;
    let raw = t
        .call(
            "fetch",
            json!({"url": s.url("127.0.0.1", "/page"), "raw": true, "max_length": 100_000}),
        )
        .await;
    let raw = raw.ok();
    assert!(
        raw.starts_with("Content type text/html; charset=utf-8 cannot be simplified"),
        "{raw}"
    );
    assert!(raw.contains("<h1>Title</h1>"));
    let plain = t
        .call("fetch", json!({"url": s.url("127.0.0.1", "/plain")}))
        .await;
    assert!(plain.ok().ends_with(":\njust text"), "{}", plain.text);
    for path in ["/binary", "/lying"] {
        let r = t
            .call("fetch", json!({"url": s.url("127.0.0.1", path)}))
            .await;
        assert!(r.err().contains("binary content"), "{path}: {}", r.text);
    }
    let missing = t
        .call("fetch", json!({"url": s.url("127.0.0.1", "/nope")}))
        .await;
    assert!(missing.err().contains("404"), "{}", missing.text);
}

#[tokio::test]
async fn loopback_in_every_notation_is_refused_before_any_connection() {
    let s = site(Robots::Missing).await;
    let t = tools(&[], |_| {}).await;
    let p = s.port;
    for url in [
        format!("http://127.0.0.1:{p}/page"),
        format!("http://127.1:{p}/page"),
        format!("http://0x7f.1:{p}/page"),
        format!("http://0x7f000001:{p}/page"),
        format!("http://2130706433:{p}/page"),
        format!("http://017700000001:{p}/page"),
        format!("http://[::1]:{p}/page"),
        format!("http://[::ffff:127.0.0.1]:{p}/page"),
        format!("http://[::ffff:7f00:1]:{p}/page"),
        format!("http://0.0.0.0:{p}/page"),
        "http://localhost/page".to_owned(),
        "http://LOCALHOST./page".to_owned(),
    ] {
        let r = t.call("fetch", json!({"url": url})).await;
        assert!(r.err().contains("Access denied"), "{url}: {}", r.text);
    }
    // A public-looking name on another port, and other schemes.
    let port = t
        .call(
            "fetch",
            json!({"url": format!("http://localhost:{p}/page")}),
        )
        .await;
    port.err();
    for url in [
        "file:///etc/passwd",
        "ftp://127.0.0.1/",
        "gopher://127.0.0.1/",
    ] {
        let r = t.call("fetch", json!({"url": url})).await;
        assert!(r.err().contains("only http and https"), "{url}: {}", r.text);
    }
    assert_eq!(
        s.hits(),
        0,
        "the server was reached: {:?}",
        s.hits.lock().unwrap()
    );
}

#[tokio::test]
async fn every_redirect_hop_is_checked_again() {
    let s = site(Robots::Missing).await;
    // `localhost` is allowed; the loopback literal a redirect names is not.
    let t = tools(&["localhost"], |_| {}).await;
    for path in ["/redirect/local", "/redirect/mapped"] {
        let r = t
            .call("fetch", json!({"url": s.url("localhost", path)}))
            .await;
        assert!(r.err().contains("Access denied"), "{path}: {}", r.text);
    }
    assert!(!s.hit("/private/secret"));
    let ok = t
        .call(
            "fetch",
            json!({"url": s.url("localhost", "/redirect/relative")}),
        )
        .await;
    assert!(ok.ok().contains("# Title"));
    let looped = t
        .call(
            "fetch",
            json!({"url": s.url("localhost", "/redirect/loop")}),
        )
        .await;
    assert!(
        looped.err().contains("more than 5 redirects"),
        "{}",
        looped.text
    );
}

#[tokio::test]
async fn robots_txt_is_honoured_and_an_unavailable_one_disallows() {
    let deny = site(Robots::DenyPrivate).await;
    let t = tools(&["127.0.0.1"], |_| {}).await;
    let r = t
        .call(
            "fetch",
            json!({"url": deny.url("127.0.0.1", "/private/secret")}),
        )
        .await;
    assert!(r.err().contains("robots.txt"), "{}", r.text);
    assert!(!deny.hit("/private/secret"));
    t.call("fetch", json!({"url": deny.url("127.0.0.1", "/page")}))
        .await
        .ok();
    for robots in [Robots::ServerError, Robots::Forbidden] {
        let s = site(robots).await;
        let r = t
            .call("fetch", json!({"url": s.url("127.0.0.1", "/page")}))
            .await;
        assert!(r.err().contains("robots.txt"), "{robots:?}: {}", r.text);
        assert!(!s.hit("/page"));
    }
    let ignoring = tools(&["127.0.0.1"], |c| c.ignore_robots_txt = true).await;
    let r = ignoring
        .call(
            "fetch",
            json!({"url": deny.url("127.0.0.1", "/private/secret")}),
        )
        .await;
    assert!(r.ok().contains("SECRET"));
}

#[tokio::test]
async fn bodies_are_capped_in_bytes_and_fetches_in_time() {
    let s = site(Robots::Missing).await;
    let t = tools(&["127.0.0.1"], |c| {
        c.max_bytes = 1000;
        c.timeout_ms = 500;
    })
    .await;
    let big = t
        .call(
            "fetch",
            json!({"url": s.url("127.0.0.1", "/big"), "max_length": 5000}),
        )
        .await;
    let text = big.ok();
    assert!(
        text.contains("[the response was cut at the limit of 1000 bytes]"),
        "{text}"
    );
    assert!(text.len() < 1400);
    let started = std::time::Instant::now();
    let slow = t
        .call("fetch", json!({"url": s.url("127.0.0.1", "/slow")}))
        .await;
    assert!(slow.err().contains("time"), "{}", slow.text);
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn the_fetch_prompt_puts_the_page_into_a_user_message_behind_the_same_guard() {
    let s = site(Robots::DenyPrivate).await;
    let t = tools(&["127.0.0.1"], |_| {}).await;
    let listed = t.request("prompts/list", json!({})).await.unwrap();
    let prompt = &listed["prompts"][0];
    assert_eq!(prompt["name"], "fetch");
    assert_eq!(prompt["arguments"][0]["name"], "url");
    assert_eq!(prompt["arguments"][0]["required"], true);
    let url = s.url("127.0.0.1", "/page");
    let got = t
        .request(
            "prompts/get",
            json!({"name": "fetch", "arguments": {"url": url}}),
        )
        .await
        .unwrap();
    assert_eq!(got["description"], format!("Contents of {url}"));
    assert_eq!(got["messages"][0]["role"], "user");
    let text = got["messages"][0]["content"]["text"].as_str().unwrap();
    assert!(text.starts_with("# Title"), "{text}");
    assert!(
        text.contains("**bold**") && !text.contains("stealCookies"),
        "{text}"
    );
    // robots.txt is honoured: a failure is a message saying why, not an error.
    let denied = t
        .request(
            "prompts/get",
            json!({"name": "fetch", "arguments": {"url": s.url("127.0.0.1", "/private/secret")}}),
        )
        .await
        .unwrap();
    let text = denied["messages"][0]["content"]["text"].as_str().unwrap();
    assert!(text.contains("robots.txt"), "{text}");
    assert!(!s.hit("/private/secret"));
    // Without the allow-list, loopback is refused before any connection.
    let guarded = tools(&[], |_| {}).await;
    let before = s.hits();
    let refused = guarded
        .request(
            "prompts/get",
            json!({"name": "fetch", "arguments": {"url": url}}),
        )
        .await
        .unwrap();
    assert!(refused["description"]
        .as_str()
        .unwrap()
        .starts_with("Failed to fetch"));
    let text = refused["messages"][0]["content"]["text"].as_str().unwrap();
    assert!(!text.contains("Title"), "{text}");
    assert_eq!(s.hits(), before, "the guarded prompt reached the server");
    // No url: invalid params.
    let missing = t
        .request("prompts/get", json!({"name": "fetch", "arguments": {}}))
        .await
        .unwrap_err();
    assert_eq!(missing["code"], -32602, "{missing}");
}
