//! Content in tool results and prompt messages: resource URIs in it are exposed (so a host can
//! read a linked resource through mcpmux), and content types a host's protocol version does not
//! know are translated into text it does. Results without such content pass untouched (a byte
//! search decides, so the common case parses nothing).

use serde_json::Value;
use serde_json::value::RawValue;

use crate::jsonrpc::Needle;
use crate::mcp::names;
use crate::mcp::names::Prefix;
use crate::mcp::version::Version;

/// The result with resource URIs exposed and content fitted to `version`.
pub(super) fn fit(prefix: &Prefix, result: Box<RawValue>, version: Version) -> Box<RawValue> {
    let text = result.get();
    static RESOURCE: Needle = Needle::new(r#""resource"#);
    static AUDIO: Needle = Needle::new(r#""audio""#);
    static RESOURCE_LINK: Needle = Needle::new(r#""resource_link""#);
    let has_resources = RESOURCE.is_in(text);
    let has_newer =
        !version.has_resource_links() && (AUDIO.is_in(text) || RESOURCE_LINK.is_in(text));
    if !has_resources && !has_newer {
        return result;
    }
    let Ok(mut value) = serde_json::from_str::<Value>(text) else {
        return result;
    };
    if let Some(content) = value.get_mut("content").and_then(Value::as_array_mut) {
        content
            .iter_mut()
            .for_each(|item| fit_item(prefix, item, version));
    }
    if let Some(messages) = value.get_mut("messages").and_then(Value::as_array_mut) {
        for message in messages {
            if let Some(item) = message.get_mut("content") {
                fit_item(prefix, item, version);
            }
        }
    }
    serde_json::value::to_raw_value(&value).unwrap_or(result)
}

fn fit_item(prefix: &Prefix, item: &mut Value, version: Version) {
    let expose = |uri: &mut Value| {
        if let Some(original) = uri.as_str() {
            *uri = Value::String(names::expose_uri(prefix, original));
        }
    };
    match item.get("type").and_then(Value::as_str) {
        Some("resource_link") => {
            if let Some(uri) = item.get_mut("uri") {
                expose(uri);
            }
            if !version.has_resource_links() {
                let name = item
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("resource");
                let uri = item.get("uri").and_then(Value::as_str).unwrap_or_default();
                *item = serde_json::json!({ "type": "text", "text": format!("{name}: {uri}") });
            }
        }
        Some("resource") => {
            if let Some(uri) = item.get_mut("resource").and_then(|r| r.get_mut("uri")) {
                expose(uri);
            }
        }
        Some("audio") if !version.has_audio() => {
            let mime = item
                .get("mimeType")
                .and_then(Value::as_str)
                .unwrap_or("audio");
            let text = format!("[{mime} content omitted: MCP {version} has no audio content]");
            *item = serde_json::json!({ "type": "text", "text": text });
        }
        _ => {}
    }
}
