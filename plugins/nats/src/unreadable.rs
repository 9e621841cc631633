//! Messages in the bridge's streams that async-nats cannot read, found and removed.
//!
//! Anything on the bus may publish to the work queue (`TY_TASK_JOBS`) and write the buckets
//! (`TY_CATALOG`, `TY_TASKS`), and nats-server stores what it is given: a header block
//! async-nats cannot parse (a line without a colon, bytes that are not UTF-8) or a subject
//! that is not UTF-8. async-nats ends the connection that reads such a message, so nothing
//! that reads it through a consumer gets past it: a job is never acked and comes back every
//! `ack_wait`, for good; a bucket's watch, set up again after the drop from the last
//! revision it saw, is handed the same message again, so a gateway stopped following the
//! catalog (no worker that came after was listed) until the entry expired. Reading a stream
//! through its JSON get API (`STREAM.MSG.GET`) does not take a connection down, so after a
//! connection that reads these streams changed, the messages are looked at there and those
//! async-nats cannot read are deleted, with a warning. The same library's parser decides
//! (`StreamMessage::try_from`), not a copy of its rules.

use async_nats::jetstream::message::StreamMessage;
use async_nats::jetstream::stream::RawMessage;
use async_nats::jetstream::Context;
use async_nats::Client;
use serde_json::{json, Value};
use std::time::Duration;

/// The streams of the catalog and task buckets (`KV_` and the bucket's name).
pub(crate) const CATALOG_STREAM: &str = "KV_TY_CATALOG";
pub(crate) const TASKS_STREAM: &str = "KV_TY_TASKS";

/// At most this many messages are looked at in one pass over a stream: a pass is a request
/// per message.
const MOST: u64 = 4096;

/// Looks at the jobs the consumer `consumer` of `stream` has handed out and not had acked,
/// and deletes each one async-nats cannot read. Returns how many it deleted. A failure to
/// look (JetStream busy, the connection down) ends the pass quietly: the next change of the
/// jobs' connection makes another.
pub(crate) async fn remove_handed_out(js: &Context, stream: &str, consumer: &str) -> u64 {
    let Ok(info) = js
        .request::<_, _, Value>(format!("CONSUMER.INFO.{stream}.{consumer}"), &json!({}))
        .await
    else {
        return 0;
    };
    if info["num_ack_pending"].as_u64().unwrap_or(0) == 0 {
        return 0;
    }
    let first = info["ack_floor"]["stream_seq"].as_u64().unwrap_or(0) + 1;
    let Some(delivered) = info["delivered"]["stream_seq"].as_u64() else {
        return 0;
    };
    let last = delivered.min(first + MOST - 1);
    let mut removed = 0;
    let mut seq = first;
    while seq <= last {
        match next_message(js, stream, seq).await {
            Some((at, message)) if at <= last => {
                removed += remove_if_unreadable(js, stream, at, &message).await;
                seq = at + 1;
            }
            _ => break,
        }
    }
    removed
}

/// Looks at every message of `stream` (the first [`MOST`]) and deletes each one async-nats
/// cannot read. Returns how many it deleted.
pub(crate) async fn remove_in(js: &Context, stream: &str) -> u64 {
    let mut removed = 0;
    let mut seq = 1;
    for _ in 0..MOST {
        let Some((at, message)) = next_message(js, stream, seq).await else {
            break;
        };
        removed += remove_if_unreadable(js, stream, at, &message).await;
        seq = at + 1;
    }
    removed
}

