//! The router: owns the merged catalog and publishes it as immutable, generation-numbered,
//! deterministically ordered snapshots — one per view: the whole catalog, and each profile's.
//! Upstreams know it only as their [`CatalogSink`]: each publish or withdrawal rebuilds every
//! view on the caller, under the router's one lock, and makes them current before returning (so
//! an upstream reported ready is already listed). Request handling reads the current view (or a
//! recent one, for cursors) lock-free; a profile's view is computed once per generation, never per
//! request.
//!
//! - `catalog`: a [`Snapshot`] and how one is built from the upstreams' catalogs.

mod catalog;
pub mod search;
pub mod search_mode;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use tokio::sync::watch;

pub use catalog::{AppRoute, Lens, Shown, Snapshot};

use crate::config::{CatalogConfig, Profile};
use crate::mcp::ListKind;
use crate::pins::{PinRow, PinStore};
use crate::sync::lock;
use crate::upstream::{CatalogLink, CatalogSink, UpstreamCatalog, UpstreamHandle, Upstreams};

/// Old generations kept readable for cursors, at most.
const MAX_HISTORY: usize = 16;

/// The router's public face: read snapshots; upstreams reach it through [`RouterHandle::link`].
#[derive(Clone)]
pub struct RouterHandle {
    inner: Arc<Inner>,
}

/// Every view of one catalog generation: view 0 is the whole catalog, view `i + 1` profile `i`'s.
#[derive(Debug)]
pub struct Views {
    pub generation: u64,
    views: Vec<Arc<Snapshot>>,
}

impl Views {
    /// The view `profile` sees (the whole catalog for `None`, and for a profile it does not know).
    pub fn of(&self, profile: Option<&Profile>) -> &Arc<Snapshot> {
        let all = &self.views[0];
        let Some(profile) = profile else {
            return all;
        };
        self.views[1..]
            .iter()
            .find(|v| v.profile_name() == Some(profile.name.as_str()))
            .unwrap_or(all)
    }

    /// The view of the profile named `profile` (`None`: the whole catalog), if it is configured.
    pub fn named(&self, profile: Option<&str>) -> Option<&Arc<Snapshot>> {
        match profile {
            None => self.views.first(),
            Some(name) => (self.views[1..].iter()).find(|v| v.profile_name() == Some(name)),
        }
    }

    /// Every view: the whole catalog's, then each profile's.
    pub fn all(&self) -> impl Iterator<Item = &Arc<Snapshot>> {
        self.views.iter()
    }

    /// View number `view`, if this generation has it.
    pub fn at(&self, view: u16) -> Option<&Arc<Snapshot>> {
        self.views.get(usize::from(view))
    }
}

struct Inner {
    current: ArcSwap<Views>,
    history: Mutex<VecDeque<(Arc<Views>, Instant)>>,
    generation: watch::Sender<u64>,
    /// What the next snapshot is built from; held while one is built, so builds never interleave.
    sources: Mutex<Sources>,
}

struct Sources {
    config: Arc<CatalogConfig>,
    /// The views to build, the whole catalog's first.
    lenses: Vec<Lens>,
    /// Every configured upstream, ready or not, as the running config holds them (read at each
    /// build, never copied: the set lives in the daemon's watch).
    upstreams: watch::Receiver<Upstreams>,
    catalogs: BTreeMap<String, UpstreamCatalog>,
    /// Where tool definitions are pinned (`None`: no pinning).
    pins: Option<Arc<PinStore>>,
    /// Per upstream, the tools whose definition changed since it was pinned.
    changed: BTreeMap<String, BTreeSet<String>>,
    generation: u64,
}

impl Sources {
    /// Reviews `upstream`'s tools against their pins (from its catalog as published).
    fn review_pins(&mut self, upstream: &str) {
        let (Some(pins), Some(catalog)) = (&self.pins, self.catalogs.get(upstream)) else {
            return;
        };
        let tools = catalog.lists.get(&ListKind::Tools);
        let items = tools.iter().flat_map(|t| t.iter());
        let changed = pins.review(upstream, items.map(|i| (i.key.as_str(), i.json.get())));
        self.changed.insert(upstream.to_owned(), changed);
    }
}

impl std::fmt::Debug for RouterHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RouterHandle")
            .field("generation", &self.views().generation)
            .finish()
    }
}

