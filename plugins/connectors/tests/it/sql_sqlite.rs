//! The SQL connector on real SQLite files and in-memory databases: browsing, queries under
//! their caps, and the read-only bypass corpus, none of which may change the database.

use crate::support::{TempDir, Tools};
use serde_json::json;
use std::path::{Path, PathBuf};
use toolyard_connectors::sql::Sql;
use toolyard_connectors::SqlConfig;

fn seed(path: &Path) {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch(
        "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT NOT NULL, note TEXT DEFAULT 'none');
         INSERT INTO users (id, name) VALUES (1, 'ada'), (2, 'bob'), (3, 'cy');
         CREATE VIEW names AS SELECT name FROM users;",
    )
    .unwrap();
}

struct Db {
    dir: TempDir,
    path: PathBuf,
}

impl Db {
    fn new() -> Db {
        let dir = TempDir::new("sqlite");
        let path = dir.path().join("app.db");
        seed(&path);
        Db { dir, path }
    }

    fn url(&self) -> String {
        format!("sqlite:{}", self.path.display())
    }

    async fn tools(&self, allow_writes: bool) -> Tools {
        let mut config = SqlConfig::new(self.url());
        config.allow_writes = allow_writes;
        Tools::with(Sql::new(&config).expect("the connector starts")).await
    }

    /// What a write would change: rows, names, schema, user_version, files beside it.
    fn state(&self) -> String {
        let conn = rusqlite::Connection::open(&self.path).unwrap();
        let rows: String = conn
            .query_row("SELECT group_concat(id || name, ',') FROM users", [], |r| {
                r.get(0)
            })
            .unwrap();
        let schema: String = conn
            .query_row(
                "SELECT group_concat(sql, ';') FROM sqlite_schema",
                [],
                |r| r.get(0),
            )
            .unwrap();
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        let mut files: Vec<String> = std::fs::read_dir(self.dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| !n.ends_with("-journal") && !n.ends_with("-wal") && !n.ends_with("-shm"))
            .collect();
        files.sort();
        format!("{rows}|{schema}|{version}|{files:?}")
    }
}

#[tokio::test]
async fn sqlite_lists_schemas_and_tables_and_describes_columns() {
    let db = Db::new();
    let t = db.tools(false).await;
    assert_eq!(
        t.names().await,
        [
            "describe_table",
            "explain",
            "list_schemas",
            "list_tables",
            "query"
        ]
    );
    let schemas = t.call("list_schemas", json!({})).await;
    schemas.ok();
    assert_eq!(schemas.raw["structuredContent"][0], "main");
    let tables = t.call("list_tables", json!({})).await;
    tables.ok();
    assert_eq!(
        tables.raw["structuredContent"],
        json!([
            {"schema": "main", "name": "names", "type": "view"},
            {"schema": "main", "name": "users", "type": "table"}
        ])
    );
    let columns = t.call("describe_table", json!({"table": "users"})).await;
    columns.ok();
    assert_eq!(
        columns.raw["structuredContent"][0],
        json!({"name": "id", "type": "INTEGER", "nullable": true, "default": null, "primary_key": true})
    );
    assert_eq!(columns.raw["structuredContent"][2]["default"], "'none'");
    let injected = t
        .call(
            "describe_table",
            json!({"table": "users); DROP TABLE users; --"}),
        )
        .await;
    assert!(injected.err().contains("no table"), "{}", injected.text);
    let before = db.state();
    assert!(before.starts_with("1ada,2bob,3cy|"));
}

