//! Host sessions: what a host declared at `initialize` ([`HostInfo`], which each of its requests
//! carries in its context), the messages waiting for its event stream, and the per-session tables
//! the host service keeps (in-flight requests it may cancel, server requests it is answering,
//! subscriptions, log level). The store finds sessions by `Mcp-Session-Id` and forgets idle ones.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};

use serde_json::value::RawValue;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::mcp::envelope::ClientCapabilities;
use crate::mcp::version::Version;
use crate::sync::lock;
use crate::upstream::{Canceller, ServerRequestReply};

/// Messages a session's event stream may fall behind by before new ones are dropped.
const OUTBOX: usize = 1024;

/// Longest `clientInfo.name` or `.version` kept (and logged); the rest is cut.
pub const CLIENT_INFO_FIELD_CHARS: usize = 128;

/// What a host declared about itself: negotiated once per session in the handshake era (and,
/// in the stateless era, carried by each request).
#[derive(Debug)]
pub struct HostInfo {
    /// The protocol version agreed with this host.
    pub version: Version,
    /// What the host declared in `initialize` (sampling, roots, elicitation…).
    pub capabilities: ClientCapabilities,
    pub client_info: ClientInfo,
    /// A 2026-07-28 request's own log level (its envelope's `logLevel`, a rank of
    /// [`crate::mcp::LOG_LEVELS`]): the log messages that belong to the request go on its
    /// stream at or above it, none without it. A handshake session sets its level with
    /// `logging/setLevel` instead, for all its messages.
    pub request_log_level: Option<usize>,
}

/// Who the host says it is: the name and version of its `clientInfo`, cut to
/// [`CLIENT_INFO_FIELD_CHARS`] each. Nothing else of it is kept, so what a host sends there
/// cannot grow the daemon's memory or log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientInfo {
    pub name: Option<String>,
    pub version: Option<String>,
}

impl ClientInfo {
    /// The name and version of a `clientInfo` object as sent (anything else in it is dropped, and
    /// so is a member that is not a string).
    pub fn of(client_info: Option<&RawValue>) -> Self {
        #[derive(serde::Deserialize, Default)]
        struct Sent<'a> {
            #[serde(borrow, default)]
            name: Option<&'a RawValue>,
            #[serde(borrow, default)]
            version: Option<&'a RawValue>,
        }
        let sent: Sent<'_> = client_info
            .and_then(|raw| serde_json::from_str(raw.get()).ok())
            .unwrap_or_default();
        let field = |raw: Option<&RawValue>| {
            let text = crate::jsonrpc::text_of(raw?)?;
            // No more bytes than the limit has chars: nothing to cut.
            if text.len() <= CLIENT_INFO_FIELD_CHARS {
                return Some(text.into_owned());
            }
            Some(text.chars().take(CLIENT_INFO_FIELD_CHARS).collect())
        };
        Self {
            name: field(sent.name),
            version: field(sent.version),
        }
    }
}

impl std::fmt::Display for ClientInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = self.name.as_deref().unwrap_or("(unnamed)");
        match &self.version {
            Some(version) => write!(f, "{name} {version}"),
            None => f.write_str(name),
        }
    }
}

impl HostInfo {
    /// Whether the host declared a client capability.
    pub fn supports(&self, capability: &str) -> bool {
        self.capabilities
            .value()
            .get(capability)
            .is_some_and(|c| !c.is_null())
    }

    /// Whether the host declared that it renders MCP Apps (`extensions` names the UI
    /// extension).
    pub fn renders_apps(&self) -> bool {
        let extensions = self.capabilities.value().get("extensions");
        extensions
            .and_then(|e| e.get(crate::mcp::apps::UI_EXTENSION))
            .is_some_and(|ui| !ui.is_null())
    }
}

