//! Our binary as an OAuth resource server over HTTP, spoken to with bearer tokens signed with
//! the library tests' RSA key: who each bearer is, what it is listed and what its calls are
//! answered, and a config file's items for an audience of principals.

use crate::client_interop::TempDir;
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use toolyard_testkit::{repo, ServerProcess};

/// The issuer and resource (the tokens' audience) of [`oauth_server`].
const OAUTH_ISSUER: &str = "https://issuer.example";
const OAUTH_RESOURCE: &str = "https://gateway.example/mcp";

/// `serve` over HTTP (with `more`) taking bearer tokens signed with the OAuth tests' RSA
/// key ([`bearer_for`]).
pub(crate) fn oauth_server(more: &[&str]) -> ServerProcess {
    let jwks = repo().join("runtime/tests/data/oauth-jwks.json");
    let jwks = jwks.to_string_lossy();
    let args = [
        &["serve", "--oauth-resource", OAUTH_RESOURCE][..],
        &["--oauth-issuer", OAUTH_ISSUER, "--oauth-jwks", &jwks],
        more,
    ]
    .concat();
    ServerProcess::start(env!("CARGO_BIN_EXE_toolyard"), &args)
}

/// A bearer token for `sub` that [`oauth_server`] takes.
pub(crate) fn bearer_for(sub: &str) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let claims = json!({
        "iss": OAUTH_ISSUER, "aud": OAUTH_RESOURCE, "sub": sub,
        "iat": now, "exp": now + 300,
    });
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256);
    header.kid = Some("test-rsa".into());
    let pem = std::fs::read(repo().join("runtime/tests/data/oauth-rsa.pem")).unwrap();
    let key = jsonwebtoken::EncodingKey::from_rsa_pem(&pem).unwrap();
    jsonwebtoken::encode(&header, &claims, &key).unwrap()
}

/// A 2026-07-28 `tools/call` of `tool` over HTTP at `url`, with `bearer`: the status and
/// the JSON-RPC response.
pub(crate) fn call_over_http(url: &str, tool: &str, bearer: Option<&str>) -> (u16, Value) {
    let params = json!({"name": tool, "arguments": {}});
    request_over_http(url, "tools/call", Some(tool), params, bearer)
}

/// The tool names a 2026-07-28 `tools/list` over HTTP at `url` with `bearer` answers.
pub(crate) fn listed_over_http(url: &str, bearer: &str) -> Vec<String> {
    let (status, answer) = request_over_http(url, "tools/list", None, json!({}), Some(bearer));
    assert_eq!(status, 200, "{answer}");
    let tools = answer["result"]["tools"].as_array();
    let names = tools
        .unwrap_or_else(|| panic!("no listing: {answer}"))
        .iter();
    names
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect()
}

/// A 2026-07-28 request (`params` with the protocol's `_meta` added) over HTTP at `url`,
/// with `bearer`: the status and the JSON-RPC response.
pub(crate) fn request_over_http(
    url: &str,
    method: &str,
    name: Option<&str>,
    mut params: Value,
    bearer: Option<&str>,
) -> (u16, Value) {
    params["_meta"] = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                             "io.modelcontextprotocol/clientCapabilities": {}});
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut request = reqwest::Client::new()
            .post(url)
            .header("Accept", "application/json, text/event-stream")
            .header("Content-Type", "application/json")
            .header("MCP-Protocol-Version", "2026-07-28")
            .header("Mcp-Method", method);
        if let Some(name) = name {
            request = request.header("Mcp-Name", name);
        }
        if let Some(token) = bearer {
            request = request.bearer_auth(token);
        }
        let r = request.body(body.to_string()).send().await.unwrap();
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        let last = text
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .next_back()
            .map_or(text.as_str(), str::trim);
        (status, serde_json::from_str(last).unwrap_or(Value::Null))
    })
}

