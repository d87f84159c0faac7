//! What every request must pass before its credential matters: a local (or allowed) `Origin`,
//! a loopback `Host` while listening on loopback (DNS-rebinding protection), and an
//! `MCP-Protocol-Version` mcpmux speaks.

use axum::http::{HeaderMap, StatusCode, header};

use super::refusal::{Refusal, refuse};
use crate::jsonrpc::codes;
use crate::loopback::{is_loopback_host, is_loopback_origin};
use crate::mcp::version::Version;

pub(in super::super) const VERSION_HEADER: &str = "mcp-protocol-version";

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
pub(in super::super) fn check_version(headers: &HeaderMap) -> Result<(), Refusal> {
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
