//! The nats-server fixtures themselves: a standalone server and a 3-node cluster start
//! healthy with the configuration they promise, survive the faults they inject, and leave no
//! process or temp dir behind. JetStream is driven with the plain NATS text protocol over a
//! `TcpStream`, so these tests need nothing but the broker.

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;
use toolyard_testkit::{NatsCluster, NatsServer};

/// A minimal NATS client: one wildcard subscription on an inbox, request/reply on top of it.
struct Conn {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    /// The server's INFO.
    info: Value,
    /// The last request's number: its reply subject is `_INBOX.fixture.N`.
    requests: u64,
}

/// How long one request waits for its reply.
const REPLY_WITHIN: Duration = Duration::from_secs(5);

impl Conn {
    fn open(port: u16) -> Conn {
        let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect to nats-server");
        stream.set_read_timeout(Some(REPLY_WITHIN)).unwrap();
        let writer = stream.try_clone().unwrap();
        let mut conn = Conn {
            reader: BufReader::new(stream),
            writer,
            info: Value::Null,
            requests: 0,
        };
        let line = conn.line().expect("INFO from nats-server");
        let info = line.strip_prefix("INFO ").expect("INFO first");
        conn.info = serde_json::from_str(info).expect("INFO is JSON");
        conn.send(
            "CONNECT {\"verbose\":false,\"pedantic\":false,\"protocol\":1,\"headers\":true}\r\n\
             SUB _INBOX.fixture.* 1\r\nPING\r\n",
        );
        while conn.line().expect("PONG from nats-server") != "PONG" {}
        conn
    }

    fn send(&mut self, text: &str) {
        self.writer
            .write_all(text.as_bytes())
            .expect("write to nats-server");
    }

