//! A search-mode view's tools listing (`tools = "search"` on a profile): the two tools mcpmux
//! itself answers — one searches the view's tools, one calls any of them — and the tools the
//! profile's `always` globs keep listed beside them. The view's tools stay as they are for routing
//! and search; only what `tools/list` shows changes, and so only a change of the two or of the
//! `always` set changes its fingerprint (and sends `notifications/tools/list_changed`).

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use serde_json::json;
use serde_json::value::RawValue;

use crate::config::SearchMode;
use crate::jsonrpc::to_raw;

/// Results a search returns unless asked for another number, and at most.
pub const DEFAULT_LIMIT: u64 = 5;
pub const MAX_LIMIT: u64 = 50;

/// One tool listed in a search-mode view.
#[derive(Debug)]
pub struct Listed {
    pub exposed: Box<str>,
    pub json: Box<RawValue>,
}

/// What a search-mode view lists, and the mode it was built from.
#[derive(Debug)]
pub struct SearchView {
    pub mode: Arc<SearchMode>,
    /// The two tools and the `always` tools, by exposed name.
    listed: Vec<Listed>,
    fingerprint: u64,
}

impl SearchView {
    /// The listing of a view whose tools are `tools` (exposed name and definition).
    pub fn build<'a>(
        mode: &Arc<SearchMode>,
        tools: impl IntoIterator<Item = (&'a str, &'a RawValue)>,
    ) -> Self {
        let is_meta = |name: &str| name == mode.search.name || name == mode.call.name;
        let mut listed = vec![
            Listed {
                exposed: mode.search.name.as_str().into(),
                json: search_tool(mode),
            },
            Listed {
                exposed: mode.call.name.as_str().into(),
                json: call_tool(mode),
            },
        ];
        for (exposed, json) in tools {
            if is_meta(exposed) {
                tracing::warn!(tool = %exposed, "A tool has the name of a search-mode tool; that name calls the search-mode tool, so the tool is reachable only by another name.");
                continue;
            }
            if mode.always.is_match(exposed) {
                listed.push(Listed {
                    exposed: exposed.into(),
                    json: json.to_owned(),
                });
            }
        }
        listed.sort_by(|a, b| a.exposed.cmp(&b.exposed));
        let mut hasher = std::hash::DefaultHasher::new();
        for item in &listed {
            item.json.get().hash(&mut hasher);
        }
        Self {
            mode: Arc::clone(mode),
            listed,
            fingerprint: hasher.finish(),
        }
    }

    pub fn listed(&self) -> &[Listed] {
        &self.listed
    }

    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }
}

/// The search tool's definition.
fn search_tool(mode: &SearchMode) -> Box<RawValue> {
    let call = &mode.call.name;
    let description = mode.search.description.clone().unwrap_or_else(|| {
        format!(
            "Find the tools for a task. Most of the tools available here are not listed: describe \
             what you want to do in a few words (\"read a file\", \"create a calendar event\") and \
             this returns the tools that fit best, best first, each with its name, description and \
             inputSchema. Call the one you choose with {call}, giving its name and its arguments."
        )
    });
    to_raw(&json!({
        "name": mode.search.name,
        "title": "Search tools",
        "description": description,
        "inputSchema": {
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "description": "What you want to do, in a few words, or a tool's name."
                },
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_LIMIT,
                    "default": DEFAULT_LIMIT,
                    "description": format!("How many tools to return (default {DEFAULT_LIMIT}, at most {MAX_LIMIT}).")
                }
            },
            "required": ["query"]
        },
        "annotations": { "readOnlyHint": true, "openWorldHint": false }
    }))
}

/// The call tool's definition.
fn call_tool(mode: &SearchMode) -> Box<RawValue> {
    let search = &mode.search.name;
    let description = mode.call.description.clone().unwrap_or_else(|| {
        format!(
            "Call a tool that {search} found. Give the tool's name as {search} returned it and its \
             arguments as its inputSchema describes; the result is that tool's own result."
        )
    });
    to_raw(&json!({
        "name": mode.call.name,
        "title": "Call a tool",
        "description": description,
        "inputSchema": {
            "type": "object",
            "properties": {
                "name": {
                    "type": "string",
                    "description": format!("The tool's name, as {search} returned it.")
                },
                "arguments": {
                    "type": "object",
                    "description": "The tool's arguments, as its inputSchema describes them."
                }
            },
            "required": ["name"]
        }
    }))
}
