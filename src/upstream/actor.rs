//! The upstream actor: owns one connection's life. It opens the transport, runs the handshake
//! and the catalog read off its message loop, publishes the catalog, re-reads a listing when the
//! server says it changed, pings for health, stops when idle, and closes the transport (for a
//! child, its whole process group) when it stops. It fails (so the supervisor restarts it) when
//! the connection becomes unusable. Its messages and state are private: the supervisor spawns it
//! with [`spawn`] and knows it only as an actor cell.
//!
//! Some handlers await for a while on purpose (restoring session state after a start, closing
//! the transport within its grace): this is the control plane, and calls never queue behind it.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, SpawnErr};

use super::catalog::UpstreamCatalog;
use super::connection::{Connection, Event};
use super::error::{Closed, Reply, StartError, StopReason, UpstreamError};
use super::handle::UpstreamHandle;
use super::handshake::{self, Opened};
use super::status::Phase;
use super::transport::{self, Teardown};
use crate::config::{Protocol, RemoteKind, Transport};
use crate::mcp::ListKind;
use crate::mcp::method::Method;

/// Bounds of the health/idle timer.
const MIN_TICK: Duration = Duration::from_millis(100);
const MAX_TICK: Duration = Duration::from_secs(30);

/// Starts the actor for `handle`, linked to `supervisor` (which sees it fail or stop).
pub async fn spawn(handle: UpstreamHandle, supervisor: ActorCell) -> Result<ActorCell, SpawnErr> {
    let (actor, _) = Actor::spawn_linked(None, UpstreamActor, handle, supervisor).await?;
    Ok(actor.get_cell())
}

struct UpstreamActor;

#[derive(Debug)]
enum UpstreamMsg {
    /// The handshake and first catalog read finished.
    Started(Result<UpstreamCatalog, StartError>),
    /// The connection reported something.
    Connection(Event),
    /// A listing was re-read after a list_changed notification.
    Refreshed(
        ListKind,
        Result<handshake::Listing, super::error::HandshakeError>,
    ),
    /// Time to check health (ping) and idleness.
    Tick,
    /// The health ping's outcome.
    Pinged(Result<(), PingFailed>),
}

/// Why a health ping failed.
#[derive(Debug, thiserror::Error)]
pub enum PingFailed {
    #[error("it stopped answering: no answer to {method} within {}s", .timeout.as_secs_f32())]
    Silent {
        method: &'static str,
        timeout: Duration,
    },
    #[error("{0}")]
    Failed(#[source] UpstreamError),
}

struct UpstreamState {
    handle: UpstreamHandle,
    conn: Arc<Connection>,
    teardown: Option<Box<dyn Teardown>>,
    catalog: Option<UpstreamCatalog>,
    /// Listings being re-read, and those that changed again meanwhile.
    refreshing: HashSet<ListKind>,
    stale: HashSet<ListKind>,
    ticker: Option<tokio::task::JoinHandle<()>>,
    last_ping: Instant,
    pinging: bool,
    /// The `subscriptions/listen` stream kept open with a 2026-07-28 upstream.
    listening: Option<tokio::task::JoinHandle<()>>,
}

impl Actor for UpstreamActor {
    type Msg = UpstreamMsg;
    type State = UpstreamState;
    type Arguments = UpstreamHandle;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        handle: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        handle.diagnostics().clear();
        let (conn, link) = connect(&handle, &myself).await?;
        Ok(UpstreamState {
            handle,
            conn,
            teardown: Some(link),
            catalog: None,
            refreshing: HashSet::new(),
            stale: HashSet::new(),
            ticker: None,
            last_ping: Instant::now(),
            pinging: false,
            listening: None,
        })
    }

