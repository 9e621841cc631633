//! The built-in connectors through the real `toolyard` binary: a config file with only
//! `[connectors.*]` sections serves exactly those tools, and the filesystem connector answers
//! like the official `@modelcontextprotocol/server-filesystem` (npm, installed by
//! scripts/install-test-deps) for the tools both have.

use crate::client_interop::installed;
use crate::stdio::Proc;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// A temporary directory, removed when dropped.
struct Temp(PathBuf);

impl Temp {
    fn new(tag: &str) -> Temp {
        let path = std::env::temp_dir().join(format!("toolyard-it-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        Temp(std::fs::canonicalize(path).unwrap())
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A tree both servers are pointed at, and a file outside it.
fn tree(base: &Path) -> PathBuf {
    let root = base.join("root");
    std::fs::create_dir_all(root.join("docs/nested")).unwrap();
    std::fs::create_dir_all(base.join("root-evil")).unwrap();
    std::fs::write(base.join("root-evil/secret.txt"), "EVIL").unwrap();
    std::fs::write(root.join("a.txt"), "alpha\nbeta\ngamma\ndelta\n").unwrap();
    std::fs::write(root.join("b.txt"), "one\ntwo\nthree").unwrap();
    std::fs::write(root.join("docs/readme.md"), "# Title\n\nbody\n").unwrap();
    std::fs::write(root.join("docs/nested/deep.md"), "deep\n").unwrap();
    root
}

fn config(dir: &Path, body: &str) -> PathBuf {
    let path = dir.join("toolyard.toml");
    std::fs::write(&path, body).unwrap();
    path
}

fn call(p: &mut Proc, id: i64, name: &str, arguments: Value) -> Value {
    p.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": name, "arguments": arguments}}));
    p.answer(json!(id))["result"].clone()
}

fn tool_names(list: &Value) -> Vec<String> {
    let mut names: Vec<String> = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn a_filesystem_section_alone_serves_exactly_the_filesystem_tools() {
    let tmp = Temp::new("conn-fs");
    let root = tree(&tmp.0);
    let file = config(
        &tmp.0,
        &format!(
            "[connectors.filesystem]\nroots = [{:?}]\n",
            root.display().to_string()
        ),
    );
    let mut p = Proc::spawn(&[
        "serve",
        "--stdio",
        "--no-demo",
        "--config",
        file.to_str().unwrap(),
    ]);
    p.initialize();
    p.send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}));
    let names = tool_names(&p.answer(json!(1)));
    assert_eq!(
        names,
        [
            "create_directory",
            "delete_path",
            "directory_tree",
            "edit_file",
            "get_file_info",
            "grep",
            "list_allowed_directories",
            "list_directory",
            "list_directory_with_sizes",
            "move_file",
            "read_file",
            "read_media_file",
            "read_multiple_files",
            "read_text_file",
            "search_files",
            "write_file",
        ]
    );
    let read = call(
        &mut p,
        2,
        "read_text_file",
        json!({"path": root.join("a.txt"), "tail": 2}),
    );
    assert_eq!(read["content"][0]["text"], "gamma\ndelta", "{read}");
    let evil = tmp.0.join("root-evil/secret.txt");
    let refused = call(&mut p, 3, "read_text_file", json!({"path": evil}));
    assert_eq!(refused["isError"], true, "{refused}");
    let text = refused["content"][0]["text"].as_str().unwrap();
    assert!(
        !text.contains("root-evil") && !text.contains("EVIL"),
        "{text}"
    );
    assert!(p.close_and_wait().success());
}

#[test]
fn a_read_only_filesystem_and_a_sqlite_database_serve_side_by_side() {
    let tmp = Temp::new("conn-sql");
    let root = tree(&tmp.0);
    let db = tmp.0.join("app.db");
    let file = config(
        &tmp.0,
        &format!(
            "[connectors.filesystem]\nroots = [{:?}]\nread_only = true\n\n[connectors.sql]\nurl = {:?}\nallow_writes = true\n",
            root.display().to_string(),
            format!("sqlite:{}", db.display())
        ),
    );
    let mut p = Proc::spawn(&[
        "serve",
        "--stdio",
        "--no-demo",
        "--config",
        file.to_str().unwrap(),
    ]);
    p.initialize();
    p.send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}));
    let names = tool_names(&p.answer(json!(1)));
    for write in [
        "write_file",
        "edit_file",
        "create_directory",
        "move_file",
        "delete_path",
    ] {
        assert!(
            !names.contains(&write.to_owned()),
            "{write} in read-only mode"
        );
    }
    for sql in [
        "query",
        "execute",
        "list_tables",
        "describe_table",
        "explain",
        "list_schemas",
    ] {
        assert!(names.contains(&sql.to_owned()), "{sql} missing");
    }
    let made = call(
        &mut p,
        2,
        "execute",
        json!({"sql": "CREATE TABLE t (v TEXT)"}),
    );
    assert_ne!(made["isError"], true, "{made}");
    call(
        &mut p,
        3,
        "execute",
        json!({"sql": "INSERT INTO t VALUES ('x'), ('y')"}),
    );
    let rows = call(
        &mut p,
        4,
        "query",
        json!({"sql": "SELECT v FROM t ORDER BY v"}),
    );
    assert_eq!(
        rows["structuredContent"]["rows"],
        json!([["x"], ["y"]]),
        "{rows}"
    );
    let refused = call(&mut p, 5, "query", json!({"sql": "/* hi */ DELETE FROM t"}));
    assert_eq!(refused["isError"], true, "{refused}");
    let still = call(&mut p, 6, "query", json!({"sql": "SELECT count(*) FROM t"}));
    assert_eq!(still["structuredContent"]["rows"], json!([[2]]));
    assert!(p.close_and_wait().success());
}

