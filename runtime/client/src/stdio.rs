//! The stdio client transport: spawns an MCP server as a child process and speaks
//! newline-delimited JSON-RPC over its stdin and stdout.
//!
//! ```no_run
//! # use toolyard_client::StdioTransport;
//! # use std::time::Duration;
//! let transport = StdioTransport::from_command_line("npx -y @modelcontextprotocol/server-everything")?
//!     .env("API_KEY", "…")
//!     .close_grace(Duration::from_secs(1));
//! # Ok::<(), toolyard_client::TransportError>(())
//! ```
//!
//! Why it works the way it does:
//!
//! - **Its own process group.** Servers are very often launched through wrappers (`npx`,
//!   `uvx`, `docker run`, shell scripts) whose real server is a grandchild. Killing only the
//!   direct child leaves the grandchild running, orphaned, holding the pipes open. The child
//!   is therefore started as the leader of a new process group, and every signal we send
//!   (SIGTERM, then SIGKILL) goes to the whole group. Being in its own group also keeps the
//!   server out of the terminal's Ctrl-C, so the embedding application decides when it stops.
//! - **A clean environment.** By default the child sees only `PATH` and `HOME` from our
//!   environment (enough for `npx`, `uvx` and most interpreters to find themselves and their
//!   caches), the proxy and TLS trust-store variables of
//!   [`StdioTransport::DEFAULT_INHERITED_ENV`] (`HTTPS_PROXY`, `NO_PROXY`, `SSL_CERT_FILE`,
//!   `NODE_EXTRA_CA_CERTS`, ...: without them a package manager behind a corporate proxy or
//!   a private certificate authority cannot fetch the server), plus what was configured with
//!   [`StdioTransport::env`]. Our process's environment typically holds credentials (cloud
//!   keys, tokens) that a third-party server has no business reading, so everything else
//!   stays out: [`StdioTransport::inherit_env_vars`] passes more names,
//!   [`StdioTransport::inherit_env_defaults`] turns the proxy and trust-store list off, and
//!   [`StdioTransport::inherit_env`] passes everything.
//! - **Malformed output closes the connection.** stdout is the only channel: a line that is
//!   not JSON (a stray `println!`, a banner, a log line on the wrong stream) means the framing
//!   can no longer be trusted, and an answer we cannot read leaves a caller waiting forever.
//!   So the transport reports [`TransportError::Malformed`] quoting the start of the line,
//!   which fails every pending request at once, and terminates the process. The same goes for
//!   a message over the size limit: we would have to buffer it whole to skip it.
//! - **stderr is drained, always.** A server logging to stderr blocks once the pipe's buffer
//!   (64 KiB on Linux) is full, and then stops answering. stderr is read line by line into
//!   `tracing` (target `toolyard_client::stdio`, fields `server` and `pid`, level INFO), each
//!   line capped at 4 KiB and at most 100 lines a second, so a flood costs neither memory nor
//!   the application's log.
//! - **The end is reported once, with the reason.** The server's exit (`exit status 3`,
//!   `signal 9`), stdout closing while it lives on (`closed its stdout`), malformed output, or
//!   a failed write becomes exactly one [`TransportEvent::Closed`], after every message read
//!   before it. Output written just before an exit is still delivered.
//! - **No leaks.** [`TransportLink::close`] closes stdin, waits for the server to exit, then
//!   sends SIGTERM to the group, then SIGKILL, each after the grace period, and reaps the
//!   child. Dropping the link without closing runs the same sequence; if the tokio runtime
//!   itself goes away, the group gets SIGTERM at once and a plain thread sends SIGKILL after
//!   the grace period and reaps the child. If our process is killed outright, an optional
//!   watchdog process stops the groups it leaves ([`super::orphans`]).

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::{
    EventSink, OutboundMessage, Transport, TransportError, TransportEvent, TransportLink,
    Undelivered,
};
use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::{CancellationToken, DropGuard};
use toolyard_proto::BoxFuture;
use toolyard_proto::RequestId;

/// The `tracing` target of everything this transport logs, including the server's stderr.
const TARGET: &str = "toolyard_client::stdio";
/// What the child always keeps of our environment (besides
/// [`StdioTransport::DEFAULT_INHERITED_ENV`] and what is named), unless
/// [`StdioTransport::inherit_env`] passes all of it.
const KEPT_ENV: [&str; 2] = ["PATH", "HOME"];
/// The longest stderr line logged; the rest of the line is dropped.
const MAX_STDERR_LINE: usize = 4 * 1024;
/// How much of the last stderr line an exit error quotes.
const LAST_STDERR_CHARS: usize = 300;

