//! Streamable HTTP at `/mcp` (MCP 2025-03-26 and later): POST carries host messages and answers
//! with JSON, or with an event stream when the request produces messages (progress, server
//! requests) before its answer; GET opens the session's event stream; DELETE ends the session.
//! A profile with `path = true` is served the same way at `/mcp/NAME`. `legacy` serves the
//! 2024-11-05 HTTP+SSE transport at `/sse` + `/messages`.
//!
//! Every request is first given its [`Access`]: the host its bearer token names (with `[hosts]`),
//! and the profile it sees — its path's, its host's, or `server.anonymous_profile` for a loopback
//! client without a credential.

mod body;
mod guard;
mod legacy;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::Stream;
use serde_json::value::RawValue;
use tokio::sync::mpsc;

use super::jwt::JwtGate;
use super::principal::{Access, Principal};
use super::service::{HostRequest, HostService};
use super::session::Session;
use crate::config::{Profile, ServerConfig};
use crate::jsonrpc::{Incoming, Message, RpcError, codes, error_line};
use guard::{Refusal, check_origin, check_version, refuse};

const SESSION_HEADER: &str = "mcp-session-id";
/// Messages a request may produce before its answer without waiting for the host to read.
const REQUEST_STREAM: usize = 64;
const KEEP_ALIVE: Duration = Duration::from_secs(15);

struct AppState {
    service: Arc<HostService>,
    allowed_origins: Vec<String>,
    /// When listening on loopback, `Host` must name loopback too (DNS-rebinding protection).
    loopback_only: bool,
    legacy: legacy::Connections,
    /// Largest request body accepted (`server.max_body_bytes`).
    max_body_bytes: usize,
    /// Who checks credentials; no hosts and no JWT issuer: hosts are anonymous.
    credentials: guard::Credentials,
    /// The protected resource metadata document, with `[server.authorization]`.
    resource_metadata: Option<String>,
    /// The profiles served at their own path.
    paths: Vec<Arc<Profile>>,
    /// What a loopback client without a credential sees.
    anonymous: Option<Arc<Profile>>,
}

/// Who may use the host endpoint and what they see.
#[derive(Debug)]
pub struct Gate {
    /// The `[hosts]` principals, in config order.
    pub principals: Vec<Arc<Principal>>,
    pub profiles: Vec<Arc<Profile>>,
    /// The JWT issuers, if any host signs in with a JWT.
    pub jwt: Option<JwtGate>,
    /// mcpmux as an OAuth protected resource (`[server.authorization]`).
    pub protected: Option<ProtectedResource>,
}

/// What RFC 9728's protected resource metadata says about mcpmux.
#[derive(Debug)]
pub struct ProtectedResource {
    pub resource: String,
    pub authorization_servers: Vec<String>,
    pub scopes_supported: Vec<String>,
}

impl ProtectedResource {
    /// Where the metadata is: the well-known path inserted before the resource's path.
    fn metadata_url(&self) -> String {
        match url::Url::parse(&self.resource) {
            Ok(url) => format!(
                "{}/.well-known/oauth-protected-resource{}",
                url.origin().ascii_serialization(),
                url.path().trim_end_matches('/')
            ),
            Err(_) => self.resource.clone(),
        }
    }

    fn document(&self) -> String {
        serde_json::json!({
            "resource": self.resource,
            "authorization_servers": self.authorization_servers,
            "scopes_supported": self.scopes_supported,
            "bearer_methods_supported": ["header"],
            "resource_name": "mcpmux",
        })
        .to_string()
    }
}

/// The host-facing HTTP application (served with `ConnectInfo<SocketAddr>`, which tells which
/// clients are on loopback).
pub fn app(service: Arc<HostService>, config: &ServerConfig, gate: Gate) -> Router {
    let profiles = gate.profiles;
    let metadata_url = gate.protected.as_ref().map(ProtectedResource::metadata_url);
    let state = Arc::new(AppState {
        service,
        allowed_origins: config.allowed_origins.clone(),
        loopback_only: config.listen.ip().is_loopback(),
        legacy: legacy::Connections::default(),
        max_body_bytes: config.max_body_bytes,
        credentials: guard::Credentials {
            hosts: gate.principals,
            jwt: gate.jwt,
            resource_metadata: metadata_url,
        },
        resource_metadata: gate.protected.as_ref().map(ProtectedResource::document),
        paths: profiles.iter().filter(|p| p.path).cloned().collect(),
        anonymous: (config.anonymous_profile.as_ref())
            .and_then(|name| profiles.iter().find(|p| &p.name == name).cloned()),
    });
    Router::new()
        .route(
            "/mcp",
            post(handle_post).get(handle_get).delete(handle_delete),
        )
        .route(
            "/mcp/{profile}",
            post(handle_post_at)
                .get(handle_get_at)
                .delete(handle_delete_at),
        )
        .route(
            "/.well-known/oauth-protected-resource",
            get(protected_resource),
        )
        .route(
            "/.well-known/oauth-protected-resource/{*path}",
            get(protected_resource),
        )
        .route("/sse", get(legacy::handle_sse))
        .route("/messages", post(legacy::handle_message))
        // Bodies are read within the limit by `body::read`, which answers 413 cleanly.
        .layer(DefaultBodyLimit::disable())
        .with_state(state)
}

