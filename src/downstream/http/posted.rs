//! A POST's body owned together with what the edge read of it: the message, and a stateless
//! request's envelope read in the same pass as its other params — and, for a request the headers
//! say is stateless, in the same pass as the message itself ([`OnePass`]). A request's answer
//! runs in a future of its own (it may outlive the handler, on an event stream); the future
//! takes the body and what was read of it along, so the handler is given the params as the edge
//! found them — not copied out, not read again.

use axum::body::Bytes;
use axum::http::HeaderMap;
use self_cell::self_cell;
use serde_json::value::RawValue;

use super::admission::VERSION;
use crate::downstream::service::Params;
use crate::jsonrpc::{Incoming, Message, OnePass, RpcError, codes};
use crate::mcp::envelope::{self, Declared, ReadParams};
use crate::mcp::version::Version;

/// What the edge read of a POST's body.
#[derive(Debug)]
pub(super) struct Read<'a> {
    /// The message; a request read in one pass with its params has them in [`Self::params`]
    /// only (as text, not a `RawValue`: that would take a second scan).
    pub message: Message<'a>,
    /// A request's params as sent (JSON text).
    pub params: Option<&'a str>,
    /// Whether it is a 2026-07-28 message ([`is_stateless`]).
    pub stateless: bool,
    /// A stateless request's envelope, read in one pass with its other params (the error is the
    /// host's answer).
    pub declared: Option<Result<Declared<'a>, RpcError>>,
}

self_cell!(
    /// A POST's body and what was read of it.
    pub(super) struct Posted {
        owner: Bytes,
        #[covariant]
        dependent: Read,
    }
);

impl std::fmt::Debug for Posted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.borrow_dependent().fmt(f)
    }
}

impl Posted {
    /// Reads one message (not a batch) from `body`; the error is the host's answer (HTTP 400).
    pub(super) fn read(body: Bytes, headers: &HeaderMap) -> Result<Self, RpcError> {
        Self::try_new(body, |body| {
            let text = std::str::from_utf8(body).map_err(|_| not_utf8())?;
            if stateless_by_header(headers) == Some(true) {
                if let Some(request) = OnePass::<ReadParams<'_>>::request(text) {
                    let (read, params) = request.params.unzip();
                    let declared = Declared::of(&request.method, read);
                    return Ok(Read {
                        message: Message::Request {
                            id: request.id,
                            method: request.method,
                            params: None,
                        },
                        params,
                        stateless: true,
                        declared: Some(declared),
                    });
                }
            }
            let message = Incoming::parse(text)?;
            let stateless = is_stateless(headers, &message);
            let (declared, params) = match &message {
                Message::Request { method, params, .. } => {
                    let declared = stateless.then(|| Declared::read(method, *params));
                    (declared, params.map(RawValue::get))
                }
                _ => (None, None),
            };
            Ok(Read {
                message,
                params,
                stateless,
                declared,
            })
        })
    }

    /// The request's id, method and params as sent (`None`: not a request).
    pub(super) fn request(&self) -> Option<(&RawValue, &str, Option<&str>)> {
        let read = self.borrow_dependent();
        match &read.message {
            Message::Request { id, method, .. } => Some((id, method, read.params)),
            _ => None,
        }
    }

    /// Whether the request's `_meta` was read to hold its envelope and nothing else: then it
    /// carries no trace context there (`traceparent` is no envelope member).
    pub(super) fn meta_is_envelope(&self) -> bool {
        let declared = &self.borrow_dependent().declared;
        matches!(declared, Some(Ok(declared)) if declared.served.is_some())
    }

    /// The request's method and params as its handler is given them (`None`: not a request).
    pub(super) fn handled(&self) -> Option<(&str, Params<'_>)> {
        let read = self.borrow_dependent();
        let Message::Request { method, .. } = &read.message else {
            return None;
        };
        let served = match &read.declared {
            Some(Ok(declared)) => declared.served.clone(),
            _ => None,
        };
        let params = Params {
            raw: read.params,
            read: served,
        };
        Some((method, params))
    }
}

/// What a body that is not UTF-8 is answered.
pub(super) fn not_utf8() -> RpcError {
    RpcError::new(codes::PARSE_ERROR, "Parse error: body is not UTF-8")
}

/// Whether a POST's `MCP-Protocol-Version` header makes it a stateless (2026-07-28) request
/// rather than one of the handshake era (`None`: there is no such header).
pub(super) fn stateless_by_header(headers: &HeaderMap) -> Option<bool> {
    let version = headers.get(&VERSION)?.to_str().unwrap_or_default();
    Some(Version::known(version).is_none())
}

