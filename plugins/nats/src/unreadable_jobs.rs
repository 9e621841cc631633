//! Jobs on the work queue that async-nats cannot read, found and removed.
//!
//! Anything on the bus may publish to `TY_TASK_JOBS`, and nats-server stores what it is given:
//! a header block async-nats cannot parse (a line without a colon, bytes that are not UTF-8)
//! or a subject that is not UTF-8. async-nats ends the connection that reads such a message,
//! so the job is never acked: it comes back every `ack_wait`, for good, and each delivery
//! drops the jobs' connection of whichever worker pulls it (and any job in transit on it,
//! which then waits its `ack_wait`). Reading the stream through its JSON get API does not
//! take a connection down, so after its jobs' connection changed a worker looks at the jobs
//! its consumer handed out and has not had acked, and deletes those it could not read, saying
//! so. The same library's parser decides (`StreamMessage::try_from`), not a copy of its rules.

use async_nats::jetstream::consumer::PullConsumer;
use async_nats::jetstream::message::StreamMessage;
use async_nats::jetstream::stream::RawMessage;
use async_nats::jetstream::Context;
use serde_json::Value;

/// At most this many stream sequences are looked at in one pass: a pass is a request per
/// sequence, and the jobs handed out and not acked are at most the workers' slots.
const MOST: u64 = 1024;

/// Looks at the jobs `consumer` has handed out and not had acked, in the stream `stream`,
/// and deletes each one async-nats cannot read. Returns how many it deleted. Any failure to
/// look (JetStream busy, the connection down again) ends the pass quietly: the next change
/// of the connection makes another.
pub(crate) async fn remove(js: &Context, stream: &str, consumer: &PullConsumer) -> usize {
    let Ok(info) = consumer.get_info().await else {
        return 0;
    };
    if info.num_ack_pending == 0 {
        return 0;
    }
    let first = info.ack_floor.stream_sequence + 1;
    let last = info.delivered.stream_sequence.min(first + MOST - 1);
    let mut removed = 0;
    for seq in first..=last {
        let got: Result<Value, _> = js
            .request(
                format!("STREAM.MSG.GET.{stream}"),
                &serde_json::json!({ "seq": seq }),
            )
            .await;
        let Ok(got) = got else { return removed };
        let Some(message) = got.get("message") else {
            // Acked and gone (work-queue retention), or never there.
            continue;
        };
        let Ok(raw) = serde_json::from_value::<RawMessage>(message.clone()) else {
            continue;
        };
        let Some(why) = unreadable(raw) else {
            continue;
        };
        let subject = message["subject"].as_str().unwrap_or_default();
        let deleted: Result<Value, _> = js
            .request(
                format!("STREAM.MSG.DELETE.{stream}"),
                &serde_json::json!({ "seq": seq }),
            )
            .await;
        if deleted.is_ok_and(|d| d["success"] == true) {
            removed += 1;
            tracing::warn!(target: "toolyard::nats", stream, seq, subject, why, "removed a task job the NATS client cannot read: it came back every ack_wait and dropped the jobs' connection each time");
        }
    }
    removed
}

/// Why async-nats could not read `raw` when delivered, or `None` when it could.
fn unreadable(raw: RawMessage) -> Option<String> {
    match StreamMessage::try_from(raw) {
        Err(e) => Some(format!("its headers: {e}")),
        // nats-server writes a subject that is not UTF-8 with U+FFFD in its place; a job's
        // subject is ASCII tokens.
        Ok(m) if m.subject.contains('\u{FFFD}') => Some("its subject is not UTF-8".to_owned()),
        Ok(_) => None,
    }
}
