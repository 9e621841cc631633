//! `conformance-server --stdio` against the official SDK clients (the conformance suite
//! itself only speaks HTTP). The client scripts live in `tests/interop/`.

mod interop_http;
mod suite;

use std::path::PathBuf;
use std::process::Command;

fn cache() -> PathBuf {
    std::env::var_os("TOOLYARD_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/toolyard"))
}

fn run_client(script: &str, protocol: &str) {
    let interpreter = if script.ends_with(".py") {
        cache().join("venv/bin/python")
    } else {
        PathBuf::from("node")
    };
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new(&interpreter)
        .arg(repo.join("tests/interop").join(script))
        .args([
            "--profile",
            "conformance",
            "--protocol",
            protocol,
            "--deadline",
            "60",
            "--",
        ])
        .args([env!("CARGO_BIN_EXE_conformance-server"), "--stdio"])
        .env("TOOLYARD_CACHE", cache())
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run {interpreter:?} (run scripts/install-test-deps): {e}")
        });
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: serde_json::Value = stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| {
            panic!(
                "{script}: no report; stderr:\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    let failed: Vec<_> = report["checks"]
        .as_array()
        .map(|c| c.iter().filter(|c| c["ok"] != true).cloned().collect())
        .unwrap_or_default();
    assert!(
        out.status.success() && report["ok"] == true && failed.is_empty(),
        "{script} --protocol {protocol}: failed {failed:#?}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(report["checks"].as_array().map(Vec::len).unwrap_or(0) >= 10);
}

#[test]
fn python_sdk_legacy() {
    run_client("python_client.py", "legacy");
}

#[test]
fn python_sdk_modern() {
    run_client("python_client.py", "modern");
}

#[test]
fn typescript_sdk_v1_legacy() {
    run_client("ts_v1_client.mjs", "legacy");
}

#[test]
fn typescript_client_v2_legacy() {
    run_client("ts_v2_client.mjs", "legacy");
}

#[test]
fn typescript_client_v2_modern() {
    run_client("ts_v2_client.mjs", "modern");
}
