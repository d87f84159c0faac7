//! The start of a connection: the era it speaks — `server/discover` first, as the transports'
//! backward-compatibility sections say, unless the upstream is configured `legacy`, then the
//! `initialize` handshake for a server that does not answer as a 2026-07-28 server does — and
//! then every listing the server offers, read to its last page with guards against looping and
//! runaway cursors.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use super::catalog::{ServerInfo, UpstreamCatalog, UpstreamItem};
use super::connection::Connection;
use super::error::{HandshakeError, Reply, UpstreamError};
use super::modern::{self, Declared, Verdict};
use crate::config::{ListingBudget, Protocol};
use crate::jsonrpc::codes;
use crate::mcp::ListKind;
use crate::mcp::method::Method;
use crate::mcp::version::Version;

/// Most pages read from one listing before giving up on it.
const MAX_PAGES: usize = 10_000;
/// Longest the probe waits for an answer to `server/discover` before taking the server for a
/// handshake-era one (some never answer a request before `initialize`).
const PROBE_WAIT: Duration = Duration::from_secs(10);

/// How a connection opened.
#[derive(Debug)]
pub(super) enum Opened {
    /// It speaks the era the server info names.
    Ready(ServerInfo),
    /// The process ended on the probe, as some handshake-era servers do on a request before
    /// `initialize`: it is started again and spoken to with the handshake.
    EndedOnProbe,
}

/// Finds the era the server speaks, as `protocol` allows, and opens the connection in it: a
/// 2026-07-28 server is described by its `server/discover` result, any other by `initialize`.
/// `remote` says whether a missing answer is an outage (HTTP) rather than a verdict (stdio).
pub(super) async fn open(
    conn: &Arc<Connection>,
    protocol: Protocol,
    remote: bool,
    timeout: Duration,
) -> Result<Opened, HandshakeError> {
    if protocol == Protocol::Legacy {
        return (initialize(conn, timeout).await)
            .map(Opened::Ready)
            .map_err(|refusal| match refusal {
                InitializeFailed::Modern(versions) => HandshakeError::RefusedLegacy(versions),
                InitializeFailed::Other(why) => why,
            });
    }
    let wait = match protocol {
        Protocol::Modern => timeout,
        _ => timeout.min(PROBE_WAIT),
    };
    let verdict = match discover(conn, wait).await {
        Ok(verdict) => verdict,
        Err(_) if conn.closed().is_some() && !remote && protocol == Protocol::Auto => {
            return Ok(Opened::EndedOnProbe);
        }
        Err(UpstreamError::Timeout { .. }) if !remote && protocol == Protocol::Auto => {
            Verdict::Legacy
        }
        Err(e) => return Err(HandshakeError::NoDiscover(e)),
    };
    match (verdict, protocol) {
        (Verdict::Modern(info), _) => Ok(Opened::Ready(modern_opened(conn, info))),
        (Verdict::Serves(versions), _) => Err(HandshakeError::ServesOther(versions)),
        (Verdict::Legacy, Protocol::Modern) => Err(HandshakeError::NotModern),
        (Verdict::Legacy, _) => match initialize(conn, timeout).await {
            Ok(info) => Ok(Opened::Ready(info)),
            // A modern-only server that was slow to answer the probe refuses the handshake
            // naming 2026-07-28: it is asked again.
            Err(InitializeFailed::Modern(versions)) => match discover(conn, timeout).await {
                Ok(Verdict::Modern(info)) => Ok(Opened::Ready(modern_opened(conn, info))),
                _ => Err(HandshakeError::ServesOther(versions)),
            },
            Err(InitializeFailed::Other(why)) => Err(why),
        },
    }
}

/// The connection speaks 2026-07-28 from now on.
fn modern_opened(conn: &Arc<Connection>, info: ServerInfo) -> ServerInfo {
    conn.set_modern();
    info
}

/// The probe: `server/discover` with mcpmux's envelope, and what its answer says of the era.
/// An error of mcpmux's own (the server could not be reached, a 5xx) is no verdict.
async fn discover(conn: &Arc<Connection>, wait: Duration) -> Result<Verdict, UpstreamError> {
    let (params, _) = modern::enveloped(Method::Discover.as_str(), None, &Declared::default());
    match conn
        .request(Method::Discover.as_str(), Some(&params), wait, None)
        .await?
    {
        Reply::Result(result) => Ok(modern::discovered(&result)),
        Reply::Error(error) if own_error(&error) => Err(UpstreamError::Failed {
            upstream: String::new(),
            reason: error.get().to_owned(),
        }),
        Reply::Error(error) => Ok(modern::refused(&error)),
    }
}

