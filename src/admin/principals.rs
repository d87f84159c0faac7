//! Each principal's own sign-in to an upstream, for an admin: `POST
//! /upstreams/{name}/principals/{principal}/login` makes a sign-in link for that principal (the
//! same page a host's elicitation opens: the person still proves who they are there), and
//! `.../logout` forgets the principal's tokens and stops its instances. A signed-in user is
//! named with `?issuer=URL` (its issuer), a host by its name alone.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Json, Response};
use futures_util::future::BoxFuture;

use super::{AdminState, oauth_upstream, refusal};
use crate::api::{PrincipalLoggedOut, PrincipalSignIn};
use crate::upstream::UpstreamHandle;

/// Who a principal is to the admin API: a host's name, or a user's with the issuer that signed
/// it in.
#[derive(Debug, Clone, Copy)]
pub struct Named<'a> {
    pub name: &'a str,
    pub issuer: Option<&'a str>,
}

/// Principals' own sign-ins, as the host service keeps them (the daemon wires it).
pub trait PrincipalSignIns: Send + Sync {
    /// A sign-in link for `principal` to `upstream`, and how many seconds it works.
    fn link<'a>(
        &'a self,
        upstream: &'a UpstreamHandle,
        principal: Named<'a>,
    ) -> futures_util::future::BoxFuture<'a, Result<(String, u64), String>>;
    /// Forgets `principal`'s tokens for `upstream` and stops its instances: whether it had any.
    fn revoke<'a>(
        &'a self,
        upstream: &'a str,
        principal: Named<'a>,
    ) -> BoxFuture<'a, Result<bool, String>>;
    /// How many principals have signed in to `upstream`.
    fn signed_in(&self, upstream: &str) -> usize;
}

#[derive(serde::Deserialize)]
pub(super) struct Issuer {
    /// The issuer of a signed-in user (none: a `[hosts]` host).
    issuer: Option<String>,
}

/// `principal` as the running config knows it: a host must be one of `[hosts]`.
fn named<'a>(
    admin: &AdminState,
    principal: &'a str,
    issuer: Option<&'a str>,
) -> Result<Named<'a>, (StatusCode, String)> {
    if issuer.is_none() && !(admin.metrics.hosts)().iter().any(|h| h.name == principal) {
        let why = format!(
            "no host is named `{principal}` in [hosts] (a signed-in user is named with its issuer: --issuer URL)"
        );
        return Err((StatusCode::NOT_FOUND, why));
    }
    Ok(Named {
        name: principal,
        issuer,
    })
}

/// An upstream whose principals sign in on their own.
fn per_principal(admin: &AdminState, name: &str) -> Result<UpstreamHandle, (StatusCode, String)> {
    let handle = oauth_upstream(admin, name)?;
    if !handle.signs_in_each_principal() {
        let why = format!(
            "upstream `{name}` does not sign each principal in (it needs credentials = \"per-principal\" and an [oauth] table with grant = \"authorization_code\"); use `mcpmux login {name}` without --principal"
        );
        return Err((StatusCode::BAD_REQUEST, why));
    }
    Ok(handle)
}

/// A sign-in link for `principal` (with `issuer`: a signed-in user) to upstream `name`.
pub(super) async fn link(
    admin: &AdminState,
    name: &str,
    (principal, issuer): (&str, Option<&str>),
) -> Result<PrincipalSignIn, (StatusCode, String)> {
    let upstream = per_principal(admin, name)?;
    let whom = named(admin, principal, issuer)?;
    let (url, expires_in_secs) = (admin.principals.link(&upstream, whom).await)
        .map_err(|why| (StatusCode::SERVICE_UNAVAILABLE, why))?;
    Ok(PrincipalSignIn {
        upstream: name.to_owned(),
        principal: principal.to_owned(),
        url,
        expires_in_secs,
    })
}

/// Forgets `principal`'s sign-in to upstream `name`.
pub(super) async fn forget(
    admin: &AdminState,
    name: &str,
    (principal, issuer): (&str, Option<&str>),
) -> Result<PrincipalLoggedOut, (StatusCode, String)> {
    per_principal(admin, name)?;
    let whom = named(admin, principal, issuer)?;
    let revoked = (admin.principals.revoke(name, whom).await)
        .map_err(|why| (StatusCode::INTERNAL_SERVER_ERROR, why))?;
    tracing::info!(upstream = %name, %principal, revoked, "Forgot a principal's sign-in.");
    Ok(PrincipalLoggedOut {
        upstream: name.to_owned(),
        principal: principal.to_owned(),
        revoked,
    })
}

/// `POST /upstreams/{name}/principals/{principal}/login`.
pub(super) async fn login(
    State(admin): State<Arc<AdminState>>,
    Path((name, principal)): Path<(String, String)>,
    Query(issuer): Query<Issuer>,
) -> Response {
    match link(&admin, &name, (&principal, issuer.issuer.as_deref())).await {
        Ok(made) => Json(made).into_response(),
        Err(refused) => refusal(refused),
    }
}

/// `POST /upstreams/{name}/principals/{principal}/logout`.
pub(super) async fn logout(
    State(admin): State<Arc<AdminState>>,
    Path((name, principal)): Path<(String, String)>,
    Query(issuer): Query<Issuer>,
) -> Response {
    match forget(&admin, &name, (&principal, issuer.issuer.as_deref())).await {
        Ok(out) => Json(out).into_response(),
        Err(refused) => refusal(refused),
    }
}
