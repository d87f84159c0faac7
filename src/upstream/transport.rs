//! The seam between a connection and what carries its messages. A transport takes whole
//! messages with what the connection knows of them ([`Outgoing`]: the id, the method, the trace
//! context — so no transport parses what it is given) and yields each message it receives parsed
//! once, where it was read ([`Received`]); it says why it ended ([`Closed`]), and
//! reports what it can tell about its upstream besides messages ([`Diagnostics`]: a child's
//! stderr lines, later an HTTP status). Routing, catalogs and supervision never know whether a
//! pipe, a POST or an event stream carries a message.
//!
//! - `stdio`: a child process (cleared environment, own process group, stderr captured, the
//!   whole group killed when the link is closed).
//! - `remote`: Streamable HTTP and the legacy HTTP+SSE transport (`auto` picks one).

mod remote;
mod stdio;

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::Duration;

use futures_util::Stream;
use futures_util::future::BoxFuture;
use tokio::sync::mpsc;

use super::error::{Closed, StartError};
use crate::config::{RemoteKind, Transport, UpstreamConfig};
use crate::jsonrpc::Received;
use crate::sync::lock;
use crate::telemetry::otel::TraceParent;

/// How much longer a remote request's POST may take than the request itself (the connection's
/// deadline answers the caller first; this only ends the POST that served it).
const REQUEST_MARGIN: Duration = Duration::from_secs(5);
/// Lines of diagnostics kept to explain why an upstream failed.
const DIAGNOSTIC_LINES: usize = 8;

/// Messages from the upstream, until the stream ends with why.
pub(super) type Incoming = Pin<Box<dyn Stream<Item = Result<Inbound, Closed>> + Send>>;

/// What a transport yields besides why it ended: one message from the upstream, parsed once
/// where it was read, or word that what the upstream held for mcpmux's HTTP session is gone.
#[derive(Debug)]
pub(super) enum Inbound {
    /// A message, with where it came: on the answer stream of one request of ours (a Streamable
    /// HTTP POST's), or on a stream shared by everything (a pipe, the GET stream, the legacy
    /// stream). A server request that came on a request's own stream belongs to that request's
    /// host.
    Message {
        message: Received,
        /// Our id of the request whose answer stream carried it.
        on_stream_of: Option<u64>,
    },
    /// The server forgot the HTTP session and the transport opened a new one in its place (the
    /// link goes on): what the old session held — subscriptions, the log level, perhaps the
    /// catalog — must be given again.
    Renewed,
}

impl From<Received> for Inbound {
    /// A message from a stream shared by everything.
    fn from(message: Received) -> Self {
        Self::Message {
            message,
            on_stream_of: None,
        }
    }
}

/// One message for the upstream, with what its connection knows of it.
#[derive(Debug, Clone)]
pub(super) struct Outgoing {
    /// The message, one JSON text.
    pub bytes: String,
    /// Our id, when it is a request (its answer is awaited).
    pub id: Option<u64>,
    /// Its method (`None` for an answer to a request of the upstream's).
    pub method: Option<Box<str>>,
    /// The W3C trace context of a host's request (also in its `params._meta`), for transports
    /// that send it as headers too.
    pub trace: Option<TraceParent>,
    /// What a 2026-07-28 request or a cancellation carries besides (`None` for most messages:
    /// boxed, so the common message stays small).
    pub modern: Option<Box<Modern>>,
}

/// What a message to a 2026-07-28 upstream carries besides its text.
#[derive(Debug, Clone, Default)]
pub(super) struct Modern {
    /// What the `Mcp-Name` header mirrors (`params.name` or `params.uri`).
    pub name: Option<Box<str>>,
    /// The `Mcp-Param-*` headers of a call (name, encoded value).
    pub params: Vec<(String, String)>,
    /// Our id of the request a `notifications/cancelled` cancels (over Streamable HTTP the
    /// request's stream is closed instead).
    pub cancels: Option<u64>,
}

impl Outgoing {
    /// A request of ours.
    pub fn request(id: u64, method: &str, bytes: String, trace: Option<TraceParent>) -> Self {
        Self {
            bytes,
            id: Some(id),
            method: Some(method.into()),
            trace,
            modern: None,
        }
    }

    /// A notification.
    pub fn notification(method: &str, bytes: String) -> Self {
        Self {
            bytes,
            id: None,
            method: Some(method.into()),
            trace: None,
            modern: None,
        }
    }

    /// An answer to a request the upstream sent.
    pub fn answer(bytes: String) -> Self {
        Self {
            bytes,
            id: None,
            method: None,
            trace: None,
            modern: None,
        }
    }

    /// Whether it is a request with `method`.
    pub fn is_request(&self, method: &str) -> bool {
        self.id.is_some() && self.method.as_deref() == Some(method)
    }

    /// Whether its method is `method`.
    pub fn is(&self, method: &str) -> bool {
        self.method.as_deref() == Some(method)
    }
}

/// A received text as a message; blank text is none (keep-alive lines), text that is not
/// JSON-RPC says why the upstream's stream can no longer be trusted.
pub(super) fn receive(text: &str) -> Option<Result<Received, Closed>> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    Some(Received::parse(text).map_err(|e| Closed::not_json_rpc(text, &e)))
}

