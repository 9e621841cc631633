//! `file://` resources with change notifications: a subscribed file's writes, deletes and
//! renames reach the subscriber (legacy `resources/subscribe` and modern
//! `subscriptions/listen`), bursts are debounced, and nothing outside the roots is watched.

use crate::filesystem::Fixture;
use crate::peer::{modern_meta, Peer};
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};
use toolyard::{Server, ServerBuilder};
use toolyard_connectors::filesystem::{FileWatch, Filesystem};
use toolyard_connectors::ConnectorsConfig;

pub(crate) fn uri(path: &Path) -> String {
    format!("file://{}", path.display())
}

pub(crate) fn updated(uri: &str) -> impl Fn(&Value) -> bool + '_ {
    move |n: &Value| n["method"] == "notifications/resources/updated" && n["params"]["uri"] == uri
}

/// A server with the filesystem connector over `fx`'s root, its watcher looking every
/// `interval_ms`.
pub(crate) async fn watched(fx: &Fixture, interval_ms: u64) -> (Server, FileWatch) {
    let mut config = fx.config();
    config.watch_interval_ms = interval_ms;
    let fs = Filesystem::new(&config).unwrap();
    let server = ServerBuilder::new("fs-watch", "0")
        .controller(fs.clone())
        .start()
        .await
        .unwrap();
    let watch = fs.watch(&server).expect("watching is on");
    (server, watch)
}

/// Appends to `path` until `peer` is told `uri` changed: the watcher takes its first look
/// some time after the subscription, and a change before that look is its baseline.
pub(crate) async fn change_until_told(peer: &Peer, path: &Path, uri: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut n = 0;
    loop {
        n += 1;
        std::fs::write(path, "x".repeat(n)).unwrap();
        if peer
            .next_note(Duration::from_millis(500), updated(uri))
            .await
            .is_some()
        {
            return;
        }
        assert!(Instant::now() < deadline, "no update for {uri} within 10 s");
    }
}

#[tokio::test]
async fn a_subscribed_file_reports_its_writes_deletes_and_renames() {
    let fx = Fixture::new();
    let (server, _watch) = watched(&fx, 20).await;
    let peer = Peer::connect(&server, "accept").await;
    peer.initialize(json!({})).await;
    let file = fx.root().join("watched.txt");
    std::fs::write(&file, "v0").unwrap();
    let file_uri = uri(&file);
    peer.request("resources/subscribe", json!({"uri": file_uri}))
        .await
        .unwrap();
    change_until_told(&peer, &file, &file_uri).await;
    let within = Duration::from_secs(5);
    // A delete.
    std::fs::remove_file(&file).unwrap();
    assert!(
        peer.next_note(within, updated(&file_uri)).await.is_some(),
        "delete"
    );
    // A rename onto the path (how editors save).
    std::fs::write(fx.root().join("next.txt"), "v2").unwrap();
    std::fs::rename(fx.root().join("next.txt"), &file).unwrap();
    assert!(
        peer.next_note(within, updated(&file_uri)).await.is_some(),
        "rename onto"
    );
    // A rename away.
    std::fs::rename(&file, fx.root().join("gone.txt")).unwrap();
    assert!(
        peer.next_note(within, updated(&file_uri)).await.is_some(),
        "rename away"
    );
    // The notification names a resource the client can read again.
    std::fs::write(&file, "v3").unwrap();
    peer.next_note(within, updated(&file_uri)).await.unwrap();
    let read = peer
        .request("resources/read", json!({"uri": file_uri}))
        .await
        .unwrap();
    assert_eq!(read["contents"][0]["text"], "v3");
    // Unsubscribed: no more notifications (the next one seen is for another file).
    peer.request("resources/unsubscribe", json!({"uri": file_uri}))
        .await
        .unwrap();
    let other = fx.root().join("other.txt");
    let other_uri = uri(&other);
    peer.request("resources/subscribe", json!({"uri": other_uri}))
        .await
        .unwrap();
    std::fs::write(&file, "v4 unwatched").unwrap();
    change_until_told(&peer, &other, &other_uri).await;
    assert!(
        peer.next_note(Duration::from_millis(200), updated(&file_uri))
            .await
            .is_none(),
        "an unsubscribed file was reported"
    );
}

