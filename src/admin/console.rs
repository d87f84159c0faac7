//! The web console, on the admin listener: `/` leads to the sign-in at `/console/login`, after
//! which a person who gave the admin token watches and runs the daemon at their session's own
//! `/console/s/<key>/` — upstreams live, the catalog per profile, hosts and sessions, the audit
//! log, pins, the config and its reloads.
//!
//! Pages are rendered here (`maud`), styled and scripted by two files of our own compiled into the
//! binary (`assets/`); nothing is fetched from elsewhere. Every console response carries a strict
//! `Content-Security-Policy` (no inline script or style, no other origin, no framing). A request
//! passes the admin API's own origin and host checks ([`super::guard::same_site`]); then every
//! page wants a console session — its cookie (HttpOnly, SameSite=Strict, scoped to the session's
//! path) and its key in the path, which binds it to this listener ([`session`] says why) — and
//! every POST wants the session's CSRF token and a same-origin `Origin`. No URL holds a name an
//! upstream or a host chose: an action's upstream and tool are fields of its form, a page's are
//! in its query string. The console reads what the admin API reads (the same status, searches and
//! audit queries); it never touches the forwarding path, and an open page at rest costs the daemon
//! a few counter reads every few seconds ([`events::Pace`]).
//!
//! - `session`: console sessions, the cookie, CSRF tokens, the key of a session's pages.
//! - `sign_in`: signing in (the limit on wrong tokens) and out.
//! - `pages`: the pages and their actions (`overview`: the overview's and the upstreams'; `audit`:
//!   the audit page's).
//! - `events`: the live stream an open overview listens to (the audit page's live tail is in
//!   `audit`).
//! - `history`: each upstream's request rate and latency over the last hour, and their charts.

mod audit_page;
mod events;
mod history;
mod overview;
mod pages;
mod principals;
mod session;
mod sign_in;

/// What the console keeps: who is signed in, the limit on wrong tokens, and the upstreams' last
/// hour.
#[derive(Debug, Default)]
pub struct ConsoleState {
    pub(super) sessions: session::ConsoleSessions,
    pub(super) sign_ins: sign_in::SignInLimit,
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

/// The console's routes: sign-in and its assets open, every other page behind a session, below
/// the session's own path (`/console/s/{key}/`).
pub(super) fn routes(state: Arc<AdminState>) -> Router {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(history::sample_forever(Arc::downgrade(&state)));
    }
    let signed_in = Router::new()
        .route("/console/s/{key}/", get(overview::overview))
        .route("/console/s/{key}/events", get(events::stream))
        .route("/console/s/{key}/catalog", get(pages::catalog))
        .route("/console/s/{key}/hosts", get(pages::hosts))
        .route("/console/s/{key}/audit", get(audit_page::audit))
        .route("/console/s/{key}/audit/tail", get(audit_page::audit_tail))
        .route(
            "/console/s/{key}/audit/verify",
            get(audit_page::audit_verify),
        )
        .route(
            "/console/s/{key}/audit/export",
            get(audit_page::audit_export),
        )
        .route(
            "/console/s/{key}/audit/record/{at}",
            get(audit_page::audit_record),
        )
        .route("/console/s/{key}/pins", get(pages::pins))
        .route("/console/s/{key}/pins/approve", post(pages::approve))
        .route("/console/s/{key}/config", get(pages::config))
        .route("/console/s/{key}/logout", post(sign_in::logout))
        .route("/console/s/{key}/reload", post(pages::reload))
        .route(
            "/console/s/{key}/upstreams/restart",
            post(overview::restart),
        )
        .route(
            "/console/s/{key}/upstreams/login",
            get(overview::sign_in_state).post(overview::sign_in),
        )
        .route(
            "/console/s/{key}/upstreams/logout",
            post(overview::sign_out),
        )
        .route("/console/s/{key}/principals", post(principals::act))
        .route_layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state),
            signed_in,
        ));
    // Without the session's path no cookie comes: the way in is the sign-in.
    let to_sign_in = || async { Redirect::to("/console/login") };
    Router::new()
        .route("/", get(to_sign_in))
        .route("/console", get(to_sign_in))
        .route("/console/", get(to_sign_in))
        .route(
            "/console/login",
            get(sign_in::login_page).post(sign_in::login),
        )
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

/// Pages want a console session — its cookie, and its key in the path — else the sign-in page;
/// a POST also the session's CSRF token in its `csrf` field. The session rides along to the page
/// as an extension.
async fn signed_in(State(admin): State<Arc<AdminState>>, request: Request, next: Next) -> Response {
    let key = session_key(request.uri().path()).unwrap_or_default();
    let Some((id, session)) = admin.console.sessions.of(request.headers(), key) else {
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
    let base = session.base();
    parts.extensions.insert(pages::Signed { id, session, base });
    next.run(Request::from_parts(parts, body)).await
}

/// The session key in a path below `/console/s/`.
fn session_key(path: &str) -> Option<&str> {
    path.strip_prefix(session::SESSIONS)?.split('/').next()
}
