//! The one way to an upstream ([`Upstreams`]): every request a handler routed goes through
//! [`Upstreams::forward`], which picks the instance that serves it, swaps the host's progress
//! token for ours, makes it cancellable by the host and ties server requests it causes to this
//! host only — or, for a stateless request, to its rounds.

use std::borrow::Cow;
use std::sync::Arc;

use serde_json::Value;
use serde_json::value::RawValue;

use super::layers;
use super::outcome::{Forwarded, Route};
use super::rounds::{self, InputCaller, Resumed, Round, Rounds};
use super::{RequestCx, upstream_error};
use crate::config::{Isolation, Profile};
use crate::downstream::caller::SessionCaller;
use crate::downstream::delivery::Delivery;
use crate::downstream::holdings::Holder;
use crate::jsonrpc::{Members, RpcError, codes, raw, raw_string};
use crate::mcp::envelope::ENVELOPE_PREFIX;
use crate::mcp::method::Method;
use crate::mcp::names::Prefix;
use crate::router::RouterHandle;
use crate::supervisor::SupervisorHandle;
use crate::telemetry::otel::TraceParent;
use crate::upstream::{CallContext, Caller, ProgressTokens, Reply, UpstreamHandle};

/// Whether [`Upstreams::instance`] may start a session's own instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Start {
    /// Start it on first use (a call needs it).
    IfNeeded,
    /// Only one already running (mcpmux's own bookkeeping: log levels, task listings).
    No,
}

/// What a request reaches its upstream through — the catalog that routes it, the supervisor
/// and its per-session instances, the rounds of stateless calls, the session limits — and the
/// one call to the upstream ([`Upstreams::forward`]). Each handler that forwards takes this and
/// what else it needs by name.
#[derive(Debug)]
pub(super) struct Upstreams {
    pub router: RouterHandle,
    pub supervisor: SupervisorHandle,
    pub delivery: Arc<Delivery>,
    /// Calls of stateless hosts parked between rounds.
    pub rounds: Rounds,
    /// The session limits, as a reload sets them.
    pub limits: arc_swap::ArcSwap<super::Limits>,
    /// Whether a call's arguments are audited (copied when they are routed).
    pub audits: bool,
    /// Each principal's exchanged tokens (`grant = "token_exchange"`).
    pub exchanges: super::exchanges::Exchanges,
    /// Each principal's own sign-ins (`grant = "authorization_code"`, per principal).
    pub signins: Arc<crate::downstream::signin::SignIns>,
}

impl Upstreams {
    /// The one place that decides which connection serves a request to `upstream`: the shared
    /// instance, or the request's own instance of a per-session upstream (started on first use
    /// with [`Start::IfNeeded`]; `None` when there is none and it may not be started) — its
    /// session's, or for a stateless request, which belongs to no session, its principal's and
    /// profile's ([`RequestCx::instance_key`]), kept until it has been idle as long as a session
    /// may be.
    pub(super) async fn instance(
        &self,
        cx: &RequestCx,
        upstream: &UpstreamHandle,
        start: Start,
    ) -> Result<Option<UpstreamHandle>, RpcError> {
        // A principal's instance, or a stateless host's, is stopped once idle; a session's
        // stops with the session.
        let (key, secrets, idles) = match upstream.config().isolation {
            Isolation::Shared => return Ok(Some(upstream.clone())),
            Isolation::PerSession => (cx.instance_key(), None, cx.session.is_none()),
            Isolation::PerPrincipal => match &cx.access.principal {
                Some(principal) => {
                    let mut own = principal.secrets_for(upstream.name());
                    if upstream.exchanges_tokens() && own.bearer_token.is_none() {
                        return self
                            .exchanged_instance(cx, upstream, principal, start)
                            .await;
                    }
                    if upstream.signs_in_each_principal() && own.bearer_token.is_none() {
                        if start == Start::IfNeeded {
                            self.forget_refused(upstream, principal).await;
                            self.sign_in(cx, upstream, principal).await?;
                        }
                        let whom = crate::downstream::signin::Whom::of(principal);
                        own = self.signins.secrets(upstream, &whom, &own);
                    }
                    (Cow::Borrowed(principal.instance_key()), Some(own), true)
                }
                None => return Err(no_principal(upstream.name())),
            },
        };
        if idles {
            self.delivery.stateless_instances.touch(&key);
        }
        match start {
            Start::IfNeeded => (self.supervisor.instance(upstream, &key, secrets).await)
                .map(Some)
                .map_err(upstream_error),
            Start::No => Ok(self.supervisor.existing_instance(upstream.name(), &key)),
        }
    }

