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
pub(super) type Refusal = (StatusCode, String);

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

/// The checks of every admin request, the console's too: a browser `Origin` that is the admin
/// listener's own, and (on loopback) a `Host` that names loopback.
pub(super) fn same_site(access: &AdminGuard, headers: &HeaderMap) -> Result<(), Refusal> {
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
    Ok(())
}

fn admit(access: &AdminGuard, method: &Method, headers: &HeaderMap) -> Result<(), Refusal> {
    same_site(access, headers)?;
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

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;
    use sha2::Digest;

    use super::*;

    const TOKEN: &str = "s3cret";

    fn guard(loopback: bool) -> AdminGuard {
        AdminGuard {
            token: AdminToken {
                digest: sha2::Sha256::digest(TOKEN.as_bytes()).into(),
                file: "/state/admin.token".into(),
            },
            port: 7333,
            loopback,
        }
    }

    /// Headers of a CLI request: loopback `Host`, the token, no `Origin`.
    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_static("127.0.0.1:7333"));
        let bearer = format!("Bearer {TOKEN}");
        let bearer = HeaderValue::from_str(&bearer).unwrap_or_else(|e| panic!("{e}"));
        headers.insert(header::AUTHORIZATION, bearer);
        for (name, value) in pairs {
            let value = HeaderValue::from_str(value).unwrap_or_else(|e| panic!("{e}"));
            headers.insert(name.clone(), value);
        }
        headers
    }

    fn status(result: Result<(), Refusal>) -> Option<StatusCode> {
        result.err().map(|(status, _)| status)
    }

    #[test]
    fn the_cli_with_the_token_is_let_in() {
        assert_eq!(
            status(admit(&guard(true), &Method::GET, &headers(&[]))),
            None
        );
    }

    #[test]
    fn the_scheme_may_be_lowercase() {
        let h = headers(&[(header::AUTHORIZATION, "bearer s3cret")]);
        assert_eq!(status(admit(&guard(true), &Method::GET, &h)), None);
    }

    #[test]
    fn no_token_is_401_saying_where_the_token_is() {
        let mut h = headers(&[]);
        h.remove(header::AUTHORIZATION);
        let (code, why) = admit(&guard(true), &Method::GET, &h)
            .err()
            .unwrap_or_default();
        assert_eq!(code, StatusCode::UNAUTHORIZED);
        assert!(why.contains("/state/admin.token"), "{why}");
    }

    #[test]
    fn a_wrong_or_empty_token_is_401() {
        for value in ["Bearer nope", "Bearer ", "Basic s3cret"] {
            let h = headers(&[(header::AUTHORIZATION, value)]);
            let refused = admit(&guard(true), &Method::GET, &h);
            assert_eq!(status(refused), Some(StatusCode::UNAUTHORIZED), "{value}");
        }
        let h = headers(&[(header::AUTHORIZATION, "Bearer nope")]);
        let (_, why) = admit(&guard(true), &Method::GET, &h)
            .err()
            .unwrap_or_default();
        assert!(why.contains("not the admin token"), "{why}");
    }

    #[test]
    fn a_page_of_another_origin_is_403_even_with_the_token() {
        let h = headers(&[(header::ORIGIN, "https://evil.example")]);
        assert_eq!(
            status(admit(&guard(true), &Method::GET, &h)),
            Some(StatusCode::FORBIDDEN)
        );
        // A page of this machine on another port is another origin too.
        let h = headers(&[(header::ORIGIN, "http://127.0.0.1:8080")]);
        assert_eq!(
            status(admit(&guard(true), &Method::GET, &h)),
            Some(StatusCode::FORBIDDEN)
        );
    }

    #[test]
    fn its_own_origin_is_let_in() {
        for origin in ["http://127.0.0.1:7333", "http://localhost:7333"] {
            let h = headers(&[(header::ORIGIN, origin)]);
            assert_eq!(
                status(admit(&guard(true), &Method::GET, &h)),
                None,
                "{origin}"
            );
        }
    }

    #[test]
    fn on_loopback_another_host_name_is_403() {
        let h = headers(&[(header::HOST, "rebound.example:7333")]);
        assert_eq!(
            status(admit(&guard(true), &Method::GET, &h)),
            Some(StatusCode::FORBIDDEN)
        );
        // Listening beyond loopback, hosts reach it by whatever name they know.
        assert_eq!(status(admit(&guard(false), &Method::GET, &h)), None);
    }

    #[test]
    fn the_host_is_checked_before_the_token() {
        let mut h = headers(&[(header::HOST, "rebound.example")]);
        h.remove(header::AUTHORIZATION);
        assert_eq!(
            status(admit(&guard(true), &Method::GET, &h)),
            Some(StatusCode::FORBIDDEN)
        );
    }

    #[test]
    fn a_post_must_be_json() {
        let plain = headers(&[(header::CONTENT_TYPE, "text/plain")]);
        assert_eq!(
            status(admit(&guard(true), &Method::POST, &plain)),
            Some(StatusCode::UNSUPPORTED_MEDIA_TYPE)
        );
        assert_eq!(
            status(admit(&guard(true), &Method::POST, &headers(&[]))),
            Some(StatusCode::UNSUPPORTED_MEDIA_TYPE)
        );
        let json = headers(&[(header::CONTENT_TYPE, "Application/JSON; charset=utf-8")]);
        assert_eq!(status(admit(&guard(true), &Method::POST, &json)), None);
    }
}
