//! The SQL connector on the real PostgreSQL at 127.0.0.1:5432 (database `test`, trust auth):
//! each test works in a schema of its own, created and dropped here. The bypass corpus must
//! leave the database as it was.

use crate::support::Tools;
use serde_json::json;
use std::sync::atomic::{AtomicU32, Ordering};
use tokio_postgres::{Client, NoTls};
use toolyard_connectors::sql::Sql;
use toolyard_connectors::SqlConfig;

const URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// A schema of the test's own, with a table, a view and a sequence.
struct Schema {
    name: String,
    admin: Client,
}

impl Schema {
    async fn new() -> Schema {
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "ty_conn_{}_{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let (admin, connection) = tokio_postgres::connect(URL, NoTls)
            .await
            .expect("PostgreSQL on 127.0.0.1:5432 (database `test`, user `postgres`, trust auth)");
        tokio::spawn(connection);
        admin
            .batch_execute(&format!(
                "DROP SCHEMA IF EXISTS {name} CASCADE; CREATE SCHEMA {name};
                 CREATE TABLE {name}.users (id int PRIMARY KEY, name text NOT NULL, note text DEFAULT 'none');
                 INSERT INTO {name}.users VALUES (1, 'ada'), (2, 'bob'), (3, 'cy');
                 CREATE VIEW {name}.names AS SELECT name FROM {name}.users;
                 CREATE SEQUENCE {name}.seq;"
            ))
            .await
            .unwrap();
        Schema { name, admin }
    }

    async fn tools(&self, allow_writes: bool) -> Tools {
        let mut config = SqlConfig::new(URL);
        config.allow_writes = allow_writes;
        Tools::with(Sql::new(&config).expect("the connector starts")).await
    }

    /// What a write would change: the rows, the schema's objects, the sequence, collations,
    /// large objects.
    async fn state(&self) -> String {
        let n = &self.name;
        let row = self
            .admin
            .query_one(
                &format!(
                    "SELECT (SELECT string_agg(id || name, ',' ORDER BY id) FROM {n}.users),
                            (SELECT string_agg(relname, ',' ORDER BY relname) FROM pg_class c
                               JOIN pg_namespace s ON s.oid = c.relnamespace WHERE s.nspname = '{n}'),
                            (SELECT is_called::text FROM {n}.seq),
                            (SELECT count(*)::text FROM pg_collation c
                               JOIN pg_namespace s ON s.oid = c.collnamespace WHERE s.nspname = '{n}'),
                            (SELECT count(*)::text FROM pg_largeobject_metadata)"
                ),
                &[],
            )
            .await
            .unwrap();
        let cols: Vec<Option<String>> = (0..5).map(|i| row.get(i)).collect();
        format!("{cols:?}")
    }

    async fn drop(self) {
        let _ = self
            .admin
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name))
            .await;
    }
}

#[tokio::test]
async fn postgres_lists_schemas_and_tables_and_describes_columns() {
    let s = Schema::new().await;
    let t = s.tools(false).await;
    let schemas = t.call("list_schemas", json!({})).await;
    schemas.ok();
    let listed = schemas.raw["structuredContent"].as_array().unwrap().clone();
    assert!(listed.contains(&json!(s.name)), "{listed:?}");
    assert!(listed.contains(&json!("public")));
    assert!(!listed.contains(&json!("pg_catalog")));
    let tables = t.call("list_tables", json!({"schema": s.name})).await;
    tables.ok();
    assert_eq!(
        tables.raw["structuredContent"],
        json!([
            {"schema": s.name, "name": "names", "type": "view"},
            {"schema": s.name, "name": "users", "type": "table"}
        ])
    );
    let columns = t
        .call(
            "describe_table",
            json!({"schema": s.name, "table": "users"}),
        )
        .await;
    columns.ok();
    assert_eq!(
        columns.raw["structuredContent"][0],
        json!({"name": "id", "type": "integer", "nullable": false, "default": null, "primary_key": true})
    );
    assert_eq!(
        columns.raw["structuredContent"][2]["default"],
        "'none'::text"
    );
    let missing = t
        .call(
            "describe_table",
            json!({"schema": s.name, "table": "users' OR '1'='1"}),
        )
        .await;
    assert!(missing.err().contains("no table"), "{}", missing.text);
    s.drop().await;
}

