//! [`UpstreamHandle`]: what the rest of mcpmux holds for one upstream (or for one session's own
//! instance of it). It outlives restarts of the actor, so callers always get either an answer or
//! an error that says why there is none.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, OnceLock};
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use serde_json::value::RawValue;
use tokio::sync::watch;

use super::catalog::{CatalogLink, UpstreamCatalog};
use super::companion::Companion;
use super::connection::{CallContext, Connection, Context, HostEvents, UpstreamId};
use super::error::{Reply, UpstreamError};
use super::metrics::CallMetrics;
use super::status::{Phase, Status};
use super::transport::Diagnostics;
use crate::config::{OAuthConfig, Protocol, RemoteKind, Transport, UpstreamConfig};
use crate::mcp::names::Prefix;

struct Shared {
    config: UpstreamConfig,
    id: Arc<UpstreamId>,
    /// Where session-bound upstream messages go.
    events: Option<Arc<dyn HostEvents>>,
    /// Where the catalog goes (`None` for a per-session instance: it serves calls only).
    catalog: Option<CatalogLink>,
    conn: ArcSwapOption<Connection>,
    status: Mutex<Status>,
    phase_tx: watch::Sender<Phase>,
    diagnostics: Arc<Diagnostics>,
    /// Asks the supervisor to start a stopped upstream (set by the supervisor).
    waker: OnceLock<Box<dyn Fn() + Send + Sync>>,
    /// When a request last went to it, in milliseconds since `EPOCH`.
    last_used: AtomicU64,
    /// Removed or replaced by a reload: it finishes what it has in flight and publishes nothing.
    retired: AtomicBool,
    /// What hosts asked of it, and how long it took (shared with its per-session instances).
    metrics: Arc<CallMetrics>,
    /// The handshake-era session beside a 2026-07-28 link, for handshake-era hosts.
    companion: Companion,
    /// Calls waiting for it to finish starting (see [`UpstreamHandle::started`]).
    waiting: AtomicUsize,
    /// The upstream URIs of resources hosts subscribed to, for a 2026-07-28 upstream's listen
    /// stream (a handshake-era upstream is sent `resources/subscribe` instead).
    resources: watch::Sender<BTreeSet<String>>,
}

/// One call counted among those waiting for an upstream to start, until it stops waiting.
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The reference point of `last_used`.
static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

