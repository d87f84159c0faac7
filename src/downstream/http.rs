//! Streamable HTTP at `/mcp` (MCP 2025-03-26 and later): POST carries host messages, GET opens the
//! server-to-host event stream, DELETE ends a session. Guards: `Origin`/`Host` checks against DNS
//! rebinding, `MCP-Protocol-Version`, `Mcp-Session-Id`, body size.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use futures_util::Stream;

use super::gateway::Gateway;
use super::session::Session;
use crate::config::ServerConfig;
use crate::jsonrpc::{
    Incoming, Kind, RawValue, RpcError, codes, error_line, error_line_without_id, notification_line,
};
use crate::mcp::{ListKind, version};

const SESSION_HEADER: &str = "mcp-session-id";
const VERSION_HEADER: &str = "mcp-protocol-version";

struct AppState {
    gateway: Arc<Gateway>,
    allowed_origins: Vec<String>,
    /// When listening on loopback, `Host` must name loopback too (DNS-rebinding protection).
    loopback_only: bool,
}

/// The host-facing HTTP application.
pub fn app(gateway: Arc<Gateway>, config: &ServerConfig) -> Router {
    let state = Arc::new(AppState {
        gateway,
        allowed_origins: config.allowed_origins.clone(),
        loopback_only: config.listen.ip().is_loopback(),
    });
    Router::new()
        .route(
            "/mcp",
            post(handle_post).get(handle_get).delete(handle_delete),
        )
        .layer(DefaultBodyLimit::max(config.max_body_bytes))
        .with_state(state)
}

/// An HTTP-level refusal, sent with a JSON-RPC error body as the spec's examples do.
#[derive(Debug)]
struct Refusal {
    status: StatusCode,
    error: Box<RpcError>,
    /// The id of the request refused, when it could be read.
    id: Option<Box<RawValue>>,
    /// Since 2025-11-25 an error without a known id omits `id`; before, JSON-RPC's `null` is used.
    omit_unknown_id: bool,
}

fn refuse(status: StatusCode, code: i64, message: impl Into<String>) -> Refusal {
    Refusal {
        status,
        error: Box::new(RpcError::new(code, message)),
        id: None,
        omit_unknown_id: false,
    }
}

impl Refusal {
    fn answering(mut self, id: Option<&RawValue>, headers: &HeaderMap) -> Self {
        self.id = id.map(ToOwned::to_owned);
        self.omit_unknown_id = headers
            .get(VERSION_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(version::known)
            .is_some_and(|v| v >= "2025-11-25");
        self
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let body = match (&self.id, self.omit_unknown_id) {
            (None, true) => error_line_without_id(&self.error),
            (id, _) => error_line(id.as_deref(), &self.error),
        };
        let json = [(header::CONTENT_TYPE, "application/json")];
        (self.status, json, body).into_response()
    }
}

fn json_response(body: String) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// Checks that apply to every method: origin, host, protocol version.
fn check_request(state: &AppState, headers: &HeaderMap) -> Result<(), Refusal> {
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or_default();
        let allowed =
            is_loopback_origin(origin) || state.allowed_origins.iter().any(|o| o == origin);
        if !allowed {
            tracing::warn!(origin, "Refused a request from a non-local origin.");
            return Err(refuse(
                StatusCode::FORBIDDEN,
                codes::INVALID_REQUEST,
                format!("Forbidden: origin `{origin}` is not allowed"),
            ));
        }
    }
    if state.loopback_only {
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or_default();
        if !host.is_empty() && !is_loopback_host(host) {
            return Err(refuse(
                StatusCode::FORBIDDEN,
                codes::INVALID_REQUEST,
                format!("Forbidden: host `{host}` is not this server"),
            ));
        }
    }
    if let Some(v) = headers.get(VERSION_HEADER) {
        let v = v.to_str().unwrap_or_default();
        if version::known(v).is_none() {
            let msg = format!(
                "Bad Request: unsupported MCP-Protocol-Version `{v}` (supported: {})",
                version::LEGACY.join(", ")
            );
            return Err(refuse(StatusCode::BAD_REQUEST, codes::INVALID_REQUEST, msg));
        }
    }
    Ok(())
}

fn is_loopback_origin(origin: &str) -> bool {
    let Some((_, rest)) = origin.split_once("://") else {
        return false;
    };
    is_loopback_host(rest.trim_end_matches('/'))
}

