//! `--http ADDR`: the same server over HTTP, in both MCP HTTP transports at once, with HTTP faults
//! to inject: Streamable HTTP at `/mcp` (`streamable.rs`) and the legacy HTTP+SSE transport of
//! 2024-11-05 at `/sse` + `/messages` (`legacy.rs`).
//!
//! Each MCP session (an `initialize` POSTed to `/mcp`, or a GET of `/sse`) gets a server of its
//! own, as a process of its own would on stdio: its log level, subscriptions, added tools and
//! tasks are that session's. Every message the client sends goes through
//! [`Server::handle_line`], as a stdin line would; what the server sends later is routed by
//! [`route`]. A session this process never assigned is 404, so a restarted server looks like an
//! expired session. `crash` exits the process mid-call, as on stdio. `GET /sessions` (not MCP)
//! answers the ids of the open sessions, oldest first, for tests to count instances by;
//! `GET /authorizations` every distinct `Authorization` header `/mcp` received, and
//! `GET /traceparents` every `traceparent` header (for tests that check what a gateway forwards).
//!
//! The faults (`--http-fault`, repeatable), each for `tools/call` only unless said (and, with
//! `--http-fault-tool NAME`, only for calls of that tool, so the others show the upstream is back):
//! - `status500`: answered HTTP 500;
//! - `endless500`: answered HTTP 500 with a body that never ends (made as the client reads it);
//! - `garbage-sse`: answered with an event whose data is not JSON;
//! - `huge-event=BYTES`: answered with one event of BYTES of data, streamed in chunks (the server
//!   never holds it whole);
//! - `hang`: never answered (a Streamable HTTP POST stays open);
//! - `reset`: the POST's connection is dropped without an answer (the handler panics, so the
//!   server drops that one connection, as a reset or a crashed worker behind a proxy would);
//! - `down-while=PATH`: every request answered HTTP 503 while PATH exists (a 5xx storm);
//! - `garbage-json`: answered HTTP 200 `application/json` whose body is not JSON-RPC (legacy
//!   HTTP+SSE: that text as an event on the session's stream);
//! - `forget-sessions`: once, the first such call makes the server forget every session (as a
//!   restarted server does) and is answered 404; later calls are answered as usual. With
//!   `--http-reinitialize-delay MS`, every `initialize` after the first is answered MS later
//!   (so a client's new session takes a while to open).

mod legacy;
mod oauth;
mod streamable;

use std::collections::HashMap;
use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::StreamExt;
use serde_json::Value;
use tokio::sync::mpsc as tmpsc;

use crate::Args;
use crate::server::Server;
use crate::wire::Out;

/// Size of the chunks a huge event is streamed in.
const CHUNK: usize = 64 * 1024;

/// One injected HTTP fault (`--http-fault`).
#[derive(Debug, Clone)]
pub(crate) enum HttpFault {
    Status500,
    Endless500,
    GarbageSse,
    HugeEvent(usize),
    Hang,
    Reset,
    DownWhile(PathBuf),
    GarbageJson,
    ForgetSessions,
}

impl std::str::FromStr for HttpFault {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.split_once('=') {
            None if s == "status500" => Ok(Self::Status500),
            None if s == "endless500" => Ok(Self::Endless500),
            None if s == "garbage-sse" => Ok(Self::GarbageSse),
            None if s == "hang" => Ok(Self::Hang),
            None if s == "reset" => Ok(Self::Reset),
            None if s == "garbage-json" => Ok(Self::GarbageJson),
            None if s == "forget-sessions" => Ok(Self::ForgetSessions),
            Some(("huge-event", n)) => n
                .parse()
                .map(Self::HugeEvent)
                .map_err(|e| format!("huge-event=BYTES: {e}")),
            Some(("down-while", path)) => Ok(Self::DownWhile(path.into())),
            _ => Err(format!(
                "unknown fault `{s}` (status500, endless500, garbage-sse, garbage-json, huge-event=BYTES, hang, reset, down-while=PATH, forget-sessions)"
            )),
        }
    }
}

/// The transport a session speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Streamable,
    Legacy,
}

/// Requests whose answer's event stream is open: their id (as JSON text), the progress token
/// they carry (so their progress goes on their own stream), and the stream.
type Waiting = Vec<(String, Option<String>, tmpsc::UnboundedSender<String>)>;

