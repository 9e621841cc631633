//! One actor per feature, each owning what it serves: the tool, resource and prompt catalogs
//! (registries, listing, change notifications), completion, and the custom methods.

pub(crate) mod completion;
pub(crate) mod custom;
pub(crate) mod prompts;
pub(crate) mod resources;
pub(crate) mod tools;
