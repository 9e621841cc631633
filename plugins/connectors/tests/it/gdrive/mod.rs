//! The Google Drive connector against a local fake of Drive v3 and Google's token endpoint
//! (`fake.rs`), through an MCP server and an in-process client, as a model would call it.

mod fake;

use crate::support::{TempDir, Tools};
use fake::{Fake, FakeFile, Fault, CLIENT_ID, CLIENT_SECRET, REFRESH_TOKEN, SA_EMAIL};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use toolyard::ServerBuilder;
use toolyard_connectors::gdrive::Gdrive;
use toolyard_connectors::{GdriveConfig, SecretSource};

const DOC: &str = "application/vnd.google-apps.document";
const SHEET: &str = "application/vnd.google-apps.spreadsheet";
const SLIDES: &str = "application/vnd.google-apps.presentation";

/// A fake with a few files, and where it listens.
struct Drive {
    fake: Fake,
    base: String,
    dir: TempDir,
}

impl Drive {
    async fn start() -> Drive {
        let fake = Fake::default();
        let base = fake::start(fake.clone()).await;
        fake.add(
            FakeFile::new("doc1", "Plan", DOC)
                .export("text/markdown", "# Plan\n\nShip it.")
                .export("text/plain", "Plan\n\nShip it."),
        );
        fake.add(FakeFile::new("sheet1", "Budget", SHEET).export("text/csv", "a,b\n1,2\n"));
        fake.add(FakeFile::new("slides1", "Deck", SLIDES).export("text/plain", "Slide 1\nHello"));
        fake.add(FakeFile::new("notes", "notes.txt", "text/plain").content("hello notes"));
        Drive {
            fake,
            base,
            dir: TempDir::new("gdrive"),
        }
    }

    /// A secret in a file.
    fn secret(&self, name: &str, value: &str) -> SecretSource {
        let path = self.dir.path().join(name);
        std::fs::write(&path, value).unwrap();
        SecretSource::File(path)
    }

    /// Settings for the fake with a refresh-token credential and short limits.
    fn config(&self) -> GdriveConfig {
        let mut c = GdriveConfig::new();
        c.base_url = Some(self.base.clone());
        c.token_url = Some(format!("{}/token", self.base));
        c.client_id = Some(CLIENT_ID.into());
        c.client_secret = Some(self.secret("client_secret", CLIENT_SECRET));
        c.refresh_token = Some(self.secret("refresh_token", REFRESH_TOKEN));
        c.timeout_ms = 2_000;
        c.max_retry_wait_ms = 1_500;
        c
    }

    async fn tools(&self) -> Tools {
        self.tools_with(self.config()).await
    }

    async fn tools_with(&self, config: GdriveConfig) -> Tools {
        Tools::with(Gdrive::new(&config).expect("the connector starts")).await
    }
}

fn structured(reply: &crate::support::Reply) -> Value {
    reply.raw["structuredContent"].clone()
}

#[tokio::test]
async fn lists_the_hosted_servers_read_tools_with_read_only_hints_and_the_gdrive_template() {
    let d = Drive::start().await;
    let tools = d.tools().await;
    assert_eq!(
        tools.names().await,
        [
            "download_file_content",
            "get_file_metadata",
            "list_recent_files",
            "read_file_content",
            "search_files"
        ]
    );
    for name in tools.names().await {
        let def = tools.definition(&name).await;
        assert_eq!(def["annotations"]["readOnlyHint"], true, "{name}");
    }
    let search = tools.definition("search_files").await;
    for arg in [
        "query",
        "page_size",
        "cursor",
        "drive_id",
        "mime_type",
        "order_by",
    ] {
        assert!(
            search["inputSchema"]["properties"].get(arg).is_some(),
            "{arg}"
        );
    }
    let read = tools.definition("read_file_content").await;
    for arg in ["file_id", "format", "offset", "max_length"] {
        assert!(
            read["inputSchema"]["properties"].get(arg).is_some(),
            "{arg}"
        );
    }
    let templates = tools
        .request("resources/templates/list", json!({}))
        .await
        .unwrap();
    assert_eq!(
        templates["resourceTemplates"][0]["uriTemplate"],
        "gdrive:///{id}"
    );
}

