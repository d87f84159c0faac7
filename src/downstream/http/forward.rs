//! A request bound to another replica, forwarded one hop to it (`[cluster]`; a layer only
//! then). What names its owner: a session id (`Mcp-Session-Id`, the legacy `sessionId`), the
//! `requestState` of a stateless retry that continues a parked call, a sign-in link or the
//! `state` of its OAuth redirect. The owner gets the host's request as it was sent (its
//! credential admits it there as anywhere) plus [`FORWARDED`], this replica's signed mark: a
//! marked request is never forwarded again, and a mark no replica signed is refused.
//!
//! When the owner cannot be reached, the request is served here: the session, parked call or
//! sign-in is not here either, so the host gets what it gets for one that ended (`404` and a
//! new `initialize` for a session, the `requestState` error for a parked call).

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::SESSION;
use crate::cluster::{Cluster, FORWARDED, owner_of};
use crate::downstream::signin::CALLBACK_PATH;

const MARK: HeaderName = HeaderName::from_static(FORWARDED);

/// What the forwarding layer needs: this replica, and how much of a body it reads to look for a
/// `requestState` (`server.max_body_bytes` at start; the handler enforces the running limit).
pub(super) struct Forwarding {
    pub cluster: Arc<Cluster>,
    pub max_body_bytes: usize,
}

/// The layer: serves here what is this replica's (or names no replica), forwards the rest.
pub(super) async fn forward(
    State(forwarding): State<Arc<Forwarding>>,
    request: Request,
    next: Next,
) -> Response {
    let cluster = &forwarding.cluster;
    if let Some(mark) = request.headers().get(&MARK) {
        let checked = mark.to_str().map_err(|_| "it is malformed");
        return match checked.and_then(|m| cluster.check(m)) {
            Ok(_) => next.run(request).await,
            Err(why) => (
                StatusCode::FORBIDDEN,
                format!("Forbidden: the {FORWARDED} header is refused ({why}); it is for mcpmux replicas only"),
            )
                .into_response(),
        };
    }
    let owner = named_owner(&request).map(str::to_owned);
    let (owner, request) = match owner {
        Some(owner) => (Some(owner), request),
        None if carries_state(&request) => {
            let (parts, body) = request.into_parts();
            let bytes = match read(body, forwarding.max_body_bytes).await {
                Ok(bytes) => bytes,
                Err(refused) => return refused,
            };
            let owner = state_owner(&bytes).map(str::to_owned);
            (owner, Request::from_parts(parts, Body::from(bytes)))
        }
        None => (None, request),
    };
    let Some(owner) = owner.filter(|o| **o != *cluster.replica) else {
        return next.run(request).await;
    };
    let Some(base) = cluster.peer(&owner) else {
        tracing::debug!(%owner, "A request names a replica this config does not reach; served here.");
        return next.run(request).await;
    };
    let (parts, body) = request.into_parts();
    let bytes = match read(body, forwarding.max_body_bytes).await {
        Ok(bytes) => bytes,
        Err(refused) => return refused,
    };
    match send(cluster, &base, &parts, bytes.clone()).await {
        Ok(response) => {
            tracing::debug!(%owner, path = parts.uri.path(), "Forwarded a request to the replica that owns it.");
            response
        }
        Err(e) => {
            tracing::info!(%owner, error = %e, "The replica owning a request could not be reached; served here.");
            next.run(Request::from_parts(parts, Body::from(bytes)))
                .await
        }
    }
}

/// The body (one already read is taken as it is), or 413 past `limit`.
async fn read(body: Body, limit: usize) -> Result<Bytes, Response> {
    axum::body::to_bytes(body, limit).await.map_err(|_| {
        (
            StatusCode::PAYLOAD_TOO_LARGE,
            "Payload Too Large: the body exceeds server.max_body_bytes, or broke off",
        )
            .into_response()
    })
}

