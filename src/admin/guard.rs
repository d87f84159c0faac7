//! What every admin request passes before its route runs (health and readiness excepted): a
//! browser `Origin` must be the admin listener's own and, while it listens on loopback, `Host`
//! must name loopback (403: a cross-site page or a DNS-rebinding one); then the admin token
//! (401, saying where the token is); then a POST must be JSON (415: a cross-site "simple" POST
//! cannot be).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Json, Response};

use super::AdminState;
use super::token::AdminToken;
use crate::loopback::{is_loopback_host, is_own_origin};

/// Who may use the admin API, and where it listens.
#[derive(Debug, Clone)]
pub struct AdminGuard {
    pub token: AdminToken,
    /// The admin listener's port: its own origin is `http://127.0.0.1:PORT` (or `localhost`,
    /// `[::1]`).
    pub port: u16,
    /// Whether it listens on loopback only (then `Host` must name loopback).
    pub loopback: bool,
}

/// A refusal: its status and why (answered as `{"error": why}`).
type Refusal = (StatusCode, String);

fn refuse(status: StatusCode, why: String) -> Refusal {
    (status, why)
}

/// The admin routes' middleware: each check in turn, then the route.
pub(super) async fn guard(
    State(admin): State<Arc<AdminState>>,
    request: Request,
    next: Next,
) -> Response {
    if let Err((status, why)) = admit(&admin.guard, request.method(), request.headers()) {
        return (status, Json(crate::api::Refused { error: why })).into_response();
    }
    next.run(request).await
}

fn admit(access: &AdminGuard, method: &Method, headers: &HeaderMap) -> Result<(), Refusal> {
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or_default();
        if !is_own_origin(origin, access.port) {
            tracing::warn!(
                origin,
                "Refused an admin request from a web page of another origin."
            );
            return Err(refuse(
                StatusCode::FORBIDDEN,
                format!("Forbidden: the admin API does not answer pages of origin `{origin}`"),
            ));
        }
    }
    if access.loopback {
        let host = (headers.get(header::HOST))
            .and_then(|h| h.to_str().ok())
            .unwrap_or_default();
        if !is_loopback_host(host) {
            tracing::warn!(
                host,
                "Refused an admin request for another host name (DNS rebinding?)."
            );
            return Err(refuse(
                StatusCode::FORBIDDEN,
                format!(
                    "Forbidden: host `{host}` is not this admin API (it answers 127.0.0.1, localhost and [::1])"
                ),
            ));
        }
    }
    let presented = (headers.get(header::AUTHORIZATION))
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim)
        .filter(|t| !t.is_empty());
    if !presented.is_some_and(|t| access.token.matches(t)) {
        let file = access.token.file.display();
        let why = if presented.is_some() {
            format!(
                "Unauthorized: that is not the admin token (it is in {file}; send Authorization: Bearer <its contents>)"
            )
        } else {
            format!(
                "Unauthorized: the admin API wants its token, from {file} (send Authorization: Bearer <its contents>; the mcpmux CLI reads it itself)"
            )
        };
        return Err(refuse(StatusCode::UNAUTHORIZED, why));
    }
    if method == Method::POST {
        let json = (headers.get(header::CONTENT_TYPE))
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"));
        if !json {
            return Err(refuse(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "Unsupported Media Type: an admin POST must be Content-Type: application/json (send `{}` when there is nothing to say)".into(),
            ));
        }
    }
    Ok(())
}