#[tokio::test]
async fn postgres_query_returns_rows_in_column_order_up_to_the_cap() {
    let s = Schema::new().await;
    let t = s.tools(false).await;
    let n = &s.name;
    let r = t
        .call(
            "query",
            json!({"sql": format!("SELECT name, id, 1.5::float8 AS f, NULL AS z FROM {n}.users ORDER BY id;")}),
        )
        .await;
    r.ok();
    let rows = &r.raw["structuredContent"];
    assert_eq!(rows["columns"], json!(["name", "id", "f", "z"]));
    assert_eq!(rows["rows"][0], json!(["ada", 1, 1.5, null]));
    assert_eq!(rows["truncated"], false);
    let capped = t
        .call(
            "query",
            json!({"sql": "-- a comment first\nSELECT g FROM generate_series(1, 100) g -- and last", "max_rows": 10}),
        )
        .await;
    capped.ok();
    assert_eq!(capped.raw["structuredContent"]["row_count"], 10);
    assert_eq!(capped.raw["structuredContent"]["truncated"], true);
    let plan = t
        .call(
            "explain",
            json!({"sql": format!("SELECT * FROM {n}.users WHERE id = 2")}),
        )
        .await;
    assert!(plan.ok().contains("Scan"), "{}", plan.text);
    s.drop().await;
}

#[tokio::test]
async fn postgres_a_statement_past_its_time_limit_is_cancelled() {
    let t = Tools::with(Sql::new(&SqlConfig::new(URL)).unwrap()).await;
    let started = std::time::Instant::now();
    let r = t
        .call(
            "query",
            json!({"sql": "SELECT pg_sleep(10)", "timeout_ms": 300}),
        )
        .await;
    assert!(r.err().contains("statement timeout"), "{}", r.text);
    assert!(started.elapsed() < std::time::Duration::from_secs(3));
}

/// Statements that try to write through the read-only `query` and `explain` tools.
fn bypasses(n: &str) -> Vec<String> {
    vec![
        format!("SELECT 1; COMMIT; DROP TABLE {n}.users"),
        format!("COMMIT; DROP TABLE {n}.users"),
        format!("/* leading comment */ COMMIT; DELETE FROM {n}.users"),
        format!("-- leading comment\nDELETE FROM {n}.users"),
        format!("  \n\tUPDATE {n}.users SET name = 'pwned'"),
        format!("DELETE FROM {n}.users RETURNING *"),
        format!("WITH gone AS (DELETE FROM {n}.users RETURNING *) SELECT * FROM gone"),
        format!("WITH x AS (INSERT INTO {n}.users VALUES (9, 'x') RETURNING id) SELECT * FROM x"),
        format!("SET TRANSACTION READ WRITE; DELETE FROM {n}.users"),
        format!("SELECT 1) AS q; DELETE FROM {n}.users; SELECT (1"),
        format!("SELECT 1) AS q; COMMIT; BEGIN; DELETE FROM {n}.users; COMMIT; SELECT (1"),
        format!("SELECT * FROM {n}.users FOR UPDATE"),
        format!("SELECT nextval('{n}.seq')"),
        format!("SELECT setval('{n}.seq', 42)"),
        format!("SELECT pg_import_system_collations('{n}')"),
        "SELECT lo_import('/etc/hostname')".to_owned(),
        "SELECT lo_create(0)".to_owned(),
        format!("CREATE TABLE {n}.t (x int)"),
        format!("DROP VIEW {n}.names"),
        format!("TRUNCATE {n}.users"),
        format!("COPY {n}.users FROM PROGRAM 'true'"),
        format!("SELECT set_config('default_transaction_read_only', 'off', false); DELETE FROM {n}.users"),
        format!("DO $$ BEGIN DELETE FROM {n}.users; END $$"),
        format!("ALTER TABLE {n}.users ADD COLUMN y int"),
        format!("GRANT ALL ON {n}.users TO PUBLIC"),
        "VACUUM".to_owned(),
    ]
}

