//! The official MCP conformance suite (`@modelcontextprotocol/conformance`, pinned in
//! `tests/conformance/harness/`) against `conformance-server --http`. The harness installs
//! the suite and the Node 22 it needs into `~/.cache/mcp-conformance` on first use.

use std::path::PathBuf;
use std::process::Command;

fn run_suite(version: &str, args: &[&str], expected: usize) {
    let harness = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("harness/server.sh");
    let server = format!(
        "{} --http 127.0.0.1:{{port}}",
        env!("CARGO_BIN_EXE_conformance-server")
    );
    let out = Command::new("bash")
        .arg(&harness)
        .arg(&server)
        .args(args)
        .env("MCP_CONFORMANCE_VERSION", version)
        .output()
        .expect("run the conformance harness");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary = stdout.lines().last().unwrap_or_default().to_owned();
    assert!(
        out.status.success() && summary == format!("{expected} passed, 0 failed"),
        "suite {version} {args:?}: {summary}\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn suite_0_1_active_scenarios_all_pass() {
    run_suite("0.1", &[], 30);
}

#[test]
fn suite_0_2_requirements_2025_11_25_all_pass() {
    run_suite("0.2", &["--requirements", "2025-11-25"], 30);
}

#[test]
fn suite_0_2_requirements_2026_07_28_all_pass() {
    run_suite("0.2", &["--requirements", "2026-07-28"], 37);
}

#[test]
fn suite_0_2_spec_version_2026_07_28_all_pass() {
    run_suite("0.2", &["--spec-version", "2026-07-28"], 40);
}

/// Every scenario of suite 0.2, the tasks extension's (SEP-2663, not scored by any
/// requirements file) included.
#[test]
fn suite_0_2_all_scenarios_with_the_tasks_extension() {
    run_suite("0.2", &["--suite", "all"], 65);
}