/// One handshake-era host session (or the session a 2026-07-28 listen stream's resource
/// subscriptions live in). A stateless request has none: its context says what its host
/// declared ([`crate::downstream::service::RequestCx`]).
#[derive(Debug)]
pub struct Session {
    pub id: String,
    /// What the host declared at `initialize`.
    pub host: Arc<HostInfo>,
    /// Who opened it and the profile it sees; only the same access may use it. A reload that
    /// changes the host or the profile gives the session the new one.
    access: arc_swap::ArcSwap<super::Access>,
    /// When it was opened.
    pub opened: Instant,
    /// Milliseconds since the store's epoch when the host last used this session.
    last_seen: AtomicU64,
    /// Messages for the host that belong to no open request stream.
    outbox: mpsc::Sender<String>,
    /// The receiving end, while no event stream has it.
    outbox_rx: Mutex<Option<mpsc::Receiver<String>>>,
    /// Whether an event stream is attached (an attached session never idles out).
    streaming: AtomicBool,
    /// Made on first use.
    tables: OnceLock<Mutex<SessionTables>>,
    next_server_request: AtomicU64,
    /// Cancelled when the session ends, so its event streams end too.
    closed: CancellationToken,
    /// Requests of this session being served upstream now.
    in_flight: AtomicUsize,
}

/// One of a session's in-flight slots, given back when dropped.
#[derive(Debug)]
pub struct SessionPermit<'a>(&'a Session);

impl Drop for SessionPermit<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A request an upstream sent that this host is answering.
#[derive(Debug)]
pub struct ForwardedRequest {
    pub reply: ServerRequestReply,
    pub method: String,
    /// When it was sent to the host (for the audit record's latency).
    pub sent: std::time::Instant,
}

/// What the host service tracks per session.
#[derive(Debug, Default)]
pub(super) struct SessionTables {
    /// The host's request id (raw JSON) → how to cancel it upstream.
    pub in_flight: HashMap<String, Canceller>,
    /// Our id for an upstream's request (raw JSON) → where the host's answer goes.
    pub server_requests: HashMap<String, ForwardedRequest>,
    /// Exposed resource URIs the host subscribed to.
    pub subscriptions: HashSet<String>,
    /// The level the host set with `logging/setLevel` (no log messages until it does).
    pub log_level: Option<usize>,
}

impl Session {
    fn new(id: String, host: HostInfo, access: super::Access, now_ms: u64) -> Self {
        let (outbox, rx) = mpsc::channel(OUTBOX);
        Self {
            id,
            host: Arc::new(host),
            access: arc_swap::ArcSwap::from_pointee(access),
            opened: Instant::now(),
            last_seen: AtomicU64::new(now_ms),
            outbox,
            outbox_rx: Mutex::new(Some(rx)),
            streaming: AtomicBool::new(false),
            tables: OnceLock::new(),
            next_server_request: AtomicU64::new(1),
            closed: CancellationToken::new(),
            in_flight: AtomicUsize::new(0),
        }
    }

    /// Who opened it and what it sees, as of the running config.
    pub fn access(&self) -> Arc<super::Access> {
        self.access.load_full()
    }

    /// Keeps `token` as the JWT its host signs in with now, if it is a new one (atomically: a
    /// reload's new access is never lost to it).
    pub fn renew_subject_token(&self, token: &crate::config::HeldToken) {
        if self.access.load().subject_token.as_ref() == Some(token) {
            return;
        }
        self.access.rcu(|access| super::Access {
            subject_token: Some(token.clone()),
            ..(**access).clone()
        });
    }

    /// Gives it the access a reloaded config grants it.
    pub fn set_access(&self, access: super::Access) {
        self.access.store(Arc::new(access));
    }

    /// The profile this session sees (`None`: the whole catalog).
    pub fn profile(&self) -> Option<Arc<crate::config::Profile>> {
        self.access.load().profile.clone()
    }

    /// Whether the session's profile holds `upstream`: what it does not hold does not exist for it.
    pub fn sees(&self, upstream: &str) -> bool {
        let access = self.access.load();
        (access.profile.as_ref()).is_none_or(|p| p.holds(upstream))
    }

    /// What status shows of it: the start of its id, who, which profile, age, in flight.
    pub fn status(&self) -> crate::api::SessionStatus {
        let access = self.access();
        crate::api::SessionStatus {
            id: self.id.get(..8).unwrap_or(&self.id).to_owned(),
            principal: access.principal.as_ref().map(|p| p.name.to_string()),
            profile: access.profile.as_ref().map(|p| p.name.clone()),
            client: self.host.client_info.name.clone(),
            client_version: self.host.client_info.version.clone(),
            protocol_version: self.host.version.to_string(),
            age_seconds: self.opened.elapsed().as_secs(),
            in_flight: self.in_flight(),
            streaming: self.is_streaming(),
        }
    }