    /// A principal's instance of an upstream that exchanges its token: one per exchanged token
    /// ([`super::exchanges::Exchanges`]).
    async fn exchanged_instance(
        &self,
        cx: &RequestCx,
        upstream: &UpstreamHandle,
        principal: &crate::downstream::principal::Principal,
        start: Start,
    ) -> Result<Option<UpstreamHandle>, RpcError> {
        let subject = cx.access.subject_token.as_ref();
        let exchange_now = start == Start::IfNeeded;
        let Some(exchanged) = (self.exchanges)
            .for_principal(upstream, principal, subject, exchange_now)
            .await?
        else {
            return Ok(None);
        };
        self.delivery.stateless_instances.touch(&exchanged.key);
        match start {
            Start::IfNeeded => {
                (self
                    .supervisor
                    .instance(upstream, &exchanged.key, Some(exchanged.secrets)))
                .await
                .map(Some)
                .map_err(upstream_error)
            }
            Start::No => Ok(self
                .supervisor
                .existing_instance(upstream.name(), &exchanged.key)),
        }
    }

    /// Forwards a request whose params are already rewritten, with the upstream's request timeout.
    pub(super) async fn forward(
        &self,
        cx: &RequestCx,
        upstream: &UpstreamHandle,
        method: Method,
        members: Members<'_>,
        route: &mut Route,
    ) -> Result<Reply, RpcError> {
        self.forward_within(cx, upstream, method, members, None, route)
            .await
    }

    /// [`Self::forward`] for a tool call, whose deadline may be set per tool: the one upstream
    /// call, built once; the era chooses its caller — the session's, to which the upstream's
    /// own requests go as they are, or a stateless request's rounds, which turn them into
    /// requests for input — and how it is flown (awaited, or in rounds that may outlive this
    /// request of the host's).
    async fn forward_within(
        &self,
        cx: &RequestCx,
        upstream: &UpstreamHandle,
        method: Method,
        members: Members<'_>,
        tool: Option<&str>,
        route: &mut Route,
    ) -> Result<Reply, RpcError> {
        let target = match self.instance(cx, upstream, Start::IfNeeded).await {
            Ok(Some(target)) => target,
            Ok(None) => return Err(upstream_error(upstream.unavailable())),
            // A stateless host is asked in a round of its call (its retry comes back here).
            Err(e) if e.code == codes::URL_ELICITATION_REQUIRED && cx.session.is_none() => {
                let binding = binding(cx, method, route, upstream);
                let caller = Rounds::caller(Arc::clone(&cx.host), cx.sink.clone());
                let error = crate::jsonrpc::to_raw(&e);
                route.interim = true;
                return match self.rounds.open_urls(&caller, &binding, &error)? {
                    Round::InputRequired(result) => Ok(Reply::Result(result)),
                    Round::Done(reply) => reply.map_err(upstream_error),
                };
            }
            Err(e) => return Err(e),
        };
        let (caller, rounds) = self.caller(cx, &target).await;
        let mut trace = layers::trace::upstream(cx, method, tool, upstream.name());
        // A stateless request's `_meta` is here only when it holds more than the envelope (the
        // edge serves the params without one that holds nothing else).
        let enveloped = rounds.is_some();
        let (meta, progress) = rewrite_meta(members.get("_meta"), trace.meta(), enveloped)?;
        let params = match &meta {
            Some(meta) => meta.params(members),
            None => members.to_json(),
        };
        let _permit = layers::permit::claim(cx, self.limits.load().max_in_flight_per_session)?;
        let timeout = layers::deadline::of(upstream, tool);
        let call = CallContext {
            caller,
            progress,
            trace: trace.carried(cx),
        };
        let scoped = target.scope().map(str::to_owned);
        let request = async move {
            target
                .request_within(method.as_str(), Some(&params), Some(call), timeout)
                .await
        };
        let reply = match rounds {
            None => {
                let started = std::time::Instant::now();
                let reply = request.await;
                // The metrics count it once the host's answer is decided (`layers::metrics`).
                route.forwarded = Some(Forwarded {
                    upstream: upstream.clone(),
                    tool: None,
                    elapsed: started.elapsed(),
                });
                reply.map_err(upstream_error)
            }
            // Its call may take rounds: it runs on while the host answers what it asks.
            Some(caller) => {
                let flight = Rounds::flight(Box::pin(request), caller);
                let reply = self.round(flight, (cx, method, upstream), route).await;
                if let Some(scope) = scoped {
                    // Idle time counts from a call's end (one in flight is never stopped under
                    // it).
                    self.delivery.stateless_instances.touch(&scope);
                }
                reply
            }
        };
        trace.end(matches!(reply, Ok(Reply::Result(_))));
        reply
    }

