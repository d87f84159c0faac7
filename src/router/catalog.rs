//! A catalog snapshot: every ready upstream's tools, prompts, resources and templates, namespaced,
//! sorted by exposed name, with the exposed → (upstream, original) map that all routing goes through.

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use serde_json::value::RawValue;

use crate::config::CatalogConfig;
use crate::jsonrpc::{Members, raw_string};
use crate::mcp::ListKind;
use crate::mcp::names::{self, NameBudget, Prefix};
use crate::upstream::{ServerInfo, UpstreamCatalog, UpstreamHandle, UpstreamItem};

/// One exposed item.
#[derive(Debug)]
pub struct Entry {
    /// The name or URI hosts see.
    pub exposed: Box<str>,
    pub upstream: UpstreamHandle,
    /// The name or URI the upstream knows.
    pub original: Box<str>,
    /// The item as hosts receive it: the upstream's JSON with only the key rewritten.
    pub json: Box<RawValue>,
}

#[derive(Debug, Default)]
struct Listing {
    entries: Vec<Entry>,
    index: HashMap<Box<str>, usize>,
    /// A hash of every exposed item, to tell hosts whether this listing changed.
    fingerprint: u64,
}

/// An immutable view of the merged catalog.
#[derive(Debug)]
pub struct Snapshot {
    pub generation: u64,
    /// The catalog settings it was built with (page sizes are read from the snapshot being paged).
    config: Arc<CatalogConfig>,
    lists: BTreeMap<ListKind, Listing>,
    by_prefix: HashMap<String, UpstreamHandle>,
    ready: Vec<(UpstreamHandle, Arc<ServerInfo>)>,
}

impl Snapshot {
    pub fn empty(
        generation: u64,
        config: &Arc<CatalogConfig>,
        upstreams: &[UpstreamHandle],
    ) -> Self {
        Self {
            generation,
            config: Arc::clone(config),
            lists: BTreeMap::new(),
            by_prefix: prefix_map(upstreams),
            ready: Vec::new(),
        }
    }

    pub fn build(
        generation: u64,
        config: &Arc<CatalogConfig>,
        upstreams: &[UpstreamHandle],
        catalogs: &BTreeMap<String, UpstreamCatalog>,
    ) -> Self {
        let mut snapshot = Self::empty(generation, config, upstreams);
        for handle in upstreams {
            if let Some(catalog) = catalogs.get(handle.name()) {
                snapshot
                    .ready
                    .push((handle.clone(), Arc::clone(&catalog.info)));
            }
        }
        for kind in ListKind::ALL {
            let mut entries = Vec::new();
            for (handle, _) in &snapshot.ready {
                let Some(items) = catalogs.get(handle.name()).and_then(|c| c.lists.get(&kind))
                else {
                    continue;
                };
                entries.extend(
                    items
                        .iter()
                        .filter_map(|item| expose(kind, &config.name_budget, handle, item)),
                );
            }
            entries.sort_by(|a, b| a.exposed.cmp(&b.exposed));
            entries.dedup_by(|later, kept| {
                let duplicate = later.exposed == kept.exposed;
                if duplicate {
                    tracing::warn!(upstream = %later.upstream.name(), exposed = %later.exposed, listing = kind.method(), "Left out an item whose exposed name is already taken.");
                }
                duplicate
            });
            let index = entries
                .iter()
                .enumerate()
                .map(|(i, e)| (e.exposed.clone(), i))
                .collect();
            let mut hasher = std::hash::DefaultHasher::new();
            for e in &entries {
                e.json.get().hash(&mut hasher);
            }
            snapshot.lists.insert(
                kind,
                Listing {
                    entries,
                    index,
                    fingerprint: hasher.finish(),
                },
            );
        }
        snapshot
    }

    /// The items of one listing, in order.
    pub fn list(&self, kind: ListKind) -> &[Entry] {
        self.lists.get(&kind).map_or(&[], |l| &l.entries)
    }

    /// Changes whenever anything in the listing changes.
    pub fn fingerprint(&self, kind: ListKind) -> u64 {
        self.lists.get(&kind).map_or(0, |l| l.fingerprint)
    }

    /// The item exposed as `exposed`, if any.
    pub fn lookup(&self, kind: ListKind, exposed: &str) -> Option<&Entry> {
        let listing = self.lists.get(&kind)?;
        listing
            .index
            .get(exposed)
            .and_then(|&i| listing.entries.get(i))
    }

    /// The upstream and original name an exposed tool or prompt name routes to: the catalog's
    /// map, or — when the one upstream is unprefixed, its names passing through — the name
    /// itself, listed or not (that upstream answers for names it does not know, as it would
    /// without mcpmux).
    pub fn route_name<'a>(
        &'a self,
        kind: ListKind,
        exposed: &'a str,
    ) -> Option<(&'a UpstreamHandle, &'a str)> {
        if let Some(entry) = self.lookup(kind, exposed) {
            return Some((&entry.upstream, &entry.original));
        }
        self.by_prefix.get("").map(|h| (h, exposed))
    }

    /// The upstream an exposed URI belongs to and the upstream's own URI. Resources read through
    /// a template are not listed, so URIs route by their prefix, which names one upstream exactly.
    pub fn route_uri<'a>(&self, exposed: &'a str) -> Option<(&UpstreamHandle, &'a str)> {
        // An unprefixed upstream is the only one configured: every URI is its own.
        if let Some(h) = self.by_prefix.get("") {
            return Some((h, exposed));
        }
        let (prefix, uri) = names::split_uri(exposed)?;
        self.by_prefix.get(prefix).map(|h| (h, uri))
    }

    /// The configured upstream with `prefix`, ready or not.
    pub fn upstream(&self, prefix: &str) -> Option<&UpstreamHandle> {
        self.by_prefix.get(prefix)
    }

    /// Every configured upstream, ready or not.
    pub fn upstreams(&self) -> impl Iterator<Item = &UpstreamHandle> {
        self.by_prefix.values()
    }

    /// Upstreams whose catalog is in this snapshot, in name order, with what they said in `initialize`.
    pub fn ready(&self) -> &[(UpstreamHandle, Arc<ServerInfo>)] {
        &self.ready
    }

    /// Ready upstreams whose capabilities have `pointer` (e.g. `/logging`, `/tasks/list`) set to
    /// something other than `null` or `false`.
    pub fn offering<'a>(&'a self, pointer: &'a str) -> impl Iterator<Item = &'a UpstreamHandle> {
        self.ready
            .iter()
            .filter(move |(_, info)| {
                info.capabilities
                    .pointer(pointer)
                    .is_some_and(|v| !v.is_null() && v != &serde_json::Value::Bool(false))
            })
            .map(|(h, _)| h)
    }

    /// The catalog settings this snapshot was built with.
    pub fn config(&self) -> &CatalogConfig {
        &self.config
    }
}

