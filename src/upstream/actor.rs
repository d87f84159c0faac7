//! The upstream actor: owns one connection's life. It starts the child, runs the handshake and the
//! catalog read off its message loop, publishes the catalog to the router, re-reads a listing when
//! the server says it changed, and ends the child's whole process group when it stops. It fails
//! (so the supervisor restarts it) when the connection becomes unusable.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ractor::{Actor, ActorProcessingErr, ActorRef};

use super::connection::{Connection, Event, STDOUT_CLOSED};
use super::handle::{State as UpState, UpstreamError, UpstreamHandle};
use super::handshake::{self, UpstreamCatalog, UpstreamItem};
use super::process::{self, ChildGuard};
use crate::mcp::ListKind;
use crate::router::RouterHandle;

/// The stop reason of an upstream stopped for being idle (the supervisor does not restart it).
pub const IDLE_STOP: &str = "idle";
/// Bounds of the health/idle timer.
const MIN_TICK: Duration = Duration::from_millis(100);
const MAX_TICK: Duration = Duration::from_secs(30);
/// How long to wait for an exit status after the child closed its stdout, to report it.
const EXIT_STATUS_WAIT: Duration = Duration::from_secs(1);

pub struct UpstreamActor;

#[derive(Debug)]
pub enum UpstreamMsg {
    /// The handshake and first catalog read finished.
    Started(Result<UpstreamCatalog, String>),
    /// The connection or the process reported something.
    Connection(ConnectionEvent),
    /// A listing was re-read after a list_changed notification.
    Refreshed(ListKind, Result<Vec<UpstreamItem>, String>),
    /// Time to check health (ping) and idleness.
    Tick,
    /// The health ping's outcome.
    Pinged(Result<(), String>),
}

/// Events from the connection's tasks and the child watcher.
#[derive(Debug)]
pub enum ConnectionEvent {
    ListChanged(ListKind),
    StdoutClosed(String),
    Exited(String),
}

pub struct UpstreamState {
    handle: UpstreamHandle,
    router: RouterHandle,
    conn: Arc<Connection>,
    guard: Option<ChildGuard>,
    exit: tokio::sync::watch::Receiver<Option<String>>,
    catalog: Option<UpstreamCatalog>,
    /// Listings being re-read, and those that changed again meanwhile.
    refreshing: HashSet<ListKind>,
    stale: HashSet<ListKind>,
    ticker: Option<tokio::task::JoinHandle<()>>,
    last_ping: Instant,
    pinging: bool,
}

