//! A catalog snapshot: every ready upstream's tools, prompts, resources and templates, namespaced,
//! sorted by exposed name, with the exposed → (upstream, original) map that all routing goes through.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, OnceLock};

use serde_json::value::RawValue;

use super::search::{ToolIndex, ToolText};
use super::search_mode::{Listed, SearchView};

use crate::config::{CatalogConfig, Profile};
use crate::mcp::ListKind;
use crate::mcp::apps::ToolApp;
use crate::mcp::names::{self, Prefix};
use crate::mcp::param_headers::ParamHeader;
use crate::mcp::{template, uri};
use crate::upstream::{ServerInfo, UpstreamHandle};

mod apps;
mod build;

pub use apps::AppRoute;

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
    /// A tool's `x-mcp-header` parameters, which a 2026-07-28 host mirrors into headers that
    /// mcpmux checks (read when the catalog is built, never per call).
    pub param_headers: Option<Arc<[ParamHeader]>>,
    /// A tool's MCP App (its page, and whether only the page may call it), when it has one.
    pub app: Option<ToolApp>,
}

#[derive(Debug, Default)]
struct Listing {
    entries: Vec<Entry>,
    index: HashMap<Box<str>, usize>,
    /// A hash of every exposed item, to tell hosts whether this listing changed.
    fingerprint: u64,
    /// How long hosts may cache it: the shortest `ttlMs` of the upstreams it merges (0 when one
    /// of them said none, as a handshake-era upstream never does).
    ttl_ms: u64,
}

/// Which view of the catalog a snapshot is: the whole catalog (view 0, no profile) or one
/// profile's, with the catalog settings it pages and names with.
#[derive(Debug, Clone)]
pub struct Lens {
    pub view: u16,
    pub profile: Option<Arc<Profile>>,
    pub config: Arc<CatalogConfig>,
}

/// An immutable view of the merged catalog: everything, or what one profile lets through.
#[derive(Debug)]
pub struct Snapshot {
    pub generation: u64,
    /// Which view this is (cursors name it, so a cursor made for one profile fails in another).
    pub view: u16,
    /// The profile it is the view of (`None`: the whole catalog).
    profile: Option<Arc<Profile>>,
    /// The catalog settings it was built with (page sizes are read from the snapshot being paged).
    config: Arc<CatalogConfig>,
    lists: BTreeMap<ListKind, Listing>,
    /// Whether a tool has `x-mcp-header` parameters (few catalogs have one: a call is then
    /// checked against its headers without a lookup).
    param_headers: bool,
    by_prefix: HashMap<String, UpstreamHandle>,
    ready: Vec<(UpstreamHandle, Arc<ServerInfo>)>,
    /// Per upstream, the changed tools this view withholds until they are approved.
    withheld: HashMap<String, BTreeSet<String>>,
    /// What hosts list of the tools in a search-mode profile's view.
    search: Option<SearchView>,
    /// The search index over the view's tools: built with the view in search mode, else at the
    /// first search (a person's, through the admin API); carried over from the previous
    /// generation while the tools stay the same.
    index: OnceLock<Arc<ToolIndex>>,
    /// What it knows of the MCP Apps in it.
    apps: apps::Apps,
    /// The directories (exposed, canonical) of the skills its profile hides: their files are
    /// hidden with them.
    hidden_skills: Vec<String>,
}