fn prefix_map(upstreams: &[UpstreamHandle]) -> HashMap<String, UpstreamHandle> {
    upstreams
        .iter()
        .map(|h| (h.prefix().as_str().to_owned(), h.clone()))
        .collect()
}

/// Namespaces one upstream item; `None` (with a warning) when it cannot be exposed.
fn expose(
    kind: ListKind,
    budget: &NameBudget,
    handle: &UpstreamHandle,
    item: &UpstreamItem,
) -> Option<Entry> {
    let prefix: &Prefix = handle.prefix();
    let exposed = if kind.is_uri() {
        Some(names::expose_uri(prefix, &item.key))
    } else {
        budget.expose(prefix, &item.key)
    };
    let Some(exposed) = exposed else {
        tracing::warn!(upstream = %handle.name(), name = %item.key, "Left out an item whose name cannot fit the name budget.");
        return None;
    };
    let Some(mut members) = Members::of(&item.json) else {
        tracing::warn!(upstream = %handle.name(), name = %item.key, "Left out an item that is not a JSON object.");
        return None;
    };
    let exposed_raw = raw_string(&exposed);
    members.insert(kind.key(), &exposed_raw);
    let json = members.to_raw();
    Some(Entry {
        exposed: exposed.into(),
        upstream: handle.clone(),
        original: item.key.as_str().into(),
        json,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::UpstreamConfig;

    fn handle(name: &str) -> UpstreamHandle {
        UpstreamHandle::new(
            UpstreamConfig {
                name: name.into(),
                prefix: Prefix::parse(name).unwrap_or_else(|e| panic!("{e}")),
                transport: crate::config::Transport::Stdio(crate::config::StdioConfig {
                    command: "true".into(),
                    args: vec![],
                    env: Default::default(),
                    inherit_env: vec![],
                    cwd: None,
                }),
                enabled: true,
                policy: Default::default(),
                isolation: Default::default(),
                roots: None,
                audit_redaction: None,
                audit_redaction_tools: Default::default(),
            },
            None,
            None,
        )
    }

    fn catalog(tools: &[&str]) -> UpstreamCatalog {
        let info = Arc::new(ServerInfo {
            protocol_version: crate::mcp::version::Version::V2025_11_25,
            capabilities: serde_json::json!({"tools": {}}),
            server_info: serde_json::Value::Null,
            instructions: None,
        });
        let items = tools
            .iter()
            .map(|t| UpstreamItem {
                key: (*t).to_owned(),
                json: serde_json::value::to_raw_value(
                    &serde_json::json!({"name": t, "x-extra": {"k": [1, 2]}, "inputSchema": {}}),
                )
                .unwrap_or_else(|e| panic!("{e}")),
            })
            .collect();
        UpstreamCatalog {
            info,
            lists: BTreeMap::from([(ListKind::Tools, Arc::new(items))]),
        }
    }

    #[test]
    fn exposed_names_round_trip_through_the_map() {
        let ups = vec![handle("b"), handle("a")];
        let long = "n".repeat(100);
        let catalogs = BTreeMap::from([
            ("a".to_owned(), catalog(&["echo", "sum"])),
            ("b".to_owned(), catalog(&["echo", &long])),
        ]);
        let config = Arc::new(CatalogConfig::default());
        let s = Snapshot::build(1, &config, &ups, &catalogs);
        let exposed: Vec<&str> = s
            .list(ListKind::Tools)
            .iter()
            .map(|e| &*e.exposed)
            .collect();
        assert_eq!(exposed.len(), 4);
        assert!(
            exposed.windows(2).all(|w| w[0] < w[1]),
            "sorted and unique: {exposed:?}"
        );
        for e in s.list(ListKind::Tools) {
            let found = s
                .lookup(ListKind::Tools, &e.exposed)
                .map(|f| (f.upstream.name().to_owned(), f.original.to_string()));
            assert_eq!(
                found,
                Some((e.upstream.name().to_owned(), e.original.to_string()))
            );
            let v: serde_json::Value = serde_json::from_str(e.json.get()).unwrap_or_default();
            assert_eq!(v["name"], *e.exposed);
            assert_eq!(v["x-extra"], serde_json::json!({"k": [1, 2]}));
        }
        assert!(s.lookup(ListKind::Tools, "a__nope").is_none());
        assert_eq!(
            s.route_uri("a+file:///x").map(|(h, u)| (h.name(), u)),
            Some(("a", "file:///x"))
        );
    }
}