    /// Its requests being served upstream now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    fn touch(&self, now_ms: u64) {
        self.last_seen.store(now_ms, Ordering::Relaxed);
    }

    /// Queues a message for the host's event stream; dropped (with a warning) if it is full.
    pub fn deliver(&self, line: String) {
        if let Err(e) = self.outbox.try_send(line) {
            if matches!(e, mpsc::error::TrySendError::Full(_)) {
                tracing::warn!(session = %self.id, "Dropped a message for the host: its event stream is not being read.");
            }
        }
    }

    /// Takes the event stream's receiving end; the guard gives it back when the stream ends.
    pub fn attach_stream(self: &Arc<Self>) -> Option<StreamGuard> {
        let rx = lock(&self.outbox_rx).take()?;
        self.streaming.store(true, Ordering::Relaxed);
        Some(StreamGuard {
            session: Arc::clone(self),
            rx: Some(rx),
        })
    }

    /// Takes one of at most `limit` in-flight slots; `None` when all are taken.
    pub fn claim_slot(&self, limit: usize) -> Option<SessionPermit<'_>> {
        let taken = self.in_flight.fetch_add(1, Ordering::Relaxed);
        let slot = SessionPermit(self);
        (taken < limit).then_some(slot)
    }

    /// Whether an event stream is attached now.
    pub fn is_streaming(&self) -> bool {
        self.streaming.load(Ordering::Relaxed)
    }

    /// A fresh id for a request mcpmux forwards to this host on an upstream's behalf.
    pub fn next_server_request_id(&self) -> Box<RawValue> {
        let n = self.next_server_request.fetch_add(1, Ordering::Relaxed);
        crate::jsonrpc::raw_string(&format!("mcpmux-s-{n}"))
    }

    pub(super) fn tables(&self) -> std::sync::MutexGuard<'_, SessionTables> {
        lock(self.tables.get_or_init(Mutex::default))
    }
}

/// An attached event stream's hold on the session outbox.
#[derive(Debug)]
pub struct StreamGuard {
    session: Arc<Session>,
    rx: Option<mpsc::Receiver<String>>,
}

impl StreamGuard {
    /// The next message for the host; `None` once the session has ended.
    pub async fn recv(&mut self) -> Option<String> {
        let rx = self.rx.as_mut()?;
        let closed = &self.session.closed;
        tokio::select! {
            line = rx.recv() => line,
            () = closed.cancelled() => None,
        }
    }
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        if let Some(rx) = self.rx.take() {
            *lock(&self.session.outbox_rx) = Some(rx);
        }
        self.session.streaming.store(false, Ordering::Relaxed);
    }
}

/// Every live session, by id.
#[derive(Debug)]
pub struct SessionStore {
    sessions: RwLock<HashMap<String, Arc<Session>>>,
    idle_timeout: Duration,
    epoch: Instant,
    /// The replica whose name starts every id (`[cluster]`), so a load balancer routes on it.
    owner: Option<Arc<str>>,
}

impl SessionStore {
    pub fn new(idle_timeout: Duration, owner: Option<Arc<str>>) -> Arc<Self> {
        Arc::new(Self {
            sessions: RwLock::new(HashMap::new()),
            idle_timeout,
            epoch: Instant::now(),
            owner,
        })
    }

    /// A fresh unguessable session id, naming this replica first in a cluster.
    pub fn new_id(&self) -> String {
        crate::cluster::owned(self.owner.as_deref(), new_id())
    }

