//! Remote transports: Streamable HTTP (2025-03-26 and later) and the legacy HTTP+SSE transport
//! (2024-11-05), behind the same [`Link`] as a child process. One writer task takes the
//! connection's outgoing messages and POSTs each (concurrently: a slow call never holds up the
//! next), answers and server messages go to the connection's incoming stream from whichever
//! response or event stream carried them. `auto` tries Streamable HTTP and, when the server
//! refuses the first POST with a 4xx, falls back to the legacy transport as the spec's
//! backward-compatibility section describes; what worked is remembered for the next start.
//!
//! A request whose POST fails — the connection refused or reset, a 5xx, an answer's stream cut
//! off, an answer that is not JSON-RPC or is too long — fails alone: its caller gets an error
//! naming the upstream and the HTTP status or transport error, every other request goes on. The
//! link ends (and the supervisor restarts it) only once its [`Breaker`] trips:
//! `breaker_failures` failed requests in a row within `breaker_window`, or a failed health ping
//! (the ping exists to tell a server that is down from one request that failed). A Streamable
//! HTTP session the server forgot (404) is replaced without ending the link
//! (`streamable::renew`). A refused credential ends the link at once, and so does what comes on
//! a stream shared by every request (the legacy transport's, the GET stream) that is not
//! JSON-RPC: it cannot be pinned on one request.
//!
//! - `breaker`: when failed requests in a row end the link.
//! - `client`: the HTTP pool, TLS, headers and credential.
//! - `events`: SSE bodies as events, bounded by `max_message_bytes`.
//! - `streamable`: one POST and its JSON or SSE answer; the standalone GET stream; DELETE.
//! - `legacy`: the SSE stream, its `endpoint` event, and POSTs to that endpoint.

mod breaker;
mod client;
mod events;
mod legacy;
mod streamable;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use breaker::Breaker;
use futures_util::future::BoxFuture;
use reqwest::header::HeaderMap;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::Inbound;
use super::{Diagnostics, Link, Outgoing, Teardown};
use crate::config::{RemoteConfig, RemoteKind};
use crate::jsonrpc::{Received, RpcError, codes};
use crate::mcp::method::Method;
use crate::sync::lock;
use crate::upstream::error::{Closed, StartError};

/// Messages waiting to be POSTed; a full queue makes callers wait (backpressure).
const WRITE_QUEUE: usize = 1024;
/// Messages received and not yet taken by the connection's reader.
const READ_QUEUE: usize = 1024;

/// Bounds of one remote link.
#[derive(Debug, Clone, Copy)]
pub(super) struct Limits {
    /// Largest message or event accepted.
    pub max_message_bytes: usize,
    /// Longest a POST of a notification or an answer may take (the next message waits for it).
    pub notification: Duration,
    /// Longest a POST of a request may take, its answer's stream included.
    pub request: Duration,
    /// Longest opening may take (legacy HTTP+SSE: the GET of the stream and its `endpoint`
    /// event), as the upstream's `startup_timeout` bounds its handshake.
    pub open: Duration,
    /// Failed requests in a row that end the link (`breaker_failures`)…
    pub breaker_failures: u32,
    /// …when they all fall within this long (`breaker_window`).
    pub breaker_window: Duration,
}

/// What every task of one remote link shares.
pub(super) struct Shared {
    pub upstream: String,
    pub client: reqwest::Client,
    pub url: url::Url,
    /// Configured headers and the credential (marked sensitive: never printed); swapped when
    /// an OAuth access token is refreshed.
    headers: ArcSwap<HeaderMap>,
    /// A DPoP-bound access token (RFC 9449), when the sign-in bound one: each request then
    /// carries it as `Authorization: DPoP` with a fresh proof ([`Shared::authorized`]).
    dpop: arc_swap::ArcSwapOption<client::Bound>,
    pub max_message_bytes: usize,
    limits: Limits,
    pub diagnostics: Arc<Diagnostics>,
    /// Where received messages go; a send that fails means the connection is gone.
    incoming: mpsc::Sender<Result<Inbound, Closed>>,
    /// Cancelled when the link is closed: every task of it ends.
    pub stop: CancellationToken,
    /// Which transport this link speaks, once known (`auto` decides at the first POST).
    mode: Mutex<Mode>,
    /// Failed requests in a row: enough of them end the link.
    breaker: Breaker,
    /// Whether the server speaks 2026-07-28 (it answered `server/discover`): a request is then
    /// cancelled by closing its stream, so each request's POST can be aborted.
    modern: AtomicBool,
    /// The POSTs of a 2026-07-28 link's requests in flight, by our id.
    aborts: Mutex<HashMap<u64, CancellationToken>>,
}

