//! MCP message types of revisions 2026-07-28 and 2025-11-25, named as in the official schema.

#[macro_use]
mod macros;
mod num;

mod base;
mod capabilities;
mod common;
mod completion;
mod content;
mod discover;
mod elicitation;
mod lifecycle;
mod logging;
mod messages;
mod mrtr;
mod notifications;
mod pagination;
mod prompts;
mod resources;
mod roots;
mod sampling;
mod subscriptions;
mod tasks;
mod tools;

pub use base::*;
pub use capabilities::*;
pub use common::*;
pub use completion::*;
pub use content::*;
pub use discover::*;
pub use elicitation::*;
pub use lifecycle::*;
pub use logging::*;
pub use messages::*;
pub use mrtr::*;
pub use notifications::*;
pub use pagination::*;
pub use prompts::*;
pub use resources::*;
pub use roots::*;
pub use sampling::*;
pub use subscriptions::*;
pub use tasks::*;
pub use tools::*;
