//! The SQL connector: `list_schemas`, `list_tables`, `describe_table`, `query` and `explain`
//! (and `execute` with `allow_writes`) over SQLite or PostgreSQL.
//!
//! Read-only is the database's job, not a parser's: every SQL parser- or prefix-based guard
//! in the reference servers has a public bypass (`COMMIT; DROP ..`, a leading comment, a
//! data-modifying CTE). SQLite reads go through a read-only open (or `query_only` for an
//! in-memory database) with an authorizer that allows only reading; PostgreSQL reads run in a
//! `READ ONLY` transaction that is always rolled back, over the extended protocol (one
//! statement per call), wrapped as a subquery so the grammar itself refuses anything but a
//! query, on a pooled connection whose session state (advisory locks, settings) is reset
//! before it is reused. Both cap rows and time. Tables are also resources
//! (`db://{schema}/{table}`: columns and first rows, read the same read-only way).

mod output;
mod pool;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "sqlite")]
mod sqlite;

use crate::tool::{tool, Effect};
use crate::{ConnectorError, SqlConfig};
pub use output::{Column, Rows, Table};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;
use toolyard::proto::{ResourceContents, ResourceTemplate};
use toolyard::{
    Controller, DefinitionError, HandlerError, Json, ResourceFn, ResourceRequest, TemplateDef,
    ToolDef,
};

/// The database behind the tools.
enum Backend {
    #[cfg(feature = "sqlite")]
    Sqlite(sqlite::Sqlite),
    #[cfg(feature = "postgres")]
    Postgres(Box<postgres::Postgres>),
}

/// One query's bounds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds {
    pub(crate) max_rows: u64,
    pub(crate) timeout: Duration,
}

struct Inner {
    backend: Backend,
    max_rows: u64,
    timeout: Duration,
    allow_writes: bool,
    confirm: bool,
}

impl Inner {
    fn bounds(&self, max_rows: Option<u64>, timeout_ms: Option<u64>) -> Bounds {
        Bounds {
            max_rows: max_rows.map_or(self.max_rows, |m| m.min(self.max_rows)),
            timeout: timeout_ms
                .map_or(self.timeout, |t| Duration::from_millis(t).min(self.timeout)),
        }
    }
}

/// The SQL connector, a controller of tools.
#[derive(Clone)]
pub struct Sql {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Sql {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may hold a password: never printed.
        f.debug_struct("Sql")
            .field("allow_writes", &self.inner.allow_writes)
            .finish_non_exhaustive()
    }
}

fn bad(message: impl Into<String>) -> ConnectorError {
    ConnectorError::Config {
        connector: "sql",
        message: message.into(),
    }
}

impl Sql {
    /// Opens (SQLite) or checks (PostgreSQL: the URL parses) the database of `config`.
    pub fn new(config: &SqlConfig) -> Result<Self, ConnectorError> {
        let url = config.url.as_str();
        let backend = if let Some(rest) = url.strip_prefix("sqlite:") {
            Self::sqlite(rest, config.allow_writes, config.max_connections)?
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Self::postgres(url, config.max_connections)?
        } else {
            return Err(bad(
                "`url` must start with `sqlite:` or `postgres://` (the value is not shown: it may hold a password)",
            ));
        };
        let sql = Sql {
            inner: Arc::new(Inner {
                backend,
                max_rows: config.max_rows.max(1),
                timeout: Duration::from_millis(config.timeout_ms.max(1)),
                allow_writes: config.allow_writes,
                confirm: config.confirm_destructive,
            }),
        };
        sql.definitions()?;
        sql.table_template()?;
        Ok(sql)
    }

    #[cfg(feature = "sqlite")]
    fn sqlite(rest: &str, allow_writes: bool, max: usize) -> Result<Backend, ConnectorError> {
        sqlite::Sqlite::open(rest, allow_writes, max)
            .map(Backend::Sqlite)
            .map_err(bad)
    }

    #[cfg(not(feature = "sqlite"))]
    fn sqlite(_rest: &str, _allow_writes: bool, _max: usize) -> Result<Backend, ConnectorError> {
        Err(ConnectorError::NotBuilt {
            connector: "sql",
            feature: "sqlite",
        })
    }

    #[cfg(feature = "postgres")]
    fn postgres(url: &str, max: usize) -> Result<Backend, ConnectorError> {
        postgres::Postgres::new(url, max)
            .map(|db| Backend::Postgres(Box::new(db)))
            .map_err(bad)
    }

    #[cfg(not(feature = "postgres"))]
    fn postgres(_url: &str, _max: usize) -> Result<Backend, ConnectorError> {
        Err(ConnectorError::NotBuilt {
            connector: "sql",
            feature: "postgres",
        })
    }

    /// How many times the connector's state actor (its connections) was rebuilt after a
    /// failure.
    pub fn state_restarts(&self) -> u64 {
        self.observer().restarts()
    }

