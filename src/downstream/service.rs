//! The host service: what each host request does, for every transport. Listings are pages of
//! the router's snapshot; calls are routed through the snapshot's exposed → (upstream, original)
//! map with only the owned fields rewritten (names, URIs, progress tokens, task ids), and the
//! upstream's answer goes back verbatim. One place maps internal errors to JSON-RPC errors.
//!
//! A request is parsed once into a [`method::HostMethod`] and handed to its method family's
//! handler — a function of the request's context ([`RequestCx`]), its method as parsed, and the
//! dependencies it names (most take [`forward::Upstreams`], the one way to an upstream) — which
//! fills in the request's [`outcome::Route`]; its [`outcome::Outcome`] is decided once and
//! handed to each reporting layer (`layers`: trace, metrics, audit).
//!
//! - `method`: a request's method and params, parsed once.
//! - `outcome`: what routing learned, and what the request came to.
//! - `layers`: what reports on a finished request (span, metrics, audit record).
//! - `forward`: the one way to an upstream (which instance serves a request, the call itself).
//! - `rounds`: a stateless host's multi-round requests to a handshake-era upstream (its server
//!   requests as `input_required`, the call parked until the host's retry).
//! - The families: `tools` (and `search`, a search-mode profile's two tools), `prompts`,
//!   `resources`, `skills`, `listing`, `subscriptions`, `logging`, `completion`, `tasks`,
//!   `discover`; `content` fits results to the host's version, `stateless_results` to a 2026-07-28 host.
//! - `initialize`: the handshake and the merged capabilities. `listen`: a stateless host's
//!   `subscriptions/listen` stream. `answers`: host notifications, host answers to server
//!   requests, the end of a session. `notices`: the idle-session reaper and change notices.

mod answers;
mod completion;
mod content;
mod discover;
mod exchanges;
mod forward;
mod initialize;
mod layers;
mod listen;
mod listing;
mod logging;
mod method;
mod notices;
mod outcome;
mod prompts;
mod resources;
mod rounds;
mod search;
mod sign_in;
mod skills;
mod stateless_results;
mod subscriptions;
mod tasks;
mod tools;

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use serde_json::value::RawValue;
use tracing::Instrument;

use super::delivery::Delivery;
use super::principal::Access;
use super::session::{HostInfo, Session};
use super::stream::Sink;
use crate::audit::AuditHandle;
use crate::config::{Redaction, ServerConfig};
use crate::jsonrpc::{
    MAX_DEPTH, Needle, RpcError, codes, error_line, nests_deeper_than, raw_error_line,
    response_line, to_raw,
};
use crate::mcp::ListKind;
use crate::mcp::cursor::CursorCodec;
use crate::mcp::method::Method;
use crate::mcp::names;
use crate::router::{RouterHandle, Snapshot};
use crate::supervisor::SupervisorHandle;
use crate::telemetry::otel::{HostSpan, TraceParent};
use crate::upstream::{Phase, Reply, UpstreamError};
use forward::Upstreams;
use method::HostMethod;
pub use method::Params;
use outcome::{Asked, Outcome, Route};

/// What the transports ask of the host side: a request's answer ([`HostService::request`]),
/// the handshake, a session's notifications and answers, listen streams. A request is parsed
/// once and handed to its method family's handler with the dependencies that handler needs.
#[derive(Debug)]
pub struct HostService {
    /// The catalog views, and what reaches upstreams through them.
    upstreams: Upstreams,
    audit: AuditHandle,
    /// How arguments are audited unless an upstream or tool says otherwise.
    audit_redaction: Redaction,
    cursors: CursorCodec,
    /// Cancelled when the daemon stops: listen streams then end with their result.
    stopping: tokio_util::sync::CancellationToken,
    /// The listen streams each caller holds open.
    listening: Arc<crate::downstream::holdings::Holdings>,
}

/// The limits of host sessions that a reload may change.
#[derive(Debug, Clone, Copy)]
struct Limits {
    initialize_wait: Duration,
    max_in_flight_per_session: usize,
    /// `server.max_sessions`.
    max_sessions: usize,
    /// `server.max_listen_streams_per_caller`.
    max_listen_streams_per_caller: usize,
    /// `server.max_parked_per_caller`, `server.park_timeout`.
    parking: rounds::Parking,
}

