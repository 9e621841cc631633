//! A watchdog that stops the stdio servers we started when we die without stopping them.
//!
//! The stdio transport stops a server's whole process group when the connection closes, when
//! its link is dropped, even when the tokio runtime goes away. None of that runs when our
//! process is killed outright (SIGKILL, the OOM killer, an abort): the servers get EOF on
//! stdin, and most exit — but not all do, and a server started through a wrapper (`npx`,
//! `uvx`, a shell script) may leave a grandchild that never reads stdin at all. They would
//! run on, orphaned, holding ports, locks and memory.
//!
//! So a process that embeds Toolyard may start one small helper, a second copy of its own
//! binary run as `<program> __reap-orphans` (see [`run_watchdog`]). It is told each group as
//! it is started (`+PGID` on its stdin) and as it is stopped (`-PGID`). Its stdin is a pipe
//! only we hold (Rust opens pipes close-on-exec, so no server inherits it): when it reads
//! end-of-file we are gone, however we died, and it sends SIGTERM to every group still
//! listed, waits up to [`GRACE`] for them, then sends SIGKILL. One helper serves every
//! connection of the process; it is started with the first server, so a process that never
//! starts one never starts it.
//!
//! The `toolyard` binary turns this on with [`reap_orphans_with`] (its own path); a library
//! user opts in the same way and calls [`run_watchdog`] from its `main` for the argument
//! [`WATCHDOG_ARG`]. Off, nothing changes but this one protection.

use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use std::collections::BTreeSet;
use std::io::{BufRead, Write};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, ExitCode, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The argument that makes a program run as the watchdog ([`run_watchdog`]).
pub const WATCHDOG_ARG: &str = "__reap-orphans";

/// How long the watchdog lets orphaned servers stop after SIGTERM before it sends SIGKILL.
pub const GRACE: Duration = Duration::from_secs(2);

struct Watchdog {
    program: PathBuf,
    running: Option<(Child, ChildStdin)>,
    /// Starting or writing to it failed once: said once, not retried.
    broken: bool,
}

static WATCHDOG: Mutex<Option<Watchdog>> = Mutex::new(None);

/// Stops this process's stdio servers if it dies without stopping them: `program` (normally
/// [`std::env::current_exe`]) is run with [`WATCHDOG_ARG`] when the first server starts.
pub fn reap_orphans_with(program: impl Into<PathBuf>) {
    let mut slot = WATCHDOG.lock().unwrap_or_else(|p| p.into_inner());
    *slot = Some(Watchdog {
        program: program.into(),
        running: None,
        broken: false,
    });
}

/// Tells the watchdog (if there is one) about a process group started (`true`) or stopped.
pub(crate) fn tell(pgid: Pid, started: bool) {
    let mut slot = WATCHDOG.lock().unwrap_or_else(|p| p.into_inner());
    let Some(watchdog) = slot.as_mut() else {
        return;
    };
    if watchdog.broken {
        return;
    }
    if watchdog.running.is_none() {
        if !started {
            return;
        }
        let spawned = Command::new(&watchdog.program)
            .arg(WATCHDOG_ARG)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            // Out of the terminal's Ctrl-C: it must outlive us.
            .process_group(0)
            .spawn();
        match spawned {
            Ok(mut child) => match child.stdin.take() {
                Some(stdin) => watchdog.running = Some((child, stdin)),
                None => watchdog.broken = true,
            },
            Err(e) => {
                tracing::warn!(program = %watchdog.program.display(), error = %e,
                    "cannot start the orphan watchdog: stdio servers outlive this process if it is killed");
                watchdog.broken = true;
                return;
            }
        }
    }
    let Some((_, stdin)) = watchdog.running.as_mut() else {
        return;
    };
    let line = format!("{}{}\n", if started { '+' } else { '-' }, pgid.as_raw());
    if let Err(e) = stdin.write_all(line.as_bytes()) {
        tracing::warn!(error = %e, "the orphan watchdog is gone: stdio servers outlive this process if it is killed");
        watchdog.broken = true;
    }
}

/// The watchdog's `main`: reads `+PGID` / `-PGID` lines until end-of-file, then stops every
/// group still listed (SIGTERM, up to [`GRACE`], SIGKILL).
pub fn run_watchdog() -> ExitCode {
    let mut groups = BTreeSet::new();
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let (sign, pgid) = line.split_at(line.len().min(1));
        let Ok(pgid) = pgid.parse::<i32>() else {
            continue;
        };
        if pgid <= 1 {
            continue;
        }
        match sign {
            "+" => {
                groups.insert(pgid);
            }
            "-" => {
                groups.remove(&pgid);
            }
            _ => {}
        }
    }
    stop_groups(groups.into_iter().map(Pid::from_raw).collect(), GRACE);
    ExitCode::SUCCESS
}

fn stop_groups(mut groups: Vec<Pid>, grace: Duration) {
    groups.retain(|g| !matches!(killpg(*g, Signal::SIGTERM), Err(Errno::ESRCH)));
    let deadline = Instant::now() + grace;
    while !groups.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        groups.retain(|g| super::stdio::group_alive(*g));
    }
    for g in groups {
        let _ = killpg(g, Signal::SIGKILL);
    }
}
