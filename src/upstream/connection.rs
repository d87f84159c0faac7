//! One live connection to an upstream, over any transport: the in-flight table (our id → waiting
//! caller and the host request it serves), the progress-token map, the table of requests the
//! upstream sent to hosts, and the reader task that polls the transport's incoming messages.
//! Callers never queue behind an actor: a request registers itself, hands its message to the
//! transport and waits for its own answer. What the upstream sends unasked is routed in
//! `inbound`; what the connection needs from the host side is declared in `caller`.
//!
//! Progress tokens are rewritten here on the way in (`inbound`), and by the host service on the
//! way out: one rewrite each way, each beside the table it needs.

mod caller;
mod inbound;
mod rounds;

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::value::RawValue;
use tokio::sync::{mpsc, oneshot};

pub use caller::{Caller, Canceller, HostEvents, ServerRequestReply};

use super::error::{Closed, Reply, UpstreamError};
use super::transport::{Incoming, Modern, Outgoing};
use crate::jsonrpc::notification_line;
use crate::mcp::names::Prefix;
use crate::mcp::{ListKind, cancelled_params};

/// Which upstream (and which instance of it) a connection belongs to, as the host side sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamId {
    pub name: String,
    /// The namespace its tools, prompts and URIs are exposed under.
    pub prefix: Prefix,
    /// The one host session a per-session instance serves (`None`: the shared instance).
    pub scope: Option<String>,
}

/// What a connection knows of its upstream beyond the transport.
pub(super) struct Context {
    pub id: Arc<UpstreamId>,
    /// Host requests that may be in flight at once (mcpmux's own always go through).
    pub max_in_flight: usize,
    /// Where session-bound upstream messages go (`None` in tools that have no hosts).
    pub events: Option<Arc<dyn HostEvents>>,
    /// The `roots/list` result configured for this upstream, if any (then hosts are never asked).
    pub roots: Option<Box<RawValue>>,
}

/// What the connection tells its actor.
#[derive(Debug)]
pub(super) enum Event {
    ListChanged(ListKind),
    /// The transport replaced an HTTP session the server forgot: what it held must be given again.
    Renewed,
    Closed(Closed),
}

/// The host side of a forwarded request, and the progress token it was given upstream.
#[derive(Clone)]
pub struct CallContext {
    pub caller: Arc<dyn Caller>,
    /// When the host asked for progress: our token (in the params sent) and the host's.
    pub progress: Option<ProgressTokens>,
    /// The trace context the params' `_meta` carries (remote transports send it as headers too).
    pub trace: Option<crate::telemetry::otel::TraceParent>,
}

/// A host's `progressToken` and the one that stands for it upstream (both raw JSON).
#[derive(Debug, Clone)]
pub struct ProgressTokens {
    pub ours: String,
    pub host: Box<RawValue>,
}

impl ProgressTokens {
    /// A token unique in this process for the host's `host` token.
    pub fn new(host: Box<RawValue>) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let ours = format!("\"mcpmux-p-{}\"", NEXT.fetch_add(1, Ordering::Relaxed));
        Self { ours, host }
    }
}

impl std::fmt::Debug for CallContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallContext")
            .field("session", &self.caller.session_id())
            .finish()
    }
}

type Waiter = oneshot::Sender<Result<Reply, UpstreamError>>;

struct Pending {
    waiter: Waiter,
    caller: Option<Arc<dyn Caller>>,
    progress: Option<ProgressTokens>,
}

/// A request the upstream sent that a host is answering.
struct Forwarded {
    caller: Arc<dyn Caller>,
    host_id: Box<RawValue>,
}

#[derive(Default)]
struct Tables {
    pending: HashMap<u64, Pending>,
    /// Upstream request id (raw JSON text) → where it went.
    forwarded: HashMap<String, Forwarded>,
    /// Our progress token (raw JSON text) → the request it belongs to.
    progress: HashMap<String, u64>,
    /// How many of `pending` are host requests (the in-flight limit counts only these).
    host_pending: usize,
    /// Why the connection ended, once it has.
    closed: Option<Closed>,
}

