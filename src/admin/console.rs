//! The web console, on the admin listener: `/` leads to `/console/`, where a person who signs in
//! with the admin token watches and runs the daemon — upstreams live, the catalog per profile,
//! hosts and sessions, the audit log, pins, the config and its reloads.
//!
//! Pages are rendered here (`maud`), styled and scripted by two files of our own compiled into the
//! binary (`assets/`); nothing is fetched from elsewhere. Every console response carries a strict
//! `Content-Security-Policy` (no inline script or style, no other origin, no framing). A request
//! passes the admin API's own origin and host checks ([`super::guard::same_site`]); then every
//! page wants a console session (its cookie is HttpOnly and SameSite=Strict), and every POST wants
//! the session's CSRF token and a same-origin `Origin`. The console reads what the admin API reads
//! (the same status, searches and audit queries); it never touches the forwarding path, and an
//! open page at rest costs the daemon a few counter reads every few seconds ([`events::Pace`]).
//!
//! - `session`: console sessions, the cookie, CSRF tokens.
//! - `pages`: the pages and their actions (`overview`: the overview's and the upstreams'; `audit`:
//!   the audit page's).
//! - `events`: the live stream an open overview listens to (the audit page's live tail is in
//!   `audit`).
//! - `history`: each upstream's request rate and latency over the last hour, and their charts.

mod audit;
mod events;
mod history;
mod overview;
mod pages;
mod session;

/// What the console keeps: who is signed in, and the upstreams' last hour.
#[derive(Debug, Default)]
pub struct ConsoleState {
    pub(super) sessions: session::ConsoleSessions,
    pub(super) history: history::History,
}

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};

use super::AdminState;

/// What every console response may load and do: its own scripts, styles and images only.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// A POST form's largest body.
const MAX_FORM: usize = 64 * 1024;

/// The console's routes: sign-in and its assets open, every other page behind a session.
pub(super) fn routes(state: Arc<AdminState>) -> Router {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(history::sample_forever(Arc::downgrade(&state)));
    }
    let signed_in = Router::new()
        .route("/console/", get(overview::overview))
        .route("/console/events", get(events::stream))
        .route("/console/catalog", get(pages::catalog))
        .route("/console/hosts", get(pages::hosts))
        .route("/console/audit", get(audit::audit))
        .route("/console/audit/tail", get(audit::audit_tail))
        .route("/console/audit/verify", get(audit::audit_verify))
        .route("/console/audit/export", get(audit::audit_export))
        .route("/console/audit/record/{seq}", get(audit::audit_record))
        .route("/console/pins", get(pages::pins))
        .route("/console/config", get(pages::config))
        .route("/console/logout", post(pages::logout))
        .route("/console/reload", post(pages::reload))
        .route("/console/upstreams/{name}/restart", post(overview::restart))
        .route(
            "/console/upstreams/{name}/login",
            get(overview::sign_in_state).post(overview::sign_in),
        )
        .route("/console/upstreams/{name}/logout", post(overview::sign_out))
        .route(
            "/console/pins/{upstream}/{tool}/approve",
            post(pages::approve),
        )
        .route_layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state),
            signed_in,
        ));
    Router::new()
        .route("/", get(|| async { Redirect::to("/console/") }))
        .route("/console", get(|| async { Redirect::to("/console/") }))
        .route("/console/login", get(pages::login_page).post(pages::login))
        .route("/console/assets/console.css", get(pages::stylesheet))
        .route("/console/assets/console.js", get(pages::script))
        .merge(signed_in)
        .with_state(Arc::clone(&state))
        .layer(axum::middleware::from_fn_with_state(state, checked))
}

/// Every console request: the admin listener's origin and host checks, a same-origin `Origin`
/// on every POST; every answer: the security headers.
async fn checked(State(admin): State<Arc<AdminState>>, request: Request, next: Next) -> Response {
    let refused = super::guard::same_site(&admin.guard, request.headers())
        .err()
        .or_else(|| {
            (request.method() == Method::POST && !request.headers().contains_key(header::ORIGIN))
                .then(|| {
                    let why = "Forbidden: a console form must come from a console page (no Origin)";
                    (StatusCode::FORBIDDEN, why.to_owned())
                })
        });
    let mut response = match refused {
        Some((status, why)) => (status, why).into_response(),
        None => next.run(request).await,
    };
    secure(response.headers_mut());
    response
}

/// The headers of every console answer. `Referrer-Policy: same-origin`, not `no-referrer`: under
/// the latter a browser sends its own forms' POSTs with `Origin: null`.
fn secure(headers: &mut HeaderMap) {
    let set = |headers: &mut HeaderMap, name, value: &'static str| {
        headers.insert(name, HeaderValue::from_static(value));
    };
    set(headers, header::CONTENT_SECURITY_POLICY, CSP);
    set(headers, header::X_FRAME_OPTIONS, "DENY");
    set(headers, header::X_CONTENT_TYPE_OPTIONS, "nosniff");
    set(headers, header::REFERRER_POLICY, "same-origin");
    if !headers.contains_key(header::CACHE_CONTROL) {
        set(headers, header::CACHE_CONTROL, "no-store");
    }
}

/// Pages want a console session (else the sign-in page); a POST also the session's CSRF token
/// in its `csrf` field. The session rides along to the page as an extension.
async fn signed_in(State(admin): State<Arc<AdminState>>, request: Request, next: Next) -> Response {
    let Some((id, session)) = admin.console.sessions.of(request.headers()) else {
        return match *request.method() {
            Method::GET => Redirect::to("/console/login").into_response(),
            _ => (
                StatusCode::FORBIDDEN,
                "Forbidden: sign in to the console first",
            )
                .into_response(),
        };
    };
    let (mut parts, body) = request.into_parts();
    let body = if parts.method == Method::POST {
        let Ok(bytes) = axum::body::to_bytes(body, MAX_FORM).await else {
            return (StatusCode::PAYLOAD_TOO_LARGE, "Payload Too Large").into_response();
        };
        let csrf = form_urlencoded::parse(&bytes)
            .find(|(key, _)| key == "csrf")
            .map(|(_, value)| value.into_owned());
        if !csrf.is_some_and(|c| session.allows(&c)) {
            tracing::warn!("Refused a console form without this session's CSRF token.");
            let why = "Forbidden: the form lacks this console session's token; reload the page";
            return (StatusCode::FORBIDDEN, why).into_response();
        }
        Body::from(bytes)
    } else {
        body
    };
    parts.extensions.insert(pages::Signed { id, session });
    next.run(Request::from_parts(parts, body)).await
}
