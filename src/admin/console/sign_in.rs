//! Signing in to the console and out of it. The admin token is compared in constant time; a right
//! one opens a session and leads to the session's own pages ([`super::session`]).

use std::sync::Arc;

use axum::Extension;
use axum::extract::{Form, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;
use serde::Deserialize;

use super::super::AdminState;
use super::pages::{Notice, Signed, page};
use super::session::{ConsoleSession, set_cookie};

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

/// The admin token, checked in constant time: a session and its cookie, or the form again.
pub(super) async fn login(
    State(admin): State<Arc<AdminState>>,
    Form(form): Form<TokenForm>,
) -> Response {
    if !admin.guard.token.matches(form.token.trim()) {
        tracing::warn!("Refused a console sign-in with a wrong admin token.");
        let error = "That is not the admin token.";
        return sign_in_form(&admin, Some(error), StatusCode::UNAUTHORIZED);
    }
    let (id, session) = admin.console.sessions.open();
    tracing::info!("A console session was opened.");
    redirect_setting_cookie(&session.base(), &session, Some(&id))
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