    /// Whom the upstream's own requests go to, as the era decides, once: the session's host as
    /// they are, or a stateless request's rounds (returned too), which turn them into requests
    /// for input — and whose log level goes with the request to `target`.
    async fn caller(
        &self,
        cx: &RequestCx,
        target: &UpstreamHandle,
    ) -> (Arc<dyn Caller>, Option<Arc<InputCaller>>) {
        match &cx.session {
            Some(session) => {
                let caller = SessionCaller {
                    session: Arc::clone(session),
                    host_id: Some(cx.id.clone()),
                    sink: cx.sink.clone(),
                };
                (Arc::new(caller), None)
            }
            None => {
                self.level_for_request(cx, target).await;
                let caller = Rounds::caller(Arc::clone(&cx.host), cx.sink.clone());
                (Arc::clone(&caller) as Arc<dyn Caller>, Some(caller))
            }
        }
    }

    /// One round of a stateless host's call: the upstream's answer, or the `input_required`
    /// result that asks the host for what the upstream waits for (`route.interim`).
    async fn round(
        &self,
        flight: rounds::Flight,
        (cx, method, upstream): (&RequestCx, Method, &UpstreamHandle),
        route: &mut Route,
    ) -> Result<Reply, RpcError> {
        let bind = || binding(cx, method, route, upstream);
        let parks_for = || rounds::ParkedFor {
            holder: Holder::of(&cx.access),
            principal: cx.access.principal.clone(),
            parking: self.limits.load().parking,
        };
        match self.rounds.round(flight, (&bind, &parks_for)).await? {
            (Round::Done(reply), started) => {
                route.forwarded = Some(Forwarded {
                    upstream: upstream.clone(),
                    tool: None,
                    elapsed: started.elapsed(),
                });
                reply.map_err(upstream_error)
            }
            (Round::InputRequired(result), _) => {
                route.interim = true;
                Ok(Reply::Result(result))
            }
        }
    }

    /// Forwards a routed request, or, for a stateless host's retry of a call that asked for
    /// input, continues the parked call its `requestState` names with its `inputResponses` (or
    /// sends the call again, when the state came with URL elicitations).
    pub(super) async fn forward_or_resume(
        &self,
        cx: &RequestCx,
        (method, upstream): (Method, &UpstreamHandle),
        mut members: Members<'_>,
        tool: Option<&str>,
        route: &mut Route,
    ) -> Result<Reply, RpcError> {
        let state = (members.string("requestState")).filter(|_| cx.session.is_none());
        if let Some(state) = state {
            let binding = binding(cx, method, route, upstream);
            let responses = members.get("inputResponses");
            let sink = cx.sink.clone();
            match self.rounds.resume(&state, &binding, responses, sink)? {
                Resumed::Flight(flight) => {
                    return self.round(flight, (cx, method, upstream), route).await;
                }
                Resumed::Again => {
                    members.remove("requestState");
                    members.remove("inputResponses");
                }
                Resumed::Relay(upstream_state) => {
                    let upstream_state = raw_string(&upstream_state);
                    members.insert("requestState", &upstream_state);
                    return self
                        .forward_within(cx, upstream, method, members, tool, route)
                        .await;
                }
            }
        }
        self.forward_within(cx, upstream, method, members, tool, route)
            .await
    }

    /// Sends a request of mcpmux's own (not a host's) to an upstream.
    pub(super) async fn upstream_request(
        &self,
        upstream: &UpstreamHandle,
        method: Method,
        params: &Value,
    ) -> Result<Reply, RpcError> {
        upstream
            .request(method.as_str(), Some(&params.to_string()), None)
            .await
            .map_err(upstream_error)
    }
}