/// The transport a link speaks.
#[derive(Debug, Clone)]
pub(super) enum Mode {
    /// Streamable HTTP, before the server answered `initialize` with its session.
    Streamable(streamable::Session),
    /// The legacy transport: messages are POSTed to the endpoint its SSE stream named.
    Legacy(url::Url),
    /// Not decided yet: the first POST tries Streamable HTTP.
    Auto,
}

impl Shared {
    /// Hands one received message to the connection.
    pub async fn deliver(&self, message: Received) {
        let _ = self.incoming.send(Ok(message.into())).await;
    }

    /// Hands on a message that came on the answer stream of our request `id`.
    pub async fn deliver_on_stream_of(&self, message: Received, id: Option<u64>) {
        let inbound = Inbound::Message {
            message,
            on_stream_of: id,
        };
        let _ = self.incoming.send(Ok(inbound)).await;
    }

    /// Parses a received text (an event's data) and hands it on; text that is not JSON-RPC ends
    /// the link.
    pub async fn deliver_text(&self, text: &str) {
        match super::receive(text) {
            Some(Ok(message)) => self.deliver(message).await,
            Some(Err(closed)) => self.close(closed).await,
            None => {}
        }
    }

    /// Tells the connection that the server forgot the HTTP session and a new one is open.
    pub async fn renewed(&self) {
        let _ = self.incoming.send(Ok(Inbound::Renewed)).await;
    }

    /// Ends the link for a reason the connection reports (the supervisor then restarts it, or
    /// — for a refused credential — does not).
    pub async fn close(&self, why: Closed) {
        if !self.stop.is_cancelled() {
            self.stop.cancel();
            self.diagnostics
                .set_http_session(Some(format!("ended: {why}")));
            let _ = self.incoming.send(Err(why)).await;
        }
    }

    /// Records an HTTP failure among the upstream's diagnostics.
    /// The headers every request carries now.
    pub fn headers(&self) -> HeaderMap {
        HeaderMap::clone(&self.headers.load())
    }

    /// `request` (a `method` one to `url`) with its DPoP-bound token and a fresh proof, when
    /// the link has one; as it is otherwise.
    pub fn authorized(
        &self,
        request: reqwest::RequestBuilder,
        method: &str,
        url: &url::Url,
    ) -> reqwest::RequestBuilder {
        match &*self.dpop.load() {
            None => request,
            Some(bound) => bound.authorize(request, method, url, &self.upstream),
        }
    }

    /// Whether a refusal asks the next proof to carry a nonce (RFC 9449 §9): then it is kept and
    /// the request goes again (once).
    pub fn dpop_nonce(&self, headers: &reqwest::header::HeaderMap) -> bool {
        match &*self.dpop.load() {
            Some(bound) => bound.asks_nonce(headers),
            None => false,
        }
    }

    pub fn note(&self, line: String) {
        self.diagnostics.note_http(line);
    }

    /// A request was answered: the breaker's count starts over.
    pub fn succeeded(&self) {
        self.breaker.success();
    }

    /// The POST of `out` failed (`why` names the upstream and the status or transport error):
    /// it fails alone, unless this trips the breaker — then the link ends and every request in
    /// flight fails with why. A failed health ping trips it at once.
    pub async fn failed(&self, out: &Outgoing, why: String) {
        self.note(why.clone());
        if out.is_request(Method::Ping.as_str()) {
            let why = format!("its health ping failed: {why}");
            return self.close(Closed::Io(why)).await;
        }
        if self.breaker.failure() {
            let why = format!(
                "{} requests in a row failed within {} (breaker_failures, breaker_window); the last: {why}",
                self.breaker.failures,
                humantime::format_duration(self.breaker.within)
            );
            return self.close(Closed::Io(why)).await;
        }
        self.fail_request(out, why).await;
    }

