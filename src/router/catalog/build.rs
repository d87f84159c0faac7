//! How a catalog snapshot is built: every ready upstream's items of each listing namespaced
//! and passed through the view's profile (filter, renames, descriptions, withheld pins), sorted
//! and indexed by exposed name, fingerprinted, with the shortest cache lifetime of the upstreams
//! merged.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use super::{Entry, Lens, Listing, Snapshot};
use crate::config::{PinMode, Profile};
use crate::jsonrpc::{Members, raw_string};
use crate::mcp::ListKind;
use crate::mcp::apps::{self, ToolApp};
use crate::mcp::names::{self, NameBudget, Prefix};
use crate::mcp::skills;
use crate::mcp::{param_headers, uri};
use crate::router::search_mode::SearchView;
use crate::upstream::{UpstreamCatalog, UpstreamHandle, UpstreamItem};
use serde_json::value::RawValue;

impl Snapshot {
    /// The view `lens` gives of `catalogs`; `previous` is the same view's last generation, whose
    /// search index is kept when the tools did not change.
    // Long: a view's listings built in one pass over the upstreams' catalogs, with the state the
    // pass carries (names taken, withheld tools, the hidden skills).
    pub fn build(
        generation: u64,
        lens: &Lens,
        upstreams: &[UpstreamHandle],
        catalogs: &BTreeMap<String, UpstreamCatalog>,
        changed: &BTreeMap<String, BTreeSet<String>>,
        previous: Option<&Snapshot>,
    ) -> Self {
        let mut snapshot = Self::empty(generation, lens, upstreams);
        let profile = lens.profile.as_deref();
        let strict_view = profile.is_some_and(|p| p.strict_pins);
        for handle in upstreams {
            if profile.is_some_and(|p| !p.holds(handle.name())) {
                continue;
            }
            if let Some(catalog) = catalogs.get(handle.name()) {
                snapshot
                    .ready
                    .push((handle.clone(), Arc::clone(&catalog.info)));
            }
            let strict = strict_view || handle.config().pin == PinMode::Strict;
            if let Some(tools) = changed
                .get(handle.name())
                .filter(|c| strict && !c.is_empty())
            {
                snapshot
                    .withheld
                    .insert(handle.name().to_owned(), tools.clone());
            }
        }
        let hidden_skills = hidden_skills(&snapshot, profile, catalogs);
        for kind in ListKind::ALL {
            let mut entries = Vec::new();
            let mut ttl_ms: Option<u64> = None;
            for (handle, _) in &snapshot.ready {
                let Some(catalog) = catalogs.get(handle.name()) else {
                    continue;
                };
                let Some(items) = catalog.lists.get(&kind) else {
                    continue;
                };
                let ttl = catalog.ttl_ms(kind);
                ttl_ms = Some(ttl_ms.map_or(ttl, |t| t.min(ttl)));
                let exposer = Exposer {
                    kind,
                    budget: &lens.config.name_budget,
                    handle,
                    prefix: Profile::prefix_for(profile, handle.prefix()),
                    profile,
                    withheld: (kind == ListKind::Tools)
                        .then(|| snapshot.withheld.get(handle.name()))
                        .flatten(),
                    hidden_skills: &hidden_skills,
                };
                entries.extend(items.iter().filter_map(|item| exposer.expose(item)));
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
                snapshot.param_headers |= e.param_headers.is_some();
            }
            snapshot.lists.insert(
                kind,
                Listing {
                    entries,
                    index,
                    fingerprint: hasher.finish(),
                    ttl_ms: ttl_ms.unwrap_or(0),
                },
            );
        }
        let unchanged = previous.filter(|p| {
            p.profile_name() == snapshot.profile_name()
                && p.lists.get(&ListKind::Tools).map(|l| l.fingerprint)
                    == snapshot.lists.get(&ListKind::Tools).map(|l| l.fingerprint)
        });
        if let Some(index) = unchanged.and_then(|p| p.index.get()) {
            let _ = snapshot.index.set(Arc::clone(index));
        }
        snapshot.hidden_skills = hidden_skills;
        snapshot.apps = super::apps::Apps::of(
            snapshot.list(ListKind::Tools),
            snapshot.list(ListKind::Resources),
        );
        if let Some(mode) = profile.and_then(|p| p.search.as_ref()) {
            let tools = snapshot.list(ListKind::Tools).iter();
            let search = SearchView::build(mode, tools.map(|e| (&*e.exposed, &*e.json)));
            // Its search index is built at its first search, off the async workers (a
            // catalog's rebuild never waits for it).
            snapshot.search = Some(search);
        }
        snapshot
    }
}

/// The directories (exposed, canonical) of the skills `profile` hides in a view that holds the
/// upstreams `snapshot` names: each skill of a ready upstream whose `SKILL.md` URI the profile's
/// filter does not admit.
fn hidden_skills(
    snapshot: &Snapshot,
    profile: Option<&Profile>,
    catalogs: &BTreeMap<String, UpstreamCatalog>,
) -> Vec<String> {
    let Some(profile) = profile.filter(|p| p.filter.restricts(ListKind::Skills)) else {
        return Vec::new();
    };
    let mut hidden = Vec::new();
    for (handle, _) in &snapshot.ready {
        let Some(skills) = catalogs
            .get(handle.name())
            .and_then(|c| c.lists.get(&ListKind::Skills))
        else {
            continue;
        };
        let prefix = Profile::prefix_for(Some(profile), handle.prefix());
        for skill in skills.iter() {
            let exposed = uri::canonical(&names::expose_uri(prefix, &skill.key)).into_owned();
            if !profile.filter.admits(ListKind::Skills, &exposed) {
                if let Some(root) = skills::root_of(&exposed) {
                    hidden.push(root.to_owned());
                }
            }
        }
    }
    hidden
}

