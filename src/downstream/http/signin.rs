//! The pages of a principal's sign-in through its host (`downstream::signin`), on the host
//! listener: `GET /signin/{id}` asks the person to prove who they are with the credential their
//! host uses; `POST /signin/{id}` checks it as the host endpoint would and, for the link's own
//! principal, sends them on to the upstream's authorization server; `GET /oauth/callback` is
//! where that server sends them back. Nothing here is a host's request: no session, no
//! JSON-RPC, and a credential typed into the form is only compared, never kept or logged.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Form, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};

use super::AppState;
use crate::downstream::signin::{Page, Refused};

/// Pages no one may frame or cache, which name themselves to no other site (`same-origin`: with
/// `no-referrer` a browser sends its form with `Origin: null`).
fn page(status: StatusCode, title: &str, body: maud::Markup) -> Response {
    let html = maud::html! {
        (maud::DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " — mcpmux" }
                style { "body{font:16px/1.5 system-ui,sans-serif;max-width:36rem;margin:3rem auto;padding:0 1rem}input{font:inherit;width:100%;padding:.4rem;box-sizing:border-box}button{font:inherit;margin-top:.8rem;padding:.4rem 1.2rem}" }
            }
            body { h1 { (title) } (body) }
        }
    };
    let mut response = (status, Html(html.into_string())).into_response();
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CACHE_CONTROL, "no-store"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "same-origin"),
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; style-src 'unsafe-inline'; form-action 'self' http: https:; frame-ancestors 'none'",
        ),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

fn gone() -> Response {
    page(
        StatusCode::GONE,
        "This sign-in link no longer works",
        maud::html! {
            p { "It was used already, or it expired. Nothing was done. Call the tool again from your host for a new link." }
        },
    )
}

/// `GET /signin/{id}`.
pub(super) async fn show(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Response {
    match state.service.signins().page(&id).await {
        Page::Gone => gone(),
        Page::Unavailable(why) => page(
            StatusCode::SERVICE_UNAVAILABLE,
            "This sign-in cannot go on right now",
            maud::html! { p { (why) } p { "Reload this page in a moment." } },
        ),
        Page::Prove {
            upstream,
            principal,
        } => page(
            StatusCode::OK,
            &format!("Sign in to {upstream}"),
            maud::html! {
                p { "Your host asked you to sign in to " b { (upstream) } " as " b { (principal) } "." }
                p { "First show mcpmux it is you: paste the token your host uses to reach mcpmux (its bearer token, or your access token). mcpmux only compares it and keeps nothing." }
                form method="post" {
                    label for="token" { "Your host's token" }
                    input id="token" name="token" type="password" autocomplete="off" required;
                    button type="submit" { "Continue to " (upstream) }
                }
            },
        ),
    }
}

#[derive(serde::Deserialize)]
pub(super) struct Proof {
    token: String,
}

/// `POST /signin/{id}`: the person's credential, checked; for the link's own principal, on to
/// the authorization server.
pub(super) async fn prove(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    ConnectInfo(_peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Form(proof): Form<Proof>,
) -> Response {
    let signins = state.service.signins();
    if !signins.same_origin(headers.get(header::ORIGIN)) {
        return page(
            StatusCode::FORBIDDEN,
            "Refused",
            maud::html! { p { "This form may only be sent from mcpmux's own page." } },
        );
    }
    let mut as_bearer = HeaderMap::new();
    if let Ok(value) = HeaderValue::from_str(&format!("Bearer {}", proof.token.trim())) {
        as_bearer.insert(header::AUTHORIZATION, value);
    }
    let edge = state.edge.load_full();
    let proven = edge.admission.principal_of(&as_bearer).await;
    match signins.prove(&id, proven.as_deref()).await {
        Ok(authorization) => (
            StatusCode::SEE_OTHER,
            [(header::LOCATION, authorization.to_string())],
        )
            .into_response(),
        Err(Refused::Gone) => gone(),
        Err(Refused::NotYou { void }) => page(
            StatusCode::FORBIDDEN,
            "Not the principal this link is for",
            maud::html! {
                p { "That credential is not the one of the host this sign-in was started for. Nothing was done." }
                @if void { p { "The link is void now; call the tool again from your own host for a new one." } }
            },
        ),
        Err(Refused::Failed(why)) => page(
            StatusCode::BAD_GATEWAY,
            "The sign-in could not start",
            maud::html! { p { (why) } },
        ),
    }
}

/// `GET /oauth/callback`: the authorization server's redirect.
pub(super) async fn callback(
    State(state): State<Arc<AppState>>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    match state.service.signins().callback(&query).await {
        Ok((upstream, whom)) => page(
            StatusCode::OK,
            "Signed in",
            maud::html! {
                p { "You are signed in to " b { (upstream.name()) } " as " b { (whom.name) } ". You can close this tab and go back to your host." }
            },
        ),
        Err(why) => page(
            StatusCode::BAD_REQUEST,
            "The sign-in did not finish",
            maud::html! { p { (why) } },
        ),
    }
}
