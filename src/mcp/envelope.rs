//! The 2026-07-28 per-request envelope: what a stateless request says about its client in
//! `params._meta` (protocol version, capabilities, identity, log level), read in the order the
//! revision checks it — the required fields first (`-32602`), then (on HTTP, by the caller) the
//! headers that mirror the body (`-32020`), then whether the version is served (`-32022`) — and
//! the `=?base64?…?=` form in which header values carry what plain ASCII cannot.

use std::borrow::Cow;
use std::sync::OnceLock;

use base64::Engine;
use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::method::Method;
use super::version::Version;
use crate::jsonrpc::{Key, Members, Needle, RpcError, codes, text_of};

/// What the keys of the envelope's members start with (mcpmux's own hop, never forwarded).
pub const ENVELOPE_PREFIX: &str = "io.modelcontextprotocol/";
/// `_meta` key: the protocol version of this request (required).
pub const PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// `_meta` key: the client capabilities relevant to this request (required).
pub const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// `_meta` key: the client's name and version.
pub const CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
/// `_meta` key: the least severe log message the request's own stream may carry (none without it).
pub const LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
/// `_meta` key of what a `subscriptions/listen` stream carries: the listen request's id.
pub const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
/// `_meta` key of a result: the server's name and version.
pub const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

/// HTTP header mirroring a request's method (Streamable HTTP, 2026-07-28).
pub const METHOD_HEADER: &str = "mcp-method";
/// HTTP header mirroring `params.name` or `params.uri` (see [`mirrored_name`]).
pub const NAME_HEADER: &str = "mcp-name";

/// Largest `clientCapabilities` or `clientInfo` a request may declare, serialized: what a host
/// declares is kept for as long as its request runs.
const MAX_DECLARED_BYTES: usize = 16 * 1024;

/// An envelope whose required fields are present; its version is not yet judged.
#[derive(Debug)]
pub struct Declared<'a> {
    /// The version the request names, as written.
    pub version: Cow<'a, str>,
    /// Its `clientCapabilities`: an object, within [`MAX_DECLARED_BYTES`].
    pub capabilities: &'a RawValue,
    /// The rank ([`super::LOG_LEVELS`]) of the log level the request asks for, if it asks.
    pub log_level: Option<usize>,
    /// What the request's `Mcp-Name` must repeat (`params.name` or `params.uri`, as a string),
    /// with the member it came from.
    pub name: Option<(&'static str, Cow<'a, str>)>,
    /// The params as they are served when `_meta` held nothing but the envelope: the other
    /// members as this read found them (not read again), `_meta` left out — it describes the
    /// host's hop to mcpmux, and is never forwarded. `None`: served as sent.
    pub served: Option<Members<'a>>,
}

/// An envelope of a revision mcpmux serves statelessly.
#[derive(Debug)]
pub struct Envelope {
    pub version: Version,
    pub capabilities: ClientCapabilities,
    pub log_level: Option<usize>,
}

/// The protocol version a request's `params._meta` names, if it names one as a string. Cheap
/// enough to decide a request's era on: it reads the two objects' members, no deeper.
pub fn declared_version(params: Option<&RawValue>) -> Option<String> {
    static DECLARES: Needle = Needle::new(PROTOCOL_VERSION);
    let params = params.filter(|p| DECLARES.is_in(p.get()))?;
    let meta = Members::of(params)?.get("_meta")?;
    Members::of(meta)?.string(PROTOCOL_VERSION)
}

/// The version a request's envelope names when that makes it a stateless request: one that is
/// not a handshake revision (an unknown one included, which is then refused with `-32022`), on
/// any request but `initialize` (which is the handshake era's, whatever its `_meta` says).
pub fn stateless_version(method: &str, params: Option<&RawValue>) -> Option<String> {
    if method == Method::Initialize.as_str() {
        return None;
    }
    declared_version(params).filter(|v| Version::known(v).is_none())
}

