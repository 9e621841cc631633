//! Helpers shared by the config tests: the fixture plugins, a fake `PATH` and environment,
//! and resolving one source written as TOML.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::error::SourceError;
use super::resolve::resolve_source_with;
use super::sections::{GatewaySection, SourceConfig};
use crate::spec::{Launch, ProcessSpec, SourceSpec};

pub(super) fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/plugins")
}

/// `PATH` for the tests: a fixture directory with stand-ins for `npx`, `uvx`, `docker`,
/// `python` and `node`, so tests never depend on what the machine has installed.
fn fake_path() -> PathBuf {
    fixtures().join("fake-bin")
}

pub(super) struct Env(HashMap<String, String>);

impl Env {
    pub(super) fn new(pairs: &[(&str, &str)]) -> Env {
        let mut m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        m.insert("PATH".into(), fake_path().to_string_lossy().into_owned());
        Env(m)
    }
    pub(super) fn get(&self, k: &str) -> Option<String> {
        self.0.get(k).cloned()
    }
}

pub(super) fn source(toml: &str) -> SourceConfig {
    toml::from_str(toml).unwrap_or_else(|e| panic!("{e}"))
}

pub(super) fn resolve(toml: &str, env: &Env) -> Result<SourceSpec, SourceError> {
    resolve_source_with(
        &source(toml),
        &fixtures(),
        &GatewaySection::default(),
        &|k| env.get(k),
    )
}

pub(super) fn process(spec: &SourceSpec) -> &ProcessSpec {
    match &spec.launch {
        Launch::Process(p) => p,
        other @ Launch::Remote(_) => panic!("{other:?}"),
    }
}