/// The refusal of an app's request for `name`, which several upstreams' items have as their own
/// name: never guessed; the host (or a person) can pick one by its exposed name.
pub(super) fn several_apps(name: &str, exposed: &[&str]) -> RpcError {
    RpcError::invalid_params(format!(
        "`{name}` is the name of several apps' tools or resources here: {}; call one of them by that name (to make one app's own calls route, rename or prefix the other upstream, or leave it out of this profile)",
        exposed.join(", ")
    ))
}

/// What a stateless host's call to `upstream` is bound to: its principal, method, exposed name
/// or URI (as routed) and upstream.
fn binding(cx: &RequestCx, method: Method, route: &Route, upstream: &UpstreamHandle) -> String {
    let target = route.target.as_deref().unwrap_or_default();
    let profile = cx.profile().map(|p| p.name.as_str());
    rounds::binding(
        (cx.access.principal.as_deref(), profile),
        method.as_str(),
        target,
        upstream.name(),
    )
}

impl RequestCx {
    /// The prefix `upstream`'s names and URIs carry in this host's view.
    pub(super) fn prefix_of<'a>(&self, upstream: &'a UpstreamHandle) -> &'a Prefix {
        Profile::prefix_for(self.profile(), upstream.prefix())
    }
}

/// What became of a forwarded request's `_meta`.
enum Meta {
    Rewritten(Box<RawValue>),
    /// Nothing is left of it.
    Gone,
}

impl Meta {
    /// The params `members` with this `_meta` in them, as JSON.
    fn params<'a>(&'a self, mut members: Members<'a>) -> String {
        match self {
            Self::Rewritten(meta) => members.insert("_meta", meta),
            Self::Gone => {
                members.remove("_meta");
            }
        }
        members.to_json()
    }
}

/// A forwarded request's `_meta` with what mcpmux owns rewritten — the host's progress token
/// swapped for ours, the trace context the upstream continues, and (for a stateless request,
/// `enveloped`) the host's `io.modelcontextprotocol/` envelope left out: it describes the host's
/// hop to mcpmux, not mcpmux's to the upstream — and the tokens; `None` when nothing changed.
fn rewrite_meta(
    meta: Option<&RawValue>,
    trace: Option<&TraceParent>,
    enveloped: bool,
) -> Result<(Option<Meta>, Option<ProgressTokens>), RpcError> {
    if meta.is_none() && trace.is_none() {
        return Ok((None, None));
    }
    let (mut meta, stripped) = match meta {
        Some(meta) if enveloped => {
            let mut meta = Members::parse(meta)?;
            let stripped = meta.remove_prefixed(ENVELOPE_PREFIX);
            (meta, stripped)
        }
        Some(meta) => (Members::parse(meta)?, false),
        None => (Members::default(), false),
    };
    let mut progress = None;
    let ours;
    if let Some(host_token) = meta.get("progressToken").map(ToOwned::to_owned) {
        let tokens = ProgressTokens::new(host_token);
        ours = raw(tokens.ours.clone());
        meta.insert("progressToken", &ours);
        progress = Some(tokens);
    }
    let traceparent = trace.map(|t| raw_string(&t.traceparent));
    let tracestate = trace.and_then(|t| t.tracestate.as_deref().map(raw_string));
    if let Some(traceparent) = &traceparent {
        meta.insert("traceparent", traceparent);
        if let Some(tracestate) = &tracestate {
            meta.insert("tracestate", tracestate);
        }
    }
    let changed = progress.is_some() || traceparent.is_some() || stripped;
    let meta = match meta.is_empty() {
        true => Meta::Gone,
        false => Meta::Rewritten(meta.to_raw()),
    };
    Ok((changed.then_some(meta), progress))
}

/// A caller without a credential asked for an upstream that gives each principal its own
/// identity: there is none to give it (validation keeps such upstreams out of anonymous views;
/// this holds after a reload too).
fn no_principal(upstream: &str) -> RpcError {
    RpcError::new(
        codes::INVALID_REQUEST,
        format!(
            "upstream `{upstream}` acts as each caller's own identity, and this request has none: connect with a host credential ([hosts.NAME]) or a signed-in token"
        ),
    )
}
