//! Streamable HTTP at `/mcp` (MCP 2025-03-26 and later): POST carries host messages and answers
//! with JSON, or with an event stream when the request produces messages (progress, server
//! requests) before its answer; GET opens the session's event stream; DELETE ends the session.
//! A profile with `path = true` is served the same way at `/mcp/NAME`. `legacy` serves the
//! 2024-11-05 HTTP+SSE transport at `/sse` + `/messages`.
//!
//! Every handler starts from an admitted request (`admission`: the origin checks, then its
//! access — the host its bearer token names and the profile it sees — and, where it names
//! one, its session); what it does with the message is the host service's. `cors` lets the
//! pages of web hosts from `server.allowed_origins` call it from the browser.

mod accepts;
mod admission;
mod body;
mod cors;
mod forward;
mod legacy;
mod posted;
mod signin;
mod stateless;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::Stream;
use serde_json::value::RawValue;

use super::principal::Principal;
use super::service::{Answered, HostService, RequestCx, Who};
use super::session::Session;
use super::stream::request_stream;
use crate::config::ServerConfig;
use crate::jsonrpc::{Incoming, Message, RpcError, codes, error_line};
use crate::mcp::method::Method;
use crate::telemetry::otel::TraceParent;
use accepts::Accepts;
use admission::{Admitted, InSession, Refusal, check_version, refuse};
pub use admission::{Gate, ProtectedResource};
use posted::Posted;

/// `Mcp-Session-Id`, as a name made at compile time (a lookup by text checks and hashes it each
/// time).
const SESSION: HeaderName = HeaderName::from_static(crate::mcp::SESSION_HEADER);
/// Messages a request may produce before its answer without waiting for the host to read.
const REQUEST_STREAM: usize = 64;
const KEEP_ALIVE: Duration = Duration::from_secs(15);

struct AppState {
    service: Arc<HostService>,
    /// When listening on loopback, `Host` must name loopback too (DNS-rebinding protection).
    loopback_only: bool,
    legacy: legacy::Connections,
    /// What the running config says about who may come in; a reload replaces it.
    edge: arc_swap::ArcSwap<Edge>,
}

/// The settings of the host endpoint a reload may change.
#[derive(Debug)]
struct Edge {
    allowed_origins: Vec<String>,
    /// Largest request body accepted (`server.max_body_bytes`).
    max_body_bytes: usize,
    /// Who a request is and what it sees.
    admission: admission::Admission,
}

impl Edge {
    fn new(config: &ServerConfig, gate: Gate) -> Self {
        let admission = admission::Admission::new(gate, config);
        admission.announce(config.listen.ip().is_loopback());
        Self {
            allowed_origins: config.allowed_origins.clone(),
            max_body_bytes: config.max_body_bytes,
            admission,
        }
    }
}

/// What a reload changes of the host endpoint: its origins, body limit and admission, and the
/// access of every open session.
#[derive(Clone)]
pub struct EdgeControl(Arc<AppState>);

impl std::fmt::Debug for EdgeControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EdgeControl")
    }
}

impl EdgeControl {
    /// Applies a reloaded `config` and `gate`: requests from now on are admitted by them, and each
    /// open session gets what they grant it now (its host's new limits and profile); a session
    /// they grant nothing any more ends. Returns how many sessions ended.
    ///
    /// A host that is gone, or whose own identity toward per-principal upstreams changed, has
    /// its instances of them stopped: its next call starts one with what the config says now.
    pub async fn reload(&self, config: &ServerConfig, gate: Gate) -> usize {
        let changed: Vec<String> = (self.0.edge.load().admission.principals().iter())
            .filter(|old| {
                !(gate.principals.iter())
                    .any(|new| Principal::same(Some(old), Some(new)) && new.secrets == old.secrets)
            })
            .map(|old| old.instance_key().to_owned())
            .collect();
        let edge = Arc::new(Edge::new(config, gate));
        self.0.edge.store(Arc::clone(&edge));
        for key in changed {
            self.0.service.stop_instances_of(&key).await;
        }
        let mut ended = 0;
        for session in self.0.service.sessions() {
            match edge.admission.remap(&session.access()) {
                Some(access) => session.set_access(access),
                None => {
                    ended += 1;
                    tracing::info!(session = %session.id, "Ending a host session: the reloaded config no longer admits it.");
                    self.0.service.close_session(&session.id).await;
                }
            }
        }
        ended
    }
}

