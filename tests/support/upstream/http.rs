//! `--http ADDR`: the same server over MCP Streamable HTTP at `/mcp`, with HTTP faults to inject.
//!
//! Every POSTed message goes through [`Server::handle_line`], as a stdin line would. A request
//! answered at once gets an `application/json` answer; one answered later (`slow`, `progress`,
//! the tools that ask the client) gets a `text/event-stream` that carries what the server sends
//! meanwhile (notifications, its own requests) and ends with the answer. Notifications and
//! responses get 202. `initialize` assigns an `Mcp-Session-Id`; a later POST without one is 400,
//! with one this process never assigned 404 (so a restarted server looks like an expired
//! session). GET is 405 (no standalone stream), DELETE ends the session. `crash` exits the
//! process mid-call, as on stdio.
//!
//! The faults (`--http-fault`, repeatable), each for `tools/call` only unless said (and, with
//! `--http-fault-tool NAME`, only for calls of that tool, so the others show the upstream is back):
//! - `status500`: answered HTTP 500;
//! - `garbage-sse`: answered with an event stream whose event data is not JSON;
//! - `huge-event=BYTES`: answered with an event stream whose one event has BYTES of data,
//!   streamed in chunks (the server never holds it whole);
//! - `hang`: never answered (the POST stays open);
//! - `down-while=PATH`: every POST answered HTTP 503 while PATH exists (a 5xx storm).

use std::collections::HashSet;
use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::Value;
use tokio::sync::mpsc as tmpsc;

use crate::server::Server;
use crate::wire::{Out, Outcome};

const SESSION_HEADER: &str = "mcp-session-id";
/// Size of the chunks a huge event is streamed in.
const CHUNK: usize = 64 * 1024;

/// One injected HTTP fault (`--http-fault`).
#[derive(Debug, Clone)]
pub(crate) enum HttpFault {
    Status500,
    GarbageSse,
    HugeEvent(usize),
    Hang,
    DownWhile(PathBuf),
}

impl std::str::FromStr for HttpFault {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.split_once('=') {
            None if s == "status500" => Ok(Self::Status500),
            None if s == "garbage-sse" => Ok(Self::GarbageSse),
            None if s == "hang" => Ok(Self::Hang),
            Some(("huge-event", n)) => n
                .parse()
                .map(Self::HugeEvent)
                .map_err(|e| format!("huge-event=BYTES: {e}")),
            Some(("down-while", path)) => Ok(Self::DownWhile(path.into())),
            _ => Err(format!(
                "unknown fault `{s}` (status500, garbage-sse, huge-event=BYTES, hang, down-while=PATH)"
            )),
        }
    }
}

/// Where the server's later messages go: the open event streams of POSTs still waiting for
/// their answer, by request id (compact JSON), oldest first.
/// Requests whose answer's event stream is open: their id (as JSON text), the progress token
/// they carry (so their progress goes on their own stream), and the stream.
type Waiting = Arc<Mutex<Vec<(String, Option<String>, tmpsc::UnboundedSender<String>)>>>;

struct App {
    server: Server,
    /// `--record`: every POSTed message, one per line.
    record: Mutex<Option<std::fs::File>>,
    faults: Vec<HttpFault>,
    /// The one tool the `tools/call` faults apply to (`None`: every tool).
    fault_tool: Option<String>,
    sessions: Mutex<HashSet<String>>,
    next_session: AtomicU64,
    waiting: Waiting,
}

