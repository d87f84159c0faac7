//! `mcpmux stdio`: bridges a host that only speaks stdio (Claude Desktop, …) to the running
//! daemon's Streamable HTTP endpoint. Each stdin line is posted; every message of the answer is
//! written to stdout as one line. Requests run concurrently so a slow call blocks nothing else.
//! If the daemon restarts, the bridge replays the host's `initialize` and retries, so the host
//! never sees its session vanish. A 2026-07-28 host's requests are stateless: each is posted
//! with the headers that mirror its body and no session, and its `notifications/cancelled`
//! closes the request's response stream, which is how that revision cancels over HTTP.
//!
//! - `daemon_client`: the HTTP client of the daemon's own endpoint, also used by `mcpmux tools`.

pub mod daemon_client;

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::sync::{RwLock, mpsc};
use tokio::task::JoinSet;

use crate::jsonrpc::{Incoming, Message, RpcError, codes, error_line};
use crate::mcp::method::Method;
use daemon_client::{ClientError, HttpSession, Mirror};

struct Bridge {
    session: RwLock<HttpSession>,
    /// The host's own `initialize` line, replayed when the daemon forgot the session.
    initialize: RwLock<Option<String>>,
    out: mpsc::Sender<String>,
}

/// Runs the bridge until stdin closes.
// Long: the bridge's loop: stdin, the daemon's answers and its event stream, and a session the
// daemon forgot, in one `select!`.
pub async fn run(url: String, token: Option<String>) -> std::io::Result<()> {
    let (out, mut rx) = mpsc::channel::<String>(1024);
    let writer = tokio::spawn(async move {
        let mut stdout = BufWriter::new(stdout());
        while let Some(line) = rx.recv().await {
            let line = line.replace(['\n', '\r'], " ");
            if stdout.write_all(line.as_bytes()).await.is_err()
                || stdout.write_all(b"\n").await.is_err()
            {
                break;
            }
            if rx.is_empty() && stdout.flush().await.is_err() {
                break;
            }
        }
    });
    let bridge = Arc::new(Bridge {
        session: RwLock::new(HttpSession::new(url).with_token(token.as_deref())),
        initialize: RwLock::new(None),
        out,
    });
    let mut lines = BufReader::new(stdin()).lines();
    let mut tasks = JoinSet::new();
    // Stateless (2026-07-28) requests in flight, by id, so the host can cancel them.
    let mut stateless = std::collections::HashMap::new();
    let mut listener: Option<tokio::task::JoinHandle<()>> = None;
    while let Some(line) = lines.next_line().await? {
        if line.trim().is_empty() {
            continue;
        }
        let (is_request, is_initialize, id, mirror, cancels) = match Incoming::parse(&line) {
            Ok(Message::Request { id, method, params }) => (
                true,
                method == Method::Initialize.as_str(),
                Some(id.get().to_owned()),
                Mirror::of(&method, params),
                None,
            ),
            Ok(Message::Notification { method, params }) if method == "notifications/cancelled" => {
                (false, false, None, None, cancelled_request(params))
            }
            Ok(_) => (false, false, None, None, None),
            Err(e) => {
                bridge.emit(error_line(None, &e)).await;
                continue;
            }
        };
        stateless.retain(|_, task: &mut tokio::task::AbortHandle| !task.is_finished());
        if let Some(task) = cancels.and_then(|id| stateless.remove(&id)) {
            // A stateless request is cancelled by closing its response stream.
            task.abort();
        } else if let (Some(mirror), Some(id)) = (mirror, id.clone()) {
            let key = id.clone();
            let bridge = Arc::clone(&bridge);
            let task = tasks.spawn(async move {
                let outcome = bridge.session.read().await.clone();
                let outcome = outcome.post_stateless(line, &mirror, &bridge.out).await;
                if let Err(e) = outcome {
                    bridge.fail(Some(&id), &e).await;
                }
            });
            stateless.insert(key, task);
        } else if is_initialize {
            bridge.initialize_with(&line, id.as_deref()).await;
            if listener.is_none() && bridge.session.read().await.session_id().is_some() {
                listener = Some(tokio::spawn(Arc::clone(&bridge).listen()));
            }
        } else if is_request {
            let bridge = Arc::clone(&bridge);
            tasks.spawn(async move { bridge.forward(line, id.as_deref()).await });
        } else {
            bridge.forward(line, None).await;
        }
        while tasks.try_join_next().is_some() {}
    }
    while tasks.join_next().await.is_some() {}
    // The event stream holds a sender of the output queue; end it so the writer can drain and stop.
    if let Some(listener) = listener {
        listener.abort();
        let _ = listener.await;
    }
    bridge.session.read().await.end().await;
    drop(bridge);
    let _ = writer.await;
    Ok(())
}