/// [`call_over_http`] until it is answered with a result (a gateway lists its workers'
/// tools once it has read the catalog): the result.
pub(crate) fn answered_over_http(url: &str, tool: &str, bearer: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, answer) = call_over_http(url, tool, Some(bearer));
        assert_eq!(status, 200, "{answer}");
        if answer["result"].is_object() {
            return answer["result"].clone();
        }
        assert!(Instant::now() < deadline, "never answered: {answer}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `serve --no-demo --config` behind OAuth ([`oauth_server`]) with `config` written to
/// `dir`: the process and its MCP URL.
fn serving(dir: &TempDir, config: &str) -> (ServerProcess, String) {
    let file = dir.path().join("config.toml");
    std::fs::write(&file, config).unwrap();
    let server = oauth_server(&["--no-demo", "--config", &file.to_string_lossy()]);
    let url = format!("{}/mcp", server.base_url());
    (server, url)
}

/// A config file's `audience = [..]` through the binary: each item is listed and served to
/// its principals alone (the token's subject), and is to every other bearer an unknown
/// name, as docs/semantics.md "Who may see what" says.
#[test]
fn a_config_files_items_for_an_audience_are_listed_and_served_to_it_alone() {
    let dir = TempDir::new("audience");
    let (_server, url) = serving(
        &dir,
        r#"
[[tools]]
name = "lobby"
description = "For everyone"
text = "welcome"

[[tools]]
name = "vault"
description = "For alice and bob"
text = "the vault"
audience = ["alice@example.com", "bob@example.com"]

[[prompts]]
name = "briefing"
template = "Brief {who}."
audience = ["alice@example.com"]

[[resources]]
uri = "notes://alice"
name = "alice's notes"
text = "hers"
audience = ["alice@example.com"]
"#,
    );
    let (alice, bob, carol) = (
        bearer_for("alice@example.com"),
        bearer_for("bob@example.com"),
        bearer_for("carol@example.com"),
    );
    assert_eq!(listed_over_http(&url, &alice), ["lobby", "vault"]);
    assert_eq!(listed_over_http(&url, &bob), ["lobby", "vault"]);
    assert_eq!(listed_over_http(&url, &carol), ["lobby"]);
    assert_eq!(
        answered_over_http(&url, "vault", &bob)["content"][0]["text"],
        "the vault"
    );
    let (status, answer) = call_over_http(&url, "vault", Some(&carol));
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["error"]["message"], "Unknown tool: vault",
        "{answer}"
    );

    let get = json!({"name": "briefing", "arguments": {"who": "the team"}});
    let (_, got) = request_over_http(
        &url,
        "prompts/get",
        Some("briefing"),
        get.clone(),
        Some(&alice),
    );
    assert_eq!(
        got["result"]["messages"][0]["content"]["text"],
        "Brief the team."
    );
    let (_, got) = request_over_http(&url, "prompts/get", Some("briefing"), get, Some(&bob));
    assert_eq!(got["error"]["message"], "Unknown prompt: briefing", "{got}");

    let read = json!({"uri": "notes://alice"});
    let (_, read_by_alice) = request_over_http(
        &url,
        "resources/read",
        Some("notes://alice"),
        read.clone(),
        Some(&alice),
    );
    assert_eq!(read_by_alice["result"]["contents"][0]["text"], "hers");
    let (_, listed) = request_over_http(&url, "resources/list", None, json!({}), Some(&bob));
    assert_eq!(listed["result"]["resources"], json!([]), "{listed}");
    let (_, read_by_bob) = request_over_http(
        &url,
        "resources/read",
        Some("notes://alice"),
        read,
        Some(&bob),
    );
    let message = &read_by_bob["error"]["message"];
    assert_eq!(
        message, "Resource not found: notes://alice",
        "{read_by_bob}"
    );
}

/// A config file may give one tool name a definition for each audience (two `[[tools]]` of
/// one name, each with its `audience`): through the binary's OAuth, each bearer is listed
/// and answered its own, and a bearer neither admits finds no such tool.
#[test]
fn a_config_file_may_give_a_tool_a_definition_for_each_audience() {
    let dir = TempDir::new("alternatives");
    let (_server, url) = serving(
        &dir,
        r#"
[[tools]]
name = "motd"
description = "Alice's team's message"
text = "ship on friday"
audience = ["alice@example.com"]

[[tools]]
name = "motd"
description = "Bob's team's message"
text = "freeze until monday"
audience = ["bob@example.com"]
"#,
    );
    for (who, says) in [
        ("alice@example.com", "ship on friday"),
        ("bob@example.com", "freeze until monday"),
    ] {
        let bearer = bearer_for(who);
        assert_eq!(listed_over_http(&url, &bearer), ["motd"], "{who}");
        assert_eq!(
            answered_over_http(&url, "motd", &bearer)["content"][0]["text"],
            says
        );
    }
    let carol = bearer_for("carol@example.com");
    assert!(listed_over_http(&url, &carol).is_empty());
    let (_, answer) = call_over_http(&url, "motd", Some(&carol));
    assert_eq!(answer["error"]["message"], "Unknown tool: motd", "{answer}");
}

