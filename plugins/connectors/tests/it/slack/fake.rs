//! A fake Slack Web API: `/api/{method}` taking GET query parameters, POST form bodies or
//! POST JSON bodies, `Authorization: Bearer`, the `{ok, error?, response_metadata:
//! {next_cursor}}` envelope on HTTP 200 (`ok: false` for Slack's errors), cursor pages with
//! a small page size so paging shows, and switches for the failures: 429 with
//! `Retry-After`, a Slack error code, 5xx, slow, huge and malformed answers. Every request is
//! logged (method and parameters) so tests count what the connector sent.

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The bot token the fake accepts.
pub(crate) const TOKEN: &str = "xoxb-fake-1234-secretvalue";
/// The user token the fake accepts (search needs one).
pub(crate) const USER_TOKEN: &str = "xoxp-fake-5678-uservalue";

/// How the fake misbehaves (until set back to `Normal`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Mode {
    Normal,
    /// The next `times` requests get 429 with this `Retry-After` (seconds).
    RateLimited {
        retry_after: u64,
        times: usize,
    },
    /// HTTP 200 `{ok: false, error: code}` (for `missing_scope`, with `needed`/`provided`).
    SlackError(&'static str),
    /// This HTTP status with a non-Slack body.
    Status(u16),
    /// Answer after this long.
    Slow(Duration),
    /// A valid answer of this many bytes.
    Huge(usize),
    /// `{"ok": tru` and nothing more.
    Malformed,
}

/// One request as the fake saw it.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    pub(crate) http: String,
    pub(crate) method: String,
    pub(crate) params: HashMap<String, String>,
    pub(crate) content_type: String,
}

#[derive(Clone)]
pub(crate) struct Fake {
    pub(crate) mode: Arc<Mutex<Mode>>,
    pub(crate) log: Arc<Mutex<Vec<Seen>>>,
    /// The most items one page holds, whatever `limit` asks.
    pub(crate) page_size: usize,
    channels: Arc<Vec<Value>>,
    users: Arc<Vec<Value>>,
    messages: Arc<HashMap<String, Vec<Value>>>,
}

fn channel(id: &str, name: &str, private: bool, members: u64) -> Value {
    json!({"id": id, "name": name, "is_channel": !private, "is_group": private, "is_private": private,
        "is_im": false, "is_mpim": false, "is_archived": false, "num_members": members,
        "topic": {"value": format!("{name} topic"), "creator": "U1", "last_set": 0},
        "purpose": {"value": format!("about {name}"), "creator": "U1", "last_set": 0}})
}

fn user(id: &str, name: &str, real: &str, display: &str, email: &str) -> Value {
    json!({"id": id, "team_id": "T1", "name": name, "deleted": false, "real_name": real,
        "is_bot": false, "profile": {"real_name": real, "display_name": display, "email": email,
        "title": "Engineer"}})
}

fn message(ts: &str, user: &str, text: &str) -> Value {
    json!({"type": "message", "user": user, "text": text, "ts": ts})
}