/// Each time `watched`'s connection changes (at most once a second), [`remove_in`] each of
/// `streams`, reading them through `via` (another connection, when there is one: `watched`
/// drops again each time such a message is read on it). Runs until aborted.
pub(crate) async fn remove_on_reconnect(
    watched: Client,
    via: Client,
    streams: &'static [&'static str],
) {
    use std::sync::atomic::Ordering;
    let statistics = watched.statistics();
    let events = crate::connection_events();
    let mut seen = statistics.connects.load(Ordering::Relaxed);
    loop {
        let changed = events.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        let now = statistics.connects.load(Ordering::Relaxed);
        if now != seen && seen > 0 {
            crate::connection::connected(&via).await;
            let js = crate::catalog::context(via.clone());
            for stream in streams {
                remove_in(&js, stream).await;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        seen = now;
        // A client of the embedder's own reports no events: it is polled.
        let _ = tokio::time::timeout(Duration::from_secs(5), changed).await;
        tokio::time::sleep(crate::connection::EVENT_SETTLES).await;
    }
}

/// The first message of `stream` at `seq` or after, with its sequence.
async fn next_message(js: &Context, stream: &str, seq: u64) -> Option<(u64, Value)> {
    let got: Value = js
        .request(
            format!("STREAM.MSG.GET.{stream}"),
            &json!({ "seq": seq, "next_by_subj": ">" }),
        )
        .await
        .ok()?;
    let message = got.get("message")?.clone();
    Some((message["seq"].as_u64()?, message))
}

/// The last message of `subject` in `stream`, read through the stream's JSON get API, where
/// a message async-nats cannot read is an error of its own instead of the end of the
/// connection (a KV get is a direct get: the raw message, read by the connection). `Ok(None)`
/// when the subject has none; `Ok(Some(Err(why)))` for a message async-nats cannot read;
/// `Err` when the stream could not be asked.
pub(crate) async fn last_message(
    js: &Context,
    stream: &str,
    subject: &str,
) -> Result<Option<Result<StreamMessage, String>>, String> {
    let got: Value = js
        .request(
            format!("STREAM.MSG.GET.{stream}"),
            &json!({ "last_by_subj": subject }),
        )
        .await
        .map_err(|e| e.to_string())?;
    if let Some(error) = got.get("error") {
        return match serde_json::from_value::<async_nats::jetstream::Error>(error.clone()) {
            Ok(e) if e.error_code() == async_nats::jetstream::ErrorCode::NO_MESSAGE_FOUND => {
                Ok(None)
            }
            Ok(e) => Err(e.to_string()),
            Err(_) => Err(format!("an unreadable error: {error}")),
        };
    }
    let message = got.get("message").ok_or("an answer without the message")?;
    let raw = serde_json::from_value::<RawMessage>(message.clone()).map_err(|e| e.to_string())?;
    Ok(Some(
        StreamMessage::try_from(raw).map_err(|e| format!("its headers: {e}")),
    ))
}

/// Deletes the message at `seq` when async-nats cannot read it; 1 when it did.
async fn remove_if_unreadable(js: &Context, stream: &str, seq: u64, message: &Value) -> u64 {
    let Ok(raw) = serde_json::from_value::<RawMessage>(message.clone()) else {
        return 0;
    };
    let Some(why) = unreadable(raw) else {
        return 0;
    };
    let subject = message["subject"].as_str().unwrap_or_default();
    if !delete(js, stream, seq, subject).await {
        return 0;
    }
    tracing::warn!(target: "toolyard::nats", stream, seq, subject, why, "removed a message the NATS client cannot read: it would have dropped the connection of whoever reads the stream, again and again");
    1
}

/// Deletes the message at `seq`. A bucket's stream refuses that (async-nats creates buckets
/// with `deny_delete`), so there the message's key is purged instead: a purge marker that
/// rolls up what the key held, which a watch reads as the key's removal. A key that is not
/// UTF-8 cannot be named that way (nats-server reports it with U+FFFD in place of its
/// bytes); it stays until the bucket's `max_age` takes it, if it has one.
async fn delete(js: &Context, stream: &str, seq: u64, subject: &str) -> bool {
    let deleted: Result<Value, _> = js
        .request(
            format!("STREAM.MSG.DELETE.{stream}"),
            &json!({ "seq": seq }),
        )
        .await;
    if deleted.is_ok_and(|d| d["success"] == true) {
        return true;
    }
    let Some(bucket) = stream.strip_prefix("KV_") else {
        return false;
    };
    let Some(key) = subject
        .strip_prefix(&format!("$KV.{bucket}."))
        .filter(|key| !key.contains('\u{FFFD}'))
    else {
        return false;
    };
    let Ok(store) = js.get_key_value(bucket).await else {
        return false;
    };
    store.purge(key).await.is_ok()
}

/// Why async-nats could not read `raw` when delivered, or `None` when it could.
fn unreadable(raw: RawMessage) -> Option<String> {
    match StreamMessage::try_from(raw) {
        Err(e) => Some(format!("its headers: {e}")),
        // nats-server writes a subject that is not UTF-8 with U+FFFD in its place; the
        // bridge's subjects are ASCII tokens.
        Ok(m) if m.subject.contains('\u{FFFD}') => Some("its subject is not UTF-8".to_owned()),
        Ok(_) => None,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_bucket_streams_are_the_buckets_streams() {
        assert_eq!(
            super::CATALOG_STREAM,
            format!("KV_{}", crate::catalog::BUCKET)
        );
        assert_eq!(super::TASKS_STREAM, format!("KV_{}", crate::tasks::BUCKET));
    }
}