pub(super) struct Connection {
    ctx: Context,
    writer: mpsc::Sender<Outgoing>,
    tables: Mutex<Tables>,
    next_id: AtomicU64,
    /// Whether the upstream speaks 2026-07-28 (decided by the probe; every request then
    /// carries an envelope, and a call may take rounds).
    modern: AtomicBool,
    /// A 2026-07-28 upstream's tools with `x-mcp-header` parameters, by the upstream's name.
    param_headers: Mutex<HashMap<String, Vec<crate::mcp::param_headers::ParamHeader>>>,
}

impl Connection {
    /// Starts the reader task over the transport's `incoming` messages; `writer` takes outgoing
    /// ones. `events` is called from the reader task.
    pub(super) fn start(
        ctx: Context,
        writer: mpsc::Sender<Outgoing>,
        incoming: Incoming,
        events: impl Fn(Event) + Send + Sync + 'static,
    ) -> Arc<Self> {
        let conn = Arc::new(Self {
            ctx,
            writer,
            tables: Mutex::new(Tables::default()),
            next_id: AtomicU64::new(1),
            modern: AtomicBool::new(false),
            param_headers: Mutex::default(),
        });
        tokio::spawn(read_loop(Arc::clone(&conn), incoming, events));
        conn
    }

    fn upstream(&self) -> &str {
        &self.ctx.id.name
    }

    fn tables(&self) -> std::sync::MutexGuard<'_, Tables> {
        self.tables.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Speaks 2026-07-28 from now on (the probe found a server that does).
    pub(super) fn set_modern(&self) {
        self.modern.store(true, Ordering::Relaxed);
    }

    /// The tools whose calls carry `Mcp-Param-*` headers, as last listed.
    pub(super) fn set_param_headers(
        &self,
        tools: HashMap<String, Vec<crate::mcp::param_headers::ParamHeader>>,
    ) {
        *crate::sync::lock(&self.param_headers) = tools;
    }

    /// Whether it speaks 2026-07-28.
    pub(super) fn is_modern(&self) -> bool {
        self.modern.load(Ordering::Relaxed)
    }

