//! The upstream actor: owns one connection's life. It starts the child, runs the handshake and the
//! catalog read off its message loop, publishes the catalog to the router, re-reads a listing when
//! the server says it changed, and ends the child's whole process group when it stops. It fails
//! (so the supervisor restarts it) when the connection becomes unusable.

use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};

use super::connection::{Connection, Event};
use super::handle::{State as UpState, UpstreamHandle};
use super::handshake::{self, UpstreamCatalog, UpstreamItem};
use super::process::{self, ChildGuard};
use crate::mcp::ListKind;
use crate::router::RouterHandle;

/// How long a stopping child gets between SIGTERM and SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(2);
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
                let h = &state.handle;
                let counts: Vec<String> = catalog
                    .lists
                    .iter()
                    .map(|(k, v)| format!("{} {}", v.len(), k.field()))
                    .collect();
                tracing::info!(upstream = %h.name(), version = catalog.info.protocol_version, offers = %counts.join(", "), "Upstream is ready.");
                h.update(|s| s.info = Some(Arc::clone(&catalog.info)));
                h.set_connection(Some(Arc::clone(&state.conn)));
                if h.scope().is_none() {
                    state.router.publish(h, catalog.clone()).await;
                }
                h.set_state(UpState::Ready, None);
                state.catalog = Some(catalog);
                Ok(())
            }
            UpstreamMsg::Started(Err(why)) => {
                Err(self.fail(state, format!("failed to start: {why}")).await)
            }
            UpstreamMsg::Connection(ConnectionEvent::ListChanged(kind)) => {
                if state.catalog.is_some() && state.handle.scope().is_none() {
                    let conn = Arc::clone(&state.conn);
                    let config = state.handle.config().clone();
                    let max_items = state.router.max_items_per_upstream();
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
                Ok(())
            }
            UpstreamMsg::Refreshed(kind, Ok(items)) => {
                if let Some(catalog) = state.catalog.as_mut() {
                    catalog.lists.insert(kind, Arc::new(items));
                    state.router.publish(&state.handle, catalog.clone()).await;
                }
                Ok(())
            }
            UpstreamMsg::Refreshed(kind, Err(why)) => {
                tracing::warn!(upstream = %state.handle.name(), listing = kind.method(), error = %why, "Could not re-read a changed listing.");
                Ok(())
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

async fn teardown(state: &mut UpstreamState, reason: &str) {
    state.handle.set_connection(None);
    state.conn.close(reason);
    if state.handle.scope().is_none() {
        state.router.withdraw(state.handle.name());
    }
    if let Some(guard) = state.guard.take() {
        guard.terminate(STOP_GRACE).await;
    }
}
