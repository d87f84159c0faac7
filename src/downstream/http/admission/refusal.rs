//! The one refusal type of the host endpoint: an HTTP status with a JSON-RPC error body, as the
//! spec's examples send them, addressed in the form the host's protocol version expects.

use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::value::RawValue;

use crate::jsonrpc::{RpcError, codes, error_line, error_line_without_id};
use crate::mcp::VERSION_HEADER;
use crate::mcp::version::Version;

/// An HTTP-level refusal, sent with a JSON-RPC error body as the spec's examples do.
#[derive(Debug)]
pub(in super::super) struct Refusal {
    status: StatusCode,
    error: Box<RpcError>,
    /// The id of the request refused, when it could be read.
    id: Option<Box<RawValue>>,
    /// Since 2025-11-25 an error without a known id omits `id`; before, JSON-RPC's `null` is used.
    omit_unknown_id: bool,
    /// The `WWW-Authenticate` challenge of a 401 or 403.
    challenge: Option<String>,
    /// Whether the connection is closed after it (a body that broke off or was too large).
    close: bool,
}

pub(in super::super) fn refuse(
    status: StatusCode,
    code: i64,
    message: impl Into<String>,
) -> Refusal {
    Refusal {
        status,
        error: Box::new(RpcError::new(code, message)),
        id: None,
        omit_unknown_id: false,
        challenge: None,
        close: false,
    }
}

/// A 401 (or 403) with a Bearer challenge: `error` (if any) and its description, and where the
/// protected resource's metadata is when mcpmux has `[server.authorization]`.
pub(super) fn challenge(
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
    pub(in super::super) fn from_error(status: StatusCode, error: RpcError) -> Self {
        Self {
            status,
            error: Box::new(error),
            id: None,
            omit_unknown_id: false,
            challenge: None,
            close: false,
        }
    }

    /// The refusal of request `id` (when it could be read).
    pub(in super::super) fn to(mut self, id: Option<&RawValue>) -> Self {
        self.id = id.map(ToOwned::to_owned);
        self
    }

    /// Closes the connection after it.
    pub(in super::super) fn closing(mut self) -> Self {
        self.close = true;
        self
    }

    /// The one way a refusal becomes a response: in the form the host's version (its
    /// `MCP-Protocol-Version` header) expects. Edge functions return a refusal with `?`; their
    /// handler calls this once.
    pub(in super::super) fn respond(mut self, headers: &HeaderMap) -> Response {
        self.omit_unknown_id = headers
            .get(VERSION_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(Version::served)
            .is_some_and(Version::omits_unknown_error_id);
        let close = self.close;
        let mut response = self.into_response();
        if close {
            (response.headers_mut()).insert(
                header::CONNECTION,
                header::HeaderValue::from_static("close"),
            );
        }
        response
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
