//! Admission to the host endpoint, as an axum extractor: a handler that takes [`Admitted`] runs
//! only for a request that passed the origin checks and was given its [`Access`] (its
//! credential's host, the profile it sees), under one read of the running settings; one that
//! takes [`InSession`] also gets the session the request names. A request that does not pass is
//! answered with a [`Refusal`], the one refusal type of the host endpoint; no handler repeats
//! any of this.
//!
//! - `origin`: `Origin`, `Host` and the `MCP-Protocol-Version` of a GET or DELETE.
//! - `credential`: who a bearer token names (token hosts, JWT issuers).
//! - `access`: what a request sees (profiles, paths, anonymous use) and what a reload grants an
//!   open session.
//! - `refusal`: the status and JSON-RPC error a refused request gets.

mod access;
mod credential;
mod origin;
mod refusal;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, FromRequestParts, OptionalFromRequestParts, Path};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderName, StatusCode};
use axum::response::{IntoResponse, Response};

pub(super) use crate::mcp::VERSION_HEADER;
pub(super) use access::{Admission, protected_resource};
pub use access::{Gate, ProtectedResource};
pub(super) use origin::check_version;
pub(super) use refusal::{Refusal, refuse};

use super::{AppState, Edge, SESSION};
use crate::downstream::principal::Access;
use crate::downstream::session::Session;
use crate::jsonrpc::codes;

/// [`VERSION_HEADER`] as a name made at compile time (a lookup by text checks and hashes it each
/// time).
pub(super) const VERSION: HeaderName = HeaderName::from_static(VERSION_HEADER);

/// A request that passed the origin checks and its credential: who it is and what it sees, and
/// the running settings it was admitted under (read once for the whole request).
pub(super) struct Admitted {
    pub access: Access,
    pub edge: Arc<Edge>,
}

impl FromRequestParts<Arc<AppState>> for Admitted {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, Self::Rejection> {
        // `/mcp/{profile}` names the profile; `/mcp`, `/sse` and `/messages` name none. A
        // profile segment that does not decode is refused (400), never read as `/mcp`.
        let path = <Path<String> as OptionalFromRequestParts<_>>::from_request_parts(parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(peer)| *peer);
        let refused = |refusal: Refusal| refusal.respond(&parts.headers);
        let edge = state.edge.load_full();
        origin::check_origin(&parts.headers, &edge.allowed_origins, state.loopback_only)
            .map_err(refused)?;
        // The listener always sets the peer; without one (never in practice) no loopback rule
        // applies.
        let peer = peer.unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)));
        let access = (edge.admission)
            .resolve(
                &parts.headers,
                peer,
                path.as_ref().map(|Path(p)| p.as_str()),
            )
            .await
            .map_err(refused)?;
        Ok(Self { access, edge })
    }
}

impl Admitted {
    /// The session the request names (its `Mcp-Session-Id`): 400 without the header, 404 when
    /// unknown, expired, or another principal's (or another profile's).
    pub(super) fn session(
        &self,
        state: &AppState,
        headers: &HeaderMap,
    ) -> Result<Arc<Session>, Refusal> {
        let Some(id) = headers.get(&SESSION).and_then(|v| v.to_str().ok()) else {
            return Err(refuse(
                StatusCode::BAD_REQUEST,
                codes::INVALID_REQUEST,
                "Bad Request: Mcp-Session-Id header is required",
            ));
        };
        // Another principal's (or another profile's) session does not exist for this one.
        let own = |s: &Arc<Session>| s.access().same(&self.access);
        let session = state.service.session(id).filter(own).ok_or_else(|| {
            refuse(
                StatusCode::NOT_FOUND,
                codes::INVALID_REQUEST,
                "Session not found: it ended or expired; initialize a new one",
            )
        })?;
        // A host that signs in with a JWT renews it: the session's requests carry the newest
        // (what a token exchange exchanges).
        if let Some(token) = &self.access.subject_token {
            session.renew_subject_token(token);
        }
        Ok(session)
    }
}

/// An admitted request of the handshake era and the session it names.
pub(super) struct InSession {
    pub session: Arc<Session>,
}

impl FromRequestParts<Arc<AppState>> for InSession {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, Self::Rejection> {
        let admitted = Admitted::from_request_parts(parts, state).await?;
        let session =
            check_version(&parts.headers).and_then(|()| admitted.session(state, &parts.headers));
        match session {
            Ok(session) => Ok(Self { session }),
            Err(refusal) => Err(refusal.respond(&parts.headers)),
        }
    }
}
