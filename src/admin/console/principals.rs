//! Each principal's own sign-in to a per-principal upstream, from the console: how many have
//! signed in, a sign-in link made for one (shown to copy and hand over: the principal proves who
//! they are on its page), or one's sign-in revoked. The upstream and principal are form fields.

use std::sync::Arc;

use axum::Extension;
use axum::extract::{Form, State};
use axum::response::Response;
use maud::{Markup, html};
use serde::Deserialize;

use super::super::AdminState;
use super::super::principals::{forget, link};
use super::pages::{Signed, csrf, done};
use crate::api::UpstreamStatus;

/// The overview's section for upstreams whose principals sign in on their own (nothing when
/// there are none).
pub(super) fn section(signed: &Signed, upstreams: &[UpstreamStatus]) -> Markup {
    let own: Vec<(&str, usize)> = (upstreams.iter())
        .filter_map(|u| u.signed_in.map(|n| (u.name.as_str(), n)))
        .collect();
    html! {
        @if !own.is_empty() {
            section #principals {
                h2 { "Each principal's own sign-in" }
                @for (name, count) in &own {
                    form.stacked method="post" action={ (signed.base) "principals" } {
                        (csrf(signed))
                        input type="hidden" name="name" value=(name);
                        p { b { (name) } ": " span data-field="signed_in" { (count) } " principal(s) signed in." }
                        label { "Principal (a host's name, or a user's) " input name="principal" required; }
                        label { "Its issuer (only for a signed-in user) " input name="issuer"; }
                        button type="submit" name="act" value="link" { "Make a sign-in link" }
                        " "
                        button type="submit" name="act" value="revoke" { "Revoke its sign-in" }
                    }
                }
            }
        }
    }
}

#[derive(Debug, Deserialize)]
pub(super) struct Asked {
    name: String,
    principal: String,
    #[serde(default)]
    issuer: String,
    act: String,
}

/// `POST …/principals`: a link made, or a sign-in revoked; the overview says which.
pub(super) async fn act(
    State(admin): State<Arc<AdminState>>,
    Extension(signed): Extension<Signed>,
    Form(asked): Form<Asked>,
) -> Response {
    let issuer = Some(asked.issuer.trim()).filter(|i| !i.is_empty());
    let who = (asked.principal.trim(), issuer);
    let notice = match asked.act.as_str() {
        "link" => match link(&admin, &asked.name, who).await {
            Ok(made) => format!(
                "Give {} this link to sign in to {} (it works once, within {} minutes): {}",
                made.principal,
                made.upstream,
                made.expires_in_secs / 60,
                made.url
            ),
            Err((_, why)) => why,
        },
        "revoke" => match forget(&admin, &asked.name, who).await {
            Ok(out) if out.revoked => format!(
                "Revoked {}'s sign-in to {}; their next call asks them to sign in again.",
                out.principal, out.upstream
            ),
            Ok(out) => format!("{} was not signed in to {}.", out.principal, out.upstream),
            Err((_, why)) => why,
        },
        other => format!("`{other}` is not something the console does"),
    };
    done(&signed, "", &notice)
}
