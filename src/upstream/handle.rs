//! [`UpstreamHandle`]: what the rest of mcpmux holds for one upstream. It outlives restarts of the
//! actor, so callers always get either an answer or an error that says why there is none.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use serde_json::value::RawValue;
use tokio::sync::watch;

use super::connection::{CallContext, Connection};
use super::handshake::ServerInfo;
use super::origin::HostBus;
use crate::config::UpstreamConfig;
use crate::mcp::names::Prefix;

/// Lines of an upstream's stderr kept to explain why it failed.
const STDERR_TAIL_LINES: usize = 8;

/// Where an upstream is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Starting,
    Ready,
    Restarting,
    Stopped,
    Disabled,
}

impl std::fmt::Display for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Starting => "starting",
            Self::Ready => "ready",
            Self::Restarting => "restarting",
            Self::Stopped => "stopped",
            Self::Disabled => "disabled",
        })
    }
}

/// A readable account of an upstream, for errors, logs and status output.
#[derive(Debug, Clone)]
pub struct Status {
    pub state: State,
    pub last_error: Option<String>,
    pub restarts: u32,
    pub pid: Option<u32>,
    pub info: Option<Arc<ServerInfo>>,
}

/// An upstream's answer to one request: its `result` or its `error` object, verbatim.
#[derive(Debug)]
pub enum Reply {
    Result(Box<RawValue>),
    Error(Box<RawValue>),
}

/// Why a request got no answer from the upstream.
#[derive(Debug, Clone, thiserror::Error)]
pub enum UpstreamError {
    #[error("upstream `{upstream}` is {state}{}", reason.as_ref().map(|r| format!(": {r}")).unwrap_or_default())]
    Unavailable {
        upstream: String,
        state: State,
        reason: Option<String>,
    },
    #[error("upstream `{upstream}` did not answer within {}s", timeout.as_secs_f32())]
    Timeout { upstream: String, timeout: Duration },
    #[error("upstream `{upstream}` failed while handling the request: {reason}")]
    Failed { upstream: String, reason: String },
    #[error("the request to upstream `{upstream}` was cancelled")]
    Cancelled { upstream: String },
}

struct Shared {
    config: UpstreamConfig,
    /// Where session-bound upstream messages go.
    bus: Option<Arc<dyn HostBus>>,
    /// The host session a per-session instance serves (`None`: the shared instance).
    scope: Option<String>,
    conn: ArcSwapOption<Connection>,
    status: Mutex<Status>,
    state_tx: watch::Sender<State>,
    stderr_tail: Mutex<VecDeque<String>>,
}

/// A cheap, cloneable reference to one upstream.
#[derive(Clone)]
pub struct UpstreamHandle {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for UpstreamHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamHandle")
            .field("name", &self.shared.config.name)
            .finish()
    }
}

impl UpstreamHandle {
    pub fn new(config: UpstreamConfig, bus: Option<Arc<dyn HostBus>>) -> Self {
        Self::build(config, bus, None)
    }

    /// A handle for this upstream's own instance serving one host session.
    pub fn instance_for(&self, session: &str) -> Self {
        Self::build(
            self.shared.config.clone(),
            self.shared.bus.clone(),
            Some(session.to_owned()),
        )
    }

    fn build(config: UpstreamConfig, bus: Option<Arc<dyn HostBus>>, scope: Option<String>) -> Self {
        let state = if config.enabled {
            State::Starting
        } else {
            State::Disabled
        };
        let (state_tx, _) = watch::channel(state);
        let status = Status {
            state,
            last_error: None,
            restarts: 0,
            pid: None,
            info: None,
        };
        Self {
            shared: Arc::new(Shared {
                config,
                bus,
                scope,
                conn: ArcSwapOption::empty(),
                status: Mutex::new(status),
                state_tx,
                stderr_tail: Mutex::new(VecDeque::new()),
            }),
        }
    }

    pub fn name(&self) -> &str {
        &self.shared.config.name
    }

    pub fn prefix(&self) -> &Prefix {
        &self.shared.config.prefix
    }