/// A one-page HTTP server on 127.0.0.1 (no robots.txt); returns its port and a hit counter.
fn one_page_site() -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let hits = std::sync::Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let (port, _) = http_fake("text/html", move |head| {
        counter.fetch_add(1, Ordering::Relaxed);
        if head.starts_with("GET /robots.txt") {
            ("404 Not Found", "none")
        } else {
            (
                "200 OK",
                "<html><body><h2>Hello</h2><p>from <i>here</i></p></body></html>",
            )
        }
    });
    (port, hits)
}

#[test]
fn a_fetch_section_serves_fetch_behind_the_ssrf_guard() {
    let tmp = Temp::new("conn-fetch");
    let (port, hits) = one_page_site();
    let open = config(
        &tmp.0,
        "[connectors.fetch]\nallow_hosts = [\"localhost\"]\n",
    );
    let mut p = Proc::spawn(&[
        "serve",
        "--stdio",
        "--no-demo",
        "--config",
        open.to_str().unwrap(),
    ]);
    p.initialize();
    p.send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}));
    assert_eq!(tool_names(&p.answer(json!(1))), ["fetch"]);
    let page = call(
        &mut p,
        2,
        "fetch",
        json!({"url": format!("http://localhost:{port}/")}),
    );
    let text = page["content"][0]["text"].as_str().unwrap_or_default();
    assert!(
        text.contains("## Hello") && text.contains("*here*"),
        "{page}"
    );
    let before = hits.load(std::sync::atomic::Ordering::Relaxed);
    let refused = call(
        &mut p,
        3,
        "fetch",
        json!({"url": format!("http://127.0.0.1:{port}/")}),
    );
    assert_eq!(refused["isError"], true, "{refused}");
    assert_eq!(hits.load(std::sync::atomic::Ordering::Relaxed), before);
    assert!(p.close_and_wait().success());
}

