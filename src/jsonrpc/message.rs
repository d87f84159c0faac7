//! Envelopes: parse one message borrowing its payloads; build lines around raw payloads.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::RpcError;

/// One JSON-RPC message as received, with its payloads left unparsed.
#[derive(Debug, Deserialize)]
pub struct Incoming<'a> {
    #[serde(borrow, default)]
    jsonrpc: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "present")]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    method: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    params: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    result: Option<&'a RawValue>,
    /// `"error": null` beside a result (some libraries write it) reads as no error.
    #[serde(borrow, default)]
    error: Option<&'a RawValue>,
}

/// Keeps `"id": null` (or `"result": null`) as `Some(null)`, so it is told apart from a missing
/// member: a response whose result is `null` is still a response.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

/// What a message is, once checked against JSON-RPC 2.0.
#[derive(Debug)]
pub enum Message<'a> {
    Request {
        id: &'a RawValue,
        method: Cow<'a, str>,
        params: Option<&'a RawValue>,
    },
    Notification {
        method: Cow<'a, str>,
        params: Option<&'a RawValue>,
    },
    Response {
        id: &'a RawValue,
        result: &'a RawValue,
    },
    Error {
        id: &'a RawValue,
        error: &'a RawValue,
    },
}

impl<'a> Incoming<'a> {
    /// Parses one message. The error is what to answer the sender (-32700 / -32600).
    pub fn parse(text: &'a str) -> Result<Message<'a>, RpcError> {
        let msg: Incoming<'a> = serde_json::from_str(text).map_err(|e| {
            if e.is_data() {
                RpcError::new(
                    super::codes::INVALID_REQUEST,
                    format!("Invalid request: {e}"),
                )
            } else {
                RpcError::new(super::codes::PARSE_ERROR, format!("Parse error: {e}"))
            }
        })?;
        msg.classify()
    }

    fn classify(self) -> Result<Message<'a>, RpcError> {
        let invalid = |why: &str| {
            RpcError::new(
                super::codes::INVALID_REQUEST,
                format!("Invalid request: {why}"),
            )
        };
        if self.jsonrpc.as_deref() != Some("2.0") {
            return Err(invalid("\"jsonrpc\" must be \"2.0\""));
        }
        if let Some(id) = self.id {
            if !valid_id(id) {
                return Err(invalid("\"id\" must be a string or a number"));
            }
        }
        match (self.id, self.method, self.result, self.error) {
            (Some(id), Some(method), None, None) => Ok(Message::Request {
                id,
                method,
                params: self.params,
            }),
            (None, Some(method), None, None) => Ok(Message::Notification {
                method,
                params: self.params,
            }),
            (Some(id), None, Some(result), None) => Ok(Message::Response { id, result }),
            (Some(id), None, None, Some(error)) => Ok(Message::Error { id, error }),
            _ => Err(invalid("not a request, notification or response")),
        }
    }
}

/// One received message, owned: what a transport hands its connection, parsed once where it
/// was read (a child's stdout line, an HTTP answer, an event).
#[derive(Debug)]
pub enum Received {
    Request {
        id: Box<RawValue>,
        method: String,
        params: Option<Box<RawValue>>,
    },
    Notification {
        method: String,
        params: Option<Box<RawValue>>,
    },
    Response {
        id: Box<RawValue>,
        result: Box<RawValue>,
    },
    Error {
        id: Box<RawValue>,
        error: Box<RawValue>,
    },
}

impl Received {
    /// Parses one message ([`Incoming::parse`]) and keeps it.
    pub fn parse(text: &str) -> Result<Self, RpcError> {
        Incoming::parse(text).map(Self::from)
    }

    /// The id of an answer (a response or an error), as JSON text.
    pub fn answer_id(&self) -> Option<&RawValue> {
        match self {
            Self::Response { id, .. } | Self::Error { id, .. } => Some(id),
            Self::Request { .. } | Self::Notification { .. } => None,
        }
    }
}

impl From<Message<'_>> for Received {
    fn from(message: Message<'_>) -> Self {
        match message {
            Message::Request { id, method, params } => Self::Request {
                id: id.to_owned(),
                method: method.into_owned(),
                params: params.map(ToOwned::to_owned),
            },
            Message::Notification { method, params } => Self::Notification {
                method: method.into_owned(),
                params: params.map(ToOwned::to_owned),
            },
            Message::Response { id, result } => Self::Response {
                id: id.to_owned(),
                result: result.to_owned(),
            },
            Message::Error { id, error } => Self::Error {
                id: id.to_owned(),
                error: error.to_owned(),
            },
        }
    }
}

pub(super) fn valid_id(id: &RawValue) -> bool {
    matches!(id.get().as_bytes().first(), Some(b'"' | b'-' | b'0'..=b'9'))
}

