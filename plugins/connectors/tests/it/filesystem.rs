//! The filesystem tools doing their jobs, in the reference server's formats.

use crate::support::{TempDir, Tools};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use toolyard_connectors::filesystem::{Filesystem, WRITE_TOOLS};
use toolyard_connectors::FilesystemConfig;

/// A temporary tree: `root/` is allowed; `root-evil/` (a sibling sharing the prefix) and
/// `outside/` are not, and symlinks inside `root/` point at both, dangling ones included.
pub(crate) struct Fixture {
    pub(crate) dir: TempDir,
}

impl Fixture {
    pub(crate) fn new() -> Fixture {
        let dir = TempDir::new("fs");
        let base = dir.path();
        let root = base.join("root");
        std::fs::create_dir_all(root.join("sub/deeper")).unwrap();
        std::fs::create_dir_all(base.join("root-evil")).unwrap();
        std::fs::create_dir_all(base.join("outside")).unwrap();
        let lines: String = (1..=10).map(|i| format!("line {i}\n")).collect();
        std::fs::write(root.join("hello.txt"), lines).unwrap();
        std::fs::write(root.join("sub/inner.txt"), "inner needle\nplain\n").unwrap();
        std::fs::write(root.join("sub/deeper/deep.rs"), "fn needle() {}\n").unwrap();
        std::fs::write(root.join("sub/blob.bin"), b"needle\0\x01\x02").unwrap();
        std::fs::write(base.join("root-evil/evil.txt"), "EVIL").unwrap();
        std::fs::write(base.join("outside/secret.txt"), "TOP SECRET").unwrap();
        let link = |target: &str, name: &str| {
            std::os::unix::fs::symlink(target, root.join(name)).unwrap();
        };
        link("hello.txt", "link_in");
        link("../outside/secret.txt", "link_out");
        link(
            base.join("outside/secret.txt").to_str().unwrap(),
            "link_out_abs",
        );
        link("../outside", "link_out_dir");
        link("../outside/missing.txt", "dangling_out");
        link("/nonexistent-toolyard-target/file.txt", "dangling_abs");
        link("no-such-file.txt", "dangling_in");
        Fixture { dir }
    }

    pub(crate) fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    pub(crate) fn base(&self) -> &Path {
        self.dir.path()
    }

    /// A path under the root, as a client writes it.
    pub(crate) fn p(&self, rel: &str) -> String {
        self.root().join(rel).display().to_string()
    }

    pub(crate) fn config(&self) -> FilesystemConfig {
        FilesystemConfig::new(vec![self.root()])
    }

    pub(crate) async fn tools(&self) -> Tools {
        self.tools_with(self.config()).await
    }

    pub(crate) async fn tools_with(&self, config: FilesystemConfig) -> Tools {
        Tools::with(Filesystem::new(&config).expect("the connector starts")).await
    }
}

#[tokio::test]
async fn every_reference_tool_is_listed_with_its_hints() {
    let fx = Fixture::new();
    let t = fx.tools().await;
    let names = t.names().await;
    for name in [
        "read_text_file",
        "read_file",
        "read_media_file",
        "read_multiple_files",
        "write_file",
        "edit_file",
        "create_directory",
        "list_directory",
        "list_directory_with_sizes",
        "directory_tree",
        "move_file",
        "search_files",
        "get_file_info",
        "list_allowed_directories",
        "grep",
        "delete_path",
    ] {
        assert!(
            names.contains(&name.to_owned()),
            "{name} missing: {names:?}"
        );
    }
    let read = t.definition("read_text_file").await;
    assert_eq!(read["annotations"]["readOnlyHint"], true);
    for arg in ["path", "head", "tail", "offset", "limit", "max_bytes"] {
        assert!(read["inputSchema"]["properties"][arg].is_object(), "{arg}");
    }
    let edit = t.definition("edit_file").await;
    assert_eq!(edit["annotations"]["destructiveHint"], true);
    assert!(edit["inputSchema"]["properties"]["dryRun"].is_object());
}

