//! SQLite: reads on a connection SQL cannot make writable.
//!
//! A file database is opened `SQLITE_OPEN_READ_ONLY` for every read; an in-memory one (which
//! has only its one connection) gets `PRAGMA query_only` for the call. On top of that an
//! authorizer allows only reading (no `ATTACH`, no `PRAGMA` but the catalogue ones, no
//! transaction control, no `load_extension`), `SQLITE_LIMIT_ATTACHED` is 0, the statement
//! must be single and `sqlite3_stmt_readonly`, and a progress handler ends it at its
//! deadline. Each call runs on a blocking thread.
//!
//! Connections belong to the SQL connector's state actor ([`SqliteState`]): a call checks
//! one out (or the right to open one), uses it on its blocking thread and gives it back with
//! its guards removed; one left in a transaction or whose guards could not be removed is
//! closed instead. A file database has up to `max_connections` read connections and one
//! write connection; an in-memory database is its one connection, shared by both. When the
//! actor is rebuilt after a failure its pools start empty: an in-memory database then starts
//! over empty, as it would after a restart of the server.

use super::output::{trim_trailing, Column, Rows, Table};
use super::pool::{self, Access, Grant, Lease, Pool};
use super::Bounds;
use crate::actor::Supervised;
use base64::Engine as _;
use rusqlite::hooks::{AuthAction, AuthContext, Authorization};
use rusqlite::limits::Limit;
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;
use toolyard::HandlerError;

/// Where the database is.
enum Location {
    File(PathBuf),
    /// An in-memory database: it lives in its one connection, so the pool holds at most
    /// one and reads and writes share it.
    Memory,
}

/// The SQL connector's state for SQLite, owned by its actor: the connections.
pub(crate) struct SqliteState {
    reads: Pool<Connection>,
    writes: Pool<Connection>,
}

fn reads(s: &mut SqliteState) -> &mut Pool<Connection> {
    &mut s.reads
}

fn writes(s: &mut SqliteState) -> &mut Pool<Connection> {
    &mut s.writes
}

/// A SQLite database.
pub(crate) struct Sqlite {
    location: Arc<Location>,
    state: Supervised<SqliteState>,
}

/// Catalogue pragmas a read may use (as `pragma_*` table-valued functions or statements).
const CATALOGUE_PRAGMAS: [&str; 9] = [
    "table_info",
    "table_xinfo",
    "table_list",
    "index_list",
    "index_info",
    "index_xinfo",
    "foreign_key_list",
    "database_list",
    "collation_list",
];

fn read_only_authorizer(ctx: AuthContext<'_>) -> Authorization {
    match ctx.action {
        AuthAction::Select | AuthAction::Read { .. } | AuthAction::Recursive => {
            Authorization::Allow
        }
        AuthAction::Function { function_name } => {
            if function_name.eq_ignore_ascii_case("load_extension") {
                Authorization::Deny
            } else {
                Authorization::Allow
            }
        }
        AuthAction::Pragma { pragma_name, .. }
            if CATALOGUE_PRAGMAS
                .iter()
                .any(|p| p.eq_ignore_ascii_case(pragma_name)) =>
        {
            Authorization::Allow
        }
        _ => Authorization::Deny,
    }
}

/// Writes may not reach other database files.
fn write_authorizer(ctx: AuthContext<'_>) -> Authorization {
    match ctx.action {
        AuthAction::Attach { .. } | AuthAction::Detach { .. } => Authorization::Deny,
        AuthAction::Function { function_name }
            if function_name.eq_ignore_ascii_case("load_extension") =>
        {
            Authorization::Deny
        }
        _ => Authorization::Allow,
    }
}

