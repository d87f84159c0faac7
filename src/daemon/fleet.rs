//! A replica's part in the fleet store (`[cluster] store`): the pins it makes are offered to
//! the fleet (the first written wins, and a replica that lost takes the winner's), pins another
//! replica wrote are taken over as they are announced, and everything is read again whenever the
//! store comes back. Each time a pin moves, the upstream's tools are reviewed again, so an
//! approval made on any replica shows the tool again on every one.

use std::sync::Arc;
use std::time::Duration;

use crate::cluster::store::{FleetStore, StoreError, StoreEvent};
use crate::config::ClusterConfig;
use crate::pins::{PinStore, SharedPin};
use crate::router::RouterHandle;

/// How long a starting replica waits for the store before it goes on from its own copy.
const FIRST_CONNECTION: Duration = Duration::from_secs(5);

/// Connects this replica to the fleet store `cluster` names, if it names one.
pub async fn start(
    cluster: Option<&ClusterConfig>,
    pins: &Arc<PinStore>,
    router: &RouterHandle,
) -> Result<Option<FleetStore>, StoreError> {
    let Some((cluster, config)) = cluster.and_then(|c| Some((c, c.store.as_ref()?))) else {
        return Ok(None);
    };
    let store = FleetStore::start(config, &cluster.replica)?;
    let runtime = tokio::runtime::Handle::current();
    let part = Part {
        store: store.clone(),
        pins: Arc::clone(pins),
        router: router.clone(),
    };
    store.on_event({
        let (part, runtime) = (part.clone(), runtime.clone());
        move |event| {
            let part = part.clone();
            runtime.spawn(async move { part.follow(event).await });
        }
    });
    pins.on_pinned(Box::new(move |made| {
        let part = part.clone();
        runtime.spawn(async move { part.offer(made).await });
    }));
    if store.run(FIRST_CONNECTION).await? {
        tracing::info!("Pins and approvals are shared with the fleet (Postgres).");
    } else {
        tracing::warn!(error = %store.down().unwrap_or_default(), "The fleet store is unreachable at start: serving from this replica's copy of the pins; approvals are refused until it is back.");
    }
    Ok(Some(store))
}

#[derive(Clone)]
struct Part {
    store: FleetStore,
    pins: Arc<PinStore>,
    router: RouterHandle,
}

impl Part {
    /// Offers pins this replica made; takes the winners' where another replica was first.
    async fn offer(&self, made: Vec<SharedPin>) {
        match self.store.pin_first(&made).await {
            Ok(winners) => self.adopt(&winners),
            // Offered again when the store is back (everything is read again then).
            Err(e) => tracing::debug!(error = %e, "Pins not offered to the fleet yet."),
        }
    }

    async fn follow(&self, event: StoreEvent) {
        match event {
            StoreEvent::Connected => self.catch_up().await,
            StoreEvent::Pin { upstream, tool } => match self.store.pin(&upstream, &tool).await {
                Ok(Some(pin)) => self.adopt(&[pin]),
                Ok(None) => {}
                Err(e) => tracing::debug!(error = %e, "Could not read a pin the fleet announced."),
            },
        }
    }

    /// Everything again: what this replica pinned while the store was away is offered, then
    /// the fleet's pins are taken over.
    async fn catch_up(&self) {
        let fleet = match self.store.pins().await {
            Ok(fleet) => fleet,
            Err(e) => return tracing::debug!(error = %e, "Could not read the fleet's pins."),
        };
        let known: std::collections::BTreeSet<(&str, &str)> = (fleet.iter())
            .map(|p| (p.upstream.as_str(), p.tool.as_str()))
            .collect();
        let unknown: Vec<SharedPin> = (self.pins.shared().into_iter())
            .filter(|p| !known.contains(&(p.upstream.as_str(), p.tool.as_str())))
            .collect();
        self.adopt(&fleet);
        if !unknown.is_empty() {
            self.offer(unknown).await;
        }
    }

    fn adopt(&self, fleet: &[SharedPin]) {
        for upstream in self.pins.adopt(fleet) {
            tracing::debug!(
                upstream,
                "Pins moved by the fleet: reviewing the tools again."
            );
            self.router.review_again(&upstream);
        }
    }
}