    /// The next protocol line, `None` if none came within [`REPLY_WITHIN`].
    fn line(&mut self) -> Option<String> {
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) => panic!("nats-server closed the connection"),
            Ok(_) => Some(line.trim_end().to_owned()),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => None,
            Err(e) => panic!("read from nats-server: {e}"),
        }
    }

    /// Publishes `payload` (with a `Nats-Msg-Id` header if `msg_id` is given) to `subject`
    /// with a fresh reply subject; the reply's payload, or `None` if none came within
    /// [`REPLY_WITHIN`] (JetStream does not answer while a stream has no leader).
    fn request(&mut self, subject: &str, msg_id: Option<&str>, payload: &str) -> Option<Value> {
        self.requests += 1;
        let inbox = format!("_INBOX.fixture.{}", self.requests);
        let head = msg_id.map_or_else(String::new, |id| {
            format!("NATS/1.0\r\nNats-Msg-Id: {id}\r\n\r\n")
        });
        self.send(&format!(
            "HPUB {subject} {inbox} {} {}\r\n{head}{payload}\r\n",
            head.len(),
            head.len() + payload.len()
        ));
        loop {
            let line = self.line()?;
            if line == "PING" {
                self.send("PONG\r\n");
            } else if let Some(rest) = line.strip_prefix("MSG ") {
                let size: usize = rest.rsplit(' ').next().unwrap().parse().unwrap();
                let mut body = vec![0; size + 2];
                self.reader.read_exact(&mut body).unwrap();
                // A late reply to an earlier request is not this one's.
                if rest.split(' ').next() == Some(inbox.as_str()) {
                    return Some(serde_json::from_slice(&body[..size]).expect("a JSON reply"));
                }
            } else {
                assert!(!line.starts_with("-ERR"), "nats-server: {line}");
            }
        }
    }

    /// A JetStream API request, retried while it gets no reply or an error (a cluster that
    /// just elected a leader, or a stream whose group is electing one, may need a moment).
    fn js(&mut self, subject: &str, payload: &str) -> Value {
        self.js_with_id(subject, None, payload)
    }

    /// A publish to a stream; its `msg_id` makes a retry a duplicate the stream drops.
    fn js_publish(&mut self, subject: &str, msg_id: &str, payload: &str) -> Value {
        self.js_with_id(subject, Some(msg_id), payload)
    }

    fn js_with_id(&mut self, subject: &str, msg_id: Option<&str>, payload: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let reply = self.request(subject, msg_id, payload);
            if let Some(reply) = &reply {
                if reply.get("error").is_none() {
                    return reply.clone();
                }
            }
            assert!(
                Instant::now() < deadline,
                "{subject} still fails after 60 s: {reply:?}"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// The server's temp dir (its log's folder).
fn dir_of(server: &NatsServer) -> PathBuf {
    server.log_path().parent().unwrap().to_path_buf()
}

fn version_at_least(version: &str, major: u64, minor: u64) -> bool {
    let mut parts = version.split('.').map(|p| p.parse::<u64>().unwrap_or(0));
    let (a, b) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (a, b) >= (major, minor)
}

fn messages_in(conn: &mut Conn, stream: &str) -> u64 {
    let info = conn.js(&format!("$JS.API.STREAM.INFO.{stream}"), "");
    info["state"]["messages"].as_u64().unwrap()
}

#[test]
fn single_server_starts_survives_faults_and_cleans_up() {
    let server = NatsServer::start();
    assert_eq!(server.url(), format!("nats://127.0.0.1:{}", server.port()));
    assert!(server.is_healthy());
    let (pid, dir) = (server.pid(), dir_of(&server));
    assert!(alive(pid) && dir.is_dir());

    // The configuration it promises.
    let mut conn = Conn::open(server.port());
    let version = conn.info["version"].as_str().unwrap().to_owned();
    assert!(version_at_least(&version, 2, 11), "nats-server {version}");
    assert_eq!(conn.info["jetstream"], true, "{}", conn.info);
    assert_eq!(conn.info["max_payload"], 8 * 1024 * 1024, "{}", conn.info);

    // A file stream with one acknowledged message.
    conn.js(
        "$JS.API.STREAM.CREATE.FIXTURE",
        r#"{"name":"FIXTURE","subjects":["fixture.>"],"storage":"file"}"#,
    );
    let ack = conn.js_publish("fixture.a", "m1", "hello");
    assert_eq!(ack["seq"], 1, "{ack}");

    // Frozen: no health answer; resumed: healthy again, same process.
    server.stop();
    assert!(!server.is_healthy());
    server.resume();
    assert!(server.is_healthy());
    assert_eq!(server.pid(), pid);

    // Killed right after the ack, then restarted on the same port with the same store: the
    // message is still there.
    server.kill();
    assert!(!server.is_healthy());
    assert!(!alive(pid));
    server.kill(); // no-op
    server.restart();
    assert!(server.is_healthy());
    assert_ne!(server.pid(), pid);
    let mut conn = Conn::open(server.port());
    assert_eq!(messages_in(&mut conn, "FIXTURE"), 1);

    // restart() of a running (even stopped) server kills it first.
    server.stop();
    let stopped = server.pid();
    server.restart();
    assert!(server.is_healthy() && !alive(stopped));

    let last = server.pid();
    drop(server);
    assert!(!alive(last), "nats-server {last} outlived its fixture");
    assert!(!dir.exists(), "{} outlived its fixture", dir.display());
}

#[test]
#[should_panic(expected = "restart() it first")]
fn stop_after_kill_panics_with_the_way_out() {
    let server = NatsServer::start();
    server.kill();
    server.stop();
}

#[test]
fn cluster_of_three_elects_a_leader_and_survives_losing_it() {
    let cluster = NatsCluster::start(3);
    let urls = cluster.urls();
    assert_eq!(urls.len(), 3);
    let names: Vec<&str> = cluster.nodes().iter().map(NatsServer::name).collect();
    assert_eq!(names, ["n1", "n2", "n3"]);
    for (node, url) in cluster.nodes().iter().zip(&urls) {
        assert!(node.is_healthy(), "{node:?}");
        assert_eq!(*url, node.url());
    }
    let pids: Vec<u32> = cluster.nodes().iter().map(NatsServer::pid).collect();
    let dirs: Vec<PathBuf> = cluster.nodes().iter().map(dir_of).collect();

    // The nodes form one cluster: a replicated stream lands on all three.
    let mut conn = Conn::open(cluster.node(0).port());
    assert_eq!(conn.info["cluster"], "toolyard-test", "{}", conn.info);
    let created = conn.js(
        "$JS.API.STREAM.CREATE.R3",
        r#"{"name":"R3","subjects":["r3.>"],"storage":"file","num_replicas":3}"#,
    );
    assert_eq!(created["config"]["num_replicas"], 3, "{created}");
    assert_eq!(conn.js_publish("r3.a", "m1", "one")["seq"], 1);

    // Kill the meta leader: the other two elect another one.
    let leader = cluster.wait_for_leader();
    let old = leader.name().to_owned();
    leader.kill();
    let new = cluster.wait_for_leader();
    assert_ne!(new.name(), old);

    // Bring it back: it rejoins, and the three agree again.
    let back = cluster.nodes().iter().find(|n| n.name() == old).unwrap();
    back.restart();
    assert!(back.is_healthy());
    cluster.wait_for_leader();

    // A stopped follower is left out of the agreement; resumed, it is healthy.
    let leader = cluster.wait_for_leader().name().to_owned();
    let follower = cluster.nodes().iter().find(|n| n.name() != leader).unwrap();
    follower.stop();
    assert_eq!(cluster.wait_for_leader().name(), leader);
    follower.resume();
    assert!(follower.is_healthy());

    // The stream kept its message through all of it.
    let port = cluster
        .nodes()
        .iter()
        .find(|n| n.name() != old)
        .unwrap()
        .port();
    let mut conn = Conn::open(port);
    assert_eq!(messages_in(&mut conn, "R3"), 1);

    let last: Vec<u32> = cluster.nodes().iter().map(NatsServer::pid).collect();
    drop(cluster);
    for pid in pids.iter().chain(&last) {
        assert!(!alive(*pid), "nats-server {pid} outlived its cluster");
    }
    for dir in dirs {
        assert!(!dir.exists(), "{} outlived its cluster", dir.display());
    }
}