    async fn post_start(
        &self,
        myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        start(&myself, state, state.handle.config().protocol);
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            UpstreamMsg::Started(Ok(catalog)) => {
                self.ready(&myself, state, catalog).await;
                Ok(())
            }
            UpstreamMsg::Started(Err(StartError::EndedOnProbe)) => {
                tracing::info!(upstream = %state.handle.name(), "It ended on the server/discover probe, as some handshake-era servers do; starting it again with the initialize handshake.");
                teardown(state, &Closed::Stopped).await;
                let (conn, link) = connect(&state.handle, &myself).await?;
                state.conn = conn;
                state.teardown = Some(link);
                start(&myself, state, Protocol::Legacy);
                Ok(())
            }
            UpstreamMsg::Started(Err(why)) => {
                if let Some(Closed::Unauthorized(refused)) = state.conn.closed() {
                    self.unauthorized(&myself, state, refused).await;
                    return Ok(());
                }
                Err(self.fail(state, format!("failed to start: {why}")).await)
            }
            UpstreamMsg::Connection(Event::ListChanged(kind)) => {
                self.changed(&myself, state, kind);
                Ok(())
            }
            UpstreamMsg::Connection(Event::Renewed) => {
                self.renewed(&myself, state);
                Ok(())
            }
            UpstreamMsg::Refreshed(kind, outcome) => {
                self.refreshed(&myself, state, kind, outcome);
                Ok(())
            }
            UpstreamMsg::Tick => {
                self.tick(&myself, state);
                Ok(())
            }
            UpstreamMsg::Pinged(Ok(())) => {
                state.pinging = false;
                Ok(())
            }
            UpstreamMsg::Pinged(Err(why)) => Err(self.fail(state, why.to_string()).await),
            UpstreamMsg::Connection(Event::Closed(Closed::Unauthorized(refused))) => {
                self.unauthorized(&myself, state, refused).await;
                Ok(())
            }
            UpstreamMsg::Connection(Event::Closed(Closed::SessionExpired(why))) => {
                // Not a failure: the supervisor starts a new session at once, and calls made
                // meanwhile wait for it (as they do for any upstream that is starting).
                tracing::info!(upstream = %state.handle.name(), session = state.handle.scope(), reason = %why, "The upstream's HTTP session expired; starting a new one.");
                state.handle.set_phase(Phase::Starting, Some(why.clone()));
                teardown(state, &Closed::SessionExpired(why)).await;
                myself.stop(Some(StopReason::SessionExpired.as_str().to_owned()));
                Ok(())
            }
            // While it starts, its start reports how the connection ended (every request of the
            // start fails with why), and may start it again (a server that exits on the probe).
            UpstreamMsg::Connection(Event::Closed(_)) if state.catalog.is_none() => Ok(()),
            UpstreamMsg::Connection(Event::Closed(closed)) => {
                Err(self.fail(state, closed.to_string()).await)
            }
        }
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        teardown(state, &Closed::Stopped).await;
        Ok(())
    }
}

impl UpstreamActor {
    /// The handshake and catalog read succeeded: restore what sessions had asked of the previous
    /// process (subscriptions, log level), publish, serve, start the health timer.
    async fn ready(
        &self,
        myself: &ActorRef<UpstreamMsg>,
        state: &mut UpstreamState,
        catalog: UpstreamCatalog,
    ) {
        let h = &state.handle;
        let counts: Vec<String> = catalog
            .lists
            .iter()
            .map(|(k, v)| format!("{} {}", v.len(), k.field()))
            .collect();
        tracing::info!(upstream = %h.name(), session = h.scope(), version = %catalog.info.protocol_version, offers = %counts.join(", "), "Upstream is ready.");
        // Restore what sessions asked of the previous process before anyone else reaches it (a
        // 2026-07-28 upstream keeps no such state: its resources are in the listen filter).
        let modern = catalog.info.protocol_version.is_modern();
        if let Some(events) = h.events().filter(|_| !modern) {
            let timeout = h.config().policy.request_timeout;
            for (method, params) in events.resume(h.id()) {
                if let Err(e) = state
                    .conn
                    .request(&method, Some(&params), timeout, None)
                    .await
                {
                    tracing::warn!(upstream = %h.name(), method, error = %e, "Could not restore session state after a start.");
                }
            }
        }
        h.update(|s| {
            s.info = Some(Arc::clone(&catalog.info));
            s.times_ready += 1;
        });
        h.set_connection(Some(Arc::clone(&state.conn)));
        h.publish_catalog(catalog.clone());
        h.set_phase(Phase::Ready, None);
        let info = Arc::clone(&catalog.info);
        let kinds: Vec<ListKind> = catalog.lists.keys().copied().collect();
        state.catalog = Some(catalog);
        for kind in kinds {
            relist_when_stale(myself, state, kind, false);
        }
        if modern {
            state.listening = Some(listen(&state.conn, h, &info));
        }
        let policy = &h.config().policy;
        let checks = [policy.ping_interval, policy.idle_stop.map(|d| d / 4)];
        if let Some(every) = checks.into_iter().flatten().min() {
            let every = every.clamp(MIN_TICK, MAX_TICK);
            state.ticker = Some(myself.send_interval(every, || UpstreamMsg::Tick));
        }
    }