fn sqlite_error(e: &rusqlite::Error, bounds: Bounds) -> HandlerError {
    let text = match e {
        rusqlite::Error::SqliteFailure(f, _)
            if f.code == rusqlite::ErrorCode::OperationInterrupted =>
        {
            format!(
                "SQLite: the statement ran past its time limit of {} ms",
                bounds.timeout.as_millis()
            )
        }
        rusqlite::Error::MultipleStatement => {
            "SQLite: only one statement per call is allowed".to_owned()
        }
        other => format!("SQLite: {other}"),
    };
    HandlerError::failed(text)
}

fn value(v: ValueRef<'_>) -> serde_json::Value {
    match v {
        ValueRef::Null => serde_json::Value::Null,
        ValueRef::Integer(i) => i.into(),
        ValueRef::Real(f) => {
            serde_json::Number::from_f64(f).map_or(serde_json::Value::Null, Into::into)
        }
        ValueRef::Text(t) => String::from_utf8_lossy(t).into_owned().into(),
        ValueRef::Blob(b) => base64::engine::general_purpose::STANDARD.encode(b).into(),
    }
}

impl Sqlite {
    /// `rest` is what follows `sqlite:`: `:memory:` or a file path (`//` before it allowed).
    /// `max` bounds the read connections open at once (a file database).
    pub(crate) fn open(rest: &str, allow_writes: bool, max: usize) -> Result<Sqlite, String> {
        if rest == ":memory:" || rest == "//:memory:" {
            // Checked now so that a broken build fails at start-up; the pool opens its own.
            Connection::open_in_memory().map_err(|e| format!("SQLite: {e}"))?;
            return Ok(Sqlite {
                location: Arc::new(Location::Memory),
                state: Supervised::new("sql", || SqliteState {
                    reads: Pool::new(1),
                    writes: Pool::new(1),
                }),
            });
        }
        let path = PathBuf::from(rest.strip_prefix("//").unwrap_or(rest));
        let flags = if allow_writes {
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE
        } else {
            OpenFlags::SQLITE_OPEN_READ_ONLY
        };
        // Opened once now, so a missing or unreadable file is a start-up error.
        Connection::open_with_flags(&path, flags | OpenFlags::SQLITE_OPEN_NO_MUTEX)
            .and_then(|c| c.query_row("SELECT count(*) FROM sqlite_schema", [], |_| Ok(())))
            .map_err(|e| format!("cannot open the SQLite database: {e}"))?;
        Ok(Sqlite {
            location: Arc::new(Location::File(path)),
            state: Supervised::new("sql", move || SqliteState {
                reads: Pool::new(max),
                writes: Pool::new(1),
            }),
        })
    }

    /// The connector's state actor (restart counter, test hooks).
    pub(crate) fn state(&self) -> &Supervised<SqliteState> {
        &self.state
    }

    /// A slot of the read pool (an in-memory database's one connection is in it too).
    async fn lease(
        &self,
        access: Access<SqliteState, Connection>,
        bounds: Bounds,
    ) -> Result<(Lease<SqliteState, Connection>, Grant<Connection>), HandlerError> {
        pool::checkout(&self.state, access, bounds.timeout, |max| {
            HandlerError::failed(format!(
                "SQLite: all {max} connections stayed busy for {} ms; try again",
                bounds.timeout.as_millis()
            ))
        })
        .await
    }