impl Limits {
    fn of(server: &ServerConfig) -> Self {
        Self {
            initialize_wait: server.initialize_wait,
            max_in_flight_per_session: server.max_in_flight_per_session,
            max_sessions: server.max_sessions,
            max_listen_streams_per_caller: server.max_listen_streams_per_caller,
            parking: rounds::Parking {
                per_caller: server.max_parked_per_caller,
                timeout: server.park_timeout,
            },
        }
    }
}

/// Whose request it is: a handshake-era session's, or a stateless (2026-07-28) host's, which
/// brings what it declares and is admitted with each request.
#[derive(Debug)]
pub enum Who {
    Session(Arc<Session>),
    Stateless {
        host: Arc<HostInfo>,
        access: Arc<Access>,
    },
}

/// One host request: the id it came under, what its host declared, who is asking and what they
/// see, the trace it continues, its response stream (for what belongs to it before its answer)
/// and, in the handshake era, its session.
#[derive(Debug)]
pub struct RequestCx {
    pub id: Box<RawValue>,
    /// What the host declared: at its session's `initialize`, or in this request's envelope.
    pub host: Arc<HostInfo>,
    /// Who is asking and the profile they see, read once as the request began (a reload may
    /// change a session's meanwhile).
    pub access: Arc<Access>,
    /// The W3C trace context it carried in `params._meta` (or, failing that, its HTTP headers).
    pub trace: Option<TraceParent>,
    pub sink: Option<Sink>,
    /// The session it belongs to; `None`: a stateless request, which belongs to none.
    pub session: Option<Arc<Session>>,
    /// Its span, when traces are exported.
    span: std::sync::OnceLock<HostSpan>,
}

impl RequestCx {
    /// A request of `who` under `id`, whose trace context is looked for in `params._meta`
    /// (`None`: it is known to carry none there); `headers_trace` is the trace context of its
    /// HTTP headers, used when `params._meta` carries none.
    pub fn new(
        who: Who,
        id: Box<RawValue>,
        sink: Option<Sink>,
        params: Option<&str>,
        headers_trace: Option<TraceParent>,
    ) -> Self {
        static TRACEPARENT: Needle = Needle::new(r#""traceparent""#);
        let trace = params
            .filter(|p| TRACEPARENT.is_in(p))
            .and_then(layers::traceparent_of)
            .or(headers_trace);
        let (host, access, session) = match who {
            Who::Session(session) => (Arc::clone(&session.host), session.access(), Some(session)),
            Who::Stateless { host, access } => (host, access, None),
        };
        Self {
            id,
            host,
            access,
            trace,
            sink,
            session,
            span: std::sync::OnceLock::new(),
        }
    }

    /// The profile the request sees (`None`: the whole catalog).
    pub fn profile(&self) -> Option<&crate::config::Profile> {
        self.access.profile.as_deref()
    }

    /// The principal it was authenticated as (`None` while hosts are anonymous).
    pub fn principal(&self) -> Option<&str> {
        self.access.principal.as_ref().map(|p| &*p.name)
    }

    /// The session of a method only a session has (the handshake era's own): never missing, as
    /// the parse refuses those methods to a stateless request.
    fn own_session(&self) -> Result<&Arc<Session>, RpcError> {
        self.session
            .as_ref()
            .ok_or_else(|| RpcError::new(codes::INVALID_REQUEST, "this method needs a session"))
    }

    /// Whose instances of a per-session upstream serve it: its session's, or — a stateless
    /// request has none — its principal's and profile's (what stays the same from one of its
    /// host's requests to the next). Never a session id for a stateless request.
    /// (Borrowed for a session, owned for a stateless request.)
    fn instance_key(&self) -> std::borrow::Cow<'_, str> {
        match &self.session {
            Some(session) => std::borrow::Cow::Borrowed(&session.id),
            None => std::borrow::Cow::Owned(format!(
                "stateless {}/{}",
                self.principal().unwrap_or("(anyone)"),
                self.profile().map_or("(all)", |p| p.name.as_str())
            )),
        }
    }
}

/// A request's answer as the transport sends it: its line, and the JSON-RPC error code the host
/// got, if any (the transport's status, where it has one, is decided from the code, never read
/// back out of the line).
#[derive(Debug, Default)]
pub struct Answered {
    pub line: String,
    pub error: Option<i64>,
}

/// What a request produced: a result to wrap or an upstream's answer to pass on.
enum Answer {
    Result(Box<RawValue>),
    Upstream(Reply),
}