    /// A listing changed: it is read again (one re-read per listing at a time; a burst of
    /// notifications costs one more).
    fn changed(&self, myself: &ActorRef<UpstreamMsg>, state: &mut UpstreamState, kind: ListKind) {
        if state.catalog.is_none() || state.handle.catalog_link().is_none() {
            return;
        }
        if state.refreshing.contains(&kind) {
            state.stale.insert(kind);
        } else {
            state.refreshing.insert(kind);
            self.refresh(myself, state, kind);
        }
    }

    /// The server forgot the HTTP session and the transport opened a new one (the calls in
    /// flight and those that came meanwhile went on): what the old session held is given again —
    /// the subscriptions and log level hosts asked for — and every listing is read again, in case
    /// the server restarted with another catalog.
    fn renewed(&self, myself: &ActorRef<UpstreamMsg>, state: &mut UpstreamState) {
        let h = &state.handle;
        tracing::info!(upstream = %h.name(), session = h.scope(), "The upstream forgot mcpmux's HTTP session; a new one is open, and what the old one held is asked for again.");
        if let Some(events) = h.events() {
            let restore = events.resume(h.id());
            let conn = Arc::clone(&state.conn);
            let timeout = h.config().policy.request_timeout;
            let name = h.name().to_owned();
            tokio::spawn(async move {
                for (method, params) in restore {
                    if let Err(e) = conn.request(&method, Some(&params), timeout, None).await {
                        tracing::warn!(upstream = %name, method, error = %e, "Could not restore session state in a renewed HTTP session.");
                    }
                }
            });
        }
        let kinds: Vec<ListKind> = (state.catalog.iter())
            .flat_map(|c| c.lists.keys().copied())
            .collect();
        for kind in kinds {
            self.changed(myself, state, kind);
        }
    }

    fn refresh(&self, myself: &ActorRef<UpstreamMsg>, state: &UpstreamState, kind: ListKind) {
        let Some(budget) = state.handle.catalog_link().map(|l| l.budget) else {
            return;
        };
        let conn = Arc::clone(&state.conn);
        let config = state.handle.config().clone();
        let myself = myself.clone();
        tokio::spawn(async move {
            let timeout = config.policy.request_timeout;
            let items = handshake::read_list(&conn, kind, timeout, budget, &config.name).await;
            let _ = myself.send_message(UpstreamMsg::Refreshed(kind, items));
        });
    }

