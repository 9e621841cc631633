//! The stdio transport: newline-delimited JSON-RPC on a byte stream pair.
//!
//! One reader splits lines with a hard size limit (an overlong message is answered with an
//! error and skipped up to its newline, the connection goes on); one writer receives
//! serialized messages and batches them, so answers produced together go out in one write.
//! Logs never go to stdout.
//!
//! Batching has a limit in the other direction: the reader lets the writer run after every
//! few messages ([`StdioOptions::answer_every`]) instead of handling everything one read
//! returned first. On a current-thread runtime the writer only runs when the reader yields,
//! so a client that pipelines 16 requests otherwise waits for all 16 answers before it sees
//! the first, and the two processes take turns instead of working at the same time. Measured
//! with mcpload (one core each, c=16): every 4 messages 300-355k calls/s, every 8 190-225k,
//! never (one write per read) 177-198k; at c=64 every 4 gives 515-520k against 275-333k.
//!
//! The writer's turn is only worth taking when it has something to write. A gateway's
//! forwarded calls are not answered while the reader reads (each waits for its upstream or
//! worker), yet each turn also let the tasks waiting behind the reader run, and so sent the
//! requests read so far upstream: a NATS gateway at c=64 wrote its broker once every 4 calls.
//! So the reader reads on while the messages it reads are not answered at once, up to
//! [`READ_ON`] of them, and its forwarded requests go out together. `benches/nats-load.sh`
//! against the previous build in the same rounds (stop 52): the NATS gateway's CPU per call
//! 0.93 / 0.85 / 0.71 of it at c=1/16/64, at the same or better throughput at c=64; the
//! direct server and the stdio-source gateway the same, within the machine's noise.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use toolyard_actors::transport::{MessageSink, Sink};
use toolyard_actors::Server;
use toolyard_proto::ErrorObject;

/// Options of the stdio transport.
#[derive(Debug, Clone, Copy)]
pub struct StdioOptions {
    /// The largest message accepted, in bytes (newline excluded).
    pub max_message_bytes: usize,
    /// How long to wait for in-flight answers to drain after the input closes.
    pub drain_timeout: Duration,
    /// How many messages the reader handles before it lets the writer send the answers
    /// ready so far, when some are (see the module docs). At least 1.
    pub answer_every: usize,
}

impl Default for StdioOptions {
    fn default() -> Self {
        StdioOptions {
            max_message_bytes: 4 * 1024 * 1024,
            drain_timeout: Duration::from_secs(2),
            answer_every: 4,
        }
    }
}

/// Serves one connection on the process's stdin and stdout until stdin closes.
///
/// When stdin and stdout are pipes (the normal case: a client spawned us) they are driven
/// as non-blocking pipes by tokio's reactor; tokio's `stdin()`/`stdout()` go through the
/// blocking thread pool, a thread hand-off per read and per write. Anything else (a file, a
/// terminal) falls back to those.
pub async fn serve_stdio(server: &Server, options: StdioOptions) -> io::Result<()> {
    #[cfg(unix)]
    {
        if let Some((reader, writer)) = unix_pipes() {
            return serve_io(server, reader, writer, options).await;
        }
    }
    serve_io(server, tokio::io::stdin(), tokio::io::stdout(), options).await
}

#[cfg(unix)]
fn unix_pipes() -> Option<(
    tokio::net::unix::pipe::Receiver,
    tokio::net::unix::pipe::Sender,
)> {
    use std::os::fd::{AsFd, OwnedFd};
    use std::os::unix::fs::FileTypeExt;
    fn fifo(fd: std::os::fd::BorrowedFd<'_>) -> Option<OwnedFd> {
        let file = std::fs::File::from(fd.try_clone_to_owned().ok()?);
        file.metadata()
            .ok()?
            .file_type()
            .is_fifo()
            .then(|| OwnedFd::from(file))
    }
    // Both must be pipes before either is switched to non-blocking mode: the flag is set on
    // the shared open file, and a blocking fallback on a non-blocking stdin fails with EAGAIN.
    let stdin = fifo(io::stdin().as_fd())?;
    let stdout = fifo(io::stdout().as_fd())?;
    let reader = tokio::net::unix::pipe::Receiver::from_owned_fd(stdin).ok()?;
    let writer = tokio::net::unix::pipe::Sender::from_owned_fd(stdout).ok()?;
    Some((reader, writer))
}

