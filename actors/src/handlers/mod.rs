//! One actor per feature.

pub(crate) mod completion;
pub(crate) mod prompts;
pub(crate) mod resources;
pub(crate) mod tools;
