//! One live connection to an upstream: the in-flight table (our id → waiting caller and the host
//! request it serves), the progress-token map, the table of requests the upstream sent to hosts,
//! and the reader, writer and stderr tasks around the child's pipes. Callers never queue behind
//! an actor: a request registers itself, hands its line to the writer task and waits for its own
//! answer. What the upstream sends unasked is routed in `inbound`.

mod inbound;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::value::RawValue;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::sync::{mpsc, oneshot};
use tokio_util::codec::{FramedRead, LinesCodecError};

use super::handle::{Reply, UpstreamError, UpstreamHandle};
use super::origin::{Canceller, Origin};
use crate::jsonrpc::{line_codec, notification_line};
use crate::mcp::ListKind;

/// Lines waiting for the writer task; a full queue makes callers wait (backpressure).
const WRITE_QUEUE: usize = 1024;
/// Longest stderr line kept whole.
const STDERR_LINE_BYTES: usize = 8 * 1024;

/// The close reason when the upstream simply closed its stdout (its exit status says more).
pub(super) const STDOUT_CLOSED: &str = "it closed its stdout";

/// What the connection tells its actor.
#[derive(Debug)]
pub(super) enum Event {
    ListChanged(ListKind),
    Closed(String),
}

/// The host side of a forwarded request, and the progress token it was given upstream.
pub struct CallContext {
    pub origin: Arc<dyn Origin>,
    /// When the host asked for progress: our token (in the params sent) and the host's.
    pub progress: Option<ProgressTokens>,
}

/// A host's `progressToken` and the one that stands for it upstream (both raw JSON).
#[derive(Debug)]
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
            .field("session", &self.origin.session_id())
            .finish()
    }
}

type Waiter = oneshot::Sender<Result<Reply, UpstreamError>>;

struct Pending {
    waiter: Waiter,
    origin: Option<Arc<dyn Origin>>,
    progress: Option<ProgressTokens>,
}

/// A request the upstream sent that a host is answering.
struct Forwarded {
    origin: Arc<dyn Origin>,
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
}

pub(super) struct Connection {
    handle: UpstreamHandle,
    /// The one host session a per-session instance serves.
    scope: Option<String>,
    writer: mpsc::Sender<String>,
    tables: Mutex<Tables>,
    next_id: AtomicU64,
    /// Why the connection ended, once it has.
    closed: Mutex<Option<String>>,
}

impl Connection {
    /// Starts the reader, writer and stderr tasks. `events` is called from the reader task.
    pub(super) fn start(
        handle: &UpstreamHandle,
        scope: Option<String>,
        stdin: impl AsyncWrite + Unpin + Send + 'static,
        stdout: impl AsyncRead + Unpin + Send + 'static,
        stderr: impl AsyncRead + Unpin + Send + 'static,
        events: impl Fn(Event) + Send + Sync + 'static,
    ) -> Arc<Self> {
        let (writer, rx) = mpsc::channel(WRITE_QUEUE);
        let conn = Arc::new(Self {
            handle: handle.clone(),
            scope,
            writer,
            tables: Mutex::new(Tables::default()),
            next_id: AtomicU64::new(1),
            closed: Mutex::new(None),
        });
        tokio::spawn(write_loop(rx, stdin));
        tokio::spawn(read_loop(Arc::clone(&conn), stdout, events));
        tokio::spawn(stderr_loop(handle.clone(), stderr));
        conn
    }

    fn upstream(&self) -> &str {
        self.handle.name()
    }

    fn tables(&self) -> std::sync::MutexGuard<'_, Tables> {
        self.tables.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sends one request and waits for its answer, at most `timeout`. With a `call` context,
    /// the host's progress token is replaced by ours and the host can cancel the request.
    pub(super) async fn request(
        self: &Arc<Self>,
        method: &str,
        params: Option<&str>,
        timeout: Duration,
        call: Option<CallContext>,
    ) -> Result<Reply, UpstreamError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        let origin = call.as_ref().map(|c| Arc::clone(&c.origin));
        {
            let mut tables = self.tables();
            if let Some(reason) = self.closed_reason() {
                return Err(self.failed(reason));
            }
            // The limit is on host requests; mcpmux's own (pings, re-reads) always go through.
            let limit = self.handle.config().policy.max_in_flight;
            if call.is_some() && tables.host_pending >= limit {
                return Err(UpstreamError::Busy {
                    upstream: self.upstream().to_owned(),
                    limit,
                });
            }
            let (origin, progress) = match call {
                Some(c) => (Some(c.origin), c.progress),
                None => (None, None),
            };
            if let Some(tokens) = &progress {
                tables.progress.insert(tokens.ours.clone(), id);
            }
            if origin.is_some() {
                tables.host_pending += 1;
            }
            tables.pending.insert(
                id,
                Pending {
                    waiter: tx,
                    origin,
                    progress,
                },
            );
        }
        let mut slot = Slot {
            conn: self,
            id: Some(id),
        };
        if let Some(origin) = &origin {
            origin.started(Canceller {
                conn: Arc::downgrade(self),
                id,
            });
        }
        let line = crate::jsonrpc::request_line(id, method, params);
        let outcome = tokio::time::timeout(timeout, async {
            self.writer.send(line).await.map_err(|_| ())?;
            rx.await.map_err(|_| ())
        })
        .await;
        match outcome {
            Ok(Ok(answer)) => {
                slot.id = None;
                answer
            }
            Ok(Err(())) => {
                let reason = self.closed_reason();
                Err(self.failed(reason.unwrap_or_else(|| "connection closed".to_owned())))
            }
            Err(_) => {
                let reason = r#""mcpmux: request timed out""#;
                self.notify(
                    "notifications/cancelled",
                    Some(&cancel_params(id, Some(reason))),
                );
                Err(UpstreamError::Timeout {
                    upstream: self.upstream().to_owned(),
                    timeout,
                })
            }
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
        let params = cancel_params(id, reason.map(RawValue::get));
        self.notify("notifications/cancelled", Some(&params));
    }