#[tokio::test]
async fn read_only_mode_leaves_out_every_write_tool() {
    let fx = Fixture::new();
    let mut config = fx.config();
    config.read_only = true;
    let t = fx.tools_with(config).await;
    let names = t.names().await;
    for name in WRITE_TOOLS {
        assert!(!names.contains(&name.to_owned()), "{name} is offered");
    }
    assert!(names.contains(&"read_text_file".to_owned()));
    let r = t
        .call("write_file", json!({"path": fx.p("x.txt"), "content": "x"}))
        .await;
    r.err();
    assert!(!fx.root().join("x.txt").exists());
}

#[tokio::test]
async fn read_text_file_reads_whole_files_heads_tails_and_line_windows() {
    let fx = Fixture::new();
    let t = fx.tools().await;
    let whole = t
        .call("read_text_file", json!({"path": fx.p("hello.txt")}))
        .await;
    assert!(whole.ok().starts_with("line 1\nline 2\n"));
    let head = t
        .call(
            "read_text_file",
            json!({"path": fx.p("hello.txt"), "head": 2}),
        )
        .await;
    assert_eq!(head.ok(), "line 1\nline 2");
    let tail = t
        .call(
            "read_text_file",
            json!({"path": fx.p("hello.txt"), "tail": 2}),
        )
        .await;
    assert_eq!(tail.ok(), "line 9\nline 10");
    let window = t
        .call(
            "read_text_file",
            json!({"path": fx.p("hello.txt"), "offset": 4, "limit": 2}),
        )
        .await;
    assert_eq!(window.ok(), "[showing lines 4-5 of 10]\nline 4\nline 5");
    let both = t
        .call(
            "read_text_file",
            json!({"path": fx.p("hello.txt"), "head": 1, "tail": 1}),
        )
        .await;
    assert!(both.err().contains("both head and tail"), "{}", both.text);
    // A relative path is taken under the first root.
    let rel = t.call("read_file", json!({"path": "sub/inner.txt"})).await;
    assert!(rel.ok().starts_with("inner needle"));
}

#[tokio::test]
async fn reads_are_capped_in_bytes_with_a_hint_to_page() {
    let fx = Fixture::new();
    let big: String = (0..2000).map(|i| format!("row {i:05}\n")).collect();
    std::fs::write(fx.root().join("big.txt"), &big).unwrap();
    let mut config = fx.config();
    config.max_read_bytes = 1000;
    let t = fx.tools_with(config).await;
    let whole = t
        .call("read_text_file", json!({"path": fx.p("big.txt")}))
        .await;
    let text = whole.ok();
    assert!(
        text.contains("[truncated: showing 1000 of 20000 bytes"),
        "{text}"
    );
    assert!(text.len() < 1200);
    let asked = t
        .call(
            "read_text_file",
            json!({"path": fx.p("big.txt"), "max_bytes": 20}),
        )
        .await;
    assert!(asked.ok().starts_with("row 00000\nrow 00001\n\n[truncated"));
    let window = t
        .call(
            "read_text_file",
            json!({"path": fx.p("big.txt"), "offset": 1990}),
        )
        .await;
    assert!(window
        .ok()
        .starts_with("[showing lines 1990-2000 of 2000]\nrow 01989"));
    let media = t
        .call("read_media_file", json!({"path": fx.p("big.txt")}))
        .await;
    assert!(media.err().contains("over the limit"), "{}", media.text);
}

#[tokio::test]
async fn read_media_file_returns_typed_base64_blocks() {
    let fx = Fixture::new();
    std::fs::write(fx.root().join("pixel.png"), b"\x89PNG\r\n\x1a\nfake").unwrap();
    std::fs::write(fx.root().join("data.bin"), b"\x00\x01").unwrap();
    let t = fx.tools().await;
    let png = t
        .call("read_media_file", json!({"path": fx.p("pixel.png")}))
        .await;
    png.ok();
    let block = &png.raw["content"][0];
    assert_eq!(block["type"], "image");
    assert_eq!(block["mimeType"], "image/png");
    assert_eq!(block["data"], "iVBORw0KGgpmYWtl");
    let bin = t
        .call("read_media_file", json!({"path": fx.p("data.bin")}))
        .await;
    bin.ok();
    let block = &bin.raw["content"][0];
    assert_eq!(block["type"], "resource");
    assert_eq!(block["resource"]["blob"], "AAE=");
    assert!(block["resource"]["uri"]
        .as_str()
        .unwrap()
        .starts_with("file://"));
}