/// `{"jsonrpc":"2.0","id":<id>,"result":<result>}`
pub fn response_line(id: &RawValue, result: &RawValue) -> String {
    let mut out = String::with_capacity(40 + id.get().len() + result.get().len());
    out.push_str(r#"{"jsonrpc":"2.0","id":"#);
    out.push_str(id.get());
    out.push_str(r#","result":"#);
    out.push_str(result.get());
    out.push('}');
    out
}

/// `{"jsonrpc":"2.0","id":<id or null>,"error":{…}}`
pub fn error_line(id: Option<&RawValue>, error: &RpcError) -> String {
    raw_error_line(id, &serialize(error))
}

/// An error response to a message whose id could not be read, as MCP 2025-11-25 writes it
/// (`id` omitted rather than `null`).
pub fn error_line_without_id(error: &RpcError) -> String {
    format!(r#"{{"jsonrpc":"2.0","error":{}}}"#, serialize(error))
}

/// An error response around an error object that is already JSON (e.g. an upstream's, passed through).
pub fn raw_error_line(id: Option<&RawValue>, error: &str) -> String {
    let id = id.map_or("null", RawValue::get);
    let mut out = String::with_capacity(40 + id.len() + error.len());
    out.push_str(r#"{"jsonrpc":"2.0","id":"#);
    out.push_str(id);
    out.push_str(r#","error":"#);
    out.push_str(error);
    out.push('}');
    out
}

/// `{"jsonrpc":"2.0","id":<n>,"method":…,"params":…}` with one of our own numeric ids.
pub fn request_line(id: u64, method: &str, params: Option<&str>) -> String {
    request_line_raw(&id.to_string(), method, params)
}

/// A request under an id that is already JSON text.
pub fn request_line_raw(id: &str, method: &str, params: Option<&str>) -> String {
    envelope(Some(id), method, params)
}

/// `{"jsonrpc":"2.0","method":…,"params":…}`
pub fn notification_line(method: &str, params: Option<&str>) -> String {
    envelope(None, method, params)
}

/// A request (with `id`) or a notification (without) around raw params.
fn envelope(id: Option<&str>, method: &str, params: Option<&str>) -> String {
    let len = id.map_or(0, str::len) + method.len() + params.map_or(0, str::len);
    let mut out = String::with_capacity(64 + len);
    out.push_str(r#"{"jsonrpc":"2.0","#);
    if let Some(id) = id {
        out.push_str(r#""id":"#);
        out.push_str(id);
        out.push(',');
    }
    out.push_str(r#""method":"#);
    out.push_str(&serialize(method));
    if let Some(params) = params {
        out.push_str(r#","params":"#);
        out.push_str(params);
    }
    out.push('}');
    out
}

/// Serializes a value we built ourselves; these types cannot fail to serialize.
pub(crate) fn serialize<T: serde::Serialize + ?Sized>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "null".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_each_kind() {
        let k = Incoming::parse(r#"{"jsonrpc":"2.0","id":"a","method":"ping"}"#);
        assert!(matches!(k, Ok(Message::Request { ref method, .. }) if method == "ping"));
        let k = Incoming::parse(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        assert!(matches!(k, Ok(Message::Notification { .. })));
        let k = Incoming::parse(r#"{"jsonrpc":"2.0","id":7,"result":{"x":[1]}}"#);
        assert!(
            matches!(k, Ok(Message::Response { result, .. }) if result.get() == r#"{"x":[1]}"#)
        );
        let k = Incoming::parse(r#"{"jsonrpc":"2.0","id":7,"error":{"code":1,"message":"m"}}"#);
        assert!(matches!(k, Ok(Message::Error { .. })));
    }

    #[test]
    fn a_null_result_is_still_a_response() {
        // Found by the property test below: `"result": null` read as a missing member.
        let k = Incoming::parse(r#"{"jsonrpc":"2.0","id":3,"result":null}"#);
        assert!(matches!(k, Ok(Message::Response { result, .. }) if result.get() == "null"));
        let k = Incoming::parse(r#"{"jsonrpc":"2.0","id":3,"result":{},"error":null}"#);
        assert!(matches!(k, Ok(Message::Response { .. })));
    }

    #[test]
    fn rejects_what_is_not_jsonrpc() {
        let parse_err = Incoming::parse("{not json").err().map(|e| e.code);
        assert_eq!(parse_err, Some(super::super::codes::PARSE_ERROR));
        for bad in [
            r#"{"id":1,"method":"ping"}"#,
            r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":1}"#,
            r#"[1,2]"#,
        ] {
            let code = Incoming::parse(bad).err().map(|e| e.code);
            assert_eq!(code, Some(super::super::codes::INVALID_REQUEST), "{bad}");
        }
    }

    #[test]
    fn lines_keep_payloads_verbatim() {
        let params = r#"{"name":"x","arguments":{"b":1,"a":[true,null]},"extra":"kept"}"#;
        let line = request_line(42, "tools/call", Some(params));
        assert_eq!(
            line,
            format!(r#"{{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{params}}}"#)
        );
        let id = RawValue::from_string("\"req-1\"".into()).ok();
        let result = RawValue::from_string("{\"ok\":1}".into()).ok();
        if let (Some(id), Some(result)) = (id, result) {
            assert_eq!(
                response_line(&id, &result),
                r#"{"jsonrpc":"2.0","id":"req-1","result":{"ok":1}}"#
            );
        }
        let err = error_line(None, &RpcError::invalid_params("bad cursor"));
        let v: serde_json::Value = serde_json::from_str(&err).unwrap_or_default();
        assert_eq!(v["error"]["code"], -32602);
        assert!(v["id"].is_null());
    }
}

#[cfg(test)]
mod properties {
    use proptest::prelude::*;
    use serde_json::Value;

    use super::*;
    use crate::jsonrpc::depth::nests_deeper_than;
    use crate::jsonrpc::members::Members;

    /// Any JSON value, nested a few levels.
    fn json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::from),
            "\\PC{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                proptest::collection::vec(("\\PC{0,8}", inner), 0..6)
                    .prop_map(|members| Value::Object(members.into_iter().collect())),
            ]
        })
    }

    /// A JSON-RPC id: a number or a string.
    fn id() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<i64>().prop_map(|n| n.to_string()),
            "\\PC{0,16}".prop_map(|s| serialize(&s)),
        ]
    }

    proptest! {
        #[test]
        fn any_text_parses_or_is_refused_without_a_panic(text in "\\PC{0,200}") {
            if let Err(e) = Incoming::parse(&text) {
                prop_assert!(e.code == crate::jsonrpc::codes::PARSE_ERROR
                    || e.code == crate::jsonrpc::codes::INVALID_REQUEST);
            }
        }

        #[test]
        fn any_json_parses_or_is_refused_without_a_panic(value in json()) {
            let _ = Incoming::parse(&value.to_string());
        }

        #[test]
        fn a_request_round_trips(id in id(), method in "\\PC{1,30}", params in proptest::option::of(json())) {
            // JSON-RPC params are structured: an object or an array (`null` reads as none).
            let params = params.map(|p| match p {
                Value::Object(_) | Value::Array(_) => p,
                other => Value::Array(vec![other]),
            });
            let params = params.map(|p| p.to_string());
            let line = request_line_raw(&id, &method, params.as_deref());
            match Incoming::parse(&line) {
                Ok(Message::Request { id: got, method: m, params: p }) => {
                    prop_assert_eq!(got.get(), id.as_str());
                    prop_assert_eq!(m.as_ref(), method.as_str());
                    prop_assert_eq!(p.map(RawValue::get), params.as_deref());
                }
                other => return Err(TestCaseError::fail(format!("{line} → {other:?}"))),
            }
            let note = notification_line(&method, params.as_deref());
            let is_notification = matches!(Incoming::parse(&note), Ok(Message::Notification { .. }));
            prop_assert!(is_notification);
        }

        #[test]
        fn a_response_and_an_error_round_trip(id in id(), result in json()) {
            let (id, result) = (members_raw(&id), members_raw(&result.to_string()));
            let line = response_line(&id, &result);
            let round = matches!(Incoming::parse(&line),
                Ok(Message::Response { id: i, result: r }) if i.get() == id.get() && r.get() == result.get());
            prop_assert!(round, "{}", line);
            let error = error_line(Some(&id), &RpcError::invalid_params("x"));
            let is_error = matches!(Incoming::parse(&error), Ok(Message::Error { .. }));
            prop_assert!(is_error);
        }

        #[test]
        fn members_are_written_back_as_they_came(value in proptest::collection::vec(("[a-z]{1,6}", json()), 0..8)) {
            let object: serde_json::Map<String, Value> = value.into_iter().collect();
            let text = Value::Object(object.clone()).to_string();
            let raw = members_raw(&text);
            let members = Members::parse(&raw).map_err(|e| TestCaseError::fail(e.message))?;
            // Byte for byte: the values stay raw text.
            prop_assert_eq!(members.to_json(), text);
        }

        #[test]
        fn depth_is_counted_as_serde_counts_it(depth in 0usize..200, max in 1usize..150) {
            let text = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
            prop_assert_eq!(nests_deeper_than(&text, max), depth > max);
        }
    }

    fn members_raw(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.to_owned()).unwrap_or_else(|e| panic!("{text}: {e}"))
    }
}
