//! MCP Apps (the `io.modelcontextprotocol/ui` extension, SEP-1865): a tool names the page that
//! shows it — a `ui://` resource — in `_meta.ui.resourceUri` (and, as SDKs still write it, in the
//! flat key `_meta["ui/resourceUri"]`); `_meta.ui.visibility` says who may call it (`["app"]`: the
//! page only, never a model). What mcpmux rewrites of a tool's `_meta` is that URI, as it
//! rewrites every URI it exposes; everything else under `_meta.ui` (`csp`, `permissions`,
//! `domain`, `prefersBorder`, `visibility`, fields of later versions) passes through as it is.

use serde_json::value::RawValue;

use crate::jsonrpc::{Members, Needle, raw_string};

/// The extension's key in `capabilities.extensions`.
pub const UI_EXTENSION: &str = "io.modelcontextprotocol/ui";
/// The MIME type of an app's page.
pub const APP_MIME_TYPE: &str = "text/html;profile=mcp-app";
/// The flat `_meta` key older SDKs write the page's URI under.
const FLAT_RESOURCE_URI: &str = "ui/resourceUri";

/// What a tool definition says of its app.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ToolApp {
    /// The page's URI, as the upstream names it (`_meta.ui.resourceUri`, else the flat key).
    pub resource_uri: Option<String>,
    /// Only its page may call it (`_meta.ui.visibility` leaves out `model`).
    pub app_only: bool,
}

impl ToolApp {
    /// What the tool definition `json` says of its app; `None` for a tool that has none (told
    /// without a parse: nearly every tool).
    pub fn of(json: &RawValue) -> Option<Self> {
        static UI: Needle = Needle::new("\"ui");
        if !UI.is_in(json.get()) {
            return None;
        }
        let meta = Members::of(Members::of(json)?.get("_meta")?)?;
        let ui = meta.get("ui").and_then(Members::of);
        let nested = ui.as_ref().and_then(|ui| ui.string("resourceUri"));
        let visibility: Option<Vec<String>> = (ui.as_ref())
            .and_then(|ui| ui.get("visibility"))
            .and_then(|v| serde_json::from_str(v.get()).ok());
        let app = Self {
            resource_uri: nested.or_else(|| meta.string(FLAT_RESOURCE_URI)),
            app_only: visibility.is_some_and(|v| !v.iter().any(|who| who == "model")),
        };
        (app.resource_uri.is_some() || ui.is_some()).then_some(app)
    }
}

