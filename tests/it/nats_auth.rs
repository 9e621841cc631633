//! The NATS connection's credentials and TLS through the binary: `toolyard worker` and
//! `toolyard serve --nats` on a real nats-server that requires mutual TLS, users listed by
//! nkey, or decentralized JWT auth (operator mode, a `.creds` file); and a process whose
//! identity the server refuses says so on stderr instead of retrying in silence.

use crate::nats::{ready_worker_with, spawn_worker, through_gateway_with, WorkerProcess};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde_json::{json, Value};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use toolyard_testkit::NatsServer;

const BIN: &str = env!("CARGO_BIN_EXE_toolyard");

/// A directory of its own under the temp dir, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(what: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("ty-{what}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a scratch dir");
        Scratch(dir)
    }

    fn path(&self, name: &str) -> String {
        self.0.join(name).to_str().expect("a UTF-8 path").to_owned()
    }

    fn write(&self, name: &str, text: &str) -> String {
        std::fs::write(self.0.join(name), text).expect("a scratch file");
        self.path(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate it signed (P-256),
/// made by the openssl CLI in `dir`: ca.pem, server.pem/.key, client.pem/.key.
fn certificates(dir: &Scratch) {
    let d = dir.0.as_path();
    let key = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    let ca = [
        &["req", "-x509"][..],
        &key,
        &[
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=toolyard test CA",
        ],
    ]
    .concat();
    openssl(d, &ca);
    dir.write(
        "server.ext",
        "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
    );
    dir.write("client.ext", "extendedKeyUsage=clientAuth\n");
    for who in ["server", "client"] {
        let (csr, pem, keyfile, ext, subject) = (
            format!("{who}.csr"),
            format!("{who}.pem"),
            format!("{who}.key"),
            format!("{who}.ext"),
            format!("/CN=toolyard {who}"),
        );
        let req = [
            &["req"][..],
            &key,
            &["-keyout", &keyfile, "-out", &csr, "-subj", &subject],
        ]
        .concat();
        openssl(d, &req);
        openssl(
            d,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &pem,
                "-days",
                "2",
                "-extfile",
                &ext,
            ],
        );
    }
}

/// `calc__echo` through `serve --stdio --nats URL FLAGS`, retried until a worker answers.
fn echo_through_gateway(url: &str, flags: &str, message: &str) -> Value {
    let args = json!({ "message": message }).to_string();
    through_gateway_with(url, flags, &["call", "calc__echo", "--args", &args], |v| {
        v["content"][0]["text"] == message
    })
}

/// A `toolyard worker` that cannot get on the bus: what it says on stderr within 20 s, up
/// to the line containing `expected`. It is killed after.
fn refused_worker(url: &str, more: &[&str], expected: &str) -> String {
    let args = [&["--nats", url, "--name", "intruder"][..], more].concat();
    let mut child = spawn_worker(&args, Stdio::piped());
    let stderr = child.stderr.take().expect("piped stderr");
    let _process = WorkerProcess(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut said = String::new();
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        let Ok(line) = rx.recv_timeout(left) else {
            break;
        };
        assert!(
            !line.contains("serving on"),
            "the server let it in: {said}{line}"
        );
        said.push_str(&line);
        said.push('\n');
        if line.contains(expected) {
            return said;
        }
    }
    panic!("the refused worker never said `{expected}`; it said:\n{said}");
}

/// A broker that requires TLS and verifies client certificates against the test's CA: a
/// worker and a gateway given the CA and a client certificate (flags) serve a call; a worker
/// with the CA but no client certificate never gets on the bus and says why it cannot.
#[test]
fn a_worker_and_a_gateway_reach_a_broker_that_requires_mutual_tls() {
    let dir = Scratch::new("nats-mtls");
    certificates(&dir);
    let nats = NatsServer::start_with_config(&format!(
        "tls {{\n  cert_file: \"{}\"\n  key_file: \"{}\"\n  ca_file: \"{}\"\n  verify: true\n}}",
        dir.path("server.pem"),
        dir.path("server.key"),
        dir.path("ca.pem"),
    ));
    let url = format!("tls://127.0.0.1:{}", nats.port());
    let tls = [
        "--nats-tls-ca",
        &dir.path("ca.pem"),
        "--nats-tls-cert",
        &dir.path("client.pem"),
        "--nats-tls-key",
        &dir.path("client.key"),
    ]
    .map(str::to_owned);
    let _worker = ready_worker_with(&url, "calc", &tls.each_ref().map(String::as_str));
    let echoed = echo_through_gateway(&url, &tls.join(" "), "over mutual TLS");
    assert_eq!(echoed["content"][0]["text"], "over mutual TLS");
    let said = refused_worker(
        &url,
        &["--nats-tls-ca", &dir.path("ca.pem")],
        "cannot connect to NATS",
    );
    assert!(said.contains("TLS handshake failed"), "{said}");
}

/// A broker that wants the TLS handshake before its INFO (`handshake_first`): a worker and a
/// gateway whose config files say `tls_first`, with the CA and client certificate as
/// `[nats]` settings relative to the file, serve a call.
#[test]
fn a_worker_and_a_gateway_configured_for_tls_first_reach_a_handshake_first_broker() {
    let dir = Scratch::new("nats-tls-first");
    certificates(&dir);
    let nats = NatsServer::start_with_config(&format!(
        "tls {{\n  cert_file: \"{}\"\n  key_file: \"{}\"\n  ca_file: \"{}\"\n  verify: true\n  handshake_first: true\n}}",
        dir.path("server.pem"),
        dir.path("server.key"),
        dir.path("ca.pem"),
    ));
    let config = dir.write(
        "toolyard.toml",
        "[nats]\ntls_first = true\ntls_ca_file = \"ca.pem\"\ntls_cert_file = \"client.pem\"\ntls_key_file = \"client.key\"\n",
    );
    let url = format!("tls://127.0.0.1:{}", nats.port());
    let _worker = ready_worker_with(&url, "calc", &["--config", &config]);
    let echoed = echo_through_gateway(&url, &format!("--config '{config}'"), "handshake first");
    assert_eq!(echoed["content"][0]["text"], "handshake first");
}

/// A credentials or certificate file that cannot be read stops `worker` and `serve --nats`
/// at start with the file named, before any connection is tried (no broker is needed).
#[test]
fn a_missing_credentials_file_stops_the_process_at_start_naming_it() {
    for (command, flag) in [
        (&["worker", "--name", "calc"][..], "--nats-creds"),
        (&["serve", "--stdio"][..], "--nats-tls-ca"),
    ] {
        let out = Command::new(BIN)
            .args(command)
            .args([
                "--nats",
                "nats://127.0.0.1:1",
                flag,
                "/nonexistent/file.pem",
            ])
            .stdin(Stdio::null())
            .output()
            .expect("run toolyard");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{command:?} {flag}: {stderr}");
        assert!(
            stderr.contains("/nonexistent/file.pem"),
            "{command:?} {flag}: {stderr}"
        );
    }
}

/// A broker that lists its users by nkey: a worker and a gateway given a seed file (the
/// worker by flag, the gateway by its config file's `[nats] nkey_seed_file`, relative to the
/// file) serve a call; a worker with another seed is refused and says the server refused its
/// credentials.
#[test]
fn a_worker_and_a_gateway_sign_in_with_an_nkey_seed_and_a_stranger_is_refused() {
    let dir = Scratch::new("nats-nkey");
    let user = nkeys::KeyPair::new_user();
    let seed = user.seed().expect("a seed");
    let seed_file = dir.write("user.nk", &format!("{seed}\n"));
    let config = dir.write("gateway.toml", "[nats]\nnkey_seed_file = \"user.nk\"\n");
    let nats = NatsServer::start_with_config(&format!(
        "authorization {{\n  users = [ {{ nkey: \"{}\" }} ]\n}}",
        user.public_key()
    ));
    let _worker = ready_worker_with(&nats.url(), "calc", &["--nats-nkey", &seed_file]);
    let echoed = echo_through_gateway(&nats.url(), &format!("--config '{config}'"), "by nkey");
    assert_eq!(echoed["content"][0]["text"], "by nkey");
    let stranger = nkeys::KeyPair::new_user().seed().expect("a seed");
    let stranger_file = dir.write("stranger.nk", &stranger);
    let said = refused_worker(
        &nats.url(),
        &["--nats-nkey", &stranger_file],
        "cannot connect to NATS",
    );
    assert!(said.contains("refused our credentials"), "{said}");
    assert!(
        !said.contains(&stranger),
        "the seed is never printed: {said}"
    );
}

/// A broker whose user may subscribe only under `_TY.>` (and the bridge's own subjects), as
/// a deployment scopes each tenant's replies: a worker and a gateway given that inbox prefix
/// (the gateway by its config file) serve a call, their call replies, JetStream answers and
/// KV watches all under it.
#[test]
fn a_worker_and_a_gateway_whose_user_may_subscribe_only_under_its_own_inbox_prefix_serve_a_call() {
    let dir = Scratch::new("nats-inbox");
    let nats = NatsServer::start_with_config(
        "authorization {\n  users = [ { user: tenant, password: secret, permissions: {\n    \
         publish: \">\"\n    subscribe: [\"mcp.v1.>\", \"_TY.>\", \"$SRV.>\"]\n  } } ]\n}",
    );
    let url = format!("nats://tenant:secret@127.0.0.1:{}", nats.port());
    let config = dir.write("gateway.toml", "[nats]\ninbox_prefix = \"_TY\"\n");
    let _worker = ready_worker_with(&url, "calc", &["--nats-inbox-prefix", "_TY"]);
    let echoed = echo_through_gateway(&url, &format!("--config '{config}'"), "scoped replies");
    assert_eq!(echoed["content"][0]["text"], "scoped replies");
}

/// Seconds since 1970.
fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs()
}