    /// The POST of `out` was redirected to another origin (same-origin redirects are followed):
    /// it fails, as any failed POST does, saying where it led.
    pub async fn redirected(
        &self,
        out: &Outgoing,
        status: reqwest::StatusCode,
        location: Option<&str>,
    ) {
        let why = format!(
            "upstream `{}` answered HTTP {status} redirecting to {}, another origin; mcpmux sends its headers and credential only to {}: set its url to the server's own URL",
            self.upstream,
            location.unwrap_or("(no Location)"),
            self.url.origin().ascii_serialization()
        );
        self.failed(out, why).await;
    }

    /// The upstream refused the POST of `out` in a way that says nothing of the link (a 4xx of
    /// its own): noted for status, and that request fails.
    pub async fn refused(&self, out: &Outgoing, why: String) {
        self.note(why.clone());
        self.fail_request(out, why).await;
    }

    /// Answers the request `out` carried with an error of our own (its POST failed), in the
    /// form every other unavailable-upstream error has.
    pub async fn fail_request(&self, out: &Outgoing, why: String) {
        if let Some(id) = out.id {
            let error = RpcError::new(codes::UPSTREAM_UNAVAILABLE, why)
                .with_data(serde_json::json!({ "upstream": self.upstream }));
            self.deliver(Received::Error {
                id: crate::jsonrpc::raw(id.to_string()),
                error: crate::jsonrpc::to_raw(&error),
            })
            .await;
        }
    }

    /// Marks the link 2026-07-28 once `session` was found to speak it.
    fn note_era(&self, session: &streamable::Session) {
        if session.is_modern() {
            self.modern.store(true, Ordering::Relaxed);
        }
    }

    /// What aborts the POST of request `id`, on a 2026-07-28 link (`None` on others: their
    /// requests are cancelled with a notification).
    fn abortable(&self, id: Option<u64>) -> Option<(u64, CancellationToken)> {
        let id = id.filter(|_| self.modern.load(Ordering::Relaxed))?;
        let token = CancellationToken::new();
        lock(&self.aborts).insert(id, token.clone());
        Some((id, token))
    }

    /// Cancels request `id` by closing its POST, when the link is 2026-07-28; false otherwise.
    fn abort(&self, id: u64) -> bool {
        if !self.modern.load(Ordering::Relaxed) {
            return false;
        }
        if let Some(token) = lock(&self.aborts).remove(&id) {
            token.cancel();
        }
        true
    }

    fn mode(&self) -> Mode {
        lock(&self.mode).clone()
    }

    fn set_mode(&self, mode: Mode) {
        *lock(&self.mode) = mode;
    }
}

/// Adds the trace context headers, when the message carries one.
fn traced(message: &Outgoing, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
    match &message.trace {
        None => request,
        Some(trace) => {
            let request = request.header("traceparent", &trace.traceparent);
            match &trace.tracestate {
                Some(state) => request.header("tracestate", state),
                None => request,
            }
        }
    }
}

/// See [`super::http_client`]: for OAuth, so it follows no redirect.
pub(super) fn http_client(config: &RemoteConfig) -> Result<reqwest::Client, StartError> {
    client::pool(config, client::Redirects::None)
}