impl Actor for UpstreamActor {
    type Msg = UpstreamMsg;
    type State = UpstreamState;
    type Arguments = (UpstreamHandle, RouterHandle);

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        (handle, router): Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        handle.clear_stderr_tail();
        let mut child = process::spawn(handle.config())?;
        let pid = child.id();
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err("the child's pipes were not set up".into());
        };
        let events = myself.clone();
        let scope = handle.scope().map(str::to_owned);
        let conn = Connection::start(&handle, scope, stdin, stdout, stderr, move |event| {
            let event = match event {
                Event::ListChanged(kind) => ConnectionEvent::ListChanged(kind),
                Event::Closed(reason) => ConnectionEvent::StdoutClosed(reason),
            };
            let _ = events.send_message(UpstreamMsg::Connection(event));
        });
        let (exit_tx, exit) = tokio::sync::watch::channel(None);
        let exited = myself.clone();
        let guard = ChildGuard::watch(child, move |how| {
            exit_tx.send_replace(Some(how.clone()));
            let _ = exited.send_message(UpstreamMsg::Connection(ConnectionEvent::Exited(how)));
        });
        handle.update(|s| s.pid = pid);
        tracing::info!(upstream = %handle.name(), pid, command = %handle.config().command, "Started upstream process.");
        Ok(UpstreamState {
            handle,
            router,
            conn,
            guard: Some(guard),
            exit,
            catalog: None,
            refreshing: HashSet::new(),
            stale: HashSet::new(),
            ticker: None,
            last_ping: Instant::now(),
            pinging: false,
        })
    }

    async fn post_start(
        &self,
        myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let conn = Arc::clone(&state.conn);
        let config = state.handle.config().clone();
        let max_items = state.router.max_items_per_upstream();
        // A per-session instance serves calls only; the shared instance serves the catalog.
        let scoped = state.handle.scope().is_some();
        tokio::spawn(async move {
            let startup = async {
                let info =
                    Arc::new(handshake::initialize(&conn, config.policy.startup_timeout).await?);
                if scoped {
                    return Ok(UpstreamCatalog {
                        info,
                        lists: Default::default(),
                    });
                }
                handshake::read_catalog(
                    &conn,
                    info,
                    config.policy.request_timeout,
                    max_items,
                    &config.name,
                )
                .await
            };
            let outcome = tokio::time::timeout(config.policy.startup_timeout, startup)
                .await
                .unwrap_or_else(|_| {
                    Err(format!(
                        "it did not finish starting within {}s",
                        config.policy.startup_timeout.as_secs()
                    ))
                });
            let _ = myself.send_message(UpstreamMsg::Started(outcome));
        });
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
            UpstreamMsg::Started(Err(why)) => {
                Err(self.fail(state, format!("failed to start: {why}")).await)
            }
            UpstreamMsg::Connection(ConnectionEvent::ListChanged(kind)) => {
                if state.catalog.is_some() && state.handle.scope().is_none() {
                    // One re-read per listing at a time; a burst of notifications costs one more.
                    if state.refreshing.contains(&kind) {
                        state.stale.insert(kind);
                    } else {
                        state.refreshing.insert(kind);
                        self.refresh(&myself, state, kind);
                    }
                }
                Ok(())
            }
            UpstreamMsg::Refreshed(kind, outcome) => {
                state.refreshing.remove(&kind);
                match outcome {
                    Ok(items) => {
                        if let Some(catalog) = state.catalog.as_mut() {
                            catalog.lists.insert(kind, Arc::new(items));
                            state.router.publish(&state.handle, catalog.clone()).await;
                        }
                        if state.handle.state() == UpState::Degraded {
                            state.handle.set_state(UpState::Ready, None);
                        }
                    }
                    Err(why) => {
                        tracing::warn!(upstream = %state.handle.name(), listing = kind.method(), error = %why, "Could not re-read a changed listing.");
                        let why = format!("could not re-read its {}: {why}", kind.field());
                        state.handle.set_state(UpState::Degraded, Some(why));
                    }
                }
                if state.stale.remove(&kind) {
                    state.refreshing.insert(kind);
                    self.refresh(&myself, state, kind);
                }
                Ok(())
            }
            UpstreamMsg::Tick => {
                let policy = &state.handle.config().policy;
                let idle = policy
                    .idle_stop
                    .is_some_and(|limit| state.handle.idle_for() >= limit);
                if idle && state.handle.scope().is_none() && state.conn.in_flight() == 0 {
                    tracing::info!(upstream = %state.handle.name(), "Stopping an idle upstream; the next call starts it again.");
                    myself.stop(Some(IDLE_STOP.to_owned()));
                    return Ok(());
                }
                let due = policy
                    .ping_interval
                    .is_some_and(|every| state.last_ping.elapsed() >= every);
                if due && !state.pinging {
                    state.pinging = true;
                    state.last_ping = Instant::now();
                    let conn = Arc::clone(&state.conn);
                    let timeout = policy.ping_timeout;
                    tokio::spawn(async move {
                        let answer = conn.request("ping", None, timeout, None).await;
                        let outcome = answer.map(|_| ()).map_err(|e| match e {
                            UpstreamError::Timeout { .. } => format!(
                                "it stopped answering: no answer to ping within {}s",
                                timeout.as_secs_f32()
                            ),
                            other => other.to_string(),
                        });
                        let _ = myself.send_message(UpstreamMsg::Pinged(outcome));
                    });
                }
                Ok(())
            }
            UpstreamMsg::Pinged(Ok(())) => {
                state.pinging = false;
                Ok(())
            }
            UpstreamMsg::Pinged(Err(why)) => Err(self.fail(state, why).await),
            UpstreamMsg::Connection(ConnectionEvent::StdoutClosed(reason))
                if reason != STDOUT_CLOSED =>
            {
                // mcpmux stopped reading because the upstream broke the protocol: that is the cause.
                Err(self.fail(state, reason).await)
            }
            UpstreamMsg::Connection(ConnectionEvent::StdoutClosed(reason)) => {
                let mut exit = state.exit.clone();
                let how = tokio::time::timeout(EXIT_STATUS_WAIT, exit.wait_for(Option::is_some))
                    .await
                    .ok()
                    .and_then(|r| r.ok().and_then(|v| v.clone()))
                    .unwrap_or(reason);
                Err(self.fail(state, how).await)
            }
            UpstreamMsg::Connection(ConnectionEvent::Exited(how)) => {
                Err(self.fail(state, how).await)
            }
        }
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        teardown(state, "mcpmux stopped it").await;
        Ok(())
    }
}