#[tokio::test]
async fn read_multiple_files_reports_each_failure_and_goes_on() {
    let fx = Fixture::new();
    let t = fx.tools().await;
    let r = t
        .call(
            "read_multiple_files",
            json!({"paths": [fx.p("sub/inner.txt"), fx.p("missing.txt"), fx.p("link_out")]}),
        )
        .await;
    let text = r.ok();
    assert!(text.contains("inner needle"), "{text}");
    assert!(text.contains("missing.txt: Error - "), "{text}");
    assert!(text.contains("link_out: Error - Access denied"), "{text}");
    assert!(!text.contains("TOP SECRET"));
}

#[tokio::test]
async fn write_edit_create_move_and_delete_change_only_what_they_name() {
    let fx = Fixture::new();
    let t = fx.tools().await;
    t.call("create_directory", json!({"path": fx.p("new/a/b")}))
        .await
        .ok();
    t.call("create_directory", json!({"path": fx.p("new/a/b")}))
        .await
        .ok();
    let w = t
        .call(
            "write_file",
            json!({"path": fx.p("new/a/b/f.txt"), "content": "one\ntwo\nthree\n"}),
        )
        .await;
    assert!(w.ok().starts_with("Successfully wrote to"));
    let dry = t
        .call(
            "edit_file",
            json!({"path": fx.p("new/a/b/f.txt"), "edits": [{"oldText": "two", "newText": "TWO"}], "dryRun": true}),
        )
        .await;
    let diff = dry.ok();
    assert!(diff.starts_with("```diff\n"), "{diff}");
    assert!(diff.contains("-two\n+TWO\n"), "{diff}");
    assert_eq!(
        std::fs::read_to_string(fx.root().join("new/a/b/f.txt")).unwrap(),
        "one\ntwo\nthree\n"
    );
    t.call(
        "edit_file",
        json!({"path": fx.p("new/a/b/f.txt"), "edits": [{"oldText": "  three  ", "newText": "3"}]}),
    )
    .await
    .ok();
    assert_eq!(
        std::fs::read_to_string(fx.root().join("new/a/b/f.txt")).unwrap(),
        "one\ntwo\n3\n"
    );
    let missing = t
        .call(
            "edit_file",
            json!({"path": fx.p("new/a/b/f.txt"), "edits": [{"oldText": "zzz", "newText": "y"}]}),
        )
        .await;
    assert!(missing.err().contains("Could not find exact match"));
    let exists = t
        .call(
            "move_file",
            json!({"source": fx.p("new/a/b/f.txt"), "destination": fx.p("hello.txt")}),
        )
        .await;
    assert!(exists.err().contains("Destination already exists"));
    t.call(
        "move_file",
        json!({"source": fx.p("new/a/b/f.txt"), "destination": fx.p("new/g.txt")}),
    )
    .await
    .ok();
    assert!(fx.root().join("new/g.txt").is_file());
    let not_empty = t.call("delete_path", json!({"path": fx.p("new")})).await;
    assert!(not_empty.err().contains("recursive"), "{}", not_empty.text);
    t.call("delete_path", json!({"path": fx.p("new/g.txt")}))
        .await
        .ok();
    t.call(
        "delete_path",
        json!({"path": fx.p("new"), "recursive": true}),
    )
    .await
    .ok();
    assert!(!fx.root().join("new").exists());
    let root = t
        .call("delete_path", json!({"path": fx.p(""), "recursive": true}))
        .await;
    assert!(root.err().contains("allowed root"));
    assert!(fx.root().join("hello.txt").exists());
    // No temporary files are left behind.
    let leftovers: Vec<_> = std::fs::read_dir(fx.root())
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().contains("toolyard-tmp"))
        .collect();
    assert!(leftovers.is_empty());
}