/// Refreshes the link's OAuth access token a minute before it expires, and sends the new one
/// from then on: a live session never meets an expired token (as long as the refresh token
/// holds).
async fn keep_fresh(shared: Arc<Shared>, config: RemoteConfig, oauth_client: reqwest::Client) {
    let Some(oauth) = config.oauth.as_deref() else {
        return;
    };
    loop {
        let Some(wait) = crate::oauth::refresh_wait(oauth) else {
            return;
        };
        tokio::select! {
            () = shared.stop.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
        }
        match crate::oauth::refresh_if_due(&oauth_client, oauth, false).await {
            // Refreshed here, or (replicas sharing tokens) by another replica meanwhile: the
            // stored token is the one to send from now on.
            Ok(refreshed) => match client::headers(&config) {
                Ok((headers, dpop)) => {
                    shared.headers.store(Arc::new(headers));
                    shared.dpop.store(dpop.map(Arc::new));
                    if refreshed {
                        tracing::info!(upstream = %shared.upstream, "Refreshed its OAuth access token.");
                    }
                }
                Err(e) => {
                    tracing::warn!(upstream = %shared.upstream, error = %e, "Cannot use its refreshed OAuth token.")
                }
            },
            Err(e) => {
                tracing::warn!(upstream = %shared.upstream, error = %e, "Refreshing its OAuth access token failed; it will need `mcpmux login` once the token expires.");
                return;
            }
        }
    }
}