/// One open transport to an upstream.
pub(super) struct Link {
    /// Messages for the upstream; a full queue makes senders wait (backpressure).
    pub outgoing: mpsc::Sender<Outgoing>,
    /// Messages from the upstream. Polled by the connection's reader task itself, so a message
    /// crosses no extra task on its way in.
    pub incoming: Incoming,
    /// The process behind the link, when there is one (for status).
    pub pid: Option<u32>,
    /// What the link reaches, for the log line that says it started.
    pub describe: String,
    /// Ends the link and what is behind it; dropping it does so at once.
    pub teardown: Box<dyn Teardown>,
}

/// Ends a link: a child's process group (SIGTERM, then SIGKILL after `grace`), later an HTTP session.
pub(super) trait Teardown: Send {
    fn close(self: Box<Self>, grace: Duration) -> BoxFuture<'static, ()>;
}

/// An HTTP client with a remote upstream's TLS, proxy and redirect settings and no credential
/// (signing in uses it).
pub(super) fn http_client(
    config: &crate::config::RemoteConfig,
) -> Result<reqwest::Client, StartError> {
    remote::http_client(config)
}

/// Opens the transport `config` names.
pub(super) async fn open(
    config: &UpstreamConfig,
    diagnostics: std::sync::Arc<Diagnostics>,
) -> Result<Link, StartError> {
    let max = config.policy.max_message_bytes;
    match &config.transport {
        Transport::Stdio(stdio) => stdio::open(stdio, max, diagnostics),
        Transport::Remote(remote) => {
            let limits = remote::Limits {
                max_message_bytes: max,
                notification: config.policy.request_timeout,
                request: config.policy.longest_timeout() + REQUEST_MARGIN,
                open: config.policy.startup_timeout,
                breaker_failures: config.policy.breaker_failures,
                breaker_window: config.policy.breaker_window,
            };
            remote::open(remote, &config.name, limits, diagnostics).await
        }
    }
}

/// What a transport observed about its upstream besides messages: the last lines it wrote to
/// stderr (or, for remote transports, the last HTTP errors), kept to explain a failure.
#[derive(Debug)]
pub struct Diagnostics {
    upstream: String,
    tail: Mutex<VecDeque<String>>,
    /// The last HTTP failure of a remote upstream.
    last_http_error: Mutex<Option<String>>,
    /// The HTTP transport a remote upstream was found to speak (`auto` asks that one first next time).
    transport: Mutex<Option<RemoteKind>>,
    /// A remote upstream's HTTP session, as status shows it (never its id: that is a credential).
    http_session: Mutex<Option<String>>,
    /// The `WWW-Authenticate` challenge of the server's last 401/403 (sign-in starts from it).
    challenge: Mutex<Option<String>>,
}

impl Diagnostics {
    pub(super) fn new(upstream: &str) -> Self {
        Self {
            upstream: upstream.to_owned(),
            tail: Mutex::new(VecDeque::new()),
            last_http_error: Mutex::new(None),
            transport: Mutex::new(None),
            http_session: Mutex::new(None),
            challenge: Mutex::new(None),
        }
    }

    /// Keeps the challenge of a 401/403.
    pub(super) fn set_challenge(&self, challenge: Option<String>) {
        *lock(&self.challenge) = challenge;
    }

    /// The `WWW-Authenticate` value the server last refused mcpmux with, if any.
    pub fn challenge(&self) -> Option<String> {
        lock(&self.challenge).clone()
    }

    /// Logs one line the upstream wrote (at info: servers write their own diagnostics there) and
    /// keeps it among the last few.
    pub(super) fn note(&self, line: String) {
        tracing::info!(target: "mcpmux::upstream::stderr", upstream = %self.upstream, "{line}");
        let mut tail = self.lock();
        if tail.len() == DIAGNOSTIC_LINES {
            tail.pop_front();
        }
        tail.push_back(line);
    }

    /// Logs and keeps an HTTP failure of a remote upstream (never a header: no credential).
    pub(super) fn note_http(&self, line: String) {
        tracing::warn!(upstream = %self.upstream, "{line}");
        *lock(&self.last_http_error) = Some(line);
    }

    /// The last HTTP failure, if any.
    pub fn last_http_error(&self) -> Option<String> {
        lock(&self.last_http_error).clone()
    }

    /// Remembers the HTTP transport that worked.
    pub(super) fn remember(&self, kind: RemoteKind) {
        *lock(&self.transport) = Some(kind);
    }

    /// The HTTP transport that worked last, if one did.
    pub fn remembered(&self) -> Option<RemoteKind> {
        *lock(&self.transport)
    }

    /// Records the state of a remote upstream's HTTP session.
    pub(super) fn set_http_session(&self, state: Option<String>) {
        *lock(&self.http_session) = state;
    }

    /// A remote upstream's HTTP session state (`None` for a child process).
    pub fn http_session(&self) -> Option<String> {
        lock(&self.http_session).clone()
    }

    /// The newest kept line.
    pub fn last(&self) -> Option<String> {
        self.lock().back().cloned()
    }

    pub(super) fn clear(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<String>> {
        lock(&self.tail)
    }
}