    /// Runs `f` on a guarded read-only connection, on a blocking thread. The connection is
    /// checked out of the state actor's pool and goes back to it (the lease travels to the
    /// blocking thread, so a cancelled call still returns it when the thread is done).
    async fn read<T, F>(&self, bounds: Bounds, f: F) -> Result<T, HandlerError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        let (lease, grant) = self.lease(reads, bounds).await?;
        let location = self.location.clone();
        crate::tool::blocking(move || {
            let deadline = Instant::now() + bounds.timeout;
            let mut conn = match grant {
                Grant::Reuse(conn) => conn,
                Grant::Open => open(&location, false).map_err(|e| sqlite_error(&e, bounds))?,
            };
            match &*location {
                Location::File(_) => {
                    let outcome = guard(&mut conn, deadline).and_then(|()| f(&conn));
                    // Reused only once its guards are off again.
                    if unguard(&mut conn).is_ok() && conn.is_autocommit() {
                        lease.keep(conn);
                    }
                    outcome.map_err(|e| sqlite_error(&e, bounds))
                }
                Location::Memory => {
                    let outcome = conn
                        .execute_batch("PRAGMA query_only = ON")
                        .and_then(|()| guard(&mut conn, deadline))
                        .and_then(|()| f(&conn));
                    let reset = unguard(&mut conn)
                        .and_then(|()| conn.execute_batch("PRAGMA query_only = OFF"));
                    // The database is this connection: it always goes back.
                    lease.keep(conn);
                    let value = outcome.map_err(|e| sqlite_error(&e, bounds))?;
                    reset.map_err(|e| sqlite_error(&e, bounds))?;
                    Ok(value)
                }
            }
        })
        .await
    }

    pub(crate) async fn schemas(&self, bounds: Bounds) -> Result<Vec<String>, HandlerError> {
        self.read(bounds, |c| {
            let mut stmt = c.prepare("SELECT name FROM pragma_database_list ORDER BY seq")?;
            let names = stmt.query_map([], |r| r.get::<_, String>(0))?;
            names.collect()
        })
        .await
    }

    pub(crate) async fn tables(
        &self,
        schema: Option<String>,
        bounds: Bounds,
    ) -> Result<Vec<Table>, HandlerError> {
        let schema = schema.unwrap_or_else(|| "main".to_owned());
        self.read(bounds, move |c| {
            let mut stmt = c.prepare(
                "SELECT schema, name, type FROM pragma_table_list \
                 WHERE schema = ?1 AND type IN ('table', 'view') AND name NOT LIKE 'sqlite_%' \
                 ORDER BY name",
            )?;
            let rows = stmt.query_map([&schema], |r| {
                Ok(Table {
                    schema: r.get(0)?,
                    name: r.get(1)?,
                    kind: r.get(2)?,
                })
            })?;
            rows.collect()
        })
        .await
    }

    pub(crate) async fn describe(
        &self,
        schema: Option<String>,
        table: String,
        bounds: Bounds,
    ) -> Result<Vec<Column>, HandlerError> {
        let schema = schema.unwrap_or_else(|| "main".to_owned());
        self.read(bounds, move |c| {
            // Bound parameters: the names are never spliced into SQL.
            let mut stmt = c.prepare(
                "SELECT name, type, \"notnull\", dflt_value, pk FROM pragma_table_info(?1, ?2) ORDER BY cid",
            )?;
            let rows = stmt.query_map([&table, &schema], |r| {
                Ok(Column {
                    name: r.get(0)?,
                    data_type: r.get(1)?,
                    nullable: r.get::<_, i64>(2)? == 0,
                    default: r.get(3)?,
                    primary_key: r.get::<_, i64>(4)? > 0,
                })
            })?;
            rows.collect()
        })
        .await
    }

    pub(crate) async fn query(&self, sql: String, bounds: Bounds) -> Result<Rows, HandlerError> {
        let max = usize::try_from(bounds.max_rows).unwrap_or(usize::MAX);
        self.read(bounds, move |c| {
            let mut stmt = c.prepare(trim_trailing(&sql))?;
            if !stmt.readonly() {
                return Err(rusqlite::Error::SqliteFailure(
                    rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_READONLY),
                    Some("only read-only statements are allowed".to_owned()),
                ));
            }
            let columns: Vec<String> = stmt.column_names().map(str::to_owned).collect();
            let width = columns.len();
            let mut rows = Vec::new();
            let mut truncated = false;
            let mut cursor = stmt.query([])?;
            while let Some(row) = cursor.next()? {
                if rows.len() == max {
                    truncated = true;
                    break;
                }
                let mut values = Vec::with_capacity(width);
                for i in 0..width {
                    values.push(value(row.get_ref(i)?));
                }
                rows.push(values);
            }
            Ok(Rows {
                columns,
                row_count: rows.len(),
                rows,
                truncated,
            })
        })
        .await
    }

    pub(crate) async fn explain(
        &self,
        sql: String,
        bounds: Bounds,
    ) -> Result<String, HandlerError> {
        self.read(bounds, move |c| {
            let text = format!("EXPLAIN QUERY PLAN {}", trim_trailing(&sql));
            let mut stmt = c.prepare(&text)?;
            let rows = stmt.query_map([], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, String>(3)?,
                ))
            })?;
            let mut depth: Vec<(i64, usize)> = Vec::new();
            let mut lines = Vec::new();
            for row in rows {
                let (id, parent, detail) = row?;
                let level = depth
                    .iter()
                    .find(|(i, _)| *i == parent)
                    .map_or(0, |(_, l)| l + 1);
                depth.push((id, level));
                lines.push(format!("{}{detail}", "  ".repeat(level)));
            }
            Ok(lines.join("\n"))
        })
        .await
    }

    pub(crate) async fn execute(&self, sql: String, bounds: Bounds) -> Result<u64, HandlerError> {
        let access = match &*self.location {
            Location::File(_) => writes,
            Location::Memory => reads,
        };
        let (lease, grant) = self.lease(access, bounds).await?;
        let location = self.location.clone();
        crate::tool::blocking(move || {
            let deadline = Instant::now() + bounds.timeout;
            let mut conn = match grant {
                Grant::Reuse(conn) => conn,
                Grant::Open => open(&location, true).map_err(|e| sqlite_error(&e, bounds))?,
            };
            let run = |conn: &mut Connection| -> rusqlite::Result<u64> {
                conn.set_limit(Limit::SQLITE_LIMIT_ATTACHED, 0)?;
                conn.authorizer(Some(write_authorizer))?;
                conn.progress_handler(1000, Some(move || Instant::now() > deadline))?;
                conn.prepare(trim_trailing(&sql))
                    .and_then(|mut s| s.execute([]))
                    .map(|n| n as u64)
            };
            let outcome = run(&mut conn);
            // A statement that left a transaction open (`BEGIN`) must not hand it on.
            let clean = unguard(&mut conn).is_ok() && conn.is_autocommit();
            if clean || matches!(&*location, Location::Memory) {
                lease.keep(conn);
            }
            outcome.map_err(|e| sqlite_error(&e, bounds))
        })
        .await
    }
}