impl RouterHandle {
    /// A router with an empty catalog and a view per profile; [`Self::observe`] tells it where
    /// the configured upstreams are.
    pub fn new(
        config: &CatalogConfig,
        profiles: &[Arc<Profile>],
        pins: Option<Arc<PinStore>>,
    ) -> Self {
        let config = Arc::new(config.clone());
        let lenses = lenses(&config, profiles);
        let first = Views {
            generation: 0,
            views: lenses
                .iter()
                .map(|lens| Arc::new(Snapshot::empty(0, lens, &[])))
                .collect(),
        };
        let (generation, _) = watch::channel(0);
        Self {
            inner: Arc::new(Inner {
                current: ArcSwap::new(Arc::new(first)),
                history: Mutex::new(VecDeque::new()),
                generation,
                sources: Mutex::new(Sources {
                    lenses,
                    config,
                    upstreams: watch::channel(Upstreams::default()).1,
                    catalogs: BTreeMap::new(),
                    pins,
                    changed: BTreeMap::new(),
                    generation: 0,
                }),
            }),
        }
    }

    /// A reloaded config, in one publish: the catalog settings and profiles, and the upstream
    /// set as it now is. The catalogs of upstreams that are gone leave with them, as do those
    /// named in `withdraw` (replaced by a disabled one); any other replaced upstream's catalog
    /// stays listed (served by its successor) until the successor publishes.
    pub fn reconfigure(
        &self,
        config: &CatalogConfig,
        profiles: &[Arc<Profile>],
        withdraw: &[String],
    ) {
        let config = Arc::new(config.clone());
        self.inner.rebuild(|s| {
            s.lenses = lenses(&config, profiles);
            s.config = config;
            let upstreams = Arc::clone(&s.upstreams.borrow());
            let names: BTreeSet<&str> = (upstreams.iter())
                .map(UpstreamHandle::name)
                .filter(|n| !withdraw.iter().any(|w| w == n))
                .collect();
            s.catalogs.retain(|name, _| names.contains(name.as_str()));
            s.changed.retain(|name, _| names.contains(name.as_str()));
            true
        });
    }

    /// What a shared upstream publishes through.
    pub fn link(&self) -> CatalogLink {
        let budget = lock(&self.inner.sources).config.budget;
        CatalogLink {
            sink: Arc::new(Sink(Arc::downgrade(&self.inner))),
            budget,
        }
    }

    /// Where the configured upstreams are, ready or not (they route URIs and name errors even
    /// before they publish a catalog): every build reads the set there.
    pub fn observe(&self, upstreams: watch::Receiver<Upstreams>) {
        self.inner.rebuild(|s| {
            s.upstreams = upstreams;
            true
        });
    }

