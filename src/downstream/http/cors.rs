//! Cross-origin access for web hosts: a page served from an origin in `server.allowed_origins`
//! (say a browser-based agent that renders MCP Apps) may call the host endpoint from the
//! browser. Only the origins configured there are answered with CORS headers — never a loopback
//! origin by default: any local web page could then read what the endpoint answers. A preflight
//! (`OPTIONS`) of another origin is refused.
//!
//! The headers are added by a layer that exists only when origins are configured at start (a
//! daemon without any pays nothing per request); the list a reload changes is read live.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::AppState;

/// What a browser may send: the transport's own headers (`Mcp-Param-*` are each allowed by
/// name as asked), and a credential.
const ALLOWED_HEADERS: [&str; 9] = [
    "accept",
    "authorization",
    "content-type",
    "last-event-id",
    "mcp-method",
    "mcp-name",
    "mcp-protocol-version",
    "mcp-session-id",
    "traceparent",
];
/// What a page may read of an answer besides the simple headers.
const EXPOSED_HEADERS: &str = "mcp-session-id, mcp-protocol-version, www-authenticate";
/// How long a browser may keep a preflight's answer.
const MAX_AGE_SECS: &str = "600";

/// `OPTIONS` on a host path: the preflight of an allowed origin's request, or 403.
pub(super) async fn preflight(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let Some(origin) = allowed_origin(&state, &headers) else {
        return StatusCode::FORBIDDEN.into_response();
    };
    let asked = headers
        .get(header::ACCESS_CONTROL_REQUEST_HEADERS)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let allowed: Vec<&str> = asked
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .filter(|h| {
            let h = h.to_ascii_lowercase();
            ALLOWED_HEADERS.contains(&h.as_str()) || h.starts_with("mcp-param-")
        })
        .collect();
    let mut response = StatusCode::NO_CONTENT.into_response();
    let out = response.headers_mut();
    out.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    out.insert(header::VARY, HeaderValue::from_static("origin"));
    out.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("GET, POST, DELETE"),
    );
    if let Ok(allowed) = HeaderValue::from_str(&allowed.join(", ")) {
        out.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, allowed);
    }
    out.insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from_static(MAX_AGE_SECS),
    );
    response
}

/// The layer: an answer to an allowed origin's request says that origin may read it.
pub(super) async fn allow(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    let origin = allowed_origin(&state, request.headers());
    let mut response = next.run(request).await;
    if let Some(origin) = origin {
        let out = response.headers_mut();
        out.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        out.append(header::VARY, HeaderValue::from_static("origin"));
        out.insert(
            header::ACCESS_CONTROL_EXPOSE_HEADERS,
            HeaderValue::from_static(EXPOSED_HEADERS),
        );
    }
    response
}

/// The request's `Origin`, when it is one of `server.allowed_origins` as the running config has
/// them.
fn allowed_origin(state: &AppState, headers: &HeaderMap) -> Option<HeaderValue> {
    let origin = headers.get(header::ORIGIN)?;
    let text = origin.to_str().ok()?;
    let edge = state.edge.load();
    edge.allowed_origins
        .iter()
        .any(|allowed| allowed == text)
        .then(|| origin.clone())
}