/// Serves `server` (whose later messages arrive on `rx`) at `addr` until the process exits.
pub(crate) async fn serve(
    addr: &str,
    server: Server,
    rx: mpsc::Receiver<Out>,
    faults: Vec<HttpFault>,
    fault_tool: Option<String>,
    record: Option<std::fs::File>,
) {
    let waiting = Waiting::default();
    let routed = Arc::clone(&waiting);
    std::thread::spawn(move || route(&rx, &routed));
    let app = Arc::new(App {
        server,
        record: Mutex::new(record),
        faults,
        fault_tool,
        sessions: Mutex::new(HashSet::new()),
        next_session: AtomicU64::new(1),
        waiting,
    });
    let router = Router::new()
        .route("/mcp", post(on_post).get(on_get).delete(on_delete))
        .with_state(app);
    let listener = match tokio::net::TcpListener::bind(addr).await {
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

/// Hands each later message of the server to the stream it belongs to: an answer to the POST
/// of its request, a progress notification to the POST that carried its token, anything else to
/// the oldest waiting POST (dropped when none waits).
fn route(rx: &mpsc::Receiver<Out>, waiting: &Waiting) {
    while let Ok(out) = rx.recv() {
        let line = match out {
            Out::Line(line) => line,
            Out::Exit(code) => std::process::exit(code),
        };
        let parsed: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
        let answer_to = (parsed.get("method").is_none())
            .then(|| parsed.get("id").map(Value::to_string))
            .flatten();
        let Ok(waiting) = waiting.lock() else { return };
        let token = parsed
            .pointer("/params/progressToken")
            .map(Value::to_string);
        let target = match (answer_to, token) {
            (Some(id), _) => waiting.iter().find(|(w, _, _)| *w == id),
            (None, Some(token)) => waiting.iter().find(|(_, t, _)| t.as_ref() == Some(&token)),
            (None, None) => waiting.first(),
        };
        if let Some((_, _, tx)) = target {
            let _ = tx.send(line);
        }
    }
}

async fn on_post(State(app): State<Arc<App>>, headers: HeaderMap, body: Bytes) -> Response {
    if app.down() {
        return plain(StatusCode::SERVICE_UNAVAILABLE, "down (injected fault)");
    }
    let Ok(message) = serde_json::from_slice::<Value>(&body) else {
        return plain(
            StatusCode::BAD_REQUEST,
            "the body is not one JSON-RPC message",
        );
    };
    if let Ok(mut record) = app.record.lock() {
        if let Some(file) = record.as_mut() {
            use std::io::Write;
            let mut entry = body.to_vec();
            entry.push(b'\n');
            let _ = file.write_all(&entry);
        }
    }
    let method = message.get("method").and_then(Value::as_str);
    let mut session = None;
    if method == Some("initialize") {
        let id = format!(
            "s{}-{}",
            std::process::id(),
            app.next_session.fetch_add(1, Ordering::Relaxed)
        );
        if let Ok(mut sessions) = app.sessions.lock() {
            sessions.insert(id.clone());
        }
        session = Some(id);
    } else {
        let given = headers.get(SESSION_HEADER).and_then(|v| v.to_str().ok());
        match given {
            None => return plain(StatusCode::BAD_REQUEST, "no Mcp-Session-Id header"),
            Some(id) if !app.known(id) => return plain(StatusCode::NOT_FOUND, "unknown session"),
            Some(_) => {}
        }
    }
    let id = message.get("id").filter(|_| method.is_some()).cloned();
    let Some(id) = id else {
        // A notification or the client's answer to one of our requests.
        let _ = app.server.handle_line(&body);
        return StatusCode::ACCEPTED.into_response();
    };
    let tool = message
        .get("params")
        .and_then(|p| p.get("name"))
        .and_then(Value::as_str);
    let faulty = app.fault_tool.is_none() || app.fault_tool.as_deref() == tool;
    if method == Some("tools/call") && faulty {
        if let Some(response) = app.fault_answer().await {
            return response;
        }
    }
    let key = id.to_string();
    let (tx, rx) = tmpsc::unbounded_channel();
    if let Ok(mut waiting) = app.waiting.lock() {
        let token = message
            .pointer("/params/_meta/progressToken")
            .map(Value::to_string);
        waiting.push((key.clone(), token, tx));
    }
    let guard = Unregister {
        waiting: Arc::clone(&app.waiting),
        key: key.clone(),
    };
    let mut response = match app.server.handle_line(&body) {
        Outcome::Reply(text) => {
            drop(guard);
            json(text)
        }
        Outcome::Silent => stream(rx, id, guard),
        Outcome::Exit(code) => {
            eprintln!("test upstream exiting mid-call with status {code}");
            std::process::exit(code);
        }
    };
    if let Some(session) = session.and_then(|s| s.parse().ok()) {
        response.headers_mut().insert(SESSION_HEADER, session);
    }
    response
}

async fn on_get() -> Response {
    plain(StatusCode::METHOD_NOT_ALLOWED, "no standalone stream")
}

async fn on_delete(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    let id = headers.get(SESSION_HEADER).and_then(|v| v.to_str().ok());
    let removed = id.is_some_and(|id| app.sessions.lock().is_ok_and(|mut s| s.remove(id)));
    if removed {
        StatusCode::OK.into_response()
    } else {
        plain(StatusCode::NOT_FOUND, "unknown session")
    }
}

impl App {
    fn known(&self, id: &str) -> bool {
        self.sessions.lock().is_ok_and(|s| s.contains(id))
    }

    fn down(&self) -> bool {
        self.faults
            .iter()
            .any(|f| matches!(f, HttpFault::DownWhile(path) if path.exists()))
    }

    /// The answer a `tools/call` gets instead of its result, when a fault says so.
    async fn fault_answer(&self) -> Option<Response> {
        for fault in &self.faults {
            match fault {
                HttpFault::Status500 => {
                    return Some(plain(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "internal error (injected fault)",
                    ));
                }
                HttpFault::GarbageSse => {
                    let body = "event: message\ndata: this is not JSON, just garbage\n\n";
                    return Some(event_stream(Body::from(body)));
                }
                HttpFault::HugeEvent(bytes) => return Some(huge_event(*bytes)),
                HttpFault::Hang => std::future::pending::<()>().await,
                HttpFault::DownWhile(_) => {}
            }
        }
        None
    }
}

/// Takes a POST's channel out of the waiting list when its stream ends (or is dropped).
struct Unregister {
    waiting: Waiting,
    key: String,
}

impl Drop for Unregister {
    fn drop(&mut self) {
        if let Ok(mut waiting) = self.waiting.lock() {
            waiting.retain(|(k, _, _)| *k != self.key);
        }
    }
}

/// The event stream of a POST answered later: each message the server routes to it, until the
/// answer to `id`.
fn stream(rx: tmpsc::UnboundedReceiver<String>, id: Value, guard: Unregister) -> Response {
    let events =
        futures_util::stream::unfold((rx, id, Some(guard)), |(mut rx, id, guard)| async move {
            guard.as_ref()?;
            let line = rx.recv().await?;
            let parsed: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
            let last = parsed.get("method").is_none() && parsed.get("id") == Some(&id);
            let event =
                Ok::<_, Infallible>(Bytes::from(format!("event: message\ndata: {line}\n\n")));
            Some((event, (rx, id, (!last).then_some(guard).flatten())))
        });
    event_stream(Body::from_stream(events))
}

/// One event of `bytes` bytes of data, streamed in chunks as the client reads it.
fn huge_event(bytes: usize) -> Response {
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
    use futures_util::StreamExt;
    let body = head.chain(data).chain(tail).map(Ok::<_, Infallible>);
    event_stream(Body::from_stream(body))
}

fn event_stream(body: Body) -> Response {
    ([(header::CONTENT_TYPE, "text/event-stream")], body).into_response()
}

fn json(text: String) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], text).into_response()
}

fn plain(status: StatusCode, text: &'static str) -> Response {
    (status, [(header::CONTENT_TYPE, "text/plain")], text).into_response()
}