/// stderr lines logged per second at most; the others are counted and reported.
const STDERR_LINES_PER_SEC: u32 = 100;
/// How long to wait for the reader to deliver what a process wrote before it exited, and
/// for a process to exit once its stdout closed, before deciding which it was.
const SETTLE: Duration = Duration::from_millis(500);
/// How often the group is checked while waiting for it to die.
const POLL: Duration = Duration::from_millis(20);
/// How much of a bad line an error message quotes.
const QUOTE_CHARS: usize = 120;

/// A transport that spawns an MCP server and talks to it over stdin/stdout.
///
/// Built with [`new`](Self::new) or [`from_command_line`](Self::from_command_line), then
/// handed to a client, which starts it.
#[derive(Clone)]
pub struct StdioTransport {
    program: OsString,
    args: Vec<OsString>,
    current_dir: Option<PathBuf>,
    env: Vec<(OsString, OsString)>,
    inherit_env: bool,
    inherit_defaults: bool,
    inherit_vars: Vec<OsString>,
    close_grace: Duration,
    max_message_bytes: usize,
    name: Option<String>,
}

impl fmt::Debug for StdioTransport {
    // Environment values are often secrets: only their names are shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StdioTransport")
            .field("command", &self.command_line())
            .field("current_dir", &self.current_dir)
            .field("env", &self.env.iter().map(|(k, _)| k).collect::<Vec<_>>())
            .field("inherit_env", &self.inherit_env)
            .field("inherit_env_defaults", &self.inherit_defaults)
            .field("inherit_env_vars", &self.inherit_vars)
            .field("close_grace", &self.close_grace)
            .field("max_message_bytes", &self.max_message_bytes)
            .field("name", &self.server_name())
            .finish()
    }
}

