//! Streams read as they arrive: a request's own event stream (whose server requests the test
//! answers with `Client::respond`), the session's GET stream, the legacy HTTP+SSE stream; every
//! message schema-checked as it is taken.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::Schemas;
use super::schema::server_request_def;

/// The JSON-RPC messages of one HTTP answer (JSON body or SSE stream).
pub async fn read_messages(response: reqwest::Response) -> Vec<Value> {
    let sse = response
        .headers()
        .get("content-type")
        .is_some_and(|t| t.to_str().unwrap().starts_with("text/event-stream"));
    let text = response.text().await.unwrap();
    if sse {
        text.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(|d| serde_json::from_str(d.trim()).unwrap())
            .collect()
    } else if text.trim().is_empty() {
        Vec::new()
    } else {
        vec![serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))]
    }
}

/// One server-sent event that carried data.
#[derive(Debug, Clone)]
pub struct SseEvent {
    pub event: Option<String>,
    pub data: String,
}

type ByteStream =
    std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>;

/// Reads the events of a `text/event-stream` body one by one, as they arrive.
pub struct SseReader {
    body: ByteStream,
    buffer: Vec<u8>,
    ended: bool,
}

impl SseReader {
    pub fn new(response: reqwest::Response) -> Self {
        Self {
            body: Box::pin(response.bytes_stream()),
            buffer: Vec::new(),
            ended: false,
        }
    }

    /// The next event with data: `Ok(None)` when the stream ended, `Err(())` when `timeout`
    /// passed first. Comments (keep-alives) and events without data are skipped.
    pub async fn next_event(&mut self, timeout: Duration) -> Result<Option<SseEvent>, ()> {
        use futures_util::StreamExt;
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            while let Some(end) = self.buffer.windows(2).position(|w| w == b"\n\n") {
                let block: Vec<u8> = self.buffer.drain(..end + 2).collect();
                if let Some(event) = parse_sse_block(&String::from_utf8_lossy(&block)) {
                    return Ok(Some(event));
                }
            }
            if self.ended {
                return Ok(None);
            }
            match tokio::time::timeout_at(deadline, self.body.next()).await {
                Err(_) => return Err(()),
                Ok(Some(Ok(chunk))) => self
                    .buffer
                    .extend(chunk.iter().copied().filter(|b| *b != b'\r')),
                Ok(Some(Err(_)) | None) => self.ended = true,
            }
        }
    }
}

fn parse_sse_block(block: &str) -> Option<SseEvent> {
    let mut event = None;
    let mut data: Option<String> = None;
    for line in block.lines() {
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "event" => event = Some(value.to_owned()),
            "data" => match &mut data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(value);
                }
                None => data = Some(value.to_owned()),
            },
            _ => {}
        }
    }
    data.map(|data| SseEvent { event, data })
}

/// What waiting for the next message gave.
#[derive(Debug)]
pub enum Next {
    Message(Value),
    /// The stream (or JSON body) ended.
    End,
    Timeout,
}

enum Source {
    /// A POST whose response headers have not arrived yet.
    Pending(tokio::task::JoinHandle<reqwest::Response>),
    Sse(SseReader),
    Done,
}

/// The JSON-RPC messages a host receives on one HTTP answer or stream, each schema-checked (for
/// the version negotiated on that side) as it is taken: answers to requests registered with
/// `expect_answer` against their method's result, server requests against their request type.
pub struct Messages {
    source: Source,
    status: Option<reqwest::StatusCode>,
    schemas: Arc<Schemas>,
    answers: HashMap<String, String>,
    queue: std::collections::VecDeque<Value>,
    /// A JSON (not event-stream) body being read.
    json_body: Option<tokio::sync::oneshot::Receiver<String>>,
}

impl Messages {
    pub fn from_response(response: reqwest::Response, schemas: Arc<Schemas>) -> Self {
        let mut messages = Self::pending(None, schemas);
        messages.accept(response);
        messages
    }

    pub fn from_sse(reader: SseReader, schemas: Arc<Schemas>) -> Self {
        let mut messages = Self::pending(None, schemas);
        messages.source = Source::Sse(reader);
        messages.status = Some(reqwest::StatusCode::OK);
        messages
    }

    pub(crate) fn pending(
        handle: Option<tokio::task::JoinHandle<reqwest::Response>>,
        schemas: Arc<Schemas>,
    ) -> Self {
        Self {
            source: handle.map_or(Source::Done, Source::Pending),
            status: None,
            schemas,
            answers: HashMap::new(),
            queue: Default::default(),
            json_body: None,
        }
    }