    fn refreshed(
        &self,
        myself: &ActorRef<UpstreamMsg>,
        state: &mut UpstreamState,
        kind: ListKind,
        outcome: Result<handshake::Listing, super::error::HandshakeError>,
    ) {
        state.refreshing.remove(&kind);
        match outcome {
            Ok(listing) => {
                if let Some(catalog) = state.catalog.as_mut() {
                    catalog.lists.insert(kind, Arc::new(listing.items));
                    match listing.ttl_ms {
                        Some(ttl) => catalog.ttl_ms.insert(kind, ttl),
                        None => catalog.ttl_ms.remove(&kind),
                    };
                    state.handle.publish_catalog(catalog.clone());
                }
                relist_when_stale(myself, state, kind, false);
                if state.handle.phase() == Phase::Degraded {
                    state.handle.set_phase(Phase::Ready, None);
                }
            }
            Err(why) => {
                tracing::warn!(upstream = %state.handle.name(), listing = kind.method(), error = %why, "Could not re-read a changed listing.");
                let why = format!("could not re-read its {}: {why}", kind.field());
                state.handle.set_phase(Phase::Degraded, Some(why));
                relist_when_stale(myself, state, kind, true);
            }
        }
        if state.stale.remove(&kind) {
            state.refreshing.insert(kind);
            self.refresh(myself, state, kind);
        }
    }

    /// Stops a shared upstream unused for longer than `idle_stop`; pings one that is due.
    fn tick(&self, myself: &ActorRef<UpstreamMsg>, state: &mut UpstreamState) {
        let policy = &state.handle.config().policy;
        let idle = policy
            .idle_stop
            .is_some_and(|limit| state.handle.idle_for() >= limit);
        if idle && state.handle.scope().is_none() && state.conn.in_flight() == 0 {
            tracing::info!(upstream = %state.handle.name(), "Stopping an idle upstream; the next call starts it again.");
            myself.stop(Some(StopReason::Idle.as_str().to_owned()));
            return;
        }
        let due = policy
            .ping_interval
            .is_some_and(|every| state.last_ping.elapsed() >= every);
        if due && !state.pinging {
            state.pinging = true;
            state.last_ping = Instant::now();
            let conn = Arc::clone(&state.conn);
            let timeout = policy.ping_timeout;
            let myself = myself.clone();
            // A 2026-07-28 server has no ping: its discover answers as cheaply.
            let method = match conn.is_modern() {
                true => Method::Discover.as_str(),
                false => Method::Ping.as_str(),
            };
            tokio::spawn(async move {
                let answer = conn.request(method, None, timeout, None).await;
                let outcome = answer.map(|_| ()).map_err(|e| match e {
                    UpstreamError::Timeout { .. } => PingFailed::Silent { method, timeout },
                    other => PingFailed::Failed(other),
                });
                let _ = myself.send_message(UpstreamMsg::Pinged(outcome));
            });
        }
    }

    /// A remote server refused the credential: stop without failing, so no restart storm
    /// follows; calls fail at once naming the refusal until an operator restarts it.
    async fn unauthorized(
        &self,
        myself: &ActorRef<UpstreamMsg>,
        state: &mut UpstreamState,
        refused: String,
    ) {
        if matches!(
            state.handle.phase(),
            Phase::Unauthorized | Phase::NeedsLogin
        ) {
            return;
        }
        let signs_in = state.handle.oauth().is_some();
        let name = state.handle.name().to_owned();
        let (phase, refused) = if state.handle.signs_in_each_principal() {
            tracing::warn!(upstream = %name, error = %refused, "A principal's own tokens were refused; its next call asks it to sign in again.");
            let why = format!(
                "the caller's own sign-in to `{name}` was refused ({refused}); call again to sign in again"
            );
            (Phase::NeedsLogin, why)
        } else if signs_in {
            tracing::warn!(upstream = %name, error = %refused, "The upstream wants an OAuth sign-in; not retrying it until `mcpmux login {name}`.");
            let why = format!("it needs a sign-in: run `mcpmux login {name}` ({refused})");
            (Phase::NeedsLogin, why)
        } else {
            tracing::error!(upstream = %name, error = %refused, "The upstream refused mcpmux's credential; not retrying it until its credential is fixed and it is restarted (mcpmux restart NAME).");
            (Phase::Unauthorized, refused)
        };
        state.handle.set_phase(phase, Some(refused.clone()));
        teardown(state, &Closed::Unauthorized(refused)).await;
        myself.stop(Some(StopReason::Unauthorized.as_str().to_owned()));
    }