/// The keys a host service signs and seals with, and the replica whose name its parked calls
/// carry (`[cluster]`).
pub struct Keys {
    /// Listing cursors of stateless hosts.
    pub cursors: crate::mcp::cursor::KeyRing,
    /// The `requestState` of multi-round calls.
    pub states: crate::sealed::SealRing,
    pub owner: Option<Arc<str>>,
}

impl HostService {
    pub fn new(
        router: RouterHandle,
        (delivery, signins): (Arc<Delivery>, Arc<crate::downstream::signin::SignIns>),
        supervisor: SupervisorHandle,
        audit: (AuditHandle, Redaction),
        (server, keys): (&ServerConfig, Keys),
    ) -> Self {
        let upstreams = Upstreams {
            router,
            supervisor,
            delivery,
            rounds: rounds::Rounds::new(keys.states, keys.owner),
            limits: arc_swap::ArcSwap::from_pointee(Limits::of(server)),
            audits: audit.0.is_enabled(),
            exchanges: exchanges::Exchanges::default(),
            signins,
        };
        Self {
            upstreams,
            audit: audit.0,
            audit_redaction: audit.1,
            cursors: CursorCodec::new(keys.cursors),
            stopping: tokio_util::sync::CancellationToken::new(),
            listening: Arc::default(),
        }
    }

    /// Each principal's own sign-ins to upstreams.
    pub fn signins(&self) -> &Arc<crate::downstream::signin::SignIns> {
        &self.upstreams.signins
    }

    /// Applies a reloaded config's session limits (to open sessions too).
    pub fn set_limits(&self, server: &ServerConfig) {
        (self.upstreams.limits).store(Arc::new(Limits::of(server)));
        self.upstreams.signins.set_ttl(server.sign_in_timeout);
    }

    /// The daemon is stopping: `subscriptions/listen` streams end now, each with its result.
    pub fn stop_streams(&self) {
        self.stopping.cancel();
    }

    /// Every open host session.
    pub fn sessions(&self) -> Vec<Arc<Session>> {
        self.upstreams.delivery.sessions.all()
    }

    /// How many host sessions may be open at once (`server.max_sessions`, as a reload sets it).
    pub fn max_sessions(&self) -> usize {
        self.upstreams.limits.load().max_sessions
    }

    /// A fresh id for a session (a legacy SSE one: the store mints handshake sessions' own).
    pub fn new_session_id(&self) -> String {
        self.upstreams.delivery.sessions.new_id()
    }

    /// The session a host names, marked as used now.
    pub fn session(&self, id: &str) -> Option<Arc<Session>> {
        self.upstreams.delivery.sessions.get(id)
    }

    /// Whether mcpmux answers `method` in a request of `version` (an unknown method, or one its
    /// revision does not have, is "method not found").
    pub fn serves(&self, method: &str, version: crate::mcp::version::Version) -> bool {
        Method::parse(method).is_some_and(|m| m.exists_in(version))
    }

