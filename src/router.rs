//! The router: owns the merged catalog and publishes it as immutable, generation-numbered,
//! deterministically ordered snapshots. Request handling reads the current snapshot (or a recent
//! one, for cursors) without ever queueing behind the router actor.
//!
//! - `catalog`: a [`Snapshot`] and how one is built from the upstreams' catalogs.
//! - `actor`: receives upstream catalogs and withdrawals, rebuilds, publishes.

mod actor;
mod catalog;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use ractor::{Actor, ActorRef};
use tokio::sync::watch;

pub use catalog::{Entry, Snapshot};

use crate::config::CatalogConfig;
use crate::upstream::{UpstreamCatalog, UpstreamHandle};
use actor::{RouterActor, RouterMsg};

/// How long an upstream waits for the router to publish its catalog.
const PUBLISH_DEADLINE_MS: u64 = 5_000;
/// Old generations kept readable for cursors, at most.
const MAX_HISTORY: usize = 16;

/// Where snapshots are published: the current one, and recent ones for cursors that name them.
struct Store {
    current: ArcSwap<Snapshot>,
    history: Mutex<VecDeque<(Arc<Snapshot>, Instant)>>,
    retention: Duration,
    generation: watch::Sender<u64>,
    max_items_per_upstream: usize,
}

/// The router's public face: read snapshots, hand it upstream changes.
#[derive(Clone)]
pub struct RouterHandle {
    store: Arc<Store>,
    actor: ActorRef<RouterMsg>,
}

impl std::fmt::Debug for RouterHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RouterHandle")
            .field("generation", &self.snapshot().generation)
            .finish()
    }
}

impl RouterHandle {
    /// Starts the router actor with an empty catalog over `upstreams` (every configured one).
    pub async fn start(
        config: &CatalogConfig,
        upstreams: Vec<UpstreamHandle>,
    ) -> Result<Self, ractor::SpawnErr> {
        let first = Arc::new(Snapshot::empty(0, &upstreams));
        let (generation, _) = watch::channel(0);
        let store = Arc::new(Store {
            current: ArcSwap::new(first),
            history: Mutex::new(VecDeque::new()),
            retention: config.cursor_retention,
            generation,
            max_items_per_upstream: config.max_items_per_upstream,
        });
        let (actor, _) = Actor::spawn(
            Some("router".into()),
            RouterActor,
            (config.clone(), upstreams, Arc::clone(&store)),
        )
        .await?;
        Ok(Self { store, actor })
    }

    /// The current catalog. Lock-free.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.store.current.load_full()
    }

    /// The catalog of `generation`, if it is current or still retained.
    pub fn generation(&self, generation: u64) -> Option<Arc<Snapshot>> {
        let current = self.snapshot();
        if current.generation == generation {
            return Some(current);
        }
        let history = self.store.history.lock().ok()?;
        history
            .iter()
            .find(|(s, _)| s.generation == generation)
            .map(|(s, _)| Arc::clone(s))
    }

    /// Most items the catalog takes from one upstream listing.
    pub fn max_items_per_upstream(&self) -> usize {
        self.store.max_items_per_upstream
    }

    /// Notified with the new generation number each time a snapshot is published.
    pub fn watch(&self) -> watch::Receiver<u64> {
        self.store.generation.subscribe()
    }

    /// An upstream's catalog is (again) current. Returns once the new snapshot is published, so
    /// an upstream marked ready afterwards is already in the catalog hosts read.
    pub async fn publish(&self, upstream: &UpstreamHandle, catalog: UpstreamCatalog) {
        let name = upstream.name().to_owned();
        let published = ractor::call_t!(
            self.actor,
            RouterMsg::Publish,
            PUBLISH_DEADLINE_MS,
            name,
            catalog
        );
        if let Err(e) = published {
            tracing::error!(upstream = %upstream.name(), error = %e, "The router did not take a catalog.");
        }
    }

    /// An upstream's catalog is gone (it stopped or failed).
    pub fn withdraw(&self, upstream: &str) {
        let _ = self
            .actor
            .send_message(RouterMsg::Withdraw(upstream.to_owned()));
    }

    pub fn stop(&self) {
        self.actor.stop(None);
    }
}

impl Store {
    fn publish(&self, next: Snapshot) {
        let generation = next.generation;
        let previous = self.current.swap(Arc::new(next));
        if let Ok(mut history) = self.history.lock() {
            let now = Instant::now();
            history.push_front((previous, now));
            history.truncate(MAX_HISTORY);
            history.retain(|(_, retired)| now.duration_since(*retired) < self.retention);
        }
        self.generation.send_replace(generation);
    }
}
