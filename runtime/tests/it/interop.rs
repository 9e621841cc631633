//! The official MCP SDK clients (Python `mcp`, TypeScript v1 and v2) against
//! `toolyard serve --stdio`, in every generation each client speaks. The clients and their
//! checks live in `tests/interop/`; `scripts/install-test-deps` installs them.

use std::path::PathBuf;
use std::process::Command;

pub(crate) fn cache() -> PathBuf {
    std::env::var_os("TOOLYARD_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/toolyard"))
}

pub(crate) fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Runs one client script against `server` and asserts every check passed.
pub(crate) fn run_client(script: &str, profile: &str, protocol: &str, server: &[&str]) {
    let interpreter = if script.ends_with(".py") {
        cache().join("venv/bin/python")
    } else {
        PathBuf::from("node")
    };
    assert!(
        !script.ends_with(".py") || interpreter.exists(),
        "the Python SDK is not installed: run scripts/install-test-deps (or scripts/test)"
    );
    let out = Command::new(&interpreter)
        .arg(repo().join("tests/interop").join(script))
        .args([
            "--profile",
            profile,
            "--protocol",
            protocol,
            "--deadline",
            "60",
            "--",
        ])
        .args(server)
        .env("TOOLYARD_CACHE", cache())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {interpreter:?}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: serde_json::Value = stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| {
            panic!(
                "{script} printed no report (exit {:?}); stderr:\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )
        });
    let failed: Vec<_> = report["checks"]
        .as_array()
        .map(|c| c.iter().filter(|c| c["ok"] != true).cloned().collect())
        .unwrap_or_default();
    assert!(
        out.status.success() && report["ok"] == true && failed.is_empty(),
        "{script} --protocol {protocol}: failed checks {failed:#?}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let checks = report["checks"].as_array().map(Vec::len).unwrap_or(0);
    assert!(checks >= 10, "{script} ran only {checks} checks: {report}");
}

const SERVER: &[&str] = &[env!("CARGO_BIN_EXE_toolyard"), "serve", "--stdio"];

#[test]
fn python_sdk_legacy() {
    run_client("python_client.py", "demo", "legacy", SERVER);
}

#[test]
fn python_sdk_modern() {
    run_client("python_client.py", "demo", "modern", SERVER);
}

#[test]
fn typescript_sdk_v1_legacy() {
    run_client("ts_v1_client.mjs", "demo", "legacy", SERVER);
}

#[test]
fn typescript_client_v2_legacy() {
    run_client("ts_v2_client.mjs", "demo", "legacy", SERVER);
}

#[test]
fn typescript_client_v2_modern() {
    run_client("ts_v2_client.mjs", "demo", "modern", SERVER);
}
