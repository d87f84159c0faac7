//! What an upstream offers, as last read ([`UpstreamCatalog`]), and where a shared upstream
//! publishes it ([`CatalogSink`], which the router implements): the upstream knows only this
//! trait, never the router, and the router subscribes by being the sink.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;
use serde_json::value::RawValue;

use crate::config::ListingBudget;
use crate::mcp::ListKind;
use crate::mcp::version::Version;

/// What an upstream said about itself in `initialize`.
#[derive(Debug, Clone)]
pub struct ServerInfo {
    pub protocol_version: Version,
    pub capabilities: Value,
    pub server_info: Value,
    pub instructions: Option<String>,
}

impl ServerInfo {
    /// Whether the server declared the capability behind `kind`.
    pub fn offers(&self, kind: ListKind) -> bool {
        let declared = match kind.is_extension() {
            true => self.capabilities.get("extensions"),
            false => Some(&self.capabilities),
        };
        declared
            .and_then(|d| d.get(kind.capability()))
            .is_some_and(|c| !c.is_null())
    }
}

/// One item of an upstream's listing: its own key (name or URI) and its JSON, as the upstream sent it.
#[derive(Debug, Clone)]
pub struct UpstreamItem {
    pub key: String,
    pub json: Box<RawValue>,
}

/// Everything an upstream offers, as last read.
#[derive(Debug, Clone)]
pub struct UpstreamCatalog {
    pub info: Arc<ServerInfo>,
    pub lists: BTreeMap<ListKind, Arc<Vec<UpstreamItem>>>,
    /// How long a 2026-07-28 upstream said each listing stays fresh (`ttlMs`, the shortest of its
    /// pages); a handshake-era upstream promises nothing (absent).
    pub ttl_ms: BTreeMap<ListKind, u64>,
}

impl UpstreamCatalog {
    /// How long this upstream's `kind` listing may be cached: 0 when it did not say.
    pub fn ttl_ms(&self, kind: ListKind) -> u64 {
        self.ttl_ms.get(&kind).copied().unwrap_or(0)
    }
}

/// Where a shared upstream's catalog goes. `publish` returns once the catalog is live, so an
/// upstream reported ready afterwards is already in the catalog hosts read.
pub trait CatalogSink: Send + Sync {
    fn publish(&self, upstream: &str, catalog: UpstreamCatalog);
    /// The upstream's catalog is gone (it is in a crash loop, or was removed).
    fn withdraw(&self, upstream: &str);
}

/// A shared upstream's tie to the catalog: where it publishes and how much of a listing is taken.
#[derive(Clone)]
pub struct CatalogLink {
    pub sink: Arc<dyn CatalogSink>,
    /// How much of a listing is read (guards against runaway servers).
    pub budget: ListingBudget,
}

impl std::fmt::Debug for CatalogLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CatalogLink")
            .field("budget", &self.budget)
            .finish()
    }
}