/// The replica a request's session id, legacy `sessionId`, sign-in link or redirect `state`
/// names.
fn named_owner(request: &Request) -> Option<&str> {
    if let Some(id) = (request.headers().get(&SESSION)).and_then(|v| v.to_str().ok()) {
        return owner_of(id);
    }
    let path = request.uri().path();
    if let Some(link) = path.strip_prefix("/signin/") {
        return owner_of(link);
    }
    let param = match path {
        "/messages" => "sessionId",
        CALLBACK_PATH => "state",
        _ => return None,
    };
    let query = request.uri().query()?;
    let value = (query.split('&')).find_map(|pair| pair.strip_prefix(param)?.strip_prefix('='))?;
    owner_of(value)
}

/// Whether a request may carry a `requestState` to look for: a POST to `/mcp` with no session.
fn carries_state(request: &Request) -> bool {
    request.method() == Method::POST && request.uri().path().starts_with("/mcp")
}

/// The replica the `requestState` in a JSON body names, found without parsing the body (a key
/// inside a string would be escaped, so a match is the key itself).
fn state_owner(body: &[u8]) -> Option<&str> {
    const KEY: &[u8] = b"\"requestState\"";
    let at = memchr::memmem::find(body, KEY)? + KEY.len();
    let rest = &body[at..];
    let rest = rest.trim_ascii_start().strip_prefix(b":")?;
    let rest = rest.trim_ascii_start().strip_prefix(b"\"")?;
    let end = memchr::memchr(b'"', rest)?;
    owner_of(std::str::from_utf8(&rest[..end]).ok()?)
}

/// Headers not passed on: the connection's own, and what the client sets anew.
fn hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "host"
            | "connection"
            | "keep-alive"
            | "proxy-connection"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
            | "content-length"
    ) || *name == MARK
}

/// Sends the request to the replica at `base` and streams its answer back; an error only when
/// the owner could not be reached (nothing was answered).
async fn send(
    cluster: &Cluster,
    base: &url::Url,
    parts: &axum::http::request::Parts,
    body: Bytes,
) -> Result<Response, reqwest::Error> {
    let mut url = base.clone();
    url.set_path(parts.uri.path());
    url.set_query(parts.uri.query());
    let mut headers = HeaderMap::with_capacity(parts.headers.len() + 1);
    for (name, value) in parts.headers.iter().filter(|(n, _)| !hop_by_hop(n)) {
        headers.append(name.clone(), value.clone());
    }
    if let Ok(mark) = HeaderValue::from_str(&cluster.stamp()) {
        headers.insert(MARK, mark);
    }
    let answer = (cluster.client)
        .request(parts.method.clone(), url)
        .headers(headers)
        .body(body)
        .send()
        .await?;
    let status = StatusCode::from_u16(answer.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let mut kept = HeaderMap::with_capacity(answer.headers().len());
    for (name, value) in answer.headers().iter().filter(|(n, _)| !hop_by_hop(n)) {
        kept.append(name.clone(), value.clone());
    }
    let mut response = Response::new(Body::from_stream(answer.bytes_stream()));
    *response.status_mut() = status;
    *response.headers_mut() = kept;
    if !response.headers().contains_key(header::CONTENT_TYPE) {
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    }
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_requests_owner_is_read_from_where_it_names_one() {
        let body = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","requestState" : "b.01abc"}}"#;
        assert_eq!(state_owner(body), Some("b"));
        assert_eq!(state_owner(br#"{"requestState":"01abc"}"#), None);
        let quoted = br#"{"arguments":{"text":"\"requestState\":\"b.x\""}}"#;
        assert_eq!(state_owner(quoted), None);
        let request = |uri: &str| {
            Request::builder()
                .uri(uri)
                .body(Body::empty())
                .unwrap_or_default()
        };
        assert_eq!(
            named_owner(&request("/messages?sessionId=c.12ab")),
            Some("c")
        );
        assert_eq!(named_owner(&request("/signin/a.xyz")), Some("a"));
        let callback = format!("{CALLBACK_PATH}?code=1&state=b.s");
        assert_eq!(named_owner(&request(&callback)), Some("b"));
        assert_eq!(named_owner(&request("/mcp")), None);
        let mut with_session = request("/mcp");
        (with_session.headers_mut()).insert(SESSION, HeaderValue::from_static("a.f00"));
        assert_eq!(named_owner(&with_session), Some("a"));
    }
}