impl UpstreamActor {
    /// The handshake and catalog read succeeded: publish, serve, restore what sessions had
    /// asked of the previous process (subscriptions, log level), start the health timer.
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
        tracing::info!(upstream = %h.name(), version = catalog.info.protocol_version, offers = %counts.join(", "), "Upstream is ready.");
        // Restore what sessions asked of the previous process before anyone else reaches it.
        if let Some(bus) = h.bus() {
            let timeout = h.config().policy.request_timeout;
            for (method, params) in bus.resume(h) {
                if let Err(e) = state
                    .conn
                    .request(&method, Some(&params), timeout, None)
                    .await
                {
                    tracing::warn!(upstream = %h.name(), method, error = %e, "Could not restore session state after a start.");
                }
            }
        }
        h.update(|s| s.info = Some(Arc::clone(&catalog.info)));
        h.set_connection(Some(Arc::clone(&state.conn)));
        if h.scope().is_none() {
            state.router.publish(h, catalog.clone()).await;
        }
        h.set_state(UpState::Ready, None);
        state.catalog = Some(catalog);
        let policy = &h.config().policy;
        let checks = [policy.ping_interval, policy.idle_stop.map(|d| d / 4)];
        if let Some(every) = checks.into_iter().flatten().min() {
            let every = every.clamp(MIN_TICK, MAX_TICK);
            state.ticker = Some(myself.send_interval(every, || UpstreamMsg::Tick));
        }
    }

    fn refresh(&self, myself: &ActorRef<UpstreamMsg>, state: &UpstreamState, kind: ListKind) {
        let conn = Arc::clone(&state.conn);
        let config = state.handle.config().clone();
        let max_items = state.router.max_items_per_upstream();
        let myself = myself.clone();
        tokio::spawn(async move {
            let items = handshake::read_list(
                &conn,
                kind,
                config.policy.request_timeout,
                max_items,
                &config.name,
            )
            .await;
            let _ = myself.send_message(UpstreamMsg::Refreshed(kind, items));
        });
    }

    /// Cleans up before the actor fails, and builds the error the supervisor will read: what
    /// happened, plus the last thing the server wrote to stderr.
    async fn fail(&self, state: &mut UpstreamState, what: String) -> ActorProcessingErr {
        teardown(state, &what).await;
        let tail = state.handle.stderr_tail();
        match tail.last() {
            Some(last) => format!("{what} (its stderr said: {last})").into(),
            None => what.into(),
        }
    }
}

/// Ends the connection (its waiting callers learn `reason` at once) and the process group. The
/// catalog stays with the router: the supervisor decides whether it is withdrawn.
async fn teardown(state: &mut UpstreamState, reason: &str) {
    if let Some(ticker) = state.ticker.take() {
        ticker.abort();
    }
    state.handle.set_connection(None);
    state.conn.close(reason);
    if let Some(guard) = state.guard.take() {
        guard
            .terminate(state.handle.config().policy.shutdown_grace)
            .await;
    }
}