/// Standard input: read through epoll when it is a pipe (as when a host started the bridge),
/// else (a file, a terminal) through tokio's `stdin`, which hands every read to a blocking
/// thread and back — several thread wake-ups per line, most of the bridge's CPU.
fn stdin() -> Box<dyn AsyncRead + Send + Unpin> {
    use std::os::fd::AsFd;
    let pipe = (std::io::stdin().as_fd().try_clone_to_owned())
        .and_then(tokio::net::unix::pipe::Receiver::from_owned_fd);
    match pipe {
        Ok(pipe) => Box::new(pipe),
        Err(_) => Box::new(tokio::io::stdin()),
    }
}

/// Standard output: written through epoll when it is a pipe, else through tokio's `stdout`.
fn stdout() -> Box<dyn AsyncWrite + Send + Unpin> {
    use std::os::fd::AsFd;
    let pipe = (std::io::stdout().as_fd().try_clone_to_owned())
        .and_then(tokio::net::unix::pipe::Sender::from_owned_fd);
    match pipe {
        Ok(pipe) => Box::new(pipe),
        Err(_) => Box::new(tokio::io::stdout()),
    }
}

impl Bridge {
    async fn emit(&self, line: String) {
        let _ = self.out.send(line).await;
    }

    async fn initialize_with(&self, line: &str, id: Option<&str>) {
        *self.initialize.write().await = Some(line.to_owned());
        let outcome = self.session.read().await.post(line.to_owned()).await;
        match outcome {
            Ok((messages, issued)) => {
                let version = negotiated_version(&messages);
                self.session.write().await.set_session(issued, version);
                for m in messages {
                    self.emit(m).await;
                }
            }
            Err(e) => self.fail(id, &e).await,
        }
    }

    /// Posts one message, writing each message of the answer as it arrives; on a forgotten
    /// session, re-initializes once and retries.
    async fn forward(&self, line: String, id: Option<&str>) {
        let first = self
            .session
            .read()
            .await
            .post_streaming(line.clone(), &self.out)
            .await;
        let outcome = match first {
            Err(ClientError::SessionGone) => match self.reinitialize().await {
                Ok(()) => {
                    self.session
                        .read()
                        .await
                        .post_streaming(line, &self.out)
                        .await
                }
                Err(e) => Err(e),
            },
            other => other,
        };
        if let Err(e) = outcome {
            self.fail(id, &e).await;
        }
    }

    async fn reinitialize(&self) -> Result<(), ClientError> {
        let Some(init) = self.initialize.read().await.clone() else {
            return Err(ClientError::SessionGone);
        };
        let mut session = self.session.write().await;
        session.set_session(None, None);
        let (messages, issued) = session.post(init).await?;
        let version = negotiated_version(&messages);
        session.set_session(issued, version);
        session
            .post(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.to_owned())
            .await?;
        tracing::info!("Re-initialized the session with the daemon.");
        Ok(())
    }

    /// Tells the host why its request got no answer (notifications have no one to tell).
    async fn fail(&self, id: Option<&str>, e: &ClientError) {
        tracing::error!(error = %e, "Could not reach the daemon.");
        if let Some(raw) =
            id.and_then(|id| serde_json::value::RawValue::from_string(id.to_owned()).ok())
        {
            self.emit(error_line(
                Some(&raw),
                &RpcError::new(codes::INTERNAL_ERROR, e.to_string()),
            ))
            .await;
        }
    }

    /// Relays the daemon's server-to-host stream for as long as the bridge runs.
    async fn listen(self: Arc<Self>) {
        loop {
            let stream = self.session.read().await.listen().await;
            match stream {
                Ok(stream) => {
                    let mut stream = std::pin::pin!(stream);
                    while let Some(message) = stream.next().await {
                        self.emit(message).await;
                    }
                }
                Err(e) => tracing::debug!(error = %e, "Server-to-host stream unavailable."),
            }
            if self.out.is_closed() {
                return;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

/// The `requestId` a `notifications/cancelled` names, as JSON text.
fn cancelled_request(params: Option<&serde_json::value::RawValue>) -> Option<String> {
    let members = crate::jsonrpc::Members::of(params?)?;
    members.get("requestId").map(|id| id.get().to_owned())
}

/// The protocol version the daemon's `initialize` answer (among `messages`) settled on.
fn negotiated_version(messages: &[String]) -> Option<String> {
    messages.iter().find_map(|m| {
        let v: serde_json::Value = serde_json::from_str(m).ok()?;
        v["result"]["protocolVersion"].as_str().map(str::to_owned)
    })
}