#[tokio::test]
async fn listings_follow_the_reference_formats() {
    let fx = Fixture::new();
    let t = fx.tools().await;
    let list = t.call("list_directory", json!({"path": fx.p("sub")})).await;
    assert_eq!(list.ok(), "[FILE] blob.bin\n[DIR] deeper\n[FILE] inner.txt");
    let sizes = t
        .call(
            "list_directory_with_sizes",
            json!({"path": fx.p("sub"), "sortBy": "size"}),
        )
        .await;
    let text = sizes.ok();
    let first = text.lines().next().unwrap();
    assert!(first.starts_with("[FILE] inner.txt"), "{text}");
    assert!(first.ends_with("19 B"), "{text}");
    assert!(text.contains("Total: 2 files, 1 directories"), "{text}");
    assert!(text.contains("Combined size: 28 B"), "{text}");
    let allowed = t.call("list_allowed_directories", json!({})).await;
    assert_eq!(
        allowed.ok(),
        format!("Allowed directories:\n{}", fx.root().display())
    );
    let info = t
        .call("get_file_info", json!({"path": fx.p("hello.txt")}))
        .await;
    let info = info.ok();
    assert!(info.contains("size: 71\n"), "{info}");
    assert!(info.contains("isFile: true"), "{info}");
    assert!(info.contains("permissions: "), "{info}");
}

#[tokio::test]
async fn directory_tree_is_nested_json_within_limits() {
    let fx = Fixture::new();
    let t = fx.tools().await;
    let tree = t
        .call(
            "directory_tree",
            json!({"path": fx.p("sub"), "excludePatterns": ["*.bin"]}),
        )
        .await;
    let value: Value = serde_json::from_str(tree.ok()).unwrap();
    assert_eq!(
        value,
        json!([
            {"name": "deeper", "type": "directory", "children": [
                {"name": "deep.rs", "type": "file"}
            ]},
            {"name": "inner.txt", "type": "file"}
        ])
    );
    let mut config = fx.config();
    config.max_entries = 3;
    let small = fx.tools_with(config).await;
    let r = small
        .call("directory_tree", json!({"path": fx.p("")}))
        .await;
    assert!(r.err().contains("limit of 3 entries"), "{}", r.text);
}

#[tokio::test]
async fn search_files_matches_globs_relative_to_the_start() {
    let fx = Fixture::new();
    let t = fx.tools().await;
    let top = t
        .call(
            "search_files",
            json!({"path": fx.p(""), "pattern": "*.txt"}),
        )
        .await;
    assert_eq!(top.ok(), fx.p("hello.txt"));
    let deep = t
        .call(
            "search_files",
            json!({"path": fx.p(""), "pattern": "**/*.txt", "excludePatterns": ["sub/deeper"]}),
        )
        .await;
    let text = deep.ok();
    assert!(text.contains(&fx.p("sub/inner.txt")), "{text}");
    assert!(!text.contains("deep.rs"));
    let none = t
        .call(
            "search_files",
            json!({"path": fx.p(""), "pattern": "*.nope"}),
        )
        .await;
    assert_eq!(none.ok(), "No matches found");
    let bad = t
        .call(
            "search_files",
            json!({"path": fx.p(""), "pattern": "[z-a]"}),
        )
        .await;
    assert!(bad.err().contains("invalid glob"), "{}", bad.text);
}

#[tokio::test]
async fn grep_finds_matching_lines_and_skips_binary_files() {
    let fx = Fixture::new();
    let t = fx.tools().await;
    let r = t
        .call(
            "grep",
            json!({"path": fx.p(""), "pattern": "NEEDLE", "case_insensitive": true}),
        )
        .await;
    let text = r.ok();
    assert!(
        text.contains(&format!("{}:1:inner needle", fx.p("sub/inner.txt"))),
        "{text}"
    );
    assert!(text.contains("deep.rs:1:fn needle() {}"), "{text}");
    assert!(!text.contains("blob.bin"), "{text}");
    let only_rs = t
        .call(
            "grep",
            json!({"path": fx.p(""), "pattern": "needle", "glob": "*.rs"}),
        )
        .await;
    assert!(!only_rs.ok().contains("inner.txt"));
    let capped = t
        .call(
            "grep",
            json!({"path": fx.p(""), "pattern": "line", "max_matches": 3}),
        )
        .await;
    assert!(capped.ok().contains("[stopped after 3 matches]"));
    let bad = t
        .call("grep", json!({"path": fx.p(""), "pattern": "("}))
        .await;
    assert!(bad.err().contains("invalid regular expression"));
}

