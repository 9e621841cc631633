//! What the SQL tools return, the same for every database (as `structuredContent`, with a
//! JSON text copy).

use schemars::JsonSchema;
use serde::Serialize;

/// A query's result.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Rows {
    /// Column names, in order.
    pub columns: Vec<String>,
    /// Each row's values, in column order.
    pub rows: Vec<Vec<serde_json::Value>>,
    /// How many rows are returned.
    pub row_count: usize,
    /// More rows exist than were returned.
    pub truncated: bool,
}

/// A table or view.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Table {
    /// Its schema.
    pub schema: String,
    /// Its name.
    pub name: String,
    /// `table` or `view` (as the database says it).
    #[serde(rename = "type")]
    pub kind: String,
}

/// A column of a table.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Column {
    /// Its name.
    pub name: String,
    /// Its declared type.
    #[serde(rename = "type")]
    pub data_type: String,
    /// It may hold NULL.
    pub nullable: bool,
    /// Its default expression.
    pub default: Option<String>,
    /// It is part of the primary key.
    pub primary_key: bool,
}

/// The SQL text with trailing whitespace and semicolons removed (a trailing `;` is harmless
/// but would break wrapping the query as a subquery). Nothing else is touched: the
/// database judges the rest.
pub(crate) fn trim_trailing(sql: &str) -> &str {
    sql.trim_end_matches(|c: char| c.is_whitespace() || c == ';')
}
