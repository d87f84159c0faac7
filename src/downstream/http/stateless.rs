//! The 2026-07-28 era on the same endpoint: which era a POST belongs to, and the stateless
//! request — its envelope and the headers that mirror its body checked in the revision's order,
//! then served with no session (none is minted, a sent `Mcp-Session-Id` is ignored).
//!
//! The era is the request's: an `MCP-Protocol-Version` that is not a handshake revision, or a
//! `params._meta` envelope naming a version that is not one, makes it a stateless request
//! (which an unknown version then fails with `-32022`); anything else, `initialize` first of
//! all, is the handshake era and goes on as before.

use std::sync::Arc;

use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::value::RawValue;

use super::admission::{Admitted, Refusal, VERSION_HEADER, refuse};
use super::posted::{Posted, Read};
use super::{AppState, accepts::Accepts, answer};
use crate::downstream::service::Who;
use crate::downstream::session::{ClientInfo, HostInfo};
use crate::jsonrpc::{Message, RpcError, codes};
use crate::mcp::envelope::{self, Declared, Envelope, METHOD_HEADER, NAME_HEADER};
use crate::mcp::method::Method;
use crate::telemetry::otel::TraceParent;

/// The request headers the stateless edge reads, found in one pass over the request's few
/// headers (a lookup by name hashes the name, once for each header looked up): the three that
/// mirror the body, each with how many times it was sent, and `Accept` and the trace context.
/// A header sent more than once is taken at its first value, as a lookup by name would take it.
#[derive(Default)]
struct Sent<'h> {
    /// `MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`.
    mirrored: [(Option<&'h HeaderValue>, usize); 3],
    accept: Option<&'h HeaderValue>,
    traceparent: Option<&'h HeaderValue>,
    tracestate: Option<&'h HeaderValue>,
}

/// The mirroring headers' names, in [`Sent::mirrored`]'s order.
const MIRRORED: [&str; 3] = [VERSION_HEADER, METHOD_HEADER, NAME_HEADER];

impl<'h> Sent<'h> {
    fn of(headers: &'h HeaderMap) -> Self {
        let mut sent = Self::default();
        for (name, value) in headers {
            let first = |slot: &mut Option<&'h HeaderValue>| {
                slot.get_or_insert(value);
            };
            // A match on the text: one comparison of lengths, then of bytes, per header.
            match name.as_str() {
                "accept" => first(&mut sent.accept),
                "traceparent" => first(&mut sent.traceparent),
                "tracestate" => first(&mut sent.tracestate),
                VERSION_HEADER => mirror(&mut sent.mirrored[0], value),
                METHOD_HEADER => mirror(&mut sent.mirrored[1], value),
                NAME_HEADER => mirror(&mut sent.mirrored[2], value),
                _ => {}
            }
        }
        sent
    }
}

/// Counts a mirroring header's value, keeping the first.
fn mirror<'h>(slot: &mut (Option<&'h HeaderValue>, usize), value: &'h HeaderValue) {
    slot.0.get_or_insert(value);
    slot.1 += 1;
}

/// Serves one stateless POST.
pub(super) async fn post(
    state: &AppState,
    admitted: Admitted,
    headers: &HeaderMap,
    mut posted: Posted,
) -> Result<Response, Refusal> {
    match &posted.borrow_dependent().message {
        Message::Request { .. } => {}
        // No client notification is defined for this revision over HTTP; one is taken and
        // dropped, as the transport says a server that accepts it does.
        Message::Notification { .. } => return Ok(StatusCode::ACCEPTED.into_response()),
        Message::Response { .. } | Message::Error { .. } => {
            return Err(refuse(
                StatusCode::BAD_REQUEST,
                codes::INVALID_REQUEST,
                "Invalid request: a 2026-07-28 client sends no responses (there are no server requests to answer)",
            ));
        }
    }
    let sent = Sent::of(headers);
    let checked = posted
        .with_dependent_mut(|body, read| check(state, (&admitted, headers, &sent), body, read));
    let Some((id, _, params)) = posted.request() else {
        return Ok(StatusCode::ACCEPTED.into_response());
    };
    let refused =
        |status: StatusCode, error: RpcError| Refusal::from_error(status, error).to(Some(id));
    let (envelope, listens) = checked.map_err(|(status, error)| refused(status, error))?;
    let accepts = Accepts::of_value(sent.accept);
    let host = HostInfo {
        version: envelope.version,
        capabilities: envelope.capabilities,
        // Who a session's host is shows in status; a stateless request is no session, and its
        // `clientInfo` is only checked (its size, with the envelope).
        client_info: ClientInfo::default(),
        request_log_level: envelope.log_level,
    };
    if listens {
        return listen(state, (id, params), (host, admitted), accepts)
            .await
            .map_err(|(status, error)| refused(status, error));
    }
    if !accepts.json && !accepts.stream {
        let error = RpcError::new(
            codes::INVALID_REQUEST,
            "Not Acceptable: a request's Accept must include application/json and text/event-stream",
        );
        return Err(refused(StatusCode::NOT_ACCEPTABLE, error));
    }
    let who = Who::Stateless {
        host: Arc::new(host),
        access: Arc::new(admitted.access),
    };
    let service = Arc::clone(&state.service);
    let trace = TraceParent::from_values(sent.traceparent, sent.tracestate);
    // An answer on an event stream comes `unbuffered`, as every request's stream does.
    Ok(answer(service, (who, trace), posted, accepts, status_of).await)
}

