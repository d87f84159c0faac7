//! What a host's `Accept` header lets it read as an answer: JSON, an event stream, and which it
//! ranks first.

use axum::http::{HeaderMap, HeaderValue, header};

/// What a host's `Accept` lets it read as an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Accepts {
    pub json: bool,
    pub stream: bool,
    /// It ranks `text/event-stream` above `application/json` (by q-value, then by order).
    stream_first: bool,
}

impl Accepts {
    /// Reads `Accept` (wildcards included, `q=0` excluded). The SDKs' value — JSON first,
    /// without q-values, then streams — is recognised without parsing it.
    pub(super) fn of(headers: &HeaderMap) -> Self {
        Self::of_value(headers.get(header::ACCEPT))
    }

    /// [`Self::of`] the request's (first) `Accept` value, found already.
    pub(super) fn of_value(accept: Option<&HeaderValue>) -> Self {
        let Some(accept) = accept.and_then(|v| v.to_str().ok()) else {
            return Self {
                json: false,
                stream: false,
                stream_first: false,
            };
        };
        if accept == "application/json, text/event-stream" {
            return Self {
                json: true,
                stream: true,
                stream_first: false,
            };
        }
        let (mut json, mut stream) = (false, false);
        let mut best: Option<(f32, bool)> = None;
        for range in accept.split(',') {
            let mut parts = range.split(';');
            let media = parts.next().unwrap_or_default().trim().to_ascii_lowercase();
            let q: f32 = parts
                .find_map(|p| p.trim().strip_prefix("q="))
                .and_then(|q| q.parse().ok())
                .unwrap_or(1.0);
            if q <= 0.0 {
                continue;
            }
            let (is_json, is_stream) = match media.as_str() {
                "application/json" | "application/*" => (true, false),
                "text/event-stream" | "text/*" => (false, true),
                "*/*" => (true, true),
                _ => continue,
            };
            json |= is_json;
            stream |= is_stream;
            if best.is_none_or(|(top, _)| q > top) {
                best = Some((q, !is_json));
            }
        }
        Self {
            json,
            stream,
            stream_first: best.is_some_and(|(_, stream)| stream),
        }
    }

    /// Whether an answer that comes first goes as an event stream.
    pub(super) fn stream_answers(self) -> bool {
        self.stream && (self.stream_first || !self.json)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accepting(accept: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_str(accept).unwrap_or_else(|e| panic!("{e}")),
        );
        headers
    }

    #[test]
    fn accept_says_what_a_host_can_read_and_which_it_ranks_first() {
        let of = |accept: &str| {
            let a = Accepts::of(&accepting(accept));
            (a.json, a.stream, a.stream_answers())
        };
        for (accept, expected) in [
            ("application/json, text/event-stream", (true, true, false)),
            ("text/event-stream, application/json", (true, true, true)),
            (
                "text/event-stream;q=0.5, application/json",
                (true, true, false),
            ),
            (
                "application/json;q=0.9, text/event-stream",
                (true, true, true),
            ),
            (
                "Text/Event-Stream ; q=1, application/json",
                (true, true, true),
            ),
            ("*/*", (true, true, false)),
            ("application/json", (true, false, false)),
            ("text/event-stream", (false, true, true)),
            ("text/html", (false, false, false)),
            ("application/json;q=0, text/html", (false, false, false)),
        ] {
            assert_eq!(of(accept), expected, "{accept}");
        }
        let none = Accepts::of(&HeaderMap::new());
        assert!(!none.json && !none.stream);
    }
}
