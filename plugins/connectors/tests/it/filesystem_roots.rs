//! Client roots narrow the operator's: the effective directories are the intersection, asked
//! with `roots/list` and asked again after `notifications/roots/list_changed`; a client
//! root outside every operator root never widens anything.

use crate::filesystem::Fixture;
use crate::peer::{modern_meta, text_of, Peer};
use serde_json::json;
use std::path::Path;
use std::sync::atomic::Ordering;
use toolyard::ServerBuilder;
use toolyard_connectors::filesystem::Filesystem;

fn uri(path: &Path) -> String {
    format!("file://{}", path.display())
}

/// A legacy client declaring the `roots` capability with these roots.
async fn client_with_roots(fx: &Fixture, roots: &[&Path]) -> (toolyard::Server, Peer) {
    let server = ServerBuilder::new("fs-roots", "0")
        .controller(Filesystem::new(&fx.config()).unwrap())
        .start()
        .await
        .unwrap();
    let peer = Peer::connect(&server, "accept").await;
    *peer.roots.lock().unwrap() = roots.iter().map(|p| uri(p)).collect();
    peer.initialize(json!({"roots": {"listChanged": true}}))
        .await;
    (server, peer)
}

#[tokio::test]
async fn a_client_root_inside_the_operator_root_narrows_it_and_siblings_are_refused() {
    let fx = Fixture::new();
    let sub = fx.root().join("sub");
    // A symlink inside the client's root to a sibling inside the operator's root.
    std::os::unix::fs::symlink("../hello.txt", sub.join("up")).unwrap();
    let (_server, peer) = client_with_roots(&fx, &[&sub]).await;
    let (failed, text) = peer
        .call("read_text_file", json!({"path": fx.p("sub/inner.txt")}))
        .await;
    assert!(!failed && text.contains("inner needle"), "{text}");
    let (failed, text) = peer
        .call("read_text_file", json!({"path": fx.p("hello.txt")}))
        .await;
    assert!(failed && text.contains("Access denied"), "{text}");
    assert!(!text.contains("line 1"), "{text}");
    let (failed, text) = peer
        .call("read_text_file", json!({"path": fx.p("sub/up")}))
        .await;
    assert!(
        failed && !text.contains("line 1"),
        "the symlink was followed: {text}"
    );
    let (failed, text) = peer
        .call("read_text_file", json!({"path": fx.p("sub/../hello.txt")}))
        .await;
    assert!(failed && !text.contains("line 1"), "{text}");
    // Relative paths are under the client's root.
    let (failed, text) = peer
        .call("read_text_file", json!({"path": "inner.txt"}))
        .await;
    assert!(!failed && text.contains("inner needle"), "{text}");
    // Writes are narrowed too.
    let (failed, _) = peer
        .call(
            "write_file",
            json!({"path": fx.p("new.txt"), "content": "x"}),
        )
        .await;
    assert!(failed);
    assert!(!fx.root().join("new.txt").exists());
    // The file:// resource as well.
    let read = peer
        .request(
            "resources/read",
            json!({"uri": uri(&fx.root().join("hello.txt"))}),
        )
        .await;
    assert!(read.is_err(), "{read:?}");
    // list_allowed_directories reports the effective set.
    let (_, listed) = peer.call("list_allowed_directories", json!({})).await;
    assert_eq!(listed, format!("Allowed directories:\n{}", sub.display()));
}

#[tokio::test]
async fn a_client_root_outside_every_operator_root_is_ignored_and_never_widens() {
    let fx = Fixture::new();
    let outside = fx.base().join("outside");
    let evil = fx.base().join("root-evil");
    let sub = fx.root().join("sub");
    let (_server, peer) = client_with_roots(&fx, &[&outside, &evil, &sub]).await;
    for path in [outside.join("secret.txt"), evil.join("evil.txt")] {
        let (failed, text) = peer
            .call(
                "read_text_file",
                json!({"path": path.display().to_string()}),
            )
            .await;
        assert!(failed && text.contains("Access denied"), "{text}");
    }
    let (_, listed) = peer.call("list_allowed_directories", json!({})).await;
    assert_eq!(listed, format!("Allowed directories:\n{}", sub.display()));

    // Only outside roots: the intersection is empty, and nothing is reachable.
    let (_server, peer) = client_with_roots(&fx, &[&outside]).await;
    let (failed, text) = peer
        .call("read_text_file", json!({"path": fx.p("hello.txt")}))
        .await;
    assert!(failed && text.contains("Access denied"), "{text}");
    let (failed, text) = peer
        .call(
            "read_text_file",
            json!({"path": outside.join("secret.txt").display().to_string()}),
        )
        .await;
    assert!(failed && !text.contains("TOP SECRET"), "{text}");
    let (_, listed) = peer.call("list_allowed_directories", json!({})).await;
    assert!(listed.starts_with("Allowed directories: none"), "{listed}");
}

