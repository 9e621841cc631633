//! MCP message types of revisions 2026-07-28 and 2025-11-25, named as in the official schema.

mod capabilities;
mod common;

pub use capabilities::*;
pub use common::*;