/// Serves one connection on any reader/writer pair until the reader reaches end of file.
pub async fn serve_io<R, W>(
    server: &Server,
    reader: R,
    writer: W,
    options: StdioOptions,
) -> io::Result<()>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (tx, rx) = mpsc::unbounded_channel::<Vec<u8>>();
    let answered = Arc::new(AtomicBool::new(false));
    let handle = server
        .connect_from(
            Sink::new(WriterQueue {
                tx,
                answered: answered.clone(),
            }),
            None,
            None,
            Some(toolyard_actors::Peer::pipe()),
        )
        .await
        .map_err(|e| io::Error::other(e.to_string()))?;
    let writer_task = tokio::spawn(write_loop(writer, rx));
    let read_result = read_loop(
        reader,
        &handle,
        options.max_message_bytes,
        Turns {
            every: options.answer_every.max(1),
            answered,
        },
    )
    .await;
    handle.close();
    // The handle holds the connection's sink too (for direct launches): without dropping
    // it the writer never saw its channel close and every exit waited the whole timeout.
    drop(handle);
    // Once the connection actor and every request task have dropped their senders the
    // writer finishes; a stuck task cannot hold the process forever.
    let _ = tokio::time::timeout(options.drain_timeout, writer_task).await;
    read_result
}

/// Messages the reader reads on at most while no answer waits for the writer (see the module
/// docs): the most a gateway forwards in one go, so that answers that do come (from its
/// upstream, in other tasks) are written out at least that often.
pub(crate) const READ_ON: usize = 64;

/// The connection's outgoing messages, on their way to the writer task; notes that one came,
/// so the reader knows the writer has something to write.
struct WriterQueue {
    tx: mpsc::UnboundedSender<Vec<u8>>,
    answered: Arc<AtomicBool>,
}

impl MessageSink for WriterQueue {
    fn send(&self, message: Vec<u8>) -> bool {
        let sent = self.tx.send(message).is_ok();
        self.answered.store(true, Ordering::Relaxed);
        sent
    }
    fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }
}

/// When the reader lets the writer run: every `every` messages, if the messages it read
/// since it last waited were answered at once; else it reads on, up to [`READ_ON`] messages.
/// Answers that other tasks sent while the reader waited do not count: under load a
/// gateway's earlier calls are answered all the time, and counting them gave the writer a
/// turn every `every` messages again.
struct Turns {
    every: usize,
    answered: Arc<AtomicBool>,
}

impl Turns {
    /// Whether the writer takes its turn now, `handled` messages after its last one.
    fn writer_turn(&self, handled: usize) -> bool {
        handled >= READ_ON || self.answered.load(Ordering::Relaxed)
    }

    /// The reader goes on after a wait (its turn given, or a read): what was answered
    /// meanwhile is not its messages' doing.
    fn resumed(&self) {
        self.answered.store(false, Ordering::Relaxed);
    }
}

async fn read_loop<R: AsyncRead + Unpin>(
    reader: R,
    handle: &toolyard_actors::transport::ConnectionHandle,
    max: usize,
    turns: Turns,
) -> io::Result<()> {
    let mut reader = BufReader::with_capacity(64 * 1024, reader);
    // Holds a message only while it spans reads; a message that is whole in the read
    // buffer (the usual case) is handed on from there without a copy.
    let mut line: Vec<u8> = Vec::with_capacity(4096);
    let mut discarding = false;
    // Messages handled since the writer last had a turn, and when to think of its next.
    let mut handled = 0;
    let mut next_turn = turns.every;
    loop {
        if handled >= next_turn {
            if turns.writer_turn(handled) {
                handled = 0;
                tokio::task::yield_now().await;
                turns.resumed();
            }
            next_turn = handled + turns.every;
        }
        let buf = reader.fill_buf().await?;
        turns.resumed();
        if buf.is_empty() {
            if !line.is_empty() && !discarding {
                handle.receive(&line);
            }
            return Ok(());
        }
        let mut used = 0;
        // The complete lines in the buffer, up to the writer's next turn.
        while handled < next_turn {
            let Some(i) = memchr::memchr(b'\n', &buf[used..]) else {
                break;
            };
            let chunk = &buf[used..used + i];
            used += i + 1;
            handled += 1;
            if discarding {
                discarding = false;
                continue;
            }
            let message = if line.is_empty() {
                chunk
            } else if line.len() + chunk.len() > max {
                line.clear();
                reject_oversized(handle, max);
                continue;
            } else {
                line.extend_from_slice(chunk);
                &line[..]
            };
            if message.len() > max {
                reject_oversized(handle, max);
            } else {
                let text = trim_cr(message);
                if !text.iter().all(u8::is_ascii_whitespace) {
                    handle.receive(text);
                }
            }
            line.clear();
        }
        if handled >= next_turn {
            // Time to think of the writer's turn; the rest of the buffer is read after.
            reader.consume(used);
            continue;
        }
        // The start of a message that continues in the next read.
        let rest = &buf[used..];
        if !discarding && !rest.is_empty() {
            if line.len() + rest.len() > max {
                discarding = true;
                line.clear();
                reject_oversized(handle, max);
            } else {
                line.extend_from_slice(rest);
            }
        }
        let consumed = buf.len();
        reader.consume(consumed);
    }
}