    /// Checks a stateless host's `Mcp-Param-*` headers (`header(name)`: the values a header was
    /// sent with) against the arguments of its `tools/call` of `tool` in `profile`'s view: `-32020`
    /// when they do not match (a tool without `x-mcp-header` parameters takes any).
    pub fn check_param_headers<'h>(
        &self,
        profile: Option<&crate::config::Profile>,
        (tool, params): (Option<&str>, Option<&str>),
        header: impl Fn(&str) -> Vec<&'h str>,
    ) -> Result<(), RpcError> {
        #[derive(serde::Deserialize)]
        struct Call {
            #[serde(default)]
            arguments: serde_json::Value,
        }
        // The tool is looked up first: a call of a tool without such parameters (nearly every
        // one) parses nothing.
        let annotations = tool.and_then(|tool| {
            (self.upstreams.router).with_view(profile, |view| view.param_headers(tool))
        });
        let (Some(annotations), Some(params)) = (annotations, params) else {
            return Ok(());
        };
        let call: Call = serde_json::from_str(params)
            .map_err(|e| RpcError::invalid_params(format!("Invalid params: {e}")))?;
        crate::mcp::param_headers::check(&annotations, &call.arguments, header)
            .map_err(|why| RpcError::new(codes::HEADER_MISMATCH, format!("Header mismatch: {why}")))
    }

    /// A stateless host's `subscriptions/listen` (request `id` with `params`, from a host that
    /// declared `host` and has `access`): the stream's messages, or why it is refused.
    pub async fn listen(
        self: &Arc<Self>,
        id: &RawValue,
        params: Option<&str>,
        who: (HostInfo, crate::downstream::Access),
    ) -> Result<impl futures_util::Stream<Item = String> + Send + 'static, RpcError> {
        let version = crate::mcp::version::Version::MODERN;
        let params = Params {
            raw: params,
            read: None,
        };
        match HostMethod::parse(Method::Listen, params, version)? {
            HostMethod::Listen { filter } => self.listen_stream(id, who, filter).await,
            _ => Err(RpcError::method_not_found(Method::Listen.as_str())),
        }
    }

    /// Handles one request (of a session, or a stateless one); returns its answer.
    pub async fn request(&self, cx: &RequestCx, method: &str, params: Params<'_>) -> Answered {
        if let Some(tracer) = crate::telemetry::otel::tracer() {
            let session = cx.session.as_ref().map(|s| s.id.as_str());
            let who = (session, cx.host.version.as_str());
            let span = HostSpan::start(tracer, method, cx.trace.as_ref(), who);
            let _ = cx.span.set(span);
        }
        // Debug level: at the default level the span costs nothing.
        let span = tracing::debug_span!(
            "host_request",
            session = cx.session.as_ref().map_or("", |s| s.id.as_str()),
            method,
            target = tracing::field::Empty,
        );
        self.dispatch(cx, method, params).instrument(span).await
    }

    async fn dispatch(&self, cx: &RequestCx, name: &str, params: Params<'_>) -> Answered {
        let started = std::time::Instant::now();
        let too_deep = (params.raw).is_some_and(|p| nests_deeper_than(p, MAX_DEPTH));
        let request_bytes = params.raw.map_or(0, str::len);
        // The host's own limits (with `[hosts]`): its slot is held until the answer. A stateless
        // retry that continues a call parked for its input is not refused for that call's slot.
        let continues = || {
            static STATE: crate::jsonrpc::Needle = crate::jsonrpc::Needle::new("\"requestState\"");
            cx.session.is_none() && params.raw.is_some_and(|p| STATE.is_in(p))
        };
        let admitted = (cx.access.principal.as_ref())
            .map(|p| p.admit(continues))
            .transpose();
        let mut route = Route::default();
        // How a stateless request's result is written (its errors are numbered as its revision
        // numbers them at once).
        let mut fit = None;
        let method = Method::parse(name);
        let asked = method.map_or(Asked::Unknown(name), Asked::Method);
        let answer = match (admitted, method) {
            (Err(refused), _) => Err(refused),
            (Ok(_admitted), _) if too_deep => Err(RpcError::new(
                codes::INVALID_PARAMS,
                format!("Invalid params: nested deeper than {MAX_DEPTH} levels, mcpmux's limit"),
            )),
            (Ok(_admitted), None) => Err(RpcError::method_not_found(name)),
            (Ok(_admitted), Some(method)) => {
                let version = cx.host.version;
                match HostMethod::parse(method, params, version) {
                    Ok(parsed) if version.is_modern() => {
                        fit = Some(stateless_results::Fit::of(&parsed, cx, |kind| {
                            self.upstreams.router.view(cx.profile()).ttl_ms(kind)
                        }));
                        let answer = self.handle(cx, parsed, &mut route).await;
                        stateless_results::Fit::errors(answer)
                    }
                    Ok(parsed) => self.handle(cx, parsed, &mut route).await,
                    Err(error) => Err(error),
                }
            }
        };
        let id = &cx.id;
        let line = match &answer {
            Ok(Answer::Result(result) | Answer::Upstream(Reply::Result(result))) => match fit {
                Some(fit) => fit.response_line(id, result, route.interim),
                None => response_line(id, result),
            },
            Ok(Answer::Upstream(Reply::Error(error))) => raw_error_line(Some(id), error.get()),
            Err(error) => {
                tracing::debug!(code = error.code, error = %error.message, "Refused a host request.");
                error_line(Some(id), error)
            }
        };
        let outcome = Outcome::of(asked, &answer, route, started, self.audit.is_enabled());
        let sizes = layers::Sizes {
            request: request_bytes,
            response: line.len(),
        };
        let error = outcome.code;
        self.report(cx, asked, outcome, sizes);
        Answered { line, error }
    }

    /// What the request answers: its method family's handler, given the request's context, its
    /// method as parsed, and the dependencies it needs.
    async fn handle(
        &self,
        cx: &RequestCx,
        method: HostMethod<'_>,
        route: &mut Route,
    ) -> Result<Answer, RpcError> {
        let upstreams = &self.upstreams;
        let router = &upstreams.router;
        match method {
            HostMethod::Ping => Ok(Answer::Result(to_raw(&json!({})))),
            HostMethod::Discover => discover::discover(cx, upstreams).await,
            // A stream, which the transport serves through [`HostService::listen`].
            HostMethod::Listen { .. } => Err(RpcError::new(
                codes::INVALID_REQUEST,
                "subscriptions/listen is answered with an event stream; send it accepting text/event-stream",
            )),
            HostMethod::List { kind, cursor } => {
                listing::list(cx, (kind, cursor), (router, &self.cursors))
            }
            HostMethod::CallNamed {
                kind: ListKind::Prompts,
                name,
                members,
            } => prompts::get(cx, name, members, upstreams, route).await,
            HostMethod::CallNamed { name, members, .. } => {
                let called = (Method::ToolsCall, ListKind::Tools);
                match search::MetaTool::named(cx.profile(), ListKind::Tools, &name) {
                    None => tools::call(cx, name, members, upstreams, route).await,
                    Some(search::MetaTool::Search) => {
                        search::search_tools(cx, name, &members, upstreams, route).await
                    }
                    Some(search::MetaTool::Call) => {
                        search::call_found(cx, called, name, members, upstreams, route).await
                    }
                }
            }
            HostMethod::ReadResource { uri, members } => {
                resources::read(cx, uri, members, upstreams, route).await
            }
            HostMethod::ReadSkill {
                uri,
                directory,
                members,
            } => skills::read(cx, (uri, directory), members, upstreams, route).await,
            HostMethod::Subscribe { uri, on } => {
                subscriptions::subscribe(cx, (uri, on), upstreams, route).await
            }
            HostMethod::SetLogLevel { level } => logging::set_level(cx, level, upstreams).await,
            HostMethod::Complete {
                reference,
                reference_members,
                members,
            } => {
                let asked = (reference, reference_members, members);
                completion::complete(cx, asked, upstreams, route).await
            }
            HostMethod::Task {
                method,
                task,
                members,
            } => tasks::request(cx, (method, task, members), upstreams, route).await,
            HostMethod::ListTasks => tasks::list(cx, upstreams).await,
        }
    }
}