#[tokio::test]
async fn sqlite_query_returns_rows_in_column_order_up_to_the_cap() {
    let db = Db::new();
    let t = db.tools(false).await;
    let r = t
        .call("query", json!({"sql": "SELECT id, name, 1.5 AS f, x'00ff' AS b, NULL AS n FROM users ORDER BY id;"}))
        .await;
    r.ok();
    let rows = &r.raw["structuredContent"];
    assert_eq!(rows["columns"], json!(["id", "name", "f", "b", "n"]));
    assert_eq!(rows["rows"][0], json!([1, "ada", 1.5, "AP8=", null]));
    assert_eq!(rows["row_count"], 3);
    assert_eq!(rows["truncated"], false);
    let capped = t
        .call(
            "query",
            json!({"sql": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 50) SELECT x FROM c", "max_rows": 10}),
        )
        .await;
    capped.ok();
    assert_eq!(capped.raw["structuredContent"]["row_count"], 10);
    assert_eq!(capped.raw["structuredContent"]["truncated"], true);
    let plan = t
        .call(
            "explain",
            json!({"sql": "SELECT * FROM users WHERE id = 2"}),
        )
        .await;
    assert!(plan.ok().contains("users"), "{}", plan.text);
}

#[tokio::test]
async fn sqlite_a_query_past_its_time_limit_is_interrupted() {
    let db = Db::new();
    let t = db.tools(false).await;
    let started = std::time::Instant::now();
    let r = t
        .call(
            "query",
            json!({"sql": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c", "timeout_ms": 200}),
        )
        .await;
    assert!(r.err().contains("time limit of 200 ms"), "{}", r.text);
    assert!(started.elapsed() < std::time::Duration::from_secs(3));
}

/// Statements that try to write through the read-only `query`/`explain` tools.
fn bypasses(dir: &Path) -> Vec<String> {
    let other = dir.join("attached.db").display().to_string();
    let copy = dir.join("copy.db").display().to_string();
    vec![
        "SELECT 1; DROP TABLE users".into(),
        "SELECT * FROM users; DELETE FROM users".into(),
        "COMMIT; DROP TABLE users".into(),
        "-- a leading comment\nDELETE FROM users".into(),
        "/* a leading comment */ DROP TABLE users".into(),
        "  \n\tUPDATE users SET name = 'pwned'".into(),
        "INSERT INTO users (id, name) VALUES (9, 'x') RETURNING id".into(),
        "REPLACE INTO users (id, name) VALUES (1, 'x')".into(),
        "WITH gone AS (DELETE FROM users RETURNING id) SELECT * FROM gone".into(),
        "CREATE TABLE t2 (x)".into(),
        "CREATE TEMP TABLE t3 (x)".into(),
        "DROP VIEW names".into(),
        "ALTER TABLE users ADD COLUMN y".into(),
        "PRAGMA writable_schema = ON".into(),
        "PRAGMA query_only = OFF".into(),
        "PRAGMA user_version = 7".into(),
        "PRAGMA journal_mode = DELETE".into(),
        "SELECT * FROM pragma_user_version".into(),
        format!("ATTACH DATABASE '{other}' AS other"),
        format!("VACUUM INTO '{copy}'"),
        "SELECT load_extension('/nonexistent/ext')".into(),
        "BEGIN IMMEDIATE".into(),
        "SAVEPOINT s1".into(),
        "ANALYZE".into(),
        "REINDEX".into(),
    ]
}

#[tokio::test]
async fn sqlite_every_bypass_of_the_read_only_query_fails_to_write() {
    let db = Db::new();
    let before = db.state();
    // With allow_writes too: `query` stays read-only whatever `execute` may do.
    for allow_writes in [false, true] {
        let t = db.tools(allow_writes).await;
        for sql in bypasses(db.dir.path()) {
            let r = t.call("query", json!({"sql": sql})).await;
            let _ = r;
            assert_eq!(db.state(), before, "`{sql}` changed the database");
            let r = t.call("explain", json!({"sql": sql})).await;
            let _ = r;
            assert_eq!(db.state(), before, "explain `{sql}` changed the database");
        }
        let denied = t.call("query", json!({"sql": "DELETE FROM users"})).await;
        assert!(denied.err().contains("not authorized"), "{}", denied.text);
        let multi = t.call("query", json!({"sql": "SELECT 1; SELECT 2"})).await;
        assert!(multi.err().contains("one statement"), "{}", multi.text);
    }
}

#[tokio::test]
async fn sqlite_in_memory_queries_are_read_only_too() {
    let mut config = SqlConfig::new("sqlite::memory:");
    config.allow_writes = true;
    let t = Tools::with(Sql::new(&config).unwrap()).await;
    t.call("execute", json!({"sql": "CREATE TABLE k (v INTEGER)"}))
        .await
        .ok();
    let inserted = t
        .call("execute", json!({"sql": "INSERT INTO k VALUES (1), (2)"}))
        .await;
    assert_eq!(inserted.ok(), "2 rows affected");
    let dir = TempDir::new("sqlite-mem");
    for sql in bypasses(dir.path()) {
        let _ = t.call("query", json!({"sql": sql})).await;
    }
    let _ = t.call("query", json!({"sql": "DELETE FROM k"})).await;
    let left = t
        .call("query", json!({"sql": "SELECT count(*) AS n FROM k"}))
        .await;
    left.ok();
    assert_eq!(left.raw["structuredContent"]["rows"][0][0], 2);
    // The guards come off after each read: writes through `execute` still work.
    t.call("execute", json!({"sql": "DELETE FROM k WHERE v = 1"}))
        .await
        .ok();
    let after = t
        .call("query", json!({"sql": "SELECT count(*) FROM k"}))
        .await;
    after.ok();
    assert_eq!(after.raw["structuredContent"]["rows"][0][0], 1);
}

#[tokio::test]
async fn sqlite_writes_need_allow_writes_and_then_commit() {
    let db = Db::new();
    let read_only = db.tools(false).await;
    let r = read_only
        .call("execute", json!({"sql": "DELETE FROM users"}))
        .await;
    r.err();
    let writable = db.tools(true).await;
    let def = writable.definition("execute").await;
    assert_eq!(def["annotations"]["destructiveHint"], true);
    let r = writable
        .call(
            "execute",
            json!({"sql": "UPDATE users SET name = 'ADA' WHERE id = 1"}),
        )
        .await;
    assert_eq!(r.ok(), "1 rows affected");
    assert!(db.state().starts_with("1ADA,"));
    let multi = writable
        .call(
            "execute",
            json!({"sql": "DELETE FROM users WHERE id = 2; DELETE FROM users"}),
        )
        .await;
    multi.err();
    let other = db.dir.path().join("attached.db").display().to_string();
    let attach = writable
        .call(
            "execute",
            json!({"sql": format!("ATTACH DATABASE '{other}' AS o")}),
        )
        .await;
    attach.err();
    assert!(db.state().starts_with("1ADA,2bob,3cy|"));
}

#[tokio::test]
async fn sqlite_a_missing_file_is_refused_at_start_and_bad_urls_are_not_echoed() {
    let dir = TempDir::new("sqlite-missing");
    let missing = SqlConfig::new(format!("sqlite:{}", dir.path().join("none.db").display()));
    assert!(Sql::new(&missing).is_err());
    let err = Sql::new(&SqlConfig::new("mysql://root:hunter2@db/x")).unwrap_err();
    assert!(!err.to_string().contains("hunter2"), "{err}");
}

#[tokio::test]
async fn sqlite_execute_asks_first_when_confirmation_is_on() {
    let db = Db::new();
    let mut config = SqlConfig::new(db.url());
    config.allow_writes = true;
    config.confirm_destructive = true;
    let no = Tools::answering(Sql::new(&config).unwrap(), "decline").await;
    let r = no
        .call("execute", json!({"sql": "DELETE FROM users"}))
        .await;
    assert!(r.err().contains("did not allow"), "{}", r.text);
    assert!(db.state().starts_with("1ada,2bob,3cy|"));
    let yes = Tools::answering(Sql::new(&config).unwrap(), "accept").await;
    let r = yes
        .call("execute", json!({"sql": "DELETE FROM users WHERE id = 3"}))
        .await;
    assert_eq!(r.ok(), "1 rows affected");
    assert!(db.state().starts_with("1ada,2bob|"));
}

#[tokio::test]
async fn sqlite_tables_are_resources_read_the_read_only_way() {
    let db = Db::new();
    let before = db.state();
    let t = db.tools(false).await;
    let templates = t
        .request("resources/templates/list", json!({}))
        .await
        .unwrap();
    assert_eq!(
        templates["resourceTemplates"][0]["uriTemplate"],
        "db://{schema}/{table}"
    );
    let read = t
        .request("resources/read", json!({"uri": "db://main/users"}))
        .await
        .unwrap();
    let body: serde_json::Value =
        serde_json::from_str(read["contents"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(body["columns"][0]["name"], "id");
    assert_eq!(body["sample"]["row_count"], 3);
    t.request("resources/read", json!({"uri": "db://main/nope"}))
        .await
        .unwrap_err();
    let injected = "db://main/users%22%3B%20DROP%20TABLE%20users%3B%20--";
    t.request("resources/read", json!({"uri": injected}))
        .await
        .unwrap_err();
    assert_eq!(db.state(), before);
}
