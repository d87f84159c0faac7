//! Checks every HTTP request passes before its body matters, and refusals as JSON-RPC errors.

use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::value::RawValue;

use std::sync::Arc;

use super::super::jwt::{JwtGate, JwtRefusal};
use super::super::principal::Principal;
use crate::jsonrpc::{RpcError, codes, error_line, error_line_without_id};
use crate::loopback::{is_loopback_host, is_loopback_origin};
use crate::mcp::version::Version;

pub(super) const VERSION_HEADER: &str = "mcp-protocol-version";

/// An HTTP-level refusal, sent with a JSON-RPC error body as the spec's examples do.
#[derive(Debug)]
pub(super) struct Refusal {
    status: StatusCode,
    error: Box<RpcError>,
    /// The id of the request refused, when it could be read.
    id: Option<Box<RawValue>>,
    /// Since 2025-11-25 an error without a known id omits `id`; before, JSON-RPC's `null` is used.
    omit_unknown_id: bool,
    /// The `WWW-Authenticate` challenge of a 401 or 403.
    challenge: Option<String>,
}

pub(super) fn refuse(status: StatusCode, code: i64, message: impl Into<String>) -> Refusal {
    Refusal {
        status,
        error: Box::new(RpcError::new(code, message)),
        id: None,
        omit_unknown_id: false,
        challenge: None,
    }
}

/// A 401 (or 403) with a Bearer challenge: `error` (if any) and its description, and where the
/// protected resource's metadata is when mcpmux has `[server.authorization]`.
fn challenge(
    status: StatusCode,
    message: String,
    error: Option<(&str, &str)>,
    resource_metadata: Option<&str>,
) -> Refusal {
    let mut challenge = String::from("Bearer realm=\"mcpmux\"");
    if let Some(url) = resource_metadata {
        challenge.push_str(&format!(", resource_metadata=\"{url}\""));
    }
    if let Some((error, detail)) = error {
        let detail = detail.replace(['"', '\\'], "'");
        let key = if error == "insufficient_scope" {
            "scope"
        } else {
            "error_description"
        };
        challenge.push_str(&format!(", error=\"{error}\", {key}=\"{detail}\""));
    }
    Refusal {
        challenge: Some(challenge),
        ..refuse(status, codes::INVALID_REQUEST, message)
    }
}

impl Refusal {
    pub(super) fn from_error(status: StatusCode, error: RpcError) -> Self {
        Self {
            status,
            error: Box::new(error),
            id: None,
            omit_unknown_id: false,
            challenge: None,
        }
    }

    /// Addresses the refusal to request `id` (if known), in the form the host's version expects.
    pub(super) fn answering(mut self, id: Option<&RawValue>, headers: &HeaderMap) -> Self {
        self.id = id.map(ToOwned::to_owned);
        self.omit_unknown_id = headers
            .get(VERSION_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(Version::known)
            .is_some_and(Version::omits_unknown_error_id);
        self
    }
}

impl IntoResponse for Refusal {
    /// A JSON-RPC error body when it can be valid for the host's version: with the request's id,
    /// or without one since 2025-11-25. Older schemas allow neither a missing nor a `null` id, so
    /// then the reason goes as plain text.
    fn into_response(self) -> Response {
        let (content_type, body) = match (&self.id, self.omit_unknown_id) {
            (Some(id), _) => ("application/json", error_line(Some(id), &self.error)),
            (None, true) => ("application/json", error_line_without_id(&self.error)),
            (None, false) => (
                "text/plain; charset=utf-8",
                format!("{}\n", self.error.message),
            ),
        };
        let mut response =
            (self.status, [(header::CONTENT_TYPE, content_type)], body).into_response();
        if let Some(value) =
            (self.challenge.as_deref()).and_then(|c| axum::http::HeaderValue::from_str(c).ok())
        {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, value);
        }
        response
    }
}

/// DNS-rebinding protection: a browser `Origin` must be local (or allowed), and while listening
/// on loopback the `Host` must name loopback.
pub(super) fn check_origin(
    headers: &HeaderMap,
    allowed: &[String],
    loopback_only: bool,
) -> Result<(), Refusal> {
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or_default();
        if !(is_loopback_origin(origin) || allowed.iter().any(|o| o == origin)) {
            tracing::warn!(origin, "Refused a request from a non-local origin.");
            return Err(refuse(
                StatusCode::FORBIDDEN,
                codes::INVALID_REQUEST,
                format!("Forbidden: origin `{origin}` is not allowed"),
            ));
        }
    }
    if loopback_only {
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or_default();
        if !host.is_empty() && !is_loopback_host(host) {
            return Err(refuse(
                StatusCode::FORBIDDEN,
                codes::INVALID_REQUEST,
                format!("Forbidden: host `{host}` is not this server"),
            ));
        }
    }
    Ok(())
}

/// `MCP-Protocol-Version`, when present, must be one mcpmux speaks.
pub(super) fn check_version(headers: &HeaderMap) -> Result<(), Refusal> {
    let Some(v) = headers.get(VERSION_HEADER) else {
        return Ok(());
    };
    let v = v.to_str().unwrap_or_default();
    if Version::known(v).is_none() {
        let msg = format!(
            "Bad Request: unsupported MCP-Protocol-Version `{v}` (supported: {})",
            Version::list()
        );
        return Err(refuse(StatusCode::BAD_REQUEST, codes::INVALID_REQUEST, msg));
    }
    Ok(())
}

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
    pub(super) async fn authenticate(
        &self,
        headers: &HeaderMap,
    ) -> Result<Arc<Principal>, Refusal> {
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
            return Ok(Arc::clone(host));
        }
        let refusal = match &self.jwt {
            Some(gate) if JwtGate::looks_like_jwt(token) => match gate.verify(token).await {
                Ok(principal) => return Ok(principal),
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