    /// Cleans up before the actor fails, and builds the error the supervisor will read: what
    /// happened, plus the last thing the server wrote to stderr.
    async fn fail(&self, state: &mut UpstreamState, what: String) -> ActorProcessingErr {
        // Calls from now on say why, not "ready" (the supervisor decides what comes next).
        state
            .handle
            .set_phase(Phase::Restarting, Some(what.clone()));
        teardown(state, &Closed::Failed(what.clone())).await;
        match state.handle.diagnostics().last() {
            Some(last) => format!("{what} (its stderr said: {last})").into(),
            None => what.into(),
        }
    }
}

/// Ends the connection (its waiting callers learn `reason` at once) and closes the transport. The
/// catalog stays published: the supervisor decides whether it is withdrawn.
async fn teardown(state: &mut UpstreamState, reason: &Closed) {
    if let Some(ticker) = state.ticker.take() {
        ticker.abort();
    }
    if let Some(listening) = state.listening.take() {
        listening.abort();
    }
    state.handle.set_connection(None);
    state.conn.close(reason);
    let grace = state.handle.config().policy.shutdown_grace;
    state.handle.close_companion(reason, grace).await;
    if let Some(teardown) = state.teardown.take() {
        teardown
            .close(state.handle.config().policy.shutdown_grace)
            .await;
    }
}

/// Opens the transport `handle` is configured with and the connection over it, whose events go
/// to the actor `myself`.
async fn connect(
    handle: &UpstreamHandle,
    myself: &ActorRef<UpstreamMsg>,
) -> Result<(Arc<Connection>, Box<dyn Teardown>), StartError> {
    let link = transport::open(handle.config(), Arc::clone(handle.diagnostics())).await?;
    let ctx = handle.context();
    let events = myself.clone();
    let conn = Connection::start(ctx, link.outgoing, link.incoming, move |event| {
        let _ = events.send_message(UpstreamMsg::Connection(event));
    });
    handle.update(|s| s.pid = link.pid);
    tracing::info!(upstream = %handle.name(), session = handle.scope(), pid = link.pid, transport = %link.describe, "Started upstream process.");
    Ok((conn, link.teardown))
}

/// Opens the connection in its era (as `protocol` allows) and reads the catalog, off the
/// actor's message loop; the outcome comes back as [`UpstreamMsg::Started`].
fn start(myself: &ActorRef<UpstreamMsg>, state: &UpstreamState, protocol: Protocol) {
    let conn = Arc::clone(&state.conn);
    let config = state.handle.config().clone();
    let myself = myself.clone();
    // A per-session instance serves calls only; the shared instance serves the catalog.
    let budget = state.handle.catalog_link().map(|l| l.budget);
    let remote = matches!(config.transport, Transport::Remote(_));
    // The legacy HTTP+SSE transport is 2024-11-05's: there is nothing to probe.
    let sse = Some(RemoteKind::Sse);
    let protocol = match &config.transport {
        Transport::Remote(r) if r.kind == RemoteKind::Sse => Protocol::Legacy,
        Transport::Remote(_) if state.handle.diagnostics().remembered() == sse => Protocol::Legacy,
        _ => protocol,
    };
    tokio::spawn(async move {
        let timeout = config.policy.startup_timeout;
        let startup = async {
            let info = match handshake::open(&conn, protocol, remote, timeout).await {
                Ok(Opened::Ready(info)) => Arc::new(info),
                Ok(Opened::EndedOnProbe) => return Err(StartError::EndedOnProbe),
                Err(why) => return Err(StartError::Handshake(Arc::new(why))),
            };
            let Some(budget) = budget else {
                return Ok(UpstreamCatalog {
                    info,
                    lists: Default::default(),
                    ttl_ms: Default::default(),
                });
            };
            let request_timeout = config.policy.request_timeout;
            handshake::read_catalog(&conn, info, request_timeout, budget, &config.name)
                .await
                .map_err(|why| StartError::Handshake(Arc::new(why)))
        };
        let outcome = tokio::time::timeout(timeout, startup)
            .await
            .unwrap_or(Err(StartError::Timeout(timeout)));
        let _ = myself.send_message(UpstreamMsg::Started(outcome));
    });
}

