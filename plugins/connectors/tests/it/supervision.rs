//! The connectors' state actors under their supervisors: a panic inside one (injected with
//! the `test-hooks` feature, as a bug in state code would panic) fails the call that hit
//! it, the supervisor rebuilds the state from the configuration, the restart is counted and
//! published, and the next call works. Also what the SQL connector's actor coordinates:
//! connections reused and capped.

use crate::support::{TempDir, Tools};
use serde_json::json;
use std::time::Duration;
use tokio_postgres::NoTls;
use toolyard::LifecycleEvent;
use toolyard_connectors::sql::Sql;
use toolyard_connectors::SqlConfig;

const PG_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

fn sqlite_file(dir: &TempDir) -> String {
    let path = dir.path().join("app.db");
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(
        "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT);
         INSERT INTO users VALUES (1, 'ada'), (2, 'bob');",
    )
    .unwrap();
    format!("sqlite:{}", path.display())
}

#[tokio::test]
async fn sql_a_panic_in_the_state_actor_fails_only_that_call_and_the_rebuilt_state_serves_the_next()
{
    let dir = TempDir::new("supervision");
    let sql = Sql::new(&SqlConfig::new(sqlite_file(&dir))).unwrap();
    let t = std::sync::Arc::new(Tools::with(sql.clone()).await);
    let sum = json!({"sql": "SELECT sum(id) AS s FROM users"});
    assert!(t.call("query", sum.clone()).await.ok().contains('3'));
    assert_eq!(sql.state_restarts(), 0);

    sql.panic_next_state_job();
    let hit = t.call("query", sum.clone()).await;
    assert!(
        hit.err().contains("state failed during this call"),
        "{}",
        hit.text
    );
    assert_eq!(
        sql.state_restarts(),
        1,
        "the supervisor rebuilt the state once"
    );

    // The rebuilt pool serves the next calls, concurrent ones included.
    let calls: Vec<_> = (0..8)
        .map(|_| {
            let (t, sum) = (t.clone(), sum.clone());
            tokio::spawn(async move { t.call("query", sum).await })
        })
        .collect();
    for call in calls {
        assert!(call.await.unwrap().ok().contains('3'));
    }
    assert_eq!(sql.state_restarts(), 1);
}

#[tokio::test]
async fn sql_a_restart_is_published_to_the_servers_lifecycle() {
    let sql = Sql::new(&SqlConfig::new("sqlite::memory:")).unwrap();
    let t = Tools::with(sql.clone()).await;
    sql.attach_lifecycle(t.server().lifecycle().clone());
    let mut events = t.server().lifecycle().subscribe();

    sql.panic_next_state_job();
    t.call("list_schemas", json!({})).await.err();
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let event = tokio::time::timeout(Duration::from_secs(10), events.recv())
            .await
            .expect("lifecycle events within 10 s")
            .expect("the lifecycle stays open");
        match event {
            LifecycleEvent::ComponentDown {
                kind,
                name,
                required,
                ..
            } => seen.push(format!("down {kind} {name} required={required}")),
            LifecycleEvent::ComponentUp { kind, name } => seen.push(format!("up {kind} {name}")),
            _ => {}
        }
    }
    assert_eq!(
        seen,
        ["down connector sql required=false", "up connector sql"]
    );
    assert!(t.server().lifecycle().readiness().down.is_empty());
    assert!(t
        .call("list_schemas", json!({}))
        .await
        .ok()
        .contains("main"));
}

#[tokio::test]
async fn sql_an_in_memory_database_keeps_its_one_connection_across_calls_and_starts_over_after_a_restart(
) {
    let mut config = SqlConfig::new("sqlite::memory:");
    config.allow_writes = true;
    let sql = Sql::new(&config).unwrap();
    let t = Tools::with(sql.clone()).await;
    t.call("execute", json!({"sql": "CREATE TABLE t (x)"}))
        .await
        .ok();
    t.call("execute", json!({"sql": "INSERT INTO t VALUES (42)"}))
        .await
        .ok();
    // A failing statement does not cost the database its connection.
    t.call("query", json!({"sql": "SELECT * FROM nowhere"}))
        .await
        .err();
    assert!(t
        .call("query", json!({"sql": "SELECT x FROM t"}))
        .await
        .ok()
        .contains("42"));
    // The database is the connection the failed state held: rebuilt, it is empty.
    sql.panic_next_state_job();
    t.call("query", json!({"sql": "SELECT x FROM t"}))
        .await
        .err();
    let after = t.call("query", json!({"sql": "SELECT x FROM t"})).await;
    assert!(after.err().contains("no such table"), "{}", after.text);
}

async fn pg_admin() -> tokio_postgres::Client {
    let (admin, connection) = tokio_postgres::connect(PG_URL, NoTls)
        .await
        .expect("PostgreSQL on 127.0.0.1:5432");
    tokio::spawn(connection);
    admin
}

#[tokio::test]
async fn postgres_reads_reuse_a_pooled_connection_and_a_panic_rebuilds_the_pool() {
    let sql = Sql::new(&SqlConfig::new(PG_URL)).unwrap();
    let t = Tools::with(sql.clone()).await;
    let pid = json!({"sql": "SELECT pg_backend_pid() AS pid"});
    let first = t.call("query", pid.clone()).await.ok().to_owned();
    let second = t.call("query", pid.clone()).await.ok().to_owned();
    assert_eq!(first, second, "one session served both reads");

    sql.panic_next_state_job();
    t.call("query", pid.clone()).await.err();
    assert_eq!(sql.state_restarts(), 1);
    let rebuilt = t.call("query", pid.clone()).await.ok().to_owned();
    assert_ne!(
        rebuilt, first,
        "the rebuilt pool opened a connection of its own"
    );
}

#[tokio::test]
async fn postgres_calls_past_max_connections_wait_for_a_free_one_within_their_time_limit() {
    let mut config = SqlConfig::new(PG_URL);
    config.max_connections = 1;
    let sql = Sql::new(&config).unwrap();
    let t = std::sync::Arc::new(Tools::with(sql).await);
    let marker = format!("ty_sup_{}", std::process::id());
    let slow = {
        let t = t.clone();
        let sql = format!("SELECT pg_sleep(1.5), '{marker}' AS m");
        tokio::spawn(async move {
            t.call("query", json!({"sql": sql, "timeout_ms": 5000}))
                .await
        })
    };
    // Wait until the slow query holds the one connection.
    let admin = pg_admin().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let running: i64 = admin
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(1.5)%' AND pid <> pg_backend_pid()",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if running > 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the slow query never started"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let busy = t
        .call(
            "query",
            json!({"sql": "SELECT 1 AS one", "timeout_ms": 100}),
        )
        .await;
    assert!(
        busy.err().contains("all 1 connections stayed busy"),
        "{}",
        busy.text
    );
    // One that may wait long enough gets the connection when the slow query gives it back.
    let patient = t
        .call(
            "query",
            json!({"sql": "SELECT 1 AS one", "timeout_ms": 5000}),
        )
        .await;
    assert!(patient.ok().contains('1'));
    assert!(slow.await.unwrap().ok().contains(&marker));
}