impl AppState {
    /// The request body within `max_body_bytes`, or the refusal to send instead.
    async fn body(&self, body: Body, headers: &HeaderMap) -> Result<Bytes, Response> {
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
            let mut response = refusal.answering(None, headers).into_response();
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            response
        })
    }

    fn check_origin(&self, headers: &HeaderMap) -> Result<(), Refusal> {
        check_origin(headers, &self.allowed_origins, self.loopback_only)
    }

    /// Who is asking and what they see. With `[hosts]`, a request needs a valid credential
    /// unless it comes from loopback to a profile path that does not require one, or (on `/mcp`)
    /// `server.anonymous_profile` is set; a host with a profile may use only that profile's path.
    async fn access(
        &self,
        headers: &HeaderMap,
        peer: SocketAddr,
        path: Option<&str>,
    ) -> Result<Access, Refusal> {
        let at = match path {
            None => None,
            Some(name) => Some(
                (self.paths.iter())
                    .find(|p| p.name == name)
                    .cloned()
                    .ok_or_else(|| {
                        refuse(
                            StatusCode::NOT_FOUND,
                            codes::INVALID_REQUEST,
                            format!("Not Found: no profile is served at /mcp/{name}"),
                        )
                    })?,
            ),
        };
        let no_credentials = self.credentials.hosts.is_empty() && self.credentials.jwt.is_none();
        let anonymous_allowed = || {
            !headers.contains_key(header::AUTHORIZATION)
                && peer.ip().is_loopback()
                && match &at {
                    Some(profile) => !profile.path_requires_credential,
                    None => self.anonymous.is_some(),
                }
        };
        if no_credentials || anonymous_allowed() {
            return Ok(Access {
                principal: None,
                profile: at.or_else(|| self.anonymous.clone()),
            });
        }
        // Boxed: the anonymous fast path keeps a small future.
        let principal = Box::pin(self.credentials.authenticate(headers)).await?;
        let profile = match (at, &principal.profile) {
            (Some(at), Some(own)) if !Arc::ptr_eq(&at, own) => {
                return Err(refuse(
                    StatusCode::FORBIDDEN,
                    codes::INVALID_REQUEST,
                    format!(
                        "Forbidden: host `{}` sees the profile `{}`, not `{}`; use /mcp or /mcp/{}",
                        principal.name, own.name, at.name, own.name
                    ),
                ));
            }
            (Some(at), _) => Some(at),
            (None, own) => own.clone(),
        };
        Ok(Access {
            principal: Some(principal),
            profile,
        })
    }
}