/// The error for a name that is not in the catalog: the upstream's state when the name's prefix
/// names one that is not ready, else the spec's "unknown" error.
fn unknown(snapshot: &Snapshot, kind: ListKind, name: &str) -> RpcError {
    if let Some(upstream) = names::prefix_of(name).and_then(|p| snapshot.upstream(p)) {
        if upstream.phase() != Phase::Ready {
            return upstream_error(upstream.unavailable());
        }
    }
    let what = if kind == ListKind::Tools {
        "tool"
    } else {
        "prompt"
    };
    RpcError::invalid_params(format!("Unknown {what}: {name}"))
}

/// The one mapping from upstream failures to JSON-RPC errors.
fn upstream_error(e: UpstreamError) -> RpcError {
    let (code, upstream) =
        match &e {
            UpstreamError::Timeout { upstream, .. } => (codes::UPSTREAM_TIMEOUT, upstream),
            UpstreamError::Cancelled { upstream } => (codes::INTERNAL_ERROR, upstream),
            UpstreamError::Busy { upstream, .. }
            | UpstreamError::TooManyInstances { upstream, .. } => (codes::BUSY, upstream),
            UpstreamError::Unavailable { upstream, .. }
            | UpstreamError::Failed { upstream, .. } => (codes::UPSTREAM_UNAVAILABLE, upstream),
        };
    RpcError::new(code, e.to_string()).with_data(json!({ "upstream": upstream }))
}

/// An internal failure: logged with its detail, shown to the host as a short id to quote.
fn internal(e: impl std::fmt::Display) -> RpcError {
    let id = crate::audit::hex(&rand::random::<[u8; 4]>());
    tracing::warn!(error_id = %id, error = %e, "Internal error while handling a host request.");
    RpcError::new(
        codes::INTERNAL_ERROR,
        format!("internal error (id {id}; the daemon's log has the details)"),
    )
}