#[tokio::test]
async fn postgres_every_bypass_of_the_read_only_query_fails_to_write() {
    let s = Schema::new().await;
    let before = s.state().await;
    // With allow_writes too: `query` and `explain` stay read-only whatever `execute` may do.
    for allow_writes in [false, true] {
        let t = s.tools(allow_writes).await;
        for sql in bypasses(&s.name) {
            let _ = t.call("query", json!({"sql": sql})).await;
            assert_eq!(s.state().await, before, "`{sql}` changed the database");
            let _ = t
                .call("explain", json!({"sql": format!("ANALYZE {sql}")}))
                .await;
            let _ = t.call("explain", json!({"sql": sql})).await;
            assert_eq!(
                s.state().await,
                before,
                "explain `{sql}` changed the database"
            );
        }
        let multi = t
            .call(
                "query",
                json!({"sql": format!("SELECT 1; COMMIT; DROP TABLE {}.users", s.name)}),
            )
            .await;
        assert!(multi.err().contains("PostgreSQL:"), "{}", multi.text);
        let cte = t
            .call(
                "query",
                json!({"sql": format!("WITH gone AS (DELETE FROM {}.users RETURNING *) SELECT * FROM gone", s.name)}),
            )
            .await;
        assert!(cte.err().contains("data-modifying"), "{}", cte.text);
    }
    s.drop().await;
}

#[tokio::test]
async fn postgres_session_side_effects_do_not_outlive_the_call() {
    let s = Schema::new().await;
    let t = s.tools(false).await;
    // A session-level advisory lock survives ROLLBACK, but not the connection's close.
    let locked = t
        .call("query", json!({"sql": "SELECT pg_advisory_lock(770011)"}))
        .await;
    locked.ok();
    let free: bool = s
        .admin
        .query_one("SELECT pg_try_advisory_lock(770011)", &[])
        .await
        .unwrap()
        .get(0);
    assert!(free, "the advisory lock outlived the call");
    s.admin
        .batch_execute("SELECT pg_advisory_unlock(770011)")
        .await
        .unwrap();
    // A session setting made by one call does not reach the next.
    t.call(
        "query",
        json!({"sql": "SELECT set_config('default_transaction_read_only', 'off', false)"}),
    )
    .await
    .ok();
    let r = t
        .call(
            "query",
            json!({"sql": format!("DELETE FROM {}.users RETURNING id", s.name)}),
        )
        .await;
    r.err();
    assert!(s.state().await.contains("1ada,2bob,3cy"));
    s.drop().await;
}

#[tokio::test]
async fn postgres_writes_need_allow_writes_and_are_single_statements() {
    let s = Schema::new().await;
    let n = &s.name;
    let read_only = s.tools(false).await;
    assert!(!read_only.names().await.contains(&"execute".to_owned()));
    let writable = s.tools(true).await;
    let r = writable
        .call(
            "execute",
            json!({"sql": format!("UPDATE {n}.users SET name = 'ADA' WHERE id = 1")}),
        )
        .await;
    assert_eq!(r.ok(), "1 rows affected");
    let multi = writable
        .call(
            "execute",
            json!({"sql": format!("DELETE FROM {n}.users WHERE id = 2; DELETE FROM {n}.users")}),
        )
        .await;
    multi.err();
    assert!(s.state().await.contains("1ADA,2bob,3cy"));
    s.drop().await;
}

#[tokio::test]
async fn postgres_connection_errors_never_show_the_password() {
    let t = Tools::with(
        Sql::new(&SqlConfig::new(
            "postgres://someone:hunter2@127.0.0.1:1/test",
        ))
        .unwrap(),
    )
    .await;
    let r = t.call("list_schemas", json!({})).await;
    assert!(r.err().contains("cannot connect"), "{}", r.text);
    assert!(!r.text.contains("hunter2"));
    let debug = format!(
        "{:?}",
        Sql::new(&SqlConfig::new("postgres://u:hunter2@h/d")).unwrap()
    );
    assert!(!debug.contains("hunter2"));
}

#[tokio::test]
async fn postgres_tables_are_resources() {
    let s = Schema::new().await;
    let t = s.tools(false).await;
    let read = t
        .request(
            "resources/read",
            json!({"uri": format!("db://{}/users", s.name)}),
        )
        .await
        .unwrap();
    let body: serde_json::Value =
        serde_json::from_str(read["contents"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(body["columns"][1]["name"], "name");
    assert_eq!(body["sample"]["rows"][0], json!([1, "ada", "none"]));
    s.drop().await;
}
