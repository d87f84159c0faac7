//! [`UpstreamHandle`]: what the rest of mcpmux holds for one upstream. It outlives restarts of the
//! actor, so callers always get either an answer or an error that says why there is none.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, OnceLock};
use std::time::{Duration, Instant};

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
    /// Serving, but something is off (a changed listing could not be re-read).
    Degraded,
    Restarting,
    /// Failed more often than its restart budget allows; not retried until an operator restarts it.
    CrashLoop,
    /// Not running: stopped when idle, not started yet (lazy), or shut down. Calls start it.
    Stopped,
    Disabled,
}

impl std::fmt::Display for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Starting => "starting",
            Self::Ready => "ready",
            Self::Degraded => "degraded",
            Self::Restarting => "restarting",
            Self::CrashLoop => "crash-loop",
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
    #[error("upstream `{upstream}` is busy: {limit} requests are already in flight; retry shortly")]
    Busy { upstream: String, limit: usize },
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
    /// Asks the supervisor to start a stopped upstream (set by the supervisor).
    waker: OnceLock<Box<dyn Fn() + Send + Sync>>,
    /// When a request last went to it, in milliseconds since `EPOCH`.
    last_used: AtomicU64,
}

/// The reference point of `last_used`.
static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

fn now_ms() -> u64 {
    u64::try_from(EPOCH.elapsed().as_millis()).unwrap_or(u64::MAX)
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
                waker: OnceLock::new(),
                last_used: AtomicU64::new(now_ms()),
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
        let timeout = self.shared.config.policy.request_timeout;
        self.request_within(method, params, call, timeout).await
    }

    /// [`Self::request`] with its own deadline (per-tool timeouts). A stopped upstream (idle or
    /// lazy) is started first, within its startup timeout.
    pub async fn request_within(
        &self,
        method: &str,
        params: Option<&str>,
        call: Option<CallContext>,
        timeout: Duration,
    ) -> Result<Reply, UpstreamError> {
        self.shared.last_used.store(now_ms(), Ordering::Relaxed);
        let conn = match self.shared.conn.load_full() {
            Some(conn) => conn,
            None => self.wake().await?,
        };
        conn.request(method, params, timeout, call).await
    }

    /// Starts a stopped upstream on demand and waits until it serves (or fails to).
    async fn wake(&self) -> Result<Arc<Connection>, UpstreamError> {
        let (Some(waker), State::Stopped) = (self.shared.waker.get(), self.state()) else {
            return Err(self.unavailable());
        };
        waker();
        let mut rx = self.shared.state_tx.subscribe();
        let deadline = self.shared.config.policy.startup_timeout;
        let _ = tokio::time::timeout(
            deadline,
            rx.wait_for(|s| !matches!(s, State::Stopped | State::Starting)),
        )
        .await;
        self.shared
            .conn
            .load_full()
            .ok_or_else(|| self.unavailable())
    }

    /// Lets the supervisor start this upstream on demand.
    pub fn set_waker(&self, waker: impl Fn() + Send + Sync + 'static) {
        let _ = self.shared.waker.set(Box::new(waker));
    }

    /// How long since a request last went to it.
    pub fn idle_for(&self) -> Duration {
        Duration::from_millis(
            now_ms().saturating_sub(self.shared.last_used.load(Ordering::Relaxed)),
        )
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

    /// Waits until the upstream is no longer starting (nor a lazy one about to start), or
    /// `deadline` passes.
    pub async fn settled(&self, deadline: Duration) {
        let mut rx = self.shared.state_tx.subscribe();
        let lazy = self.shared.config.policy.lazy_start && self.status().info.is_none();
        let pending = |s: &State| *s == State::Starting || (*s == State::Stopped && lazy);
        let _ = tokio::time::timeout(deadline, rx.wait_for(|s| !pending(s))).await;
    }

    /// A lazy upstream that has not been started yet.
    pub fn never_started(&self) -> bool {
        self.shared.config.policy.lazy_start
            && self.status().info.is_none()
            && self.state() == State::Stopped
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
