//! Who a bearer token names: a token host (its SHA-256 compared in constant time against every
//! one) or a user a trusted JWT issuer signed in; a refusal is a 401 (403 for missing scopes)
//! with a Bearer challenge.

use std::sync::Arc;

use axum::http::{HeaderMap, StatusCode};

use super::refusal::{Refusal, challenge};
use crate::config::HeldToken;
use crate::downstream::jwt::{JwtGate, JwtRefusal};
use crate::downstream::principal::Principal;

/// Who checks a request's credential: the token hosts, the JWT issuers, and the protected
/// resource metadata URL a 401 points to.
#[derive(Debug)]
pub(super) struct Credentials {
    pub hosts: Vec<Arc<Principal>>,
    pub jwt: Option<JwtGate>,
    pub resource_metadata: Option<String>,
}

impl Credentials {
    /// No host and no JWT issuer: every host is anonymous.
    pub(super) fn is_empty(&self) -> bool {
        self.hosts.is_empty() && self.jwt.is_none()
    }

    /// The host whose bearer token `headers` carry (`Authorization: Bearer …`): a token compared
    /// by SHA-256 digest in constant time against every token host, or a JWT one of the trusted
    /// issuers signed; else 401 (403 for missing scopes) with a Bearer challenge.
    /// With a JWT, the token too (what `grant = "token_exchange"` exchanges).
    pub(super) async fn authenticate(
        &self,
        headers: &HeaderMap,
    ) -> Result<(Arc<Principal>, Option<HeldToken>), Refusal> {
        use sha2::Digest;
        use subtle::ConstantTimeEq;
        let metadata = self.resource_metadata.as_deref();
        let token = headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                v.strip_prefix("Bearer ")
                    .or_else(|| v.strip_prefix("bearer "))
            })
            .map(str::trim);
        let Some(token) = token.filter(|t| !t.is_empty()) else {
            return Err(challenge(
                StatusCode::UNAUTHORIZED,
                "Unauthorized: send the host's bearer token (Authorization: Bearer …)".into(),
                None,
                metadata,
            ));
        };
        let digest: [u8; 32] = sha2::Sha256::digest(token.as_bytes()).into();
        // Every host is compared, whichever matches, so the time taken tells nothing.
        let mut found = None;
        for host in &self.hosts {
            if host
                .token_sha256
                .is_some_and(|d| bool::from(d.ct_eq(&digest)))
            {
                found = Some(host);
            }
        }
        if let Some(host) = found {
            return Ok((Arc::clone(host), None));
        }
        let refusal = match &self.jwt {
            Some(gate) if JwtGate::looks_like_jwt(token) => match gate.verify(token).await {
                Ok(principal) => return Ok((principal, Some(HeldToken(Arc::from(token))))),
                Err(refusal) => refusal,
            },
            _ => JwtRefusal::Invalid("the bearer token is not one mcpmux knows".into()),
        };
        Err(match refusal {
            JwtRefusal::Invalid(why) => challenge(
                StatusCode::UNAUTHORIZED,
                format!("Unauthorized: {why}"),
                Some(("invalid_token", &why)),
                metadata,
            ),
            JwtRefusal::InsufficientScope(scopes) => challenge(
                StatusCode::FORBIDDEN,
                format!("Forbidden: the token lacks the scopes {scopes}"),
                Some(("insufficient_scope", &scopes)),
                metadata,
            ),
        })
    }
}