/// The items a listing shows hosts, in order: the catalog's entries, or a search-mode view's.
#[derive(Debug, Clone, Copy)]
pub enum Shown<'a> {
    Catalog(&'a [Entry]),
    Search(&'a [Listed]),
    /// The entries at these positions (the tools a host that renders no apps is shown).
    Picked(&'a [Entry], &'a [usize]),
}

impl<'a> Shown<'a> {
    pub fn len(self) -> usize {
        match self {
            Self::Catalog(items) => items.len(),
            Self::Search(items) => items.len(),
            Self::Picked(_, picked) => picked.len(),
        }
    }

    /// Item `i`'s exposed name and JSON.
    pub fn item(self, i: usize) -> Option<(&'a str, &'a RawValue)> {
        match self {
            Self::Catalog(items) => items.get(i).map(|e| (&*e.exposed, &*e.json)),
            Self::Search(items) => items.get(i).map(|e| (&*e.exposed, &*e.json)),
            Self::Picked(items, picked) => (picked.get(i))
                .and_then(|at| items.get(*at))
                .map(|e| (&*e.exposed, &*e.json)),
        }
    }

    /// Where the first item named after `last` is (items are sorted by exposed name).
    pub fn after(self, last: &str) -> usize {
        match self {
            Self::Catalog(items) => items.partition_point(|e| *e.exposed <= *last),
            Self::Search(items) => items.partition_point(|e| *e.exposed <= *last),
            Self::Picked(items, picked) => {
                picked.partition_point(|at| items.get(*at).is_some_and(|e| *e.exposed <= *last))
            }
        }
    }
}

impl Snapshot {
    /// A view with no items yet: it knows only which upstreams it holds.
    pub fn empty(generation: u64, lens: &Lens, upstreams: &[UpstreamHandle]) -> Self {
        let profile = lens.profile.as_deref();
        let by_prefix = upstreams
            .iter()
            .filter(|h| profile.is_none_or(|p| p.holds(h.name())))
            .map(|h| {
                let prefix = Profile::prefix_for(profile, h.prefix());
                (prefix.as_str().to_owned(), h.clone())
            })
            .collect();
        Self {
            generation,
            view: lens.view,
            profile: lens.profile.clone(),
            config: Arc::clone(&lens.config),
            lists: BTreeMap::new(),
            param_headers: false,
            by_prefix,
            ready: Vec::new(),
            withheld: HashMap::new(),
            search: None,
            index: OnceLock::new(),
            apps: apps::Apps::default(),
            hidden_skills: Vec::new(),
        }
    }

    /// The search index over this view's tools (built now if it was not yet).
    pub fn tool_index(&self) -> &Arc<ToolIndex> {
        self.index.get_or_init(|| {
            let tools = self.list(ListKind::Tools);
            let definitions: Vec<serde_json::Value> = (tools.iter())
                .map(|e| serde_json::from_str(e.json.get()).unwrap_or_default())
                .collect();
            let texts = (tools.iter().zip(&definitions)).map(|(e, d)| ToolText::of(&e.exposed, d));
            Arc::new(ToolIndex::build(texts))
        })
    }

    /// The search-mode listing, when this is the view of a search-mode profile.
    pub fn search_mode(&self) -> Option<&SearchView> {
        self.search.as_ref()
    }

    /// The items of one listing as hosts see them: in a search-mode view, tools are the search
    /// tools and the `always` ones.
    pub fn shown(&self, kind: ListKind) -> Shown<'_> {
        match (&self.search, kind) {
            (Some(search), ListKind::Tools) => Shown::Search(search.listed()),
            _ => Shown::Catalog(self.list(kind)),
        }
    }

    /// Whether `exposed` (a URI) is, or lies inside, the directory of a skill this view hides.
    pub fn hides_skill(&self, exposed: &str) -> bool {
        if self.hidden_skills.is_empty() {
            return false;
        }
        let canonical = uri::canonical(exposed);
        self.hidden_skills.iter().any(|root| {
            canonical
                .strip_prefix(root.as_str())
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        })
    }

    /// [`Self::shown`] for a host that renders no MCP Apps (`renders_apps` false): the tools only
    /// an app's page may call are left out.
    pub fn shown_to(&self, kind: ListKind, renders_apps: bool) -> Shown<'_> {
        match (kind, renders_apps, &self.search) {
            (ListKind::Tools, false, None) => {
                self.tools_for_models().unwrap_or_else(|| self.shown(kind))
            }
            _ => self.shown(kind),
        }
    }

    /// How long hosts may cache a listing of this view (`ttlMs`).
    pub fn ttl_ms(&self, kind: ListKind) -> u64 {
        self.lists.get(&kind).map_or(0, |l| l.ttl_ms)
    }

    /// The items of one listing, in order.
    pub fn list(&self, kind: ListKind) -> &[Entry] {
        self.lists.get(&kind).map_or(&[], |l| &l.entries)
    }

    /// How many items each upstream has in each listing of this view (status and `/metrics`).
    pub fn counts(&self) -> HashMap<(&str, ListKind), usize> {
        let mut counts = HashMap::new();
        for kind in ListKind::ALL {
            for entry in self.list(kind) {
                *counts.entry((entry.upstream.name(), kind)).or_default() += 1;
            }
        }
        counts
    }

    /// Changes whenever anything hosts see in the listing changes.
    pub fn fingerprint(&self, kind: ListKind) -> u64 {
        match (&self.search, kind) {
            (Some(search), ListKind::Tools) => search.fingerprint(),
            _ => self.lists.get(&kind).map_or(0, |l| l.fingerprint),
        }
    }

    /// The item exposed as `exposed`, if any.
    pub fn lookup(&self, kind: ListKind, exposed: &str) -> Option<&Entry> {
        let listing = self.lists.get(&kind)?;
        listing
            .index
            .get(exposed)
            .and_then(|&i| listing.entries.get(i))
    }

    /// The `x-mcp-header` parameters of the exposed tool `name`, when it has any.
    pub fn param_headers(&self, name: &str) -> Option<Arc<[ParamHeader]>> {
        if !self.param_headers {
            return None;
        }
        self.lookup(ListKind::Tools, name)?.param_headers.clone()
    }

    /// The upstream and original name an exposed tool or prompt name routes to: the catalog's
    /// map, or — when the one upstream is unprefixed, its names passing through — the name
    /// itself, listed or not (that upstream answers for names it does not know, as it would
    /// without mcpmux), unless the profile would hide it.
    pub fn route_name<'a>(
        &'a self,
        kind: ListKind,
        exposed: &'a str,
    ) -> Option<(&'a UpstreamHandle, &'a str)> {
        if let Some(entry) = self.lookup(kind, exposed) {
            return Some((&entry.upstream, &entry.original));
        }
        let passes = self
            .profile
            .as_deref()
            .is_none_or(|p| p.passes_unlisted(kind, exposed));
        let withheld = |h: &UpstreamHandle| {
            kind == ListKind::Tools
                && self
                    .withheld
                    .get(h.name())
                    .is_some_and(|w| w.contains(exposed))
        };
        self.by_prefix
            .get("")
            .filter(|h| passes && !withheld(h))
            .map(|h| (h, exposed))
    }

    /// The upstream an exposed resource URI (`kind` Resources) or URI template (`kind`
    /// ResourceTemplates) belongs to and the upstream's own form. Resources read through a
    /// template are not listed, so URIs route by their prefix, which names one upstream exactly.
    /// In a profile that filters resources or templates, a URI must also be listed in the view or
    /// come from a template the view lists: a hidden template's resources are hidden too. Such a
    /// profile decides on the URI's canonical form (RFC 3986 §6.2.2, [`uri::canonical`]) and
    /// sends the upstream what it decided on: the upstream's own form of a listed URI, else the
    /// canonical form.
    pub fn route_uri<'a>(
        &self,
        kind: ListKind,
        exposed: &'a str,
    ) -> Option<(&UpstreamHandle, Cow<'a, str>)> {
        let decided = match self.profile.as_deref() {
            Some(p) if Self::filters_uris(p) => {
                if !self.shows_uri(p, kind, exposed) {
                    return None;
                }
                let canonical = uri::canonical(exposed);
                let listed = (self.lookup(kind, exposed)).or_else(|| self.lookup(kind, &canonical));
                if let Some(entry) = listed {
                    return Some((&entry.upstream, Cow::Owned(entry.original.to_string())));
                }
                canonical
            }
            _ => Cow::Borrowed(exposed),
        };
        // An unprefixed upstream is the only one in view: every URI is its own.
        if let Some(h) = self.by_prefix.get("") {
            return Some((h, decided));
        }
        let (prefix, original) = match decided {
            Cow::Borrowed(exposed) => {
                let (prefix, uri) = names::split_uri(exposed)?;
                (prefix.to_owned(), uri)
            }
            Cow::Owned(canonical) => {
                let (prefix, uri) = names::split_uri(&canonical)?;
                (prefix.to_owned(), Cow::Owned(uri.into_owned()))
            }
        };
        self.by_prefix.get(prefix.as_str()).map(|h| (h, original))
    }

    /// Whether the view shows the resource (or template) exposed as `exposed`, in a profile that
    /// filters resources or templates: its canonical form passes the profile's globs, and it is
    /// listed or (a resource) a listed template could make it. Without such a profile, every URI
    /// of a held upstream is shown.
    pub fn shows_uri(&self, profile: &Profile, kind: ListKind, exposed: &str) -> bool {
        let canonical = uri::canonical(exposed);
        if !profile.filter.admits(kind, &canonical) {
            return false;
        }
        let listed = self.lookup(kind, exposed).is_some()
            || (matches!(canonical, Cow::Owned(_)) && self.lookup(kind, &canonical).is_some());
        match kind {
            ListKind::Resources => {
                listed
                    || (self.list(ListKind::ResourceTemplates).iter())
                        .any(|t| template::matches(&uri::canonical(&t.exposed), &canonical))
            }
            _ => listed,
        }
    }

    /// Whether `profile` has globs on resources or templates (then its view decides on URIs).
    pub fn filters_uris(profile: &Profile) -> bool {
        profile.filter.restricts(ListKind::Resources)
            || profile.filter.restricts(ListKind::ResourceTemplates)
    }

    /// The upstream an exposed task id belongs to and the upstream's own id. Task ids carry the
    /// upstream's configured prefix in every view (they are opaque to hosts).
    pub fn route_task<'a>(&self, exposed: &'a str) -> Option<(&UpstreamHandle, Cow<'a, str>)> {
        let mut held = self.by_prefix.values();
        if let Some(bare) = held.clone().find(|h| h.prefix().is_none()) {
            return Some((bare, Cow::Borrowed(exposed)));
        }
        let (prefix, id) = names::split_uri(exposed)?;
        held.find(|h| h.prefix().as_str() == prefix)
            .map(|h| (h, id))
    }

    /// The name of the profile this is the view of (`None`: the whole catalog).
    pub fn profile_name(&self) -> Option<&str> {
        self.profile.as_deref().map(|p| p.name.as_str())
    }

    /// The prefix `upstream`'s names and URIs carry in this view.
    pub fn prefix_of<'a>(&self, upstream: &'a UpstreamHandle) -> &'a Prefix {
        Profile::prefix_for(self.profile.as_deref(), upstream.prefix())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::UpstreamConfig;
    use crate::upstream::{UpstreamCatalog, UpstreamItem};

    fn handle(name: &str) -> UpstreamHandle {
        UpstreamHandle::new(UpstreamConfig::for_tests(name), None, None)
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
            ttl_ms: BTreeMap::new(),
        }
    }

    #[test]
    fn a_view_may_be_cached_as_long_as_its_shortest_lived_upstream_says() {
        let ups = vec![handle("a"), handle("b"), handle("c")];
        let with_ttl = |tools: &[&str], ttl: Option<u64>| {
            let mut catalog = catalog(tools);
            if let Some(ttl) = ttl {
                catalog.ttl_ms.insert(ListKind::Tools, ttl);
            }
            catalog
        };
        let lens = Lens {
            view: 0,
            profile: None,
            config: Arc::new(CatalogConfig::default()),
        };
        let modern = BTreeMap::from([
            ("a".to_owned(), with_ttl(&["x"], Some(60_000))),
            ("b".to_owned(), with_ttl(&["y"], Some(5_000))),
        ]);
        let s = Snapshot::build(1, &lens, &ups, &modern, &BTreeMap::new(), None);
        assert_eq!(s.ttl_ms(ListKind::Tools), 5_000);
        assert_eq!(s.ttl_ms(ListKind::Prompts), 0, "no upstream lists prompts");
        let mixed = BTreeMap::from([
            ("a".to_owned(), with_ttl(&["x"], Some(60_000))),
            ("c".to_owned(), with_ttl(&["z"], None)),
        ]);
        let s = Snapshot::build(1, &lens, &ups, &mixed, &BTreeMap::new(), None);
        assert_eq!(s.ttl_ms(ListKind::Tools), 0, "one that promised nothing");
    }

    #[test]
    fn exposed_names_round_trip_through_the_map() {
        let ups = vec![handle("b"), handle("a")];
        let long = "n".repeat(100);
        let catalogs = BTreeMap::from([
            ("a".to_owned(), catalog(&["echo", "sum"])),
            ("b".to_owned(), catalog(&["echo", &long])),
        ]);
        let lens = Lens {
            view: 0,
            profile: None,
            config: Arc::new(CatalogConfig::default()),
        };
        let s = Snapshot::build(1, &lens, &ups, &catalogs, &BTreeMap::new(), None);
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
            s.route_uri(ListKind::Resources, "a+file:///x")
                .map(|(h, u)| (h.name(), u.into_owned())),
            Some(("a", "file:///x".to_owned()))
        );
    }
}