/// The body value a request's `Mcp-Name` header mirrors — `params.name` of `tools/call` and
/// `prompts/get`, `params.uri` of `resources/read` — with the member it came from.
pub fn mirrored_name(method: &str, params: Option<&RawValue>) -> Option<(&'static str, String)> {
    let key = Method::parse(method)?.mirrored_key()?;
    Members::of(params?)?.string(key).map(|name| (key, name))
}

/// `value` as a header value: verbatim when it is visible ASCII without edge whitespace (and
/// does not itself look encoded), else in the `=?base64?…?=` form.
pub fn encode_header_value(value: &str) -> String {
    let plain = !value.is_empty()
        && value.bytes().all(|b| (0x20..0x7f).contains(&b))
        && value.trim() == value
        && decode_header_value(value).as_deref() == Some(value);
    if plain {
        return value.to_owned();
    }
    let engine = base64::engine::general_purpose::STANDARD;
    format!("=?base64?{}?=", engine.encode(value))
}

/// What one pass over a request's params reads: its `_meta` envelope, decoded where it lies,
/// and its other members, values left raw ([`Declared::of`] makes sense of it).
#[derive(Debug)]
pub struct ReadParams<'a> {
    meta: Option<Meta<'a>>,
    members: Members<'a>,
}

impl<'de: 'a, 'a> Deserialize<'de> for ReadParams<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ParamsVisitor<'a>(std::marker::PhantomData<ReadParams<'a>>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for ParamsVisitor<'a> {
            type Value = ReadParams<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<ReadParams<'a>, A::Error> {
                let (mut meta, mut members) = (None, Members::few());
                while let Some(Key(key)) = map.next_key()? {
                    match &*key {
                        "_meta" => meta = Some(map.next_value()?),
                        _ => members.insert(key, map.next_value()?),
                    }
                }
                Ok(ReadParams { meta, members })
            }
        }
        deserializer.deserialize_map(ParamsVisitor(std::marker::PhantomData))
    }
}

/// The envelope's members, read where they lie in the one pass over the params: the four the
/// revision defines, and whether anything else is there.
#[derive(Debug, Default)]
struct Meta<'a> {
    version: Option<&'a RawValue>,
    capabilities: Option<&'a RawValue>,
    client_info: Option<&'a RawValue>,
    log_level: Option<&'a RawValue>,
    /// A member outside the envelope (a progress token, say).
    others: bool,
    /// `_meta` is not an object.
    not_object: bool,
}

impl<'de: 'a, 'a> Deserialize<'de> for Meta<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MetaVisitor<'a>(std::marker::PhantomData<Meta<'a>>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for MetaVisitor<'a> {
            type Value = Meta<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Meta<'a>, A::Error> {
                while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                Ok(Meta::not_object())
            }
            fn visit_bool<E>(self, _: bool) -> Result<Meta<'a>, E> {
                Ok(Meta::not_object())
            }
            fn visit_i64<E>(self, _: i64) -> Result<Meta<'a>, E> {
                Ok(Meta::not_object())
            }
            fn visit_u64<E>(self, _: u64) -> Result<Meta<'a>, E> {
                Ok(Meta::not_object())
            }
            fn visit_f64<E>(self, _: f64) -> Result<Meta<'a>, E> {
                Ok(Meta::not_object())
            }
            fn visit_str<E>(self, _: &str) -> Result<Meta<'a>, E> {
                Ok(Meta::not_object())
            }
            fn visit_unit<E>(self) -> Result<Meta<'a>, E> {
                Ok(Meta::not_object())
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Meta<'a>, A::Error> {
                let mut meta = Meta::default();
                while let Some(Key(key)) = map.next_key()? {
                    let slot = match &*key {
                        PROTOCOL_VERSION => &mut meta.version,
                        CLIENT_CAPABILITIES => &mut meta.capabilities,
                        CLIENT_INFO => &mut meta.client_info,
                        LOG_LEVEL => &mut meta.log_level,
                        other => {
                            meta.others |= !other.starts_with(ENVELOPE_PREFIX);
                            map.next_value::<serde::de::IgnoredAny>()?;
                            continue;
                        }
                    };
                    *slot = Some(map.next_value()?);
                }
                Ok(meta)
            }
        }
        // Any value: one that is not an object is the envelope's absence, not a parse error.
        deserializer.deserialize_any(MetaVisitor(std::marker::PhantomData))
    }
}

