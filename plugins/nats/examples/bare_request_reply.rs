//! The floor under a call forwarded over NATS: async-nats request/reply with nothing of ours
//! on either side, so `benches/nats-load.sh` can show how much of the gateway's CPU per
//! forwarded call the client library alone costs.
//!
//! ```text
//! bare_request_reply respond URL SUBJECT                   # answers until killed
//! bare_request_reply request URL SUBJECT CONCURRENCY SECS  # prints one JSON line
//! ```
//!
//! The requester sends a forwarded `tools/call` body as the gateway does (without its headers,
//! so this is a lower bound) from CONCURRENCY tasks on one thread, and reports its own CPU
//! (user + system, from `/proc/self/stat`) over the timed part of the run, and the round
//! trip's p50 and p99 (the floor under the gateway's added latency). The responder
//! answers each request with an echo result of the size the demo `echo` returns.

use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt;

const REQUEST: &[u8] = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"message":"hello"},"_meta":{"progressToken":1}}}"#;
const RESULT: &[u8] = br#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"hello"}],"structuredContent":{"message":"hello"}}}"#;

/// This process's CPU time so far in clock ticks (user + system).
fn cpu_ticks() -> std::io::Result<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    // Fields after the command name, which sits in parentheses and may hold spaces.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Ok(ticks(11) + ticks(12))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage =
        "usage: bare_request_reply respond URL SUBJECT | request URL SUBJECT CONCURRENCY SECS";
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["respond", url, subject] => {
            let client = async_nats::connect(*url).await?;
            let mut requests = client
                .queue_subscribe(subject.to_string(), "bare".into())
                .await?;
            while let Some(request) = requests.next().await {
                if let Some(reply) = request.reply {
                    client.publish(reply, Bytes::from_static(RESULT)).await?;
                }
            }
            Ok(())
        }
        ["request", url, subject, concurrency, seconds] => {
            let concurrency: usize = concurrency.parse()?;
            let run = Duration::from_secs_f64(seconds.parse()?);
            let client = async_nats::connect(*url).await?;
            let subject = async_nats::Subject::from(subject.to_string());
            // Warm up: the reply subscription, the connection's buffers.
            for _ in 0..500 {
                client
                    .request(subject.clone(), Bytes::from_static(REQUEST))
                    .await?;
            }
            let (cpu_before, started) = (cpu_ticks()?, Instant::now());
            let deadline = started + run;
            let callers = (0..concurrency).map(|_| {
                let (client, subject) = (client.clone(), subject.clone());
                async move {
                    // Each answered request's round trip in µs, and the failures.
                    let (mut took, mut errors) = (Vec::new(), 0u64);
                    while Instant::now() < deadline {
                        let sent = Instant::now();
                        match client
                            .request(subject.clone(), Bytes::from_static(REQUEST))
                            .await
                        {
                            Ok(_) => took.push(sent.elapsed().as_micros()),
                            Err(_) => errors += 1,
                        }
                    }
                    (took, errors)
                }
            });
            let counts = futures_util::future::join_all(callers).await;
            let elapsed = started.elapsed().as_secs_f64();
            let cpu = cpu_ticks()? - cpu_before;
            let errors: u64 = counts.iter().map(|c| c.1).sum();
            let mut took: Vec<u128> = counts.into_iter().flat_map(|c| c.0).collect();
            took.sort_unstable();
            let ok = took.len();
            let at = |q: usize| took.get(ok * q / 100).copied().unwrap_or(0);
            let (p50, p99) = (at(50), at(99));
            println!(
                r#"{{"label":"bare","concurrency":{concurrency},"ok":{ok},"errors":{errors},"seconds":{elapsed:.3},"cpu_ticks":{cpu},"latency_us":{{"p50":{p50},"p99":{p99}}}}}"#
            );
            Ok(())
        }
        _ => Err(usage.into()),
    }
}