#[tokio::test]
async fn a_burst_of_writes_is_reported_once() {
    let fx = Fixture::new();
    // Looks 150 ms apart: a burst of writes in a tight loop ends well within one interval.
    let (server, _watch) = watched(&fx, 150).await;
    let peer = Peer::connect(&server, "accept").await;
    peer.initialize(json!({})).await;
    let (burst, marker) = (fx.root().join("burst.txt"), fx.root().join("marker.txt"));
    let (burst_uri, marker_uri) = (uri(&burst), uri(&marker));
    for u in [&burst_uri, &marker_uri] {
        peer.request("resources/subscribe", json!({"uri": u}))
            .await
            .unwrap();
    }
    // Both watched from here on.
    change_until_told(&peer, &marker, &marker_uri).await;
    for i in 0..50 {
        std::fs::write(&burst, format!("write {i} {}", "y".repeat(i))).unwrap();
    }
    let within = Duration::from_secs(5);
    assert!(peer.next_note(within, updated(&burst_uri)).await.is_some());
    // The marker changes after the burst was reported; any second report of the burst
    // would come before the marker's.
    std::fs::write(&marker, "after the burst").unwrap();
    let next = peer
        .next_note(within, |n| n["method"] == "notifications/resources/updated")
        .await
        .unwrap();
    assert_eq!(
        next["params"]["uri"], marker_uri,
        "the burst was reported twice"
    );
}

#[tokio::test]
async fn files_outside_the_roots_are_refused_and_never_watched_even_through_a_symlink() {
    let fx = Fixture::new();
    let (server, _watch) = watched(&fx, 20).await;
    let peer = Peer::connect(&server, "accept").await;
    peer.initialize(json!({})).await;
    let secret = fx.base().join("outside/secret.txt");
    let evil = fx.base().join("root-evil/evil.txt");
    let outside = [uri(&secret), uri(&fx.root().join("link_out")), uri(&evil)];
    for u in &outside {
        let refused = peer
            .request("resources/subscribe", json!({"uri": u}))
            .await
            .expect_err("a subscription outside the roots is refused");
        assert!(
            refused["message"]
                .as_str()
                .is_some_and(|m| m.contains("Access denied")),
            "{u}: {refused}"
        );
    }
    let inside = fx.root().join("inside.txt");
    let inside_uri = uri(&inside);
    peer.request("resources/subscribe", json!({"uri": inside_uri}))
        .await
        .unwrap();
    change_until_told(&peer, &inside, &inside_uri).await;
    // The outside files change first, then the inside one: a report of an outside file
    // would come no later than the inside one's.
    std::fs::write(&secret, "CHANGED SECRET, longer").unwrap();
    std::fs::write(&evil, "CHANGED EVIL, longer").unwrap();
    std::fs::write(&inside, "changed after them").unwrap();
    let next = peer
        .next_note(Duration::from_secs(5), |n| {
            n["method"] == "notifications/resources/updated"
        })
        .await
        .unwrap();
    assert_eq!(next["params"]["uri"], inside_uri, "{next}");
}

#[tokio::test]
async fn a_modern_listener_configured_from_the_file_hears_of_its_file_changing() {
    let fx = Fixture::new();
    let toml = format!(
        "[connectors.filesystem]\nroots = [\"{}\"]\nwatch_interval_ms = 20\n",
        fx.root().display()
    );
    let config = ConnectorsConfig::parse(&toml).unwrap();
    let (builder, watchers) = config
        .install_watched(ServerBuilder::new("fs-watch", "0"))
        .unwrap();
    let server = builder.start().await.unwrap();
    let _watching = watchers.start(&server);
    let peer = Peer::connect(&server, "accept").await;
    let file = fx.root().join("sub/inner.txt");
    let file_uri = uri(&file);
    let _stream = peer.send(
        "subscriptions/listen",
        json!({"_meta": modern_meta(json!({})), "notifications": {"resourceSubscriptions": [file_uri]}}),
    );
    peer.next_note(Duration::from_secs(5), |n| {
        n["method"] == "notifications/subscriptions/acknowledged"
    })
    .await
    .expect("the listen stream is acknowledged");
    change_until_told(&peer, &file, &file_uri).await;
    // Each stream's notifications carry its subscription id.
    std::fs::remove_file(&file).unwrap();
    let note = peer
        .next_note(Duration::from_secs(5), updated(&file_uri))
        .await
        .unwrap();
    assert!(
        note["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"].is_string()
            || note["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"].is_number(),
        "{note}"
    );
}

#[tokio::test]
async fn watching_stops_with_the_server_and_can_be_off() {
    let fx = Fixture::new();
    let (server, watch) = watched(&fx, 20).await;
    server.shutdown();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !watch.is_finished() {
        assert!(Instant::now() < deadline, "the watcher outlived the server");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut config = fx.config();
    config.watch_interval_ms = 0;
    assert!(Filesystem::new(&config).unwrap().watch(&server).is_none());
}
