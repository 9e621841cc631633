//! Link settings for the `toolyard` binary only (the library, tests and examples are not
//! affected).
//!
//! `link/startup.order` lists the functions the binary runs while it starts `serve --stdio`
//! and answers its first requests (written by `scripts/startup-order`). Handed to lld as
//! `--symbol-ordering-file`, they end up side by side at the start of `.text`, so an idle
//! server keeps far fewer executable pages resident (a page fault maps a whole 64 KiB
//! fault-around window, or a whole large folio of the page cache, so start-up code scattered
//! over 10 MB of `.text` keeps most of it resident). See "Idle RSS" in `benches/README.md`.
//!
//! The flag is lld's (GNU ld does not know it), so it is only passed for x86_64 and aarch64
//! Linux GNU targets, and only when a probe shows that this build's linker takes it: the
//! script links an empty program with the same compiler, target, RUSTFLAGS and linker and the
//! two flags. Rust 1.90 and later link x86_64-unknown-linux-gnu with their bundled rust-lld
//! by default (rustup toolchains), so there the probe succeeds; with GNU ld (older or distro
//! compilers, `-C linker-features=-lld`, aarch64 by default) it fails and the binary links
//! as before. Arguments given only to `cargo rustc -- ...` are not visible to the probe.
//! Setting `TOOLYARD_NO_SYMBOL_ORDERING` (to anything) at build time turns the ordering off,
//! for comparisons. Symbol names that no longer exist are ignored (`--no-warn-symbol-ordering`):
//! a stale file only packs less well.

use std::env;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn main() {
    // Cargo always sets it for build scripts; without it there is nothing to order.
    let Some(manifest_dir) = env::var_os("CARGO_MANIFEST_DIR") else {
        return;
    };
    let order = Path::new(&manifest_dir)
        .join("runtime")
        .join("cli")
        .join("link")
        .join("startup.order");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed={}", order.display());
    println!("cargo:rerun-if-env-changed=TOOLYARD_NO_SYMBOL_ORDERING");
    let target = env::var("TARGET").unwrap_or_default();
    let supported = matches!(
        target.as_str(),
        "x86_64-unknown-linux-gnu" | "aarch64-unknown-linux-gnu"
    );
    // `-Wl,` splits its argument at commas.
    let usable = order.is_file() && !order.to_string_lossy().contains(',');
    if env::var_os("TOOLYARD_NO_SYMBOL_ORDERING").is_some() || !supported || !usable {
        return;
    }
    let args = [
        format!("-Wl,--symbol-ordering-file={}", order.display()),
        "-Wl,--no-warn-symbol-ordering".to_owned(),
    ];
    if !linker_takes(&target, &args) {
        // Only where rust-lld is the default is its absence worth a word.
        if target == "x86_64-unknown-linux-gnu" {
            println!(
                "cargo:warning=the linker does not take --symbol-ordering-file (not lld?): \
                 the toolyard binary is linked without its start-up order (more idle RSS)"
            );
        }
        return;
    }
    for arg in args {
        println!("cargo:rustc-link-arg-bin=toolyard={arg}");
    }
}

/// Whether an empty program links for `target` with this build's compiler, RUSTFLAGS and
/// linker plus `args`.
fn linker_takes(target: &str, args: &[String]) -> bool {
    let (Some(rustc), Some(out)) = (env::var_os("RUSTC"), env::var_os("OUT_DIR")) else {
        return false;
    };
    let out = PathBuf::from(out);
    let source = out.join("link_probe.rs");
    if std::fs::write(&source, "fn main() {}\n").is_err() {
        return false;
    }
    let mut probe = Command::new(rustc);
    probe
        .arg("--crate-name=link_probe")
        .arg("--crate-type=bin")
        .arg("--edition=2021")
        .arg("--target")
        .arg(target)
        .arg("-o")
        .arg(out.join("link_probe"))
        .arg(&source);
    let flags = env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    probe.args(flags.split('\u{1f}').filter(|flag| !flag.is_empty()));
    if let Some(linker) = env::var_os("RUSTC_LINKER") {
        let mut flag = OsString::from("linker=");
        flag.push(linker);
        probe.arg("-C").arg(flag);
    }
    for arg in args {
        probe.arg("-C").arg(format!("link-arg={arg}"));
    }
    probe
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}
