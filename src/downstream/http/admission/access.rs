//! Who a host request is and what it sees ([`Admission`], the profile part of admission): the host its bearer token names (with
//! `[hosts]` or `[server.authorization]`), and the profile it gets — its path's, its host's, or
//! `server.anonymous_profile` for a loopback client without a credential. Once any credential is
//! configured, a profile's path wants one too unless that profile says `anonymous = true`. Also
//! what RFC 9728's protected resource metadata says about mcpmux.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::super::{AppState, json_response};
use super::credential::Credentials;
use super::refusal::{Refusal, refuse};
use crate::config::{Profile, ServerConfig};
use crate::downstream::jwt::JwtGate;
use crate::downstream::principal::{Access, Identity, Principal};
use crate::jsonrpc::codes;

/// Who may use the host endpoint and what they see.
#[derive(Debug)]
pub struct Gate {
    /// The `[hosts]` principals, in config order.
    pub principals: Vec<Arc<Principal>>,
    pub profiles: Vec<Arc<Profile>>,
    /// The JWT issuers, if any host signs in with a JWT.
    pub jwt: Option<JwtGate>,
    /// mcpmux as an OAuth protected resource (`[server.authorization]`).
    pub protected: Option<ProtectedResource>,
}

/// What RFC 9728's protected resource metadata says about mcpmux.
#[derive(Debug)]
pub struct ProtectedResource {
    pub resource: String,
    pub authorization_servers: Vec<String>,
    pub scopes_supported: Vec<String>,
}

impl ProtectedResource {
    /// Where the metadata is: the well-known path inserted before the resource's path.
    fn metadata_url(&self) -> String {
        match url::Url::parse(&self.resource) {
            Ok(url) => format!(
                "{}/.well-known/oauth-protected-resource{}",
                url.origin().ascii_serialization(),
                url.path().trim_end_matches('/')
            ),
            Err(_) => self.resource.clone(),
        }
    }

    fn document(&self) -> String {
        serde_json::json!({
            "resource": self.resource,
            "authorization_servers": self.authorization_servers,
            "scopes_supported": self.scopes_supported,
            "bearer_methods_supported": ["header"],
            "resource_name": "mcpmux",
        })
        .to_string()
    }
}

/// What decides a request's [`Access`].
#[derive(Debug)]
pub(in super::super) struct Admission {
    /// Who checks credentials; no hosts and no JWT issuer: hosts are anonymous.
    credentials: Credentials,
    /// The protected resource metadata document, with `[server.authorization]`.
    resource_metadata: Option<String>,
    /// The profiles served at their own path.
    paths: Vec<Arc<Profile>>,
    /// What a loopback client without a credential sees.
    anonymous: Option<Arc<Profile>>,
}

impl Admission {
    /// The principal a bearer token in `headers` names (a token host, or a user a trusted issuer
    /// signed in), checked as a request's credential is; `None` for any other.
    pub(in super::super) async fn principal_of(
        &self,
        headers: &HeaderMap,
    ) -> Option<Arc<Principal>> {
        self.credentials
            .authenticate(headers)
            .await
            .ok()
            .map(|(p, _)| p)
    }

    /// The `[hosts]` principals it admits.
    pub(in super::super) fn principals(&self) -> &[Arc<Principal>] {
        &self.credentials.hosts
    }

    pub(in super::super) fn new(gate: Gate, config: &ServerConfig) -> Self {
        let profiles = gate.profiles;
        Self {
            credentials: Credentials {
                hosts: gate.principals,
                jwt: gate.jwt,
                resource_metadata: gate.protected.as_ref().map(ProtectedResource::metadata_url),
            },
            resource_metadata: gate.protected.as_ref().map(ProtectedResource::document),
            paths: profiles.iter().filter(|p| p.path).cloned().collect(),
            anonymous: (config.anonymous_profile.as_ref())
                .and_then(|name| profiles.iter().find(|p| &p.name == name).cloned()),
        }
    }

