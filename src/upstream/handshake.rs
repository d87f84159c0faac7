//! The start of a connection: the legacy `initialize` handshake, then every listing the server
//! offers, read to its last page with guards against looping and runaway cursors.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use super::catalog::{ServerInfo, UpstreamCatalog, UpstreamItem};
use super::connection::Connection;
use super::error::{Reply, UpstreamError};
use crate::mcp::ListKind;
use crate::mcp::version::Version;

/// Most pages read from one listing before giving up on it.
const MAX_PAGES: usize = 10_000;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct InitializeResult {
    protocol_version: String,
    #[serde(default)]
    capabilities: Value,
    #[serde(default)]
    server_info: Value,
    instructions: Option<String>,
}

/// Performs `initialize` + `notifications/initialized`.
pub(super) async fn initialize(
    conn: &Arc<Connection>,
    timeout: Duration,
) -> Result<ServerInfo, String> {
    let params = serde_json::json!({
        "protocolVersion": Version::LATEST.as_str(),
        // mcpmux forwards these to the host session a request comes from (or answers roots
        // itself when the upstream has configured roots).
        "capabilities": {
            "sampling": {},
            "elicitation": {"form": {}, "url": {}},
            "roots": {"listChanged": false},
        },
        "clientInfo": {"name": "mcpmux", "version": env!("CARGO_PKG_VERSION")},
    })
    .to_string();
    let result = expect_result(
        conn.request("initialize", Some(&params), timeout, None)
            .await,
        "initialize",
    )?;
    let init: InitializeResult = serde_json::from_str(result.get())
        .map_err(|e| format!("its initialize result is not valid: {e}"))?;
    let protocol_version = Version::known(&init.protocol_version).ok_or_else(|| {
        format!(
            "it answered protocol version `{}`, which mcpmux does not speak (known: {})",
            init.protocol_version,
            Version::list()
        )
    })?;
    conn.notify("notifications/initialized", None);
    Ok(ServerInfo {
        protocol_version,
        capabilities: init.capabilities,
        server_info: init.server_info,
        instructions: init.instructions,
    })
}

/// Reads every listing the server offers.
pub(super) async fn read_catalog(
    conn: &Arc<Connection>,
    info: Arc<ServerInfo>,
    timeout: Duration,
    max_items: usize,
    upstream: &str,
) -> Result<UpstreamCatalog, String> {
    let mut lists = BTreeMap::new();
    for kind in ListKind::ALL {
        if info.offers(kind) {
            lists.insert(
                kind,
                Arc::new(read_list(conn, kind, timeout, max_items, upstream).await?),
            );
        }
    }
    Ok(UpstreamCatalog { info, lists })
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Page {
    next_cursor: Option<String>,
    #[serde(flatten)]
    rest: serde_json::Map<String, Value>,
}

/// Reads one listing to its last page. Stops (with a warning, keeping what it read) at a repeated
/// or empty cursor, past `max_items` items or [`MAX_PAGES`] pages.
pub(super) async fn read_list(
    conn: &Arc<Connection>,
    kind: ListKind,
    timeout: Duration,
    max_items: usize,
    upstream: &str,
) -> Result<Vec<UpstreamItem>, String> {
    let mut items = Vec::new();
    let mut seen = HashSet::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let params = cursor
            .as_ref()
            .map(|c| serde_json::json!({ "cursor": c }).to_string());
        let result = expect_result(
            conn.request(kind.method(), params.as_deref(), timeout, None)
                .await,
            kind.method(),
        )?;
        let page: Page = serde_json::from_str(result.get())
            .map_err(|e| format!("its {} result is not valid: {e}", kind.method()))?;
        let Some(Value::Array(array)) = page.rest.get(kind.field()) else {
            return Err(format!(
                "its {} result has no `{}` array",
                kind.method(),
                kind.field()
            ));
        };
        for item in array {
            let Some(key) = item.get(kind.key()).and_then(Value::as_str) else {
                tracing::warn!(
                    upstream,
                    listing = kind.method(),
                    "Skipped an item without a `{}`.",
                    kind.key()
                );
                continue;
            };
            if items.len() == max_items {
                tracing::warn!(
                    upstream,
                    listing = kind.method(),
                    max_items,
                    "Listing is over the item limit; the rest is ignored."
                );
                return Ok(items);
            }
            let json = RawValue::from_string(item.to_string()).map_err(|e| e.to_string())?;
            items.push(UpstreamItem {
                key: key.to_owned(),
                json,
            });
        }
        match page.next_cursor {
            None => return Ok(items),
            Some(next) if next.is_empty() => {
                tracing::warn!(
                    upstream,
                    listing = kind.method(),
                    "Upstream sent an empty nextCursor; treating it as the end."
                );
                return Ok(items);
            }
            Some(next) if !seen.insert(next.clone()) => {
                tracing::warn!(upstream, listing = kind.method(), cursor = %next, "Upstream repeated a cursor; stopping there.");
                return Ok(items);
            }
            Some(next) => cursor = Some(next),
        }
    }
    tracing::warn!(
        upstream,
        listing = kind.method(),
        "Upstream listing has more than {MAX_PAGES} pages; stopping there."
    );
    Ok(items)
}

fn expect_result(
    outcome: Result<Reply, UpstreamError>,
    what: &str,
) -> Result<Box<RawValue>, String> {
    match outcome {
        Ok(Reply::Result(result)) => Ok(result),
        Ok(Reply::Error(error)) => {
            Err(format!("it answered {what} with an error: {}", error.get()))
        }
        Err(e) => Err(e.to_string()),
    }
}
