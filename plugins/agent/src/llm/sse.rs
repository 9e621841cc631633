//! A `text/event-stream` decoder for chat-completion streams: bytes in, the `data` of each
//! event out. It works on bytes until a line is complete, because the network splits chunks
//! anywhere, inside a UTF-8 character too. An unfinished line or event may not grow past
//! [`MAX_EVENT_BYTES`], so a broken server cannot make the client buffer without end. (The
//! MCP client has its own SSE reader, private to it; this one is the few lines the chat
//! stream needs.)

/// The largest event (or unfinished line) accepted.
pub(crate) const MAX_EVENT_BYTES: usize = 16 << 20;

/// One event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Event {
    /// The `event:` field (empty when absent).
    pub(crate) name: String,
    /// The `data:` lines, joined with `\n`.
    pub(crate) data: String,
}

/// Accumulates bytes and yields complete events.
#[derive(Debug, Default)]
pub(crate) struct Decoder {
    buf: Vec<u8>,
    name: String,
    data: Option<String>,
}

impl Decoder {
    /// Feeds bytes; returns the events they completed, or `None` once an event or line is
    /// larger than [`MAX_EVENT_BYTES`].
    pub(crate) fn feed(&mut self, bytes: &[u8]) -> Option<Vec<Event>> {
        self.buf.extend_from_slice(bytes);
        let mut events = Vec::new();
        let mut start = 0;
        while let Some(pos) = self.buf[start..].iter().position(|&b| b == b'\n') {
            let mut line = &self.buf[start..start + pos];
            start += pos + 1;
            if line.last() == Some(&b'\r') {
                line = &line[..line.len() - 1];
            }
            let line = String::from_utf8_lossy(line).into_owned();
            if let Some(event) = self.line(&line) {
                events.push(event);
            }
        }
        self.buf.drain(..start);
        let open = self.data.as_ref().map_or(0, String::len);
        (self.buf.len() <= MAX_EVENT_BYTES && open <= MAX_EVENT_BYTES).then_some(events)
    }

    /// The event still open when the stream ended (a server that ends without a blank line).
    pub(crate) fn finish(&mut self) -> Option<Event> {
        if !self.buf.is_empty() {
            let rest = String::from_utf8_lossy(&std::mem::take(&mut self.buf)).into_owned();
            if let Some(e) = self.line(rest.trim_end_matches('\r')) {
                return Some(e);
            }
        }
        self.line("")
    }

    fn line(&mut self, line: &str) -> Option<Event> {
        if line.is_empty() {
            let data = self.data.take()?;
            return Some(Event {
                name: std::mem::take(&mut self.name),
                data,
            });
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "data" => match &mut self.data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(value);
                }
                None => self.data = Some(value.to_owned()),
            },
            "event" => value.clone_into(&mut self.name),
            _ => {}
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_anywhere_even_inside_a_character_are_reassembled() {
        let stream = "data: {\"a\":\"é\"}\r\n\r\n: comment\n\nevent: error\ndata: x\ndata: y\n\ndata: [DONE]";
        let bytes = stream.as_bytes();
        let mut d = Decoder::default();
        let mut events = Vec::new();
        for b in bytes.chunks(1) {
            events.extend(d.feed(b).unwrap());
        }
        events.extend(d.finish());
        let data: Vec<_> = events.iter().map(|e| e.data.as_str()).collect();
        assert_eq!(data, ["{\"a\":\"é\"}", "x\ny", "[DONE]"]);
        assert_eq!(events[1].name, "error");
    }

    #[test]
    fn an_endless_line_is_refused_instead_of_buffered() {
        let mut d = Decoder::default();
        assert!(d.feed(&vec![b'x'; MAX_EVENT_BYTES]).is_some());
        assert!(d.feed(b"x").is_none());
    }
}