    /// Opens a session (with `id`, or a fresh unguessable one), unless `max_sessions` are open
    /// already or its host has all the sessions its own limit allows.
    pub fn open(
        &self,
        id: Option<String>,
        host: HostInfo,
        access: super::Access,
        max_sessions: usize,
    ) -> Result<Arc<Session>, SessionRefused> {
        let id = id.unwrap_or_else(|| self.new_id());
        let session = Arc::new(Session::new(id.clone(), host, access, self.now_ms()));
        let principal = session.access().principal.clone();
        {
            // Counted and inserted under one lock, so racing initializes cannot pass a limit.
            let mut sessions = self.write();
            if sessions.len() >= max_sessions {
                return Err(SessionRefused::Server {
                    who: principal
                        .as_ref()
                        .map_or_else(|| "this host".to_owned(), |p| format!("host `{}`", p.name)),
                    limit: max_sessions,
                });
            }
            if let Some(p) = &principal {
                if let Some(limit) = p.max_sessions() {
                    if count_of(sessions.values(), &p.name) >= limit {
                        return Err(SessionRefused::Host {
                            host: Arc::clone(&p.name),
                            limit,
                        });
                    }
                }
            }
            sessions.insert(id, Arc::clone(&session));
        }
        let access = session.access();
        let (principal, profile) = (
            access.principal.as_ref().map(|p| &*p.name),
            access.profile.as_ref().map(|p| p.name.as_str()),
        );
        tracing::info!(session = %session.id, version = %session.host.version, client = %session.host.client_info, principal, profile, "Host session opened.");
        Ok(session)
    }

    /// How many open sessions belong to the principal named `name`.
    pub fn count_of(&self, name: &str) -> usize {
        count_of(self.read().values(), name)
    }

    /// The live session with `id`, marked as used now.
    pub fn get(&self, id: &str) -> Option<Arc<Session>> {
        let session = self.read().get(id).cloned()?;
        session.touch(self.now_ms());
        Some(session)
    }

    /// Every live session.
    pub fn all(&self) -> Vec<Arc<Session>> {
        self.read().values().cloned().collect()
    }

    /// Removes a session and ends its event streams; the caller releases what it held.
    pub fn remove(&self, id: &str) -> Option<Arc<Session>> {
        let removed = self.write().remove(id);
        if let Some(session) = &removed {
            session.closed.cancel();
            tracing::info!(session = %id, "Host session closed.");
        }
        removed
    }

    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// Sessions idle longer than the timeout with no event stream attached.
    pub fn idle(&self) -> Vec<String> {
        let limit = u64::try_from(self.idle_timeout.as_millis()).unwrap_or(u64::MAX);
        let now = self.now_ms();
        self.read()
            .values()
            .filter(|s| !s.streaming.load(Ordering::Relaxed))
            .filter(|s| now.saturating_sub(s.last_seen.load(Ordering::Relaxed)) >= limit)
            .map(|s| s.id.clone())
            .collect()
    }

    /// How long a session may stay unused.
    pub fn idle_timeout(&self) -> Duration {
        self.idle_timeout
    }

    /// How often idle sessions should be looked for.
    pub fn reap_interval(&self) -> Duration {
        (self.idle_timeout / 4).clamp(Duration::from_secs(1), Duration::from_secs(60))
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Arc<Session>>> {
        self.sessions.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Arc<Session>>> {
        self.sessions.write().unwrap_or_else(|p| p.into_inner())
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

/// Why a session was not opened: a session limit is reached.
#[derive(Debug, thiserror::Error)]
pub enum SessionRefused {
    #[error(
        "host `{host}` already has {limit} sessions open (hosts.{host}.max_sessions); end one (DELETE it, or let it expire) or raise hosts.{host}.max_sessions"
    )]
    Host { host: Arc<str>, limit: usize },
    #[error(
        "mcpmux already has {limit} host sessions open (server.max_sessions), so {who} cannot open another; end one or raise server.max_sessions"
    )]
    Server { who: String, limit: usize },
}

/// How many of `sessions` belong to the principal named `name`.
fn count_of<'a>(sessions: impl Iterator<Item = &'a Arc<Session>>, name: &str) -> usize {
    sessions
        .filter(|s| (s.access.load().principal.as_ref()).is_some_and(|p| &*p.name == name))
        .count()
}

/// 128 random bits as hex: visible ASCII, as the spec requires of session ids.
pub fn new_id() -> String {
    format!("{:032x}", rand::random::<u128>())
}