fn now_ms() -> u64 {
    u64::try_from(EPOCH.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// The configured upstreams, one handle each, in the config's order: the running set, as a
/// watch holds it for the router and the supervisor (so it lives in one place).
pub type Upstreams = Arc<[UpstreamHandle]>;

/// A cheap, cloneable reference to one upstream.
#[derive(Clone)]
pub struct UpstreamHandle {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for UpstreamHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamHandle")
            .field("name", &self.shared.config.name)
            .field("scope", &self.shared.id.scope)
            .finish()
    }
}

impl UpstreamHandle {
    /// The shared instance of a configured upstream; it publishes its catalog through `catalog`.
    pub fn new(
        config: UpstreamConfig,
        events: Option<Arc<dyn HostEvents>>,
        catalog: Option<CatalogLink>,
    ) -> Self {
        Self::build(config, events, catalog, None, Arc::default())
    }

    /// A handle for this upstream's own instance serving one host session, one stateless host
    /// or one principal (`session` names which), run as `config` says (the upstream's, with
    /// a principal's secrets where it has its own).
    pub fn instance_for(&self, session: &str, config: UpstreamConfig) -> Self {
        Self::build(
            config,
            self.shared.events.clone(),
            None,
            Some(session.to_owned()),
            Arc::clone(&self.shared.metrics),
        )
    }

    fn build(
        config: UpstreamConfig,
        events: Option<Arc<dyn HostEvents>>,
        catalog: Option<CatalogLink>,
        scope: Option<String>,
        metrics: Arc<CallMetrics>,
    ) -> Self {
        let phase = if config.enabled {
            Phase::Starting
        } else {
            Phase::Disabled
        };
        let (phase_tx, _) = watch::channel(phase);
        let status = Status {
            phase,
            last_error: None,
            restarts: 0,
            pid: None,
            info: None,
            times_ready: 0,
        };
        let id = Arc::new(UpstreamId {
            name: config.name.clone(),
            prefix: config.prefix.clone(),
            scope,
        });
        Self {
            shared: Arc::new(Shared {
                diagnostics: Arc::new(Diagnostics::new(&config.name)),
                config,
                id,
                events,
                catalog,
                conn: ArcSwapOption::empty(),
                status: Mutex::new(status),
                phase_tx,
                waker: OnceLock::new(),
                last_used: AtomicU64::new(now_ms()),
                retired: AtomicBool::new(false),
                metrics,
                resources: watch::channel(BTreeSet::new()).0,
                waiting: AtomicUsize::new(0),
                companion: Companion::default(),
            }),
        }
    }

    pub fn name(&self) -> &str {
        &self.shared.config.name
    }

    /// Whether `other` is this very handle (a clone of it), not another instance of the same
    /// upstream (as a reload makes of a changed one).
    pub fn is(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    pub fn prefix(&self) -> &Prefix {
        &self.shared.config.prefix
    }

    pub fn config(&self) -> &UpstreamConfig {
        &self.shared.config
    }

    /// What hosts asked of it: requests, errors and latency per method and tool.
    pub fn metrics(&self) -> &CallMetrics {
        &self.shared.metrics
    }

    /// Which upstream and instance this is, as host-side events name it.
    pub fn id(&self) -> &Arc<UpstreamId> {
        &self.shared.id
    }

    /// The host session a per-session instance serves (`None`: the shared instance).
    pub fn scope(&self) -> Option<&str> {
        self.shared.id.scope.as_deref()
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
    #[allow(clippy::manual_async_fn)] // on purpose: see the comment in its body
    pub fn request_within<'a>(
        &'a self,
        method: &'a str,
        params: Option<&'a str>,
        call: Option<CallContext>,
        timeout: Duration,
    ) -> impl Future<Output = Result<Reply, UpstreamError>> + Send + 'a {
        // An `async` block, not an `async fn`, which would hold its arguments twice.
        async move {
            self.shared.last_used.store(now_ms(), Ordering::Relaxed);
            let conn = match self.shared.conn.load_full() {
                Some(conn) => conn,
                None if self.phase() == Phase::Starting => self.started(timeout).await?,
                None => self.wake().await?,
            };
            // A handshake-era host's request to a server that serves both eras goes in the
            // host's era (`companion`); boxed, as that path is the rare one.
            if conn.is_modern() && call.as_ref().is_some_and(|c| c.caller.handshake_era()) {
                return Box::pin(self.in_handshake_era(conn, method, params, call, timeout)).await;
            }
            conn.request(method, params, timeout, call).await
        }
    }

    /// A handshake-era host's request when the upstream speaks 2026-07-28: over the
    /// handshake-era session beside it when the server serves that era too (a remote server,
    /// under `protocol = "auto"`: `modern` asks for 2026-07-28 only), else over `conn`, bridged.
    async fn in_handshake_era(
        &self,
        conn: Arc<Connection>,
        method: &str,
        params: Option<&str>,
        call: Option<CallContext>,
        timeout: Duration,
    ) -> Result<Reply, UpstreamError> {
        let config = &self.shared.config;
        let remote = matches!(&config.transport, Transport::Remote(r) if r.kind != RemoteKind::Sse);
        if remote && config.protocol == Protocol::Auto {
            let context = || self.context();
            if let Some(legacy) = (self.shared.companion)
                .connection(config, context, timeout)
                .await
            {
                return legacy.request(method, params, timeout, call).await;
            }
        }
        conn.request(method, params, timeout, call).await
    }

    /// What a connection of this upstream (or instance) knows of it beyond its transport.
    pub(super) fn context(&self) -> Context {
        let config = &self.shared.config;
        Context {
            id: Arc::clone(self.id()),
            max_in_flight: config.policy.max_in_flight,
            events: self.events().cloned(),
            roots: self.configured_roots(),
        }
    }

    /// Closes the handshake-era session beside a 2026-07-28 link, if one is open.
    pub(super) async fn close_companion(&self, reason: &super::error::Closed, grace: Duration) {
        self.shared.companion.close(reason, grace).await;
    }

    /// Starts a stopped upstream on demand and waits until it serves (or fails to).
    async fn wake(&self) -> Result<Arc<Connection>, UpstreamError> {
        let (Some(waker), Phase::Stopped) = (self.shared.waker.get(), self.phase()) else {
            return Err(self.unavailable());
        };
        waker();
        let mut rx = self.shared.phase_tx.subscribe();
        let deadline = self.shared.config.policy.startup_timeout;
        let _ = tokio::time::timeout(
            deadline,
            rx.wait_for(|s| !matches!(s, Phase::Stopped | Phase::Starting)),
        )
        .await;
        self.shared
            .conn
            .load_full()
            .ok_or_else(|| self.unavailable())
    }

    /// Waits for an upstream that is starting (the daemon has just started, a reload has just
    /// replaced it, its HTTP session is being opened again) to serve: at most its startup
    /// timeout or the call's own `timeout`, whichever is shorter, and only as one of at most
    /// `max_in_flight` such waiting calls (past that the call is refused as busy at once).
    async fn started(&self, timeout: Duration) -> Result<Arc<Connection>, UpstreamError> {
        let policy = &self.shared.config.policy;
        let waiting = self.shared.waiting.fetch_add(1, Ordering::Relaxed);
        let _waiting = Waiting(&self.shared.waiting);
        if waiting >= policy.max_in_flight {
            return Err(UpstreamError::Busy {
                upstream: self.name().to_owned(),
                limit: policy.max_in_flight,
            });
        }
        self.settled(policy.startup_timeout.min(timeout)).await;
        self.shared
            .conn
            .load_full()
            .ok_or_else(|| self.unavailable())
    }

    /// Starts a lazy upstream that has not started yet (a host session has begun).
    pub fn start_if_lazy(&self) {
        if self.never_started() {
            if let Some(waker) = self.shared.waker.get() {
                waker();
            }
        }
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

    pub(super) fn events(&self) -> Option<&Arc<dyn HostEvents>> {
        self.shared.events.as_ref()
    }

    pub(super) fn catalog_link(&self) -> Option<&CatalogLink> {
        self.shared.catalog.as_ref()
    }

    /// Makes `catalog` this upstream's live catalog; returns once hosts read it.
    pub(super) fn publish_catalog(&self, catalog: UpstreamCatalog) {
        if self.is_retired() {
            return;
        }
        if let Some(link) = &self.shared.catalog {
            link.sink.publish(self.name(), catalog);
        }
    }

    /// Takes this upstream's catalog out of what hosts see (crash loop, removal).
    pub fn withdraw_catalog(&self) {
        if self.is_retired() {
            return;
        }
        if let Some(link) = &self.shared.catalog {
            link.sink.withdraw(self.name());
        }
    }

    /// Marks it removed or replaced by a reload: from now on its catalog changes reach no one
    /// (the router already lists its successor, or nothing, under its name).
    pub fn retire(&self) {
        self.shared.retired.store(true, Ordering::Relaxed);
    }

    fn is_retired(&self) -> bool {
        self.shared.retired.load(Ordering::Relaxed)
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

    /// Whether it speaks 2026-07-28 (as far as its last start found).
    pub fn is_modern(&self) -> bool {
        self.status()
            .info
            .is_some_and(|info| info.protocol_version.is_modern())
    }

    /// Adds (`on`) or removes an upstream resource URI among those its listen stream asks
    /// updates for (2026-07-28).
    pub fn watch_resource(&self, uri: &str, on: bool) {
        self.shared.resources.send_if_modified(|set| match on {
            true => set.insert(uri.to_owned()),
            false => set.remove(uri),
        });
    }

    /// The resources hosts want updates for, as they change.
    pub(super) fn watched_resources(&self) -> watch::Receiver<BTreeSet<String>> {
        self.shared.resources.subscribe()
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

    pub fn phase(&self) -> Phase {
        *self.shared.phase_tx.borrow()
    }

    /// Notified each time the upstream's phase changes.
    pub fn watch_phase(&self) -> watch::Receiver<Phase> {
        self.shared.phase_tx.subscribe()
    }

    /// Waits until the upstream is no longer starting (nor a lazy one about to start), or
    /// `deadline` passes.
    pub async fn settled(&self, deadline: Duration) {
        let mut rx = self.shared.phase_tx.subscribe();
        let lazy = self.shared.config.policy.lazy_start && self.status().info.is_none();
        let pending = |s: &Phase| *s == Phase::Starting || (*s == Phase::Stopped && lazy);
        let _ = tokio::time::timeout(deadline, rx.wait_for(|s| !pending(s))).await;
    }

    /// A lazy upstream that has not been started yet.
    pub fn never_started(&self) -> bool {
        self.shared.config.policy.lazy_start
            && self.status().info.is_none()
            && self.phase() == Phase::Stopped
    }

    /// The error a caller gets while there is no live connection.
    pub fn unavailable(&self) -> UpstreamError {
        let status = self.status();
        UpstreamError::Unavailable {
            upstream: self.name().to_owned(),
            state: status.phase,
            reason: status.last_error,
        }
    }

    /// Its OAuth settings, when it signs in with OAuth (a remote upstream without a configured
    /// token).
    pub fn oauth(&self) -> Option<&OAuthConfig> {
        match &self.shared.config.transport {
            Transport::Remote(remote) => remote.oauth.as_deref(),
            Transport::Stdio(_) => None,
        }
    }

    /// Whether it exchanges each caller's own token (`grant = "token_exchange"`).
    pub fn exchanges_tokens(&self) -> bool {
        self.oauth()
            .is_some_and(|o| o.grant == crate::config::OAuthGrant::TokenExchange)
    }

    /// With `grant = "token_exchange"`: a token for this upstream, in exchange for a caller's
    /// JWT `subject`.
    pub async fn exchange(&self, subject: &str) -> Result<crate::oauth::Exchanged, UpstreamError> {
        let failed = |reason: String| UpstreamError::Failed {
            upstream: self.name().to_owned(),
            reason,
        };
        let Transport::Remote(remote) = &self.shared.config.transport else {
            return Err(failed(
                "it is no remote server, so it exchanges no token".into(),
            ));
        };
        let Some(oauth) = remote.oauth.as_deref() else {
            return Err(failed(
                "it has no [oauth] table to exchange tokens with".into(),
            ));
        };
        let http = super::transport::http_client(remote).map_err(|e| failed(e.to_string()))?;
        crate::oauth::exchange(&http, oauth, &remote.url, subject)
            .await
            .map_err(|e| {
                failed(format!(
                    "the caller's token could not be exchanged for one of its own: {e}"
                ))
            })
    }

    /// A sign-in for it, starting from the challenge it last refused mcpmux with: `None` when it
    /// does not sign in with OAuth, an error when its HTTP client cannot be set up.
    pub fn sign_in(&self) -> Option<Result<crate::oauth::Login, super::error::StartError>> {
        let oauth = self.oauth()?.clone();
        self.sign_in_as(oauth)
    }

    /// A sign-in to it kept as `oauth` says (a principal's own, in the vault): `None` when it
    /// is not remote.
    pub fn sign_in_as(
        &self,
        oauth: OAuthConfig,
    ) -> Option<Result<crate::oauth::Login, super::error::StartError>> {
        let Transport::Remote(remote) = &self.shared.config.transport else {
            return None;
        };
        Some(
            super::transport::http_client(remote).map(|http| crate::oauth::Login {
                upstream: self.name().to_owned(),
                url: remote.url.clone(),
                oauth,
                http,
                challenge: self.diagnostics().challenge(),
                return_to: None,
            }),
        )
    }

    /// Whether each principal signs in to it on their own, through their host
    /// (`credentials = "per-principal"` with `grant = "authorization_code"`).
    pub fn signs_in_each_principal(&self) -> bool {
        self.shared.config.isolation == crate::config::Isolation::PerPrincipal
            && self.oauth().is_some_and(|o| {
                o.written && o.grant == crate::config::OAuthGrant::AuthorizationCode
            })
    }

    /// What its transport observed besides messages (a child's last stderr lines).
    pub fn diagnostics(&self) -> &Arc<Diagnostics> {
        &self.shared.diagnostics
    }

    pub(super) fn set_connection(&self, conn: Option<Arc<Connection>>) {
        self.shared.conn.store(conn);
    }

    /// Records a change of phase (and the error that caused it, if any).
    pub fn set_phase(&self, phase: Phase, error: Option<String>) {
        self.update(|s| {
            s.phase = phase;
            if error.is_some() {
                s.last_error = error;
            }
            if phase == Phase::Ready {
                s.last_error = None;
            }
        });
        self.shared.phase_tx.send_replace(phase);
    }

    pub(super) fn update(&self, f: impl FnOnce(&mut Status)) {
        let mut guard = self.shared.status.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut guard);
    }

    /// Counts one more restart.
    pub fn count_restart(&self) {
        self.update(|s| s.restarts += 1);
    }
}