fn reject_oversized(handle: &toolyard_actors::transport::ConnectionHandle, max: usize) {
    handle.reject(ErrorObject::invalid_request(format!(
        "message exceeds the limit of {max} bytes; it was discarded"
    )));
}

fn trim_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

async fn write_loop<W: AsyncWrite + Unpin>(
    mut writer: W,
    mut rx: mpsc::UnboundedReceiver<Vec<u8>>,
) {
    let mut buf: Vec<u8> = Vec::with_capacity(64 * 1024);
    // On a multi-thread runtime another worker wakes the writer per message: yielding once
    // lets the producers that are already runnable finish, so their answers share a write.
    // On a current-thread runtime the writer only runs when the reader yields, and then
    // everything ready is queued already; a yield there would only delay the answers.
    let multi_thread = tokio::runtime::Handle::current().runtime_flavor()
        != tokio::runtime::RuntimeFlavor::CurrentThread;
    while let Some(first) = rx.recv().await {
        buf.extend_from_slice(&first);
        buf.push(b'\n');
        if multi_thread {
            tokio::task::yield_now().await;
        }
        while let Ok(more) = rx.try_recv() {
            buf.extend_from_slice(&more);
            buf.push(b'\n');
            if buf.len() > 1024 * 1024 {
                break;
            }
        }
        if writer.write_all(&buf).await.is_err() || writer.flush().await.is_err() {
            return;
        }
        buf.clear();
    }
    let _ = writer.flush().await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

    /// Framing is independent of how reads split the input and of the writer's turns: every
    /// message is answered once, an oversized one (spanning several reads) is refused and
    /// skipped to its newline, and the messages around it are served; once the input ends
    /// and the answers are written, serving ends.
    #[tokio::test(flavor = "current_thread")]
    async fn messages_split_across_reads_and_writer_turns_are_each_answered_once() {
        #[derive(serde::Deserialize, schemars::JsonSchema)]
        struct Echo {
            message: String,
        }
        let echo = crate::tool_fn(
            "echo",
            "Echoes",
            |_ctx, a: Echo| async move { Ok(a.message) },
        )
        .unwrap();
        let server = crate::ServerBuilder::new("t", "0")
            .tool(echo)
            .start()
            .await
            .unwrap();
        let (mut client_in, server_in) = tokio::io::duplex(64);
        let (server_out, client_out) = tokio::io::duplex(1 << 20);
        let options = StdioOptions {
            max_message_bytes: 2048,
            answer_every: 3,
            // Far beyond the test's guard below: serving must end because the writer
            // drained and saw its channel close, not because the drain gave up (regression:
            // the connection handle kept a sender alive, so every stdio server waited the
            // whole drain timeout before exiting).
            drain_timeout: Duration::from_secs(3600),
        };
        let serving = tokio::spawn(async move {
            let server = server;
            serve_io(&server, server_in, server_out, options).await
        });
        let mut input = Vec::new();
        let mut push = |v: Value| {
            input.extend_from_slice(v.to_string().as_bytes());
            input.push(b'\n');
        };
        push(
            json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
            "protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}),
        );
        push(json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
        for id in 1..=50 {
            if id == 20 {
                push(
                    json!({"jsonrpc":"2.0","id":"big","method":"tools/call","params":{
                    "name":"echo","arguments":{"message":"x".repeat(5000)}}}),
                );
            }
            push(
                json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{
                "name":"echo","arguments":{"message":id.to_string()}}}),
            );
        }
        let writer = tokio::spawn(async move {
            // Odd-sized writes, so messages and the oversized one straddle reads.
            for chunk in input.chunks(7) {
                client_in.write_all(chunk).await.unwrap();
            }
            client_in.shutdown().await.unwrap();
        });
        let mut lines = tokio::io::BufReader::new(client_out).lines();
        let mut answered = std::collections::BTreeMap::new();
        let mut refused = 0;
        while let Some(line) = lines.next_line().await.unwrap() {
            let m: Value = serde_json::from_str(&line).unwrap();
            match m["id"].as_i64() {
                Some(id) => {
                    let text = &m["result"]["content"][0]["text"];
                    if id > 0 {
                        assert_eq!(text, &json!(id.to_string()), "{m}");
                    }
                    assert!(answered.insert(id, ()).is_none(), "answered twice: {m}");
                }
                None => {
                    assert_eq!(m["error"]["code"], -32600, "{m}");
                    refused += 1;
                }
            }
        }
        writer.await.unwrap();
        tokio::time::timeout(Duration::from_secs(60), serving)
            .await
            .expect("serve_io must end once its input closed and the answers drained")
            .unwrap()
            .unwrap();
        assert_eq!(refused, 1, "the oversized message is refused once");
        assert_eq!(answered.len(), 51, "initialize and 50 calls: {answered:?}");
    }

    /// The writer gets a turn every few messages only when answers wait for it: a batch of
    /// calls that are not answered at once (a gateway's, forwarded) is read in one turn, so
    /// whatever the calls send upstream goes out together; a batch answered at once gives
    /// the writer turns within it (the pipelining the module docs measure). A task that
    /// runs whenever the reader yields sees the difference.
    #[tokio::test(flavor = "current_thread")]
    async fn a_batch_is_read_in_one_turn_unless_answers_wait_for_the_writer() {
        use std::sync::atomic::AtomicUsize;
        #[derive(serde::Deserialize, schemars::JsonSchema)]
        struct NoArgs {}
        let started = Arc::new(AtomicUsize::new(0));
        let done = Arc::new(AtomicUsize::new(0));
        let release = Arc::new(tokio::sync::Semaphore::new(0));
        let later = {
            let (started, release) = (started.clone(), release.clone());
            crate::tool_fn("later", "Answers once released", move |_ctx, _a: NoArgs| {
                let (started, release) = (started.clone(), release.clone());
                async move {
                    started.fetch_add(1, Ordering::SeqCst);
                    release
                        .acquire()
                        .await
                        .map_err(|e| crate::HandlerError::failed(e.to_string()))?
                        .forget();
                    Ok("later".to_owned())
                }
            })
            .unwrap()
        };
        let now = {
            let done = done.clone();
            crate::tool_fn("now", "Answers at once", move |_ctx, _a: NoArgs| {
                let done = done.clone();
                async move {
                    done.fetch_add(1, Ordering::SeqCst);
                    Ok("now".to_owned())
                }
            })
            .unwrap()
        };
        let server = crate::ServerBuilder::new("t", "0")
            .tool(later)
            .tool(now)
            .start()
            .await
            .unwrap();
        let (mut client_in, server_in) = tokio::io::duplex(1 << 16);
        let (server_out, client_out) = tokio::io::duplex(1 << 20);
        let options = StdioOptions {
            answer_every: 4,
            ..StdioOptions::default()
        };
        let serving = tokio::spawn(async move {
            let server = server;
            serve_io(&server, server_in, server_out, options).await
        });
        // What the other tasks see each time they get to run.
        let seen = {
            let (started, done) = (started.clone(), done.clone());
            tokio::spawn(async move {
                let mut seen = Vec::new();
                while started.load(Ordering::SeqCst) < 20 || done.load(Ordering::SeqCst) < 20 {
                    seen.push((started.load(Ordering::SeqCst), done.load(Ordering::SeqCst)));
                    tokio::task::yield_now().await;
                }
                seen
            })
        };
        let batch = |tool: &str, first: u64| {
            let mut input = Vec::new();
            for id in first..first + 20 {
                let call = json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{
                    "name":tool,"arguments":{},
                    "_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",
                             "io.modelcontextprotocol/clientCapabilities":{}}}});
                input.extend_from_slice(call.to_string().as_bytes());
                input.push(b'\n');
            }
            input
        };
        let wait_for = |n: &Arc<AtomicUsize>| {
            let n = n.clone();
            async move {
                while n.load(Ordering::SeqCst) < 20 {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
        };
        client_in.write_all(&batch("later", 1)).await.unwrap();
        tokio::time::timeout(Duration::from_secs(10), wait_for(&started))
            .await
            .expect("the 20 later calls start");
        client_in.write_all(&batch("now", 21)).await.unwrap();
        tokio::time::timeout(Duration::from_secs(10), wait_for(&done))
            .await
            .expect("the 20 now calls are answered");
        release.add_permits(20);
        let mut lines = tokio::io::BufReader::new(client_out).lines();
        let mut answered = std::collections::BTreeSet::new();
        while answered.len() < 40 {
            let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
                .await
                .expect("every call is answered")
                .unwrap()
                .unwrap();
            let m: Value = serde_json::from_str(&line).unwrap();
            assert!(m["result"].is_object(), "{m}");
            assert!(
                answered.insert(m["id"].as_i64().unwrap()),
                "answered twice: {m}"
            );
        }
        let seen = seen.await.unwrap();
        assert!(
            seen.iter().all(|&(s, _)| s == 0 || s == 20),
            "the later calls were read in one turn: {seen:?}"
        );
        assert!(
            seen.iter().any(|&(_, d)| d > 0 && d < 20),
            "the writer had turns within the batch answered at once: {seen:?}"
        );
        drop(client_in);
        tokio::time::timeout(Duration::from_secs(10), serving)
            .await
            .expect("serving ends with its input")
            .unwrap()
            .unwrap();
    }
}