/// A gateway source's `audience`: all it offers (tools, prompts, resources) is listed and
/// served to those principals alone, through the gateway's OAuth; to another bearer the
/// source's names are unknown, and the gateway's own items stay everyone's.
#[test]
fn a_sources_audience_keeps_what_it_offers_to_those_principals() {
    let dir = TempDir::new("source-audience");
    let (_server, url) = serving(
        &dir,
        &format!(
            "[[tools]]\nname = \"lobby\"\ndescription = \"For everyone\"\ntext = \"welcome\"\n\n\
             [[sources]]\nname = \"ops\"\ncommand = {:?}\nargs = [\"serve\", \"--stdio\"]\n\
             audience = [\"alice@example.com\"]\n",
            env!("CARGO_BIN_EXE_toolyard")
        ),
    );
    let (alice, bob) = (
        bearer_for("alice@example.com"),
        bearer_for("bob@example.com"),
    );
    let echo = json!({"name": "ops__echo", "arguments": {"message": "hi"}});
    let deadline = Instant::now() + Duration::from_secs(30);
    let answered = loop {
        let (_, answer) = request_over_http(
            &url,
            "tools/call",
            Some("ops__echo"),
            echo.clone(),
            Some(&alice),
        );
        if answer["result"].is_object() {
            break answer;
        }
        assert!(Instant::now() < deadline, "never answered: {answer}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(answered["result"]["content"][0]["text"], "hi", "{answered}");
    let hers = listed_over_http(&url, &alice);
    assert!(
        hers.contains(&"lobby".to_owned()) && hers.contains(&"ops__echo".to_owned()),
        "{hers:?}"
    );
    assert_eq!(listed_over_http(&url, &bob), ["lobby"]);
    let (_, refused) = request_over_http(&url, "tools/call", Some("ops__echo"), echo, Some(&bob));
    assert_eq!(
        refused["error"]["message"], "Unknown tool: ops__echo",
        "{refused}"
    );
    let (_, prompts) = request_over_http(&url, "prompts/list", None, json!({}), Some(&bob));
    assert_eq!(prompts["result"]["prompts"], json!([]), "{prompts}");
    let (_, prompts) = request_over_http(&url, "prompts/list", None, json!({}), Some(&alice));
    let theirs = prompts["result"]["prompts"].as_array().map_or(0, Vec::len);
    assert!(theirs > 0, "{prompts}");
}

/// `[connectors] audience`: a connector's tools are listed and served to its principals
/// alone (SQL here, for alice), while a connector it does not name (the filesystem) stays
/// everyone's; a name that is no connector is refused at start.
#[cfg(feature = "connectors")]
#[test]
fn a_connectors_audience_keeps_its_tools_to_those_principals() {
    let dir = TempDir::new("connector-audience");
    let root = dir.path().join("files");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("a.txt"), "a").unwrap();
    let (_server, url) = serving(
        &dir,
        &format!(
            "[connectors]\naudience = {{ sql = [\"alice@example.com\"] }}\n\n\
             [connectors.filesystem]\nroots = [{:?}]\nread_only = true\n\n\
             [connectors.sql]\nurl = \"sqlite::memory:\"\n",
            root.display().to_string()
        ),
    );
    let (alice, bob) = (
        bearer_for("alice@example.com"),
        bearer_for("bob@example.com"),
    );
    let hers = listed_over_http(&url, &alice);
    let his = listed_over_http(&url, &bob);
    for tool in ["query", "list_tables"] {
        assert!(hers.contains(&tool.to_owned()), "{hers:?}");
        assert!(!his.contains(&tool.to_owned()), "{his:?}");
    }
    assert!(his.contains(&"read_file".to_owned()), "{his:?}");
    assert!(hers.contains(&"read_file".to_owned()), "{hers:?}");
    let query = json!({"name": "query", "arguments": {"sql": "select 1 as one"}});
    let (_, answer) = request_over_http(
        &url,
        "tools/call",
        Some("query"),
        query.clone(),
        Some(&alice),
    );
    assert!(answer["result"].is_object(), "{answer}");
    let (_, refused) = request_over_http(&url, "tools/call", Some("query"), query, Some(&bob));
    assert_eq!(
        refused["error"]["message"], "Unknown tool: query",
        "{refused}"
    );

    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[connectors]\naudience = { sqll = [\"alice\"] }\n").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolyard"))
        .args(["serve", "--stdio", "--no-demo", "--config"])
        .arg(&bad)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("`sqll` is no connector"), "{said}");
}
