//! Signing in to the console and out of it. The admin token is compared in constant time; a right
//! one opens a session and leads to the session's own pages ([`super::session`]). Wrong ones are
//! limited ([`SignInLimit`]): a few in a row are answered, then every attempt is refused with 429
//! and `Retry-After` (the right token too, so a guess is never told apart) until the limit eases —
//! a process guessing at request rate gets nowhere (the token has 256 bits anyway) and costs the
//! daemon little. Refusals are logged at most once per [`LOG_EVERY`], with how many were not.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Extension;
use axum::extract::{Form, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;
use serde::Deserialize;

use super::super::AdminState;
use super::pages::{Notice, Signed, page};
use super::session::{ConsoleSession, set_cookie};
use crate::sync::lock;

/// How many wrong tokens in a row are answered before the limit holds.
const BURST: u32 = 5;

/// How often the limit lets one more wrong token be answered.
const EASES_EVERY: Duration = Duration::from_secs(6);

/// At most one log line about refused sign-ins per this long.
const LOG_EVERY: Duration = Duration::from_secs(30);

/// The limit on wrong admin tokens, shared by every caller (the admin listener is on loopback:
/// every caller has the same address), and the throttle of the lines that log them.
#[derive(Debug, Default)]
pub struct SignInLimit {
    state: Mutex<LimitState>,
}

#[derive(Debug, Default)]
struct LimitState {
    /// When the wrong tokens so far will have eased off entirely (a generic cell rate: each one
    /// pushes it [`EASES_EVERY`] further); `None` before the first.
    eased: Option<Instant>,
    /// When the last line about refusals was logged.
    logged: Option<Instant>,
    /// Refusals since then that were not logged.
    unlogged: u64,
}

impl SignInLimit {
    /// Whether a sign-in may be checked at `now`; else how long until one may.
    fn admit(&self, now: Instant) -> Result<(), Duration> {
        let state = lock(&self.state);
        let owed = state
            .eased
            .map_or(Duration::ZERO, |e| e.saturating_duration_since(now));
        let room = EASES_EVERY * (BURST - 1);
        match owed.checked_sub(room) {
            Some(wait) if !wait.is_zero() => Err(wait),
            _ => Ok(()),
        }
    }

    /// A wrong token was given at `now`.
    fn failed(&self, now: Instant) {
        let mut state = lock(&self.state);
        let from = state.eased.map_or(now, |e| e.max(now));
        state.eased = Some(from + EASES_EVERY);
    }

    /// A refusal at `now`: `Some(how many refusals before it were not logged)` when it is to be
    /// logged, `None` when it is only counted.
    fn log(&self, now: Instant) -> Option<u64> {
        let mut state = lock(&self.state);
        if state
            .logged
            .is_some_and(|at| now.duration_since(at) < LOG_EVERY)
        {
            state.unlogged += 1;
            return None;
        }
        state.logged = Some(now);
        Some(std::mem::take(&mut state.unlogged))
    }
}

#[derive(Debug, Deserialize)]
pub(super) struct TokenForm {
    token: String,
}

pub(super) async fn login_page(
    State(admin): State<Arc<AdminState>>,
    Query(notice): Query<Notice>,
) -> Response {
    sign_in_form(&admin, notice.notice.as_deref(), StatusCode::OK)
}

fn sign_in_form(admin: &AdminState, error: Option<&str>, status: StatusCode) -> Response {
    let file = admin.guard.token.file.display().to_string();
    let body = html! {
        @if let Some(error) = error {
            p.error role="alert" { (error) }
        }
        form.stacked method="post" action="/console/login" {
            label for="token" { "Admin token" }
            input #token type="password" name="token" autocomplete="current-password" required autofocus;
            p.hint { "It is in " code { (file) } " (" code { "mcpmux status" } " reads it too)." }
            button type="submit" { "Sign in" }
        }
    };
    (status, page("", "Sign in", None, None, body)).into_response()
}

/// The admin token, checked in constant time unless too many wrong ones came lately: a session
/// and its cookie, or the form again (401), or a refusal to check (429).
pub(super) async fn login(
    State(admin): State<Arc<AdminState>>,
    Form(form): Form<TokenForm>,
) -> Response {
    let limit = &admin.console.sign_ins;
    let now = Instant::now();
    if let Err(wait) = limit.admit(now) {
        let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        if let Some(unlogged) = limit.log(now) {
            tracing::warn!(
                retry_after = seconds,
                unlogged,
                "Refused a console sign-in: too many wrong admin tokens lately (later refusals are logged at most every 30 s)."
            );
        }
        return too_many(&admin, seconds);
    }
    if !admin.guard.token.matches(form.token.trim()) {
        limit.failed(now);
        if let Some(unlogged) = limit.log(now) {
            tracing::warn!(
                unlogged,
                "Refused a console sign-in with a wrong admin token (later refusals are logged at most every 30 s)."
            );
        }
        let error = "That is not the admin token.";
        return sign_in_form(&admin, Some(error), StatusCode::UNAUTHORIZED);
    }
    let (id, session) = admin.console.sessions.open();
    tracing::info!("A console session was opened.");
    redirect_setting_cookie(&session.base(), &session, Some(&id))
}

/// The answer to a sign-in refused by the limit: 429, when to try again, and why.
fn too_many(admin: &AdminState, seconds: u64) -> Response {
    let error = format!(
        "Too many wrong admin tokens were given lately: try again in {seconds} s. \
         (`mcpmux status` and the other commands read the token themselves.)"
    );
    let mut response = sign_in_form(admin, Some(&error), StatusCode::TOO_MANY_REQUESTS);
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    response
}

pub(super) async fn logout(
    State(admin): State<Arc<AdminState>>,
    Extension(signed): Extension<Signed>,
) -> Response {
    admin.console.sessions.close(&signed.id);
    redirect_setting_cookie("/console/login", &signed.session, None)
}

/// A redirect to `to` that keeps session `id`'s cookie for `session`'s pages (or, with `None`,
/// removes it).
fn redirect_setting_cookie(to: &str, session: &ConsoleSession, id: Option<&str>) -> Response {
    let mut response = Redirect::to(to).into_response();
    if let Ok(cookie) = set_cookie(session, id).parse() {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_few_wrong_tokens_are_answered_then_the_limit_holds_and_eases() {
        let limit = SignInLimit::default();
        let start = Instant::now();
        for _ in 0..BURST {
            assert_eq!(limit.admit(start), Ok(()));
            limit.failed(start);
        }
        let wait = limit.admit(start).expect_err("the limit holds");
        assert_eq!(wait, EASES_EVERY);
        // Refused attempts cost nothing: once it eased, one more is answered.
        assert!(limit.admit(start + wait / 2).is_err());
        assert_eq!(limit.admit(start + wait), Ok(()));
        limit.failed(start + wait);
        assert!(limit.admit(start + wait).is_err());
        // Long after, a whole burst again.
        let later = start + EASES_EVERY * (2 * BURST);
        for _ in 0..BURST {
            assert_eq!(limit.admit(later), Ok(()));
            limit.failed(later);
        }
        assert!(limit.admit(later).is_err());
    }

    #[test]
    fn refusals_are_logged_once_in_a_while_with_how_many_were_not() {
        let limit = SignInLimit::default();
        let start = Instant::now();
        assert_eq!(limit.log(start), Some(0));
        for i in 1..=40 {
            assert_eq!(limit.log(start + Duration::from_millis(i)), None);
        }
        assert_eq!(limit.log(start + LOG_EVERY), Some(40));
        assert_eq!(limit.log(start + LOG_EVERY), None);
    }
}