/// A stateless request's envelope and the headers that mirror its body, checked in the
/// revision's order, and whether its method is served: its envelope and whether it is
/// `subscriptions/listen`, or the refusal's status and error.
fn check(
    state: &AppState,
    (admitted, headers, sent): (&Admitted, &HeaderMap, &Sent<'_>),
    body: &Bytes,
    read: &mut Read<'_>,
) -> Result<(Envelope, bool), (StatusCode, RpcError)> {
    let bad = |error| (StatusCode::BAD_REQUEST, error);
    let Read {
        message: Message::Request { method, .. },
        params,
        declared: Some(declared),
        ..
    } = read
    else {
        // Never: a stateless request's envelope is read with it.
        return Err(bad(RpcError::invalid_params("Invalid params: no envelope")));
    };
    let declared = declared.as_ref().map_err(|error| bad(error.clone()))?;
    let (method, params) = (&**method, *params);
    check_headers(sent, declared, method).map_err(bad)?;
    let listens = method == Method::Listen.as_str();
    // A call's capabilities are kept as a part of its body, which it holds anyway while it is
    // served; a listen stream's are copied (it may stay open for hours, its body long unused).
    static NOWHERE: Bytes = Bytes::new();
    let envelope = (declared.accept(if listens { &NOWHERE } else { body })).map_err(bad)?;
    if !state.service.serves(method, envelope.version) {
        let error = RpcError::method_not_found(method);
        return Err((StatusCode::NOT_FOUND, error));
    }
    if method == Method::ToolsCall.as_str() {
        let sent = |name: &str| -> Vec<&str> {
            (headers.get_all(name).iter())
                .map(|v| v.to_str().unwrap_or("\u{0}"))
                .collect()
        };
        let profile = admitted.access.profile.as_deref();
        // The name the envelope's one pass found (a call's tool).
        let tool = declared.name.as_ref().map(|(_, name)| &**name);
        (state.service)
            .check_param_headers(profile, (tool, params), sent)
            .map_err(bad)?;
    }
    Ok((envelope, listens))
}

/// `subscriptions/listen`: an event stream of the change notifications the host opted in to,
/// kept alive, for as long as the host reads it and the daemon runs.
async fn listen(
    state: &AppState,
    (id, params): (&RawValue, Option<&str>),
    (host, admitted): (HostInfo, Admitted),
    accepts: Accepts,
) -> Result<Response, (StatusCode, RpcError)> {
    if !accepts.stream {
        let error = RpcError::new(
            codes::INVALID_REQUEST,
            "Not Acceptable: subscriptions/listen is answered with text/event-stream",
        );
        return Err((StatusCode::NOT_ACCEPTABLE, error));
    }
    match state
        .service
        .listen(id, params, (host, admitted.access))
        .await
    {
        Ok(messages) => {
            let events = futures_util::StreamExt::map(messages, super::event);
            Ok(super::unbuffered(super::sse(events)))
        }
        // A caller that holds as many streams as it may: 429, as for too many sessions.
        Err(error) if error.code == codes::BUSY => Err((StatusCode::TOO_MANY_REQUESTS, error)),
        Err(error) => Err((StatusCode::BAD_REQUEST, error)),
    }
}

/// The headers that mirror the body must agree with it (`-32020`): `MCP-Protocol-Version` with
/// the envelope's version, `Mcp-Method` with the method, `Mcp-Name` with the name or URI of the
/// methods that carry one. Each must be present, and once.
fn check_headers(sent: &Sent<'_>, declared: &Declared<'_>, method: &str) -> Result<(), RpcError> {
    let one = |i: usize| -> Result<Option<&HeaderValue>, RpcError> {
        let (name, (value, count)) = (MIRRORED[i], sent.mirrored[i]);
        if count > 1 {
            return Err(mismatch(format!(
                "the {name} header is sent more than once"
            )));
        }
        Ok(value)
    };
    let text = |i: usize, value: &HeaderValue| -> Result<String, RpcError> {
        let name = MIRRORED[i];
        (value.to_str().map(str::to_owned))
            .map_err(|_| mismatch(format!("the {name} header is not visible ASCII")))
    };
    let matches = |i: usize, body: &str| -> Result<(), RpcError> {
        let name = MIRRORED[i];
        match one(i)? {
            None => Err(mismatch(format!(
                "the {name} header is missing (it must repeat `{body}`)"
            ))),
            Some(value) if repeats(value, body) => Ok(()),
            Some(value) => {
                let value = text(i, value)?;
                Err(mismatch(format!(
                    "the {name} header `{value}` does not match `{body}` in the body"
                )))
            }
        }
    };
    matches(0, &declared.version)?;
    matches(1, method)?;
    let Some((key, body)) = &declared.name else {
        return Ok(());
    };
    let Some(value) = one(2)? else {
        return Err(mismatch(format!(
            "the {NAME_HEADER} header is missing (it must repeat params.{key})"
        )));
    };
    // A plain name, as most are (one that looks encoded is compared with what it decodes to).
    if repeats(value, body) && !body.starts_with("=?") {
        return Ok(());
    }
    let value = text(2, value)?;
    match envelope::header_carries(&value, body) {
        true => Ok(()),
        false => Err(mismatch(format!(
            "the {NAME_HEADER} header `{value}` does not match params.{key} `{body}`"
        ))),
    }
}

/// Whether a header value is `body`'s bytes, all ASCII: what `to_str` would accept and find
/// equal (a header value from the wire holds no control characters), without its pass over
/// every byte first.
fn repeats(value: &HeaderValue, body: &str) -> bool {
    value.as_bytes() == body.as_bytes() && body.is_ascii()
}

/// The HTTP status of a stateless request's answer, from the error code the host got: 400 for
/// the errors the revision sends with it (a capability the request did not declare), else 200.
fn status_of(error: Option<i64>) -> StatusCode {
    match error {
        Some(codes::MISSING_CLIENT_CAPABILITY) => StatusCode::BAD_REQUEST,
        _ => StatusCode::OK,
    }
}

fn mismatch(why: String) -> RpcError {
    RpcError::new(codes::HEADER_MISMATCH, format!("Header mismatch: {why}"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::downstream::http::posted::is_stateless;
    use crate::jsonrpc::{Incoming, raw};

    #[test]
    fn only_a_missing_capability_is_answered_400() {
        assert_eq!(
            status_of(Some(codes::MISSING_CLIENT_CAPABILITY)),
            StatusCode::BAD_REQUEST
        );
        assert_eq!(status_of(Some(codes::INVALID_PARAMS)), StatusCode::OK);
        assert_eq!(status_of(None), StatusCode::OK);
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_static(value));
        }
        map
    }

    #[test]
    fn the_era_is_the_requests() {
        let call = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
        let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25"}}"#;
        let (call, init) = (
            Incoming::parse(call).unwrap(),
            Incoming::parse(init).unwrap(),
        );
        let modern = headers(&[(VERSION_HEADER, "2026-07-28")]);
        let legacy = headers(&[(VERSION_HEADER, "2025-11-25")]);
        let unknown = headers(&[(VERSION_HEADER, "1999-01-01")]);
        assert!(is_stateless(&modern, &call));
        assert!(
            is_stateless(&unknown, &init),
            "an unknown version is the new era's to refuse"
        );
        assert!(!is_stateless(&legacy, &init));
        assert!(!is_stateless(&HeaderMap::new(), &init));
        assert!(is_stateless(&HeaderMap::new(), &call), "the envelope alone");
    }

    #[test]
    fn one_pass_finds_the_headers_a_lookup_would() {
        let mut sent = headers(&[
            ("accept", "application/json, text/event-stream"),
            (
                "traceparent",
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            ),
            (METHOD_HEADER, "tools/call"),
            (METHOD_HEADER, "tools/list"),
            ("x-other", "1"),
        ]);
        sent.append("accept", HeaderValue::from_static("*/*"));
        let found = Sent::of(&sent);
        assert_eq!(found.accept, sent.get("accept"), "the first value");
        assert_eq!(found.traceparent, sent.get("traceparent"));
        assert_eq!(found.tracestate, None);
        assert_eq!(found.mirrored[1], (sent.get(METHOD_HEADER), 2));
        assert_eq!(found.mirrored[0], (None, 0));
        assert_eq!(found.mirrored[2], (None, 0));
        let accepts = Accepts::of_value(found.accept);
        assert_eq!(accepts, Accepts::of(&sent));
        let trace = TraceParent::from_values(found.traceparent, found.tracestate);
        assert_eq!(trace, TraceParent::from_headers(&sent));
    }

    #[test]
    fn headers_must_mirror_the_body() {
        const META: &str = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}"#;
        let declared = |method: &str, params: &str| {
            // The declared envelope borrows its params: they live as long as the test.
            let params: &'static RawValue = Box::leak(raw(format!("{{{params},{META}}}")));
            Declared::read(method, Some(params)).unwrap()
        };
        let call = declared("tools/call", r#""name":"a__echo""#);
        let good = headers(&[
            (VERSION_HEADER, "2026-07-28"),
            (METHOD_HEADER, "tools/call"),
            (NAME_HEADER, "a__echo"),
        ]);
        assert!(check_headers(&Sent::of(&good), &call, "tools/call").is_ok());
        let cases = [
            headers(&[(METHOD_HEADER, "tools/call"), (NAME_HEADER, "a__echo")]),
            headers(&[
                (VERSION_HEADER, "2026-07-28"),
                (METHOD_HEADER, "tools/list"),
                (NAME_HEADER, "a__echo"),
            ]),
            headers(&[
                (VERSION_HEADER, "2026-07-28"),
                (METHOD_HEADER, "tools/call"),
            ]),
            headers(&[
                (VERSION_HEADER, "2026-07-28"),
                (METHOD_HEADER, "tools/call"),
                (NAME_HEADER, "b__echo"),
            ]),
            headers(&[
                (VERSION_HEADER, "2026-07-28"),
                (VERSION_HEADER, "2026-07-28"),
                (METHOD_HEADER, "tools/call"),
                (NAME_HEADER, "a__echo"),
            ]),
        ];
        for (i, case) in cases.iter().enumerate() {
            let error = check_headers(&Sent::of(case), &call, "tools/call").unwrap_err();
            assert_eq!(error.code, codes::HEADER_MISMATCH, "case {i}: {error}");
        }
        let encoded = headers(&[
            (VERSION_HEADER, "2026-07-28"),
            (METHOD_HEADER, "resources/read"),
            (NAME_HEADER, "=?base64?YSt0ZXN0Oi8vw6k=?="),
        ]);
        let read = declared("resources/read", r#""uri":"a+test://é""#);
        assert!(check_headers(&Sent::of(&encoded), &read, "resources/read").is_ok());
        // The same bytes that are not ASCII are not a plain header: they must be encoded.
        let mut raw_bytes = encoded.clone();
        let bytes = HeaderValue::from_bytes("a+test://é".as_bytes()).unwrap();
        raw_bytes.insert(NAME_HEADER, bytes);
        let error = check_headers(&Sent::of(&raw_bytes), &read, "resources/read").unwrap_err();
        assert!(error.message.contains("not visible ASCII"), "{error}");
        // A body value that looks encoded is compared with what its header decodes to.
        let looks_encoded = declared("tools/call", r#""name":"=?base64?YQ==?=""#);
        let same_text = headers(&[
            (VERSION_HEADER, "2026-07-28"),
            (METHOD_HEADER, "tools/call"),
            (NAME_HEADER, "=?base64?YQ==?="),
        ]);
        let error = check_headers(&Sent::of(&same_text), &looks_encoded, "tools/call").unwrap_err();
        assert_eq!(error.code, codes::HEADER_MISMATCH, "{error}");
    }
}