    /// Takes the response: its status, and its body as a stream or as whole JSON (read later).
    fn accept(&mut self, response: reqwest::Response) {
        self.status = Some(response.status());
        let sse = response
            .headers()
            .get("content-type")
            .is_some_and(|t| t.to_str().unwrap().starts_with("text/event-stream"));
        if sse {
            self.source = Source::Sse(SseReader::new(response));
        } else {
            let (tx, rx) = tokio::sync::oneshot::channel();
            tokio::spawn(async move {
                let _ = tx.send(response.text().await.unwrap_or_default());
            });
            self.source = Source::Done;
            self.json_body = Some(rx);
        }
    }

    /// Registers a request whose answer may come on this stream, to check it as `method`'s result.
    pub fn expect_answer(&mut self, id: &Value, method: &str) {
        self.answers.insert(id.to_string(), method.to_owned());
    }

    pub fn schemas(&self) -> &Arc<Schemas> {
        &self.schemas
    }

    /// Checks one message the gateway sent to the host.
    fn check(&self, message: &Value) {
        let is_answer = message.get("method").is_none();
        let answered = message
            .get("id")
            .filter(|_| is_answer)
            .and_then(|id| self.answers.get(&id.to_string()))
            .map(String::as_str);
        self.schemas.check_message(message, answered);
        if let (Some(method), Some(_)) = (
            message.get("method").and_then(Value::as_str),
            message.get("id"),
        ) {
            if let Some(def) = server_request_def(method) {
                self.schemas.check(def, message);
            }
        }
    }

    /// The HTTP status of the answer (waits for its headers, at most `timeout`).
    pub async fn status(&mut self, timeout: Duration) -> reqwest::StatusCode {
        self.resolve(tokio::time::Instant::now() + timeout).await;
        self.status.expect("no HTTP answer in time")
    }

    async fn resolve(&mut self, deadline: tokio::time::Instant) -> bool {
        if let Source::Pending(handle) = &mut self.source {
            match tokio::time::timeout_at(deadline, handle).await {
                Ok(response) => self.accept(response.unwrap()),
                Err(_) => return false,
            }
        }
        true
    }

    /// The next message, schema-checked; `Next::Timeout` if none came within `timeout`.
    pub async fn next_within(&mut self, timeout: Duration) -> Next {
        let deadline = tokio::time::Instant::now() + timeout;
        if !self.resolve(deadline).await {
            return Next::Timeout;
        }
        if let Some(rx) = &mut self.json_body {
            let Ok(text) = tokio::time::timeout_at(deadline, rx).await else {
                return Next::Timeout;
            };
            self.json_body = None;
            let text = text.unwrap_or_default();
            if !text.trim().is_empty() {
                let value: Value = serde_json::from_str(&text)
                    .unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
                match value {
                    Value::Array(items) => self.queue.extend(items),
                    other => self.queue.push_back(other),
                }
            }
        }
        if let Some(message) = self.queue.pop_front() {
            self.check(&message);
            return Next::Message(message);
        }
        let Source::Sse(reader) = &mut self.source else {
            return Next::End;
        };
        let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
        match reader.next_event(remaining).await {
            Err(()) => Next::Timeout,
            Ok(None) => {
                self.source = Source::Done;
                Next::End
            }
            Ok(Some(event)) => {
                assert!(
                    matches!(event.event.as_deref(), None | Some("message")),
                    "unexpected event {event:?}"
                );
                let message: Value = serde_json::from_str(&event.data)
                    .unwrap_or_else(|e| panic!("event data is not JSON ({e}): {}", event.data));
                self.check(&message);
                Next::Message(message)
            }
        }
    }

    /// The next message (at most 30 s); panics when the stream ends or nothing comes.
    pub async fn next(&mut self) -> Value {
        match self.next_within(Duration::from_secs(30)).await {
            Next::Message(m) => m,
            other => panic!("expected a message, got {other:?}"),
        }
    }

    /// Asserts that no message arrives within `quiet` (the stream may end).
    pub async fn assert_silent(&mut self, quiet: Duration, what: &str) {
        if let Next::Message(m) = self.next_within(quiet).await {
            panic!("{what}: expected nothing, got {m}");
        }
    }

    /// Messages until the answer to `id` (at most 30 s): the ones before it, and the answer.
    pub async fn until_answer(&mut self, id: &Value) -> (Vec<Value>, Value) {
        let mut before = Vec::new();
        loop {
            let message = self.next().await;
            let answers = message.get("method").is_none() && message.get("id") == Some(id);
            if answers {
                return (before, message);
            }
            before.push(message);
        }
    }

    /// Every remaining message until the stream ends (at most `timeout`).
    pub async fn rest(&mut self, timeout: Duration) -> Vec<Value> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut out = Vec::new();
        loop {
            let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.next_within(remaining).await {
                Next::Message(m) => out.push(m),
                Next::End => return out,
                Next::Timeout => panic!("the stream did not end in time; got {out:?}"),
            }
        }
    }
}