/// Whether an error answer is mcpmux's own (its transport could not deliver the request).
fn own_error(error: &RawValue) -> bool {
    #[derive(Deserialize)]
    struct Code {
        code: i64,
    }
    serde_json::from_str::<Code>(error.get()).is_ok_and(|e| e.code == codes::UPSTREAM_UNAVAILABLE)
}

/// Why `initialize` failed: a modern server's refusal (naming what it serves), or anything else.
enum InitializeFailed {
    Modern(Vec<String>),
    Other(HandshakeError),
}

impl From<HandshakeError> for InitializeFailed {
    fn from(why: HandshakeError) -> Self {
        Self::Other(why)
    }
}

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
async fn initialize(
    conn: &Arc<Connection>,
    timeout: Duration,
) -> Result<ServerInfo, InitializeFailed> {
    let params = serde_json::json!({
        "protocolVersion": Version::LATEST.as_str(),
        // mcpmux forwards these to the host session a request comes from (or answers roots
        // itself when the upstream has configured roots).
        // …and relays MCP Apps: tools' pages and a page's own calls (a server may list its app
        // tools only to a client that renders them).
        "capabilities": {
            "sampling": {},
            "elicitation": {"form": {}, "url": {}},
            "roots": {"listChanged": false},
            "extensions": {
                crate::mcp::apps::UI_EXTENSION: {"mimeTypes": [crate::mcp::apps::APP_MIME_TYPE]},
            },
        },
        "clientInfo": {"name": "mcpmux", "version": env!("CARGO_PKG_VERSION")},
    })
    .to_string();
    let answer = conn
        .request(Method::Initialize.as_str(), Some(&params), timeout, None)
        .await;
    if let Ok(Reply::Error(error)) = &answer {
        if let Verdict::Serves(versions) = modern::refused(error) {
            return Err(InitializeFailed::Modern(versions));
        }
    }
    let result = expect_result(answer, Method::Initialize.as_str())?;
    let init: InitializeResult =
        serde_json::from_str(result.get()).map_err(|source| HandshakeError::Invalid {
            what: Method::Initialize.as_str(),
            source,
        })?;
    let protocol_version = Version::known(&init.protocol_version)
        .ok_or_else(|| HandshakeError::UnknownVersion(init.protocol_version.clone()))?;
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
    budget: ListingBudget,
    upstream: &str,
) -> Result<UpstreamCatalog, HandshakeError> {
    let mut lists = BTreeMap::new();
    let mut ttl_ms = BTreeMap::new();
    for kind in ListKind::ALL {
        if info.offers(kind) {
            let listing = read_list(conn, kind, timeout, budget, upstream).await?;
            lists.insert(kind, Arc::new(listing.items));
            if let Some(ttl) = listing.ttl_ms {
                ttl_ms.insert(kind, ttl);
            }
        }
    }
    Ok(UpstreamCatalog {
        info,
        lists,
        ttl_ms,
    })
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Page {
    next_cursor: Option<String>,
    #[serde(flatten)]
    rest: serde_json::Map<String, Value>,
}

/// Reads one listing to its last page. Stops (with a warning, keeping what it read) at a repeated
/// or empty cursor, past the budget's items or [`MAX_PAGES`] pages; leaves out (with a warning)
/// an item over the budget's definition size; fails when the listing is over the budget's
/// bytes (reading no more of it).
pub(super) async fn read_list(
    conn: &Arc<Connection>,
    kind: ListKind,
    timeout: Duration,
    budget: ListingBudget,
    upstream: &str,
) -> Result<Listing, HandshakeError> {
    let (listing, param_headers) = read_pages(conn, kind, timeout, budget, upstream).await?;
    if kind == ListKind::Tools && conn.is_modern() {
        conn.set_param_headers(param_headers);
    }
    Ok(listing)
}

/// One listing as read: its items, and how long the upstream said it stays fresh.
#[derive(Debug)]
pub(super) struct Listing {
    pub items: Vec<UpstreamItem>,
    /// The shortest `ttlMs` of its pages (a 2026-07-28 upstream's caching hint).
    pub ttl_ms: Option<u64>,
}

/// The tools whose parameters have headers, by name.
type ParamHeaders = std::collections::HashMap<String, Vec<crate::mcp::param_headers::ParamHeader>>;

/// [`read_list`]'s pages, and (for a 2026-07-28 upstream's tools) their parameter headers.
// Long: reading every page of one listing: the page loop, the item and byte budgets, the cursor
// checks and the 2026-07-28 parameter headers are one loop's state.
async fn read_pages(
    conn: &Arc<Connection>,
    kind: ListKind,
    timeout: Duration,
    budget: ListingBudget,
    upstream: &str,
) -> Result<(Listing, ParamHeaders), HandshakeError> {
    let mut items = Vec::new();
    let mut bytes = 0usize;
    let mut ttl_ms: Option<u64> = None;
    let mut seen = HashSet::new();
    // A 2026-07-28 upstream's tools with `x-mcp-header` parameters (an invalid one is left out).
    let headed = kind == ListKind::Tools && conn.is_modern();
    let mut param_headers = std::collections::HashMap::new();
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
        let page: Page =
            serde_json::from_str(result.get()).map_err(|source| HandshakeError::Invalid {
                what: kind.method(),
                source,
            })?;
        if let Some(ttl) = page.rest.get("ttlMs").and_then(Value::as_u64) {
            ttl_ms = Some(ttl_ms.map_or(ttl, |t| t.min(ttl)));
        }
        let Some(Value::Array(array)) = page.rest.get(kind.field()) else {
            return Err(HandshakeError::NoList {
                method: kind.method(),
                field: kind.field(),
            });
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
            if headed {
                match crate::mcp::param_headers::annotations(&item["inputSchema"]) {
                    Ok(headers) if headers.is_empty() => {}
                    Ok(headers) => {
                        param_headers.insert(key.to_owned(), headers);
                    }
                    Err(why) => {
                        tracing::warn!(
                            upstream,
                            tool = key,
                            "Left out a tool whose definition is invalid: {why}."
                        );
                        continue;
                    }
                }
            }
            if items.len() == budget.items {
                tracing::warn!(
                    upstream,
                    listing = kind.method(),
                    max_items = budget.items,
                    "Listing is over the item limit; the rest is ignored."
                );
                return Ok((Listing { items, ttl_ms }, param_headers));
            }
            let json = RawValue::from_string(item.to_string()).map_err(|source| {
                HandshakeError::Invalid {
                    what: kind.method(),
                    source,
                }
            })?;
            let size = json.get().len();
            if size > budget.definition_bytes {
                tracing::warn!(
                    upstream,
                    listing = kind.method(),
                    item = %crate::shown::cut(key, 120),
                    bytes = size,
                    max_definition_bytes = budget.definition_bytes,
                    "Left out an item whose definition is over catalog.max_definition_bytes; raise it to list the item."
                );
                continue;
            }
            bytes += size;
            if bytes > budget.bytes {
                return Err(HandshakeError::OverBudget {
                    method: kind.method(),
                    max: budget.bytes,
                });
            }
            items.push(UpstreamItem {
                key: key.to_owned(),
                json,
            });
        }
        match page.next_cursor {
            None => return Ok((Listing { items, ttl_ms }, param_headers)),
            Some(next) if next.is_empty() => {
                tracing::warn!(
                    upstream,
                    listing = kind.method(),
                    "Upstream sent an empty nextCursor; treating it as the end."
                );
                return Ok((Listing { items, ttl_ms }, param_headers));
            }
            Some(next) if !seen.insert(next.clone()) => {
                tracing::warn!(upstream, listing = kind.method(), cursor = %next, "Upstream repeated a cursor; stopping there.");
                return Ok((Listing { items, ttl_ms }, param_headers));
            }
            Some(next) => cursor = Some(next),
        }
    }
    tracing::warn!(
        upstream,
        listing = kind.method(),
        "Upstream listing has more than {MAX_PAGES} pages; stopping there."
    );
    Ok((Listing { items, ttl_ms }, param_headers))
}

fn expect_result(
    outcome: Result<Reply, UpstreamError>,
    what: &'static str,
) -> Result<Box<RawValue>, HandshakeError> {
    match outcome {
        Ok(Reply::Result(result)) => Ok(result),
        Ok(Reply::Error(error)) => Err(HandshakeError::Answered {
            what,
            error: error.get().to_owned(),
        }),
        Err(e) => Err(HandshakeError::Request(e)),
    }
}
