//! The filesystem connector under attack: each fixture of the tree in `filesystem::Fixture`
//! (sibling-prefix directories, `..`, symlinks out to files and directories, dangling ones,
//! NUL bytes, a symlink swapped in during reads) must neither read nor write outside the
//! root, and no error may show a host path outside it.

use crate::filesystem::Fixture;
use crate::support::Tools;
use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use toolyard_connectors::filesystem::Filesystem;
use toolyard_connectors::{ConnectorError, FilesystemConfig};

const SECRET: &str = "TOP SECRET";

/// Every error text must leave out where the outside things are.
fn assert_no_host_paths(fx: &Fixture, text: &str) {
    let outside = fx.base().join("outside").display().to_string();
    assert!(!text.contains(&outside), "leaks {outside}: {text}");
    assert!(!text.contains("root-evil"), "leaks root-evil: {text}");
    assert!(
        !text.contains("nonexistent-toolyard-target"),
        "leaks a link target: {text}"
    );
    assert!(!text.contains(SECRET), "leaks the secret: {text}");
}

#[tokio::test]
async fn a_sibling_directory_sharing_the_roots_prefix_is_refused() {
    let fx = Fixture::new();
    let t = fx.tools().await;
    let evil = fx.base().join("root-evil/evil.txt").display().to_string();
    let r = t.call("read_text_file", json!({"path": evil})).await;
    assert!(
        r.err().contains("outside the allowed directories"),
        "{}",
        r.text
    );
    assert_no_host_paths(&fx, &r.text);
    let w = t
        .call(
            "write_file",
            json!({"path": fx.base().join("root-evil/new.txt"), "content": "x"}),
        )
        .await;
    w.err();
    assert!(!fx.base().join("root-evil/new.txt").exists());
    let l = t
        .call(
            "list_directory",
            json!({"path": format!("{}-evil", fx.root().display())}),
        )
        .await;
    l.err();
}

#[tokio::test]
async fn dot_dot_segments_cannot_climb_out_of_the_root() {
    let fx = Fixture::new();
    let t = fx.tools().await;
    for path in [
        format!("{}/../outside/secret.txt", fx.root().display()),
        format!("{}/sub/../../outside/secret.txt", fx.root().display()),
        "../outside/secret.txt".to_owned(),
        "sub/../../outside/secret.txt".to_owned(),
        format!("{}/../root-evil/evil.txt", fx.root().display()),
    ] {
        let r = t.call("read_text_file", json!({"path": path})).await;
        assert!(r.err().contains("Access denied"), "{path}: {}", r.text);
        assert_no_host_paths(&fx, &r.text);
    }
    // `..` that stays inside is fine.
    let inside = t
        .call(
            "read_text_file",
            json!({"path": fx.p("sub/../hello.txt"), "head": 1}),
        )
        .await;
    assert_eq!(inside.ok(), "line 1");
    let w = t
        .call(
            "write_file",
            json!({"path": "../outside/new.txt", "content": "x"}),
        )
        .await;
    w.err();
    assert!(!fx.base().join("outside/new.txt").exists());
}

#[tokio::test]
async fn a_symlink_to_a_file_outside_is_never_read() {
    let fx = Fixture::new();
    let t = fx.tools().await;
    for link in ["link_out", "link_out_abs"] {
        for (tool, args) in [
            ("read_text_file", json!({"path": fx.p(link)})),
            ("read_text_file", json!({"path": fx.p(link), "tail": 1})),
            ("read_media_file", json!({"path": fx.p(link)})),
            ("get_file_info", json!({"path": fx.p(link)})),
            ("grep", json!({"path": fx.p(link), "pattern": "SECRET"})),
            (
                "edit_file",
                json!({"path": fx.p(link), "edits": [{"oldText": "TOP", "newText": "X"}], "dryRun": true}),
            ),
        ] {
            let r = t.call(tool, args).await;
            assert!(
                r.err().contains("Access denied"),
                "{tool} {link}: {}",
                r.text
            );
            assert_no_host_paths(&fx, &r.text);
        }
    }
    // A directory walk does not follow it either.
    let grep = t
        .call("grep", json!({"path": fx.p(""), "pattern": "SECRET"}))
        .await;
    assert_eq!(grep.ok(), "No matches found");
    // A symlink that stays inside is followed.
    let inside = t
        .call(
            "read_text_file",
            json!({"path": fx.p("link_in"), "head": 1}),
        )
        .await;
    assert_eq!(inside.ok(), "line 1");
}