/// Whether `uri` (exposed) lies inside the directory `root` (exposed, canonical).
fn under(root: &str, uri: &str) -> bool {
    uri::canonical(uri)
        .strip_prefix(root)
        .is_some_and(|rest| rest.starts_with('/'))
}

/// Exposes one upstream's items of one listing in one view.
struct Exposer<'a> {
    kind: ListKind,
    budget: &'a NameBudget,
    handle: &'a UpstreamHandle,
    prefix: &'a Prefix,
    profile: Option<&'a Profile>,
    /// Changed tools (by the upstream's name) left out until approved.
    withheld: Option<&'a BTreeSet<String>>,
    /// The directories (exposed, canonical) of the skills the view hides.
    hidden_skills: &'a [String],
}

impl Exposer<'_> {
    /// Namespaces one item and applies the profile (its filter, rename and description); `None`
    /// when the profile hides it, or (with a warning) when it cannot be exposed.
    fn expose(&self, item: &UpstreamItem) -> Option<Entry> {
        let (kind, handle) = (self.kind, self.handle);
        if self.withheld.is_some_and(|w| w.contains(&item.key)) {
            return None;
        }
        let exposed = if kind.is_uri() {
            Some(names::expose_uri(self.prefix, &item.key))
        } else {
            self.budget.expose(self.prefix, &item.key)
        };
        let Some(mut exposed) = exposed else {
            tracing::warn!(upstream = %handle.name(), name = %item.key, "Left out an item whose name cannot fit the name budget.");
            return None;
        };
        // A file of a skill the view hides is hidden with it.
        if kind == ListKind::Resources
            && self.hidden_skills.iter().any(|root| under(root, &exposed))
        {
            return None;
        }
        let mut description = None;
        if let Some(profile) = self.profile {
            // URIs are judged as what they mean, not as they are spelled.
            let admitted = if kind.is_uri() {
                profile.filter.admits(kind, &uri::canonical(&exposed))
            } else {
                profile.filter.admits(kind, &exposed)
            };
            if !admitted {
                return None;
            }
            description = profile.descriptions.get(&exposed).map(|d| raw_string(d));
            if let Some(renamed) = profile.renames.get(&exposed).filter(|_| !kind.is_uri()) {
                exposed.clone_from(renamed);
            }
        }
        let Some(mut members) = Members::of(&item.json) else {
            tracing::warn!(upstream = %handle.name(), name = %item.key, "Left out an item that is not a JSON object.");
            return None;
        };
        let exposed_raw = raw_string(&exposed);
        members.insert(kind.key(), &exposed_raw);
        // A skill's files are named where they live, as the view exposes them.
        let files = (kind == ListKind::Skills)
            .then(|| members.get("resources"))
            .flatten()
            .and_then(|r| skills::rewrite_uris(r, "uri", &|u| names::expose_uri(self.prefix, u)));
        if let Some(files) = &files {
            members.insert("resources", files);
        }
        if let Some(description) = &description {
            members.insert("description", description);
        }
        let mut json = members.to_raw();
        let app = (kind == ListKind::Tools)
            .then(|| ToolApp::of(&item.json))
            .flatten();
        if let Some(rewritten) = app
            .as_ref()
            .and_then(|app| self.expose_app(app, &exposed, &json))
        {
            json = rewritten;
        }
        let param_headers = (kind == ListKind::Tools && item.json.get().contains("x-mcp-header"))
            .then(|| {
                let tool: serde_json::Value = serde_json::from_str(item.json.get()).ok()?;
                // Invalid annotations are the host's to refuse (it must leave such a tool out).
                let headers = param_headers::annotations(&tool["inputSchema"]).ok()?;
                (!headers.is_empty()).then(|| Arc::from(headers))
            })
            .flatten();
        Some(Entry {
            exposed: exposed.into(),
            upstream: handle.clone(),
            original: item.key.as_str().into(),
            json,
            param_headers,
            app,
        })
    }

    /// A tool's definition `json` with its app's page named as this view exposes it; without its
    /// app when the view does not show that page (the tool stays, but points nowhere a host
    /// cannot read). `None` when nothing changes.
    fn expose_app(&self, app: &ToolApp, tool: &str, json: &RawValue) -> Option<Box<RawValue>> {
        let page = app.resource_uri.as_deref()?;
        let exposed = names::expose_uri(self.prefix, page);
        let shown = self.profile.is_none_or(|profile| {
            (profile.filter).admits(ListKind::Resources, &uri::canonical(&exposed))
        });
        if !shown {
            tracing::info!(upstream = %self.handle.name(), tool, page, "A tool's app page is hidden in this profile; the tool is listed without its app.");
        }
        if shown && self.prefix.is_none() {
            return None;
        }
        apps::rewrite_tool(json, |uri| names::expose_uri(self.prefix, uri), shown)
    }
}