/// The tool definition `json` with its page's URI rewritten by `expose` (in `_meta.ui` and in
/// the flat key, wherever it is written), or, with `keep_ui` false, with `_meta.ui` and the flat
/// key taken out (its page is one the view does not show). `None` when nothing changes.
pub fn rewrite_tool(
    json: &RawValue,
    expose: impl Fn(&str) -> String,
    keep_ui: bool,
) -> Option<Box<RawValue>> {
    let mut tool = Members::of(json)?;
    let mut meta = Members::of(tool.get("_meta")?)?;
    let mut changed = false;
    let nested_uri;
    let rewritten_ui;
    if keep_ui {
        if let Some(mut ui) = meta.get("ui").and_then(Members::of) {
            if let Some(uri) = ui.string("resourceUri") {
                nested_uri = raw_string(&expose(&uri));
                ui.insert("resourceUri", &nested_uri);
                rewritten_ui = ui.to_raw();
                meta.insert("ui", &rewritten_ui);
                changed = true;
            }
        }
    } else {
        changed |= meta.remove("ui");
    }
    let flat_uri;
    match meta.string(FLAT_RESOURCE_URI) {
        Some(uri) if keep_ui => {
            flat_uri = raw_string(&expose(&uri));
            meta.insert(FLAT_RESOURCE_URI, &flat_uri);
            changed = true;
        }
        Some(_) => changed |= meta.remove(FLAT_RESOURCE_URI),
        None => {}
    }
    if !changed {
        return None;
    }
    let meta = meta.to_raw();
    tool.insert("_meta", &meta);
    Some(tool.to_raw())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn raw(value: &Value) -> Box<RawValue> {
        serde_json::value::to_raw_value(value).unwrap()
    }

    fn exposed(uri: &str) -> String {
        crate::mcp::names::expose_uri(&crate::mcp::names::Prefix::parse("sysmon").unwrap(), uri)
    }

    #[test]
    fn a_tool_says_which_page_shows_it_and_who_may_call_it() {
        let plain = raw(&json!({"name": "echo", "inputSchema": {}}));
        assert_eq!(ToolApp::of(&plain), None);
        let nested = raw(&json!({"name": "poll", "_meta": {"ui": {
            "resourceUri": "ui://monitor/app.html", "visibility": ["app"]}}}));
        assert_eq!(
            ToolApp::of(&nested),
            Some(ToolApp {
                resource_uri: Some("ui://monitor/app.html".into()),
                app_only: true
            })
        );
        let flat = raw(&json!({"name": "show", "_meta": {"ui/resourceUri": "ui://m/a.html"}}));
        let app = ToolApp::of(&flat).unwrap();
        assert_eq!(app.resource_uri.as_deref(), Some("ui://m/a.html"));
        assert!(!app.app_only);
        let both = raw(&json!({"name": "x", "_meta": {"ui": {"visibility": ["model", "app"]}}}));
        assert!(!ToolApp::of(&both).unwrap().app_only);
    }

    #[test]
    fn only_the_page_uri_is_rewritten_and_every_other_ui_field_passes_through() {
        let ui = json!({
            "resourceUri": "ui://monitor/app.html",
            "csp": {"connectDomains": ["https://api.example"], "resourceDomains": []},
            "permissions": {"camera": {}},
            "domain": "monitor.example",
            "prefersBorder": false,
            "visibility": ["model", "app"],
            "x-future": {"nested": [1, 2, 3]}
        });
        let tool = json!({"name": "show", "description": "d", "_meta": {
            "ui": ui, "ui/resourceUri": "ui://monitor/app.html", "other": 7}});
        let rewritten: Value =
            serde_json::from_str(rewrite_tool(&raw(&tool), exposed, true).unwrap().get()).unwrap();
        let mut expected = tool.clone();
        expected["_meta"]["ui"]["resourceUri"] = json!("ui://sysmon+monitor/app.html");
        expected["_meta"]["ui/resourceUri"] = json!("ui://sysmon+monitor/app.html");
        assert_eq!(rewritten, expected);
        // A page the view does not show: the tool keeps everything but its app.
        let hidden: Value =
            serde_json::from_str(rewrite_tool(&raw(&tool), exposed, false).unwrap().get()).unwrap();
        assert_eq!(hidden["_meta"], json!({"other": 7}));
        assert_eq!(hidden["description"], "d");
        // Nothing to rewrite: nothing changes.
        let plain = raw(&json!({"name": "echo", "_meta": {"other": 1}}));
        assert!(rewrite_tool(&plain, exposed, true).is_none());
    }

    proptest::proptest! {
        /// Whatever a tool's `_meta.ui` holds, only the page's URI changes, and the exposed URI
        /// names the upstream and the page it was.
        #[test]
        fn only_the_page_uri_changes(
            uri in "ui://[a-z0-9.-]{1,20}/\\PC{0,40}",
            keys in proptest::collection::btree_map("[a-zA-Z]{1,12}", "\\PC{0,20}", 0..6),
            flat in proptest::bool::ANY,
        ) {
            let mut ui = serde_json::Map::new();
            for (k, v) in &keys {
                if k != "resourceUri" {
                    ui.insert(k.clone(), json!(v));
                }
            }
            ui.insert("resourceUri".into(), json!(uri));
            let mut meta = json!({"ui": ui});
            if flat {
                meta["ui/resourceUri"] = json!(uri);
            }
            let tool = json!({"name": "t", "_meta": meta});
            let rewritten: Value =
                serde_json::from_str(rewrite_tool(&raw(&tool), exposed, true).unwrap().get()).unwrap();
            let page = rewritten["_meta"]["ui"]["resourceUri"].as_str().unwrap().to_owned();
            let (prefix, back) = crate::mcp::names::split_uri(&page).unwrap();
            proptest::prop_assert_eq!(prefix, "sysmon");
            proptest::prop_assert_eq!(back.as_ref(), uri.as_str());
            let mut expected = tool.clone();
            expected["_meta"]["ui"]["resourceUri"] = json!(page);
            if flat {
                expected["_meta"]["ui/resourceUri"] = json!(page);
            }
            proptest::prop_assert_eq!(rewritten, expected);
        }
    }
}
