//! The overview: every upstream, updated live (`events`), with its last hour (`history`), and
//! what a person does to one: restart it, sign in to it (the OAuth flow, from a page that links
//! to its authorization server), sign out of it. The upstream an action is for is a field of its
//! form (the sign-in's page: its query string), never a part of a path.

use std::sync::Arc;

use axum::Extension;
use axum::extract::{Form, Query, State};
use axum::http::{HeaderMap, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use maud::html;
use serde::Deserialize;

use super::super::{AdminState, start_login, status_of};
use super::events::Row;
use super::history::charts;
use super::pages::{Notice, Signed, action, done, page};
use crate::api::LoginState;

pub(super) async fn overview(
    State(admin): State<Arc<AdminState>>,
    Extension(signed): Extension<Signed>,
    Query(notice): Query<Notice>,
) -> Html<String> {
    let status = status_of(&admin);
    let body = html! {
        p { "mcpmux " (status.version) " · catalog generation " (status.catalog_generation) " · "
            (status.sessions) " of " (status.max_sessions) " host sessions open" }
        table #upstreams data-live={ (signed.base) "events" } {
            caption { "Upstreams (updated live)" }
            thead { tr {
                th scope="col" { "Upstream" } th scope="col" { "State" } th scope="col" { "Era" }
                th scope="col" { "Transport" } th scope="col" { "Tools" } th scope="col" { "In flight" }
                th scope="col" { "p50" } th scope="col" { "p99" } th scope="col" { "Restarts" }
                th scope="col" { "Last error" } th scope="col" { "Last hour" } th scope="col" { "Actions" }
            } }
            tbody {
                @for upstream in &status.upstreams {
                    @let row = Row::of(upstream);
                    tr data-upstream=(row.name) data-state=(row.state) {
                        th scope="row" { (row.name) }
                        td data-field="state" { (row.state) }
                        td data-field="era" { (row.era) }
                        td data-field="transport" { (row.transport) }
                        td data-field="tools" { (row.tools) }
                        td data-field="in_flight" { (row.in_flight) }
                        td data-field="p50" { (row.p50) }
                        td data-field="p99" { (row.p99) }
                        td data-field="restarts" { (row.restarts) }
                        td data-field="last_error" { (row.last_error) }
                        td.charts { (charts(&admin.console.history.points(&row.name))) }
                        td {
                            @let named = [("name", row.name.as_str())];
                            (action(&signed, "upstreams/restart", &named, &format!("Restart {}", row.name)))
                            @if upstream.oauth && row.state != "ready" {
                                (action(&signed, "upstreams/login", &named, &format!("Sign in to {}", row.name)))
                            }
                            @if upstream.oauth && row.state == "ready" {
                                (action(&signed, "upstreams/logout", &named, &format!("Sign out of {}", row.name)))
                            }
                        }
                    }
                }
            }
        }
        (super::principals::section(&signed, &status.upstreams))
    };
    page(
        "",
        "Overview",
        Some(&signed),
        notice.notice.as_deref(),
        body,
    )
}

/// The upstream an action or the sign-in's page is for.
#[derive(Debug, Deserialize)]
pub(super) struct Named {
    name: String,
}

pub(super) async fn restart(
    State(admin): State<Arc<AdminState>>,
    Extension(signed): Extension<Signed>,
    Form(Named { name }): Form<Named>,
) -> Response {
    match admin.supervisor.restart(&name).await {
        Ok(()) => done(&signed, "", &format!("Restarting {name}.")),
        Err(e) => done(&signed, "", &format!("Could not restart {name}: {e}")),
    }
}

/// The address of the page that follows upstream `name`'s sign-in, below the session's path.
fn sign_in_page(signed: &Signed, name: &str) -> String {
    let query = form_urlencoded::Serializer::new(String::new())
        .append_pair("name", name)
        .finish();
    format!("{}upstreams/login?{query}", signed.base)
}

/// Starts a sign-in, then shows where it is. The authorization server is reached by a link, not
/// by redirecting the form's POST: the CSP's `form-action 'self'` rightly forbids a form to end up
/// on another origin.
pub(super) async fn sign_in(
    State(admin): State<Arc<AdminState>>,
    Extension(signed): Extension<Signed>,
    headers: HeaderMap,
    Form(Named { name }): Form<Named>,
) -> Response {
    let page = sign_in_page(&signed, &name);
    // The sign-in page's own address as the person's browser reached the console (its `Host`,
    // which the admin guard has checked), for the callback page to link back to.
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    let return_to = host
        .and_then(|host| url::Url::parse(&format!("http://{host}")).ok())
        // A `Host` that is not just an authority would make another address of it.
        .filter(|url| {
            url.path() == "/"
                && url.query().is_none()
                && url.fragment().is_none()
                && url.username().is_empty()
        })
        .and_then(|url| url.join(&page).ok());
    match start_login(&admin, name.clone(), return_to).await {
        Ok(started) if started.authorization_url.is_none() => {
            done(&signed, "", &format!("{name} is signed in."))
        }
        Ok(_) => Redirect::to(&page).into_response(),
        Err((_, why)) => done(&signed, "", &why),
    }
}

/// Where an upstream's sign-in is: a link to the authorization server while it waits for the
/// person, then done or why it failed.
pub(super) async fn sign_in_state(
    State(admin): State<Arc<AdminState>>,
    Extension(signed): Extension<Signed>,
    Query(Named { name }): Query<Named>,
) -> Html<String> {
    let state = crate::sync::lock(&admin.logins).get(&name).cloned();
    let body = match state.unwrap_or(LoginState::None) {
        LoginState::Pending { authorization_url } => html! {
            p role="status" { "mcpmux is waiting for you to sign in to " (name) " at its authorization server." }
            p { a #authorize href=(authorization_url) rel="noreferrer" { "Continue to the sign-in for " (name) } }
            p { "Once you have signed in there, " (name) " restarts with its new tokens; "
                a href=(signed.base) { "the overview" } " shows it ready." }
        },
        LoginState::Done => html! {
            p role="status" { "Signed in to " (name) "; it restarts with its new tokens." }
            p { a href=(signed.base) { "Back to the overview" } }
        },
        LoginState::Failed { error } => html! {
            p.error role="alert" { "The sign-in to " (name) " failed: " (error) }
            p { a href=(signed.base) { "Back to the overview" } }
        },
        LoginState::None => html! {
            p { "No sign-in to " (name) " was started here." }
            p { a href=(signed.base) { "Back to the overview" } }
        },
    };
    page("", &format!("Sign in to {name}"), Some(&signed), None, body)
}

pub(super) async fn sign_out(
    State(admin): State<Arc<AdminState>>,
    Extension(signed): Extension<Signed>,
    Form(Named { name }): Form<Named>,
) -> Response {
    match super::super::forget_login(&admin, &name).await {
        Ok(()) => done(
            &signed,
            "",
            &format!("Signed out of {name}; it needs a sign-in again."),
        ),
        Err((_, why)) => done(&signed, "", &why),
    }
}