impl Meta<'_> {
    fn not_object() -> Self {
        Self {
            not_object: true,
            ..Self::default()
        }
    }
}

impl<'a> Declared<'a> {
    /// Reads the envelope of `params` of a `method` request, in one pass that also finds the
    /// name the request's `Mcp-Name` mirrors: an error (`-32602`) names what is missing or
    /// malformed.
    pub fn read(method: &str, params: Option<&'a RawValue>) -> Result<Self, RpcError> {
        let params = params
            .map(|params| serde_json::from_str(params.get()))
            .transpose()
            .map_err(|e| RpcError::invalid_params(format!("Invalid params: {e}")))?;
        Self::of(method, params)
    }

    /// The envelope of the params of a `method` request as one pass read them ([`Self::read`]).
    pub fn of(method: &str, params: Option<ReadParams<'a>>) -> Result<Self, RpcError> {
        let missing = || {
            RpcError::invalid_params(format!(
                "Invalid params: a 2026-07-28 request carries `{PROTOCOL_VERSION}` and `{CLIENT_CAPABILITIES}` in params._meta"
            ))
        };
        let mut params = params.ok_or_else(missing)?;
        let meta = params
            .meta
            .take()
            .filter(|m| !m.not_object)
            .ok_or_else(missing)?;
        let (Some(version), Some(capabilities)) = (meta.version, meta.capabilities) else {
            return Err(missing());
        };
        let version = text_of(version).ok_or_else(|| {
            RpcError::invalid_params(format!("Invalid params: `{PROTOCOL_VERSION}` is a string"))
        })?;
        within_limit(
            "`io.modelcontextprotocol/clientCapabilities`",
            Some(capabilities),
        )?;
        if !capabilities.get().starts_with('{') {
            return Err(RpcError::invalid_params(format!(
                "Invalid params: `{CLIENT_CAPABILITIES}` is an object"
            )));
        }
        // Who the host is matters to a session only; a request's `clientInfo` is checked, not kept.
        within_limit("`io.modelcontextprotocol/clientInfo`", meta.client_info)?;
        let log_level = meta.log_level.map(log_level).transpose()?;
        let mirrored = Method::parse(method).and_then(Method::mirrored_key);
        let name = mirrored.and_then(|key| Some((key, text_of(params.members.get(key)?)?)));
        Ok(Self {
            version,
            capabilities,
            log_level,
            name,
            served: (!meta.others).then_some(params.members),
        })
    }

    /// The envelope, if its version is one mcpmux serves statelessly; else `-32022`. Its
    /// capabilities are kept as a part of `body`, the text they were read from, when they lie
    /// in it (they always do when `body` is what the request was read from; else they are
    /// copied).
    pub fn accept(&self, body: &Bytes) -> Result<Envelope, RpcError> {
        match Version::served(&self.version).filter(|v| v.is_modern()) {
            Some(version) => Ok(Envelope {
                version,
                capabilities: ClientCapabilities::part_of(body, self.capabilities),
                log_level: self.log_level,
            }),
            None => Err(unsupported(&self.version)),
        }
    }
}

/// The rank of the level a request's `logLevel` names; an unknown one is `-32602`.
fn log_level(raw: &RawValue) -> Result<usize, RpcError> {
    let named = serde_json::from_str::<&str>(raw.get()).ok();
    named.and_then(super::log_rank).ok_or_else(|| {
        RpcError::invalid_params(format!(
            "Invalid params: `{LOG_LEVEL}` {} is not a log level; use one of {}",
            raw.get(),
            super::LOG_LEVELS.join(", ")
        ))
    })
}