/// What the host endpoint answers beside MCP: whether to send it requests (`/readyz`), and the
/// replica it is of a cluster (requests bound to another are forwarded there).
pub struct Serving {
    pub readiness: Arc<crate::readiness::Readiness>,
    pub cluster: Option<Arc<crate::cluster::Cluster>>,
}

/// The host-facing HTTP application (served with `ConnectInfo<SocketAddr>`, which tells which
/// clients are on loopback), and what reloads change of it. `/healthz` and `/readyz` are open
/// (load balancers and probes ask them; they tell nothing but that it answers).
pub fn app(
    service: Arc<HostService>,
    (config, gate): (&ServerConfig, Gate),
    serving: Serving,
) -> (Router, EdgeControl) {
    let state = Arc::new(AppState {
        service,
        loopback_only: config.listen.ip().is_loopback(),
        legacy: legacy::Connections::default(),
        edge: arc_swap::ArcSwap::from_pointee(Edge::new(config, gate)),
    });
    let control = EdgeControl(Arc::clone(&state));
    let router = Router::new()
        .route(
            "/mcp",
            post(post_message)
                .get(get_stream)
                .delete(delete)
                .options(cors::preflight),
        )
        .route(
            "/mcp/{profile}",
            post(post_message)
                .get(get_stream)
                .delete(delete)
                .options(cors::preflight),
        )
        .route(
            "/.well-known/oauth-protected-resource",
            get(admission::protected_resource),
        )
        .route(
            "/.well-known/oauth-protected-resource/{*path}",
            get(admission::protected_resource),
        )
        .route("/signin/{id}", get(signin::show).post(signin::prove))
        .route(
            crate::downstream::signin::CALLBACK_PATH,
            get(signin::callback),
        )
        .route("/sse", get(legacy::handle_sse))
        .route("/messages", post(legacy::handle_message))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", {
            let readiness = serving.readiness;
            get(move || async move { readiness.answer() })
        })
        // Bodies are read within the limit by `body::read`, which answers 413 cleanly.
        .layer(DefaultBodyLimit::disable());
    // Web hosts' pages, from origins configured for them: a layer only then.
    let router = match config.allowed_origins.is_empty() {
        true => router,
        false => router.layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state),
            cors::allow,
        )),
    };
    let router = router.with_state(state);
    // Replicas of a cluster only: nothing is added to a single daemon's requests.
    let router = match serving.cluster {
        None => router,
        Some(cluster) => {
            let forwarding = Arc::new(forward::Forwarding {
                cluster,
                max_body_bytes: config.max_body_bytes,
            });
            router.layer(axum::middleware::from_fn_with_state(
                forwarding,
                forward::forward,
            ))
        }
    };
    (router, control)
}

impl Edge {
    /// The request body within `max_body_bytes`, or the refusal to send instead (which closes
    /// the connection: what is left of the body is not read).
    async fn body(&self, body: Body) -> Result<Bytes, Refusal> {
        body::read(body, self.max_body_bytes).await.map_err(|e| {
            let refusal = match e {
                body::BodyError::TooLarge(limit) => refuse(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    codes::INVALID_REQUEST,
                    format!(
                        "Payload Too Large: the body exceeds server.max_body_bytes ({limit} bytes)"
                    ),
                ),
                body::BodyError::Broken => refuse(
                    StatusCode::BAD_REQUEST,
                    codes::INVALID_REQUEST,
                    "Bad Request: the body broke off",
                ),
            };
            refusal.closing()
        })
    }
}

/// Headers a response's map has room for. hyper parses the next request on the connection into
/// the map the previous response's headers left behind: one sized for the few headers of an
/// answer would be regrown (an allocation and a rehash) for every request of seven headers or
/// more — a 2026-07-28 request has seven at least, an SDK's ten or so.
const HEADER_ROOM: usize = 24;

