//! A handshake-era session beside a 2026-07-28 link, for a remote server that serves both eras:
//! the requests of handshake-era hosts go to it in their own era, so what the server does in
//! that era — asking the host for sampling, elicitation or roots with requests of its own, as
//! servers written for that era do — reaches the host as it does when the host connects to the
//! server direct. 2026-07-28 hosts (and mcpmux itself) keep the 2026-07-28 link; the catalog is
//! that link's. Only for remote servers: both sessions reach one server and its state, where a
//! second child process would hold state of its own.
//!
//! Whether a server serves the handshake era too is found by asking: its `server/discover`
//! need not list those versions (the Python SDK's lists only 2026-07-28 and serves both). So a
//! session is opened on the first request that needs one; a server that refuses `initialize` as
//! a 2026-07-28-only server does is not asked again while its link lives, and its handshake-era
//! hosts are served over the 2026-07-28 link, bridged as for any such upstream (so is any host
//! while an opening that failed otherwise waits [`RETRY_AFTER`]). An ended session is opened
//! again by the next request that needs one; it is closed with the upstream.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;

use super::connection::{Connection, Context};
use super::error::{Closed, HandshakeError, StartError};
use super::handshake::{self, Opened};
use super::transport::{self, Diagnostics, Teardown};
use crate::config::{Protocol, UpstreamConfig};
use crate::mcp::method::Method;
use crate::sync::lock;

/// How long after a failed opening handshake-era hosts stay on the 2026-07-28 link.
const RETRY_AFTER: Duration = Duration::from_secs(60);

/// The handshake-era session of one upstream (or one per-session instance of it).
#[derive(Default)]
pub(super) struct Companion {
    /// The open session's connection.
    live: ArcSwapOption<Connection>,
    /// Held while one is opened (and to close it); what ends its transport.
    link: tokio::sync::Mutex<Option<Box<dyn Teardown>>>,
    /// Why there is none for now: the server serves 2026-07-28 only (until the link ends), or
    /// opening one failed at that time.
    none: Mutex<Option<Refused>>,
}

/// Why a server has no handshake-era session.
#[derive(Debug, Clone, Copy)]
enum Refused {
    ModernOnly,
    FailedAt(Instant),
}

impl Companion {
    /// The open session, opening it first when there is none (at most `timeout`); `None` when
    /// it cannot be opened now (the reason is logged once per [`RETRY_AFTER`]).
    pub(super) async fn connection(
        &self,
        config: &UpstreamConfig,
        context: impl FnOnce() -> Context,
        timeout: Duration,
    ) -> Option<Arc<Connection>> {
        if let Some(conn) = self.open_one() {
            return Some(conn);
        }
        if !self.may_open() {
            return None;
        }
        let mut link = tokio::time::timeout(timeout, self.link.lock()).await.ok()?;
        if let Some(conn) = self.open_one() {
            return Some(conn);
        }
        if !self.may_open() {
            return None;
        }
        // One that ended is closed for good before another is opened.
        if let Some(ended) = link.take() {
            ended.close(config.policy.shutdown_grace).await;
        }
        let context = context();
        let (name, scope) = (config.name.clone(), context.id.scope.clone());
        match open(config, context, timeout).await {
            Ok((conn, teardown)) => {
                *link = Some(teardown);
                self.live.store(Some(Arc::clone(&conn)));
                tracing::info!(upstream = %name, session = scope, "Opened a handshake-era session beside the 2026-07-28 one, for the requests of handshake-era hosts.");
                Some(conn)
            }
            Err(OpenError::Handshake(HandshakeError::RefusedLegacy(_))) => {
                *lock(&self.none) = Some(Refused::ModernOnly);
                tracing::info!(upstream = %name, session = scope, "The server speaks 2026-07-28 only; handshake-era hosts are served over its 2026-07-28 link, their requests bridged.");
                None
            }
            Err(why) => {
                *lock(&self.none) = Some(Refused::FailedAt(Instant::now()));
                tracing::warn!(upstream = %name, session = scope, error = %why, "Could not open a handshake-era session; handshake-era hosts are served over the 2026-07-28 link for now.");
                None
            }
        }
    }

    /// Whether a session may be opened now.
    fn may_open(&self) -> bool {
        match *lock(&self.none) {
            None => true,
            Some(Refused::ModernOnly) => false,
            Some(Refused::FailedAt(at)) => at.elapsed() >= RETRY_AFTER,
        }
    }

    /// The session, while it is open.
    fn open_one(&self) -> Option<Arc<Connection>> {
        self.live.load_full().filter(|c| c.closed().is_none())
    }

    /// Closes the session, if one is open (its waiting callers learn why), within `grace`.
    pub(super) async fn close(&self, reason: &Closed, grace: Duration) {
        let teardown = self.link.lock().await.take();
        if let Some(conn) = self.live.swap(None) {
            conn.close(reason);
        }
        if let Some(teardown) = teardown {
            teardown.close(grace).await;
        }
        *lock(&self.none) = None;
    }
}

/// Why a handshake-era session could not be opened.
#[derive(Debug, thiserror::Error)]
enum OpenError {
    #[error("{0}")]
    Start(#[from] StartError),
    #[error("its initialize failed: {0}")]
    Handshake(#[from] HandshakeError),
    #[error("it answered initialize as a 2026-07-28 server does")]
    Modern,
    #[error("it ended on the opening request")]
    Ended,
}

/// Opens a second transport to the upstream and speaks the handshake era on it; the log level
/// hosts asked of the upstream is given to it at once.
async fn open(
    config: &UpstreamConfig,
    ctx: Context,
    timeout: Duration,
) -> Result<(Arc<Connection>, Box<dyn Teardown>), OpenError> {
    let diagnostics = Arc::new(Diagnostics::new(&config.name));
    let link = transport::open(config, diagnostics).await?;
    let (id, events) = (Arc::clone(&ctx.id), ctx.events.clone());
    // Its list changes and its end need no one: the catalog is the 2026-07-28 link's, and an
    // ended session is opened again by the next request that needs one.
    let conn = Connection::start(ctx, link.outgoing, link.incoming, |_| {});
    let wait = config.policy.startup_timeout.min(timeout);
    let opened = handshake::open(&conn, Protocol::Legacy, true, wait).await;
    let failure = match opened {
        Ok(Opened::Ready(info)) if !info.protocol_version.is_modern() => None,
        Ok(Opened::Ready(_)) => Some(OpenError::Modern),
        Ok(Opened::EndedOnProbe) => Some(OpenError::Ended),
        Err(why) => Some(OpenError::Handshake(why)),
    };
    if let Some(failure) = failure {
        conn.close(&Closed::Stopped);
        link.teardown.close(config.policy.shutdown_grace).await;
        return Err(failure);
    }
    if let Some(events) = events {
        let levels = events.resume(&id).into_iter();
        for (method, params) in levels.filter(|(m, _)| m == Method::SetLogLevel.as_str()) {
            if let Err(e) = conn.request(&method, Some(&params), wait, None).await {
                tracing::warn!(upstream = %config.name, error = %e, "Could not set the log level of a handshake-era session.");
            }
        }
    }
    Ok((conn, link.teardown))
}