#[tokio::test]
async fn writing_through_a_symlink_replaces_the_link_and_never_touches_its_target() {
    let fx = Fixture::new();
    let t = fx.tools().await;
    for link in ["link_out", "link_out_abs", "dangling_out", "dangling_abs"] {
        let r = t
            .call(
                "write_file",
                json!({"path": fx.p(link), "content": "replaced"}),
            )
            .await;
        r.ok();
        let meta = std::fs::symlink_metadata(fx.root().join(link)).unwrap();
        assert!(meta.is_file(), "{link} is still a symlink");
    }
    assert_eq!(
        std::fs::read_to_string(fx.base().join("outside/secret.txt")).unwrap(),
        SECRET
    );
    assert!(!fx.base().join("outside/missing.txt").exists());
    assert!(!std::path::Path::new("/nonexistent-toolyard-target").exists());
}

#[tokio::test]
async fn a_symlink_to_a_directory_outside_cannot_be_entered() {
    let fx = Fixture::new();
    let t = fx.tools().await;
    let calls = [
        ("list_directory", json!({"path": fx.p("link_out_dir")})),
        ("directory_tree", json!({"path": fx.p("link_out_dir")})),
        (
            "read_text_file",
            json!({"path": fx.p("link_out_dir/secret.txt")}),
        ),
        (
            "search_files",
            json!({"path": fx.p("link_out_dir"), "pattern": "*"}),
        ),
        (
            "write_file",
            json!({"path": fx.p("link_out_dir/new.txt"), "content": "x"}),
        ),
        (
            "create_directory",
            json!({"path": fx.p("link_out_dir/made")}),
        ),
        (
            "delete_path",
            json!({"path": fx.p("link_out_dir/secret.txt")}),
        ),
        (
            "move_file",
            json!({"source": fx.p("hello.txt"), "destination": fx.p("link_out_dir/moved.txt")}),
        ),
        (
            "move_file",
            json!({"source": fx.p("link_out_dir/secret.txt"), "destination": fx.p("stolen.txt")}),
        ),
    ];
    for (tool, args) in calls {
        let r = t.call(tool, args).await;
        assert!(r.err().contains("Access denied"), "{tool}: {}", r.text);
        assert_no_host_paths(&fx, &r.text);
    }
    let outside: Vec<_> = std::fs::read_dir(fx.base().join("outside"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(outside, vec![std::ffi::OsString::from("secret.txt")]);
    assert!(fx.root().join("hello.txt").exists());
    assert!(!fx.root().join("stolen.txt").exists());
    // The tree lists the link as a file and does not descend into it.
    let tree = t.call("directory_tree", json!({"path": fx.p("")})).await;
    assert!(!tree.ok().contains("secret.txt"));
}

#[tokio::test]
async fn dangling_symlinks_are_refused_for_reading() {
    let fx = Fixture::new();
    let t = fx.tools().await;
    for link in ["dangling_out", "dangling_abs"] {
        let r = t.call("read_text_file", json!({"path": fx.p(link)})).await;
        assert!(r.err().contains("Access denied"), "{link}: {}", r.text);
        assert_no_host_paths(&fx, &r.text);
    }
    let r = t
        .call("read_text_file", json!({"path": fx.p("dangling_in")}))
        .await;
    assert!(r.err().contains("no such file"), "{}", r.text);
}

#[tokio::test]
async fn deleting_a_symlink_removes_the_link_not_its_target() {
    let fx = Fixture::new();
    let t = fx.tools().await;
    t.call("delete_path", json!({"path": fx.p("link_out")}))
        .await
        .ok();
    t.call(
        "delete_path",
        json!({"path": fx.p("link_out_dir"), "recursive": true}),
    )
    .await
    .ok();
    assert!(std::fs::symlink_metadata(fx.root().join("link_out")).is_err());
    assert_eq!(
        std::fs::read_to_string(fx.base().join("outside/secret.txt")).unwrap(),
        SECRET
    );
}

#[tokio::test]
async fn nul_bytes_and_empty_paths_are_refused_as_arguments() {
    let fx = Fixture::new();
    let t = fx.tools().await;
    let r = t
        .call(
            "read_text_file",
            json!({"path": format!("{}\u{0}.txt", fx.p("hello"))}),
        )
        .await;
    assert!(r.err().contains("NUL"), "{}", r.text);
    let r = t.call("read_text_file", json!({"path": ""})).await;
    assert!(r.err().contains("empty"), "{}", r.text);
    let r = t.call("read_text_file", json!({"path": 42})).await;
    r.err();
}

#[tokio::test]
async fn a_symlink_swapped_in_during_reads_never_leaks_the_outside_file() {
    let fx = Fixture::new();
    let t = fx.tools().await;
    let swap = fx.root().join("swap");
    std::fs::write(fx.root().join("swap-inside"), "harmless").unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let flipper = {
        let stop = stop.clone();
        let swap = swap.clone();
        // Relative targets: the root's capability refuses absolute symlinks outright, which
        // would make the race trivially safe.
        let inside = std::path::PathBuf::from("swap-inside");
        let secret = std::path::PathBuf::from("../outside/secret.txt");
        std::thread::spawn(move || {
            let tmp = swap.with_extension("tmp");
            let mut outward = false;
            while !stop.load(Ordering::Relaxed) {
                let _ = std::fs::remove_file(&tmp);
                let target = if outward { &secret } else { &inside };
                if std::os::unix::fs::symlink(target, &tmp).is_ok() {
                    let _ = std::fs::rename(&tmp, &swap);
                }
                outward = !outward;
            }
        })
    };
    let mut harmless = 0;
    for _ in 0..300 {
        let r = t
            .call("read_text_file", json!({"path": fx.p("swap")}))
            .await;
        assert!(
            !r.text.contains(SECRET),
            "the outside file leaked: {}",
            r.text
        );
        if !r.is_error {
            harmless += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    flipper.join().unwrap();
    assert!(harmless > 0, "no read went through at all");
}

#[tokio::test]
async fn a_root_that_is_missing_or_a_file_is_refused_at_start() {
    let fx = Fixture::new();
    let missing = FilesystemConfig::new(vec![fx.base().join("nope")]);
    assert!(matches!(
        Filesystem::new(&missing),
        Err(ConnectorError::Config { .. })
    ));
    let file = FilesystemConfig::new(vec![fx.root().join("hello.txt")]);
    assert!(Filesystem::new(&file).is_err());
    let none = FilesystemConfig::new(vec![]);
    assert!(Filesystem::new(&none).is_err());
}

#[tokio::test]
async fn a_path_under_a_symlinked_root_resolves_by_either_spelling() {
    let fx = Fixture::new();
    let alias = fx.base().join("alias");
    std::os::unix::fs::symlink(fx.root(), &alias).unwrap();
    let t =
        Tools::with(Filesystem::new(&FilesystemConfig::new(vec![alias.clone()])).unwrap()).await;
    let by_alias = t
        .call(
            "read_text_file",
            json!({"path": alias.join("hello.txt"), "head": 1}),
        )
        .await;
    assert_eq!(by_alias.ok(), "line 1");
    let by_real = t
        .call(
            "read_text_file",
            json!({"path": fx.p("hello.txt"), "head": 1}),
        )
        .await;
    assert_eq!(by_real.ok(), "line 1");
    let listed = t.call("list_allowed_directories", json!({})).await;
    assert!(listed.ok().ends_with(&alias.display().to_string()));
}
