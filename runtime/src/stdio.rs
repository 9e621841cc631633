//! The stdio transport: newline-delimited JSON-RPC on a byte stream pair.
//!
//! One reader splits lines with a hard size limit (an overlong message is answered with an
//! error and skipped up to its newline, the connection goes on); one writer receives
//! serialized messages and batches them: after the first message it yields once so that
//! responses produced together go out in one write. Logs never go to stdout.

use std::io;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use toolyard_actors::{Server, Sink};
use toolyard_proto::ErrorObject;

/// Options of the stdio transport.
#[derive(Debug, Clone, Copy)]
pub struct StdioOptions {
    /// The largest message accepted, in bytes (newline excluded).
    pub max_message_bytes: usize,
    /// How long to wait for in-flight answers to drain after the input closes.
    pub drain_timeout: Duration,
}

impl Default for StdioOptions {
    fn default() -> Self {
        StdioOptions {
            max_message_bytes: 4 * 1024 * 1024,
            drain_timeout: Duration::from_secs(2),
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
    let handle = server
        .connect(Sink::channel(tx))
        .await
        .map_err(|e| io::Error::other(e.to_string()))?;
    let writer_task = tokio::spawn(write_loop(writer, rx));
    let read_result = read_loop(reader, &handle, options.max_message_bytes).await;
    handle.close();
    // Once the connection actor and every request task have dropped their senders the
    // writer finishes; a stuck task cannot hold the process forever.
    let _ = tokio::time::timeout(options.drain_timeout, writer_task).await;
    read_result
}

async fn read_loop<R: AsyncRead + Unpin>(
    reader: R,
    handle: &toolyard_actors::ConnectionHandle,
    max: usize,
) -> io::Result<()> {
    let mut reader = BufReader::with_capacity(64 * 1024, reader);
    // Holds a message only while it spans reads; a message that is whole in the read
    // buffer (the usual case) is handed on from there without a copy.
    let mut line: Vec<u8> = Vec::with_capacity(4096);
    let mut discarding = false;
    loop {
        let buf = reader.fill_buf().await?;
        if buf.is_empty() {
            if !line.is_empty() && !discarding {
                handle.receive(&line);
            }
            return Ok(());
        }
        let mut used = 0;
        // Every complete line in the buffer.
        while let Some(i) = memchr::memchr(b'\n', &buf[used..]) {
            let chunk = &buf[used..used + i];
            used += i + 1;
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

fn reject_oversized(handle: &toolyard_actors::ConnectionHandle, max: usize) {
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
    while let Some(first) = rx.recv().await {
        buf.extend_from_slice(&first);
        buf.push(b'\n');
        // Let the producers that are already runnable finish, so their answers share
        // this write (on a multi-thread runtime the writer otherwise wakes per message).
        tokio::task::yield_now().await;
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