/// Whether a POST is a stateless (2026-07-28) request rather than one of the handshake era.
pub(super) fn is_stateless(headers: &HeaderMap, message: &Message<'_>) -> bool {
    if let Some(stateless) = stateless_by_header(headers) {
        return stateless;
    }
    match message {
        Message::Request { method, params, .. } => {
            envelope::stateless_version(method, *params).is_some()
        }
        _ => false,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::jsonrpc::Members;

    const ENVELOPE: &str = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}"#;

    fn post(body: &str) -> Result<Posted, RpcError> {
        Posted::read(Bytes::from(body.to_owned()), &HeaderMap::new())
    }

    /// A POST whose `MCP-Protocol-Version` header names 2026-07-28: read in one pass.
    fn post_stateless(body: &str) -> Result<Posted, RpcError> {
        let mut headers = HeaderMap::new();
        headers.insert("mcp-protocol-version", "2026-07-28".parse().unwrap());
        Posted::read(Bytes::from(body.to_owned()), &headers)
    }

    #[test]
    fn a_stateless_request_is_handled_with_the_members_read_beside_its_envelope() {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"a__echo","arguments":{{"x":1}},{ENVELOPE}}}}}"#
        );
        // Told by its envelope (read after the message) or by its header (read with it).
        for post in [post, post_stateless] {
            let posted = post(&body).unwrap();
            assert!(posted.borrow_dependent().stateless);
            let (id, method, raw) = posted.request().unwrap();
            assert_eq!((id.get(), method), ("7", "tools/call"));
            let sent = body.split_once(r#""params":"#).unwrap().1;
            assert_eq!(raw, sent.strip_suffix('}'), "as sent");
            let (_, params) = posted.handled().unwrap();
            let served = params.read.as_ref().map(Members::to_json);
            assert_eq!(
                served.as_deref(),
                Some(r#"{"name":"a__echo","arguments":{"x":1}}"#),
                "the envelope is not served"
            );
            assert!(posted.meta_is_envelope(), "no trace context to look for");
            // A `_meta` with more than the envelope is served as sent.
            let body = body.replace("\"_meta\":{", "\"_meta\":{\"progressToken\":1,");
            let posted = post(&body).unwrap();
            let (_, params) = posted.handled().unwrap();
            assert!(params.read.is_none() && params.raw.is_some());
            assert!(!posted.meta_is_envelope());
            let traced = body.replace("\"progressToken\":1", "\"traceparent\":\"00-a-b-01\"");
            assert!(!post(&traced).unwrap().meta_is_envelope(), "{traced}");
        }
        // What one pass cannot read exactly (an escaped member name) is read in two.
        let escaped = body.replace(r#""method""#, r#""m\u0065thod""#);
        let posted = post_stateless(&escaped).unwrap();
        let (_, method, raw) = posted.request().unwrap();
        assert_eq!(method, "tools/call");
        assert!(raw.unwrap().starts_with(r#"{"name":"a__echo""#));
        assert!(posted.handled().unwrap().1.read.is_some());
    }

    #[test]
    fn a_handshake_message_is_read_without_an_envelope() {
        let posted = post(r#"{"jsonrpc":"2.0","id":"a","method":"tools/list"}"#).unwrap();
        let read = posted.borrow_dependent();
        assert!(!read.stateless && read.declared.is_none());
        assert!(!posted.meta_is_envelope());
        let (_, params) = posted.handled().unwrap();
        assert!(params.raw.is_none() && params.read.is_none());
        let note = post(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).unwrap();
        assert!(note.request().is_none() && note.handled().is_none());
    }

    #[test]
    fn what_cannot_be_read_is_named() {
        let not_utf8 = Posted::read(Bytes::from_static(b"{\"a\":\"\xff\"}"), &HeaderMap::new());
        assert_eq!(not_utf8.unwrap_err().code, codes::PARSE_ERROR);
        let broken = post(r#"{"jsonrpc":"2.0","id":1,"#).unwrap_err();
        assert_eq!(broken.code, codes::PARSE_ERROR);
        // A stateless request without its required envelope fields is read; its error is
        // answered after the headers' version check, in the revision's order.
        let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
        for post in [post, post_stateless] {
            let posted = post(body).unwrap();
            let declared = posted.borrow_dependent().declared.as_ref().unwrap();
            assert_eq!(declared.as_ref().unwrap_err().code, codes::INVALID_PARAMS);
        }
        // Without params, or with params that are not an object, likewise.
        for params in ["", r#","params":[]"#] {
            let body = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/list"{params}}}"#);
            let posted = post_stateless(&body).unwrap();
            let declared = posted.borrow_dependent().declared.as_ref().unwrap();
            assert_eq!(declared.as_ref().unwrap_err().code, codes::INVALID_PARAMS);
        }
        // A malformed body is named as the full parse names it.
        let broken = post_stateless(r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"#);
        assert_eq!(broken.unwrap_err().code, codes::PARSE_ERROR);
    }
}