#[test]
fn a_bad_connector_section_stops_the_server_with_a_clear_error() {
    let tmp = Temp::new("conn-bad");
    let file = config(
        &tmp.0,
        &format!(
            "[connectors.filesystem]\nroots = [{:?}]\n",
            tmp.0.join("missing").display().to_string()
        ),
    );
    let out = Command::new(env!("CARGO_BIN_EXE_toolyard"))
        .args([
            "serve",
            "--stdio",
            "--no-demo",
            "--config",
            file.to_str().unwrap(),
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("[connectors.filesystem]: root"), "{stderr}");
    let typo = config(&tmp.0, "[connectors.filesystem]\nrots = []\n");
    let out = Command::new(env!("CARGO_BIN_EXE_toolyard"))
        .args([
            "serve",
            "--stdio",
            "--no-demo",
            "--config",
            typo.to_str().unwrap(),
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("rots"));
}

/// Any stdio MCP server, line by line.
struct Peer {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    next: i64,
}

impl Peer {
    fn spawn(mut command: Command) -> Peer {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the server");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take().unwrap();
        let mut peer = Peer {
            child,
            stdin,
            lines,
            next: 1,
        };
        peer.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "it", "version": "0"}}),
        );
        peer.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        peer
    }

    fn send(&mut self, message: &Value) {
        writeln!(self.stdin, "{message}").unwrap();
        self.stdin.flush().unwrap();
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let line = self
                .lines
                .recv_timeout(Duration::from_secs(20))
                .expect("an answer within 20 s");
            let Ok(m) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            if m["id"] == id && m.get("method").is_none() {
                return m;
            }
        }
    }

    /// (failed, text) of a tool call.
    fn call(&mut self, name: &str, arguments: Value) -> (bool, String) {
        let m = self.request("tools/call", json!({"name": name, "arguments": arguments}));
        let result = &m["result"];
        let text = result["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        (result["isError"] == true || m.get("error").is_some(), text)
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Directory-tree JSON with every level sorted by name (the reference lists in readdir
/// order).
fn sorted_tree(text: &str) -> Value {
    fn sort(v: &mut Value) {
        if let Value::Array(items) = v {
            items.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
            for item in items.iter_mut() {
                if let Some(children) = item.get_mut("children") {
                    sort(children);
                }
            }
        }
    }
    let mut v: Value = serde_json::from_str(text).unwrap_or(Value::Null);
    sort(&mut v);
    v
}

fn sorted_lines(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    lines.sort();
    lines
}

#[test]
fn the_filesystem_connector_answers_like_the_official_server() {
    let reference_js =
        installed("npm/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js");
    let tmp = Temp::new("conn-compat");
    // Two identical trees, one per server, so writes can be compared too.
    let ours_root = tree(&tmp.0.join("ours"));
    let theirs_root = tree(&tmp.0.join("theirs"));
    let file = config(
        &tmp.0,
        &format!(
            "[connectors.filesystem]\nroots = [{:?}]\n",
            ours_root.display().to_string()
        ),
    );
    let mut ours = {
        let mut c = Command::new(env!("CARGO_BIN_EXE_toolyard"));
        c.args([
            "serve",
            "--stdio",
            "--no-demo",
            "--config",
            file.to_str().unwrap(),
        ]);
        Peer::spawn(c)
    };
    let mut theirs = {
        let mut c = Command::new("node");
        c.arg(&reference_js).arg(&theirs_root);
        Peer::spawn(c)
    };
    // (tool, arguments with ROOT for the tree's root, how to compare)
    type Case = (&'static str, Value, fn(&str) -> Value);
    let cases: Vec<Case> = vec![
        ("read_text_file", json!({"path": "ROOT/a.txt"}), |t| {
            json!(t)
        }),
        (
            "read_text_file",
            json!({"path": "ROOT/a.txt", "head": 2}),
            |t| json!(t),
        ),
        // `tail` of a file ending in a newline differs on purpose: the reference server counts
        // the empty string after the last newline as a line (`tail: 2` of "a\nb\n" is "b\n");
        // ours returns the last two lines. Without a final newline both agree.
        (
            "read_text_file",
            json!({"path": "ROOT/b.txt", "tail": 2}),
            |t| json!(t),
        ),
        (
            "read_text_file",
            json!({"path": "ROOT/missing.txt"}),
            |_| json!("error"),
        ),
        (
            "read_text_file",
            json!({"path": "ROOT/../root-evil/secret.txt"}),
            |_| json!("error"),
        ),
        (
            "read_text_file",
            json!({"path": "ROOT-evil/secret.txt"}),
            |_| json!("error"),
        ),
        ("list_directory", json!({"path": "ROOT"}), |t| {
            json!(sorted_lines(t))
        }),
        ("list_directory", json!({"path": "ROOT/docs"}), |t| {
            json!(sorted_lines(t))
        }),
        ("directory_tree", json!({"path": "ROOT"}), sorted_tree),
        (
            "directory_tree",
            json!({"path": "ROOT", "excludePatterns": ["nested"]}),
            sorted_tree,
        ),
        (
            "search_files",
            json!({"path": "ROOT", "pattern": "**/*.md"}),
            |t| json!(sorted_lines(t)),
        ),
        (
            "search_files",
            json!({"path": "ROOT", "pattern": "*.txt"}),
            |t| json!(sorted_lines(t)),
        ),
        (
            "search_files",
            json!({"path": "ROOT", "pattern": "*.none"}),
            |t| json!(t),
        ),
        (
            "write_file",
            json!({"path": "ROOT/new.txt", "content": "one\ntwo\n"}),
            |_| json!("ok"),
        ),
        ("read_text_file", json!({"path": "ROOT/new.txt"}), |t| {
            json!(t)
        }),
        (
            "edit_file",
            json!({"path": "ROOT/new.txt", "edits": [{"oldText": "two", "newText": "TWO"}]}),
            |t| {
                json!(t
                    .lines()
                    .filter(|l| l.starts_with(['+', '-'])
                        && !l.starts_with("+++")
                        && !l.starts_with("---"))
                    .collect::<Vec<_>>())
            },
        ),
        ("read_text_file", json!({"path": "ROOT/new.txt"}), |t| {
            json!(t)
        }),
        (
            "create_directory",
            json!({"path": "ROOT/made/deeper"}),
            |_| json!("ok"),
        ),
        (
            "move_file",
            json!({"source": "ROOT/new.txt", "destination": "ROOT/made/moved.txt"}),
            |_| json!("ok"),
        ),
        (
            "move_file",
            json!({"source": "ROOT/a.txt", "destination": "ROOT/made/moved.txt"}),
            |_| json!("error"),
        ),
        ("list_directory", json!({"path": "ROOT/made"}), |t| {
            json!(sorted_lines(t))
        }),
    ];
    for (tool, args, normalize) in cases {
        let for_root = |root: &Path| -> Value {
            let text = args
                .to_string()
                .replace("ROOT", &root.display().to_string());
            serde_json::from_str(&text).unwrap()
        };
        let (ours_failed, ours_text) = ours.call(tool, for_root(&ours_root));
        let (theirs_failed, theirs_text) = theirs.call(tool, for_root(&theirs_root));
        assert_eq!(
            ours_failed, theirs_failed,
            "{tool} {args}: ours failed={ours_failed} ({ours_text}), theirs failed={theirs_failed} ({theirs_text})"
        );
        let (a, b) = if ours_failed {
            (json!("error"), json!("error"))
        } else {
            let unroot = |t: &str, root: &Path| t.replace(&root.display().to_string(), "ROOT");
            (
                normalize(&unroot(&ours_text, &ours_root)),
                normalize(&unroot(&theirs_text, &theirs_root)),
            )
        };
        assert_eq!(
            a, b,
            "{tool} {args}: ours {ours_text:?} vs theirs {theirs_text:?}"
        );
    }
}

/// An HTTP/1.1 stand-in on 127.0.0.1 answering every request with JSON: `answer` gets the
/// request's head (as sent) and gives the status line and body. The request lines are
/// recorded.
fn json_fake(
    answer: impl Fn(&str) -> (&'static str, &'static str) + Send + 'static,
) -> (u16, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    http_fake("application/json", answer)
}

/// An HTTP/1.1 stand-in on 127.0.0.1 answering every request with a body of
/// `content_type`: `answer` gets the request's head (as sent) and gives the status line
/// and body. The request lines are recorded.
pub(crate) fn http_fake(
    content_type: &'static str,
    answer: impl Fn(&str) -> (&'static str, &'static str) + Send + 'static,
) -> (u16, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use std::io::Read;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { break };
            let mut request = [0u8; 8192];
            let n = stream.read(&mut request).unwrap_or(0);
            let head = String::from_utf8_lossy(&request[..n]).to_string();
            log.lock()
                .unwrap()
                .push(head.lines().next().unwrap_or("").to_owned());
            let (status, body) = answer(&head);
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (port, seen)
}

/// A Slack Web API stand-in: every method answers one page of one message.
fn one_message_slack() -> (u16, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    json_fake(|head| {
        let body = if head.contains("authorization: Bearer xoxb-system-test")
            || head.contains("Authorization: Bearer xoxb-system-test")
        {
            r#"{"ok":true,"messages":[{"type":"message","user":"U001","text":"hello from the fake","ts":"1712345600.000200"}],"has_more":false,"response_metadata":{"next_cursor":""}}"#
        } else {
            r#"{"ok":false,"error":"invalid_auth"}"#
        };
        ("200 OK", body)
    })
}

#[test]
fn a_slack_section_serves_the_slack_read_tools_and_sends_nothing_until_called() {
    let tmp = Temp::new("conn-slack");
    let (port, seen) = one_message_slack();
    std::fs::write(tmp.0.join("token"), "xoxb-system-test\n").unwrap();
    let path = config(
        &tmp.0,
        &format!(
            "[connectors.slack]\ntoken = \"file:{}\"\nbase_url = \"http://127.0.0.1:{port}/api\"\n",
            tmp.0.join("token").display()
        ),
    );
    let mut p = Proc::spawn(&[
        "serve",
        "--stdio",
        "--no-demo",
        "--config",
        path.to_str().unwrap(),
    ]);
    p.initialize();
    p.send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}));
    assert_eq!(
        tool_names(&p.answer(json!(1))),
        [
            "channels_list",
            "conversations_history",
            "conversations_replies",
            "users_search"
        ]
    );
    assert!(seen.lock().unwrap().is_empty(), "start-up sent requests");
    let history = call(
        &mut p,
        2,
        "conversations_history",
        json!({"channel_id": "C001"}),
    );
    let text = history["content"][0]["text"].as_str().unwrap_or_default();
    assert!(
        text.starts_with("MsgID,UserID,UserName,RealName,Channel,ThreadTs,Text,Time,Cursor\n")
            && text.contains("hello from the fake"),
        "{history}"
    );
    assert!(seen.lock().unwrap()[0].starts_with("GET /api/conversations.history?"));
    assert!(p.close_and_wait().success());
}

/// A one-route Drive v3: `GET /drive/v3/files` with the shared-drive flags and the bearer
/// token `ya29.system-test` lists one file; anything else is Google's 404 body.
fn one_file_drive() -> u16 {
    json_fake(|head| {
        let head = head.to_lowercase();
        let ok = head.starts_with("get /drive/v3/files?")
            && head.contains("supportsalldrives=true")
            && head.contains("includeitemsfromalldrives=true")
            && head.contains("authorization: bearer ya29.system-test");
        if ok {
            (
                "200 OK",
                r#"{"files":[{"id":"doc1","name":"Plan","mimeType":"application/vnd.google-apps.document"}]}"#,
            )
        } else {
            (
                "404 Not Found",
                r#"{"error":{"code":404,"message":"File not found.","errors":[{"reason":"notFound"}]}}"#,
            )
        }
    })
    .0
}

#[test]
fn a_gdrive_section_serves_the_hosted_drive_servers_tools() {
    let tmp = Temp::new("conn-gdrive");
    let port = one_file_drive();
    let token = tmp.0.join("token");
    std::fs::write(&token, "ya29.system-test\n").unwrap();
    let path = config(
        &tmp.0,
        &format!(
            "[connectors.gdrive]\nbase_url = \"http://127.0.0.1:{port}\"\naccess_token = \"file:{}\"\n",
            token.display()
        ),
    );
    let mut p = Proc::spawn(&[
        "serve",
        "--stdio",
        "--no-demo",
        "--config",
        path.to_str().unwrap(),
    ]);
    p.initialize();
    p.send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}));
    assert_eq!(
        tool_names(&p.answer(json!(1))),
        [
            "download_file_content",
            "get_file_metadata",
            "list_recent_files",
            "read_file_content",
            "search_files"
        ]
    );
    let found = call(&mut p, 2, "search_files", json!({"query": "plan"}));
    assert_eq!(
        found["structuredContent"]["files"][0]["id"], "doc1",
        "{found}"
    );
    assert!(!found.to_string().contains("ya29.system-test"));
    assert!(p.close_and_wait().success());
}