#[tokio::test]
async fn search_returns_ids_names_and_types_and_pages_with_a_cursor() {
    let d = Drive::start().await;
    for i in 0..5 {
        d.fake.add(
            FakeFile::new(&format!("r{i}"), &format!("report {i}"), "text/plain")
                .content("quarterly report"),
        );
    }
    let tools = d.tools().await;
    let first = tools
        .call("search_files", json!({"query": "report", "page_size": 3}))
        .await;
    first.ok();
    let page = structured(&first);
    let files = page["files"].as_array().unwrap();
    assert_eq!(files.len(), 3);
    assert_eq!(files[0]["id"], "r0");
    assert_eq!(files[0]["name"], "report 0");
    assert_eq!(files[0]["mimeType"], "text/plain");
    assert!(files[0]["modifiedTime"].is_string());
    let cursor = page["next_cursor"].as_str().unwrap().to_owned();
    let second = tools
        .call(
            "search_files",
            json!({"query": "report", "page_size": 3, "cursor": cursor}),
        )
        .await;
    let page = structured(&second);
    assert_eq!(page["files"].as_array().unwrap().len(), 2);
    assert!(page.get("next_cursor").is_none());
    let seen = d.fake.seen();
    let last = seen.last().unwrap();
    assert_eq!(last.query["pageToken"], cursor);
    assert_eq!(
        last.query["q"],
        "fullText contains 'report' and trashed = false"
    );
}

#[tokio::test]
async fn every_request_carries_the_shared_drive_flags() {
    let d = Drive::start().await;
    d.fake.add(
        FakeFile::new("shared1", "team.txt", "text/plain")
            .content("team notes")
            .drive("0ASharedDrive"),
    );
    let tools = d.tools().await;
    tools
        .call("search_files", json!({"query": "team"}))
        .await
        .ok();
    tools.call("list_recent_files", json!({})).await.ok();
    tools
        .call("get_file_metadata", json!({"file_id": "shared1"}))
        .await
        .ok();
    assert_eq!(
        tools
            .call("read_file_content", json!({"file_id": "shared1"}))
            .await
            .ok(),
        "team notes"
    );
    tools
        .call("read_file_content", json!({"file_id": "doc1"}))
        .await
        .ok();
    tools
        .call("download_file_content", json!({"file_id": "shared1"}))
        .await
        .ok();
    let seen = d.fake.seen();
    assert!(seen.len() >= 7, "{seen:?}");
    for s in &seen {
        assert_eq!(s.method, "GET", "{s:?}");
        assert_eq!(
            s.query.get("supportsAllDrives").map(String::as_str),
            Some("true"),
            "{s:?}"
        );
        if s.path == "/drive/v3/files" {
            assert_eq!(s.query["includeItemsFromAllDrives"], "true", "{s:?}");
            assert_eq!(s.query["corpora"], "allDrives", "{s:?}");
        }
    }
}

