//! The official MCP conformance suite's client scenarios against `conformance-client`
//! (every scenario, one at a time, exit codes counted: `harness/client.sh`).

use std::path::PathBuf;
use std::process::Command;

fn run_client_suite(version: &str, args: &[&str], expected: usize) {
    let harness = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("harness/client.sh");
    let out = Command::new("bash")
        .arg(&harness)
        .arg(env!("CARGO_BIN_EXE_conformance-client"))
        .args(args)
        .env("MCP_CONFORMANCE_VERSION", version)
        .output()
        .expect("run the conformance harness");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary = stdout.lines().last().unwrap_or_default().to_owned();
    assert!(
        out.status.success() && summary == format!("{expected} passed, 0 failed"),
        "client suite {version} {args:?}: {summary}\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Suite 0.1.16: all 26 client scenarios (core, auth, back-compat, extensions).
#[test]
fn client_suite_0_1_all_scenarios_pass() {
    run_client_suite("0.1", &[], 26);
}

/// Suite 0.2 at 2025-11-25: 19 scenarios.
#[test]
fn client_suite_0_2_spec_version_2025_11_25_all_pass() {
    run_client_suite("0.2", &["--spec-version", "2025-11-25"], 19);
}

/// Suite 0.2 at 2026-07-28 (stateless): 33 scenarios (the reference TypeScript client
/// gets 32).
#[test]
fn client_suite_0_2_spec_version_2026_07_28_all_pass() {
    run_client_suite("0.2", &["--spec-version", "2026-07-28"], 33);
}