    /// Sends one request and waits for its answer, at most `timeout`. With a `call` context,
    /// the host's progress token is replaced by ours and the host can cancel the request.
    /// A caller that stops waiting (its host went away) cancels the request upstream. To a
    /// 2026-07-28 upstream the request carries mcpmux's envelope and may take rounds (`rounds`).
    ///
    /// The handshake era's request is the future itself; a 2026-07-28 one, whose rounds make a
    /// larger future, is boxed, so the common future stays as small as it was.
    pub(super) fn request<'a>(
        self: &'a Arc<Self>,
        method: &'a str,
        params: Option<&'a str>,
        timeout: Duration,
        call: Option<CallContext>,
    ) -> impl Future<Output = Result<Reply, UpstreamError>> + Send + 'a {
        use futures_util::future::Either;
        if self.is_modern() {
            return Either::Left(Box::pin(self.rounds(method, params, timeout, call)));
        }
        Either::Right(self.exchange(method, params, None, timeout, call))
    }

    /// One request and its answer (see [`Self::request`]); `modern`, what a 2026-07-28 request's
    /// headers mirror.
    ///
    /// Not an `async fn`: one stores its arguments twice in its future (as given, and moved into
    /// its body's locals), and an `#[instrument]`ed one twice more (around the body it wraps);
    /// an `async` block holds them once, and every host request's future holds this one.
    // Long: one request's exchange as a single `async` block (see above): its parts share the
    // block's captured state, which is why it is not an `async fn` either.
    fn exchange<'a>(
        self: &'a Arc<Self>,
        method: &'a str,
        params: Option<&'a str>,
        modern: Option<Box<Modern>>,
        timeout: Duration,
        call: Option<CallContext>,
    ) -> impl Future<Output = Result<Reply, UpstreamError>> + Send + 'a {
        let span = tracing::debug_span!(
            "upstream_request",
            upstream = %self.upstream(),
            method,
            id = tracing::field::Empty
        );
        let exchange = async move {
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            tracing::Span::current().record("id", id);
            let (tx, rx) = oneshot::channel();
            let (caller, progress, trace) = match call {
                Some(c) => (Some(c.caller), c.progress, c.trace),
                None => (None, None, None),
            };
            {
                let mut tables = self.tables();
                if let Some(closed) = &tables.closed {
                    return Err(self.failed(closed.to_string()));
                }
                // The limit is on host requests; mcpmux's own (pings, re-reads) always go through.
                let limit = self.ctx.max_in_flight;
                if caller.is_some() && tables.host_pending >= limit {
                    return Err(UpstreamError::Busy {
                        upstream: self.upstream().to_owned(),
                        limit,
                    });
                }
                if let Some(tokens) = &progress {
                    tables.progress.insert(tokens.ours.clone(), id);
                }
                if caller.is_some() {
                    tables.host_pending += 1;
                }
                tables.pending.insert(
                    id,
                    Pending {
                        waiter: tx,
                        caller: caller.clone(),
                        progress,
                    },
                );
            }
            let mut guard = PendingGuard {
                conn: self,
                id: Some(id),
            };
            if let Some(caller) = &caller {
                caller.started(Canceller {
                    conn: Arc::downgrade(self),
                    id,
                });
            }
            let outcome = tokio::time::timeout(timeout, async {
                // Built where it is queued, and gone before anything is awaited: the future does
                // not hold it.
                let queued = {
                    let line = crate::jsonrpc::request_line(id, method, params);
                    let mut message = Outgoing::request(id, method, line, trace);
                    message.modern = modern;
                    self.queue(message)?
                };
                if let Some(wait) = queued {
                    wait.await?;
                }
                rx.await.map_err(|_| ())
            })
            .await;
            guard.id = None;
            match outcome {
                Ok(Ok(answer)) => answer,
                Ok(Err(())) => {
                    self.tables().remove(id);
                    let reason = self.tables().closed.as_ref().map(Closed::to_string);
                    Err(self.failed(reason.unwrap_or_else(|| "connection closed".to_owned())))
                }
                Err(_) => {
                    self.abandon(id, r#""mcpmux: request timed out""#);
                    Err(UpstreamError::Timeout {
                        upstream: self.upstream().to_owned(),
                        timeout,
                    })
                }
            }
        };
        tracing::Instrument::instrument(exchange, span)
    }

    /// Queues `message` for the writer: at once while the queue has room, as nearly always
    /// (`None`), else what waits for room — boxed, so a request's future does not carry a
    /// waiting send's state it seldom needs. `Err`: the writer is gone.
    fn queue(
        &self,
        message: Outgoing,
    ) -> Result<Option<futures_util::future::BoxFuture<'_, Result<(), ()>>>, ()> {
        match self.writer.try_send(message) {
            Ok(()) => Ok(None),
            Err(mpsc::error::TrySendError::Full(message)) => {
                let send = self.writer.send(message);
                Ok(Some(Box::pin(async move { send.await.map_err(|_| ()) })))
            }
            Err(mpsc::error::TrySendError::Closed(_)) => Err(()),
        }
    }

    /// Cancels request `id` on behalf of its host: the waiter fails at once, the upstream is told.
    pub(super) fn cancel(&self, id: u64, reason: Option<&RawValue>) {
        let Some(pending) = self.tables().remove(id) else {
            return;
        };
        let _ = pending.waiter.send(Err(UpstreamError::Cancelled {
            upstream: self.upstream().to_owned(),
        }));
        self.notify_cancelled(id, reason.map(RawValue::get));
    }

    /// Forgets request `id`, if still pending, and tells the upstream to stop working on it.
    fn abandon(&self, id: u64, reason: &str) {
        if self.tables().remove(id).is_some() {
            self.notify_cancelled(id, Some(reason));
        }
    }

    /// Tells the upstream to stop working on our request `id` (over Streamable HTTP in
    /// 2026-07-28, the transport closes that request's stream instead).
    fn notify_cancelled(&self, id: u64, reason: Option<&str>) {
        let method = "notifications/cancelled";
        let params = cancelled_params(&id.to_string(), reason);
        let mut message = Outgoing::notification(method, notification_line(method, Some(&params)));
        message.modern = Some(Box::new(Modern {
            cancels: Some(id),
            ..Modern::default()
        }));
        self.send(message);
    }

    /// Sends a notification without waiting; dropped if the write queue is full.
    pub(super) fn notify(&self, method: &str, params: Option<&str>) {
        self.send(Outgoing::notification(
            method,
            notification_line(method, params),
        ));
    }

    /// Writes an answer to a request the upstream sent.
    fn send_answer(&self, line: String) {
        self.send(Outgoing::answer(line));
    }

    fn send(&self, message: Outgoing) {
        if self.writer.try_send(message).is_err() {
            tracing::warn!(upstream = %self.upstream(), "Dropped a message to the upstream: its write queue is full.");
        }
    }

    /// Writes a host's answer to a request the upstream sent.
    pub(super) fn answer_server_request(&self, upstream_id: &RawValue, line: String) {
        self.tables().forwarded.remove(upstream_id.get());
        self.send_answer(line);
    }

    fn failed(&self, reason: String) -> UpstreamError {
        UpstreamError::Failed {
            upstream: self.upstream().to_owned(),
            reason,
        }
    }

    /// Ends the connection: every waiting caller is told why, at once.
    pub(super) fn close(&self, closed: &Closed) {
        let mut tables = self.tables();
        tables.closed.get_or_insert_with(|| closed.clone());
        // Dropping the senders wakes each waiter with the closed reason.
        tables.pending.clear();
        tables.progress.clear();
        tables.host_pending = 0;
        for (_, forwarded) in tables.forwarded.drain() {
            forwarded.caller.cancel_forwarded(&forwarded.host_id, None);
        }
    }

    /// Why the connection ended, if it has.
    pub(super) fn closed(&self) -> Option<Closed> {
        self.tables().closed.clone()
    }

    /// How many host requests are waiting for the upstream (mcpmux's own pings and re-reads aside).
    pub(super) fn in_flight(&self) -> usize {
        self.tables().host_pending
    }
}

