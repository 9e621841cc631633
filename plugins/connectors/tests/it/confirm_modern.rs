//! `confirm_destructive` for a 2026-07-28 caller: the destructive tool answers
//! `input_required` with an elicitation, the client retries with `inputResponses`, and only
//! an accept changes anything (SQL `execute`, filesystem `delete_path`).

use crate::filesystem::Fixture;
use crate::peer::{modern_meta, text_of, Peer};
use crate::support::TempDir;
use serde_json::{json, Value};
use toolyard::{Controller, ServerBuilder};
use toolyard_connectors::filesystem::Filesystem;
use toolyard_connectors::sql::Sql;
use toolyard_connectors::SqlConfig;

async fn modern_peer(controller: impl Controller) -> (toolyard::Server, Peer) {
    let server = ServerBuilder::new("confirm", "0")
        .controller(controller)
        .start()
        .await
        .unwrap();
    let peer = Peer::connect(&server, "accept").await;
    (server, peer)
}

/// The first round: the tool asks for a confirmation and nothing else. Returns the round's
/// `requestState`.
async fn first_round(peer: &Peer, name: &str, arguments: &Value) -> Value {
    let r = peer
        .request(
            "tools/call",
            json!({"_meta": modern_meta(json!({"elicitation": {}})), "name": name, "arguments": arguments}),
        )
        .await
        .unwrap();
    assert_eq!(r["resultType"], "input_required", "{r}");
    let asked = &r["inputRequests"]["confirm"];
    assert_eq!(asked["method"], "elicitation/create", "{r}");
    assert!(
        asked["params"]["message"]
            .as_str()
            .unwrap()
            .starts_with("Allow this change?"),
        "{r}"
    );
    r["requestState"].clone()
}

/// The retry with the user's answer: the final result.
async fn answer(peer: &Peer, name: &str, arguments: &Value, state: Value, action: &str) -> Value {
    let r = peer
        .request(
            "tools/call",
            json!({"_meta": modern_meta(json!({"elicitation": {}})), "name": name, "arguments": arguments,
                   "requestState": state, "inputResponses": {"confirm": {"action": action}}}),
        )
        .await
        .unwrap();
    assert_eq!(r["resultType"], "complete", "{r}");
    r
}

fn rows(path: &std::path::Path) -> Vec<String> {
    let conn = rusqlite::Connection::open(path).unwrap();
    let mut stmt = conn.prepare("SELECT name FROM users ORDER BY id").unwrap();
    stmt.query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

#[tokio::test]
async fn a_modern_sql_execute_takes_a_confirmation_round_and_a_decline_changes_nothing() {
    let dir = TempDir::new("confirm-sql");
    let path = dir.path().join("app.db");
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch(
            "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT);
             INSERT INTO users VALUES (1, 'ada'), (2, 'bob');",
        )
        .unwrap();
    let mut config = SqlConfig::new(format!("sqlite:{}", path.display()));
    config.allow_writes = true;
    config.confirm_destructive = true;
    let (_server, peer) = modern_peer(Sql::new(&config).unwrap()).await;
    let args = json!({"sql": "DELETE FROM users WHERE id = 2"});
    let state = first_round(&peer, "execute", &args).await;
    // The first round changed nothing.
    assert_eq!(rows(&path), ["ada", "bob"]);
    let declined = answer(&peer, "execute", &args, state.clone(), "decline").await;
    assert_eq!(declined["isError"], true, "{declined}");
    assert!(text_of(&declined).contains("did not allow"), "{declined}");
    assert_eq!(rows(&path), ["ada", "bob"]);
    let cancelled = answer(&peer, "execute", &args, state.clone(), "cancel").await;
    assert_eq!(cancelled["isError"], true, "{cancelled}");
    assert_eq!(rows(&path), ["ada", "bob"]);
    let accepted = answer(&peer, "execute", &args, state, "accept").await;
    assert_eq!(text_of(&accepted), "1 rows affected", "{accepted}");
    assert_eq!(rows(&path), ["ada"]);
}

#[tokio::test]
async fn a_modern_delete_takes_a_confirmation_round_and_a_decline_changes_nothing() {
    let fx = Fixture::new();
    let mut config = fx.config();
    config.confirm_destructive = true;
    let (_server, peer) = modern_peer(Filesystem::new(&config).unwrap()).await;
    let args = json!({"path": fx.p("sub"), "recursive": true});
    let state = first_round(&peer, "delete_path", &args).await;
    assert!(fx.root().join("sub/inner.txt").exists());
    let declined = answer(&peer, "delete_path", &args, state.clone(), "decline").await;
    assert_eq!(declined["isError"], true, "{declined}");
    assert!(text_of(&declined).contains("did not allow"), "{declined}");
    assert!(fx.root().join("sub/deeper/deep.rs").exists());
    let accepted = answer(&peer, "delete_path", &args, state, "accept").await;
    assert_ne!(accepted["isError"], true, "{accepted}");
    assert!(!fx.root().join("sub").exists());
    // A modern caller that cannot be asked (no elicitation capability) cannot delete.
    let r = peer
        .request(
            "tools/call",
            json!({"_meta": modern_meta(json!({})), "name": "delete_path",
                   "arguments": {"path": fx.p("hello.txt")}}),
        )
        .await;
    let refused = match r {
        Ok(r) => text_of(&r),
        Err(e) => e.to_string(),
    };
    assert!(refused.contains("cannot be asked"), "{refused}");
    assert!(fx.root().join("hello.txt").exists());
}