impl Fake {
    pub(crate) fn new() -> Fake {
        let channels = vec![
            channel("C001", "general", false, 40),
            channel("C002", "random", false, 35),
            channel("C003", "eng", false, 12),
            channel("C004", "ops", true, 5),
            channel("C005", "design", false, 8),
            channel("C006", "sales", false, 20),
            json!({"id": "D001", "is_im": true, "user": "U002", "is_user_deleted": false}),
            json!({"id": "D002", "is_im": true, "user": "U003", "is_user_deleted": false}),
        ];
        let users = vec![
            user("U001", "alice", "Alice Archer", "Ally", "alice@example.com"),
            user("U002", "bob", "Bob Baker", "bobby", "bob@example.com"),
            user("U003", "carol", "Carol Cole", "", "carol@example.com"),
            user("U004", "dave", "Dave Dune", "dd", "dave@example.org"),
            json!({"id": "U005", "name": "erin", "deleted": true, "profile": {"real_name": "Erin Gone"}}),
        ];
        let mut messages = HashMap::new();
        messages.insert(
            "C001".to_owned(),
            vec![
                message("1712345700.000300", "U002", "third, with a comma"),
                json!({"type": "message", "subtype": "channel_join", "user": "U004", "text": "<@U004> has joined the channel", "ts": "1712345690.000250"}),
                json!({"type": "message", "subtype": "bot_message", "bot_id": "B01", "username": "deploybot", "text": "deployed v2", "ts": "1712345680.000220"}),
                message("1712345600.000200", "U001", "second\nline two"),
                json!({"type": "message", "user": "U001", "text": "first", "ts": "1712345500.000100",
                    "thread_ts": "1712345500.000100", "reply_count": 2}),
            ],
        );
        messages.insert(
            "1712345500.000100".to_owned(),
            vec![
                json!({"type": "message", "user": "U001", "text": "first", "ts": "1712345500.000100", "thread_ts": "1712345500.000100"}),
                json!({"type": "message", "user": "U002", "text": "reply one", "ts": "1712345510.000110", "thread_ts": "1712345500.000100"}),
                json!({"type": "message", "user": "U003", "text": "reply two", "ts": "1712345520.000120", "thread_ts": "1712345500.000100"}),
            ],
        );
        messages.insert(
            "D001".to_owned(),
            vec![message("1712345800.000400", "U002", "hi from bob")],
        );
        Fake {
            mode: Arc::new(Mutex::new(Mode::Normal)),
            log: Arc::default(),
            page_size: 2,
            channels: Arc::new(channels),
            users: Arc::new(users),
            messages: Arc::new(messages),
        }
    }

    pub(crate) fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }

    /// Requests of one method (`"*"`: all).
    pub(crate) fn count(&self, method: &str) -> usize {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|s| method == "*" || s.method == method)
            .count()
    }

    pub(crate) fn last(&self, method: &str) -> Option<Seen> {
        self.log
            .lock()
            .unwrap()
            .iter()
            .rev()
            .find(|s| s.method == method)
            .cloned()
    }

    /// `/api` on a local port, serving until the test ends.
    pub(crate) async fn start(self) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = axum::Router::new()
            .route("/api/{method}", axum::routing::any(answer))
            .with_state(self);
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        format!("http://{addr}/api")
    }
}

fn ok(mut body: Value) -> Response {
    body["ok"] = json!(true);
    (
        StatusCode::OK,
        [("content-type", "application/json; charset=utf-8")],
        body.to_string(),
    )
        .into_response()
}

fn slack_error(code: &str) -> Response {
    let mut body = json!({"ok": false, "error": code});
    if code == "missing_scope" {
        body["needed"] = json!("channels:history");
        body["provided"] = json!("chat:write");
    }
    (
        StatusCode::OK,
        [("content-type", "application/json; charset=utf-8")],
        body.to_string(),
    )
        .into_response()
}

/// `a=b&c=d` with `+` and `%XX` decoded.
fn form(text: &str) -> HashMap<String, String> {
    let decode = |s: &str| {
        let bytes = s.replace('+', " ").into_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == b'%' && i + 2 < bytes.len() {
                if let Ok(b) = u8::from_str_radix(
                    std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("zz"),
                    16,
                ) {
                    out.push(b);
                    i += 3;
                    continue;
                }
            }
            out.push(bytes[i]);
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    };
    text.split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (decode(k), decode(v))
        })
        .collect()
}