impl Tables {
    /// The host side of our request `id`, while it is in flight.
    pub(super) fn caller_of(&self, id: u64) -> Option<Arc<dyn Caller>> {
        self.pending.get(&id).and_then(|p| p.caller.clone())
    }

    /// Takes request `id` out of the in-flight table, with its progress token.
    fn remove(&mut self, id: u64) -> Option<Pending> {
        let pending = self.pending.remove(&id)?;
        if let Some(tokens) = &pending.progress {
            self.progress.remove(&tokens.ours);
        }
        if pending.caller.is_some() {
            self.host_pending = self.host_pending.saturating_sub(1);
        }
        Some(pending)
    }
}

/// A request whose caller stopped waiting before it was answered (its host dropped the HTTP
/// request or event stream that carried it): its slot is freed and the upstream told to stop.
struct PendingGuard<'a> {
    conn: &'a Connection,
    id: Option<u64>,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            self.conn.abandon(id, r#""mcpmux: the caller went away""#);
        }
    }
}

async fn read_loop(conn: Arc<Connection>, mut incoming: Incoming, events: impl Fn(Event)) {
    let closed = loop {
        match incoming.next().await {
            Some(Ok(inbound)) => conn.on_message(inbound, &events),
            Some(Err(closed)) => break closed,
            None => break Closed::Eof,
        }
    };
    // A connection its actor closed (and may have replaced) has nothing more to report.
    let closed_already = conn.closed().is_some();
    conn.close(&closed);
    if !closed_already {
        events(Event::Closed(closed));
    }
}
