//! One live connection to an upstream: the in-flight table (our id → waiting caller) and the
//! reader, writer and stderr tasks around the child's pipes. Callers never queue behind an actor:
//! a request registers itself, hands its line to the writer task and waits for its own answer.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::sync::{mpsc, oneshot};
use tokio_util::codec::{FramedRead, LinesCodecError};

use super::handle::{Reply, UpstreamError, UpstreamHandle};
use crate::jsonrpc::{
    Incoming, Kind, MAX_LINE_BYTES, RpcError, codes, error_line, line_codec, notification_line,
};
use crate::mcp::ListKind;

/// Lines waiting for the writer task; a full queue makes callers wait (backpressure).
const WRITE_QUEUE: usize = 1024;
/// Longest stderr line kept whole.
const STDERR_LINE_BYTES: usize = 8 * 1024;

/// What the connection tells its actor.
#[derive(Debug)]
pub(super) enum Event {
    ListChanged(ListKind),
    Closed(String),
}

type Waiter = oneshot::Sender<Reply>;

pub(super) struct Connection {
    upstream: String,
    writer: mpsc::Sender<String>,
    pending: Mutex<HashMap<u64, Waiter>>,
    next_id: AtomicU64,
    /// Why the connection ended, once it has.
    closed: Mutex<Option<String>>,
}

impl Connection {
    /// Starts the reader, writer and stderr tasks. `events` is called from the reader task.
    pub(super) fn start(
        handle: &UpstreamHandle,
        stdin: impl AsyncWrite + Unpin + Send + 'static,
        stdout: impl AsyncRead + Unpin + Send + 'static,
        stderr: impl AsyncRead + Unpin + Send + 'static,
        events: impl Fn(Event) + Send + Sync + 'static,
    ) -> Arc<Self> {
        let (writer, rx) = mpsc::channel(WRITE_QUEUE);
        let conn = Arc::new(Self {
            upstream: handle.name().to_owned(),
            writer,
            pending: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            closed: Mutex::new(None),
        });
        tokio::spawn(write_loop(rx, stdin));
        tokio::spawn(read_loop(Arc::clone(&conn), stdout, events));
        tokio::spawn(stderr_loop(handle.clone(), stderr));
        conn
    }

    /// Sends one request and waits for its answer, at most `timeout`.
    pub(super) async fn request(
        &self,
        method: &str,
        params: Option<&str>,
        timeout: Duration,
    ) -> Result<Reply, UpstreamError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        {
            let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(reason) = self.closed_reason() {
                return Err(self.failed(reason));
            }
            pending.insert(id, tx);
        }
        let mut slot = Slot {
            conn: self,
            id: Some(id),
        };
        let line = crate::jsonrpc::request_line(id, method, params);
        let outcome = tokio::time::timeout(timeout, async {
            self.writer.send(line).await.map_err(|_| ())?;
            rx.await.map_err(|_| ())
        })
        .await;
        match outcome {
            Ok(Ok(reply)) => {
                slot.id = None;
                Ok(reply)
            }
            Ok(Err(())) => Err(self.failed(
                self.closed_reason()
                    .unwrap_or_else(|| "connection closed".to_owned()),
            )),
            Err(_) => {
                let cancel =
                    format!(r#"{{"requestId":{id},"reason":"mcpmux: request timed out"}}"#);
                self.notify("notifications/cancelled", Some(&cancel));
                Err(UpstreamError::Timeout {
                    upstream: self.upstream.clone(),
                    timeout,
                })
            }
        }
    }

    /// Sends a notification without waiting; dropped if the write queue is full.
    pub(super) fn notify(&self, method: &str, params: Option<&str>) {
        let _ = self.writer.try_send(notification_line(method, params));
    }

    fn closed_reason(&self) -> Option<String> {
        self.closed.lock().ok().and_then(|c| c.clone())
    }

    fn failed(&self, reason: String) -> UpstreamError {
        UpstreamError::Failed {
            upstream: self.upstream.clone(),
            reason,
        }
    }

    /// Ends the connection: every waiting caller is told why, at once.
    pub(super) fn close(&self, reason: &str) {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        if let Ok(mut closed) = self.closed.lock() {
            closed.get_or_insert_with(|| reason.to_owned());
        }
        // Dropping the senders wakes each waiter with the closed reason.
        pending.clear();
    }

    fn on_line(&self, line: &str, events: &impl Fn(Event)) {
        let line = line.trim();
        if line.is_empty() {
            return;
        }
        match Incoming::parse(line) {
            Ok(Kind::Response { id, result }) => {
                self.resolve(id.get(), Reply::Result(result.to_owned()))
            }
            Ok(Kind::Error { id, error }) => self.resolve(id.get(), Reply::Error(error.to_owned())),
            Ok(Kind::Request { id, method, .. }) => {
                let answer = if method == "ping" {
                    crate::jsonrpc::response_line(id, &empty_object())
                } else {
                    let why = format!("mcpmux does not forward `{method}` from upstreams to hosts");
                    error_line(Some(id), &RpcError::new(codes::METHOD_NOT_FOUND, why))
                };
                let _ = self.writer.try_send(answer);
            }
            Ok(Kind::Notification { method, .. }) => match method.as_ref() {
                "notifications/tools/list_changed" => events(Event::ListChanged(ListKind::Tools)),
                "notifications/prompts/list_changed" => {
                    events(Event::ListChanged(ListKind::Prompts))
                }
                "notifications/resources/list_changed" => {
                    events(Event::ListChanged(ListKind::Resources));
                    events(Event::ListChanged(ListKind::ResourceTemplates));
                }
                other => {
                    tracing::debug!(upstream = %self.upstream, method = other, "Dropped a notification from upstream.")
                }
            },
            Err(e) => {
                let shown: String = line.chars().take(200).collect();
                tracing::warn!(upstream = %self.upstream, error = %e, line = %shown, "Upstream wrote a line that is not JSON-RPC.");
            }
        }
    }

    fn resolve(&self, id: &str, reply: Reply) {
        let waiter = id
            .parse::<u64>()
            .ok()
            .and_then(|id| self.pending.lock().ok()?.remove(&id));
        match waiter {
            Some(waiter) => {
                let _ = waiter.send(reply);
            }
            None => {
                tracing::debug!(upstream = %self.upstream, id, "Answer for a request no one waits for (late or unknown).")
            }
        }
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
            if let Ok(mut pending) = self.conn.pending.lock() {
                pending.remove(&id);
            }
        }
    }
}

fn empty_object() -> Box<serde_json::value::RawValue> {
    serde_json::value::RawValue::from_string("{}".to_owned())
        .unwrap_or_else(|_| unreachable!("`{{}}` is JSON"))
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
    let mut lines = FramedRead::new(stdout, line_codec(MAX_LINE_BYTES));
    let reason = loop {
        match lines.next().await {
            Some(Ok(line)) => conn.on_line(&line, &events),
            Some(Err(LinesCodecError::MaxLineLengthExceeded)) => {
                break format!("upstream wrote a line longer than {MAX_LINE_BYTES} bytes");
            }
            Some(Err(LinesCodecError::Io(e))) => break format!("reading its stdout failed: {e}"),
            None => break "it closed its stdout".to_owned(),
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
