//! Speaking 2026-07-28 to an upstream (`basic/index.md`, `basic/patterns/mrtr.md`): the envelope
//! every request carries instead of a handshake, the probe's reading of an answer to
//! `server/discover`, the `input_required` results a call may end a round with, and the filter of
//! the `subscriptions/listen` stream that replaces `resources/subscribe` and the list_changed
//! notifications of a session.
//!
//! The envelope is mcpmux's own, never a host's: its protocol version, its `clientInfo`, the
//! capabilities of the host the request serves cut to what mcpmux can relay (sampling,
//! elicitation, roots, and the extensions it declared), and `logLevel` only when that host asked
//! for log messages.

use std::collections::BTreeSet;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use super::catalog::ServerInfo;
use crate::jsonrpc::{Members, Needle, codes, raw_string, to_raw};
use crate::mcp::envelope::{self, CLIENT_CAPABILITIES, CLIENT_INFO, PROTOCOL_VERSION};
use crate::mcp::version::Version;

/// `_meta` key: the log level a request wants messages at (none without it).
pub const LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";

/// The client capabilities mcpmux can carry between an upstream and a host: the three it relays
/// requests for, and the extensions the host declared (their values pass as they are).
const RELAYABLE: [&str; 4] = ["sampling", "elicitation", "roots", "extensions"];

/// What a request to a 2026-07-28 upstream declares on behalf of the host it serves.
#[derive(Debug, Default)]
pub struct Declared<'a> {
    /// The host's client capabilities (`None`: a request of mcpmux's own, which declares none).
    pub capabilities: Option<&'a Value>,
    /// The level the host wants log messages at.
    pub log_level: Option<&'static str>,
}

/// `params` (raw JSON, or none) with mcpmux's envelope in `_meta`, and the value the `Mcp-Name`
/// header mirrors (`params.name` or `params.uri`), when the method has one.
pub(super) fn enveloped(
    method: &str,
    params: Option<&str>,
    declared: &Declared<'_>,
) -> (String, Option<Box<str>>) {
    let capabilities = to_raw(&relayable(declared.capabilities));
    let version = raw_string(Version::MODERN.as_str());
    let info = client_info();
    let level = declared.log_level.map(raw_string);
    let params: Option<&RawValue> = params.and_then(|p| serde_json::from_str(p).ok());
    let mut members = params.and_then(Members::of).unwrap_or_default();
    let mut meta = (members.get("_meta"))
        .and_then(Members::of)
        .unwrap_or_default();
    meta.insert(PROTOCOL_VERSION, &version);
    meta.insert(CLIENT_CAPABILITIES, &capabilities);
    meta.insert(CLIENT_INFO, &info);
    if let Some(level) = &level {
        meta.insert(LOG_LEVEL, level);
    }
    let meta = meta.to_raw();
    members.insert("_meta", &meta);
    let name = envelope::mirrored_name(method, params).map(|(_, name)| name.into_boxed_str());
    (members.to_json(), name)
}

/// mcpmux's `clientInfo`.
fn client_info() -> Box<RawValue> {
    to_raw(&json!({ "name": "mcpmux", "version": env!("CARGO_PKG_VERSION") }))
}

/// A host's capabilities cut to what mcpmux relays (an empty object for none).
fn relayable(capabilities: Option<&Value>) -> Value {
    let mut kept = Map::new();
    if let Some(Value::Object(declared)) = capabilities {
        for key in RELAYABLE {
            if let Some(value) = declared.get(key).filter(|v| !v.is_null()) {
                kept.insert(key.to_owned(), value.clone());
            }
        }
    }
    Value::Object(kept)
}

