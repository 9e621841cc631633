//! The `toolyard` crate's integration tests (one binary keeps link time low).

mod core;
mod macros;
mod stdio;