    /// Who is asking and what they see. With `[hosts]` or `[server.authorization]`, a request
    /// needs a valid credential unless it comes from loopback to the path of a profile that says
    /// `anonymous = true`, or (on `/mcp`) `server.anonymous_profile` is set; a host with a
    /// profile may use only that profile's path.
    pub(in super::super) async fn resolve(
        &self,
        headers: &HeaderMap,
        peer: SocketAddr,
        path: Option<&str>,
    ) -> Result<Access, Refusal> {
        let at = match path {
            None => None,
            Some(name) => Some(
                (self.paths.iter())
                    .find(|p| p.name == name)
                    .cloned()
                    .ok_or_else(|| {
                        refuse(
                            StatusCode::NOT_FOUND,
                            codes::INVALID_REQUEST,
                            format!("Not Found: no profile is served at /mcp/{name}"),
                        )
                    })?,
            ),
        };
        let no_credentials = self.credentials.is_empty();
        let anonymous_allowed = || {
            !headers.contains_key(header::AUTHORIZATION)
                && peer.ip().is_loopback()
                && match &at {
                    Some(profile) => profile.anonymous,
                    None => self.anonymous.is_some(),
                }
        };
        if no_credentials || anonymous_allowed() {
            return Ok(Access {
                principal: None,
                via_path: at.is_some(),
                profile: at.or_else(|| self.anonymous.clone()),
                peer: Some(peer.ip()),
                subject_token: None,
            });
        }
        // Boxed: the anonymous fast path keeps a small future.
        let (principal, subject_token) = Box::pin(self.credentials.authenticate(headers)).await?;
        let via_path = at.is_some();
        let profile = match (at, &principal.profile) {
            (Some(at), Some(own)) if at.name != own.name => {
                return Err(refuse(
                    StatusCode::FORBIDDEN,
                    codes::INVALID_REQUEST,
                    format!(
                        "Forbidden: host `{}` sees the profile `{}`, not `{}`; use /mcp or /mcp/{}",
                        principal.name, own.name, at.name, own.name
                    ),
                ));
            }
            (Some(at), _) => Some(at),
            (None, own) => own.clone(),
        };
        Ok(Access {
            principal: Some(principal),
            profile,
            via_path,
            peer: Some(peer.ip()),
            subject_token,
        })
    }

    /// What a loopback client without a credential reaches, said in one line at start and after
    /// each reload: everything without credentials configured, else `/mcp` with
    /// `server.anonymous_profile` and the paths of `anonymous = true` profiles.
    pub(in super::super) fn announce(&self, loopback: bool) {
        let reachable = if self.credentials.is_empty() {
            let mut open = vec![match &self.anonymous {
                Some(p) => format!("/mcp (profile {})", p.name),
                None => "/mcp (the whole catalog)".to_owned(),
            }];
            open.extend(self.paths.iter().map(|p| format!("/mcp/{}", p.name)));
            open.join(", ")
        } else {
            let mut open: Vec<String> = (self.anonymous.iter())
                .map(|p| format!("/mcp (profile {})", p.name))
                .collect();
            open.extend(
                (self.paths.iter())
                    .filter(|p| p.anonymous)
                    .map(|p| format!("/mcp/{}", p.name)),
            );
            if open.is_empty() {
                "nothing".to_owned()
            } else {
                open.join(", ")
            }
        };
        if loopback || reachable == "nothing" {
            tracing::info!(%reachable, "Host endpoints reachable without a credential, by loopback clients.");
        } else {
            tracing::warn!(%reachable, "Host endpoints reachable without a credential, by loopback clients, while listening beyond loopback.");
        }
    }

    /// What a session opened with `old` is granted under this (reloaded) admission: its host's
    /// new settings and profile, its path's profile, or the anonymous profile. `None` when it is
    /// granted nothing any more (its host or path is gone, or anonymous use is no longer allowed):
    /// the session ends, as its next request would be refused.
    pub(in super::super) fn remap(&self, old: &Access) -> Option<Access> {
        // By identity: a host stays that host, a signed-in user that issuer's user (a user named
        // like a host is never rebound to it).
        let principal = match &old.principal {
            None => None,
            Some(p) => Some(match &p.identity {
                Identity::Host => (self.credentials.hosts.iter())
                    .find(|h| h.name == p.name)
                    .cloned()?,
                Identity::SignedIn { issuer } => {
                    (self.credentials.jwt.as_ref())?.signed_in_user(issuer, &p.name)?
                }
            }),
        };
        let at = match (&old.profile, old.via_path) {
            (Some(profile), true) => Some(
                (self.paths.iter())
                    .find(|p| p.name == profile.name)
                    .cloned()?,
            ),
            _ => None,
        };
        let open = self.credentials.is_empty();
        let profile = match &principal {
            None if old.via_path => Some(at.filter(|p| open || p.anonymous)?),
            None if open || self.anonymous.is_some() => self.anonymous.clone(),
            None => return None,
            Some(p) => match (at, &p.profile) {
                (Some(at), Some(own)) if at.name != own.name => return None,
                (Some(at), _) => Some(at),
                (None, own) => own.clone(),
            },
        };
        Some(Access {
            via_path: old.via_path,
            principal,
            profile,
            peer: old.peer,
            subject_token: old.subject_token.clone(),
        })
    }
}

/// RFC 9728 protected resource metadata, with `[server.authorization]`.
pub(in super::super) async fn protected_resource(State(state): State<Arc<AppState>>) -> Response {
    match &state.edge.load().admission.resource_metadata {
        Some(document) => json_response(document.clone()),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}
