//! The connectors against real things: temporary directory trees with attack fixtures, real
//! SQLite files, the PostgreSQL server on 127.0.0.1:5432, all through an MCP server and an
//! in-process client, as a model would call them.
#![allow(
    clippy::needless_pass_by_value,
    reason = "test helpers take what they check by value"
)]

mod config;
mod confirm_modern;
mod fetch;
mod filesystem;
mod filesystem_attacks;
mod filesystem_roots;
mod filesystem_subscribe;
mod filesystem_watch;
mod gdrive;
mod github;
mod peer;
mod search;
mod search_content;
mod slack;
mod sql_postgres;
mod sql_sqlite;
mod supervision;
mod support;