    pub fn config(&self) -> &UpstreamConfig {
        &self.shared.config
    }

    /// Forwards one request (`params` as raw JSON, already rewritten) and waits for the answer,
    /// at most the upstream's request timeout. `call` ties it to the host request it serves.
    pub async fn request(
        &self,
        method: &str,
        params: Option<&str>,
        call: Option<CallContext>,
    ) -> Result<Reply, UpstreamError> {
        let Some(conn) = self.shared.conn.load_full() else {
            return Err(self.unavailable());
        };
        conn.request(
            method,
            params,
            self.shared.config.policy.request_timeout,
            call,
        )
        .await
    }

    /// Sends a notification to the live connection, if there is one.
    pub fn notify(&self, method: &str, params: Option<&str>) {
        if let Some(conn) = self.shared.conn.load_full() {
            conn.notify(method, params);
        }
    }

    pub fn scope(&self) -> Option<&str> {
        self.shared.scope.as_deref()
    }

    pub(super) fn bus(&self) -> Option<&Arc<dyn HostBus>> {
        self.shared.bus.as_ref()
    }

    /// The `roots/list` result configured for this upstream, if any.
    pub(super) fn configured_roots(&self) -> Option<Box<RawValue>> {
        let roots = self.shared.config.roots.as_ref()?;
        let list: Vec<serde_json::Value> = roots
            .iter()
            .map(|uri| serde_json::json!({ "uri": uri }))
            .collect();
        serde_json::value::to_raw_value(&serde_json::json!({ "roots": list })).ok()
    }

    /// Requests waiting for the upstream right now.
    pub fn in_flight(&self) -> usize {
        self.shared
            .conn
            .load()
            .as_ref()
            .map_or(0, |c| c.in_flight())
    }

    pub fn status(&self) -> Status {
        self.shared
            .status
            .lock()
            .map(|s| s.clone())
            .unwrap_or_else(|p| p.into_inner().clone())
    }

    pub fn state(&self) -> State {
        *self.shared.state_tx.borrow()
    }

    /// Waits until the upstream is no longer starting, or `deadline` passes.
    pub async fn settled(&self, deadline: Duration) {
        let mut rx = self.shared.state_tx.subscribe();
        let _ = tokio::time::timeout(deadline, rx.wait_for(|s| *s != State::Starting)).await;
    }

    /// The error a caller gets while there is no live connection.
    pub fn unavailable(&self) -> UpstreamError {
        let status = self.status();
        UpstreamError::Unavailable {
            upstream: self.name().to_owned(),
            state: status.state,
            reason: status.last_error,
        }
    }

    /// The last lines the upstream wrote to stderr, oldest first.
    pub fn stderr_tail(&self) -> Vec<String> {
        self.shared
            .stderr_tail
            .lock()
            .map(|t| t.iter().cloned().collect())
            .unwrap_or_default()
    }

    pub(super) fn push_stderr(&self, line: String) {
        if let Ok(mut tail) = self.shared.stderr_tail.lock() {
            if tail.len() == STDERR_TAIL_LINES {
                tail.pop_front();
            }
            tail.push_back(line);
        }
    }

    pub(super) fn set_connection(&self, conn: Option<Arc<Connection>>) {
        self.shared.conn.store(conn);
    }

    /// Records a change of state (and the error that caused it, if any).
    pub fn set_state(&self, state: State, error: Option<String>) {
        self.update(|s| {
            s.state = state;
            if error.is_some() {
                s.last_error = error;
            }
            if state == State::Ready {
                s.last_error = None;
            }
        });
        self.shared.state_tx.send_replace(state);
    }

    pub(super) fn update(&self, f: impl FnOnce(&mut Status)) {
        let mut guard = self.shared.status.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut guard);
    }

    pub(crate) fn clear_stderr_tail(&self) {
        if let Ok(mut tail) = self.shared.stderr_tail.lock() {
            tail.clear();
        }
    }
}

impl UpstreamHandle {
    /// Counts one more restart.
    pub fn update_restarts(&self) {
        self.update(|s| s.restarts += 1);
    }
}