/// A JWT as nsc writes one: `claims` signed by `issuer`.
fn jwt(issuer: &nkeys::KeyPair, subject: &str, name: &str, nats: Value) -> String {
    jwt_until(issuer, subject, name, nats, None)
}

/// [`jwt`], expiring at `expires` (unix seconds) when given.
fn jwt_until(
    issuer: &nkeys::KeyPair,
    subject: &str,
    name: &str,
    nats: Value,
    expires: Option<u64>,
) -> String {
    let mut claims = json!({
        "jti": nkeys::KeyPair::new_user().public_key(),
        "iat": unix_now(),
        "iss": issuer.public_key(),
        "name": name,
        "sub": subject,
        "nats": nats,
    });
    if let Some(exp) = expires {
        claims["exp"] = json!(exp);
    }
    let head = URL_SAFE_NO_PAD.encode(r#"{"typ":"JWT","alg":"ed25519-nkey"}"#);
    let body = URL_SAFE_NO_PAD.encode(claims.to_string());
    let signed = format!("{head}.{body}");
    let signature = issuer.sign(signed.as_bytes()).expect("a signature");
    format!("{signed}.{}", URL_SAFE_NO_PAD.encode(signature))
}

/// A `.creds` file's text for `user`, signed by `account`.
fn creds(account: &nkeys::KeyPair, user: &nkeys::KeyPair) -> String {
    creds_until(account, user, None)
}

/// [`creds`] whose JWT expires at `expires` (unix seconds) when given.
fn creds_until(account: &nkeys::KeyPair, user: &nkeys::KeyPair, expires: Option<u64>) -> String {
    let user_jwt = jwt_until(
        account,
        &user.public_key(),
        "toolyard",
        json!({"type": "user", "version": 2, "pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1}),
        expires,
    );
    format!(
        "-----BEGIN NATS USER JWT-----\n{user_jwt}\n------END NATS USER JWT------\n\n\
         -----BEGIN USER NKEY SEED-----\n{}\n------END USER NKEY SEED------\n",
        user.seed().expect("a seed")
    )
}

/// A broker in operator mode (decentralized JWT auth: the operator's JWT, and an account with
/// JetStream enabled preloaded beside the system account) and that account's key.
fn operator_mode_broker() -> (NatsServer, nkeys::KeyPair) {
    let operator = nkeys::KeyPair::new_operator();
    let account = nkeys::KeyPair::new_account();
    let system = nkeys::KeyPair::new_account();
    let operator_jwt = jwt(
        &operator,
        &operator.public_key(),
        "toolyard-test",
        json!({"type": "operator", "version": 2}),
    );
    let unlimited = json!({
        "subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1,
        "wildcards": true, "conn": -1, "leaf": -1,
        "mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1,
    });
    let account_jwt = jwt(
        &operator,
        &account.public_key(),
        "tools",
        json!({"type": "account", "version": 2, "limits": unlimited}),
    );
    let system_jwt = jwt(
        &operator,
        &system.public_key(),
        "SYS",
        json!({"type": "account", "version": 2, "limits": {"subs": -1, "data": -1, "payload": -1, "conn": -1}}),
    );
    let nats = NatsServer::start_with_config(&format!(
        "debug: true\noperator: \"{operator_jwt}\"\nsystem_account: \"{sys}\"\nresolver: MEMORY\n\
         resolver_preload: {{\n  {acc}: \"{account_jwt}\"\n  {sys}: \"{system_jwt}\"\n}}",
        sys = system.public_key(),
        acc = account.public_key(),
    ));
    (nats, account)
}

/// A broker in operator mode: a worker and a gateway given a `.creds` file serve a call; a
/// user signed by an account the operator does not know is refused.
#[test]
fn a_worker_and_a_gateway_sign_in_with_a_creds_file_on_an_operator_mode_broker() {
    let dir = Scratch::new("nats-creds");
    let (nats, account) = operator_mode_broker();
    let creds_file = dir.write(
        "worker.creds",
        &creds(&account, &nkeys::KeyPair::new_user()),
    );
    let _worker = ready_worker_with(&nats.url(), "calc", &["--nats-creds", &creds_file]);
    let gateway_creds = dir.write(
        "gateway.creds",
        &creds(&account, &nkeys::KeyPair::new_user()),
    );
    let echoed = echo_through_gateway(
        &nats.url(),
        &format!("--nats-creds '{gateway_creds}'"),
        "by JWT",
    );
    assert_eq!(echoed["content"][0]["text"], "by JWT");
    let unknown = dir.write(
        "unknown.creds",
        &creds(&nkeys::KeyPair::new_account(), &nkeys::KeyPair::new_user()),
    );
    let said = refused_worker(
        &nats.url(),
        &["--nats-creds", &unknown],
        "cannot connect to NATS",
    );
    assert!(said.contains("refused our credentials"), "{said}");
}

/// A worker's user JWT that expires: the broker ends its connection then ("Authentication
/// Expired"), and the worker signs in again with the `.creds` file as it is on disk by then,
/// rotated with a fresh JWT for the same user (as a Kubernetes Secret updated in place is),
/// and serves on. With the file read only at start, its reconnects would offer the expired
/// JWT and be refused for good.
#[test]
fn a_worker_whose_jwt_expires_signs_in_again_with_the_rotated_creds_file() {
    let dir = Scratch::new("nats-creds-rotated");
    let (nats, account) = operator_mode_broker();
    let user = nkeys::KeyPair::new_user();
    let expires = unix_now() + 4;
    let creds_file = dir.write("worker.creds", &creds_until(&account, &user, Some(expires)));
    let _worker = ready_worker_with(&nats.url(), "calc", &["--nats-creds", &creds_file]);
    let gateway_creds = dir.write(
        "gateway.creds",
        &creds(&account, &nkeys::KeyPair::new_user()),
    );
    let flags = format!("--nats-creds '{gateway_creds}'");
    let echoed = echo_through_gateway(&nats.url(), &flags, "before");
    assert_eq!(echoed["content"][0]["text"], "before");
    // Rotated before the old JWT expires, as an operator's tooling does.
    dir.write("worker.creds", &creds(&account, &user));
    let log = nats.log_path().to_owned();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("Expired")
    {
        assert!(
            Instant::now() < deadline,
            "the broker never ended the expired connection"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Its catalog entry is re-put once it is back: a call through a new gateway is served.
    let echoed = echo_through_gateway(&nats.url(), &flags, "after");
    assert_eq!(echoed["content"][0]["text"], "after");
}
