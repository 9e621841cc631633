//! PostgreSQL: every read on a pooled connection, in a `READ ONLY` transaction that is
//! rolled back, with `statement_timeout` and `lock_timeout` set for it.
//!
//! The caller's SQL only ever travels in the extended protocol (a prepared statement holds
//! exactly one command, so `SELECT 1; COMMIT; DROP ..` is refused by the server), and only as
//! the body of `SELECT row_to_json(q)::text FROM (<sql>) AS q LIMIT n`: PostgreSQL's grammar
//! then refuses anything but a query there, data-modifying CTEs included ("WITH clause
//! containing a data-modifying statement must be at the top level"). Session state a read
//! can leave is undone before its connection is reused: `set_config(.., false)` by the
//! rollback, session advisory locks by `pg_advisory_unlock_all()`, and `RESET ALL` besides.
//! A connection whose reset failed, that timed out, or that ran `execute` is closed instead.
//! (`DISCARD ALL` is not used: it would also drop the prepared statements tokio-postgres
//! keeps for user-defined types.)
//! Rows come back as JSON text, so no per-type decoding is needed and the cap is exact.
//!
//! Connections belong to the SQL connector's state actor ([`PgState`]): a call checks one
//! out, or the right to connect (at most `max_connections` at once; a call waits its time
//! limit for one to come free), and gives it back clean. The connect and the statements run
//! in the call's task.

use super::output::{trim_trailing, Column, Rows, Table};
use super::pool::{self, Grant, Lease, Pool};
use super::Bounds;
use crate::actor::Supervised;
use std::future::Future;
use std::time::Duration;
use tokio_postgres::{Client, NoTls};
use toolyard::HandlerError;

/// A connection and the task that drives it.
pub(crate) struct PgConn {
    client: Client,
    driver: tokio::task::JoinHandle<Result<(), tokio_postgres::Error>>,
}

/// The SQL connector's state for PostgreSQL, owned by its actor: the connections.
pub(crate) struct PgState {
    pool: Pool<PgConn>,
}

fn pool(s: &mut PgState) -> &mut Pool<PgConn> {
    &mut s.pool
}

/// Statements that undo what a read-only call can leave in its session (after ROLLBACK).
const RESET: &str = "SELECT pg_advisory_unlock_all(); RESET ALL";

/// A PostgreSQL database.
pub(crate) struct Postgres {
    config: tokio_postgres::Config,
    state: Supervised<PgState>,
}

/// Ends a connection: with the client gone it says goodbye and its task ends; a stuck one
/// is cut off.
async fn close(driver: tokio::task::JoinHandle<Result<(), tokio_postgres::Error>>) {
    let abort = driver.abort_handle();
    if tokio::time::timeout(Duration::from_secs(1), driver)
        .await
        .is_err()
    {
        abort.abort();
    }
}

fn pg_error(e: &tokio_postgres::Error) -> HandlerError {
    // The database's own message (and its detail); never the connection string.
    let text = match e.as_db_error() {
        Some(db) => {
            let mut t = format!("PostgreSQL: {} ({})", db.message(), db.code().code());
            if let Some(detail) = db.detail() {
                t.push_str(&format!(": {detail}"));
            }
            t
        }
        None => format!("PostgreSQL: {e}"),
    };
    HandlerError::failed(text)
}

/// `SET LOCAL` statements for a call's time bounds (integers we format ourselves).
fn limits_sql(timeout: Duration) -> String {
    let ms = timeout.as_millis().max(1);
    format!(
        "SET LOCAL statement_timeout = {ms}; SET LOCAL lock_timeout = {ms}; \
         SET LOCAL idle_in_transaction_session_timeout = {}",
        ms.saturating_mul(2).max(1000)
    )
}

impl Postgres {
    /// Parses the URL; nothing connects until a tool is called. At most `max` connections
    /// are open at once.
    pub(crate) fn new(url: &str, max: usize) -> Result<Postgres, String> {
        let config = url
            .parse::<tokio_postgres::Config>()
            .map_err(|e| format!("the PostgreSQL URL does not parse: {e}"))?;
        Ok(Postgres {
            config,
            state: Supervised::new("sql", move || PgState {
                pool: Pool::new(max),
            }),
        })
    }

    /// The connector's state actor (restart counter, test hooks).
    pub(crate) fn state(&self) -> &Supervised<PgState> {
        &self.state
    }