/// One MCP session: its own server, and the streams its later messages can go on.
struct Session {
    kind: Kind,
    server: Server,
    /// Streamable HTTP: the POSTs whose answer is still to come.
    waiting: Mutex<Waiting>,
    /// The session's own stream (Streamable HTTP: the GET stream, if open; legacy: the SSE
    /// stream), as SSE events.
    standalone: Mutex<Option<tmpsc::UnboundedSender<Bytes>>>,
}

struct App {
    args: Args,
    /// `--record`: every message received, one per line.
    record: Mutex<Option<std::fs::File>>,
    faults: Vec<HttpFault>,
    /// The one tool the `tools/call` faults apply to (`None`: every tool).
    fault_tool: Option<String>,
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    next_session: AtomicU64,
    /// `--oauth-token-ttl`: `/mcp` wants an access token from this authorization server.
    oauth: Option<Arc<oauth::Authority>>,
    /// Every distinct `Authorization` header `/mcp` received.
    authorizations: Mutex<std::collections::BTreeSet<String>>,
    /// Every `traceparent` header `/mcp` received, in order.
    traceparents: Mutex<Vec<String>>,
    /// `forget-sessions` has been met (it applies once).
    forgot: std::sync::atomic::AtomicBool,
}

/// Serves `args` (its `--http` address, faults and record file) until the process exits.
pub(crate) async fn serve(args: Args, record: Option<std::fs::File>) {
    let addr = args.http.clone().unwrap_or_default();
    let authority = args
        .oauth_token_ttl
        .map(|ttl| Arc::new(oauth::Authority::new(ttl, &args)));
    let app = Arc::new(App {
        oauth: authority.clone(),
        faults: args.http_fault.clone(),
        fault_tool: args.http_fault_tool.clone(),
        args,
        record: Mutex::new(record),
        sessions: Mutex::new(HashMap::new()),
        next_session: AtomicU64::new(1),
        authorizations: Mutex::default(),
        traceparents: Mutex::default(),
        forgot: std::sync::atomic::AtomicBool::new(false),
    });
    let router = Router::new()
        .route(
            "/mcp",
            post(streamable::on_post)
                .get(streamable::on_get)
                .delete(streamable::on_delete),
        )
        .route("/sse", get(legacy::on_get))
        .route("/messages", post(legacy::on_post))
        .route("/sessions", get(on_sessions))
        .route("/authorizations", get(on_authorizations))
        .route("/traceparents", get(on_traceparents))
        .with_state(app);
    let router = match authority {
        None => router,
        Some(authority) => router.merge(
            Router::new()
                .route(
                    "/.well-known/oauth-protected-resource/mcp",
                    get(oauth::resource_metadata),
                )
                .route(
                    "/.well-known/oauth-authorization-server",
                    get(oauth::server_metadata),
                )
                .route("/register", post(oauth::register))
                .route("/authorize", get(oauth::authorize))
                .route("/token", post(oauth::token))
                .route("/oauth-stats", get(oauth::stats))
                .with_state(authority),
        ),
    };
    let listener = match tokio::net::TcpListener::bind(&addr).await {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("test upstream: cannot listen on {addr}: {e}");
            std::process::exit(2);
        }
    };
    let local = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    {
        use std::io::Write;
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, "listening on http://{local}/mcp").and_then(|()| stdout.flush());
    }
    if let Err(e) = axum::serve(listener, router).await {
        eprintln!("test upstream: serving failed: {e}");
        std::process::exit(1);
    }
}

async fn on_sessions(State(app): State<Arc<App>>) -> Response {
    let mut ids: Vec<(u64, String)> = (app.sessions.lock().map(|s| s.keys().cloned().collect()))
        .unwrap_or_else(|_| Vec::new())
        .into_iter()
        .map(|id: String| {
            (
                id.rsplit('-')
                    .next()
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0),
                id,
            )
        })
        .collect();
    ids.sort();
    let ids: Vec<String> = ids.into_iter().map(|(_, id)| id).collect();
    axum::Json(ids).into_response()
}

async fn on_authorizations(State(app): State<Arc<App>>) -> Response {
    let seen: Vec<String> = (app
        .authorizations
        .lock()
        .map(|s| s.iter().cloned().collect()))
    .unwrap_or_default();
    axum::Json(seen).into_response()
}

async fn on_traceparents(State(app): State<Arc<App>>) -> Response {
    let seen = app
        .traceparents
        .lock()
        .map(|s| s.clone())
        .unwrap_or_default();
    axum::Json(seen).into_response()
}