#[tokio::test]
async fn a_client_root_above_the_operator_root_leaves_it_whole_and_an_empty_list_narrows_nothing() {
    let fx = Fixture::new();
    let (_server, peer) = client_with_roots(&fx, &[fx.base()]).await;
    let (failed, text) = peer
        .call("read_text_file", json!({"path": fx.p("hello.txt")}))
        .await;
    assert!(!failed && text.contains("line 1"), "{text}");
    let secret = fx.base().join("outside/secret.txt");
    let (failed, _) = peer
        .call(
            "read_text_file",
            json!({"path": secret.display().to_string()}),
        )
        .await;
    assert!(failed, "the client's wider root widened the operator's");
    let (_, listed) = peer.call("list_allowed_directories", json!({})).await;
    assert_eq!(
        listed,
        format!("Allowed directories:\n{}", fx.root().display())
    );

    let (_server, peer) = client_with_roots(&fx, &[]).await;
    let (_, listed) = peer.call("list_allowed_directories", json!({})).await;
    assert_eq!(
        listed,
        format!("Allowed directories:\n{}", fx.root().display())
    );
}

#[tokio::test]
async fn roots_are_asked_once_and_again_after_list_changed() {
    let fx = Fixture::new();
    let sub = fx.root().join("sub");
    let deeper = sub.join("deeper");
    let (_server, peer) = client_with_roots(&fx, &[&sub]).await;
    for _ in 0..3 {
        let (failed, _) = peer
            .call("read_text_file", json!({"path": fx.p("sub/inner.txt")}))
            .await;
        assert!(!failed);
    }
    assert_eq!(peer.roots_asked.load(Ordering::SeqCst), 1);
    // The client narrows further and says so.
    *peer.roots.lock().unwrap() = vec![uri(&deeper)];
    peer.notify("notifications/roots/list_changed");
    let (failed, text) = peer
        .call("read_text_file", json!({"path": fx.p("sub/inner.txt")}))
        .await;
    assert!(failed && text.contains("Access denied"), "{text}");
    let (failed, text) = peer
        .call(
            "read_text_file",
            json!({"path": fx.p("sub/deeper/deep.rs")}),
        )
        .await;
    assert!(!failed && text.contains("needle"), "{text}");
    assert_eq!(peer.roots_asked.load(Ordering::SeqCst), 2);
    let (_, listed) = peer.call("list_allowed_directories", json!({})).await;
    assert_eq!(
        listed,
        format!("Allowed directories:\n{}", deeper.display())
    );
}

#[tokio::test]
async fn without_the_roots_capability_or_from_a_modern_caller_the_operator_roots_apply() {
    let fx = Fixture::new();
    let server = ServerBuilder::new("fs-roots", "0")
        .controller(Filesystem::new(&fx.config()).unwrap())
        .start()
        .await
        .unwrap();
    let legacy = Peer::connect(&server, "accept").await;
    *legacy.roots.lock().unwrap() = vec![uri(&fx.root().join("sub"))];
    legacy.initialize(json!({})).await;
    let (failed, text) = legacy
        .call("read_text_file", json!({"path": fx.p("hello.txt")}))
        .await;
    assert!(!failed, "{text}");
    assert_eq!(legacy.roots_asked.load(Ordering::SeqCst), 0);
    // 2026-07-28 deprecates roots: no input round, the operator's roots.
    let modern = Peer::connect(&server, "accept").await;
    let r = modern
        .request(
            "tools/call",
            json!({"_meta": modern_meta(json!({"roots": {}})), "name": "read_text_file",
                   "arguments": {"path": fx.p("hello.txt")}}),
        )
        .await
        .unwrap();
    assert_eq!(r["resultType"], "complete", "{r}");
    assert!(text_of(&r).contains("line 1"), "{r}");
}