impl StdioTransport {
    /// The variables of ours a server gets by default besides `PATH` and `HOME` (when we
    /// have them): how package managers and HTTP clients find a proxy and a private
    /// certificate authority, so `npx`, `uvx`, `pip` and `git` reach their registries from
    /// behind a corporate proxy or TLS inspection. Turned off with
    /// [`inherit_env_defaults(false)`](Self::inherit_env_defaults).
    ///
    /// | Variables | Read by |
    /// |---|---|
    /// | `HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY`, `NO_PROXY` and their lowercase forms | curl and libcurl (so git; curl takes `http_proxy` in lowercase only), uv, pip (requests), npm, Go, Node.js with `NODE_USE_ENV_PROXY` |
    /// | `SSL_CERT_FILE`, `SSL_CERT_DIR` | OpenSSL and everything on it (Python's `ssl`, curl, git), uv, Node.js with `--use-openssl-ca` |
    /// | `REQUESTS_CA_BUNDLE`, `CURL_CA_BUNDLE` | Python requests (pip vendors it), curl |
    /// | `PIP_CERT` | pip (`--cert`) |
    /// | `NODE_EXTRA_CA_CERTS` | Node.js (so npm and npx) |
    /// | `NODE_USE_SYSTEM_CA`, `NODE_USE_ENV_PROXY` | Node.js: trust the system store, honour the proxy variables |
    /// | `UV_NATIVE_TLS` | uv: trust the system store instead of its bundled roots |
    /// | `GIT_SSL_CAINFO`, `GIT_SSL_CAPATH` | git over HTTPS (`npx github:…`, `uvx --from git+https://…`) |
    ///
    /// Left out on purpose (name them with [`inherit_env_vars`](Self::inherit_env_vars) when
    /// a server needs them): `NODE_OPTIONS` (it loads code and flags such as `--inspect`
    /// into every Node.js server), variables that switch certificate checks off
    /// (`NODE_TLS_REJECT_UNAUTHORIZED`, `GIT_SSL_NO_VERIFY`, `UV_INSECURE_HOST`,
    /// `PIP_TRUSTED_HOST`), client certificates (`SSL_CLIENT_CERT`), and registry locations
    /// and tokens (`UV_INDEX_URL`, `PIP_INDEX_URL`, `NPM_CONFIG_REGISTRY`, …), which often
    /// carry credentials. A proxy URL can carry credentials too (`http://user:pass@proxy`);
    /// the server needs them to get out, which is why the proxy variables are passed.
    pub const DEFAULT_INHERITED_ENV: &'static [&'static str] = &[
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "NO_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
        "no_proxy",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "PIP_CERT",
        "NODE_EXTRA_CA_CERTS",
        "NODE_USE_SYSTEM_CA",
        "NODE_USE_ENV_PROXY",
        "UV_NATIVE_TLS",
        "GIT_SSL_CAINFO",
        "GIT_SSL_CAPATH",
    ];

    /// A transport that runs `command` (looked up in `PATH` unless it contains a `/`), with
    /// no arguments, a clean environment (`PATH`, `HOME` and the
    /// [`DEFAULT_INHERITED_ENV`](Self::DEFAULT_INHERITED_ENV) we have), a 2 s grace period per
    /// close phase and a 16 MiB message limit.
    pub fn new(command: impl Into<OsString>) -> Self {
        StdioTransport {
            program: command.into(),
            args: Vec::new(),
            current_dir: None,
            env: Vec::new(),
            inherit_env: false,
            inherit_defaults: true,
            inherit_vars: Vec::new(),
            close_grace: Duration::from_secs(2),
            max_message_bytes: 16 * 1024 * 1024,
            name: None,
        }
    }

    /// Splits a shell-like command line (`npx -y pkg "an arg"`: quotes and backslashes as in
    /// a POSIX shell, no expansion, no pipes) into the command and its arguments.
    pub fn from_command_line(line: &str) -> Result<Self, TransportError> {
        let words = shell_words::split(line).map_err(|e| {
            TransportError::Io(format!("cannot parse the command line {line:?}: {e}"))
        })?;
        let mut words = words.into_iter();
        let Some(program) = words.next() else {
            return Err(TransportError::Io("the command line is empty".into()));
        };
        Ok(StdioTransport::new(program).args(words))
    }

    /// Adds an argument.
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Adds arguments.
    pub fn args<I>(mut self, args: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// The server's working directory (default: ours).
    pub fn current_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.current_dir = Some(dir.into());
        self
    }

    /// Sets an environment variable for the server (over anything kept or inherited).
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Sets environment variables for the server.
    pub fn envs<I, K, V>(mut self, vars: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<OsString>,
        V: Into<OsString>,
    {
        self.env
            .extend(vars.into_iter().map(|(k, v)| (k.into(), v.into())));
        self
    }

    /// Whether the server inherits our whole environment (default `false`: it gets only
    /// `PATH`, `HOME`, the [`DEFAULT_INHERITED_ENV`](Self::DEFAULT_INHERITED_ENV) and what
    /// [`inherit_env_vars`](Self::inherit_env_vars) names, plus what [`env`](Self::env) sets).
    pub fn inherit_env(mut self, inherit: bool) -> Self {
        self.inherit_env = inherit;
        self
    }

    /// Passes these variables of ours on to the server as well (those we have; names we do
    /// not have are skipped). What [`env`](Self::env) sets wins over them.
    pub fn inherit_env_vars<I>(mut self, names: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<OsString>,
    {
        self.inherit_vars.extend(names.into_iter().map(Into::into));
        self
    }

    /// Whether the server gets the proxy and trust-store variables of
    /// [`DEFAULT_INHERITED_ENV`](Self::DEFAULT_INHERITED_ENV) (default `true`). `PATH` and
    /// `HOME` are passed either way.
    pub fn inherit_env_defaults(mut self, on: bool) -> Self {
        self.inherit_defaults = on;
        self
    }

    /// How long each phase of closing waits (default 2 s): after stdin is closed, for the
    /// server to exit; after SIGTERM, for the group to exit; then SIGKILL.
    pub fn close_grace(mut self, grace: Duration) -> Self {
        self.close_grace = grace;
        self
    }

    /// The largest message accepted from the server, in bytes (default 16 MiB); a longer
    /// line closes the connection with [`TransportError::Malformed`].
    pub fn max_message_bytes(mut self, max: usize) -> Self {
        self.max_message_bytes = max;
        self
    }

    /// The server's name in logs and errors (default: the command's file name).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// The command line, quoted as a shell would need it.
    pub fn command_line(&self) -> String {
        std::iter::once(&self.program)
            .chain(&self.args)
            .map(|w| shell_words::quote(&w.to_string_lossy()).into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn server_name(&self) -> String {
        match &self.name {
            Some(name) => name.clone(),
            None => Path::new(&self.program)
                .file_name()
                .unwrap_or(OsStr::new(""))
                .to_string_lossy()
                .into_owned(),
        }
    }

    fn spawn(self, events: EventSink) -> Result<Arc<dyn TransportLink>, TransportError> {
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(false);
        if !self.inherit_env {
            cmd.env_clear();
            let defaults = if self.inherit_defaults {
                Self::DEFAULT_INHERITED_ENV
            } else {
                &[]
            };
            let kept = KEPT_ENV
                .iter()
                .chain(defaults)
                .map(OsStr::new)
                .chain(self.inherit_vars.iter().map(OsString::as_os_str));
            for key in kept {
                if let Some(value) = std::env::var_os(key) {
                    cmd.env(key, value);
                }
            }
        }
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        if let Some(dir) = &self.current_dir {
            cmd.current_dir(dir);
        }
        let where_ = match &self.current_dir {
            Some(dir) => format!(" in {}", dir.display()),
            None => String::new(),
        };
        let mut child = cmd.spawn().map_err(|e| {
            TransportError::Io(format!(
                "cannot start `{}`{where_}: {e}",
                self.command_line()
            ))
        })?;
        let ident = Ident {
            name: self.server_name().into(),
            pid: child.id().unwrap_or_default(),
            last_stderr: Arc::default(),
        };
        let pgid = Pid::from_raw(i32::try_from(ident.pid).unwrap_or(0));
        let mut guard = GroupGuard {
            pgid,
            grace: self.close_grace,
            leader_reaped: false,
            finished: false,
        };
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            // Cannot happen: all three are piped. The guard kills and reaps on drop.
            drop(child);
            drop(guard);
            return Err(TransportError::Io(format!(
                "`{}` started without its pipes",
                ident.name
            )));
        };
        if pgid.as_raw() <= 0 {
            guard.finished = true;
            return Err(TransportError::Io(format!(
                "`{}` has no process id",
                ident.name
            )));
        }
        super::orphans::tell(pgid, true);
        tracing::debug!(target: TARGET, server = %ident.name, pid = ident.pid,
            command = %self.command_line(), "started the server");

        let (out_tx, out_rx) = mpsc::unbounded_channel();
        let close = CancellationToken::new();
        let writer_stop = CancellationToken::new();
        let (done_tx, done_rx) = watch::channel(false);

        let writer = tokio::spawn(write_stdin(
            stdin,
            out_rx,
            writer_stop.clone(),
            ident.clone(),
            self.close_grace,
        ));
        let reader = tokio::spawn(read_stdout(
            stdout,
            events.clone(),
            self.max_message_bytes,
            ident.clone(),
        ));
        let stderr = tokio::spawn(drain_stderr(stderr, ident.clone()));
        let driver = Driver {
            child,
            guard,
            reader: Some(reader),
            writer: Some(writer),
            stderr,
            events,
            close: close.clone(),
            writer_stop,
            done: done_tx,
            ident,
        };
        tokio::spawn(driver.run());

        Ok(Arc::new(StdioLink {
            outbound: out_tx,
            _close_on_drop: close.clone().drop_guard(),
            close,
            done: done_rx,
        }))
    }
}

impl Transport for StdioTransport {
    fn start(
        self: Box<Self>,
        events: EventSink,
    ) -> BoxFuture<Result<Arc<dyn TransportLink>, TransportError>> {
        Box::pin(async move { self.spawn(events) })
    }
}

/// Who a log line or an error is about.
#[derive(Clone)]
struct Ident {
    name: Arc<str>,
    pid: u32,
    /// The server's last stderr line (shortened), quoted when it exits: usually the reason.
    last_stderr: Arc<std::sync::Mutex<Option<String>>>,
}

/// The client's handle: queues messages for the writer, asks the driver to close.
struct StdioLink {
    outbound: mpsc::UnboundedSender<OutboundMessage>,
    close: CancellationToken,
    /// Dropping the link closes the connection as [`TransportLink::close`] does.
    _close_on_drop: DropGuard,
    done: watch::Receiver<bool>,
}

impl TransportLink for StdioLink {
    fn send(&self, message: OutboundMessage) {
        // After the end the writer is gone; the client has had (or will get) `Closed`.
        let _ = self.outbound.send(message);
    }

    fn cancel(&self, _id: &RequestId) {
        // One stream for everything: nothing to close per request. The client sends
        // `notifications/cancelled` itself.
    }

    fn close(&self) -> BoxFuture<()> {
        self.close.cancel();
        let mut done = self.done.clone();
        Box::pin(async move {
            // Err: the driver is gone (runtime shutting down); its guard cleans up.
            let _ = done.wait_for(|finished| *finished).await;
        })
    }
    fn carries_headers(&self) -> bool {
        // A line of JSON on stdin is all a stdio server gets.
        false
    }
}

/// Writes queued messages to the server's stdin, batching what is queued into one write.
/// Returns an error message if a write failed; closes stdin when it returns.
async fn write_stdin(
    mut stdin: ChildStdin,
    mut outbound: mpsc::UnboundedReceiver<OutboundMessage>,
    stop: CancellationToken,
    ident: Ident,
    grace: Duration,
) -> Result<(), String> {
    let mut buf: Vec<u8> = Vec::with_capacity(8 * 1024);
    loop {
        let first = tokio::select! {
            biased;
            m = outbound.recv() => m,
            _ = stop.cancelled() => None,
        };
        let Some(first) = first else { break };
        // On a multi-thread runtime the writer wakes right after the first producer: one
        // yield lets the others queue theirs, so they share a write.
        tokio::task::yield_now().await;
        buf.clear();
        buf.extend_from_slice(&first.body);
        buf.push(b'\n');
        while let Ok(m) = outbound.try_recv() {
            buf.extend_from_slice(&m.body);
            buf.push(b'\n');
        }
        let written = tokio::select! {
            r = write_flush(&mut stdin, &buf) => r,
            // Closing while a write is stuck (the server stopped reading): give up on it.
            _ = stop.cancelled() => return Ok(()),
        };
        if let Err(e) = written {
            return Err(format!(
                "cannot write to `{}` (pid {}): {e}",
                ident.name, ident.pid
            ));
        }
        if buf.capacity() > 1024 * 1024 {
            buf = Vec::with_capacity(8 * 1024);
        }
    }
    // Closing: what was queued before close() still goes out, if the server takes it soon.
    buf.clear();
    while let Ok(m) = outbound.try_recv() {
        buf.extend_from_slice(&m.body);
        buf.push(b'\n');
    }
    if !buf.is_empty() {
        let _ = tokio::time::timeout(grace, write_flush(&mut stdin, &buf)).await;
    }
    Ok(())
}

async fn write_flush(stdin: &mut ChildStdin, buf: &[u8]) -> std::io::Result<()> {
    stdin.write_all(buf).await?;
    stdin.flush().await
}

/// How reading stdout ended.
enum ReaderEnd {
    /// stdout closed.
    Eof,
    /// A read failed or the server wrote something that is not a message.
    Failed(TransportError),
}

/// Reads newline-delimited messages from stdout and forwards each as an event.
async fn read_stdout(
    stdout: ChildStdout,
    events: EventSink,
    max: usize,
    ident: Ident,
) -> ReaderEnd {
    let mut reader = BufReader::with_capacity(64 * 1024, stdout);
    // A line that spans buffer refills; empty in the common case where a whole line sits
    // in the buffer and is copied out once.
    let mut partial: Vec<u8> = Vec::new();
    loop {
        let buf = match reader.fill_buf().await {
            Ok(buf) => buf,
            Err(e) => {
                return ReaderEnd::Failed(TransportError::Io(format!(
                    "cannot read from `{}` (pid {}): {e}",
                    ident.name, ident.pid
                )))
            }
        };
        if buf.is_empty() {
            // EOF. A last line without its newline still counts.
            if !partial.is_empty() {
                if let Err(e) = deliver(std::mem::take(&mut partial), &events, &ident) {
                    return ReaderEnd::Failed(e);
                }
            }
            return ReaderEnd::Eof;
        }
        match memchr::memchr(b'\n', buf) {
            Some(i) => {
                if partial.len() + i > max {
                    partial.extend_from_slice(&buf[..i.min(QUOTE_CHARS)]);
                    return ReaderEnd::Failed(too_long(&partial, max, &ident));
                }
                let line = if partial.is_empty() {
                    buf[..i].to_vec()
                } else {
                    partial.extend_from_slice(&buf[..i]);
                    std::mem::take(&mut partial)
                };
                reader.consume(i + 1);
                if let Err(e) = deliver(line, &events, &ident) {
                    return ReaderEnd::Failed(e);
                }
            }
            None => {
                let n = buf.len();
                if partial.len() + n > max {
                    partial.extend_from_slice(&buf[..n.min(QUOTE_CHARS)]);
                    return ReaderEnd::Failed(too_long(&partial, max, &ident));
                }
                partial.extend_from_slice(buf);
                reader.consume(n);
            }
        }
    }
}

/// Checks one line and forwards it. Empty lines are skipped; anything that is not JSON is an
/// error that ends the connection.
fn deliver(mut line: Vec<u8>, events: &EventSink, ident: &Ident) -> Result<(), TransportError> {
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    let Some(first) = line.iter().find(|b| !b.is_ascii_whitespace()) else {
        return Ok(());
    };
    let bad = |why: String, line: &[u8]| {
        let error = TransportError::Malformed(format!(
            "server `{}` (pid {}) wrote a line that is not a JSON-RPC message ({why}): {}",
            ident.name,
            ident.pid,
            quote(line)
        ));
        tracing::warn!(target: TARGET, server = %ident.name, pid = ident.pid, "{error}");
        error
    };
    if *first != b'{' && *first != b'[' {
        return Err(bad("not a JSON object or array".into(), &line));
    }
    // Checked as JSON by the client's one parse of it (a separate scan here was ~5% of a
    // gateway's forwarded call). A closed receiver means nobody listens any more; keep
    // draining stdout so the server is not blocked while it is being closed.
    match events.send_message(line) {
        Err(Undelivered::NotJson { detail, message }) => {
            Err(bad(format!("invalid JSON: {detail}"), &message))
        }
        Ok(()) | Err(Undelivered::ClientGone) => Ok(()),
    }
}

fn too_long(start: &[u8], max: usize, ident: &Ident) -> TransportError {
    let error = TransportError::Malformed(format!(
        "server `{}` (pid {}) wrote a message over the {max}-byte limit, starting {}",
        ident.name,
        ident.pid,
        quote(start)
    ));
    tracing::warn!(target: TARGET, server = %ident.name, pid = ident.pid, "{error}");
    error
}

/// The start of a line, quoted, for an error message.
fn quote(line: &[u8]) -> String {
    let text = String::from_utf8_lossy(line);
    let mut start: String = text.chars().take(QUOTE_CHARS).collect();
    if start.len() < text.len() {
        start.push('…');
    }
    format!("{start:?}")
}

/// Logs the server's stderr line by line; never stops reading until EOF, so the server
/// never blocks on a full pipe. Memory stays bounded whatever the server writes.
async fn drain_stderr(stderr: ChildStderr, ident: Ident) {
    let mut reader = BufReader::with_capacity(8 * 1024, stderr);
    let mut line: Vec<u8> = Vec::with_capacity(256);
    let mut truncated = false;
    let mut limit = RateLimit::new();
    loop {
        let buf = match reader.fill_buf().await {
            Ok(buf) if !buf.is_empty() => buf,
            _ => break,
        };
        let (chunk, consumed, end_of_line) = match memchr::memchr(b'\n', buf) {
            Some(i) => (&buf[..i], i + 1, true),
            None => (buf, buf.len(), false),
        };
        let room = MAX_STDERR_LINE - line.len();
        if chunk.len() > room {
            line.extend_from_slice(&chunk[..room]);
            truncated = true;
        } else {
            line.extend_from_slice(chunk);
        }
        reader.consume(consumed);
        if end_of_line {
            log_stderr(&line, truncated, &mut limit, &ident);
            line.clear();
            truncated = false;
        }
    }
    if !line.is_empty() {
        log_stderr(&line, truncated, &mut limit, &ident);
    }
    limit.report(&ident);
}

fn log_stderr(line: &[u8], truncated: bool, limit: &mut RateLimit, ident: &Ident) {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.trim_ascii().is_empty() {
        return;
    }
    let text = String::from_utf8_lossy(line);
    {
        let mut last: String = text.trim().chars().take(LAST_STDERR_CHARS).collect();
        if text.trim().chars().count() > LAST_STDERR_CHARS {
            last.push('…');
        }
        *ident.last_stderr.lock().unwrap_or_else(|p| p.into_inner()) = Some(last);
    }
    if !limit.allow(ident) {
        return;
    }
    let more = if truncated { " […]" } else { "" };
    tracing::info!(target: TARGET, server = %ident.name, pid = ident.pid, "stderr: {text}{more}");
}

/// At most [`STDERR_LINES_PER_SEC`] lines a second; the others are counted.
struct RateLimit {
    window: Instant,
    lines: u32,
    suppressed: u64,
}

impl RateLimit {
    fn new() -> Self {
        RateLimit {
            window: Instant::now(),
            lines: 0,
            suppressed: 0,
        }
    }

    fn allow(&mut self, ident: &Ident) -> bool {
        if self.window.elapsed() >= Duration::from_secs(1) {
            self.report(ident);
            self.window = Instant::now();
            self.lines = 0;
        }
        self.lines += 1;
        if self.lines > STDERR_LINES_PER_SEC {
            self.suppressed += 1;
            return false;
        }
        true
    }

    fn report(&mut self, ident: &Ident) {
        if self.suppressed > 0 {
            tracing::info!(target: TARGET, server = %ident.name, pid = ident.pid,
                "stderr: {} more lines not logged (over {STDERR_LINES_PER_SEC} a second)",
                self.suppressed);
            self.suppressed = 0;
        }
    }
}

/// Owns the child: notices the end, reports it once, runs the close sequence.
struct Driver {
    child: Child,
    guard: GroupGuard,
    reader: Option<JoinHandle<ReaderEnd>>,
    writer: Option<JoinHandle<Result<(), String>>>,
    stderr: JoinHandle<()>,
    events: EventSink,
    close: CancellationToken,
    writer_stop: CancellationToken,
    done: watch::Sender<bool>,
    ident: Ident,
}

impl Driver {
    async fn run(mut self) {
        // Why the connection ends; `None`: we closed it.
        let failure: Option<TransportError> = loop {
            tokio::select! {
                status = self.child.wait() => {
                    let status = self.exited(status);
                    break Some(self.after_exit(status).await);
                }
                end = join_reader(&mut self.reader) => {
                    break Some(match end {
                        ReaderEnd::Failed(e) => e,
                        ReaderEnd::Eof => {
                            // Exiting closes stdout: tell that apart from closing it alone.
                            match tokio::time::timeout(SETTLE, self.child.wait()).await {
                                Ok(status) => TransportError::Exited(self.exited(status)),
                                Err(_) => TransportError::Exited("closed its stdout".into()),
                            }
                        }
                    });
                }
                result = join_writer(&mut self.writer) => {
                    if let Some(e) = result {
                        // A broken pipe mostly means the server is exiting: say how, if so.
                        break Some(match tokio::time::timeout(SETTLE, self.child.wait()).await {
                            Ok(status) => {
                                let status = self.exited(status);
                                self.after_exit(status).await
                            }
                            Err(_) => TransportError::Io(e),
                        });
                    }
                    // The writer ended cleanly: the link is gone, `close` follows.
                }
                _ = self.close.cancelled() => break None,
            }
        };

        let failure = match failure {
            Some(error) => Some(self.with_last_stderr(error).await),
            None => None,
        };
        if let Some(error) = &failure {
            tracing::info!(target: TARGET, server = %self.ident.name, pid = self.ident.pid,
                "connection ended: {error}");
            self.stop_reader().await;
            let _ = self.events.send(TransportEvent::Closed(error.clone()));
        }
        self.shutdown().await;
        if failure.is_none() {
            // What the server answered while it was shutting down is still delivered.
            let _ = self.reader_end(SETTLE).await;
            self.stop_reader().await;
            let _ = self
                .events
                .send(TransportEvent::Closed(TransportError::Closed));
            tracing::debug!(target: TARGET, server = %self.ident.name, pid = self.ident.pid,
                "closed");
        }
        // Let stderr's last lines be logged; the group is dead, so EOF is near unless the
        // server handed its stderr to a process outside the group.
        if !self.stderr.is_finished()
            && tokio::time::timeout(SETTLE, &mut self.stderr)
                .await
                .is_err()
        {
            self.stderr.abort();
        }
        if let Some(writer) = self.writer.take() {
            writer.abort();
        }
        self.done.send_replace(true);
    }

    /// Records that the leader exited (and is reaped) and describes how.
    fn exited(&mut self, status: std::io::Result<ExitStatus>) -> String {
        self.guard.leader_reaped = true;
        match status {
            Ok(status) => describe(status),
            Err(e) => format!("unknown status: {e}"),
        }
    }

    /// An exit quotes the server's last stderr line, usually the reason: the stderr reader
    /// gets a moment to reach EOF first (the group is gone, so it comes at once unless a
    /// process outside the group holds the pipe).
    async fn with_last_stderr(&mut self, error: TransportError) -> TransportError {
        let TransportError::Exited(how) = error else {
            return error;
        };
        if !self.stderr.is_finished() {
            let _ = tokio::time::timeout(SETTLE, &mut self.stderr).await;
        }
        let last = self
            .ident
            .last_stderr
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        TransportError::Exited(match last {
            Some(line) => format!("{how}; its last stderr line: {line}"),
            None => how,
        })
    }

    /// Why the connection ended, once the server exited with `status`: lets the reader
    /// deliver what the server wrote before it exited (not for long: a grandchild may hold
    /// stdout open), unless that output was bad.
    async fn after_exit(&mut self, status: String) -> TransportError {
        match self.reader_end(SETTLE).await {
            Some(ReaderEnd::Failed(e)) => e,
            _ => TransportError::Exited(status),
        }
    }

    /// Waits up to `within` for the reader to end.
    async fn reader_end(&mut self, within: Duration) -> Option<ReaderEnd> {
        self.reader.as_ref()?;
        tokio::time::timeout(within, join_reader(&mut self.reader))
            .await
            .ok()
    }

    /// Stops the reader; once this returns, it sends nothing more.
    async fn stop_reader(&mut self) {
        if let Some(reader) = self.reader.take() {
            reader.abort();
            let _ = reader.await;
        }
    }

    /// Close stdin and wait; SIGTERM the group and wait; SIGKILL the group. Always reaps the
    /// leader.
    async fn shutdown(&mut self) {
        let grace = self.guard.grace;
        self.writer_stop.cancel();
        if !self.guard.leader_reaped {
            if let Ok(status) = tokio::time::timeout(grace, self.child.wait()).await {
                self.exited(status);
            }
        }
        if self.guard.leader_reaped && !group_alive(self.guard.pgid) {
            self.guard.finished = true;
            return;
        }
        self.signal(Signal::SIGTERM);
        let deadline = tokio::time::Instant::now() + grace;
        loop {
            if !self.guard.leader_reaped {
                let step = (tokio::time::Instant::now() + POLL).min(deadline);
                if let Ok(status) = tokio::time::timeout_at(step, self.child.wait()).await {
                    self.exited(status);
                }
            } else if !group_alive(self.guard.pgid) {
                self.guard.finished = true;
                return;
            } else {
                tokio::time::sleep_until((tokio::time::Instant::now() + POLL).min(deadline)).await;
            }
            if tokio::time::Instant::now() >= deadline {
                break;
            }
        }
        self.signal(Signal::SIGKILL);
        if !self.guard.leader_reaped {
            let status = self.child.wait().await;
            self.exited(status);
        }
        self.guard.finished = true;
    }

    fn signal(&self, signal: Signal) {
        tracing::debug!(target: TARGET, server = %self.ident.name, pid = self.ident.pid,
            "sending {signal} to the process group");
        let _ = killpg(self.guard.pgid, signal);
    }
}

/// The reader's end; pending forever once it has been taken.
async fn join_reader(reader: &mut Option<JoinHandle<ReaderEnd>>) -> ReaderEnd {
    let Some(handle) = reader.as_mut() else {
        return std::future::pending().await;
    };
    let end = handle.await.unwrap_or_else(|e| {
        ReaderEnd::Failed(TransportError::Io(format!("the stdout reader failed: {e}")))
    });
    *reader = None;
    end
}

/// The writer's failure, `None` if it ended cleanly; pending forever once taken.
async fn join_writer(writer: &mut Option<JoinHandle<Result<(), String>>>) -> Option<String> {
    let Some(handle) = writer.as_mut() else {
        return std::future::pending().await;
    };
    let result = handle.await;
    *writer = None;
    match result {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(e),
        Err(e) => Some(format!("the stdin writer failed: {e}")),
    }
}

fn describe(status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        format!("exit status {code}")
    } else if let Some(signal) = status.signal() {
        format!("signal {signal}")
    } else {
        status.to_string()
    }
}

/// Whether any live process of the group is left. Zombies do not count: once their parent
/// (the server) is gone they are init's to reap, or nobody's in a container without an init,
/// and waiting for them would only burn the grace period.
pub(crate) fn group_alive(pgid: Pid) -> bool {
    if matches!(killpg(pgid, None), Err(Errno::ESRCH)) {
        return false;
    }
    // Some process is in the group; on Linux, see whether it is more than a zombie.
    let Ok(proc_dir) = std::fs::read_dir("/proc") else {
        return true;
    };
    let pgid = pgid.as_raw().to_string();
    proc_dir.flatten().any(|entry| {
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            return false;
        };
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            return false;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{name}/stat")) else {
            return false;
        };
        // "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
        let Some((_, rest)) = stat.rsplit_once(')') else {
            return false;
        };
        let mut fields = rest.split_ascii_whitespace();
        let state = fields.next();
        let pgrp = fields.nth(1);
        state != Some("Z") && pgrp == Some(pgid.as_str())
    })
}

