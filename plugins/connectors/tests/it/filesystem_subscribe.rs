//! Subscriptions to `file://` resources are checked like reads: a client whose roots narrow
//! the operator's cannot subscribe (legacy `resources/subscribe`) to a file outside its own
//! roots, so it never learns that such a file changed; a modern `subscriptions/listen` naming
//! a file outside the operator's roots is refused; and when a legacy client's roots narrow
//! further, its subscriptions now outside them stop delivering.

use crate::filesystem::Fixture;
use crate::filesystem_watch::{change_until_told, updated, uri, watched};
use crate::peer::{modern_meta, Peer};
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The refusal's code and message: those of a `resources/read` of the same file.
fn assert_refused_like_a_read(refused: &Value, read: &Value) {
    assert_eq!(refused["code"], read["code"], "{refused} vs {read}");
    assert!(
        refused["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("Access denied")),
        "{refused}"
    );
}

/// The next `notifications/resources/updated`, whichever file it names.
async fn next_update(peer: &Peer) -> Value {
    peer.next_note(Duration::from_secs(5), |n| {
        n["method"] == "notifications/resources/updated"
    })
    .await
    .expect("an update within 5 s")
}

#[tokio::test]
async fn a_narrowed_legacy_client_is_refused_files_outside_its_roots_and_never_told_they_changed() {
    let fx = Fixture::new();
    let (server, _watch) = watched(&fx, 20).await;
    let sub = fx.root().join("sub");
    // Inside the client's root, pointing at a file outside it (inside the operator's).
    std::os::unix::fs::symlink("../hello.txt", sub.join("up")).unwrap();
    let peer = Peer::connect(&server, "accept").await;
    *peer.roots.lock().unwrap() = vec![uri(&sub)];
    peer.initialize(json!({"roots": {"listChanged": true}}))
        .await;

    let hello_uri = uri(&fx.root().join("hello.txt"));
    let read = peer
        .request("resources/read", json!({"uri": hello_uri}))
        .await
        .expect_err("reading outside the client's roots is refused");
    for outside in [hello_uri.clone(), uri(&sub.join("up"))] {
        let refused = peer
            .request("resources/subscribe", json!({"uri": outside}))
            .await
            .expect_err("subscribing outside the client's roots is refused");
        assert_refused_like_a_read(&refused, &read);
    }
    // The session survives, and a file inside its roots is subscribed to and reported.
    let inner = sub.join("inner.txt");
    let inner_uri = uri(&inner);
    peer.request("resources/subscribe", json!({"uri": inner_uri}))
        .await
        .expect("a file inside the client's roots may be subscribed to");
    // So is one that does not exist yet: its creation is a change.
    let later = sub.join("later.txt");
    let later_uri = uri(&later);
    peer.request("resources/subscribe", json!({"uri": later_uri}))
        .await
        .expect("a file to be created inside the client's roots may be subscribed to");
    change_until_told(&peer, &inner, &inner_uri).await;
    // The outside file changes first; a report of it would come before the inside one's.
    std::fs::write(
        fx.root().join("hello.txt"),
        "changed outside the client's roots",
    )
    .unwrap();
    std::fs::write(&inner, "changed after it").unwrap();
    let next = next_update(&peer).await;
    assert_eq!(next["params"]["uri"], inner_uri, "{next}");
    std::fs::write(&later, "created").unwrap();
    assert_eq!(next_update(&peer).await["params"]["uri"], later_uri);
    // The roots were asked once, for all of it.
    assert_eq!(peer.roots_asked.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_modern_listen_naming_a_file_outside_the_roots_is_refused_and_not_acknowledged() {
    let fx = Fixture::new();
    let (server, _watch) = watched(&fx, 20).await;
    let peer = Peer::connect(&server, "accept").await;
    let inside_uri = uri(&fx.root().join("sub/inner.txt"));
    let secret = fx.base().join("outside/secret.txt");
    let secret_uri = uri(&secret);
    // Roots are declared but, in 2026-07-28, never asked: the operator's roots apply.
    let meta = modern_meta(json!({"roots": {}}));
    let read = peer
        .request("resources/read", json!({"_meta": meta, "uri": secret_uri}))
        .await
        .expect_err("reading outside the roots is refused");
    let refused = peer
        .request(
            "subscriptions/listen",
            json!({"_meta": meta, "notifications": {
                "resourceSubscriptions": [inside_uri, secret_uri],
                "toolsListChanged": true,
            }}),
        )
        .await
        .expect_err("a listen naming a file outside the roots is refused");
    assert_refused_like_a_read(&refused, &read);
    assert!(
        peer.next_note(Duration::from_millis(300), |n| {
            n["method"] == "notifications/subscriptions/acknowledged"
        })
        .await
        .is_none(),
        "a refused listen was acknowledged"
    );
    // Nothing was recorded: the secret's changes reach no one.
    std::fs::write(&secret, "CHANGED SECRET, longer").unwrap();
    assert!(
        peer.next_note(Duration::from_millis(300), updated(&secret_uri))
            .await
            .is_none(),
        "a refused listen heard of the secret"
    );
    assert_eq!(peer.roots_asked.load(Ordering::SeqCst), 0);
    // The same connection listens to the inside file alone.
    let _stream = peer.send(
        "subscriptions/listen",
        json!({"_meta": meta, "notifications": {"resourceSubscriptions": [inside_uri]}}),
    );
    peer.next_note(Duration::from_secs(5), |n| {
        n["method"] == "notifications/subscriptions/acknowledged"
    })
    .await
    .expect("an inside listen is acknowledged");
    change_until_told(&peer, &fx.root().join("sub/inner.txt"), &inside_uri).await;
}

#[tokio::test]
async fn subscriptions_outside_a_legacy_clients_narrowed_roots_stop_when_its_roots_change() {
    let fx = Fixture::new();
    let (server, _watch) = watched(&fx, 20).await;
    let sub = fx.root().join("sub");
    let deeper = sub.join("deeper");
    let peer = Peer::connect(&server, "accept").await;
    *peer.roots.lock().unwrap() = vec![uri(&sub)];
    peer.initialize(json!({"roots": {"listChanged": true}}))
        .await;
    let (inner, deep) = (sub.join("inner.txt"), deeper.join("deep.rs"));
    let (inner_uri, deep_uri) = (uri(&inner), uri(&deep));
    for u in [&inner_uri, &deep_uri] {
        peer.request("resources/subscribe", json!({"uri": u}))
            .await
            .unwrap();
    }
    change_until_told(&peer, &inner, &inner_uri).await;
    change_until_told(&peer, &deep, &deep_uri).await;
    // The client narrows to `deeper`: `inner.txt` is now outside its roots.
    *peer.roots.lock().unwrap() = vec![uri(&deeper)];
    peer.notify("notifications/roots/list_changed");
    // Answered only once the connection's earlier subscription changes, the check that
    // follows the new roots included, took effect.
    peer.request(
        "resources/unsubscribe",
        json!({"uri": uri(&fx.root().join("never-subscribed.txt"))}),
    )
    .await
    .unwrap();
    std::fs::write(&inner, "changed outside the new roots").unwrap();
    std::fs::write(&deep, "changed inside them, after").unwrap();
    let next = next_update(&peer).await;
    assert_eq!(next["params"]["uri"], deep_uri, "{next}");
    // Subscribing to it again is refused now.
    let refused = peer
        .request("resources/subscribe", json!({"uri": inner_uri}))
        .await
        .expect_err("refused under the narrower roots");
    assert!(
        refused["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("Access denied")),
        "{refused}"
    );
}

#[tokio::test]
async fn a_missing_file_that_becomes_a_symlink_out_of_the_clients_roots_is_never_reported() {
    let fx = Fixture::new();
    let (server, _watch) = watched(&fx, 20).await;
    let sub = fx.root().join("sub");
    let peer = Peer::connect(&server, "accept").await;
    *peer.roots.lock().unwrap() = vec![uri(&sub)];
    peer.initialize(json!({"roots": {"listChanged": true}}))
        .await;
    let inner = sub.join("inner.txt");
    let inner_uri = uri(&inner);
    let trap = sub.join("trap.txt");
    for u in [&inner_uri, &uri(&trap)] {
        peer.request("resources/subscribe", json!({"uri": u}))
            .await
            .expect("files inside the client's roots, existing or not, may be subscribed to");
    }
    change_until_told(&peer, &inner, &inner_uri).await;
    // The missing file becomes a symlink to a file outside the client's roots (inside the
    // operator's), which then changes: checked again at delivery, neither is reported.
    std::os::unix::fs::symlink("../hello.txt", &trap).unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    std::fs::write(
        fx.root().join("hello.txt"),
        "changed outside the client's roots",
    )
    .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    std::fs::write(&inner, "changed after it").unwrap();
    let next = next_update(&peer).await;
    assert_eq!(next["params"]["uri"], inner_uri, "{next}");
}
