//! Integration tests of the MCP types: official examples, schema validation, property-based
//! round trips.
#![allow(
    clippy::needless_pass_by_value,
    clippy::unused_async,
    clippy::match_wildcard_for_single_variants,
    reason = "tests write tools the way users do (owned arguments, async without awaiting, as the macros require) and match only the variant they expect"
)]

mod examples;
mod roundtrip;
mod schema;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// `proto/tests/data/<revision>`.
pub(crate) fn data_dir(revision: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(revision)
}

/// Reads a JSON file.
pub(crate) fn load(path: &Path) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

/// Every `examples/<Type>/<case>.json` of a revision, as (type, file, value), sorted.
pub(crate) fn examples(revision: &str) -> Vec<(String, PathBuf, Value)> {
    let root = data_dir(revision).join("examples");
    let mut out = Vec::new();
    let mut dirs: Vec<_> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", root.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    for dir in dirs {
        let name = dir
            .file_name()
            .and_then(|n| n.to_str())
            .expect("utf-8 folder name")
            .to_owned();
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .expect("list example folder")
            .map(|e| e.expect("dir entry").path())
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        files.sort();
        assert!(!files.is_empty(), "{} has no examples", dir.display());
        for f in files {
            let v = load(&f);
            out.push((name.clone(), f, v));
        }
    }
    out
}

/// Deserializes `v` as `T` and serializes it back; the result must equal `v`.
pub(crate) fn roundtrip<T: DeserializeOwned + Serialize>(v: &Value) -> Result<T, String> {
    let typed: T = serde_json::from_value(v.clone()).map_err(|e| {
        format!(
            "does not deserialize as {}: {e}",
            std::any::type_name::<T>()
        )
    })?;
    let back = serde_json::to_value(&typed).map_err(|e| format!("does not serialize: {e}"))?;
    if &back != v {
        return Err(format!(
            "re-serialized as {} differs:\n  file: {v}\n  ours: {back}",
            std::any::type_name::<T>()
        ));
    }
    Ok(typed)
}
