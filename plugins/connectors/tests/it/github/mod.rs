//! The GitHub connector against a local fake of GitHub's REST and GraphQL APIs (`fake.rs`),
//! through an MCP server and an in-process client, as a model would call it.

mod fake;

use crate::support::Tools;
use fake::Fake;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};
use toolyard::ServerBuilder;
use toolyard_connectors::github::Github;
use toolyard_connectors::{ConnectorsConfig, GithubConfig, SecretSource};

/// A `file:` secret holding `value` (no environment variable is changed by these tests).
fn secret(value: &str) -> SecretSource {
    static N: AtomicU32 = AtomicU32::new(0);
    let path = std::env::temp_dir().join(format!(
        "toolyard-github-secret-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(&path, value).unwrap();
    SecretSource::parse(&format!("file:{}", path.display())).unwrap()
}

const TOKEN: &str = "ghp_testtoken123";

fn config(base: &str) -> GithubConfig {
    let mut c = GithubConfig::with_token(secret(TOKEN));
    c.base_url = Some(base.to_owned());
    c
}

async fn tools(config: GithubConfig) -> Tools {
    Tools::with(Github::new(&config).expect("the connector starts")).await
}

async fn started() -> (Fake, String) {
    let fake = Fake::default();
    let base = fake::start(fake.clone()).await;
    (fake, base)
}

fn structured(reply: &crate::support::Reply) -> Value {
    reply.ok();
    reply.raw["structuredContent"].clone()
}

fn requests(fake: &Fake) -> Vec<String> {
    fake.requests.lock().unwrap().clone()
}

const READ_TOOLS: [&str; 15] = [
    "get_commit",
    "get_file_contents",
    "get_me",
    "issue_read",
    "list_branches",
    "list_commits",
    "list_issues",
    "list_pull_requests",
    "list_tags",
    "pull_request_read",
    "search_code",
    "search_issues",
    "search_pull_requests",
    "search_repositories",
    "search_users",
];

const WRITE_TOOLS: [&str; 5] = [
    "add_issue_comment",
    "create_branch",
    "create_or_update_file",
    "create_pull_request",
    "issue_write",
];

#[tokio::test]
async fn the_anchor_tool_names_are_listed_and_read_only_leaves_out_every_write_tool() {
    let (_fake, base) = started().await;
    let t = tools(config(&base)).await;
    let mut all: Vec<String> = READ_TOOLS
        .iter()
        .chain(WRITE_TOOLS.iter())
        .map(|s| (*s).to_owned())
        .collect();
    all.sort();
    assert_eq!(t.names().await, all);

    let mut ro = config(&base);
    ro.read_only = true;
    assert_eq!(tools(ro).await.names().await, READ_TOOLS.to_vec());

    // The `[connectors]`-wide switch does the same through the config file.
    let path = std::env::temp_dir().join(format!("toolyard-github-pem-{}", std::process::id()));
    std::fs::write(&path, TOKEN).unwrap();
    let text = format!(
        "[connectors]\nread_only = true\n[connectors.github]\nbase_url = \"{base}\"\ntoken = \"file:{}\"\n",
        path.display()
    );
    let builder = ConnectorsConfig::parse(&text)
        .unwrap()
        .install(ServerBuilder::new("gh", "0"))
        .unwrap();
    let t = Tools::start(builder).await;
    assert_eq!(t.names().await, READ_TOOLS.to_vec());
    let write = t
        .call(
            "issue_write",
            json!({"method": "create", "owner": "o", "repo": "r", "title": "x"}),
        )
        .await;
    assert!(write.err().contains("issue_write"), "{}", write.text);
}

#[tokio::test]
async fn schemas_use_the_anchors_argument_names_and_hints() {
    let (_fake, base) = started().await;
    let t = tools(config(&base)).await;
    let pr = t.definition("pull_request_read").await;
    let props = &pr["inputSchema"]["properties"];
    for name in ["method", "owner", "repo", "pullNumber", "page", "perPage"] {
        assert!(
            props.get(name).is_some(),
            "pull_request_read lacks {name}: {props}"
        );
    }
    assert_eq!(pr["annotations"]["readOnlyHint"], true);
    let li = t.definition("list_issues").await;
    for name in [
        "owner",
        "repo",
        "state",
        "labels",
        "orderBy",
        "direction",
        "since",
        "after",
        "perPage",
        "fields",
    ] {
        assert!(
            li["inputSchema"]["properties"].get(name).is_some(),
            "list_issues lacks {name}"
        );
    }
    let ir = t.definition("issue_read").await;
    assert!(ir.to_string().contains("get_sub_issues"), "{ir}");
    let w = t.definition("create_or_update_file").await;
    assert_eq!(w["annotations"]["readOnlyHint"], false);
    assert_eq!(w["annotations"]["destructiveHint"], true);
    let fc = t.definition("get_file_contents").await;
    assert!(fc["inputSchema"]["properties"].get("ref").is_some());
}

#[tokio::test]
async fn requests_carry_the_token_and_githubs_headers() {
    let (fake, base) = started().await;
    let t = tools(config(&base)).await;
    let me = structured(&t.call("get_me", json!({})).await);
    assert_eq!(me["login"], "me");
    assert_eq!(me["details"]["name"], "Me", "profile text is sanitised");
    assert_eq!(me["details"]["bio"], "hi");
    assert_eq!(fake.bearers.lock().unwrap().as_slice(), [TOKEN]);
}

#[tokio::test]
async fn a_revoked_token_is_a_clear_tool_error_that_never_shows_the_token() {
    let (_fake, base) = started().await;
    let mut c = config(&base);
    c.token = Some(secret("revoked-token"));
    let debug = format!("{c:?}");
    assert!(!debug.contains("revoked-token"), "{debug}");
    let connector = Github::new(&c).unwrap();
    assert!(!format!("{connector:?}").contains("revoked-token"));
    let t = Tools::with(connector).await;
    let r = t.call("get_me", json!({})).await;
    let e = r.err();
    assert_eq!(
        e,
        "GitHub refused the credentials (HTTP 401): Bad credentials"
    );
    assert!(!r.raw.to_string().contains("revoked-token"));
}

#[tokio::test]
async fn listings_page_by_the_link_headers_rel_next() {
    let (fake, base) = started().await;
    let t = tools(config(&base)).await;
    let first = structured(
        &t.call(
            "list_branches",
            json!({"owner": "o", "repo": "r", "perPage": 2}),
        )
        .await,
    );
    assert_eq!(first["items"].as_array().unwrap().len(), 2);
    assert_eq!(first["items"][0]["name"], "main");
    assert_eq!(first["next_page"], 2);
    let second = structured(
        &t.call(
            "list_branches",
            json!({"owner": "o", "repo": "r", "perPage": 2, "page": 2}),
        )
        .await,
    );
    assert_eq!(second["items"][0]["name"], "feature");
    assert!(second.get("next_page").is_none(), "{second}");
    assert_eq!(
        requests(&fake),
        [
            "GET /repos/o/r/branches?page=1&per_page=2",
            "GET /repos/o/r/branches?page=2&per_page=2"
        ]
    );
}

#[tokio::test]
async fn a_repeated_get_is_conditional_and_a_304_serves_the_cached_answer() {
    let (fake, base) = started().await;
    let t = tools(config(&base)).await;
    let args = json!({"owner": "o", "repo": "r"});
    let first = structured(&t.call("list_branches", args.clone()).await);
    let again = structured(&t.call("list_branches", args).await);
    assert_eq!(first, again);
    assert_eq!(first["next_page"], 2, "the cached Link header is kept too");
    assert_eq!(fake.not_modified.load(Ordering::SeqCst), 1);
    assert_eq!(requests(&fake).len(), 2);
}

#[tokio::test]
async fn a_used_up_rate_limit_stops_every_request_until_it_resets() {
    let (fake, base) = started().await;
    let t = tools(config(&base)).await;
    // This answer is served, and says the limit is used up.
    structured(
        &t.call("list_branches", json!({"owner": "o", "repo": "exhausted"}))
            .await,
    );
    let sent = requests(&fake).len();
    let r = t.call("get_me", json!({})).await;
    let e = r.err();
    assert!(e.starts_with("GitHub rate limited until "), "{e}");
    assert!(e.contains("no request was sent"), "{e}");
    assert_eq!(requests(&fake).len(), sent, "nothing reached GitHub");
}

#[tokio::test]
async fn the_primary_limits_403_is_reported_with_its_reset_time() {
    let (_fake, base) = started().await;
    let t = tools(config(&base)).await;
    let r = t
        .call("list_branches", json!({"owner": "o", "repo": "limited"}))
        .await;
    assert!(
        r.err().starts_with("GitHub rate limited until "),
        "{}",
        r.text
    );
    assert!(r.text.contains(" GMT (in "), "{}", r.text);
}

#[tokio::test]
async fn a_short_secondary_rate_limit_is_waited_out_and_a_long_one_reported() {
    let (fake, base) = started().await;
    let mut c = config(&base);
    c.max_retry_wait_ms = 1500;
    let t = tools(c).await;
    *fake.throttle.lock().unwrap() = (1, 1);
    let started = Instant::now();
    let ok = structured(
        &t.call("list_branches", json!({"owner": "o", "repo": "throttled"}))
            .await,
    );
    assert_eq!(ok["items"][0]["name"], "main");
    assert!(started.elapsed() >= Duration::from_millis(900));
    *fake.throttle.lock().unwrap() = (120, 1);
    let started = Instant::now();
    let r = t
        .call("list_branches", json!({"owner": "o", "repo": "throttled"}))
        .await;
    assert_eq!(
        r.err(),
        "GitHub is rate limiting these requests; retry after 120 s"
    );
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "a long wait is not waited"
    );
}

#[tokio::test]
async fn server_errors_slow_answers_huge_bodies_and_malformed_json_are_clear_tool_errors() {
    let (_fake, base) = started().await;
    let mut c = config(&base);
    c.timeout_ms = 300;
    c.max_body_bytes = 64 * 1024;
    let t = tools(c).await;
    let call = |repo: &'static str| t.call("list_branches", json!({"owner": "o", "repo": repo}));
    assert_eq!(
        call("flaky").await.err(),
        "GitHub answered HTTP 500: Server Error"
    );
    let started = Instant::now();
    assert_eq!(
        call("slow").await.err(),
        "GitHub did not answer within 300 ms"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(
        call("huge").await.err(),
        "GitHub sent more than 65536 bytes; ask for less (a smaller page or range)"
    );
    let broken = call("broken").await;
    assert!(
        broken
            .err()
            .starts_with("GitHub sent an answer that could not be read: expected JSON"),
        "{}",
        broken.text
    );
    let missing = t
        .call(
            "issue_read",
            json!({"method": "get", "owner": "o", "repo": "r", "issue_number": 404}),
        )
        .await;
    assert_eq!(missing.err(), "GitHub answered HTTP 404: Not Found");
}

fn filtered(base: &str) -> GithubConfig {
    let mut c = config(base);
    c.repos = vec!["o/*".into(), "org/*".into(), "!org/secret".into()];
    c
}

#[tokio::test]
async fn a_denied_repository_is_refused_before_any_request_is_sent() {
    let (fake, base) = started().await;
    let t = tools(filtered(&base)).await;
    for (tool, args) in [
        (
            "issue_read",
            json!({"method": "get", "owner": "org", "repo": "secret", "issue_number": 1}),
        ),
        (
            "get_file_contents",
            json!({"owner": "ORG", "repo": "Secret", "path": "README.md"}),
        ),
        ("list_issues", json!({"owner": "org", "repo": "secret"})),
        (
            "pull_request_read",
            json!({"method": "get_diff", "owner": "org", "repo": "secret", "pullNumber": 1}),
        ),
        (
            "create_or_update_file",
            json!({"owner": "org", "repo": "secret", "path": "x", "content": "y", "message": "m", "branch": "main"}),
        ),
        (
            "search_issues",
            json!({"query": "bug", "owner": "org", "repo": "secret"}),
        ),
        ("list_branches", json!({"owner": "elsewhere", "repo": "x"})),
    ] {
        let r = t.call(tool, args).await;
        assert!(
            r.err()
                .contains("is not among the repositories this server may access"),
            "{tool}: {}",
            r.text
        );
    }
    let read = t
        .request(
            "resources/read",
            json!({"uri": "repo://org/secret/contents/README.md"}),
        )
        .await;
    assert!(read.is_err(), "{read:?}");
    assert!(requests(&fake).is_empty(), "{:?}", requests(&fake));
    // And a path that would climb out of `contents/` never becomes a request either.
    let r = t
        .call(
            "get_file_contents",
            json!({"owner": "o", "repo": "r", "path": "../../org/secret"}),
        )
        .await;
    assert!(r.err().contains("`..`"), "{}", r.text);
    assert!(requests(&fake).is_empty());
}

#[tokio::test]
async fn searches_drop_results_from_denied_repositories() {
    let (fake, base) = started().await;
    let t = tools(filtered(&base)).await;
    let issues = structured(&t.call("search_issues", json!({"query": "leak"})).await);
    let repos: Vec<&str> = issues["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["repository"].as_str().unwrap())
        .collect();
    assert_eq!(repos, ["o/r", "org/public"]);
    assert_eq!(issues["next_page"], 2);
    let code = structured(
        &t.call("search_code", json!({"query": "BEGIN PRIVATE KEY"}))
            .await,
    );
    assert_eq!(code["items"].as_array().unwrap().len(), 1);
    assert_eq!(code["items"][0]["repository"], "o/r");
    let found = structured(
        &t.call("search_repositories", json!({"query": "secret"}))
            .await,
    );
    assert_eq!(found["items"].as_array().unwrap().len(), 1);
    assert_eq!(found["items"][0]["full_name"], "o/r");
    assert_eq!(
        found["items"][0]["description"], "d",
        "descriptions are sanitised"
    );
    assert!(!issues.to_string().contains("private data"));
    // The anchor's qualifiers: is:issue added once, repo: when owner and repo are given.
    let seen = requests(&fake);
    assert!(
        seen[0].starts_with("GET /search/issues?q=is%3Aissue+leak"),
        "{seen:?}"
    );
    structured(
        &t.call(
            "search_pull_requests",
            json!({"query": "fix", "owner": "o", "repo": "r"}),
        )
        .await,
    );
    assert!(
        requests(&fake)
            .last()
            .unwrap()
            .contains("q=repo%3Ao%2Fr+is%3Apr+fix"),
        "{:?}",
        requests(&fake)
    );
}

#[tokio::test]
async fn issue_text_is_sanitised_of_bidi_characters_and_hidden_html() {
    let (_fake, base) = started().await;
    let t = tools(config(&base)).await;
    let issue = structured(
        &t.call(
            "issue_read",
            json!({"method": "get", "owner": "o", "repo": "r", "issue_number": 7}),
        )
        .await,
    );
    let body = issue["body"].as_str().unwrap();
    assert_eq!(body, "Please fixgnp.exe the build.\nlogtrace");
    assert!(!body.contains("ignore previous instructions"));
    assert_eq!(issue["title"], "Build broken");
    assert_eq!(issue["user"]["login"], "reporter");
    assert_eq!(issue["labels"], json!(["bug"]));
    let comments = structured(
        &t.call(
            "issue_read",
            json!({"method": "get_comments", "owner": "o", "repo": "r", "issue_number": 7}),
        )
        .await,
    );
    assert_eq!(comments["items"][0]["body"], "[image: diagram] seethis");
    assert!(!comments.to_string().contains("evil.example"));
}

#[tokio::test]
async fn list_issues_pages_by_graphql_cursor_and_projects_fields() {
    let (fake, base) = started().await;
    let t = tools(config(&base)).await;
    let first = structured(
        &t.call(
            "list_issues",
            json!({"owner": "o", "repo": "r", "perPage": 2}),
        )
        .await,
    );
    assert_eq!(first["issues"].as_array().unwrap().len(), 2);
    assert_eq!(first["pageInfo"]["hasNextPage"], true);
    assert_eq!(first["pageInfo"]["endCursor"], "c2");
    assert_eq!(first["totalCount"], 3);
    assert_eq!(first["issues"][0]["user"]["login"], "reporter");
    assert!(
        !first.to_string().contains("ignore previous"),
        "GraphQL bodies are sanitised too"
    );
    let next = structured(
        &t.call(
            "list_issues",
            json!({"owner": "o", "repo": "r", "after": "c2", "state": "OPEN", "orderBy": "UPDATED_AT",
                "direction": "ASC", "fields": ["number", "title"]}),
        )
        .await,
    );
    assert_eq!(next["issues"], json!([{"number": 3, "title": "third"}]));
    assert_eq!(next["pageInfo"]["hasNextPage"], false);
    assert_eq!(requests(&fake), ["POST /graphql", "POST /graphql"]);
    let bad = t
        .call(
            "list_issues",
            json!({"owner": "o", "repo": "r", "fields": ["secret_field"]}),
        )
        .await;
    assert!(bad.err().contains("secret_field"), "{}", bad.text);
    let missing = t
        .call("list_issues", json!({"owner": "o", "repo": "missing"}))
        .await;
    assert_eq!(
        missing.err(),
        "GitHub GraphQL: Could not resolve to a Repository with the name 'o/missing'."
    );
}

#[tokio::test]
async fn file_contents_are_decoded_and_large_files_fetched_raw() {
    let (fake, base) = started().await;
    let t = tools(config(&base)).await;
    let file = structured(
        &t.call(
            "get_file_contents",
            json!({"owner": "o", "repo": "r", "path": "/README.md", "ref": "refs/heads/dev"}),
        )
        .await,
    );
    assert_eq!(file["encoding"], "utf-8");
    assert_eq!(
        file["content"], "# Hello\nsafetext\n",
        "invisible characters removed"
    );
    assert_eq!(file["sha"], "abc");
    let big = structured(
        &t.call(
            "get_file_contents",
            json!({"owner": "o", "repo": "r", "path": "big.bin"}),
        )
        .await,
    );
    assert_eq!(big["encoding"], "base64");
    assert_eq!(big["content"], "AAEC/w==");
    let dir = structured(
        &t.call(
            "get_file_contents",
            json!({"owner": "o", "repo": "r", "path": "src"}),
        )
        .await,
    );
    assert_eq!(dir["type"], "dir");
    assert_eq!(dir["entries"][1]["path"], "src/bin");
    let seen = requests(&fake);
    assert_eq!(
        seen[0],
        "GET /repos/o/r/contents/README.md?ref=refs%2Fheads%2Fdev"
    );
    assert_eq!(seen[1], "GET /repos/o/r/contents/big.bin");
    assert_eq!(
        seen[2], "GET /repos/o/r/contents/big.bin",
        "again, for the raw bytes"
    );
}

#[tokio::test]
async fn writes_send_githubs_request_bodies() {
    let (fake, base) = started().await;
    let t = tools(config(&base)).await;
    let put = structured(
        &t.call(
            "create_or_update_file",
            json!({"owner": "o", "repo": "r", "path": "docs/f.txt", "content": "hello", "message": "add f", "branch": "main", "sha": "old"}),
        )
        .await,
    );
    assert_eq!(put["commit"]["sha"], "c1");
    let created = structured(
        &t.call(
            "issue_write",
            json!({"method": "create", "owner": "o", "repo": "r", "title": "T", "labels": ["bug"]}),
        )
        .await,
    );
    assert_eq!(created["number"], 12);
    let bodies = fake.bodies.lock().unwrap().clone();
    assert_eq!(bodies[0].0, "PUT /repos/o/r/contents/docs/f.txt");
    assert_eq!(
        bodies[0].1,
        json!({"message": "add f", "content": "aGVsbG8=", "branch": "main", "sha": "old"})
    );
    assert_eq!(
        bodies[1],
        (
            "POST /repos/o/r/issues".to_owned(),
            json!({"title": "T", "labels": ["bug"]})
        )
    );
    let r = t
        .call(
            "issue_write",
            json!({"method": "update", "owner": "o", "repo": "r", "title": "T"}),
        )
        .await;
    assert!(r.err().contains("issue_number is required"), "{}", r.text);
    let r = t
        .call(
            "add_issue_comment",
            json!({"owner": "o", "repo": "r", "issue_number": 1}),
        )
        .await;
    assert!(r.err().contains("body or reaction"), "{}", r.text);
    assert_eq!(
        fake.bodies.lock().unwrap().len(),
        2,
        "refused calls sent nothing"
    );
}

#[tokio::test]
async fn repo_resources_read_files_and_issues() {
    let (fake, base) = started().await;
    let t = tools(config(&base)).await;
    let templates = t
        .request("resources/templates/list", json!({}))
        .await
        .unwrap();
    let uris: Vec<&str> = templates["resourceTemplates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["uriTemplate"].as_str().unwrap())
        .collect();
    assert!(
        uris.contains(&"repo://{owner}/{repo}/contents/{+path}"),
        "{uris:?}"
    );
    assert!(
        uris.contains(&"repo://{owner}/{repo}/issues/{issue_number}"),
        "{uris:?}"
    );
    let file = t
        .request(
            "resources/read",
            json!({"uri": "repo://o/r/refs/heads/dev/contents/README.md"}),
        )
        .await
        .unwrap();
    assert_eq!(file["contents"][0]["text"], "# Hello\nsafetext\n");
    assert_eq!(
        requests(&fake)[0],
        "GET /repos/o/r/contents/README.md?ref=refs%2Fheads%2Fdev"
    );
    let issue = t
        .request("resources/read", json!({"uri": "repo://o/r/issues/7"}))
        .await
        .unwrap();
    let text = issue["contents"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("# Build broken (#7)"), "{text}");
    assert!(
        !text.contains('\u{202E}') && !text.contains("ignore previous"),
        "{text}"
    );
}

#[tokio::test]
async fn an_app_exchanges_a_signed_jwt_for_an_installation_token_and_reuses_it() {
    let (fake, base) = started().await;
    let mut c = config(&base);
    c.token = None;
    c.app_id = Some(fake::APP_ID);
    c.installation_id = Some(fake::INSTALLATION_ID);
    c.private_key = Some(secret(fake::APP_PRIVATE_KEY));
    assert!(!format!("{c:?}").contains("PRIVATE KEY"));
    let t = tools(c.clone()).await;
    let (a, b, c3, d) = tokio::join!(
        t.call("get_me", json!({})),
        t.call("get_me", json!({})),
        t.call("get_me", json!({})),
        t.call("get_me", json!({}))
    );
    for r in [a, b, c3, d] {
        r.ok();
    }
    assert_eq!(
        fake.exchanges.load(Ordering::SeqCst),
        1,
        "one exchange for concurrent calls"
    );
    assert!(fake
        .bearers
        .lock()
        .unwrap()
        .iter()
        .all(|b| b == "ghs_installation1"));

    // A token that expires within the refresh margin is replaced before the next call.
    fake.token_lifetime.store(30, Ordering::SeqCst);
    let t = tools(c.clone()).await;
    t.call("get_me", json!({})).await.ok();
    t.call("get_me", json!({})).await.ok();
    assert_eq!(fake.exchanges.load(Ordering::SeqCst), 3);
    assert_eq!(
        fake.bearers.lock().unwrap().last().unwrap(),
        "ghs_installation3"
    );

    // The wrong App id: the fake refuses the JWT's `iss`, and the error says what to check.
    c.app_id = Some(8);
    let t = tools(c).await;
    let r = t.call("get_me", json!({})).await;
    assert!(
        r.err()
            .contains("check app_id, installation_id and private_key"),
        "{}",
        r.text
    );
}

#[tokio::test]
async fn credentials_are_refused_at_start_up_when_missing_literal_or_mixed() {
    let err =
        ConnectorsConfig::parse("[connectors.github]\ntoken = \"ghp_literal\"\n").unwrap_err();
    // (toml's error quotes the offending line itself; the refusal's own words do not.)
    assert!(err.contains("never as the value itself"), "{err}");
    let mut c = GithubConfig::with_token(secret(TOKEN));
    c.token = None;
    let e = Github::new(&c).unwrap_err().to_string();
    assert!(e.contains("credentials are needed"), "{e}");
    let mut c = GithubConfig::with_token(secret(TOKEN));
    c.app_id = Some(1);
    assert!(Github::new(&c)
        .unwrap_err()
        .to_string()
        .contains("not both"));
    let mut c = GithubConfig::with_token(secret(TOKEN));
    c.token = None;
    c.app_id = Some(1);
    c.installation_id = Some(2);
    c.private_key = Some(secret("not a pem"));
    let e = Github::new(&c).unwrap_err().to_string();
    assert!(
        e.contains("not an RSA private key") && !e.contains("not a pem"),
        "{e}"
    );
    let mut c = GithubConfig::with_token(secret(TOKEN));
    c.repos = vec!["no-slash".into()];
    assert!(Github::new(&c).unwrap_err().to_string().contains("`repos`"));
}

#[tokio::test]
async fn pull_requests_commits_and_branches_speak_the_rest_endpoints() {
    let (fake, base) = started().await;
    let t = tools(config(&base)).await;
    let list = structured(
        &t.call("list_pull_requests", json!({"owner": "o", "repo": "r", "state": "open", "sort": "long-running", "fields": ["number", "title"]})).await,
    );
    assert_eq!(
        list["items"],
        json!([{"number": 5, "title": "PR 5"}, {"number": 4, "title": "PR 4"}])
    );
    assert_eq!(list["next_page"], 2);
    let pr = structured(
        &t.call(
            "pull_request_read",
            json!({"method": "get", "owner": "o", "repo": "r", "pullNumber": 5}),
        )
        .await,
    );
    assert_eq!(pr["body"], "desc");
    assert_eq!(pr["head"]["ref"], "feature");
    assert_eq!(pr["requested_reviewers"], json!(["rev"]));
    let diff = structured(
        &t.call(
            "pull_request_read",
            json!({"method": "get_diff", "owner": "o", "repo": "r", "pullNumber": 5}),
        )
        .await,
    );
    assert_eq!(diff["diff"], "diff --git a/x b/x\n+if admin {\n");
    let status = structured(
        &t.call(
            "pull_request_read",
            json!({"method": "get_status", "owner": "o", "repo": "r", "pullNumber": 5}),
        )
        .await,
    );
    assert_eq!(status["state"], "success");
    assert_eq!(status["statuses"][0]["description"], "passed");
    let commits = structured(
        &t.call("list_commits", json!({"owner": "o", "repo": "r", "sha": "main", "author": "a", "fields": ["sha", "commit"]})).await,
    );
    assert_eq!(commits["items"][0]["sha"], "abc");
    assert_eq!(commits["items"][0]["commit"]["message"], "fix things");
    assert!(commits["items"][0].get("author").is_none());
    let one = structured(
        &t.call(
            "get_commit",
            json!({"owner": "o", "repo": "r", "sha": "abc"}),
        )
        .await,
    );
    assert_eq!(one["files"][0]["patch"], "+ok");
    let bare = structured(
        &t.call(
            "get_commit",
            json!({"owner": "o", "repo": "r", "sha": "abc", "include_diff": false}),
        )
        .await,
    );
    assert!(
        bare.get("files").is_none() && bare.get("stats").is_none(),
        "{bare}"
    );
    let branch = structured(
        &t.call(
            "create_branch",
            json!({"owner": "o", "repo": "r", "branch": "topic"}),
        )
        .await,
    );
    assert_eq!(
        branch,
        json!({"ref": "refs/heads/topic", "sha": "sha-main", "from": "main"})
    );
    let created = structured(
        &t.call(
            "create_pull_request",
            json!({"owner": "o", "repo": "r", "title": "T", "head": "topic", "base": "main", "draft": true,
                "reviewers": ["rev", "org/team-a"]}),
        )
        .await,
    );
    assert_eq!(created["number"], 6);
    assert_eq!(created["reviewers_requested"], true);
    let users = structured(&t.call("search_users", json!({"query": "octo"})).await);
    assert_eq!(users["items"][0]["login"], "octocat");
    let seen = requests(&fake);
    assert!(
        seen.contains(
            &"GET /repos/o/r/pulls?state=open&sort=long-running&page=1&per_page=30".to_owned()
        ),
        "{seen:?}"
    );
    assert!(
        seen.contains(&"GET /repos/o/r/commits/sha-head/status".to_owned()),
        "{seen:?}"
    );
    assert!(
        seen.contains(&"GET /repos/o/r/commits?sha=main&author=a&page=1&per_page=30".to_owned()),
        "{seen:?}"
    );
    assert!(
        seen.contains(&"GET /search/users?q=type%3Auser+octo&page=1&per_page=30".to_owned()),
        "{seen:?}"
    );
    let bodies = fake.bodies.lock().unwrap().clone();
    assert!(bodies.contains(&(
        "POST /repos/o/r/git/refs".to_owned(),
        json!({"ref": "refs/heads/topic", "sha": "sha-main"})
    )));
    assert!(bodies.contains(&(
        "POST /repos/o/r/pulls/6/requested_reviewers".to_owned(),
        json!({"reviewers": ["rev"], "team_reviewers": ["team-a"]})
    )));
}

#[tokio::test]
async fn a_panic_in_the_state_actor_fails_one_call_and_the_rebuilt_state_exchanges_a_new_token() {
    let (fake, base) = started().await;
    let mut c = config(&base);
    c.token = None;
    c.app_id = Some(fake::APP_ID);
    c.installation_id = Some(fake::INSTALLATION_ID);
    c.private_key = Some(secret(fake::APP_PRIVATE_KEY));
    let github = Github::new(&c).expect("the connector starts");
    let t = Tools::with(github.clone()).await;
    t.call("get_me", json!({})).await.ok();
    t.call("get_me", json!({})).await.ok();
    assert_eq!(fake.exchanges.load(Ordering::SeqCst), 1);

    github.panic_next_state_job();
    let hit = t.call("get_me", json!({})).await;
    assert!(
        hit.err().contains("state failed during this call"),
        "{}",
        hit.text
    );
    assert_eq!(github.state_restarts(), 1);

    // The token died with the failed state: the next call exchanges a new one, once, for
    // concurrent callers too.
    let (a, b, c3) = tokio::join!(
        t.call("get_me", json!({})),
        t.call("get_me", json!({})),
        t.call("get_me", json!({}))
    );
    for r in [a, b, c3] {
        r.ok();
    }
    assert_eq!(fake.exchanges.load(Ordering::SeqCst), 2);
    assert_eq!(
        fake.bearers.lock().unwrap().last().unwrap(),
        "ghs_installation2"
    );
}

/// A call whose request carries a trace context (`_meta.traceparent`) makes its API requests
/// with that `traceparent` header, so GitHub's side joins the caller's trace; a call without
/// one sends none.
#[tokio::test]
async fn api_requests_carry_the_calls_trace_context_and_baggage() {
    const TP: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let (fake, base) = started().await;
    let tools = tools(config(&base)).await;
    let call = |meta: Value| {
        let tools = &tools;
        async move {
            let answer = tools
                .request(
                    "tools/call",
                    json!({"name": "get_me", "arguments": {}, "_meta": meta}),
                )
                .await
                .expect("get_me answers");
            assert_ne!(answer["isError"], true, "{answer}");
        }
    };
    call(json!({"traceparent": TP, "tracestate": "vendor=1,other=2", "baggage": "tenant=acme"}))
        .await;
    // A `tracestate` that is no valid header value is left off; the call goes on.
    call(json!({"traceparent": TP, "tracestate": "vendor=1\nInjected: yes"})).await;
    // No `tracestate` without a well-formed `traceparent`; baggage goes on without one.
    call(json!({"traceparent": "00-nonsense", "tracestate": "vendor=1", "baggage": "k=v"})).await;
    call(json!({})).await;
    let seen =
        |tp: &str, ts: &str, baggage: &str| (tp.to_owned(), ts.to_owned(), baggage.to_owned());
    assert_eq!(
        *fake.trace_headers.lock().unwrap(),
        [
            seen(TP, "vendor=1,other=2", "tenant=acme"),
            seen(TP, "", ""),
            seen("", "", "k=v"),
            seen("", "", "")
        ]
    );
}
