//! The Slack connector against a local fake of the Web API (`fake.rs`), through an MCP
//! server and an in-process client: korotovsky's tool names and CSV answers, lazy name
//! resolution (counted requests: none at start-up), the posting gate, unfurl flags, the
//! per-method budgets, and every failure path as a clear tool error without the token.

mod fake;

use crate::support::Tools;
use fake::{Fake, Mode, TOKEN, USER_TOKEN};
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use toolyard_connectors::slack::Slack;
use toolyard_connectors::{SecretSource, SlackConfig};

fn token(var: &str, value: &str) -> SecretSource {
    std::env::set_var(var, value);
    SecretSource::parse(&format!("${{{var}}}")).unwrap()
}

/// A config for the fake with the bot token and fast limits.
fn config(base: &str) -> SlackConfig {
    let mut c = SlackConfig::new(token("TOOLYARD_SLACK_IT_BOT", TOKEN));
    c.base_url = Some(base.to_owned());
    c.timeout_ms = 2_000;
    c.max_retry_wait_ms = 2_000;
    c.lookup_max_pages = 5;
    // The fake's pages are tiny and the tests quick: Slack's real budgets (Tier 2: 20 a
    // minute, Tier 3: 50) would make them wait; the budget tests set their own.
    for method in [
        "conversations.list",
        "conversations.info",
        "conversations.history",
        "conversations.replies",
        "users.list",
        "users.info",
        "chat.postMessage",
        "search.messages",
    ] {
        c.rate_limits
            .insert(method.into(), "6000/min burst 50".into());
    }
    c
}

fn user_config(base: &str) -> SlackConfig {
    let mut c = config(base);
    c.token = token("TOOLYARD_SLACK_IT_USER", USER_TOKEN);
    c
}

async fn started() -> (Fake, String) {
    let f = Fake::new();
    let base = f.clone().start().await;
    (f, base)
}

async fn tools(c: &SlackConfig) -> Tools {
    Tools::with(Slack::new(c).expect("the connector starts")).await
}