/// RFC 9728 protected resource metadata, with `[server.authorization]`.
async fn protected_resource(State(state): State<Arc<AppState>>) -> Response {
    match &state.resource_metadata {
        Some(document) => json_response(document.clone()),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

fn json_response(body: String) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// Finds the session a request names: 400 without the header, 404 when unknown or expired.
fn session_of(
    state: &AppState,
    headers: &HeaderMap,
    access: &Access,
) -> Result<Arc<Session>, Refusal> {
    let Some(id) = headers.get(SESSION_HEADER).and_then(|v| v.to_str().ok()) else {
        return Err(refuse(
            StatusCode::BAD_REQUEST,
            codes::INVALID_REQUEST,
            "Bad Request: Mcp-Session-Id header is required",
        ));
    };
    // Another principal's (or another profile's) session does not exist for this one.
    let own = |s: &Arc<Session>| s.access.same(access);
    state.service.session(id).filter(own).ok_or_else(|| {
        refuse(
            StatusCode::NOT_FOUND,
            codes::INVALID_REQUEST,
            "Session not found: it ended or expired; initialize a new one",
        )
    })
}

async fn handle_post(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    post_message(state, peer, None, headers, body).await
}

async fn handle_post_at(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path(profile): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    post_message(state, peer, Some(&profile), headers, body).await
}

async fn post_message(
    state: Arc<AppState>,
    peer: SocketAddr,
    path: Option<&str>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    if let Err(refusal) = state.check_origin(&headers) {
        return refusal.answering(None, &headers).into_response();
    }
    let access = match state.access(&headers, peer, path).await {
        Ok(access) => access,
        Err(refusal) => return refusal.answering(None, &headers).into_response(),
    };
    let body = match state.body(body, &headers).await {
        Ok(body) => body,
        Err(refused) => return refused,
    };
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if !content_type.starts_with("application/json") {
        let refusal = refuse(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            codes::INVALID_REQUEST,
            "Unsupported Media Type: send application/json",
        );
        return refusal.answering(None, &headers).into_response();
    }
    let Ok(text) = std::str::from_utf8(&body) else {
        return refuse(
            StatusCode::BAD_REQUEST,
            codes::PARSE_ERROR,
            "Parse error: body is not UTF-8",
        )
        .answering(None, &headers)
        .into_response();
    };
    if text.trim_start().starts_with('[') {
        return handle_batch(&state, &headers, text, &access).await;
    }
    let message = match Incoming::parse(text) {
        Ok(message) => message,
        Err(error) => {
            return Refusal::from_error(StatusCode::BAD_REQUEST, error)
                .answering(None, &headers)
                .into_response();
        }
    };
    let request_id = match &message {
        Message::Request { id, .. } => Some(*id),
        _ => None,
    };
    if let Err(refusal) = check_version(&headers) {
        return refusal.answering(request_id, &headers).into_response();
    }
    let accepts = Accepts::of(&headers);
    if request_id.is_some() && !accepts.json && !accepts.stream {
        let refusal = refuse(
            StatusCode::NOT_ACCEPTABLE,
            codes::INVALID_REQUEST,
            "Not Acceptable: a request's Accept must include application/json and text/event-stream",
        );
        return refusal.answering(request_id, &headers).into_response();
    }
    match message {
        Message::Request { id, method, params } if method == "initialize" => {
            match state.service.initialize(id, params, None, access).await {
                Ok((session, line)) => {
                    let mut response = if accepts.stream_answers() {
                        Sse::new(futures_util::stream::iter([event(line)])).into_response()
                    } else {
                        json_response(line)
                    };
                    if let Ok(value) = HeaderValue::from_str(&session.id) {
                        response.headers_mut().insert(SESSION_HEADER, value);
                    }
                    response
                }
                Err(error) => {
                    let line = error_line(Some(id), &error);
                    (StatusCode::BAD_REQUEST, json_response(line)).into_response()
                }
            }
        }
        Message::Request { id, method, params } => match session_of(&state, &headers, &access) {
            Ok(session) => {
                let service = Arc::clone(&state.service);
                answer(service, session, id, &method, params, accepts).await
            }
            Err(refusal) => refusal.answering(Some(id), &headers).into_response(),
        },
        other => match session_of(&state, &headers, &access) {
            Ok(session) => {
                accept(&state.service, &session, other);
                StatusCode::ACCEPTED.into_response()
            }
            Err(refusal) => refusal.answering(None, &headers).into_response(),
        },
    }
}

/// A host notification or answer: handled at once, nothing to reply.
fn accept(service: &HostService, session: &Session, message: Message<'_>) {
    match message {
        Message::Notification { method, params } => {
            service.host_notification(session, &method, params)
        }
        Message::Response { id, result } => service.host_answer(session, id, Some(result), None),
        Message::Error { id, error } => service.host_answer(session, id, None, Some(error)),
        Message::Request { .. } => {}
    }
}

/// Answers one request: JSON when the answer comes first (unless the host prefers event
/// streams), otherwise an event stream carrying what the request produced (progress, server
/// requests) and then the answer. A host that accepts no event stream never gets one: what the
/// request produces goes to its session's GET stream instead, and the answer as JSON.
async fn answer(
    service: Arc<HostService>,
    session: Arc<Session>,
    id: &RawValue,
    method: &str,
    params: Option<&RawValue>,
    accepts: Accepts,
) -> Response {
    let (sink, mut rx) = mpsc::channel(REQUEST_STREAM);
    let sink = accepts.stream.then_some(sink);
    let host = HostRequest::new(session, id.to_owned(), sink, params);
    let method = method.to_owned();
    let params = params.map(ToOwned::to_owned);
    let mut answer =
        Box::pin(async move { service.request(&host, &method, params.as_deref()).await });
    tokio::select! {
        biased;
        line = &mut answer => {
            // Messages queued just before the answer still go first, on a stream.
            let mut early = Vec::new();
            while let Ok(message) = rx.try_recv() {
                early.push(message);
            }
            if early.is_empty() && !accepts.stream_answers() {
                return json_response(line);
            }
            early.push(line);
            Sse::new(futures_util::stream::iter(early.into_iter().map(event))).into_response()
        }
        Some(first) = rx.recv() => {
            let stream = futures_util::stream::unfold((Some(first), rx, Some(answer)), |(first, mut rx, answer)| async move {
                if let Some(line) = first {
                    return Some((event(line), (None, rx, answer)));
                }
                let mut answer = answer?;
                tokio::select! {
                    biased;
                    Some(line) = rx.recv() => Some((event(line), (None, rx, Some(answer)))),
                    line = &mut answer => Some((event(line), (None, rx, None))),
                }
            });
            Sse::new(stream).into_response()
        }
    }
}

/// What a host's `Accept` lets it read as an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Accepts {
    json: bool,
    stream: bool,
    /// It ranks `text/event-stream` above `application/json` (by q-value, then by order).
    stream_first: bool,
}

impl Accepts {
    /// Reads `Accept` (wildcards included, `q=0` excluded). The SDKs' value — JSON first,
    /// without q-values, then streams — is recognised without parsing it.
    fn of(headers: &HeaderMap) -> Self {
        let Some(accept) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) else {
            return Self {
                json: false,
                stream: false,
                stream_first: false,
            };
        };
        if accept == "application/json, text/event-stream" {
            return Self {
                json: true,
                stream: true,
                stream_first: false,
            };
        }
        let (mut json, mut stream) = (false, false);
        let mut best: Option<(f32, bool)> = None;
        for range in accept.split(',') {
            let mut parts = range.split(';');
            let media = parts.next().unwrap_or_default().trim().to_ascii_lowercase();
            let q: f32 = parts
                .find_map(|p| p.trim().strip_prefix("q="))
                .and_then(|q| q.parse().ok())
                .unwrap_or(1.0);
            if q <= 0.0 {
                continue;
            }
            let (is_json, is_stream) = match media.as_str() {
                "application/json" | "application/*" => (true, false),
                "text/event-stream" | "text/*" => (false, true),
                "*/*" => (true, true),
                _ => continue,
            };
            json |= is_json;
            stream |= is_stream;
            if best.is_none_or(|(top, _)| q > top) {
                best = Some((q, !is_json));
            }
        }
        Self {
            json,
            stream,
            stream_first: best.is_some_and(|(_, stream)| stream),
        }
    }

    /// Whether an answer that comes first goes as an event stream.
    fn stream_answers(self) -> bool {
        self.stream && (self.stream_first || !self.json)
    }
}