    /// Publishes the restarts of the connector's state actor to `lifecycle`
    /// (`ComponentDown`, then `ComponentUp`, kind `connector`, name `sql`).
    /// [`Watchers::start`](crate::Watchers::start) does this for a connector installed
    /// from the config file.
    pub fn attach_lifecycle(&self, lifecycle: Arc<toolyard::Lifecycle>) {
        self.observer().attach(lifecycle);
    }

    pub(crate) fn observer(&self) -> crate::actor::Observer {
        match &self.inner.backend {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite(db) => db.state().observer(),
            #[cfg(feature = "postgres")]
            Backend::Postgres(db) => db.state().observer(),
        }
    }

    /// Test hook: the next job of the connector's state actor panics, as a bug would.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn panic_next_state_job(&self) {
        match &self.inner.backend {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite(db) => db.state().panic_next(),
            #[cfg(feature = "postgres")]
            Backend::Postgres(db) => db.state().panic_next(),
        }
    }

    fn definitions(&self) -> Result<Vec<ToolDef>, DefinitionError> {
        let mut tools = vec![
            {
                let i = self.inner.clone();
                tool(
                    "list_schemas",
                    "The database's schemas (SQLite: the attached databases, `main` first).",
                    Effect::Read,
                    move |_ctx, _a: NoArgs| {
                        let i = i.clone();
                        async move { i.schemas().await.map(Json) }
                    },
                )?
            },
            {
                let i = self.inner.clone();
                tool(
                    "list_tables",
                    "Tables and views of a schema (default `public` for PostgreSQL, `main` for SQLite).",
                    Effect::Read,
                    move |_ctx, a: ListTablesArgs| {
                        let i = i.clone();
                        async move { i.tables(a.schema).await.map(Json) }
                    },
                )?
            },
            {
                let i = self.inner.clone();
                tool(
                    "describe_table",
                    "The columns of a table: name, type, nullability, default and primary-key flag.",
                    Effect::Read,
                    move |_ctx, a: DescribeArgs| {
                        let i = i.clone();
                        async move { i.describe(a.schema, a.table).await.map(Json) }
                    },
                )?
            },
            {
                let i = self.inner.clone();
                tool(
                    "query",
                    "Run one read-only SQL query and return its columns and rows (capped; `truncated` says when more rows exist). The database refuses writes.",
                    Effect::Read,
                    move |_ctx, a: QueryArgs| {
                        let i = i.clone();
                        async move {
                            let bounds = i.bounds(a.max_rows, a.timeout_ms);
                            i.query(a.sql, bounds).await.map(Json)
                        }
                    },
                )?
            },
            {
                let i = self.inner.clone();
                tool(
                    "explain",
                    "The query plan of one SQL query, without running it.",
                    Effect::Read,
                    move |_ctx, a: ExplainArgs| {
                        let i = i.clone();
                        async move {
                            let bounds = i.bounds(None, None);
                            i.explain(a.sql, bounds).await
                        }
                    },
                )?
            },
        ];
        if self.inner.allow_writes {
            let i = self.inner.clone();
            tools.push(tool(
                "execute",
                "Run one SQL statement that may write (INSERT, UPDATE, DELETE, DDL) and commit it. Returns the number of rows affected.",
                Effect::Destructive,
                move |ctx, a: ExecuteArgs| {
                    let i = i.clone();
                    async move {
                        if i.confirm {
                            crate::tool::confirm(&ctx, format!("execute: {}", a.sql)).await?;
                        }
                        let bounds = i.bounds(None, a.timeout_ms);
                        i.execute(a.sql, bounds).await
                    }
                },
            )?);
        }
        Ok(tools)
    }
}

impl Inner {
    async fn schemas(&self) -> Result<Vec<String>, HandlerError> {
        let bounds = self.bounds(None, None);
        match &self.backend {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite(db) => db.schemas(bounds).await,
            #[cfg(feature = "postgres")]
            Backend::Postgres(db) => db.schemas(bounds).await,
        }
    }

    async fn tables(&self, schema: Option<String>) -> Result<Vec<Table>, HandlerError> {
        let bounds = self.bounds(None, None);
        match &self.backend {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite(db) => db.tables(schema, bounds).await,
            #[cfg(feature = "postgres")]
            Backend::Postgres(db) => db.tables(schema, bounds).await,
        }
    }

    async fn describe(
        &self,
        schema: Option<String>,
        table: String,
    ) -> Result<Vec<Column>, HandlerError> {
        let bounds = self.bounds(None, None);
        let columns = match &self.backend {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite(db) => db.describe(schema, table.clone(), bounds).await?,
            #[cfg(feature = "postgres")]
            Backend::Postgres(db) => db.describe(schema, table.clone(), bounds).await?,
        };
        if columns.is_empty() {
            return Err(HandlerError::failed(format!("no table or view `{table}`")));
        }
        Ok(columns)
    }