/// Cleans up a process group whose driver was dropped before finishing (the tokio runtime
/// shut down, or a panic): SIGTERM now, and from a plain thread SIGKILL after the grace
/// period, reaping the leader.
struct GroupGuard {
    pgid: Pid,
    grace: Duration,
    leader_reaped: bool,
    finished: bool,
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if self.finished || (self.leader_reaped && !group_alive(self.pgid)) {
            super::orphans::tell(self.pgid, false);
            return;
        }
        let _ = killpg(self.pgid, Signal::SIGTERM);
        let (pgid, grace, leader_reaped) = (self.pgid, self.grace, self.leader_reaped);
        let spawned = std::thread::Builder::new()
            .name("toolyard-stdio-reaper".into())
            .spawn(move || reap_group(pgid, grace, leader_reaped));
        if spawned.is_err() {
            let _ = killpg(pgid, Signal::SIGKILL);
            if !leader_reaped {
                let _ = waitpid(pgid, None);
            }
            super::orphans::tell(pgid, false);
        }
    }
}

fn reap_group(pgid: Pid, grace: Duration, mut leader_reaped: bool) {
    let deadline = Instant::now() + grace;
    loop {
        if !leader_reaped {
            // Err: tokio's orphan reaper got there first.
            leader_reaped = !matches!(
                waitpid(pgid, Some(WaitPidFlag::WNOHANG)),
                Ok(WaitStatus::StillAlive)
            );
        }
        if leader_reaped && !group_alive(pgid) {
            return;
        }
        if Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(POLL);
    }
    let _ = killpg(pgid, Signal::SIGKILL);
    if !leader_reaped {
        let _ = waitpid(pgid, None);
    }
    super::orphans::tell(pgid, false);
}