fn event(line: String) -> Result<Event, Infallible> {
    Ok(Event::default().data(line))
}

/// A JSON-RPC batch: only in 2025-03-26, the one revision that has them.
async fn handle_batch(
    state: &AppState,
    headers: &HeaderMap,
    text: &str,
    access: &Access,
) -> Response {
    let session = match session_of(state, headers, access) {
        Ok(session) => session,
        Err(refusal) => return refusal.answering(None, headers).into_response(),
    };
    if !session.host.version.has_batches() {
        let why = format!(
            "Invalid request: JSON-RPC batches are not part of MCP {}",
            session.host.version
        );
        return refuse(StatusCode::BAD_REQUEST, codes::INVALID_REQUEST, why)
            .answering(None, headers)
            .into_response();
    }
    let items: Vec<&RawValue> = match serde_json::from_str(text) {
        Ok(items) => items,
        Err(e) => {
            return refuse(
                StatusCode::BAD_REQUEST,
                codes::PARSE_ERROR,
                format!("Parse error: {e}"),
            )
            .into_response();
        }
    };
    if items.is_empty() {
        return refuse(
            StatusCode::BAD_REQUEST,
            codes::INVALID_REQUEST,
            "Invalid request: empty batch",
        )
        .into_response();
    }
    let mut answers = Vec::new();
    let mut lines: Vec<String> = Vec::new();
    for item in items {
        match Incoming::parse(item.get()) {
            Ok(Message::Request { id, method, .. }) if method == "initialize" => {
                let error = RpcError::new(
                    codes::INVALID_REQUEST,
                    "initialize cannot be part of a batch",
                );
                lines.push(error_line(Some(id), &error));
            }
            Ok(Message::Request { id, method, params }) => {
                let host = HostRequest::new(Arc::clone(&session), id.to_owned(), None, params);
                let (method, params) = (method.into_owned(), params.map(ToOwned::to_owned));
                let service = &state.service;
                answers
                    .push(async move { service.request(&host, &method, params.as_deref()).await });
            }
            Ok(other) => accept(&state.service, &session, other),
            Err(error) => lines.push(error_line(None, &error)),
        }
    }
    lines.extend(futures_util::future::join_all(answers).await);
    if lines.is_empty() {
        return StatusCode::ACCEPTED.into_response();
    }
    json_response(format!("[{}]", lines.join(",")))
}