#[tokio::test]
async fn drive_id_searches_one_shared_drive() {
    let d = Drive::start().await;
    d.fake.add(
        FakeFile::new("in", "a.txt", "text/plain")
            .content("x")
            .drive("0ADrive"),
    );
    d.fake.add(
        FakeFile::new("out", "b.txt", "text/plain")
            .content("x")
            .drive("0AOther"),
    );
    let tools = d.tools().await;
    let reply = tools
        .call("search_files", json!({"query": "", "drive_id": "0ADrive"}))
        .await;
    reply.ok();
    let page = structured(&reply);
    let ids: Vec<&str> = page["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["in"]);
    let last = d.fake.seen().pop().unwrap();
    assert_eq!(last.query["corpora"], "drive");
    assert_eq!(last.query["driveId"], "0ADrive");
}

#[tokio::test]
async fn a_quote_in_free_text_cannot_break_out_of_the_string() {
    let d = Drive::start().await;
    d.fake
        .add(FakeFile::new("secret", "secret salaries", "text/plain").content("x"));
    d.fake
        .add(FakeFile::new("obrien", "O'Brien's notes", "text/plain").content("y"));
    let tools = d.tools().await;
    // An attempt to widen the search: it is one literal, so it matches nothing.
    let reply = tools
        .call(
            "search_files",
            json!({"query": "x' or name contains 'secret"}),
        )
        .await;
    reply.ok();
    assert_eq!(structured(&reply)["files"], json!([]));
    let last = d.fake.seen().pop().unwrap();
    assert_eq!(
        last.query["q"],
        r"fullText contains 'x\' or name contains \'secret' and trashed = false"
    );
    // A backslash before the quote does not unescape it either.
    let reply = tools
        .call(
            "search_files",
            json!({"query": r"x\' or name contains \'secret"}),
        )
        .await;
    reply.ok();
    assert_eq!(structured(&reply)["files"], json!([]));
    // And a real apostrophe finds the file.
    let reply = tools
        .call("search_files", json!({"query": "O'Brien's"}))
        .await;
    assert_eq!(structured(&reply)["files"][0]["id"], "obrien");
}

#[tokio::test]
async fn a_raw_drive_query_is_used_as_is_and_an_unbalanced_one_is_refused() {
    let d = Drive::start().await;
    d.fake.add(
        FakeFile::new("child", "child.txt", "text/plain")
            .content("c")
            .parent("folder9"),
    );
    let tools = d.tools().await;
    let reply = tools
        .call(
            "search_files",
            json!({"query": "'folder9' in parents", "mime_type": "text/plain"}),
        )
        .await;
    reply.ok();
    assert_eq!(structured(&reply)["files"][0]["id"], "child");
    assert_eq!(
        d.fake.seen().pop().unwrap().query["q"],
        "('folder9' in parents) and trashed = false and mimeType = 'text/plain'"
    );
    let before = d.fake.seen().len();
    let e = tools
        .call(
            "search_files",
            json!({"query": "name contains 'a') or (name contains 'b'"}),
        )
        .await;
    assert!(e.err().contains("parenthesis"), "{}", e.text);
    assert_eq!(d.fake.seen().len(), before, "nothing was sent");
}

#[tokio::test]
async fn docs_export_as_markdown_sheets_as_csv_slides_as_text() {
    let d = Drive::start().await;
    let tools = d.tools().await;
    let doc = tools
        .call("read_file_content", json!({"file_id": "doc1"}))
        .await;
    assert_eq!(doc.ok(), "# Plan\n\nShip it.");
    assert_eq!(structured(&doc)["exported_as"], "text/markdown");
    let doc = tools
        .call(
            "read_file_content",
            json!({"file_id": "doc1", "format": "text"}),
        )
        .await;
    assert_eq!(doc.ok(), "Plan\n\nShip it.");
    let sheet = tools
        .call("read_file_content", json!({"file_id": "sheet1"}))
        .await;
    assert_eq!(sheet.ok(), "a,b\n1,2\n");
    let slides = tools
        .call("read_file_content", json!({"file_id": "slides1"}))
        .await;
    assert_eq!(slides.ok(), "Slide 1\nHello");
    let exports: Vec<String> = d
        .fake
        .seen()
        .iter()
        .filter(|s| s.path.ends_with("/export"))
        .map(|s| s.query["mimeType"].clone())
        .collect();
    assert_eq!(
        exports,
        ["text/markdown", "text/plain", "text/csv", "text/plain"]
    );
    let wrong = tools
        .call(
            "read_file_content",
            json!({"file_id": "sheet1", "format": "markdown"}),
        )
        .await;
    assert!(wrong.err().contains("csv"), "{}", wrong.text);
}

#[tokio::test]
async fn a_text_file_is_read_in_range_windows_that_never_cut_a_character() {
    let d = Drive::start().await;
    let text = "αβγδε-hello-world"; // 10 bytes of Greek, then ASCII
    d.fake
        .add(FakeFile::new("long", "long.txt", "text/plain").content(text));
    let tools = d.tools().await;
    let first = tools
        .call(
            "read_file_content",
            json!({"file_id": "long", "max_length": 5}),
        )
        .await;
    first.ok();
    let page = structured(&first);
    assert_eq!(page["content"], "αβ");
    assert_eq!(page["next_offset"], 4);
    assert_eq!(page["total_bytes"], text.len());
    assert!(first.text.contains("offset=4"), "{}", first.text);
    assert_eq!(
        d.fake.seen().pop().unwrap().range.as_deref(),
        Some("bytes=0-4")
    );
    let mut offset = 4;
    let mut all = "αβ".to_owned();
    for _ in 0..10 {
        let reply = tools
            .call(
                "read_file_content",
                json!({"file_id": "long", "offset": offset, "max_length": 5}),
            )
            .await;
        let page = structured(&reply);
        all.push_str(page["content"].as_str().unwrap());
        match page["next_offset"].as_u64() {
            Some(next) => offset = next,
            None => break,
        }
    }
    assert_eq!(all, text);
    // Past the end: empty, no error.
    let past = tools
        .call(
            "read_file_content",
            json!({"file_id": "long", "offset": 1000}),
        )
        .await;
    assert_eq!(structured(&past)["content"], "");
}

#[tokio::test]
async fn a_shortcut_is_followed_to_its_target_one_hop_only() {
    let d = Drive::start().await;
    d.fake
        .add(FakeFile::new("sc1", "Plan (shortcut)", "").shortcut_to("doc1"));
    d.fake
        .add(FakeFile::new("sc2", "shortcut to shortcut", "").shortcut_to("sc1"));
    let tools = d.tools().await;
    let read = tools
        .call("read_file_content", json!({"file_id": "sc1"}))
        .await;
    assert_eq!(read.ok(), "# Plan\n\nShip it.");
    assert_eq!(structured(&read)["via_shortcut"], "sc1");
    assert_eq!(structured(&read)["file_id"], "doc1");
    let meta = tools
        .call("get_file_metadata", json!({"file_id": "sc1"}))
        .await;
    meta.ok();
    assert_eq!(structured(&meta)["file"]["id"], "doc1");
    assert_eq!(
        structured(&meta)["shortcut"]["shortcutDetails"]["targetId"],
        "doc1"
    );
    let loop_ = tools
        .call("read_file_content", json!({"file_id": "sc2"}))
        .await;
    assert!(loop_.err().contains("another shortcut"), "{}", loop_.text);
}

#[tokio::test]
async fn an_export_over_drives_10_mb_limit_falls_back_to_text_or_says_so() {
    let d = Drive::start().await;
    d.fake.add(
        FakeFile::new("bigdoc", "Big", DOC)
            .export("text/markdown", "m".repeat(300))
            .export("text/plain", "t".repeat(100)),
    );
    d.fake.with(|s| s.export_limit = 200);
    d.fake
        .add(FakeFile::new("bigsheet", "Big sheet", SHEET).export("text/csv", "c".repeat(300)));
    let tools = d.tools().await;
    let doc = tools
        .call("read_file_content", json!({"file_id": "bigdoc"}))
        .await;
    doc.ok();
    assert_eq!(structured(&doc)["exported_as"], "text/plain");
    assert!(structured(&doc)["note"].as_str().unwrap().contains("10 MB"));
    let sheet = tools
        .call("read_file_content", json!({"file_id": "bigsheet"}))
        .await;
    let e = sheet.err();
    assert!(
        e.contains("10 MB") && e.contains("exportSizeLimitExceeded"),
        "{e}"
    );
}

#[tokio::test]
async fn download_returns_a_base64_blob_with_its_mime_type_and_is_capped() {
    use base64::Engine as _;
    let d = Drive::start().await;
    let png = vec![0x89, b'P', b'N', b'G', 0, 1, 2, 255];
    d.fake
        .add(FakeFile::new("img", "pic.png", "image/png").content(png.clone()));
    d.fake
        .add(FakeFile::new("big", "big.bin", "application/octet-stream").content(vec![7u8; 5000]));
    let mut config = d.config();
    config.max_bytes = 4096;
    let tools = d.tools_with(config).await;
    let reply = tools
        .call("download_file_content", json!({"file_id": "img"}))
        .await;
    reply.ok();
    let resource = &reply.raw["content"][1]["resource"];
    assert_eq!(resource["mimeType"], "image/png");
    assert_eq!(resource["uri"], "gdrive:///img");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(resource["blob"].as_str().unwrap())
        .unwrap();
    assert_eq!(bytes, png);
    let before = d.fake.seen().len();
    let big = tools
        .call("download_file_content", json!({"file_id": "big"}))
        .await;
    assert!(big.err().contains("max_bytes"), "{}", big.text);
    assert!(
        d.fake.seen()[before..]
            .iter()
            .all(|s| !s.query.contains_key("alt")),
        "the bytes were not fetched"
    );
    let doc = tools
        .call("download_file_content", json!({"file_id": "doc1"}))
        .await;
    assert!(doc.err().contains("export_mime_type"), "{}", doc.text);
    let doc = tools
        .call(
            "download_file_content",
            json!({"file_id": "doc1", "export_mime_type": "text/plain"}),
        )
        .await;
    assert_eq!(doc.raw["content"][1]["resource"]["mimeType"], "text/plain");
}

#[tokio::test]
async fn a_refresh_token_is_exchanged_once_for_concurrent_calls_and_cached() {
    let d = Drive::start().await;
    let tools = Arc::new(d.tools().await);
    let calls = (0..6).map(|_| {
        let tools = tools.clone();
        tokio::spawn(async move {
            tools
                .call("get_file_metadata", json!({"file_id": "notes"}))
                .await
        })
    });
    for call in calls {
        call.await.unwrap().ok();
    }
    tools.call("list_recent_files", json!({})).await.ok();
    assert_eq!(d.fake.token_requests(), 1);
}

#[tokio::test]
async fn a_401_drops_the_token_and_retries_once_with_a_fresh_one() {
    let d = Drive::start().await;
    let tools = d.tools().await;
    tools
        .call("get_file_metadata", json!({"file_id": "notes"}))
        .await
        .ok();
    d.fake.expire_tokens();
    tools
        .call("get_file_metadata", json!({"file_id": "notes"}))
        .await
        .ok();
    assert_eq!(d.fake.token_requests(), 2);
    // A Drive that refuses every token: one retry, then a clear error.
    d.fake.fault(Fault::Status(401, vec![], json!({"error": {"code": 401, "message": "Invalid Credentials", "errors": [{"reason": "authError"}]}})));
    d.fake.fault(Fault::Status(401, vec![], json!({"error": {"code": 401, "message": "Invalid Credentials", "errors": [{"reason": "authError"}]}})));
    let e = tools
        .call("get_file_metadata", json!({"file_id": "notes"}))
        .await;
    assert!(e.err().contains("refused the credentials"), "{}", e.text);
    assert!(!e.text.contains("ya29."), "{}", e.text);
}

#[tokio::test]
async fn a_revoked_refresh_token_tells_the_operator_to_reauthorise_without_printing_it() {
    let d = Drive::start().await;
    d.fake.with(|s| s.revoked = true);
    let tools = d.tools().await;
    let e = tools.call("search_files", json!({"query": "x"})).await;
    let text = e.err();
    assert!(
        text.contains("invalid_grant") && text.contains("Re-authorise"),
        "{text}"
    );
    assert!(
        !text.contains(REFRESH_TOKEN) && !text.contains(CLIENT_SECRET),
        "{text}"
    );
    assert!(
        d.fake.seen().is_empty(),
        "Drive was not called without a token"
    );
}

#[tokio::test]
async fn a_service_account_signs_an_rs256_assertion_with_iss_scope_aud_and_sub() {
    let d = Drive::start().await;
    let key = json!({"type": "service_account", "project_id": "p", "private_key_id": "kid-1",
        "private_key": fake::TEST_KEY, "client_email": SA_EMAIL, "client_id": "1",
        "token_uri": "https://oauth2.googleapis.com/token"});
    let mut config = d.config();
    config.refresh_token = None;
    config.client_id = None;
    config.client_secret = None;
    config.service_account_key = Some(d.secret("key.json", &key.to_string()));
    config.subject = Some("alice@example.com".into());
    let tools = d.tools_with(config).await;
    tools
        .call("read_file_content", json!({"file_id": "notes"}))
        .await
        .ok();
    let claims = d.fake.state.lock().unwrap().assertions.clone();
    assert_eq!(claims.len(), 1);
    let c = &claims[0];
    assert_eq!(c["iss"], SA_EMAIL);
    assert_eq!(c["scope"], "https://www.googleapis.com/auth/drive.readonly");
    assert_eq!(c["aud"], format!("{}/token", d.base));
    assert_eq!(c["sub"], "alice@example.com");
    assert!(c["exp"].as_u64().unwrap() > c["iat"].as_u64().unwrap());
}

#[tokio::test]
async fn a_service_account_key_that_does_not_verify_is_refused_clearly() {
    let d = Drive::start().await;
    // Another key than the one the fake trusts: the signature does not verify.
    let other = include_str!("other_key.pem");
    let key = json!({"type": "service_account", "private_key": other, "client_email": SA_EMAIL});
    let mut config = d.config();
    config.refresh_token = None;
    config.client_id = None;
    config.client_secret = None;
    config.service_account_key = Some(d.secret("key.json", &key.to_string()));
    let tools = d.tools_with(config).await;
    let e = tools
        .call("get_file_metadata", json!({"file_id": "notes"}))
        .await;
    let text = e.err();
    assert!(
        text.contains("service account") && text.contains("invalid_grant"),
        "{text}"
    );
    assert!(!text.contains("PRIVATE KEY"), "{text}");
}

#[tokio::test]
async fn a_static_token_that_is_refused_says_so_without_printing_it() {
    let d = Drive::start().await;
    let mut config = d.config();
    config.refresh_token = None;
    config.client_id = None;
    config.client_secret = None;
    config.access_token = Some(d.secret("access", "ya29.static-token"));
    let tools = d.tools_with(config).await;
    let e = tools
        .call("get_file_metadata", json!({"file_id": "notes"}))
        .await;
    let text = e.err();
    assert!(
        text.contains("access_token") && text.contains("401"),
        "{text}"
    );
    assert!(!text.contains("ya29.static-token"), "{text}");
    // The fake accepts it once it knows it.
    d.fake.with(|s| {
        s.tokens.insert("ya29.static-token".into());
    });
    tools
        .call("get_file_metadata", json!({"file_id": "notes"}))
        .await
        .ok();
    assert_eq!(d.fake.token_requests(), 0);
}

#[tokio::test]
async fn a_short_retry_after_is_waited_out_and_a_long_one_reported() {
    let d = Drive::start().await;
    let tools = d.tools().await;
    tools.call("list_recent_files", json!({})).await.ok(); // a token first
    let limited = || {
        Fault::Status(
            429,
            vec![("retry-after", "1".into())],
            json!({"error": {"code": 429, "message": "Rate Limit Exceeded", "errors": [{"reason": "rateLimitExceeded"}]}}),
        )
    };
    d.fake.fault(limited());
    let started = std::time::Instant::now();
    tools.call("list_recent_files", json!({})).await.ok();
    assert!(started.elapsed() >= Duration::from_millis(900));
    d.fake.fault(Fault::Status(
        429,
        vec![("retry-after", "120".into())],
        json!({"error": {"code": 429, "message": "Rate Limit Exceeded", "errors": [{"reason": "rateLimitExceeded"}]}}),
    ));
    let started = std::time::Instant::now();
    let e = tools.call("list_recent_files", json!({})).await;
    assert!(e.err().contains("retry after 120 s"), "{}", e.text);
    assert!(started.elapsed() < Duration::from_secs(2));
    // Drive's own 403 rateLimitExceeded (no Retry-After) is a rate limit too.
    d.fake.fault(Fault::Status(
        403,
        vec![],
        json!({"error": {"code": 403, "message": "User Rate Limit Exceeded", "errors": [{"reason": "userRateLimitExceeded"}]}}),
    ));
    let e = tools.call("list_recent_files", json!({})).await;
    assert!(e.err().contains("rate limiting"), "{}", e.text);
}

#[tokio::test]
async fn a_5xx_is_retried_once_then_reported() {
    let d = Drive::start().await;
    let tools = d.tools().await;
    tools.call("list_recent_files", json!({})).await.ok();
    let unavailable = || {
        Fault::Status(
            503,
            vec![],
            json!({"error": {"code": 503, "message": "Backend Error", "errors": [{"reason": "backendError"}]}}),
        )
    };
    d.fake.fault(unavailable());
    tools.call("list_recent_files", json!({})).await.ok();
    d.fake.fault(unavailable());
    d.fake.fault(unavailable());
    let e = tools.call("list_recent_files", json!({})).await;
    let text = e.err();
    assert!(
        text.contains("503") && text.contains("Backend Error"),
        "{text}"
    );
}

#[tokio::test]
async fn a_slow_answer_times_out_as_a_tool_error() {
    let d = Drive::start().await;
    let mut config = d.config();
    config.timeout_ms = 300;
    let tools = d.tools_with(config).await;
    tools.call("list_recent_files", json!({})).await.ok();
    d.fake.fault(Fault::Slow(Duration::from_secs(3)));
    let started = std::time::Instant::now();
    let e = tools.call("list_recent_files", json!({})).await;
    assert!(
        e.err().contains("did not answer within 300 ms"),
        "{}",
        e.text
    );
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn a_huge_answer_is_cut_off_at_max_bytes() {
    let d = Drive::start().await;
    let mut config = d.config();
    config.max_bytes = 10_000;
    let tools = d.tools_with(config).await;
    tools.call("list_recent_files", json!({})).await.ok();
    d.fake.fault(Fault::Huge(100_000));
    let e = tools.call("list_recent_files", json!({})).await;
    assert!(e.err().contains("more than 10000 bytes"), "{}", e.text);
}

#[tokio::test]
async fn malformed_json_is_a_clear_tool_error() {
    let d = Drive::start().await;
    let tools = d.tools().await;
    tools.call("list_recent_files", json!({})).await.ok();
    d.fake.fault(Fault::Malformed);
    let e = tools.call("list_recent_files", json!({})).await;
    assert!(e.err().contains("could not be read"), "{}", e.text);
}

#[tokio::test]
async fn a_missing_file_or_a_bad_id_is_a_clear_not_found() {
    let d = Drive::start().await;
    let tools = d.tools().await;
    let e = tools
        .call("read_file_content", json!({"file_id": "nope"}))
        .await;
    assert!(e.err().contains("no file `nope`"), "{}", e.text);
    let e = tools
        .call("get_file_metadata", json!({"file_id": "../changes"}))
        .await;
    assert!(e.err().contains("no file"), "{}", e.text);
    assert!(d.fake.seen().iter().all(|s| !s.path.contains("..")));
}

#[tokio::test]
async fn a_binary_file_or_folder_is_not_read_as_text() {
    let d = Drive::start().await;
    d.fake
        .add(FakeFile::new("pdf", "a.pdf", "application/pdf").content("%PDF"));
    d.fake.add(FakeFile::new(
        "dir",
        "Folder",
        "application/vnd.google-apps.folder",
    ));
    let tools = d.tools().await;
    let e = tools
        .call("read_file_content", json!({"file_id": "pdf"}))
        .await;
    assert!(e.err().contains("download_file_content"), "{}", e.text);
    let e = tools
        .call("read_file_content", json!({"file_id": "dir"}))
        .await;
    assert!(e.err().contains("in parents"), "{}", e.text);
}

#[tokio::test]
async fn the_config_needs_exactly_one_credential_and_prints_no_secret() {
    let d = Drive::start().await;
    let mut none = d.config();
    none.refresh_token = None;
    none.client_id = None;
    none.client_secret = None;
    let e = Gdrive::new(&none).unwrap_err().to_string();
    assert!(e.contains("no credential"), "{e}");
    let mut two = d.config();
    two.access_token = Some(d.secret("a", "tok"));
    let e = Gdrive::new(&two).unwrap_err().to_string();
    assert!(e.contains("more than one"), "{e}");
    let mut missing = d.config();
    missing.refresh_token = Some(SecretSource::Env("TOOLYARD_GDRIVE_SURELY_UNSET".into()));
    let e = Gdrive::new(&missing).unwrap_err().to_string();
    assert!(e.contains("refresh_token") && e.contains("not set"), "{e}");
    let config = d.config();
    let printed = format!("{config:?} {:?}", Gdrive::new(&config).unwrap());
    assert!(
        !printed.contains(REFRESH_TOKEN) && !printed.contains(CLIENT_SECRET),
        "{printed}"
    );
    // A literal token in the file is refused. (The TOML error quotes the offending line:
    // that is the shared config parser's doing, reported to the lead.)
    let toml = "[connectors.gdrive]\naccess_token = \"ya29.literal\"\n";
    let e = toolyard_connectors::ConnectorsConfig::parse(toml).unwrap_err();
    assert!(e.contains("never as the value itself"), "{e}");
}

#[tokio::test]
async fn a_gdrive_resource_reads_a_doc_as_markdown_and_a_binary_as_a_blob() {
    let d = Drive::start().await;
    d.fake
        .add(FakeFile::new("bin", "x.bin", "application/octet-stream").content(vec![0u8, 1, 2]));
    let tools = d.tools().await;
    let doc = tools
        .request("resources/read", json!({"uri": "gdrive:///doc1"}))
        .await
        .unwrap();
    assert_eq!(doc["contents"][0]["text"], "# Plan\n\nShip it.");
    assert_eq!(doc["contents"][0]["mimeType"], "text/markdown");
    let bin = tools
        .request("resources/read", json!({"uri": "gdrive:///bin"}))
        .await
        .unwrap();
    assert_eq!(bin["contents"][0]["blob"], "AAEC");
}

/// A raw connection that keeps every notification it gets.
struct Listener {
    handle: toolyard::transport::ConnectionHandle,
    rx: tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>,
}

impl Listener {
    async fn connect(server: &toolyard::Server) -> Listener {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
        let handle = server
            .connect(toolyard::transport::Sink::channel(tx))
            .await
            .unwrap();
        let mut l = Listener { handle, rx };
        l.send(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "it", "version": "0"}}}));
        l.next_with(|m| m["id"] == 1).await;
        l.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        l
    }
    fn send(&self, message: Value) {
        self.handle.receive(message.to_string().as_bytes());
    }
    async fn next_with(&mut self, want: impl Fn(&Value) -> bool) -> Value {
        tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                let bytes = self.rx.recv().await.expect("the connection stays open");
                let message: Value = serde_json::from_slice(&bytes).unwrap();
                if want(&message) {
                    return message;
                }
            }
        })
        .await
        .expect("the message within 5 s")
    }
}