/// A minimal GitHub: `GET /user` with a bearer token, anything else 404.
fn one_user_github() -> u16 {
    json_fake(|head| {
        let head = head.to_ascii_lowercase();
        if head.starts_with("get /user ")
            && head.contains("authorization: bearer ghp_system_test")
            && head.contains("x-github-api-version: 2022-11-28")
        {
            (
                "200 OK",
                r#"{"login":"octocat","id":1,"html_url":"https://github.com/octocat","bio":"hi<!-- hidden -->"}"#,
            )
        } else {
            ("404 Not Found", r#"{"message":"Not Found"}"#)
        }
    })
    .0
}

#[test]
fn a_github_section_alone_serves_the_github_tools_and_answers_get_me() {
    let tmp = Temp::new("conn-github");
    let port = one_user_github();
    let token = tmp.0.join("token");
    std::fs::write(&token, "ghp_system_test\n").unwrap();
    let file = config(
        &tmp.0,
        &format!(
            "[connectors.github]\nbase_url = \"http://127.0.0.1:{port}\"\ntoken = \"file:{}\"\nread_only = true\n",
            token.display()
        ),
    );
    let mut p = Proc::spawn(&[
        "serve",
        "--stdio",
        "--no-demo",
        "--config",
        file.to_str().unwrap(),
    ]);
    p.initialize();
    p.send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}));
    assert_eq!(
        tool_names(&p.answer(json!(1))),
        [
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
        ]
    );
    let me = call(&mut p, 2, "get_me", json!({}));
    assert_eq!(me["structuredContent"]["login"], "octocat", "{me}");
    assert_eq!(me["structuredContent"]["details"]["bio"], "hi", "{me}");
    assert!(p.close_and_wait().success());
}
