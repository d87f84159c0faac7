//! An SSE body as events, parsed by `eventsource-stream`, with the one guard it lacks: an event
//! larger than `max_message_bytes` ends the stream as a broken upstream instead of growing the
//! parser's buffer without bound.

use futures_util::{Stream, StreamExt};

use crate::http_body::error_chain;
use crate::upstream::error::Closed;

/// One event: its `event` type (empty for the default `message`), `data`, `id` and `retry`.
pub(super) type Event = eventsource_stream::Event;

/// The events of `response`'s body, or why they stopped.
pub(super) fn events(
    response: reqwest::Response,
    max: usize,
) -> impl Stream<Item = Result<Event, Closed>> + Send + Unpin {
    use eventsource_stream::Eventsource;
    let mut pending = 0usize;
    let guarded = response.bytes_stream().map(move |chunk| {
        let chunk = chunk
            .map_err(|e| Closed::Io(format!("its event stream broke off: {}", error_chain(&e))))?;
        // Bytes since the last blank line (the end of an event) bound the event being read.
        match last_boundary(&chunk) {
            Some(end) => pending = chunk.len() - end,
            None => pending += chunk.len(),
        }
        if pending > max {
            return Err(Closed::TooLong(max));
        }
        Ok(chunk)
    });
    Box::pin(
        guarded
            .map(|r| r.map_err(GuardError))
            .eventsource()
            .map(|item| match item {
                Ok(event) => Ok(event),
                Err(eventsource_stream::EventStreamError::Transport(GuardError(closed))) => {
                    Err(closed)
                }
                Err(e) => Err(Closed::Protocol(format!(
                    "it sent an invalid event stream: {e}"
                ))),
            }),
    )
}

/// The end of the last blank line in `chunk`, if it has one.
fn last_boundary(chunk: &[u8]) -> Option<usize> {
    let lf = chunk.windows(2).rposition(|w| w == b"\n\n").map(|i| i + 2);
    let cr = chunk.windows(2).rposition(|w| w == b"\r\r").map(|i| i + 2);
    lf.max(cr)
}

/// A guard or transport failure carried through the parser.
#[derive(Debug)]
pub(super) struct GuardError(Closed);

impl std::fmt::Display for GuardError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for GuardError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_blank_line_bounds_the_event_being_read() {
        assert_eq!(last_boundary(b"data: a\n\ndata: b"), Some(9));
        assert_eq!(last_boundary(b"data: a\r\n\r\ndata: b\n\n"), Some(20));
        assert_eq!(last_boundary(b"data: partial"), None);
        assert_eq!(last_boundary(b"data: a\r\rdata"), Some(9));
    }
}