/// `-32022` for a request that names `requested`, listing what mcpmux serves.
pub fn unsupported(requested: &str) -> RpcError {
    let supported: Vec<&str> = Version::SERVED.iter().map(|v| v.as_str()).collect();
    RpcError::new(
        codes::UNSUPPORTED_PROTOCOL_VERSION,
        format!(
            "Unsupported protocol version `{requested}` (mcpmux serves {})",
            supported.join(", ")
        ),
    )
    .with_data(json!({ "supported": supported, "requested": requested }))
}

/// What a host declared it can do (`initialize`'s `capabilities`, a request's
/// `clientCapabilities`), kept as it was sent and parsed when first asked: most requests never
/// ask (an upstream's server request does, and a 2026-07-28 upstream's envelope).
#[derive(Debug, Default)]
pub struct ClientCapabilities {
    /// The JSON text as sent (valid JSON: it was read as a raw value).
    raw: Option<Bytes>,
    parsed: OnceLock<Value>,
}

impl ClientCapabilities {
    /// What a host declared as `name` (nothing, when absent), within [`MAX_DECLARED_BYTES`]: it
    /// is kept (copied) for as long as its session or request lives.
    pub fn declared(name: &str, raw: Option<&RawValue>) -> Result<Self, RpcError> {
        let raw = within_limit(name, raw)?;
        Ok(Self {
            raw: raw.map(|raw| Bytes::copy_from_slice(raw.get().as_bytes())),
            parsed: OnceLock::new(),
        })
    }

    /// `raw` kept as the part of `body` it is (a reference to the body, not a copy), or copied
    /// when it is not in it.
    fn part_of(body: &Bytes, raw: &RawValue) -> Self {
        let text = raw.get().as_bytes();
        let start = (text.as_ptr() as usize).wrapping_sub(body.as_ptr() as usize);
        let within = start <= body.len() && text.len() <= body.len() - start;
        Self {
            raw: Some(match within {
                true => body.slice(start..start + text.len()),
                false => Bytes::copy_from_slice(text),
            }),
            parsed: OnceLock::new(),
        }
    }

    /// As a value (`null` when nothing was declared).
    pub fn value(&self) -> &Value {
        self.parsed.get_or_init(|| {
            (self.raw.as_deref())
                .and_then(|raw| serde_json::from_slice(raw).ok())
                .unwrap_or(Value::Null)
        })
    }
}

/// What a host declared about itself as `name`, if it is within [`MAX_DECLARED_BYTES`].
pub fn within_limit<'a>(
    name: &str,
    raw: Option<&'a RawValue>,
) -> Result<Option<&'a RawValue>, RpcError> {
    let size = raw.map_or(0, |raw| raw.get().len());
    if size > MAX_DECLARED_BYTES {
        return Err(RpcError::invalid_params(format!(
            "{name} is {size} bytes, over mcpmux's limit of {MAX_DECLARED_BYTES} bytes (16 KiB); send less"
        )));
    }
    Ok(raw)
}

/// Whether the header value `value` carries `text` ([`decode_header_value`]; a plain value is
/// compared as it is, with nothing decoded or copied).
pub fn header_carries(value: &str, text: &str) -> bool {
    match value.starts_with("=?base64?") && value.ends_with("?=") {
        false => value == text,
        true => decode_header_value(value).as_deref() == Some(text),
    }
}