    /// A connection from the pool, or a new one in a free slot.
    async fn connect(
        &self,
        bounds: Bounds,
    ) -> Result<(Lease<PgState, PgConn>, PgConn), HandlerError> {
        let (lease, grant) = pool::checkout(&self.state, pool, bounds.timeout, |max| {
            HandlerError::failed(format!(
                "PostgreSQL: all {max} connections stayed busy for {} ms; try again",
                bounds.timeout.as_millis()
            ))
        })
        .await?;
        if let Grant::Reuse(conn) = grant {
            if !conn.client.is_closed() {
                return Ok((lease, conn));
            }
            // The server closed it while idle: a new one in its slot.
            drop(conn.client);
            close(conn.driver).await;
        }
        let (client, connection) = self
            .config
            .connect(NoTls)
            .await
            .map_err(|e| HandlerError::failed(format!("PostgreSQL: cannot connect: {e}")))?;
        let driver = tokio::spawn(connection);
        Ok((lease, PgConn { client, driver }))
    }

    /// Checks a connection out, runs `f` inside a transaction begun with `begin`, ends it
    /// with `end`, and gives the connection back when `reset` (if any) left it clean, or
    /// closes it; the whole call is bounded by `bounds.timeout` plus a second (the server's
    /// statement_timeout fires first; past that the query is cancelled).
    async fn session<T, F, Fut>(
        &self,
        bounds: Bounds,
        begin: &str,
        end: &[&str],
        reset: Option<&str>,
        f: F,
    ) -> Result<T, HandlerError>
    where
        F: FnOnce(Client) -> Fut,
        Fut: Future<Output = (Client, Result<T, tokio_postgres::Error>)>,
    {
        let (lease, PgConn { client, driver }) = self.connect(bounds).await?;
        let cancel = client.cancel_token();
        let setup = format!("{begin}; {}", limits_sql(bounds.timeout));
        let work = async move {
            if let Err(e) = client.batch_execute(&setup).await {
                return (client, Err(pg_error(&e)), false);
            }
            let (client, outcome) = f(client).await;
            // A failed statement aborts the transaction; ROLLBACK ends it either way.
            let mut finish = Ok(());
            for statement in end {
                finish = finish.and(client.batch_execute(statement).await);
            }
            let clean = match (reset, &finish) {
                (Some(reset), Ok(())) => client.batch_execute(reset).await.is_ok(),
                _ => false,
            };
            let value = outcome
                .map_err(|e| pg_error(&e))
                .and_then(|v| finish.map(|()| v).map_err(|e| pg_error(&e)));
            (client, value, clean)
        };
        match tokio::time::timeout(bounds.timeout + Duration::from_secs(1), work).await {
            Ok((client, outcome, clean)) => {
                if clean && !client.is_closed() {
                    lease.keep(PgConn { client, driver });
                } else {
                    drop(client);
                    drop(lease);
                    close(driver).await;
                }
                outcome
            }
            Err(_) => {
                let _ = cancel.cancel_query(NoTls).await;
                drop(lease);
                close(driver).await;
                Err(HandlerError::failed(format!(
                    "PostgreSQL: the statement ran past its time limit of {} ms",
                    bounds.timeout.as_millis()
                )))
            }
        }
    }

    async fn read<T, F, Fut>(&self, bounds: Bounds, f: F) -> Result<T, HandlerError>
    where
        F: FnOnce(Client) -> Fut,
        Fut: Future<Output = (Client, Result<T, tokio_postgres::Error>)>,
    {
        self.session(bounds, "BEGIN READ ONLY", &["ROLLBACK"], Some(RESET), f)
            .await
    }

    pub(crate) async fn schemas(&self, bounds: Bounds) -> Result<Vec<String>, HandlerError> {
        self.read(bounds, |c| async move {
            let rows = c
                .query(
                    "SELECT nspname::text FROM pg_catalog.pg_namespace \
                     WHERE nspname <> 'information_schema' AND nspname NOT LIKE 'pg\\_%' \
                     ORDER BY nspname",
                    &[],
                )
                .await;
            let names = rows.map(|rows| rows.iter().map(|r| r.get::<_, String>(0)).collect());
            (c, names)
        })
        .await
    }

    pub(crate) async fn tables(
        &self,
        schema: Option<String>,
        bounds: Bounds,
    ) -> Result<Vec<Table>, HandlerError> {
        let schema = schema.unwrap_or_else(|| "public".to_owned());
        self.read(bounds, |c| async move {
            let rows = c
                .query(
                    "SELECT table_schema::text, table_name::text, \
                     CASE table_type WHEN 'VIEW' THEN 'view' ELSE 'table' END \
                     FROM information_schema.tables WHERE table_schema = $1 ORDER BY table_name",
                    &[&schema],
                )
                .await;
            let tables = rows.map(|rows| {
                rows.iter()
                    .map(|r| Table {
                        schema: r.get(0),
                        name: r.get(1),
                        kind: r.get(2),
                    })
                    .collect()
            });
            (c, tables)
        })
        .await
    }