/// CSV rows (header first), split naively on lines outside quotes.
fn rows(csv: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    for ch in csv.chars() {
        if ch == '"' {
            quoted = !quoted;
        }
        if ch == '\n' && !quoted {
            out.push(std::mem::take(&mut cur));
        } else {
            cur.push(ch);
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

#[tokio::test]
async fn slack_start_up_and_listing_send_no_request() {
    let (f, base) = started().await;
    let mut c = config(&base);
    c.post_channels = vec!["#ops".into()];
    c.react_channels = vec!["*".into()];
    c.workspace = Some("acme".into());
    let t = tools(&c).await;
    assert_eq!(
        t.names().await,
        [
            "channels_list",
            "conversations_add_message",
            "conversations_history",
            "conversations_replies",
            "reactions_add",
            "reactions_remove",
            "users_search"
        ]
    );
    let listed = t.request("resources/list", json!({})).await.unwrap();
    let uris: Vec<&str> = listed["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["uri"].as_str().unwrap())
        .collect();
    assert_eq!(uris, ["slack://acme/channels", "slack://acme/users"]);
    assert_eq!(f.count("*"), 0, "start-up and listings sent requests");
    let def = t.definition("conversations_add_message").await;
    assert_eq!(def["annotations"]["readOnlyHint"], false);
    assert_eq!(def["annotations"]["idempotentHint"], false);
    let def = t.definition("conversations_history").await;
    assert_eq!(def["annotations"]["readOnlyHint"], true);
    let props = &def["inputSchema"]["properties"];
    for arg in ["channel_id", "include_activity_messages", "cursor", "limit"] {
        assert!(props.get(arg).is_some(), "{arg} missing: {props}");
    }
}

#[tokio::test]
async fn slack_writes_are_offered_only_where_allowed_and_never_read_only() {
    let (_f, base) = started().await;
    let c = config(&base);
    let names = tools(&c).await.names().await;
    assert!(
        !names
            .iter()
            .any(|n| n == "conversations_add_message" || n.starts_with("reactions_")),
        "{names:?}"
    );
    // A bot token cannot search: the tool is left out; a user token gets it.
    assert!(!names.iter().any(|n| n == "conversations_search_messages"));
    let mut c = user_config(&base);
    c.post_channels = vec!["*".into()];
    c.react_channels = vec!["C001".into()];
    c.read_only = true;
    let names = tools(&c).await.names().await;
    assert_eq!(
        names,
        [
            "channels_list",
            "conversations_history",
            "conversations_replies",
            "conversations_search_messages",
            "users_search"
        ]
    );
    let mut bad = config(&base);
    bad.post_channels = vec!["ops".into()];
    let e = Slack::new(&bad).unwrap_err().to_string();
    assert!(e.contains("post_channels") && e.contains("`ops`"), "{e}");
}

#[tokio::test]
async fn slack_history_is_the_anchors_csv_paged_by_the_last_rows_cursor() {
    let (f, base) = started().await;
    let t = tools(&config(&base)).await;
    let r = t
        .call(
            "conversations_history",
            json!({"channel_id": "C001", "limit": 50}),
        )
        .await;
    let text = r.ok().to_owned();
    let lines = rows(&text);
    assert_eq!(
        lines[0],
        "MsgID,UserID,UserName,RealName,Channel,ThreadTs,Text,Time,Cursor"
    );
    // Three a page; the channel_join activity message is left out, the bot message kept.
    assert_eq!(lines.len(), 3, "{text}");
    assert_eq!(
        lines[1],
        "1712345700.000300,U002,bob,Bob Baker,C001,,\"third, with a comma\",2024-04-05T19:35:00Z,"
    );
    assert_eq!(
        lines[2],
        "1712345680.000220,B01,deploybot,deploybot,C001,,deployed v2,2024-04-05T19:34:40Z,off:3"
    );
    assert_eq!(r.raw["structuredContent"]["next_cursor"], "off:3");
    assert_eq!(r.raw["structuredContent"]["content"], text.as_str());
    let seen = f.last("conversations.history").unwrap();
    assert_eq!(seen.http, "GET");
    assert_eq!(seen.params["limit"], "50");
    assert!(!seen.params.contains_key("oldest"));
    let next = t
        .call(
            "conversations_history",
            json!({"channel_id": "C001", "cursor": "off:3", "include_activity_messages": true}),
        )
        .await;
    let text = next.ok().to_owned();
    let lines = rows(&text);
    assert_eq!(lines.len(), 3, "{text}");
    assert!(
        lines[1]
            .starts_with("1712345600.000200,U001,alice,Alice Archer,C001,,\"second\nline two\""),
        "{text}"
    );
    assert!(
        lines[2].ends_with(",1712345500.000100,first,2024-04-05T19:31:40Z,"),
        "{text}"
    );
    assert!(next.raw["structuredContent"].get("next_cursor").is_none());
}

#[tokio::test]
async fn slack_history_limit_as_a_time_window_sends_oldest_and_latest() {
    let (f, base) = started().await;
    let t = tools(&config(&base)).await;
    t.call(
        "conversations_history",
        json!({"channel_id": "C001", "limit": "1d"}),
    )
    .await
    .ok();
    let seen = f.last("conversations.history").unwrap();
    assert_eq!(seen.params["limit"], "100");
    let oldest: u64 = seen.params["oldest"]
        .trim_end_matches(".000000")
        .parse()
        .unwrap();
    let latest: u64 = seen.params["latest"]
        .trim_end_matches(".000000")
        .parse()
        .unwrap();
    assert_eq!(oldest % 86_400, 0, "the window starts at midnight UTC");
    assert!(latest - oldest < 86_400 && latest >= oldest);
    let r = t
        .call(
            "conversations_history",
            json!({"channel_id": "C001", "limit": "soon"}),
        )
        .await;
    assert!(r.err().contains("invalid limit"), "{}", r.text);
}

#[tokio::test]
async fn slack_channel_names_are_resolved_on_first_use_stopping_at_the_page_found_and_cached() {
    let (f, base) = started().await;
    let t = tools(&config(&base)).await;
    assert_eq!(f.count("*"), 0);
    let r = t
        .call(
            "conversations_history",
            json!({"channel_id": "#ops", "limit": "5"}),
        )
        .await;
    // #ops (C004) is on the second page of two channels: two pages read, not three.
    assert!(
        r.err().contains("channel_not_found") || r.is_error,
        "{}",
        r.text
    );
    assert_eq!(f.count("conversations.list"), 2);
    assert_eq!(
        f.last("conversations.history").unwrap().params["channel"],
        "C004"
    );
    // Cached: #ops again and #eng (seen on the way) cost no lookup.
    t.call("conversations_history", json!({"channel_id": "#ops"}))
        .await;
    t.call("conversations_history", json!({"channel_id": "#eng"}))
        .await;
    assert_eq!(f.count("conversations.list"), 2);
    assert_eq!(
        f.last("conversations.history").unwrap().params["channel"],
        "C003"
    );
    let r = t
        .call("conversations_history", json!({"channel_id": "#nosuch"}))
        .await;
    assert!(r.err().contains("no channel #nosuch"), "{}", r.text);
    assert_eq!(
        f.count("conversations.list"),
        5,
        "a miss pages to the end once"
    );
    let r = t
        .call("conversations_history", json!({"channel_id": "gen eral"}))
        .await;
    assert!(r.err().contains("neither an ID"), "{}", r.text);
}

#[tokio::test]
async fn slack_at_user_resolves_to_the_dm_through_users_and_ims() {
    let (f, base) = started().await;
    let t = tools(&config(&base)).await;
    let r = t
        .call("conversations_history", json!({"channel_id": "@bob_dm"}))
        .await;
    assert!(r.ok().contains("hi from bob"), "{}", r.text);
    assert_eq!(
        f.last("conversations.history").unwrap().params["channel"],
        "D001"
    );
    assert_eq!(f.count("users.list"), 1, "bob is on the first page");
    assert_eq!(f.last("conversations.list").unwrap().params["types"], "im");
    let before = f.count("*");
    t.call("conversations_history", json!({"channel_id": "@bob"}))
        .await
        .ok();
    assert_eq!(
        f.count("*"),
        before + 1,
        "only the history call: the DM is cached"
    );
}

#[tokio::test]
async fn slack_replies_read_the_thread() {
    let (f, base) = started().await;
    let t = tools(&config(&base)).await;
    let r = t
        .call(
            "conversations_replies",
            json!({"channel_id": "C001", "thread_ts": "1712345500.000100"}),
        )
        .await;
    let lines = rows(r.ok());
    assert_eq!(lines.len(), 4, "{}", r.text);
    assert!(lines[3].contains("reply two"));
    assert_eq!(
        f.last("conversations.replies").unwrap().params["ts"],
        "1712345500.000100"
    );
    let r = t
        .call(
            "conversations_replies",
            json!({"channel_id": "C001", "thread_ts": "yesterday"}),
        )
        .await;
    assert!(r.err().contains("1234567890.123456"), "{}", r.text);
}

#[tokio::test]
async fn slack_non_marketplace_budget_caps_pages_at_15_and_refuses_a_second_call_within_the_minute()
{
    let (f, base) = started().await;
    let mut c = config(&base);
    c.history_budget = "non_marketplace".into();
    c.rate_limits.remove("conversations.history");
    let t = tools(&c).await;
    t.call(
        "conversations_history",
        json!({"channel_id": "C001", "limit": "50"}),
    )
    .await
    .ok();
    assert_eq!(
        f.last("conversations.history").unwrap().params["limit"],
        "15"
    );
    let started = Instant::now();
    let r = t
        .call("conversations_history", json!({"channel_id": "C001"}))
        .await;
    let e = r.err();
    assert!(
        e.contains("rate limited") && e.contains("retry in 60 s"),
        "{e}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "refused at once"
    );
    assert_eq!(
        f.count("conversations.history"),
        1,
        "the refused call sent nothing"
    );
}

#[tokio::test]
async fn slack_a_tiny_method_bucket_waits_out_a_short_wait() {
    let (f, base) = started().await;
    let mut c = config(&base);
    c.rate_limits
        .insert("conversations.history".into(), "300/min".into());
    let t = tools(&c).await;
    let started = Instant::now();
    for _ in 0..3 {
        t.call("conversations_history", json!({"channel_id": "C001"}))
            .await
            .ok();
    }
    // 5 a second, burst 1: the second and third wait ~200 ms each.
    assert!(
        started.elapsed() >= Duration::from_millis(350),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(f.count("conversations.history"), 3);
    let mut c = config(&base);
    c.rate_limits
        .insert("conversations.history".into(), "x".into());
    assert!(Slack::new(&c)
        .unwrap_err()
        .to_string()
        .contains("rate_limits"));
}

#[tokio::test]
async fn slack_posting_is_refused_outside_post_channels_before_anything_is_written() {
    let (f, base) = started().await;
    let mut c = config(&base);
    c.post_channels = vec!["C001".into()];
    let t = tools(&c).await;
    let r = t
        .call(
            "conversations_add_message",
            json!({"channel_id": "C002", "payload": "hello"}),
        )
        .await;
    assert!(
        r.err().contains("may not write to C002") && r.text.contains("C001"),
        "{}",
        r.text
    );
    assert_eq!(
        f.count("*"),
        0,
        "an ID outside an ID-only list costs no request"
    );
    let r = t
        .call(
            "conversations_add_message",
            json!({"channel_id": "#random", "payload": "hello"}),
        )
        .await;
    assert!(r.err().contains("may not write"), "{}", r.text);
    assert_eq!(f.count("chat.postMessage"), 0);

    let mut c = config(&base);
    c.post_channels = vec!["#ops".into(), "C001".into()];
    let t = tools(&c).await;
    let r = t
        .call(
            "conversations_add_message",
            json!({"channel_id": "C002", "payload": "hello"}),
        )
        .await;
    assert!(r.err().contains("may not write"), "{}", r.text);
    assert_eq!(f.count("chat.postMessage"), 0);
    let r = t
        .call(
            "conversations_add_message",
            json!({"channel_id": "#ops", "payload": "deploying", "thread_ts": "1712345500.000100"}),
        )
        .await;
    assert!(r.ok().contains("1712349999.000900,U0BOT"), "{}", r.text);
    let sent = f.last("chat.postMessage").unwrap();
    assert_eq!(sent.http, "POST");
    assert!(sent.content_type.starts_with("application/json"));
    assert_eq!(sent.params["channel"], "C004");
    assert_eq!(sent.params["thread_ts"], "1712345500.000100");
    // C004 by ID is #ops: allowed too.
    t.call(
        "conversations_add_message",
        json!({"channel_id": "C004", "payload": "again"}),
    )
    .await
    .ok();
    assert_eq!(f.count("chat.postMessage"), 2);
}

#[tokio::test]
async fn slack_unfurling_is_off_unless_every_link_is_allow_listed() {
    let (f, base) = started().await;
    let mut c = config(&base);
    c.post_channels = vec!["*".into()];
    c.unfurl_hosts = vec!["example.com".into()];
    let t = tools(&c).await;
    let cases = [
        ("notes at https://docs.example.com/runbook", "true"),
        ("leak https://attacker.test/?k=SECRET", "false"),
        (
            "[ok](https://example.com) and attacker.test/x?k=SECRET",
            "false",
        ),
        ("no links at all", "false"),
    ];
    for (payload, unfurl) in cases {
        t.call(
            "conversations_add_message",
            json!({"channel_id": "C001", "payload": payload}),
        )
        .await
        .ok();
        let sent = f.last("chat.postMessage").unwrap();
        assert_eq!(sent.params["unfurl_links"], unfurl, "{payload}");
        assert_eq!(sent.params["unfurl_media"], unfurl, "{payload}");
    }
    // Nothing listed: never unfurled.
    let mut c = config(&base);
    c.post_channels = vec!["*".into()];
    tools(&c)
        .await
        .call(
            "conversations_add_message",
            json!({"channel_id": "C001", "payload": "https://example.com"}),
        )
        .await
        .ok();
    assert_eq!(
        f.last("chat.postMessage").unwrap().params["unfurl_links"],
        "false"
    );
}

#[tokio::test]
async fn slack_markdown_is_sent_as_mrkdwn_and_plain_text_escaped() {
    let (f, base) = started().await;
    let mut c = config(&base);
    c.post_channels = vec!["*".into()];
    let t = tools(&c).await;
    t.call(
        "conversations_add_message",
        json!({"channel_id": "C001", "payload": "# Done\n**v2** is [out](https://e.test/r)"}),
    )
    .await
    .ok();
    let sent = f.last("chat.postMessage").unwrap();
    assert_eq!(
        sent.params["text"],
        "*Done*\n*v2* is <https://e.test/r|out>"
    );
    assert_eq!(sent.params["mrkdwn"], "true");
    t.call("conversations_add_message", json!({"channel_id": "C001", "payload": "a <b> & <!channel>", "content_type": "text/plain"}))
        .await
        .ok();
    let sent = f.last("chat.postMessage").unwrap();
    assert_eq!(sent.params["text"], "a &lt;b&gt; &amp; &lt;!channel&gt;");
    assert_eq!(sent.params["mrkdwn"], "false");
    let r = t
        .call(
            "conversations_add_message",
            json!({"channel_id": "C001", "payload": "x", "content_type": "text/html"}),
        )
        .await;
    assert!(r.err().contains("content_type"), "{}", r.text);
}

#[tokio::test]
async fn slack_reactions_resolve_the_channel_and_strip_colons() {
    let (f, base) = started().await;
    let mut c = config(&base);
    c.react_channels = vec!["#general".into()];
    let t = tools(&c).await;
    let r = t
        .call("reactions_add", json!({"channel_id": "#general", "timestamp": "1712345700.000300", "emoji": ":thumbsup:"}))
        .await;
    assert!(r.ok().contains(":thumbsup:"), "{}", r.text);
    let sent = f.last("reactions.add").unwrap();
    assert_eq!(
        (
            sent.params["channel"].as_str(),
            sent.params["name"].as_str()
        ),
        ("C001", "thumbsup")
    );
    t.call(
        "reactions_remove",
        json!({"channel_id": "C001", "timestamp": "1712345700.000300", "emoji": "thumbsup"}),
    )
    .await
    .ok();
    assert_eq!(f.count("reactions.remove"), 1);
    let r = t
        .call(
            "reactions_add",
            json!({"channel_id": "C002", "timestamp": "1712345700.000300", "emoji": "x"}),
        )
        .await;
    assert!(r.err().contains("react_channels"), "{}", r.text);
    assert_eq!(f.count("reactions.add"), 1);
}

#[tokio::test]
async fn slack_ok_false_codes_become_errors_with_hints_and_never_the_token() {
    let (f, base) = started().await;
    let t = tools(&config(&base)).await;
    let cases = [
        ("invalid_auth", "check `token`"),
        ("token_revoked", "revoked"),
        ("token_expired", "expired"),
        (
            "missing_scope",
            "needs `channels:history`, has `chat:write`",
        ),
        ("ratelimited", "retry"),
    ];
    for (code, hint) in cases {
        f.set(Mode::SlackError(code));
        let r = t
            .call("conversations_history", json!({"channel_id": "C001"}))
            .await;
        let e = r.err();
        assert!(
            e.contains(&format!("Slack refused conversations.history: {code}")) && e.contains(hint),
            "{e}"
        );
        assert!(!e.contains(TOKEN) && !e.contains("secretvalue"), "{e}");
    }
    f.set(Mode::Normal);
    let r = t
        .call("conversations_history", json!({"channel_id": "C006"}))
        .await;
    assert!(
        r.err().contains("not_in_channel") && r.text.contains("/invite"),
        "{}",
        r.text
    );
    let r = t
        .call("conversations_history", json!({"channel_id": "C999"}))
        .await;
    assert!(r.err().contains("channel_not_found"), "{}", r.text);
}

#[tokio::test]
async fn slack_a_refused_token_is_reported_without_its_value_anywhere() {
    let (_f, base) = started().await;
    let mut c = config(&base);
    c.token = token("TOOLYARD_SLACK_IT_WRONG", "xoxb-wrong-9999-topsecret");
    let slack = Slack::new(&c).unwrap();
    for printed in [format!("{slack:?}"), format!("{c:?}")] {
        assert!(!printed.contains("topsecret"), "{printed}");
    }
    let t = Tools::with(slack).await;
    let r = t
        .call("channels_list", json!({"channel_types": "public_channel"}))
        .await;
    assert!(r.err().contains("invalid_auth"), "{}", r.text);
    assert!(!r.text.contains("topsecret"));
    let listed = t
        .request("tools/list", json!({}))
        .await
        .unwrap()
        .to_string();
    assert!(!listed.contains("topsecret"));
    let mut c = config(&base);
    c.token = SecretSource::parse("${TOOLYARD_SLACK_IT_SURELY_UNSET}").unwrap();
    let e = Slack::new(&c).unwrap_err().to_string();
    assert!(
        e.contains("TOOLYARD_SLACK_IT_SURELY_UNSET} is not set"),
        "{e}"
    );
}

#[tokio::test]
async fn slack_a_short_retry_after_is_waited_out_and_a_long_one_reported() {
    let (f, base) = started().await;
    let t = tools(&config(&base)).await;
    f.set(Mode::RateLimited {
        retry_after: 1,
        times: 1,
    });
    let started = Instant::now();
    t.call("conversations_history", json!({"channel_id": "C001"}))
        .await
        .ok();
    assert!(started.elapsed() >= Duration::from_millis(900));
    assert_eq!(f.count("conversations.history"), 2);
    f.set(Mode::RateLimited {
        retry_after: 120,
        times: 1,
    });
    let started = Instant::now();
    let r = t
        .call("conversations_history", json!({"channel_id": "C001"}))
        .await;
    assert!(
        r.err().contains("rate limiting") && r.text.contains("retry after 120 s"),
        "{}",
        r.text
    );
    assert!(started.elapsed() < Duration::from_secs(1), "not waited");
}

#[tokio::test]
async fn slack_server_errors_slow_huge_and_malformed_answers_are_tool_errors() {
    let (f, base) = started().await;
    let mut c = config(&base);
    c.timeout_ms = 300;
    c.max_response_bytes = 64 * 1024;
    let t = tools(&c).await;
    let call = || t.call("conversations_history", json!({"channel_id": "C001"}));
    f.set(Mode::Status(500));
    let r = call().await;
    assert!(r.err().contains("Slack answered HTTP 500"), "{}", r.text);
    f.set(Mode::Status(503));
    let before = f.count("conversations.history");
    let r = call().await;
    assert!(r.err().contains("HTTP 503"), "{}", r.text);
    assert_eq!(
        f.count("conversations.history"),
        before + 2,
        "a read is retried once"
    );
    f.set(Mode::Slow(Duration::from_secs(2)));
    let started = Instant::now();
    let r = call().await;
    assert!(
        r.err().contains("did not answer within 300 ms"),
        "{}",
        r.text
    );
    assert!(started.elapsed() < Duration::from_millis(1_500));
    f.set(Mode::Huge(200_000));
    let r = call().await;
    assert!(r.err().contains("more than 65536 bytes"), "{}", r.text);
    f.set(Mode::Malformed);
    let r = call().await;
    assert!(r.err().contains("could not be read"), "{}", r.text);
    // A write that meets a 503 is not repeated.
    let mut c = config(&base);
    c.post_channels = vec!["C001".into()];
    let t = tools(&c).await;
    f.set(Mode::Status(503));
    let r = t
        .call(
            "conversations_add_message",
            json!({"channel_id": "C001", "payload": "once"}),
        )
        .await;
    assert!(r.err().contains("HTTP 503"), "{}", r.text);
    assert_eq!(f.count("chat.postMessage"), 1);
}

#[tokio::test]
async fn slack_search_builds_slack_modifiers_and_pages_by_cursor() {
    let (f, base) = started().await;
    let t = tools(&user_config(&base)).await;
    let r = t
        .call("conversations_search_messages", json!({"search_query": "deploy", "filter_in_channel": "C003",
            "filter_users_from": "@Ally", "filter_date_after": "2024-04-01", "filter_threads_only": true, "limit": 2}))
        .await;
    let text = r.ok().to_owned();
    let seen = f.last("search.messages").unwrap();
    assert_eq!(
        seen.params["query"],
        "deploy is:thread in:#eng from:<@U001> after:2024-04-01"
    );
    assert_eq!(seen.params["count"], "2");
    let lines = rows(&text);
    assert_eq!(lines.len(), 3, "{text}");
    assert_eq!(
        lines[1],
        "1712345001.000001,U001,alice,Alice Archer,#eng,1712340000.000001,deploy failed,2024-04-05T19:23:21Z,"
    );
    assert!(lines[2].ends_with(",page:2"), "{text}");
    let next = t
        .call(
            "conversations_search_messages",
            json!({"search_query": "deploy", "cursor": "page:2"}),
        )
        .await;
    assert!(next.ok().contains("deploy again"));
    assert!(next.raw["structuredContent"].get("next_cursor").is_none());
    assert_eq!(f.last("search.messages").unwrap().params["page"], "2");
    let r = t
        .call(
            "conversations_search_messages",
            json!({"search_query": "x", "cursor": "../admin"}),
        )
        .await;
    assert!(r.err().contains("cursor"), "{}", r.text);
    let r = t.call("conversations_search_messages", json!({})).await;
    assert!(r.err().contains("search_query"), "{}", r.text);
}

#[tokio::test]
async fn slack_search_by_permalink_reads_that_one_message() {
    let (f, base) = started().await;
    let t = tools(&user_config(&base)).await;
    let r = t
        .call(
            "conversations_search_messages",
            json!({"search_query": "https://acme.slack.com/archives/C001/p1712345600000200"}),
        )
        .await;
    let lines = rows(r.ok());
    assert_eq!(lines.len(), 2, "{}", r.text);
    assert!(lines[1].contains("second\nline two"));
    let seen = f.last("conversations.history").unwrap();
    assert_eq!(seen.params["oldest"], "1712345600.000200");
    assert_eq!(seen.params["inclusive"], "true");
    assert_eq!(f.count("search.messages"), 0);
}

#[tokio::test]
async fn slack_channels_list_and_users_search_answer_csv() {
    let (f, base) = started().await;
    let t = tools(&config(&base)).await;
    let r = t
        .call(
            "channels_list",
            json!({"channel_types": "public_channel,private_channel", "limit": 5}),
        )
        .await;
    let lines = rows(r.ok());
    assert_eq!(lines[0], "ID,Name,Topic,Purpose,MemberCount,Cursor");
    assert_eq!(lines[1], "C001,#general,general topic,about general,40,");
    assert_eq!(lines[2], "C002,#random,random topic,about random,35,off:2");
    assert_eq!(f.last("conversations.list").unwrap().params["limit"], "5");
    let r = t
        .call("users_search", json!({"query": "example.org"}))
        .await;
    let lines = rows(r.ok());
    assert_eq!(
        lines[0],
        "UserID,UserName,RealName,DisplayName,Email,Title,DMChannelID"
    );
    assert_eq!(
        lines[1..],
        ["U004,dave,Dave Dune,dd,dave@example.org,Engineer,".to_owned()]
    );
    let r = t.call("users_search", json!({"query": "Erin"})).await;
    assert_eq!(rows(r.ok()).len(), 1, "deleted users are left out");
    // Stops paging once the limit is met.
    let before = f.count("users.list");
    let r = t
        .call("users_search", json!({"query": "a", "limit": 1}))
        .await;
    assert_eq!(rows(r.ok()).len(), 2);
    assert_eq!(f.count("users.list"), before + 1);
}

#[tokio::test]
async fn slack_directory_resources_are_read_on_demand_and_capped() {
    let (f, base) = started().await;
    let mut c = config(&base);
    c.workspace = Some("acme".into());
    c.directory_max_rows = 3;
    let t = tools(&c).await;
    let read = t
        .request("resources/read", json!({"uri": "slack://acme/channels"}))
        .await
        .unwrap();
    let content = &read["contents"][0];
    assert_eq!(content["mimeType"], "text/csv");
    let lines = rows(content["text"].as_str().unwrap());
    assert_eq!(lines.len(), 4, "{lines:?}");
    assert!(lines[3].ends_with(",off:4"), "{lines:?}");
    assert_eq!(f.count("conversations.list"), 2);
    let read = t
        .request("resources/read", json!({"uri": "slack://acme/users"}))
        .await
        .unwrap();
    let lines = rows(read["contents"][0]["text"].as_str().unwrap());
    assert_eq!(lines[0], "UserID,UserName,RealName");
    assert_eq!(lines[1], "U001,alice,Alice Archer");

    // Without a configured workspace: templates, and any workspace name reads this one.
    let (f, base) = started().await;
    let t = tools(&config(&base)).await;
    let listed = t
        .request("resources/templates/list", json!({}))
        .await
        .unwrap();
    let templates: Vec<&Value> = listed["resourceTemplates"]
        .as_array()
        .unwrap()
        .iter()
        .collect();
    assert_eq!(templates.len(), 2);
    assert_eq!(templates[0]["uriTemplate"], "slack://{workspace}/channels");
    assert_eq!(f.count("*"), 0);
    let read = t
        .request("resources/read", json!({"uri": "slack://whatever/users"}))
        .await
        .unwrap();
    let lines = rows(read["contents"][0]["text"].as_str().unwrap());
    assert_eq!(lines.len(), 6, "{lines:?}");
    assert_eq!(f.count("users.list"), 3);
}

#[tokio::test]
async fn slack_a_panic_in_the_state_actor_fails_one_call_and_the_rebuilt_buckets_come_from_the_config(
) {
    let (f, base) = started().await;
    let mut c = config(&base);
    c.history_budget = "non_marketplace".into();
    c.rate_limits.remove("conversations.history");
    let slack = Slack::new(&c).expect("the connector starts");
    let t = Tools::with(slack.clone()).await;
    let history = json!({"channel_id": "C001"});
    t.call("conversations_history", history.clone()).await.ok();

    slack.panic_next_state_job();
    let hit = t.call("conversations_history", history.clone()).await;
    assert!(
        hit.err().contains("state failed during this call"),
        "{}",
        hit.text
    );
    assert_eq!(slack.state_restarts(), 1);
    assert_eq!(
        f.count("conversations.history"),
        1,
        "the failed call sent nothing"
    );

    // Rebuilt from the config: the non-Marketplace budget (1 a minute) again, starting full.
    t.call("conversations_history", history.clone()).await.ok();
    let e = t.call("conversations_history", history).await;
    assert!(e.err().contains("retry in 60 s"), "{}", e.text);
    assert_eq!(f.count("conversations.history"), 2);
}