/// How long to wait before opening a `subscriptions/listen` stream again after it failed.
const LISTEN_RETRY: Duration = Duration::from_secs(1);

/// Keeps a `subscriptions/listen` stream open with a 2026-07-28 upstream for as long as its
/// connection lives: for the list changes it announces (they come back as the same list_changed
/// notifications a handshake-era server sends) and the resources hosts subscribed to (the
/// stream is opened again when that set changes). It is opened again after each request timeout,
/// as every request of mcpmux's is bounded.
fn listen(
    conn: &Arc<Connection>,
    handle: &UpstreamHandle,
    info: &Arc<super::catalog::ServerInfo>,
) -> tokio::task::JoinHandle<()> {
    let conn = Arc::clone(conn);
    let info = Arc::clone(info);
    let mut resources = handle.watched_resources();
    let timeout = handle.config().policy.request_timeout;
    let name = handle.name().to_owned();
    tokio::spawn(async move {
        loop {
            let params = super::modern::listen_params(&info, &resources.borrow_and_update());
            let Some(params) = params else {
                // Nothing to listen for until a host subscribes to a resource.
                if resources.changed().await.is_err() {
                    return;
                }
                continue;
            };
            let listened = tokio::select! {
                answer = conn.request(Method::Listen.as_str(), Some(&params), timeout, None) => Some(answer),
                changed = resources.changed() => match changed {
                    Ok(()) => None,
                    Err(_) => return,
                },
            };
            if conn.closed().is_some() {
                return;
            }
            match listened {
                Some(Ok(Reply::Error(error))) => {
                    tracing::warn!(upstream = %name, error = %error.get(), "The upstream refused subscriptions/listen; its list changes and resource updates are not seen until it restarts.");
                    return;
                }
                Some(Err(UpstreamError::Timeout { .. })) | None => {}
                Some(outcome) => {
                    tracing::debug!(upstream = %name, ?outcome, "Its subscriptions/listen stream ended; opening it again.");
                    tokio::time::sleep(LISTEN_RETRY).await;
                }
            }
        }
    })
}

/// Shortest and longest wait before a listing that is never announced as changed is read again.
const MIN_RELIST: Duration = Duration::from_secs(30);
const MAX_RELIST: Duration = Duration::from_secs(3600);

/// A 2026-07-28 upstream that does not announce changes to its `kind` listing (no `listChanged`)
/// is listed again once the listing's `ttlMs` has passed (within [`MIN_RELIST`]..[`MAX_RELIST`],
/// plus up to 10% jitter so upstreams that said the same do not come due together; after a
/// failed re-read, twice as long).
fn relist_when_stale(
    myself: &ActorRef<UpstreamMsg>,
    state: &UpstreamState,
    kind: ListKind,
    failed: bool,
) {
    let Some(catalog) = &state.catalog else {
        return;
    };
    let info = &catalog.info;
    let announced = info.capabilities[kind.capability()]["listChanged"] == true;
    if !info.protocol_version.is_modern() || announced || state.handle.catalog_link().is_none() {
        return;
    }
    let ttl = Duration::from_millis(catalog.ttl_ms(kind)).clamp(MIN_RELIST, MAX_RELIST);
    let ttl = if failed {
        (ttl * 2).min(MAX_RELIST)
    } else {
        ttl
    };
    let wait = ttl + ttl.mul_f64(rand::random::<f64>() * 0.1);
    myself.send_after(wait, move || {
        UpstreamMsg::Connection(Event::ListChanged(kind))
    });
}