/// A header value as the text it carries: verbatim, or decoded from the `=?base64?…?=` form.
/// `None` when the encoded form is malformed (bad or non-canonical base64, not UTF-8), so a
/// corrupt header never matches a body value.
pub fn decode_header_value(value: &str) -> Option<String> {
    let Some(payload) = value
        .strip_prefix("=?base64?")
        .and_then(|v| v.strip_suffix("?="))
    else {
        return Some(value.to_owned());
    };
    let engine = base64::engine::general_purpose::STANDARD;
    let bytes = engine.decode(payload).ok()?;
    if engine.encode(&bytes) != payload {
        return None;
    }
    String::from_utf8(bytes).ok()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::jsonrpc::raw;

    fn params(meta: &str) -> Box<RawValue> {
        raw(format!(r#"{{"name":"x","_meta":{meta}}}"#))
    }

    #[test]
    fn the_required_fields_come_first_then_the_version() {
        let ok = params(
            r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"sampling":{}},"io.modelcontextprotocol/logLevel":"info"}"#,
        );
        assert_eq!(declared_version(Some(&ok)).as_deref(), Some("2026-07-28"));
        let declared = Declared::read("tools/call", Some(&ok)).unwrap();
        assert_eq!(declared.name, Some(("name", "x".into())));
        let served = declared.served.as_ref().map(Members::to_json);
        assert_eq!(
            served.as_deref(),
            Some(r#"{"name":"x"}"#),
            "nothing but the envelope"
        );
        let envelope = declared.accept(&Bytes::new()).unwrap();
        assert_eq!(envelope.version, Version::MODERN);
        assert!(envelope.capabilities.value().get("sampling").is_some());
        assert_eq!(envelope.log_level, crate::mcp::log_rank("info"));
        let with_token = params(
            r#"{"progressToken":7,"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}"#,
        );
        let declared = Declared::read("tools/call", Some(&with_token)).unwrap();
        assert!(declared.served.is_none(), "a progress token is forwarded");
        for not_object in [r#""x""#, "[1,{}]", "3", "null", "true"] {
            let error = Declared::read("tools/call", Some(&params(not_object))).unwrap_err();
            assert_eq!(error.code, codes::INVALID_PARAMS, "{not_object}");
            assert!(error.message.contains(CLIENT_CAPABILITIES), "{error}");
        }

        // (`null` is no level, as for any optional member.)
        for level in [r#""loud""#, "3", r#""INFO""#] {
            let bad = params(&format!(
                r#"{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{{}},"io.modelcontextprotocol/logLevel":{level}}}"#
            ));
            let error = Declared::read("tools/call", Some(&bad)).unwrap_err();
            assert_eq!(error.code, codes::INVALID_PARAMS, "{level}");
            assert!(error.message.contains(LOG_LEVEL), "{error}");
        }

        let no_caps = params(r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}"#);
        let error = Declared::read("tools/call", Some(&no_caps)).unwrap_err();
        assert_eq!(error.code, codes::INVALID_PARAMS);
        assert!(error.message.contains(CLIENT_CAPABILITIES), "{error}");
        assert_eq!(
            Declared::read("tools/call", None).unwrap_err().code,
            codes::INVALID_PARAMS
        );

        let future = params(
            r#"{"io.modelcontextprotocol/protocolVersion":"2099-01-01","io.modelcontextprotocol/clientCapabilities":{}}"#,
        );
        let error = Declared::read("tools/call", Some(&future))
            .unwrap()
            .accept(&Bytes::new())
            .unwrap_err();
        assert_eq!(error.code, codes::UNSUPPORTED_PROTOCOL_VERSION);
        let data = error.data.unwrap();
        assert_eq!(data["requested"], "2099-01-01");
        assert_eq!(data["supported"][0], "2026-07-28");
        // A handshake revision is served, but not per request: it needs `initialize`.
        let legacy = params(
            r#"{"io.modelcontextprotocol/protocolVersion":"2025-11-25","io.modelcontextprotocol/clientCapabilities":{}}"#,
        );
        let error = Declared::read("tools/call", Some(&legacy))
            .unwrap()
            .accept(&Bytes::new())
            .unwrap_err();
        assert_eq!(error.code, codes::UNSUPPORTED_PROTOCOL_VERSION);
    }

    #[test]
    fn capabilities_are_an_object_kept_as_sent_and_read_when_asked() {
        for not_object in [r#""x""#, "[{}]", "3", "null"] {
            let sent = params(&format!(
                r#"{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{not_object}}}"#
            ));
            let error = Declared::read("tools/call", Some(&sent)).unwrap_err();
            assert!(
                error.message.contains("is an object"),
                "{not_object}: {error}"
            );
        }
        let declared = raw(r#"{"roots":{"listChanged":true},"sampling":{}}"#.into());
        let caps = ClientCapabilities::declared("caps", Some(&declared)).unwrap();
        assert_eq!(caps.value()["roots"]["listChanged"], true);
        assert!(caps.value().get("elicitation").is_none());
        let absent = ClientCapabilities::declared("caps", None).unwrap();
        assert!(absent.value().is_null());
        // A request's capabilities are kept as the part of its body they are, not copied;
        // capabilities read from other text are copied.
        let body = Bytes::from(format!(r#"{{"params":{}}}"#, declared.get()));
        let text = std::str::from_utf8(&body).unwrap();
        let within: &RawValue = serde_json::from_str(&text[10..text.len() - 1]).unwrap();
        let kept = ClientCapabilities::part_of(&body, within);
        let kept_raw = kept.raw.as_deref().unwrap();
        assert_eq!(
            kept_raw.as_ptr(),
            within.get().as_ptr(),
            "a part of the body"
        );
        assert_eq!(kept.value()["roots"]["listChanged"], true);
        let copied = ClientCapabilities::part_of(&body, &declared);
        assert_ne!(
            copied.raw.as_deref().unwrap().as_ptr(),
            declared.get().as_ptr()
        );
        assert_eq!(copied.value(), kept.value());
        let huge = raw(format!(r#"{{"x":"{}"}}"#, "a".repeat(MAX_DECLARED_BYTES)));
        let error = ClientCapabilities::declared("caps", Some(&huge)).unwrap_err();
        assert!(error.message.contains("16 KiB"), "{error}");
    }

    #[test]
    fn header_values_decode_from_the_base64_form_only_when_canonical() {
        assert_eq!(
            decode_header_value("get_weather").as_deref(),
            Some("get_weather")
        );
        assert_eq!(
            decode_header_value("=?base64?w6lsw6g=?=").as_deref(),
            Some("élè")
        );
        assert_eq!(decode_header_value("=?base64?not base64?="), None);
        assert_eq!(
            decode_header_value("=?base64?w6lsw6h=?="),
            None,
            "non-canonical"
        );
        for value in [
            "a__echo",
            "élè",
            " edge",
            "=?base64?w6lsw6g=?=",
            "line\nbreak",
        ] {
            let encoded = encode_header_value(value);
            assert!(encoded.is_ascii(), "{encoded}");
            assert_eq!(decode_header_value(&encoded).as_deref(), Some(value));
        }
        assert_eq!(encode_header_value("a__echo"), "a__echo");
        assert!(header_carries("a__echo", "a__echo") && !header_carries("a__echo", "b"));
        assert!(header_carries("=?base64?w6lsw6g=?=", "élè"));
        assert!(!header_carries(
            "=?base64?w6lsw6g=?=",
            "=?base64?w6lsw6g=?="
        ));
        assert!(
            header_carries("=?base64?=", "=?base64?="),
            "too short to be encoded"
        );
    }

    #[test]
    fn initialize_and_handshake_versions_are_never_stateless() {
        let modern = params(r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}"#);
        let legacy = params(r#"{"io.modelcontextprotocol/protocolVersion":"2025-11-25"}"#);
        assert_eq!(
            stateless_version("tools/call", Some(&modern)).as_deref(),
            Some("2026-07-28")
        );
        assert_eq!(stateless_version("initialize", Some(&modern)), None);
        assert_eq!(stateless_version("tools/call", Some(&legacy)), None);
        assert_eq!(
            mirrored_name("tools/call", Some(&modern)),
            Some(("name", "x".to_owned()))
        );
        assert_eq!(mirrored_name("tools/list", Some(&modern)), None);
    }
}
