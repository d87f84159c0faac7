//! Streamable HTTP at `/mcp` (MCP 2025-03-26 and later): POST carries host messages and answers
//! with JSON, or with an event stream when the request produces messages (progress, server
//! requests) before its answer; GET opens the session's event stream; DELETE ends the session.
//! `legacy` serves the 2024-11-05 HTTP+SSE transport at `/sse` + `/messages`.

mod guard;
mod legacy;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::Stream;
use serde_json::value::RawValue;
use tokio::sync::mpsc;

use super::service::{HostRequest, HostService};
use super::session::Session;
use crate::config::ServerConfig;
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
}

/// The host-facing HTTP application.
pub fn app(service: Arc<HostService>, config: &ServerConfig) -> Router {
    let state = Arc::new(AppState {
        service,
        allowed_origins: config.allowed_origins.clone(),
        loopback_only: config.listen.ip().is_loopback(),
        legacy: legacy::Connections::default(),
    });
    Router::new()
        .route(
            "/mcp",
            post(handle_post).get(handle_get).delete(handle_delete),
        )
        .route("/sse", get(legacy::handle_sse))
        .route("/messages", post(legacy::handle_message))
        .layer(DefaultBodyLimit::max(config.max_body_bytes))
        .with_state(state)
}

impl AppState {
    fn check_origin(&self, headers: &HeaderMap) -> Result<(), Refusal> {
        check_origin(headers, &self.allowed_origins, self.loopback_only)
    }
}

fn json_response(body: String) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// Finds the session a request names: 400 without the header, 404 when unknown or expired.
fn session_of(state: &AppState, headers: &HeaderMap) -> Result<Arc<Session>, Refusal> {
    let Some(id) = headers.get(SESSION_HEADER).and_then(|v| v.to_str().ok()) else {
        return Err(refuse(
            StatusCode::BAD_REQUEST,
            codes::INVALID_REQUEST,
            "Bad Request: Mcp-Session-Id header is required",
        ));
    };
    state.service.session(id).ok_or_else(|| {
        refuse(
            StatusCode::NOT_FOUND,
            codes::INVALID_REQUEST,
            "Session not found: it ended or expired; initialize a new one",
        )
    })
}

async fn handle_post(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(refusal) = state.check_origin(&headers) {
        return refusal.answering(None, &headers).into_response();
    }
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
        return handle_batch(&state, &headers, text).await;
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
    match message {
        Message::Request { id, method, params } if method == "initialize" => {
            match state.service.initialize(id, params, None).await {
                Ok((session, line)) => {
                    let mut response = json_response(line);
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
        Message::Request { id, method, params } => match session_of(&state, &headers) {
            Ok(session) => {
                let as_stream = prefers_event_stream(&headers);
                let service = Arc::clone(&state.service);
                answer(service, session, id, &method, params, as_stream).await
            }
            Err(refusal) => refusal.answering(Some(id), &headers).into_response(),
        },
        other => match session_of(&state, &headers) {
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
/// requests) and then the answer.
async fn answer(
    service: Arc<HostService>,
    session: Arc<Session>,
    id: &RawValue,
    method: &str,
    params: Option<&RawValue>,
    as_stream: bool,
) -> Response {
    let (sink, mut rx) = mpsc::channel(REQUEST_STREAM);
    let host = HostRequest::new(session, id.to_owned(), Some(sink), params);
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
            if early.is_empty() && !as_stream {
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

/// Whether the host ranks `text/event-stream` above `application/json` in its `Accept` (by
/// q-value, then by order). The SDKs list JSON first and get JSON whenever the answer comes
/// first; a host that asks for streams first gets every answer as one.
fn prefers_event_stream(headers: &HeaderMap) -> bool {
    let Some(accept) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    // What the SDKs send: JSON first, without a q-value, so it ranks first.
    if let Some(rest) = accept.strip_prefix("application/json") {
        if rest.is_empty() || rest.starts_with(',') {
            return false;
        }
    }
    let mut best: Option<(f32, bool)> = None;
    for range in accept.split(',') {
        let mut parts = range.split(';');
        let media = parts.next().unwrap_or_default().trim();
        let stream = media.eq_ignore_ascii_case("text/event-stream");
        if !stream && !media.eq_ignore_ascii_case("application/json") {
            continue;
        }
        let q = parts
            .find_map(|p| p.trim().strip_prefix("q="))
            .and_then(|q| q.parse().ok())
            .unwrap_or(1.0);
        if best.is_none_or(|(top, _)| q > top) {
            best = Some((q, stream));
        }
    }
    best.is_some_and(|(_, stream)| stream)
}

fn event(line: String) -> Result<Event, Infallible> {
    Ok(Event::default().data(line))
}

/// A JSON-RPC batch: only in 2025-03-26, the one revision that has them.
async fn handle_batch(state: &AppState, headers: &HeaderMap, text: &str) -> Response {
    let session = match session_of(state, headers) {
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
async fn handle_get(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
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
    let session = match session_of(&state, &headers) {
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

async fn handle_delete(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    if let Err(refusal) = state.check_origin(&headers) {
        return refusal.answering(None, &headers).into_response();
    }
    match session_of(&state, &headers) {
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
    fn the_host_that_ranks_event_streams_first_gets_them() {
        for (accept, stream) in [
            ("application/json, text/event-stream", false),
            ("text/event-stream, application/json", true),
            ("text/event-stream;q=0.5, application/json", false),
            ("application/json;q=0.9, text/event-stream", true),
            ("Text/Event-Stream ; q=1, application/json", true),
            ("*/*", false),
        ] {
            assert_eq!(prefers_event_stream(&accepting(accept)), stream, "{accept}");
        }
        assert!(!prefers_event_stream(&HeaderMap::new()));
    }
}
