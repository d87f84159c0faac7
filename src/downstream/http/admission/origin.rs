//! What every request must pass before its credential matters: a local (or allowed) `Origin`,
//! a loopback `Host` while listening on loopback (DNS-rebinding protection), and an
//! `MCP-Protocol-Version` mcpmux speaks.

use axum::http::{HeaderMap, StatusCode, header};

use super::VERSION;
use super::refusal::{Refusal, refuse};
use crate::jsonrpc::codes;
use crate::loopback::{is_loopback_host, is_loopback_origin};
use crate::mcp::version::Version;

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
        if host.is_empty() {
            // HTTP/1.0 allows leaving it out; a request that does cannot show it is for this
            // machine (the admin API refuses it too).
            return Err(refuse(
                StatusCode::FORBIDDEN,
                codes::INVALID_REQUEST,
                "Forbidden: the request names no Host; send the Host header (e.g. Host: 127.0.0.1)",
            ));
        }
        if !is_loopback_host(host) {
            return Err(refuse(
                StatusCode::FORBIDDEN,
                codes::INVALID_REQUEST,
                format!("Forbidden: host `{host}` is not this server"),
            ));
        }
    }
    Ok(())
}

/// The `MCP-Protocol-Version` of a GET or DELETE, when present, must be a handshake revision:
/// the session's stream and its end belong to that era. 2026-07-28 has neither (405, as the
/// transport says); a revision mcpmux does not serve is `-32022`.
pub(in super::super) fn check_version(headers: &HeaderMap) -> Result<(), Refusal> {
    let Some(v) = headers.get(&VERSION) else {
        return Ok(());
    };
    let v = v.to_str().unwrap_or_default();
    match Version::served(v) {
        Some(version) if version.is_modern() => Err(refuse(
            StatusCode::METHOD_NOT_ALLOWED,
            codes::INVALID_REQUEST,
            format!("Method Not Allowed: MCP {version} has no session stream; POST each request"),
        )),
        Some(_) => Ok(()),
        None => Err(Refusal::from_error(
            StatusCode::BAD_REQUEST,
            crate::mcp::envelope::unsupported(v),
        )),
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn headers(pairs: &[(header::HeaderName, &'static str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.insert(name.clone(), HeaderValue::from_static(value));
        }
        headers
    }

    #[test]
    fn on_loopback_the_host_must_be_named_and_be_loopback() {
        let local = headers(&[(header::HOST, "127.0.0.1:7332")]);
        assert!(check_origin(&local, &[], true).is_ok());
        assert!(check_origin(&headers(&[(header::HOST, "evil.example")]), &[], true).is_err());
        assert!(
            check_origin(&HeaderMap::new(), &[], true).is_err(),
            "no Host"
        );
        // Beyond loopback, hosts reach it by whatever name they know, or none.
        assert!(check_origin(&HeaderMap::new(), &[], false).is_ok());
    }

    #[test]
    fn a_browser_origin_must_be_local_or_allowed() {
        let from = |origin| headers(&[(header::HOST, "localhost"), (header::ORIGIN, origin)]);
        assert!(check_origin(&from("http://localhost:3000"), &[], true).is_ok());
        assert!(check_origin(&from("https://evil.example"), &[], true).is_err());
        let allowed = ["https://app.example".to_owned()];
        assert!(check_origin(&from("https://app.example"), &allowed, true).is_ok());
    }
}