/// The session's event stream: notifications and server requests that belong to no open request.
async fn handle_get(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    get_stream(state, peer, None, headers).await
}

async fn handle_get_at(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path(profile): Path<String>,
    headers: HeaderMap,
) -> Response {
    get_stream(state, peer, Some(&profile), headers).await
}

async fn get_stream(
    state: Arc<AppState>,
    peer: SocketAddr,
    path: Option<&str>,
    headers: HeaderMap,
) -> Response {
    if let Err(refusal) = state
        .check_origin(&headers)
        .and_then(|()| check_version(&headers))
    {
        return refusal.answering(None, &headers).into_response();
    }
    let accepts_sse = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("text/event-stream"));
    if !accepts_sse {
        let refusal = refuse(
            StatusCode::NOT_ACCEPTABLE,
            codes::INVALID_REQUEST,
            "Not Acceptable: GET needs Accept: text/event-stream",
        );
        return refusal.answering(None, &headers).into_response();
    }
    let session = match (state.access(&headers, peer, path).await)
        .and_then(|access| session_of(&state, &headers, &access))
    {
        Ok(session) => session,
        Err(refusal) => return refusal.answering(None, &headers).into_response(),
    };
    let Some(guard) = session.attach_stream() else {
        let refusal = refuse(
            StatusCode::CONFLICT,
            codes::INVALID_REQUEST,
            "Conflict: this session already has an open event stream",
        );
        return refusal.answering(None, &headers).into_response();
    };
    let stream = futures_util::stream::unfold(guard, |mut guard| async move {
        let line = guard.recv().await?;
        Some((event(line), guard))
    });
    sse(stream)
}

fn sse(stream: impl Stream<Item = Result<Event, Infallible>> + Send + 'static) -> Response {
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response()
}

async fn handle_delete(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    delete(state, peer, None, headers).await
}

async fn handle_delete_at(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path(profile): Path<String>,
    headers: HeaderMap,
) -> Response {
    delete(state, peer, Some(&profile), headers).await
}

async fn delete(
    state: Arc<AppState>,
    peer: SocketAddr,
    path: Option<&str>,
    headers: HeaderMap,
) -> Response {
    if let Err(refusal) = state.check_origin(&headers) {
        return refusal.answering(None, &headers).into_response();
    }
    match (state.access(&headers, peer, path).await)
        .and_then(|access| session_of(&state, &headers, &access))
    {
        Ok(session) => {
            state.service.close_session(&session.id).await;
            StatusCode::OK.into_response()
        }
        Err(refusal) => refusal.answering(None, &headers).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accepting(accept: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_str(accept).unwrap_or_else(|e| panic!("{e}")),
        );
        headers
    }

    #[test]
    fn accept_says_what_a_host_can_read_and_which_it_ranks_first() {
        let of = |accept: &str| {
            let a = Accepts::of(&accepting(accept));
            (a.json, a.stream, a.stream_answers())
        };
        for (accept, expected) in [
            ("application/json, text/event-stream", (true, true, false)),
            ("text/event-stream, application/json", (true, true, true)),
            (
                "text/event-stream;q=0.5, application/json",
                (true, true, false),
            ),
            (
                "application/json;q=0.9, text/event-stream",
                (true, true, true),
            ),
            (
                "Text/Event-Stream ; q=1, application/json",
                (true, true, true),
            ),
            ("*/*", (true, true, false)),
            ("application/json", (true, false, false)),
            ("text/event-stream", (false, true, true)),
            ("text/html", (false, false, false)),
            ("application/json;q=0, text/html", (false, false, false)),
        ] {
            assert_eq!(of(accept), expected, "{accept}");
        }
        let none = Accepts::of(&HeaderMap::new());
        assert!(!none.json && !none.stream);
    }
}