#[tokio::test]
async fn non_utf8_names_are_listed_not_fatal() {
    use std::os::unix::ffi::OsStrExt;
    let fx = Fixture::new();
    let name = std::ffi::OsStr::from_bytes(b"bad-\xff-name.txt");
    std::fs::write(fx.root().join("sub").join(name), "x").unwrap();
    let t = fx.tools().await;
    let list = t.call("list_directory", json!({"path": fx.p("sub")})).await;
    assert!(
        list.ok().contains("[FILE] bad-\u{fffd}-name.txt"),
        "{}",
        list.text
    );
}

#[tokio::test]
async fn files_are_resources_under_the_same_confinement() {
    let fx = Fixture::new();
    std::fs::write(fx.root().join("sub/with space.bin"), b"\x00\x01").unwrap();
    let t = fx.tools().await;
    let templates = t
        .request("resources/templates/list", json!({}))
        .await
        .unwrap();
    assert_eq!(
        templates["resourceTemplates"][0]["uriTemplate"],
        "file://{+path}"
    );
    let uri = format!("file://{}", fx.p("hello.txt"));
    let text = t
        .request("resources/read", json!({"uri": uri}))
        .await
        .unwrap();
    assert_eq!(text["contents"][0]["mimeType"], "text/plain");
    assert!(text["contents"][0]["text"]
        .as_str()
        .unwrap()
        .starts_with("line 1\n"));
    let uri = format!("file://{}", fx.p("sub/with%20space.bin"));
    let blob = t
        .request("resources/read", json!({"uri": uri}))
        .await
        .unwrap();
    assert_eq!(blob["contents"][0]["blob"], "AAE=");
    for outside in [
        fx.p("link_out"),
        fx.p("../outside/secret.txt"),
        "/etc/passwd".to_owned(),
    ] {
        let err = t
            .request(
                "resources/read",
                json!({"uri": format!("file://{outside}")}),
            )
            .await
            .unwrap_err();
        let message = err.to_string();
        assert!(message.contains("Access denied"), "{outside}: {message}");
        assert!(!message.contains("TOP SECRET"));
    }
}

#[tokio::test]
async fn destructive_calls_wait_for_the_users_yes_when_confirmation_is_on() {
    let fx = Fixture::new();
    let mut config = fx.config();
    config.confirm_destructive = true;
    let write = json!({"path": fx.p("asked.txt"), "content": "x"});
    // A client that cannot be asked cannot write.
    let mute = fx.tools_with(config.clone()).await;
    let r = mute.call("write_file", write.clone()).await;
    assert!(r.err().contains("cannot be asked"), "{}", r.text);
    // Declined: nothing changes.
    let no = Tools::answering(Filesystem::new(&config).unwrap(), "decline").await;
    let r = no.call("write_file", write.clone()).await;
    assert!(r.err().contains("did not allow"), "{}", r.text);
    let r = no
        .call("delete_path", json!({"path": fx.p("hello.txt")}))
        .await;
    r.err();
    assert!(!fx.root().join("asked.txt").exists());
    assert!(fx.root().join("hello.txt").exists());
    // A dry run and reads need no answer.
    no.call(
        "edit_file",
        json!({"path": fx.p("hello.txt"), "edits": [{"oldText": "line 1", "newText": "L1"}], "dryRun": true}),
    )
    .await
    .ok();
    // Accepted: done.
    let yes = Tools::answering(Filesystem::new(&config).unwrap(), "accept").await;
    yes.call("write_file", write).await.ok();
    assert!(fx.root().join("asked.txt").exists());
}
