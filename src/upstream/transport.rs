//! The seam between a connection and what carries its messages. A transport yields and takes
//! whole JSON-RPC messages (one string each, no framing), says why it ended ([`Closed`]), and
//! reports what it can tell about its upstream besides messages ([`Diagnostics`]: a child's
//! stderr lines, later an HTTP status). Routing, catalogs and supervision never know whether a
//! pipe, a POST or an event stream carries a message.
//!
//! - `stdio`: a child process (cleared environment, own process group, stderr captured, the
//!   whole group killed when the link is closed).

mod stdio;

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::Duration;

use futures_util::Stream;
use futures_util::future::BoxFuture;
use tokio::sync::mpsc;

use super::error::{Closed, StartError};
use crate::config::UpstreamConfig;

/// Lines of diagnostics kept to explain why an upstream failed.
const DIAGNOSTIC_LINES: usize = 8;

/// Messages from the upstream, until the stream ends with why.
pub(super) type Incoming = Pin<Box<dyn Stream<Item = Result<String, Closed>> + Send>>;

/// One open transport to an upstream.
pub(super) struct Link {
    /// Messages for the upstream; a full queue makes senders wait (backpressure).
    pub outgoing: mpsc::Sender<String>,
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

/// Opens the transport `config` names.
pub(super) async fn open(
    config: &UpstreamConfig,
    diagnostics: std::sync::Arc<Diagnostics>,
) -> Result<Link, StartError> {
    stdio::open(config, diagnostics)
}

/// What a transport observed about its upstream besides messages: the last lines it wrote to
/// stderr (or, for remote transports, the last HTTP errors), kept to explain a failure.
#[derive(Debug)]
pub struct Diagnostics {
    upstream: String,
    tail: Mutex<VecDeque<String>>,
}

impl Diagnostics {
    pub(super) fn new(upstream: &str) -> Self {
        Self {
            upstream: upstream.to_owned(),
            tail: Mutex::new(VecDeque::new()),
        }
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

    /// The kept lines, oldest first.
    pub fn tail(&self) -> Vec<String> {
        self.lock().iter().cloned().collect()
    }

    /// The newest kept line.
    pub fn last(&self) -> Option<String> {
        self.lock().back().cloned()
    }

    pub(super) fn clear(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<String>> {
        self.tail.lock().unwrap_or_else(|p| p.into_inner())
    }
}