    pub(crate) async fn describe(
        &self,
        schema: Option<String>,
        table: String,
        bounds: Bounds,
    ) -> Result<Vec<Column>, HandlerError> {
        let schema = schema.unwrap_or_else(|| "public".to_owned());
        self.read(bounds, |c| async move {
            // Filtered by schema and table (the reference server filtered by table only and
            // merged same-named tables of different schemas).
            let rows = c
                .query(
                    "SELECT c.column_name::text, c.data_type::text, c.is_nullable = 'YES', \
                     c.column_default::text, EXISTS ( \
                       SELECT 1 FROM information_schema.table_constraints tc \
                       JOIN information_schema.key_column_usage k \
                         ON k.constraint_name = tc.constraint_name \
                        AND k.constraint_schema = tc.constraint_schema \
                       WHERE tc.constraint_type = 'PRIMARY KEY' AND tc.table_schema = c.table_schema \
                         AND tc.table_name = c.table_name AND k.column_name = c.column_name) \
                     FROM information_schema.columns c \
                     WHERE c.table_schema = $1 AND c.table_name = $2 ORDER BY c.ordinal_position",
                    &[&schema, &table],
                )
                .await;
            let columns = rows.map(|rows| {
                rows.iter()
                    .map(|r| Column {
                        name: r.get(0),
                        data_type: r.get(1),
                        nullable: r.get(2),
                        default: r.get(3),
                        primary_key: r.get(4),
                    })
                    .collect()
            });
            (c, columns)
        })
        .await
    }

    pub(crate) async fn query(&self, sql: String, bounds: Bounds) -> Result<Rows, HandlerError> {
        let body = trim_trailing(&sql).to_owned();
        let limit = bounds.max_rows.saturating_add(1);
        self.read(bounds, |c| async move {
            let outcome = async {
                // Column names in order, from the statement's description (nothing runs).
                let described = c
                    .prepare(&format!("SELECT * FROM (\n{body}\n) AS q"))
                    .await?;
                let columns: Vec<String> = described
                    .columns()
                    .iter()
                    .map(|col| col.name().to_owned())
                    .collect();
                let stmt = c
                    .prepare(&format!(
                        "SELECT row_to_json(q)::text FROM (\n{body}\n) AS q LIMIT {limit}"
                    ))
                    .await?;
                let found = c.query(&stmt, &[]).await?;
                Ok::<_, tokio_postgres::Error>((columns, found))
            }
            .await;
            let rows = outcome.map(|(columns, found)| to_rows(columns, &found, limit - 1));
            (c, rows)
        })
        .await
    }

    pub(crate) async fn explain(
        &self,
        sql: String,
        bounds: Bounds,
    ) -> Result<String, HandlerError> {
        let body = trim_trailing(&sql).to_owned();
        self.read(bounds, |c| async move {
            let rows = c.query(&format!("EXPLAIN {body}"), &[]).await;
            let text = rows.map(|rows| {
                rows.iter()
                    .map(|r| r.get::<_, String>(0))
                    .collect::<Vec<_>>()
                    .join("\n")
            });
            (c, text)
        })
        .await
    }

    pub(crate) async fn execute(&self, sql: String, bounds: Bounds) -> Result<u64, HandlerError> {
        let body = trim_trailing(&sql).to_owned();
        // A connection that wrote is closed afterwards: whatever session state the
        // statement set (it may be `SET`, `PREPARE`, `LISTEN`) dies with it.
        self.session(bounds, "BEGIN", &["COMMIT"], None, |c| async move {
            let n = c.execute(&body, &[]).await;
            (c, n)
        })
        .await
    }
}

/// JSON-text rows to values in column order; `truncated` when the extra row came back.
fn to_rows(columns: Vec<String>, found: &[tokio_postgres::Row], max: u64) -> Rows {
    let max = usize::try_from(max).unwrap_or(usize::MAX);
    let truncated = found.len() > max;
    let rows: Vec<Vec<serde_json::Value>> = found
        .iter()
        .take(max)
        .map(|r| {
            let text: String = r.get(0);
            let mut object: serde_json::Map<String, serde_json::Value> =
                serde_json::from_str(&text).unwrap_or_default();
            columns
                .iter()
                .map(|c| object.remove(c).unwrap_or(serde_json::Value::Null))
                .collect()
        })
        .collect();
    Rows {
        columns,
        row_count: rows.len(),
        rows,
        truncated,
    }
}