/// Opens a remote link (nothing is sent until the connection's first message, `initialize`).
pub(super) async fn open(
    config: &RemoteConfig,
    upstream: &str,
    limits: Limits,
    diagnostics: Arc<Diagnostics>,
) -> Result<Link, StartError> {
    let client = client::pool(config, client::Redirects::SameOrigin)?;
    // OAuth requests follow no redirect: a pool of their own.
    let oauth_client = match &config.oauth {
        Some(_) => client::pool(config, client::Redirects::None)?,
        None => client.clone(),
    };
    if let Some(oauth) = &config.oauth {
        // An access token about to expire is refreshed before it is used.
        if let Err(e) = crate::oauth::refresh_if_due(&oauth_client, oauth, false).await {
            tracing::warn!(upstream, error = %e, "Refreshing its OAuth tokens failed; it needs `mcpmux login {upstream}`.");
        }
    }
    let (headers, dpop) = client::headers(config)?;
    let (incoming_tx, incoming_rx) = mpsc::channel(READ_QUEUE);
    let (outgoing, outgoing_rx) = mpsc::channel(WRITE_QUEUE);
    // A server found to speak the legacy transport before is asked that way again.
    let kind = match (config.kind, diagnostics.remembered()) {
        (RemoteKind::Auto, Some(remembered)) => remembered,
        (kind, _) => kind,
    };
    let shared = Arc::new(Shared {
        upstream: upstream.to_owned(),
        client,
        url: config.url.clone(),
        headers: ArcSwap::from_pointee(headers),
        dpop: arc_swap::ArcSwapOption::new(dpop.map(Arc::new)),
        max_message_bytes: limits.max_message_bytes,
        limits,
        diagnostics,
        incoming: incoming_tx,
        stop: CancellationToken::new(),
        mode: Mutex::new(Mode::Auto),
        breaker: Breaker::new(&limits),
        modern: AtomicBool::new(false),
        aborts: Mutex::default(),
    });
    let mode = match kind {
        RemoteKind::Auto => Mode::Auto,
        RemoteKind::StreamableHttp => Mode::Streamable(streamable::Session::default()),
        RemoteKind::Sse => Mode::Legacy(legacy::connect(&shared).await?),
    };
    shared.set_mode(mode);
    tokio::spawn(write_loop(Arc::clone(&shared), outgoing_rx));
    if config.oauth.is_some() {
        tokio::spawn(keep_fresh(
            Arc::clone(&shared),
            config.clone(),
            oauth_client,
        ));
    }
    let incoming = futures_util::stream::unfold(incoming_rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    Ok(Link {
        outgoing,
        incoming: Box::pin(incoming),
        pid: None,
        describe: format!("{} {}", kind.as_str(), config.url),
        teardown: Box::new(RemoteTeardown(shared)),
    })
}

/// Takes the connection's messages in order: a request is POSTed in a task of its own (a slow
/// call never holds up the next), a notification or an answer is POSTed before the next message
/// is taken, so the server sees them in the order the connection sent them (`initialized`
/// before the first listing, a cancellation after its request).
async fn write_loop(shared: Arc<Shared>, mut rx: mpsc::Receiver<Outgoing>) {
    // The first message (initialize) decides `auto`; the rest wait for that answer.
    let mut first = true;
    loop {
        let message = tokio::select! {
            () = shared.stop.cancelled() => return,
            message = rx.recv() => match message {
                Some(message) => message,
                None => return,
            },
        };
        let request = message.id.is_some();
        // 2026-07-28 over HTTP: a request is cancelled by closing its stream, not by a message.
        let cancels = message.modern.as_ref().and_then(|m| m.cancels);
        if cancels.is_some_and(|id| shared.abort(id)) {
            continue;
        }
        if first || !request {
            first = false;
            let deadline = if request {
                shared.limits.request
            } else {
                shared.limits.notification
            };
            if tokio::time::timeout(deadline, post(&shared, message))
                .await
                .is_err()
            {
                shared.note(format!(
                    "a POST to {} took longer than {}s; the next message goes on",
                    shared.url,
                    deadline.as_secs()
                ));
            }
        } else {
            tokio::spawn(post_owned(Arc::clone(&shared), message));
        }
    }
}

/// A request's POST, in its own task, ended at the longest deadline the request can have (or,
/// on a 2026-07-28 link, when the request is cancelled).
async fn post_owned(shared: Arc<Shared>, message: Outgoing) {
    let deadline = shared.limits.request;
    let abortable = shared.abortable(message.id);
    let posting = tokio::time::timeout(deadline, post(&shared, message));
    match abortable {
        None => {
            let _ = posting.await;
        }
        Some((id, token)) => {
            tokio::select! {
                () = token.cancelled() => {}
                _ = posting => {}
            }
            lock(&shared.aborts).remove(&id);
        }
    }
}

/// POSTs one message in the link's mode.
async fn post(shared: &Arc<Shared>, message: Outgoing) {
    match shared.mode() {
        Mode::Legacy(endpoint) => legacy::post(shared, &endpoint, message).await,
        Mode::Streamable(session) => {
            let probe = message.is(Method::Discover.as_str());
            let _ = streamable::post(shared, &session, message, false).await;
            if probe {
                shared.note_era(&session);
            }
        }
        // The probe decides the era, not the transport: a server that refuses it may still speak
        // Streamable HTTP (with the handshake) or the legacy transport.
        Mode::Auto if message.is(Method::Discover.as_str()) => {
            let session = streamable::Session::default();
            let _ = streamable::post(shared, &session, message, false).await;
            if session.is_modern() {
                shared.note_era(&session);
                shared.diagnostics.remember(RemoteKind::StreamableHttp);
                shared.set_mode(Mode::Streamable(session));
            }
        }
        Mode::Auto => {
            let session = streamable::Session::default();
            shared.set_mode(Mode::Streamable(session.clone()));
            match streamable::post(shared, &session, message.clone(), true).await {
                Ok(()) => shared.diagnostics.remember(RemoteKind::StreamableHttp),
                // A 4xx to the first POST: the server speaks the legacy transport.
                Err(status) => {
                    tracing::info!(upstream = %shared.upstream, %status, "The server refused a Streamable HTTP POST; trying the legacy HTTP+SSE transport.");
                    match legacy::connect(shared).await {
                        Ok(endpoint) => {
                            shared.diagnostics.remember(RemoteKind::Sse);
                            shared.set_mode(Mode::Legacy(endpoint.clone()));
                            legacy::post(shared, &endpoint, message).await;
                        }
                        Err(e) => {
                            let why = format!(
                                "it refused Streamable HTTP ({status}) and the legacy HTTP+SSE transport ({e})"
                            );
                            shared.close(Closed::Io(why)).await;
                        }
                    }
                }
            }
        }
    }
}

/// Closing a remote link ends its tasks and, for Streamable HTTP, its session (DELETE).
struct RemoteTeardown(Arc<Shared>);

impl Teardown for RemoteTeardown {
    fn close(self: Box<Self>, grace: Duration) -> BoxFuture<'static, ()> {
        let shared = self.0;
        shared.stop.cancel();
        Box::pin(async move {
            if let Mode::Streamable(session) = shared.mode() {
                let _ = tokio::time::timeout(grace, streamable::end(&shared, &session)).await;
            }
        })
    }
}