thread_local! {
    /// The `Authorization` header of the POST whose message this thread is handling.
    static AUTHORIZATION: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// The `Authorization` header of the request that carried the message being handled (what the
/// `whoami` tool answers with); `None` over stdio.
pub(crate) fn authorization_of_this_request() -> Option<String> {
    AUTHORIZATION.with(|a| a.borrow().clone())
}

/// Runs `handle` (which handles one message synchronously) with `headers`' `Authorization`
/// readable by [`authorization_of_this_request`].
fn with_authorization<T>(headers: &axum::http::HeaderMap, handle: impl FnOnce() -> T) -> T {
    let value =
        (headers.get(header::AUTHORIZATION)).and_then(|v| v.to_str().ok().map(str::to_owned));
    AUTHORIZATION.with(|a| *a.borrow_mut() = value);
    let out = handle();
    AUTHORIZATION.with(|a| *a.borrow_mut() = None);
    out
}

impl App {
    /// The 401 for a `/mcp` request without a live access token (with `--oauth-token-ttl`);
    /// notes the request's `Authorization` header first.
    fn refuses(&self, headers: &axum::http::HeaderMap) -> Option<Response> {
        if let Some(value) = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
        {
            if let Ok(mut seen) = self.authorizations.lock() {
                seen.insert(value.to_owned());
            }
        }
        if let Some(value) = headers.get("traceparent").and_then(|v| v.to_str().ok()) {
            if let Ok(mut seen) = self.traceparents.lock() {
                seen.push(value.to_owned());
            }
        }
        let authority = self.oauth.as_ref()?;
        (!authority.admits(headers)).then(|| authority.challenge(&oauth::origin(headers)))
    }

    /// A new session of `kind` with a server of its own; its id.
    fn open_session(&self, kind: Kind) -> (String, Arc<Session>) {
        let id = format!(
            "s{}-{}",
            std::process::id(),
            self.next_session.fetch_add(1, Ordering::Relaxed)
        );
        let (tx, mut rx) = tmpsc::unbounded_channel();
        let session = Arc::new(Session {
            kind,
            server: Server::new(&self.args, tx),
            waiting: Mutex::default(),
            standalone: Mutex::default(),
        });
        let routed = Arc::downgrade(&session);
        std::thread::spawn(move || route(&mut rx, &routed));
        if let Ok(mut sessions) = self.sessions.lock() {
            sessions.insert(id.clone(), Arc::clone(&session));
        }
        (id, session)
    }

    fn session(&self, id: &str) -> Option<Arc<Session>> {
        self.sessions.lock().ok()?.get(id).cloned()
    }

    /// Forgets every session, as a restarted server would; false when `forget-sessions` was
    /// met already (it applies once).
    fn forget_sessions(&self) -> bool {
        if self.forgot.swap(true, Ordering::SeqCst) {
            return false;
        }
        if let Ok(mut sessions) = self.sessions.lock() {
            sessions.clear();
        }
        true
    }

    /// How long to wait before answering an `initialize` (`--http-reinitialize-delay`, for
    /// every one after the first).
    fn initialize_delay(&self) -> Option<std::time::Duration> {
        let ms = self.args.http_reinitialize_delay?;
        (self.next_session.load(Ordering::Relaxed) > 1)
            .then(|| std::time::Duration::from_millis(ms))
    }

    fn close_session(&self, id: &str) -> bool {
        self.sessions
            .lock()
            .is_ok_and(|mut s| s.remove(id).is_some())
    }

    fn record(&self, body: &[u8]) {
        if let Ok(mut record) = self.record.lock() {
            if let Some(file) = record.as_mut() {
                use std::io::Write;
                let mut entry = body.to_vec();
                entry.push(b'\n');
                let _ = file.write_all(&entry);
            }
        }
    }

    fn down(&self) -> bool {
        self.faults
            .iter()
            .any(|f| matches!(f, HttpFault::DownWhile(path) if path.exists()))
    }

    /// The fault a `tools/call` of `message` meets, if any (`down-while` is not one: it applies
    /// to every request, see [`App::down`]).
    fn call_fault(&self, message: &Value) -> Option<&HttpFault> {
        if message.get("method").and_then(Value::as_str) != Some("tools/call") {
            return None;
        }
        let tool = message.pointer("/params/name").and_then(Value::as_str);
        if self.fault_tool.is_some() && self.fault_tool.as_deref() != tool {
            return None;
        }
        self.faults
            .iter()
            .find(|f| !matches!(f, HttpFault::DownWhile(_)))
    }
}

/// Hands each later message of a session's server to the stream it belongs to, until the
/// session is gone. Legacy: its one stream. Streamable HTTP: an answer to the POST of its
/// request; a progress notification to the POST that carried its token; a request of the
/// server's, and a notification a call caused (its log messages), to the POST of that call (or,
/// not known, and a request's cancellation, to the oldest waiting POST), else the GET stream;
/// any other notification to the GET stream, else the oldest waiting POST. A
/// message with nowhere to go is dropped, as the transport allows.
fn route(rx: &mut tmpsc::UnboundedReceiver<Out>, session: &Weak<Session>) {
    while let Some(out) = rx.blocking_recv() {
        let line = match out {
            Out::Line(line) => (line, None),
            Out::Caused { line, call } => (line, Some(call)),
            Out::Exit(code) => std::process::exit(code),
        };
        let (line, caused_by) = line;
        let Some(session) = session.upgrade() else {
            return;
        };
        let standalone = || {
            let guard = session.standalone.lock().ok()?;
            guard.as_ref().map(|tx| tx.send(event(&line)).is_ok())
        };
        if session.kind == Kind::Legacy {
            standalone();
            continue;
        }
        let parsed: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
        let method = parsed.get("method").and_then(Value::as_str);
        // Requests, and the cancellation of one, belong to the call that caused them.
        let is_request = (method.is_some() && parsed.get("id").is_some())
            || method == Some("notifications/cancelled");
        let answer_to = (parsed.get("method").is_none())
            .then(|| parsed.get("id").map(Value::to_string))
            .flatten();
        let token = parsed
            .pointer("/params/progressToken")
            .map(Value::to_string);
        let on_post = || {
            let waiting = session.waiting.lock().ok()?;
            let target = match (&answer_to, &token, &caused_by) {
                (Some(id), _, _) | (None, None, Some(id)) => {
                    waiting.iter().find(|(w, _, _)| w == id)
                }
                (None, Some(token), _) => {
                    waiting.iter().find(|(_, t, _)| t.as_ref() == Some(token))
                }
                (None, None, None) => waiting.first(),
            };
            target.map(|(_, _, tx)| tx.send(line.clone()).is_ok())
        };
        if answer_to.is_some() {
            on_post();
        } else if token.is_some() || is_request || caused_by.is_some() {
            let _ = on_post().or_else(standalone);
        } else {
            let _ = standalone().or_else(on_post);
        }
    }
}

/// `line` as one SSE `message` event.
fn event(line: &str) -> Bytes {
    Bytes::from(format!("event: message\ndata: {line}\n\n"))
}

/// The events a fault sends instead of a call's answer, as SSE (`garbage-sse`, `huge-event`).
fn fault_events(fault: &HttpFault) -> Option<Body> {
    match fault {
        HttpFault::GarbageSse => Some(Body::from(
            "event: message\ndata: this is not JSON, just garbage\n\n",
        )),
        HttpFault::HugeEvent(bytes) => Some(Body::from_stream(
            huge_event(*bytes).map(Ok::<_, Infallible>),
        )),
        _ => None,
    }
}

/// One event of `bytes` bytes of data, in chunks made as the client reads them.
fn huge_event(bytes: usize) -> impl futures_util::Stream<Item = Bytes> + Send {
    let chunks = bytes.div_ceil(CHUNK);
    let filler = Bytes::from(vec![b'x'; CHUNK]);
    let head = futures_util::stream::once(async { Bytes::from_static(b"event: message\ndata: ") });
    let data = futures_util::stream::iter((0..chunks).map(move |i| {
        let len = if i + 1 == chunks {
            bytes - i * CHUNK
        } else {
            CHUNK
        };
        filler.slice(..len)
    }));
    let tail = futures_util::stream::once(async { Bytes::from_static(b"\n\n") });
    head.chain(data).chain(tail)
}

/// HTTP 500 whose body never ends (`endless500`): chunks made as the client reads them.
fn endless_500() -> Response {
    let filler = Bytes::from(vec![b'e'; CHUNK]);
    let body = futures_util::stream::repeat(filler).map(Ok::<_, Infallible>);
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        [(header::CONTENT_TYPE, "text/plain")],
        Body::from_stream(body),
    )
        .into_response()
}

/// Drops the connection of the request being handled, without an answer: hyper serves each
/// connection in a task of its own, and a handler that panics ends that task and its socket.
fn reset() -> ! {
    std::panic::resume_unwind(Box::new("reset (injected fault)"))
}

fn event_stream(body: Body) -> Response {
    ([(header::CONTENT_TYPE, "text/event-stream")], body).into_response()
}

fn plain(status: StatusCode, text: &'static str) -> Response {
    (status, [(header::CONTENT_TYPE, "text/plain")], text).into_response()
}