    async fn query(&self, sql: String, bounds: Bounds) -> Result<Rows, HandlerError> {
        match &self.backend {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite(db) => db.query(sql, bounds).await,
            #[cfg(feature = "postgres")]
            Backend::Postgres(db) => db.query(sql, bounds).await,
        }
    }

    async fn explain(&self, sql: String, bounds: Bounds) -> Result<String, HandlerError> {
        match &self.backend {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite(db) => db.explain(sql, bounds).await,
            #[cfg(feature = "postgres")]
            Backend::Postgres(db) => db.explain(sql, bounds).await,
        }
    }

    async fn execute(&self, sql: String, bounds: Bounds) -> Result<String, HandlerError> {
        if !self.allow_writes {
            return Err(HandlerError::failed(
                "writes are not allowed (allow_writes is off)",
            ));
        }
        let n = match &self.backend {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite(db) => db.execute(sql, bounds).await?,
            #[cfg(feature = "postgres")]
            Backend::Postgres(db) => db.execute(sql, bounds).await?,
        };
        Ok(format!("{n} rows affected"))
    }
}

impl Controller for Sql {
    fn tools(self: &Arc<Self>) -> Vec<ToolDef> {
        // Checked in `new`; an error here would be a bug, logged rather than a panic.
        self.definitions().unwrap_or_else(|e| {
            tracing::error!(error = %e, "sql connector: a tool definition was refused");
            Vec::new()
        })
    }

    fn templates(self: &Arc<Self>) -> Vec<TemplateDef> {
        match self.table_template() {
            Ok(t) => vec![t],
            Err(e) => {
                tracing::error!(error = %e, "sql connector: the db:// template was refused");
                Vec::new()
            }
        }
    }
}

/// A table read as a resource: its columns and its first rows.
#[derive(Debug, Serialize)]
struct TableResource {
    schema: String,
    table: String,
    columns: Vec<Column>,
    sample: Rows,
}

/// `name` as a double-quoted SQL identifier (both engines), quotes inside doubled.
fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

impl Sql {
    /// `db://{schema}/{table}`: a table's columns and first 20 rows, read through the same
    /// read-only path as `query`.
    fn table_template(&self) -> Result<TemplateDef, DefinitionError> {
        let inner = self.inner.clone();
        let reader: ResourceFn = Arc::new(move |_ctx, request: ResourceRequest| {
            let inner = inner.clone();
            Box::pin(async move {
                let var = |k: &str| {
                    request
                        .vars
                        .get(k)
                        .map(|v| crate::uri::percent_decode(v))
                        .unwrap_or_default()
                };
                let (schema, table) = (var("schema"), var("table"));
                let columns = inner.describe(Some(schema.clone()), table.clone()).await?;
                let sql = format!(
                    "SELECT * FROM {}.{}",
                    quote_ident(&schema),
                    quote_ident(&table)
                );
                let sample = inner.query(sql, inner.bounds(Some(20), None)).await?;
                let body = TableResource {
                    schema,
                    table,
                    columns,
                    sample,
                };
                let text = serde_json::to_string_pretty(&body)
                    .map_err(|e| HandlerError::failed(e.to_string()))?;
                Ok(vec![ResourceContents::text(
                    request.uri.clone(),
                    Some("application/json".to_owned()),
                    text,
                )]
                .into())
            })
        });
        TemplateDef::new(
            ResourceTemplate {
                uri_template: "db://{schema}/{table}".to_owned(),
                name: "table".to_owned(),
                title: Some("A table: its columns and first rows".to_owned()),
                description: Some(
                    "A table or view of the database (db://main/users for SQLite, db://public/users for PostgreSQL): its columns and first 20 rows as JSON."
                        .to_owned(),
                ),
                mime_type: Some("application/json".to_owned()),
                annotations: None,
                icons: None,
                meta: None,
            },
            reader,
        )
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
struct NoArgs {}

#[derive(Debug, Deserialize, JsonSchema)]
struct ListTablesArgs {
    /// The schema (default `public` for PostgreSQL, `main` for SQLite).
    #[serde(default)]
    schema: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct DescribeArgs {
    /// The table or view.
    table: String,
    /// Its schema (default `public` for PostgreSQL, `main` for SQLite).
    #[serde(default)]
    schema: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct QueryArgs {
    /// One SQL query (SELECT, VALUES, WITH ... SELECT).
    sql: String,
    /// Return at most this many rows (the server's cap applies too).
    #[serde(default)]
    max_rows: Option<u64>,
    /// Give up after this many milliseconds (the server's cap applies too).
    #[serde(default)]
    timeout_ms: Option<u64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct ExplainArgs {
    /// One SQL query.
    sql: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct ExecuteArgs {
    /// One SQL statement.
    sql: String,
    /// Give up after this many milliseconds (the server's cap applies too).
    #[serde(default)]
    timeout_ms: Option<u64>,
}