/// `localhost`, `127.x.x.x` or `[::1]`, with or without a port.
fn is_loopback_host(host: &str) -> bool {
    let name = if let Some(v6) = host.strip_prefix('[') {
        v6.split(']').next().unwrap_or_default()
    } else {
        host.rsplit_once(':').map_or(host, |(h, port)| {
            if port.chars().all(|c| c.is_ascii_digit()) {
                h
            } else {
                host
            }
        })
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
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
    state.gateway.sessions.get(id).ok_or_else(|| {
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
    if let Err(refusal) = check_request(&state, &headers) {
        return refusal.answering(None, &headers).into_response();
    }
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if !content_type.starts_with("application/json") {
        return refuse(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            codes::INVALID_REQUEST,
            "Unsupported Media Type: send application/json",
        )
        .answering(None, &headers)
        .into_response();
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
        return refuse(
            StatusCode::BAD_REQUEST,
            codes::INVALID_REQUEST,
            "Invalid request: JSON-RPC batches are not supported",
        )
        .answering(None, &headers)
        .into_response();
    }
    let message = match Incoming::parse(text) {
        Ok(message) => message,
        Err(error) => {
            let refusal = Refusal {
                status: StatusCode::BAD_REQUEST,
                error: Box::new(error),
                id: None,
                omit_unknown_id: false,
            };
            return refusal.answering(None, &headers).into_response();
        }
    };
    match message {
        Kind::Request { id, method, params } if method == "initialize" => {
            match state.gateway.initialize(id, params).await {
                Ok((session, line)) => {
                    let mut response = json_response(line);
                    if let Ok(value) = HeaderValue::from_str(&session.id) {
                        response.headers_mut().insert(SESSION_HEADER, value);
                    }
                    response
                }
                Err(line) => (StatusCode::BAD_REQUEST, json_response(line)).into_response(),
            }
        }
        Kind::Request { id, method, params } => match session_of(&state, &headers) {
            Ok(session) => {
                json_response(state.gateway.request(&session, id, &method, params).await)
            }
            Err(refusal) => refusal.answering(Some(id), &headers).into_response(),
        },
        Kind::Notification { .. } | Kind::Response { .. } | Kind::Error { .. } => {
            match session_of(&state, &headers) {
                Ok(_) => StatusCode::ACCEPTED.into_response(),
                Err(refusal) => refusal.answering(None, &headers).into_response(),
            }
        }
    }
}

/// The server-to-host stream: list_changed notifications when the catalog a host sees changes.
async fn handle_get(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    if let Err(refusal) = check_request(&state, &headers) {
        return refusal.answering(None, &headers).into_response();
    }
    let accepts_sse = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("text/event-stream"));
    if !accepts_sse {
        return refuse(
            StatusCode::NOT_ACCEPTABLE,
            codes::INVALID_REQUEST,
            "Not Acceptable: GET needs Accept: text/event-stream",
        )
        .answering(None, &headers)
        .into_response();
    }
    if let Err(refusal) = session_of(&state, &headers) {
        return refusal.into_response();
    }
    Sse::new(list_changes(Arc::clone(&state.gateway)))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

/// One `notifications/*/list_changed` per listing that changed, coalesced over bursts: a watch
/// channel only ever holds the newest generation.
fn list_changes(gateway: Arc<Gateway>) -> impl Stream<Item = Result<Event, Infallible>> {
    let rx = gateway.router.watch();
    let seen = gateway.router.snapshot();
    let start = (rx, seen, gateway, VecDeque::<String>::new());
    futures_util::stream::unfold(
        start,
        |(mut rx, mut seen, gateway, mut queued)| async move {
            loop {
                if let Some(line) = queued.pop_front() {
                    return Some((Ok(Event::default().data(line)), (rx, seen, gateway, queued)));
                }
                rx.changed().await.ok()?;
                rx.borrow_and_update();
                let current = gateway.router.snapshot();
                let mut methods: Vec<&str> = ListKind::ALL
                    .into_iter()
                    .filter(|k| seen.fingerprint(*k) != current.fingerprint(*k))
                    .map(|k| k.changed_notification())
                    .collect();
                methods.dedup();
                queued.extend(methods.into_iter().map(|m| notification_line(m, None)));
                seen = current;
            }
        },
    )
}

async fn handle_delete(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    if let Err(refusal) = check_request(&state, &headers) {
        return refusal.answering(None, &headers).into_response();
    }
    match session_of(&state, &headers) {
        Ok(session) => {
            state.gateway.sessions.close(&session.id);
            StatusCode::OK.into_response()
        }
        Err(refusal) => refusal.answering(None, &headers).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts_and_origins() {
        for ok in [
            "localhost",
            "localhost:7332",
            "127.0.0.1:80",
            "[::1]:9",
            "[::1]",
            "127.1.2.3",
        ] {
            assert!(is_loopback_host(ok), "{ok}");
        }
        for bad in ["evil.com", "evil.com:80", "10.0.0.1", "localhost.evil.com"] {
            assert!(!is_loopback_host(bad), "{bad}");
        }
        assert!(is_loopback_origin("http://localhost:3000"));
        assert!(!is_loopback_origin("https://evil.example"));
        assert!(!is_loopback_origin("null"));
    }
}