/// Opens a connection for `location`: read-only unless `write` (a file database).
fn open(location: &Location, write: bool) -> rusqlite::Result<Connection> {
    match location {
        Location::Memory => Connection::open_in_memory(),
        Location::File(path) => {
            let flags = if write {
                OpenFlags::SQLITE_OPEN_READ_WRITE
            } else {
                OpenFlags::SQLITE_OPEN_READ_ONLY
            };
            Connection::open_with_flags(path, flags | OpenFlags::SQLITE_OPEN_NO_MUTEX)
        }
    }
}

/// The read-only guards: no attached databases, the authorizer, the deadline.
fn guard(conn: &mut Connection, deadline: Instant) -> rusqlite::Result<()> {
    conn.set_limit(Limit::SQLITE_LIMIT_ATTACHED, 0)?;
    conn.authorizer(Some(read_only_authorizer))?;
    conn.progress_handler(1000, Some(move || Instant::now() > deadline))?;
    Ok(())
}

/// Removes the guards from a connection that outlives the call (in-memory databases).
fn unguard(conn: &mut Connection) -> rusqlite::Result<()> {
    conn.authorizer(None::<fn(AuthContext<'_>) -> Authorization>)?;
    conn.progress_handler(0, None::<fn() -> bool>)?;
    Ok(())
}