#[tokio::test]
async fn subscribed_files_get_resource_updated_notifications_from_polled_changes() {
    let d = Drive::start().await;
    let mut config = d.config();
    config.poll_interval_ms = 50;
    let gdrive = Gdrive::new(&config).unwrap();
    let server = ServerBuilder::new("gdrive-test", "0")
        .controller(gdrive.clone())
        .start()
        .await
        .unwrap();
    let watch = gdrive.watch(&server).expect("polling is on");
    let mut client = Listener::connect(&server).await;
    client.send(json!({"jsonrpc": "2.0", "id": 2, "method": "resources/subscribe", "params": {"uri": "gdrive:///doc1"}}));
    client.next_with(|m| m["id"] == 2).await;
    // Wait until the poller has its start token, then change two files.
    tokio::time::timeout(Duration::from_secs(5), async {
        while !d
            .fake
            .seen()
            .iter()
            .any(|s| s.path == "/drive/v3/changes/startPageToken")
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap();
    d.fake
        .with(|s| s.changes.extend(["sheet1".to_owned(), "doc1".to_owned()]));
    let note = client
        .next_with(|m| m["method"] == "notifications/resources/updated")
        .await;
    assert_eq!(note["params"]["uri"], "gdrive:///doc1");
    let polls: Vec<_> = d
        .fake
        .seen()
        .into_iter()
        .filter(|s| s.path == "/drive/v3/changes")
        .collect();
    assert!(polls
        .iter()
        .all(|s| s.query["includeItemsFromAllDrives"] == "true"));
    // Stopping the server stops the poller.
    server.shutdown();
    tokio::time::timeout(Duration::from_secs(5), async {
        while !watch.is_finished() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the poller stops with the server");
}

#[tokio::test]
async fn nothing_is_polled_while_nothing_is_subscribed_and_polling_can_be_off() {
    let d = Drive::start().await;
    let mut config = d.config();
    config.poll_interval_ms = 20;
    let gdrive = Gdrive::new(&config).unwrap();
    let server = ServerBuilder::new("gdrive-test", "0")
        .controller(gdrive.clone())
        .start()
        .await
        .unwrap();
    let watch = gdrive.watch(&server).unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(d.fake.seen().is_empty(), "{:?}", d.fake.seen());
    drop(watch);
    config.poll_interval_ms = 0;
    assert!(Gdrive::new(&config).unwrap().watch(&server).is_none());
}

#[tokio::test]
async fn a_wrong_oauth_client_secret_says_which_settings_to_check() {
    let d = Drive::start().await;
    let mut config = d.config();
    config.client_secret = Some(d.secret("wrong", "not-the-secret"));
    let tools = d.tools_with(config).await;
    let e = tools.call("list_recent_files", json!({})).await;
    let text = e.err();
    assert!(
        text.contains("invalid_client") && text.contains("client_secret"),
        "{text}"
    );
    assert!(!text.contains("not-the-secret"), "{text}");
}

#[tokio::test]
async fn a_panic_in_the_state_actor_fails_one_call_and_the_rebuilt_state_refreshes_once() {
    let d = Drive::start().await;
    let gdrive = Gdrive::new(&d.config()).expect("the connector starts");
    let tools = Arc::new(Tools::with(gdrive.clone()).await);
    let metadata = json!({"file_id": "notes"});
    tools.call("get_file_metadata", metadata.clone()).await.ok();
    assert_eq!(d.fake.token_requests(), 1);

    gdrive.panic_next_state_job();
    let hit = tools.call("get_file_metadata", metadata.clone()).await;
    assert!(
        hit.err().contains("state failed during this call"),
        "{}",
        hit.text
    );
    assert_eq!(gdrive.state_restarts(), 1);

    // The cached token went with the failed state: concurrent calls share one refresh.
    let calls: Vec<_> = (0..5)
        .map(|_| {
            let (tools, metadata) = (tools.clone(), metadata.clone());
            tokio::spawn(async move { tools.call("get_file_metadata", metadata).await })
        })
        .collect();
    for call in calls {
        call.await.unwrap().ok();
    }
    assert_eq!(d.fake.token_requests(), 2);
}