/// A page of `items` from `cursor` (`off:N`), at most `min(limit, page_size)` long.
fn page(
    items: &[Value],
    p: &HashMap<String, String>,
    page_size: usize,
) -> Result<(Vec<Value>, String), Box<Response>> {
    let start = match p.get("cursor").filter(|c| !c.is_empty()) {
        None => 0,
        Some(c) => match c.strip_prefix("off:").and_then(|n| n.parse::<usize>().ok()) {
            Some(n) => n,
            None => return Err(Box::new(slack_error("invalid_cursor"))),
        },
    };
    let limit = p
        .get("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|l| *l > 0)
        .unwrap_or(100)
        .min(page_size);
    let end = (start + limit).min(items.len());
    let next = if end < items.len() {
        format!("off:{end}")
    } else {
        String::new()
    };
    Ok((items.get(start..end).unwrap_or(&[]).to_vec(), next))
}

async fn answer(
    State(fake): State<Fake>,
    Path(method): Path<String>,
    http: Method,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
    body: Bytes,
) -> Response {
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let mut p = query;
    if http == Method::POST {
        if content_type.starts_with("application/json") {
            match serde_json::from_slice::<Value>(&body) {
                Ok(Value::Object(o)) => {
                    for (k, v) in o {
                        let v = match v {
                            Value::String(s) => s,
                            other => other.to_string(),
                        };
                        p.insert(k, v);
                    }
                }
                _ => return slack_error("invalid_json"),
            }
        } else {
            p.extend(form(&String::from_utf8_lossy(&body)));
        }
    }
    fake.log.lock().unwrap().push(Seen {
        http: http.to_string(),
        method: method.clone(),
        params: p.clone(),
        content_type,
    });
    let mode = fake.mode.lock().unwrap().clone();
    match mode {
        Mode::Normal => {}
        Mode::RateLimited { retry_after, times } => {
            if times > 0 {
                *fake.mode.lock().unwrap() = if times == 1 {
                    Mode::Normal
                } else {
                    Mode::RateLimited {
                        retry_after,
                        times: times - 1,
                    }
                };
                return (
                    StatusCode::TOO_MANY_REQUESTS,
                    [("retry-after", retry_after.to_string())],
                    json!({"ok": false, "error": "ratelimited"}).to_string(),
                )
                    .into_response();
            }
        }
        Mode::SlackError(code) => return slack_error(code),
        Mode::Status(s) => {
            return (
                StatusCode::from_u16(s).unwrap(),
                "<html>upstream trouble</html>",
            )
                .into_response()
        }
        Mode::Slow(d) => tokio::time::sleep(d).await,
        Mode::Huge(n) => {
            let filler = "x".repeat(n);
            return ok(json!({"messages": [], "filler": filler}));
        }
        Mode::Malformed => {
            return (
                StatusCode::OK,
                [("content-type", "application/json")],
                "{\"ok\": tru",
            )
                .into_response()
        }
    }
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let form_token = p.get("token").map(String::as_str);
    let accepted = [TOKEN, USER_TOKEN];
    let by_header = auth
        .strip_prefix("Bearer ")
        .is_some_and(|t| accepted.contains(&t));
    if !by_header && !form_token.is_some_and(|t| accepted.contains(&t)) {
        return slack_error(if auth.is_empty() {
            "not_authed"
        } else {
            "invalid_auth"
        });
    }
    let get = |k: &str| p.get(k).cloned().unwrap_or_default();
    match method.as_str() {
        "auth.test" => ok(
            json!({"url": "https://acme.slack.com/", "team": "Acme", "user": "bot",
            "team_id": "T1", "user_id": "U0BOT", "bot_id": "B0BOT"}),
        ),
        "conversations.list" => {
            let types = p
                .get("types")
                .cloned()
                .unwrap_or_else(|| "public_channel".into());
            let wanted: Vec<&Value> = fake
                .channels
                .iter()
                .filter(|c| {
                    (types.contains("public_channel") && c["is_channel"] == true)
                        || (types.contains("private_channel") && c["is_private"] == true)
                        || (types.contains("im") && c["is_im"] == true)
                })
                .collect();
            let wanted: Vec<Value> = wanted.into_iter().cloned().collect();
            match page(&wanted, &p, fake.page_size) {
                Ok((items, next)) => {
                    ok(json!({"channels": items, "response_metadata": {"next_cursor": next}}))
                }
                Err(e) => *e,
            }
        }
        "conversations.info" => match fake
            .channels
            .iter()
            .find(|c| c["id"] == get("channel").as_str())
        {
            Some(c) => ok(json!({"channel": c})),
            None => slack_error("channel_not_found"),
        },
        "conversations.history" | "conversations.replies" => {
            let key = if method == "conversations.history" {
                get("channel")
            } else {
                get("ts")
            };
            if !fake
                .channels
                .iter()
                .any(|c| c["id"] == get("channel").as_str())
            {
                return slack_error("channel_not_found");
            }
            if get("channel") == "C006" {
                return slack_error("not_in_channel");
            }
            let Some(all) = fake.messages.get(&key) else {
                return slack_error(if method == "conversations.history" {
                    "channel_not_found"
                } else {
                    "thread_not_found"
                });
            };
            let ts = |m: &Value| {
                m["ts"]
                    .as_str()
                    .unwrap_or("0")
                    .parse::<f64>()
                    .unwrap_or(0.0)
            };
            let inclusive = get("inclusive") == "true";
            let oldest: Option<f64> = p.get("oldest").and_then(|o| o.parse().ok());
            let latest: Option<f64> = p.get("latest").and_then(|o| o.parse().ok());
            let within: Vec<Value> = all
                .iter()
                .filter(|m| {
                    let t = ts(m);
                    oldest.is_none_or(|o| if inclusive { t >= o } else { t > o })
                        && latest.is_none_or(|l| if inclusive { t <= l } else { t < l })
                })
                .cloned()
                .collect();
            match page(&within, &p, fake.page_size.max(3)) {
                Ok((items, next)) => ok(json!({"messages": items, "has_more": !next.is_empty(),
                    "pin_count": 0, "response_metadata": {"next_cursor": next}})),
                Err(e) => *e,
            }
        }
        "chat.postMessage" => {
            let channel = get("channel");
            if !fake.channels.iter().any(|c| c["id"] == channel.as_str()) {
                return slack_error("channel_not_found");
            }
            if get("text").is_empty() {
                return slack_error("no_text");
            }
            ok(
                json!({"channel": channel, "ts": "1712349999.000900", "message": {"type": "message",
                "user": "U0BOT", "bot_id": "B0BOT", "text": get("text"), "ts": "1712349999.000900",
                "thread_ts": p.get("thread_ts")}}),
            )
        }
        "reactions.add" | "reactions.remove" => {
            if get("name").is_empty() || get("timestamp").is_empty() {
                return slack_error("invalid_arguments");
            }
            ok(json!({}))
        }
        "users.list" => match page(&fake.users, &p, fake.page_size) {
            Ok((items, next)) => ok(
                json!({"members": items, "cache_ts": 0, "response_metadata": {"next_cursor": next}}),
            ),
            Err(e) => *e,
        },
        "users.info" => match fake.users.iter().find(|u| u["id"] == get("user").as_str()) {
            Some(u) => ok(json!({"user": u})),
            None => slack_error("user_not_found"),
        },
        "search.messages" => {
            let page_no: u64 = get("page").parse().unwrap_or(1);
            let hit = |ts: &str, text: &str| {
                json!({"type": "message", "user": "U001", "username": "alice",
                "ts": ts, "text": text, "channel": {"id": "C003", "name": "eng"},
                "permalink": format!("https://acme.slack.com/archives/C003/p{}?thread_ts=1712340000.000001", ts.replace('.', ""))})
            };
            let matches = if page_no == 1 {
                vec![
                    hit("1712345001.000001", "deploy failed"),
                    hit("1712345002.000002", "deploy fixed"),
                ]
            } else {
                vec![hit("1712345003.000003", "deploy again")]
            };
            ok(
                json!({"query": get("query"), "messages": {"total": 3, "matches": matches,
                "paging": {"count": 2, "total": 3, "page": page_no, "pages": 2},
                "pagination": {"total_count": 3, "page": page_no, "per_page": 2, "page_count": 2}}}),
            )
        }
        _ => slack_error("unknown_method"),
    }
}