    /// Sends a notification without waiting; dropped if the write queue is full.
    pub(super) fn notify(&self, method: &str, params: Option<&str>) {
        self.send_line(notification_line(method, params));
    }

    fn send_line(&self, line: String) {
        if self.writer.try_send(line).is_err() {
            tracing::warn!(upstream = %self.upstream(), "Dropped a message to the upstream: its write queue is full.");
        }
    }

    /// Writes a host's answer to a request the upstream sent.
    pub(super) fn answer_server_request(&self, upstream_id: &RawValue, line: String) {
        self.tables().forwarded.remove(upstream_id.get());
        self.send_line(line);
    }

    fn closed_reason(&self) -> Option<String> {
        self.closed.lock().ok().and_then(|c| c.clone())
    }

    fn failed(&self, reason: String) -> UpstreamError {
        UpstreamError::Failed {
            upstream: self.upstream().to_owned(),
            reason,
        }
    }

    /// Ends the connection: every waiting caller is told why, at once.
    pub(super) fn close(&self, reason: &str) {
        let mut tables = self.tables();
        if let Ok(mut closed) = self.closed.lock() {
            closed.get_or_insert_with(|| reason.to_owned());
        }
        // Dropping the senders wakes each waiter with the closed reason.
        tables.pending.clear();
        tables.progress.clear();
        tables.host_pending = 0;
        for (_, forwarded) in tables.forwarded.drain() {
            forwarded.origin.cancel_forwarded(&forwarded.host_id, None);
        }
    }

    /// How many host requests are waiting for the upstream (mcpmux's own pings and re-reads aside).
    pub(super) fn in_flight(&self) -> usize {
        self.tables().host_pending
    }
}

impl Tables {
    /// Takes request `id` out of the in-flight table, with its progress token.
    fn remove(&mut self, id: u64) -> Option<Pending> {
        let pending = self.pending.remove(&id)?;
        if let Some(tokens) = &pending.progress {
            self.progress.remove(&tokens.ours);
        }
        if pending.origin.is_some() {
            self.host_pending = self.host_pending.saturating_sub(1);
        }
        Some(pending)
    }
}

fn cancel_params(id: u64, reason: Option<&str>) -> String {
    match reason {
        Some(reason) => format!(r#"{{"requestId":{id},"reason":{reason}}}"#),
        None => format!(r#"{{"requestId":{id}}}"#),
    }
}

/// Removes an abandoned request from the in-flight table (timeout or caller gone).
struct Slot<'a> {
    conn: &'a Connection,
    id: Option<u64>,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            self.conn.tables().remove(id);
        }
    }
}

async fn write_loop(mut rx: mpsc::Receiver<String>, stdin: impl AsyncWrite + Unpin) {
    let mut out = BufWriter::with_capacity(64 * 1024, stdin);
    while let Some(first) = rx.recv().await {
        let mut next = Some(first);
        while let Some(line) = next {
            if write_line(&mut out, &line).await.is_err() {
                return;
            }
            next = rx.try_recv().ok();
        }
        if out.flush().await.is_err() {
            return;
        }
    }
}

/// Writes one message as one line. Raw newlines in JSON text can only be insignificant whitespace
/// (inside strings they are escaped), so they become spaces and the framing holds.
async fn write_line(out: &mut (impl AsyncWrite + Unpin), line: &str) -> std::io::Result<()> {
    if line.contains(['\n', '\r']) {
        out.write_all(line.replace(['\n', '\r'], " ").as_bytes())
            .await?;
    } else {
        out.write_all(line.as_bytes()).await?;
    }
    out.write_all(b"\n").await
}

async fn read_loop(conn: Arc<Connection>, stdout: impl AsyncRead + Unpin, events: impl Fn(Event)) {
    let max = conn.handle.config().policy.max_message_bytes;
    let mut lines = FramedRead::new(stdout, line_codec(max));
    let reason = loop {
        match lines.next().await {
            Some(Ok(line)) => {
                if let Err(broken) = conn.on_line(&line, &events) {
                    break broken;
                }
            }
            Some(Err(LinesCodecError::MaxLineLengthExceeded)) => {
                break format!("it wrote a message longer than {max} bytes (max_message_bytes)");
            }
            Some(Err(LinesCodecError::Io(e))) => break format!("reading its stdout failed: {e}"),
            None => break STDOUT_CLOSED.to_owned(),
        }
    };
    conn.close(&reason);
    events(Event::Closed(reason));
}

async fn stderr_loop(handle: UpstreamHandle, stderr: impl AsyncRead + Unpin) {
    let mut lines = FramedRead::new(stderr, line_codec(STDERR_LINE_BYTES));
    while let Some(item) = lines.next().await {
        match item {
            Ok(line) if !line.trim().is_empty() => {
                tracing::info!(target: "mcpmux::upstream::stderr", upstream = %handle.name(), "{line}");
                handle.push_stderr(line);
            }
            Ok(_) | Err(LinesCodecError::MaxLineLengthExceeded) => {}
            Err(LinesCodecError::Io(_)) => break,
        }
    }
}