    /// The whole current catalog. Lock-free.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.view(None)
    }

    /// The current catalog as `profile` sees it (`None`: all of it). Lock-free.
    pub fn view(&self, profile: Option<&Profile>) -> Arc<Snapshot> {
        Arc::clone(self.inner.current.load().of(profile))
    }

    /// What `f` reads of the current view of `profile`, in place: for one look, cheaper than
    /// [`Self::view`], which hands out the snapshot itself.
    pub fn with_view<T>(&self, profile: Option<&Profile>, f: impl FnOnce(&Snapshot) -> T) -> T {
        f(self.inner.current.load().of(profile))
    }

    /// Every view of the current catalog.
    pub fn views(&self) -> Arc<Views> {
        self.inner.current.load_full()
    }

    /// View `view` of the catalog of `generation`, if it is current or still retained.
    pub fn generation(&self, generation: u64, view: u16) -> Option<Arc<Snapshot>> {
        let current = self.inner.current.load();
        if current.generation == generation {
            return current.at(view).cloned();
        }
        lock(&self.inner.history)
            .iter()
            .find(|(s, _)| s.generation == generation)
            .and_then(|(s, _)| s.at(view).cloned())
    }

    /// Pins `upstream`'s changed `tool` as it is now, and shows it again where it was withheld;
    /// false when it has no change to approve.
    pub fn approve(&self, upstream: &str, tool: &str) -> bool {
        let Some(pins) = lock(&self.inner.sources).pins.clone() else {
            return false;
        };
        if !pins.approve(upstream, tool) {
            return false;
        }
        self.inner.rebuild(|s| {
            s.review_pins(upstream);
            true
        });
        true
    }

    /// Reviews `upstream`'s tools against their pins again (the fleet moved them) and rebuilds
    /// the catalog where that changes what is withheld.
    pub fn review_again(&self, upstream: &str) {
        self.inner.rebuild(|s| {
            s.review_pins(upstream);
            true
        });
    }

    /// What approving `upstream`'s changed `tool` would pin, as replicas share pins (`None`:
    /// no change to approve, or pinning is off).
    pub fn approval(&self, upstream: &str, tool: &str) -> Option<crate::pins::SharedPin> {
        let pins = lock(&self.inner.sources).pins.clone()?;
        pins.approval(upstream, tool)
    }

    /// A changed tool's definition as pinned and as it is now (see [`PinStore::change`]).
    pub fn pin_change(
        &self,
        upstream: &str,
        tool: &str,
    ) -> Option<(Option<serde_json::Value>, Option<serde_json::Value>)> {
        let pins = lock(&self.inner.sources).pins.clone()?;
        pins.change(upstream, tool)
    }

    /// Every tool pin (`None`: pinning is off).
    pub fn pins(&self) -> Option<Vec<PinRow>> {
        let pins = lock(&self.inner.sources).pins.clone()?;
        Some(pins.rows())
    }

    /// The tools of `upstream` whose definition changed since it was pinned.
    pub fn changed_tools(&self, upstream: &str) -> Vec<String> {
        let sources = lock(&self.inner.sources);
        sources
            .changed
            .get(upstream)
            .map(|c| c.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Notified with the new generation number each time a snapshot is published.
    pub fn watch(&self) -> watch::Receiver<u64> {
        self.inner.generation.subscribe()
    }
}

/// The views to build from `config` and `profiles`: the whole catalog's, then each profile's.
fn lenses(config: &Arc<CatalogConfig>, profiles: &[Arc<Profile>]) -> Vec<Lens> {
    let mut lenses = vec![Lens {
        view: 0,
        profile: None,
        config: Arc::clone(config),
    }];
    for (i, profile) in profiles.iter().enumerate() {
        lenses.push(Lens {
            view: u16::try_from(i + 1).unwrap_or(u16::MAX),
            profile: Some(Arc::clone(profile)),
            config: Arc::new(CatalogConfig {
                cursor_retention: config.cursor_retention,
                budget: config.budget,
                ..profile.catalog.clone()
            }),
        });
    }
    lenses
}

/// The router as upstreams see it. Weak, so upstream handles do not keep the router alive.
struct Sink(Weak<Inner>);

impl CatalogSink for Sink {
    fn publish(&self, upstream: &str, catalog: UpstreamCatalog) {
        if let Some(inner) = self.0.upgrade() {
            inner.rebuild(|s| {
                s.catalogs.insert(upstream.to_owned(), catalog);
                s.review_pins(upstream);
                true
            });
        }
    }

    fn withdraw(&self, upstream: &str) {
        if let Some(inner) = self.0.upgrade() {
            inner.rebuild(|s| s.catalogs.remove(upstream).is_some());
        }
    }
}

impl Inner {
    /// Applies `change` and, when it changed something, builds and publishes the next snapshot.
    fn rebuild(&self, change: impl FnOnce(&mut Sources) -> bool) {
        let mut sources = lock(&self.sources);
        if !change(&mut sources) {
            return;
        }
        sources.generation += 1;
        let generation = sources.generation;
        let upstreams = Arc::clone(&sources.upstreams.borrow());
        let previous = self.current.load();
        let views = (sources.lenses.iter())
            .map(|lens| {
                Arc::new(Snapshot::build(
                    generation,
                    lens,
                    &upstreams,
                    &sources.catalogs,
                    &sources.changed,
                    previous.at(lens.view).map(|s| &**s),
                ))
            })
            .collect();
        drop(previous);
        let next = Views { generation, views };
        tracing::debug!(
            generation,
            tools = next.of(None).list(crate::mcp::ListKind::Tools).len(),
            "Published a new catalog."
        );
        self.publish(next, sources.config.cursor_retention);
    }

    fn publish(&self, next: Views, retention: Duration) {
        let generation = next.generation;
        let previous = self.current.swap(Arc::new(next));
        {
            let mut history = lock(&self.history);
            let now = Instant::now();
            history.push_front((previous, now));
            history.truncate(MAX_HISTORY);
            history.retain(|(_, retired)| now.duration_since(*retired) < retention);
        }
        self.generation.send_replace(generation);
    }
}