/// What the probe learned from an answer to `server/discover`.
#[derive(Debug)]
pub(super) enum Verdict {
    /// A 2026-07-28 server, as it described itself.
    Modern(ServerInfo),
    /// A modern server that refused the request; it serves these versions (which may include
    /// 2026-07-28: it refused a handshake-era request, or the probe's headers).
    Serves(Vec<String>),
    /// Not a modern server: the `initialize` handshake follows.
    Legacy,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct DiscoverResult {
    #[serde(default)]
    supported_versions: Vec<String>,
    #[serde(default)]
    capabilities: Value,
    #[serde(default)]
    server_info: Value,
    instructions: Option<String>,
    #[serde(default, rename = "_meta")]
    meta: Value,
}

/// Reads a `server/discover` result: a server that lists 2026-07-28 among its versions is one.
pub(super) fn discovered(result: &RawValue) -> Verdict {
    let Ok(discover) = serde_json::from_str::<DiscoverResult>(result.get()) else {
        return Verdict::Legacy;
    };
    if !(discover.supported_versions.iter()).any(|v| v == Version::MODERN.as_str()) {
        return match discover.supported_versions.is_empty() {
            true => Verdict::Legacy,
            false => Verdict::Serves(discover.supported_versions),
        };
    }
    Verdict::Modern(ServerInfo {
        protocol_version: Version::MODERN,
        capabilities: discover.capabilities,
        // 2026-07-28 servers name themselves in `_meta`; some still in `serverInfo`.
        server_info: match discover.server_info {
            Value::Null => discover.meta[envelope::SERVER_INFO].clone(),
            info => info,
        },
        instructions: discover.instructions,
    })
}

/// Reads an error answer to `server/discover` (or to `initialize`): only a recognised modern
/// error — unsupported version with what it supports, header mismatch, missing capability —
/// says the server is modern; any other error says nothing but "not modern".
pub(super) fn refused(error: &RawValue) -> Verdict {
    #[derive(Deserialize)]
    struct Error {
        code: i64,
        #[serde(default)]
        data: Value,
    }
    let Ok(error) = serde_json::from_str::<Error>(error.get()) else {
        return Verdict::Legacy;
    };
    match error.code {
        codes::UNSUPPORTED_PROTOCOL_VERSION => {
            let supported: Vec<String> = (error.data["supported"].as_array())
                .map(|s| {
                    s.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default();
            match supported.is_empty() {
                true => Verdict::Legacy,
                false => Verdict::Serves(supported),
            }
        }
        codes::HEADER_MISMATCH | codes::MISSING_CLIENT_CAPABILITY => {
            Verdict::Serves(vec![Version::MODERN.as_str().to_owned()])
        }
        _ => Verdict::Legacy,
    }
}

/// An `input_required` result: what the upstream asks for before it can answer.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InputRequired {
    /// Key → `{ method, params }`.
    #[serde(default)]
    pub input_requests: Map<String, Value>,
    pub request_state: Option<String>,
}

/// The `input_required` result `result` is, if it is one (most results are not, and are
/// recognised without a parse).
pub fn input_required(result: &RawValue) -> Option<InputRequired> {
    static MARK: Needle = Needle::new("\"input_required\"");
    if !MARK.is_in(result.get()) {
        return None;
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Kind<'a> {
        result_type: Option<&'a str>,
    }
    let kind: Kind<'_> = serde_json::from_str(result.get()).ok()?;
    if kind.result_type != Some("input_required") {
        return None;
    }
    serde_json::from_str(result.get()).ok()
}

/// `params` (raw JSON, with the envelope) for the next round of a call: the answers and the
/// upstream's `requestState` in place of the previous round's.
pub(super) fn retry(params: &str, responses: &Map<String, Value>, state: Option<&str>) -> String {
    let mut value: Value = serde_json::from_str(params).unwrap_or_else(|_| json!({}));
    if let Some(object) = value.as_object_mut() {
        object.remove("requestState");
        object.insert("inputResponses".into(), Value::Object(responses.clone()));
        if let Some(state) = state {
            object.insert("requestState".into(), Value::String(state.to_owned()));
        }
    }
    value.to_string()
}

/// The params of the `subscriptions/listen` stream mcpmux keeps open with an upstream: the list
/// changes the upstream declared it announces, and the resources some host subscribed to.
pub(super) fn listen_params(info: &ServerInfo, resources: &BTreeSet<String>) -> Option<String> {
    let announces = |capability: &str| info.capabilities[capability]["listChanged"] == true;
    let mut filter = Map::new();
    for (capability, key) in [
        ("tools", "toolsListChanged"),
        ("prompts", "promptsListChanged"),
        ("resources", "resourcesListChanged"),
    ] {
        if announces(capability) {
            filter.insert(key.into(), Value::Bool(true));
        }
    }
    let subscribes = info.capabilities["resources"]["subscribe"] == true;
    if subscribes && !resources.is_empty() {
        filter.insert("resourceSubscriptions".into(), json!(resources));
    }
    (!filter.is_empty()).then(|| json!({ "notifications": filter }).to_string())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn raw(text: &str) -> Box<RawValue> {
        crate::jsonrpc::raw(text.to_owned())
    }

    #[test]
    fn the_envelope_is_mcpmux_own_with_only_what_it_relays() {
        let host =
            json!({ "sampling": {}, "elicitation": { "form": {} }, "experimental": { "x": {} } });
        let declared = Declared {
            capabilities: Some(&host),
            log_level: Some("debug"),
        };
        let params = r#"{"name":"echo","arguments":{"a":1},"_meta":{"progressToken":"p"}}"#;
        let (text, name) = enveloped("tools/call", Some(params), &declared);
        let value: Value = serde_json::from_str(&text).unwrap();
        let meta = &value["_meta"];
        assert_eq!(meta[PROTOCOL_VERSION], "2026-07-28");
        assert_eq!(
            meta[CLIENT_CAPABILITIES],
            json!({ "sampling": {}, "elicitation": { "form": {} } })
        );
        assert_eq!(meta[CLIENT_INFO]["name"], "mcpmux");
        assert_eq!(meta[LOG_LEVEL], "debug");
        assert_eq!(meta["progressToken"], "p");
        assert_eq!(value["arguments"], json!({ "a": 1 }));
        assert_eq!(name.as_deref(), Some("echo"));

        let (text, name) = enveloped("tools/list", None, &Declared::default());
        let value: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value["_meta"][CLIENT_CAPABILITIES], json!({}));
        assert!(value["_meta"].get(LOG_LEVEL).is_none());
        assert!(name.is_none());
    }

    #[test]
    fn only_a_recognised_modern_answer_makes_a_server_modern() {
        let modern = raw(
            r#"{"supportedVersions":["2026-07-28"],"capabilities":{"tools":{}},"serverInfo":{"name":"s","version":"1"}}"#,
        );
        assert!(matches!(discovered(&modern), Verdict::Modern(_)));
        let later = raw(r#"{"supportedVersions":["2027-01-01"],"capabilities":{}}"#);
        assert!(matches!(discovered(&later), Verdict::Serves(_)));
        for error in [
            r#"{"code":-32601,"message":"Method not found"}"#,
            r#"{"code":-32602,"message":"Server not initialized"}"#,
            r#"{"code":-32000,"message":"Bad Request"}"#,
            r#"{"code":-32022,"message":"Unsupported"}"#,
        ] {
            assert!(matches!(refused(&raw(error)), Verdict::Legacy), "{error}");
        }
        let unsupported =
            raw(r#"{"code":-32022,"message":"x","data":{"supported":["2027-01-01"]}}"#);
        assert!(matches!(refused(&unsupported), Verdict::Serves(v) if v == ["2027-01-01"]));
    }

    #[test]
    fn an_input_required_result_is_told_from_others() {
        let asks = raw(
            r#"{"resultType":"input_required","inputRequests":{"a":{"method":"roots/list"}},"requestState":"s1"}"#,
        );
        let asked = input_required(&asks).unwrap();
        assert_eq!(asked.request_state.as_deref(), Some("s1"));
        assert_eq!(asked.input_requests["a"]["method"], "roots/list");
        let text = raw(r#"{"content":[{"type":"text","text":"input_required"}]}"#);
        assert!(input_required(&text).is_none());
        let next = retry(
            r#"{"name":"t","requestState":"old"}"#,
            &json!({ "a": { "roots": [] } }).as_object().unwrap().clone(),
            Some("s1"),
        );
        let next: Value = serde_json::from_str(&next).unwrap();
        assert_eq!(next["requestState"], "s1");
        assert_eq!(next["inputResponses"]["a"]["roots"], json!([]));
    }
}
