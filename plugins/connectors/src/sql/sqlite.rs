//! SQLite: reads on a connection SQL cannot make writable.
//!
//! A file database is opened `SQLITE_OPEN_READ_ONLY` for every read; an in-memory one (which
//! has only its one connection) gets `PRAGMA query_only` for the call. On top of that an
//! authorizer allows only reading (no `ATTACH`, no `PRAGMA` but the catalogue ones, no
//! transaction control, no `load_extension`), `SQLITE_LIMIT_ATTACHED` is 0, the statement
//! must be single and `sqlite3_stmt_readonly`, and a progress handler ends it at its
//! deadline. Each call runs on a blocking thread.

use super::output::{trim_trailing, Column, Rows, Table};
use super::Bounds;
use base64::Engine as _;
use rusqlite::hooks::{AuthAction, AuthContext, Authorization};
use rusqlite::limits::Limit;
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use toolyard::HandlerError;

/// Where the database is.
enum Location {
    File(PathBuf),
    Memory(Arc<Mutex<Connection>>),
}

/// A SQLite database.
pub(crate) struct Sqlite {
    location: Arc<Location>,
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
    pub(crate) fn open(rest: &str, allow_writes: bool) -> Result<Sqlite, String> {
        if rest == ":memory:" || rest == "//:memory:" {
            let conn = Connection::open_in_memory().map_err(|e| format!("SQLite: {e}"))?;
            return Ok(Sqlite {
                location: Arc::new(Location::Memory(Arc::new(Mutex::new(conn)))),
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
        })
    }

    /// Runs `f` on a guarded read-only connection, on a blocking thread.
    async fn read<T, F>(&self, bounds: Bounds, f: F) -> Result<T, HandlerError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        let location = self.location.clone();
        crate::tool::blocking(move || {
            let deadline = Instant::now() + bounds.timeout;
            match &*location {
                Location::File(path) => {
                    let mut conn = Connection::open_with_flags(
                        path,
                        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
                    )
                    .map_err(|e| sqlite_error(&e, bounds))?;
                    guard(&mut conn, deadline).map_err(|e| sqlite_error(&e, bounds))?;
                    f(&conn).map_err(|e| sqlite_error(&e, bounds))
                }
                Location::Memory(shared) => {
                    let mut conn = shared
                        .lock()
                        .map_err(|_| HandlerError::failed("SQLite: the connection is poisoned"))?;
                    conn.execute_batch("PRAGMA query_only = ON")
                        .map_err(|e| sqlite_error(&e, bounds))?;
                    let outcome = guard(&mut conn, deadline).and_then(|()| f(&conn));
                    let reset = unguard(&mut conn)
                        .and_then(|()| conn.execute_batch("PRAGMA query_only = OFF"));
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
        let location = self.location.clone();
        crate::tool::blocking(move || {
            let deadline = Instant::now() + bounds.timeout;
            let run = |conn: &mut Connection| -> rusqlite::Result<u64> {
                conn.set_limit(Limit::SQLITE_LIMIT_ATTACHED, 0)?;
                conn.authorizer(Some(write_authorizer))?;
                conn.progress_handler(1000, Some(move || Instant::now() > deadline))?;
                let outcome = conn
                    .prepare(trim_trailing(&sql))
                    .and_then(|mut s| s.execute([]))
                    .map(|n| n as u64);
                unguard(conn)?;
                outcome
            };
            match &*location {
                Location::File(path) => {
                    let mut conn = Connection::open_with_flags(
                        path,
                        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
                    )
                    .map_err(|e| sqlite_error(&e, bounds))?;
                    run(&mut conn).map_err(|e| sqlite_error(&e, bounds))
                }
                Location::Memory(shared) => {
                    let mut conn = shared
                        .lock()
                        .map_err(|_| HandlerError::failed("SQLite: the connection is poisoned"))?;
                    run(&mut conn).map_err(|e| sqlite_error(&e, bounds))
                }
            }
        })
        .await
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