fn json_response(body: String) -> Response {
    let mut response = Response::new(Body::from(body));
    let headers = response.headers_mut();
    *headers = HeaderMap::with_capacity(HEADER_ROOM);
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// POST `/mcp` (or `/mcp/NAME`): one host message, or a batch.
///
/// The request is taken whole, so its headers are moved out of it: a `HeaderMap` extractor would
/// copy them.
async fn post_message(
    State(state): State<Arc<AppState>>,
    admitted: Admitted,
    request: axum::extract::Request,
) -> Response {
    let (axum::http::request::Parts { headers, .. }, body) = request.into_parts();
    (posted(&state, admitted, &headers, body).await)
        .unwrap_or_else(|refused| refused.respond(&headers))
}

/// [`post_message`], refused with `?`.
async fn posted(
    state: &Arc<AppState>,
    admitted: Admitted,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, Refusal> {
    let body = admitted.edge.body(body).await?;
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if !content_type.starts_with("application/json") {
        return Err(refuse(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            codes::INVALID_REQUEST,
            "Unsupported Media Type: send application/json",
        ));
    }
    if body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') {
        let Ok(text) = std::str::from_utf8(&body) else {
            return Err(Refusal::from_error(
                StatusCode::BAD_REQUEST,
                posted::not_utf8(),
            ));
        };
        return handle_batch(state, headers, text, &admitted).await;
    }
    let posted = Posted::read(body, headers)
        .map_err(|error| Refusal::from_error(StatusCode::BAD_REQUEST, error))?;
    if posted.borrow_dependent().stateless {
        return stateless::post(state, admitted, headers, posted).await;
    }
    let request_id = posted.request().map(|(id, ..)| id);
    check_version(headers).map_err(|refusal| refusal.to(request_id))?;
    let accepts = Accepts::of(headers);
    if request_id.is_some() && !accepts.json && !accepts.stream {
        return Err(refuse(
            StatusCode::NOT_ACCEPTABLE,
            codes::INVALID_REQUEST,
            "Not Acceptable: a request's Accept must include application/json and text/event-stream",
        )
        .to(request_id));
    }
    match &posted.borrow_dependent().message {
        Message::Request { id, method, params } if method == Method::Initialize.as_str() => {
            Ok(initialize(state, (admitted, headers), (id, *params), accepts).await)
        }
        Message::Request { id, .. } => {
            let session = (admitted.session(state, headers)).map_err(|r| r.to(Some(id)))?;
            let service = Arc::clone(&state.service);
            let trace = TraceParent::from_headers(headers);
            let who = (Who::Session(session), trace);
            Ok(answer(service, who, posted, accepts, |_| StatusCode::OK).await)
        }
        other => {
            let session = admitted.session(state, headers)?;
            accept(&state.service, &session, other);
            Ok(StatusCode::ACCEPTED.into_response())
        }
    }
}

/// `initialize`: a new session, its id in `Mcp-Session-Id`. A host that initializes again naming
/// its session replaces it (the stdio bridge does when its host initializes twice): that one is
/// closed, not left to expire.
async fn initialize(
    state: &AppState,
    (admitted, headers): (Admitted, &HeaderMap),
    (id, params): (&RawValue, Option<&RawValue>),
    accepts: Accepts,
) -> Response {
    let replaces = admitted.session(state, headers).ok();
    let replaces = replaces.as_ref().map(|s| s.id.as_str());
    let initialized = (state.service)
        .initialize(id, params, (None, replaces), admitted.access)
        .await;
    match initialized {
        Ok((session, line)) => {
            let mut response = if accepts.stream_answers() {
                Sse::new(futures_util::stream::iter([event(line)])).into_response()
            } else {
                json_response(line)
            };
            if let Ok(value) = HeaderValue::from_str(&session.id) {
                response.headers_mut().insert(SESSION, value);
            }
            response
        }
        Err(error) => {
            let line = error_line(Some(id), &error);
            (initialize_status(&error), json_response(line)).into_response()
        }
    }
}

/// The HTTP status of a refused `initialize`: 429 when a session limit is reached.
fn initialize_status(error: &RpcError) -> StatusCode {
    if error.code == codes::TOO_MANY_SESSIONS {
        StatusCode::TOO_MANY_REQUESTS
    } else {
        StatusCode::BAD_REQUEST
    }
}

/// A host notification or answer: handled at once, nothing to reply.
fn accept(service: &HostService, session: &Session, message: &Message<'_>) {
    match *message {
        Message::Notification {
            ref method, params, ..
        } => service.host_notification(session, method, params),
        Message::Response { id, result } => service.host_answer(session, id, Some(result), None),
        Message::Error { id, error } => service.host_answer(session, id, None, Some(error)),
        Message::Request { .. } => {}
    }
}

/// Answers one request: JSON when the answer comes first (unless the host prefers event
/// streams), otherwise an event stream carrying what the request produced (progress, server
/// requests) and then the answer. A host that accepts no event stream never gets one: what the
/// request produces goes to its session's GET stream instead, and the answer as JSON.
///
/// `status` is the HTTP status of an answer sent as JSON, from the error code the host got, if
/// any (a stateless request's refusals of what it did not declare are 400).
async fn answer(
    service: Arc<HostService>,
    (who, trace): (Who, Option<TraceParent>),
    posted: Posted,
    accepts: Accepts,
    status: fn(Option<i64>) -> StatusCode,
) -> Response {
    let Some((id, _, params)) = posted.request() else {
        // Never: only a request is answered.
        return StatusCode::ACCEPTED.into_response();
    };
    let (sink, mut rx) = request_stream(REQUEST_STREAM);
    let sink = accepts.stream.then_some(sink);
    // The params are looked into for a trace context unless their `_meta` is known to hold none.
    let traced = params.filter(|_| !posted.meta_is_envelope());
    let cx = RequestCx::new(who, id.to_owned(), sink, traced, trace);
    // The future takes the body along: the handler is given the params where the edge read them.
    let mut answer = Box::pin(async move {
        match posted.handled() {
            Some((method, params)) => service.request(&cx, method, params).await,
            None => Answered::default(),
        }
    });
    tokio::select! {
        biased;
        answered = &mut answer => {
            // Messages queued just before the answer still go first, on a stream.
            let mut early = Vec::new();
            while let Some(message) = rx.try_recv() {
                early.push(message);
            }
            if early.is_empty() && !accepts.stream_answers() {
                return (status(answered.error), json_response(answered.line)).into_response();
            }
            early.push(answered.line);
            unbuffered(Sse::new(futures_util::stream::iter(early.into_iter().map(event))).into_response())
        }
        first = rx.recv() => {
            let queued = std::collections::VecDeque::from([first]);
            let stream = futures_util::stream::unfold((queued, rx, Some(answer)), |(mut queued, mut rx, answer)| async move {
                if let Some(line) = queued.pop_front() {
                    return Some((event(line), (queued, rx, answer)));
                }
                let mut answer = answer?;
                tokio::select! {
                    biased;
                    line = rx.recv() => Some((event(line), (queued, rx, Some(answer)))),
                    answered = &mut answer => {
                        // Everything the request produced before its answer goes before it: a
                        // receive the task's cooperative budget cut short must not leave the
                        // last progress behind when the answer is ready in the same poll.
                        while let Some(early) = rx.try_recv() {
                            queued.push_back(early);
                        }
                        queued.push_back(answered.line);
                        let next = queued.pop_front()?;
                        Some((event(next), (queued, rx, None)))
                    }
                }
            });
            unbuffered(Sse::new(stream).into_response())
        }
    }
}

/// An event stream that reverse proxies are told not to hold back (nginx buffers responses
/// unless told `X-Accel-Buffering: no`): a request's messages must reach the host as they come.
fn unbuffered(mut response: Response) -> Response {
    const ACCEL_BUFFERING: HeaderName = HeaderName::from_static("x-accel-buffering");
    (response.headers_mut()).insert(ACCEL_BUFFERING, HeaderValue::from_static("no"));
    response
}

fn event(line: String) -> Result<Event, Infallible> {
    Ok(Event::default().data(line))
}

/// A JSON-RPC batch: only in 2025-03-26, the one revision that has them.
async fn handle_batch(
    state: &AppState,
    headers: &HeaderMap,
    text: &str,
    admitted: &Admitted,
) -> Result<Response, Refusal> {
    let session = admitted.session(state, headers)?;
    if !session.host.version.has_batches() {
        let why = format!(
            "Invalid request: JSON-RPC batches are not part of MCP {}",
            session.host.version
        );
        return Err(refuse(StatusCode::BAD_REQUEST, codes::INVALID_REQUEST, why));
    }
    let items: Vec<&RawValue> = serde_json::from_str(text).map_err(|e| {
        refuse(
            StatusCode::BAD_REQUEST,
            codes::PARSE_ERROR,
            format!("Parse error: {e}"),
        )
    })?;
    if items.is_empty() {
        return Err(refuse(
            StatusCode::BAD_REQUEST,
            codes::INVALID_REQUEST,
            "Invalid request: empty batch",
        ));
    }
    let mut answers = Vec::new();
    let mut lines: Vec<String> = Vec::new();
    for item in items {
        match Incoming::parse(item.get()) {
            Ok(Message::Request { id, method, .. }) if method == Method::Initialize.as_str() => {
                let error = RpcError::new(
                    codes::INVALID_REQUEST,
                    "initialize cannot be part of a batch",
                );
                lines.push(error_line(Some(id), &error));
            }
            Ok(Message::Request { id, method, params }) => {
                let trace = TraceParent::from_headers(headers);
                let cx = RequestCx::new(
                    Who::Session(Arc::clone(&session)),
                    id.to_owned(),
                    None,
                    params.map(RawValue::get),
                    trace,
                );
                let (method, params) = (method.into_owned(), params.map(ToOwned::to_owned));
                let service = &state.service;
                answers.push(async move {
                    (service
                        .request(&cx, &method, params.as_deref().into())
                        .await)
                        .line
                });
            }
            Ok(other) => accept(&state.service, &session, &other),
            Err(error) => lines.push(error_line(None, &error)),
        }
    }
    lines.extend(futures_util::future::join_all(answers).await);
    if lines.is_empty() {
        return Ok(StatusCode::ACCEPTED.into_response());
    }
    Ok(json_response(format!("[{}]", lines.join(","))))
}

/// GET `/mcp` (or `/mcp/NAME`): the session's event stream, notifications and server requests
/// that belong to no open request.
async fn get_stream(
    State(state): State<Arc<AppState>>,
    admitted: Admitted,
    headers: HeaderMap,
) -> Response {
    event_stream(&state, &admitted, &headers).unwrap_or_else(|refused| refused.respond(&headers))
}

/// [`get_stream`], refused with `?`.
fn event_stream(
    state: &AppState,
    admitted: &Admitted,
    headers: &HeaderMap,
) -> Result<Response, Refusal> {
    check_version(headers)?;
    let accepts_sse = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("text/event-stream"));
    if !accepts_sse {
        return Err(refuse(
            StatusCode::NOT_ACCEPTABLE,
            codes::INVALID_REQUEST,
            "Not Acceptable: GET needs Accept: text/event-stream",
        ));
    }
    let session = admitted.session(state, headers)?;
    let Some(guard) = session.attach_stream() else {
        return Err(refuse(
            StatusCode::CONFLICT,
            codes::INVALID_REQUEST,
            "Conflict: this session already has an open event stream",
        ));
    };
    let stream = futures_util::stream::unfold(guard, |mut guard| async move {
        let line = guard.recv().await?;
        Some((event(line), guard))
    });
    Ok(sse(stream))
}

fn sse(stream: impl Stream<Item = Result<Event, Infallible>> + Send + 'static) -> Response {
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response()
}

/// DELETE `/mcp` (or `/mcp/NAME`): ends the session.
async fn delete(State(state): State<Arc<AppState>>, InSession { session }: InSession) -> Response {
    state.service.close_session(&session.id).await;
    StatusCode::OK.into_response()
}
