//! The router: owns the merged catalog and publishes it as immutable, generation-numbered,
//! deterministically ordered snapshots. Upstreams know it only as their [`CatalogSink`]: each
//! publish or withdrawal rebuilds one snapshot on the caller, under the router's one lock, and
//! makes it current before returning (so an upstream reported ready is already listed). Request
//! handling reads the current snapshot (or a recent one, for cursors) lock-free.
//!
//! - `catalog`: a [`Snapshot`] and how one is built from the upstreams' catalogs.

mod catalog;

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use tokio::sync::watch;

pub use catalog::{Entry, Snapshot};

use crate::config::CatalogConfig;
use crate::sync::lock;
use crate::upstream::{CatalogLink, CatalogSink, UpstreamCatalog, UpstreamHandle};

/// Old generations kept readable for cursors, at most.
const MAX_HISTORY: usize = 16;

/// The router's public face: read snapshots; upstreams reach it through [`RouterHandle::link`].
#[derive(Clone)]
pub struct RouterHandle {
    inner: Arc<Inner>,
}

struct Inner {
    current: ArcSwap<Snapshot>,
    history: Mutex<VecDeque<(Arc<Snapshot>, Instant)>>,
    generation: watch::Sender<u64>,
    /// What the next snapshot is built from; held while one is built, so builds never interleave.
    sources: Mutex<Sources>,
}

struct Sources {
    config: Arc<CatalogConfig>,
    upstreams: Vec<UpstreamHandle>,
    catalogs: BTreeMap<String, UpstreamCatalog>,
    generation: u64,
}

impl std::fmt::Debug for RouterHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RouterHandle")
            .field("generation", &self.snapshot().generation)
            .finish()
    }
}

impl RouterHandle {
    /// A router with an empty catalog; [`Self::set_upstreams`] tells it which upstreams exist.
    pub fn new(config: &CatalogConfig) -> Self {
        let config = Arc::new(config.clone());
        let first = Arc::new(Snapshot::empty(0, &config, &[]));
        let (generation, _) = watch::channel(0);
        Self {
            inner: Arc::new(Inner {
                current: ArcSwap::new(first),
                history: Mutex::new(VecDeque::new()),
                generation,
                sources: Mutex::new(Sources {
                    config,
                    upstreams: Vec::new(),
                    catalogs: BTreeMap::new(),
                    generation: 0,
                }),
            }),
        }
    }

    /// What a shared upstream publishes through.
    pub fn link(&self) -> CatalogLink {
        let max_items = lock(&self.inner.sources).config.max_items_per_upstream;
        CatalogLink {
            sink: Arc::new(Sink(Arc::downgrade(&self.inner))),
            max_items,
        }
    }

    /// Every configured upstream, ready or not (they route URIs and name errors even before
    /// they publish a catalog).
    pub fn set_upstreams(&self, upstreams: Vec<UpstreamHandle>) {
        self.inner.rebuild(|s| {
            s.upstreams = upstreams;
            true
        });
    }

    /// The current catalog. Lock-free.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.inner.current.load_full()
    }

    /// The catalog of `generation`, if it is current or still retained.
    pub fn generation(&self, generation: u64) -> Option<Arc<Snapshot>> {
        let current = self.snapshot();
        if current.generation == generation {
            return Some(current);
        }
        lock(&self.inner.history)
            .iter()
            .find(|(s, _)| s.generation == generation)
            .map(|(s, _)| Arc::clone(s))
    }

    /// Notified with the new generation number each time a snapshot is published.
    pub fn watch(&self) -> watch::Receiver<u64> {
        self.inner.generation.subscribe()
    }
}

/// The router as upstreams see it. Weak, so upstream handles do not keep the router alive.
struct Sink(Weak<Inner>);

impl CatalogSink for Sink {
    fn publish(&self, upstream: &str, catalog: UpstreamCatalog) {
        if let Some(inner) = self.0.upgrade() {
            inner.rebuild(|s| {
                s.catalogs.insert(upstream.to_owned(), catalog);
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
        let next = Snapshot::build(
            sources.generation,
            &sources.config,
            &sources.upstreams,
            &sources.catalogs,
        );
        tracing::debug!(
            generation = sources.generation,
            tools = next.list(crate::mcp::ListKind::Tools).len(),
            "Published a new catalog."
        );
        self.publish(next, sources.config.cursor_retention);
    }

    fn publish(&self, next: Snapshot, retention: Duration) {
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
