//! A replica's part in the fleet store (`[cluster] store`): the pins it makes are offered to
//! the fleet (the first written wins, and a replica that lost takes the winner's), pins another
//! replica wrote are taken over as they are announced, and everything is read again whenever the
//! store comes back. Each time a pin moves, the upstream's tools are reviewed again, so an
//! approval made on any replica shows the tool again on every one.
//!
//! OAuth tokens are kept there too — upstreams' own and each principal's (sealed with a key
//! derived from the shared cursor keys; each replica's file is its copy): one sign-in serves
//! every replica, a refresh is made under the fleet's lock by one replica while the others wait
//! and then read it, a revoked sign-in is forgotten everywhere, and a replica whose upstream
//! waited for a sign-in starts it as soon as another stored tokens. A refresh the authorization
//! server refused is stored with the tokens, so no other replica tries it again. Principals'
//! sign-ins under way are there as well (`cluster::signins`), and a replica hears when one ends.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::sync::watch::Receiver;

use crate::cluster::signins::{FleetSignIns, SIGNINS_PURPOSE};
use crate::cluster::store::{FleetStore, StoreError, StoreEvent, TokenLock};
use crate::config::ClusterConfig;
use crate::downstream::signin::SignIns;
use crate::oauth::shelf::{ShelfGuard, TokenShelf};
use crate::pins::{PinStore, SharedPin};
use crate::router::RouterHandle;
use crate::sealed::SealRing;
use crate::supervisor::SupervisorHandle;
use crate::upstream::{Phase, UpstreamHandle, Upstreams};

/// How long a starting replica waits for the store before it goes on from its own copy.
const FIRST_CONNECTION: Duration = Duration::from_secs(5);

/// This replica's part in the fleet store.
pub struct Fleet(Part);

/// Connects this replica to the fleet store `cluster` names, if it names one.
pub async fn start(
    cluster: Option<&ClusterConfig>,
    pins: &Arc<PinStore>,
    router: &RouterHandle,
) -> Result<Option<Fleet>, StoreError> {
    let Some((cluster, config)) = cluster.and_then(|c| Some((c, c.store.as_ref()?))) else {
        return Ok(None);
    };
    let store = FleetStore::start(config, &cluster.replica)?;
    let runtime = tokio::runtime::Handle::current();
    let part = Part {
        store: store.clone(),
        pins: Arc::clone(pins),
        router: router.clone(),
        shelf: Arc::default(),
        signins: Arc::default(),
    };
    store.on_event({
        let (part, runtime) = (part.clone(), runtime.clone());
        move |event| {
            let part = part.clone();
            runtime.spawn(async move { part.follow(event).await });
        }
    });
    pins.on_pinned(Box::new({
        let part = part.clone();
        move |made| {
            let part = part.clone();
            runtime.spawn(async move { part.offer(made).await });
        }
    }));
    if store.run(FIRST_CONNECTION).await? {
        tracing::info!("Pins and approvals are shared with the fleet (Postgres).");
    } else {
        tracing::warn!(error = %store.down().unwrap_or_default(), "The fleet store is unreachable at start: serving from this replica's copy of the pins; approvals are refused until it is back.");
    }
    Ok(Some(Fleet(part)))
}

#[derive(Clone)]
struct Part {
    store: FleetStore,
    pins: Arc<PinStore>,
    router: RouterHandle,
    /// Where upstreams' tokens are kept, once [`Fleet::share`] set it.
    shelf: Arc<OnceLock<Arc<Shelf>>>,
    /// Principals' sign-ins, once [`Fleet::share`] set them.
    signins: Arc<OnceLock<Weak<SignIns>>>,
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
            StoreEvent::Connected => {
                self.catch_up().await;
                if let Some(shelf) = self.shelf.get() {
                    shelf.catch_up().await;
                }
            }
            StoreEvent::Tokens { key } => {
                if let Some(shelf) = self.shelf.get() {
                    shelf.arrived(&key).await;
                }
            }
            StoreEvent::SignInEnded { link, outcome } => {
                if let Some(signins) = self.signins.get().and_then(Weak::upgrade) {
                    signins.ended_elsewhere(&link, outcome).await;
                }
            }
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

impl Fleet {
    pub fn store(&self) -> FleetStore {
        self.0.store.clone()
    }

    /// Keeps OAuth tokens and principals' sign-ins under way in the fleet store from now on,
    /// each sealed with its own key derived from `cursor_keys`. An upstream that waits for a
    /// sign-in (of `upstreams`, as they change) is started again by `supervisor` as soon as
    /// another replica stores its tokens.
    pub fn share(
        &self,
        (state_dir, cursor_keys): (&Path, &crate::mcp::cursor::KeyRing),
        signins: &Arc<SignIns>,
        (upstreams, supervisor): (Receiver<Upstreams>, SupervisorHandle),
    ) {
        let part = &self.0;
        let (Some(tokens), Some(sign_ins)) = (
            SealRing::new(&cursor_keys.derived(TOKENS_PURPOSE)),
            SealRing::new(&cursor_keys.derived(SIGNINS_PURPOSE)),
        ) else {
            return;
        };
        let shelf = Arc::new(Shelf {
            store: part.store.clone(),
            ring: tokens,
            state_dir: state_dir.to_path_buf(),
            kept: Mutex::default(),
            runtime: tokio::runtime::Handle::current(),
            upstreams: upstreams.clone(),
            supervisor,
        });
        let _ = part.shelf.set(Arc::clone(&shelf));
        crate::oauth::shelf::set_shelf(Box::new(SharedShelf(Arc::clone(&shelf))));
        tokio::spawn(async move { shelf.catch_up().await });
        let find = move |name: &str| named(&upstreams, name);
        signins.share(
            FleetSignIns::new(part.store.clone(), sign_ins),
            Box::new(find),
        );
        let _ = part.signins.set(Arc::downgrade(signins));
    }
}

/// The configured upstream `name`, if there is one.
fn named(upstreams: &Receiver<Upstreams>, name: &str) -> Option<UpstreamHandle> {
    (upstreams.borrow().iter())
        .find(|u| u.name() == name)
        .cloned()
}

/// What the tokens' sealing key is derived for.
const TOKENS_PURPOSE: &str = "mcpmux fleet tokens";

/// Upstreams' tokens as this replica holds the fleet's.
struct Shelf {
    store: FleetStore,
    ring: SealRing,
    state_dir: PathBuf,
    /// The fleet's tokens, opened, by key.
    kept: Mutex<HashMap<String, Vec<u8>>>,
    runtime: tokio::runtime::Handle,
    upstreams: Receiver<Upstreams>,
    supervisor: SupervisorHandle,
}

impl Shelf {
    /// Where a token file is kept in the store: its path below the state directory, the same on
    /// every replica (`oauth/NAME.json`).
    fn key(&self, file: &Path) -> Option<String> {
        Some(
            file.strip_prefix(&self.state_dir)
                .ok()?
                .to_str()?
                .to_owned(),
        )
    }

    fn keep(&self, key: &str, plain: Vec<u8>) {
        let mut kept = self
            .kept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        kept.insert(key.to_owned(), plain);
    }

    /// Sealed tokens of the fleet, opened (`None`, said in the log, when they do not open).
    fn open(&self, key: &str, sealed: &str) -> Option<Vec<u8>> {
        let opened = self.ring.open(sealed, key.as_bytes()).ok();
        if opened.is_none() {
            tracing::warn!(
                key,
                "Tokens in the fleet store do not open with this replica's cursor keys (are they the same on every replica?)."
            );
        }
        opened
    }

    fn seal(&self, key: &str, plain: &[u8]) -> String {
        self.ring
            .seal(plain, key.as_bytes(), crate::oauth::vault::LASTING)
    }

    /// Every key again (at start and whenever the store is back). Where this replica holds
    /// newer tokens than the store (it refreshed, or signed in, while the store was away) the
    /// fleet gets them; otherwise this replica takes the fleet's.
    async fn catch_up(&self) {
        let Ok(all) = self.store.all_tokens().await else {
            return;
        };
        let mut in_store = std::collections::BTreeSet::new();
        for (key, sealed) in all {
            in_store.insert(key.clone());
            let Some(theirs) = self.open(&key, &sealed) else {
                continue;
            };
            match self.local(&key) {
                Some(ours) if obtained_at(&ours) > obtained_at(&theirs) => {
                    self.share(&key, ours).await
                }
                _ => {
                    self.keep(&key, theirs);
                    self.started(&key);
                }
            }
        }
        for key in self.own_token_files() {
            if !in_store.contains(&key) {
                if let Some(ours) = self.local(&key) {
                    self.share(&key, ours).await;
                }
            }
        }
    }

    /// This replica's tokens under `key`: what it keeps, else its file.
    fn local(&self, key: &str) -> Option<Vec<u8>> {
        let kept = self
            .kept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match kept.get(key) {
            Some(plain) => Some(plain.clone()),
            None => std::fs::read(self.state_dir.join(key)).ok(),
        }
    }

    /// The keys of upstreams' own token files in this replica's state directory.
    fn own_token_files(&self) -> Vec<String> {
        let dir = self.state_dir.join("oauth");
        (std::fs::read_dir(dir).into_iter().flatten().flatten())
            .filter(|e| e.path().is_file())
            .filter_map(|e| e.file_name().to_str().map(str::to_owned))
            .filter(|name| name.ends_with(".json") && !name.starts_with('.'))
            .map(|name| format!("oauth/{name}"))
            .collect()
    }

    async fn share(&self, key: &str, plain: Vec<u8>) {
        let sealed = self.seal(key, &plain);
        self.keep(key, plain);
        if let Err(e) = self.store.put_tokens(key, &sealed).await {
            tracing::warn!(error = %e, key, "Tokens not shared with the fleet yet (this replica keeps them).");
        }
    }

    /// A replica stored tokens under `key`, or forgot them (then this replica's copy goes too).
    async fn arrived(&self, key: &str) {
        match self.store.tokens(key).await {
            Ok(Some(sealed)) => {
                if let Some(plain) = self.open(key, &sealed) {
                    self.keep(key, plain);
                    self.started(key);
                }
            }
            Ok(None) => {
                let mut kept = self
                    .kept
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                kept.remove(key);
                drop(kept);
                let _ = std::fs::remove_file(self.state_dir.join(key));
            }
            Err(_) => {}
        }
    }

    /// An upstream whose own tokens these are may have waited for them: it starts again.
    fn started(&self, key: &str) {
        let name = key
            .strip_prefix("oauth/")
            .and_then(|name| name.strip_suffix(".json"))
            .filter(|name| !name.contains('/'));
        let waits = name
            .and_then(|name| named(&self.upstreams, name))
            .is_some_and(|u| u.phase() == Phase::NeedsLogin);
        if let (Some(name), true) = (name, waits) {
            tracing::info!(
                upstream = name,
                "Another replica signed it in; starting it again."
            );
            let (supervisor, name) = (self.supervisor.clone(), name.to_owned());
            self.runtime
                .spawn(async move { supervisor.restart(&name).await });
        }
    }
}

struct SharedShelf(Arc<Shelf>);

impl TokenShelf for SharedShelf {
    fn get(&self, file: &Path) -> Option<Vec<u8>> {
        let key = self.0.key(file)?;
        let kept = self
            .0
            .kept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        kept.get(&key).cloned()
    }

    fn put(&self, file: &Path, bytes: &[u8]) {
        let Some(key) = self.0.key(file) else {
            return;
        };
        self.0.keep(&key, bytes.to_vec());
        let sealed = self.0.seal(&key, bytes);
        let store = self.0.store.clone();
        self.0.runtime.spawn(async move {
            if let Err(e) = store.put_tokens(&key, &sealed).await {
                tracing::warn!(error = %e, key, "Tokens not shared with the fleet yet (this replica keeps them).");
            }
        });
    }

    fn forget(&self, file: &Path) {
        let Some(key) = self.0.key(file) else {
            return;
        };
        let mut kept = self
            .0
            .kept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        kept.remove(&key);
        drop(kept);
        let store = self.0.store.clone();
        self.0.runtime.spawn(async move {
            if let Err(e) = store.forget_tokens(&key).await {
                tracing::warn!(error = %e, key, "Revoked tokens are still in the fleet store (it is unreachable).");
            }
        });
    }

    fn names_under(&self, dir: &Path) -> Vec<String> {
        let Some(prefix) = self.0.key(dir) else {
            return Vec::new();
        };
        let kept = self
            .0
            .kept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        (kept.keys())
            .filter_map(|key| key.strip_prefix(prefix.as_str())?.strip_prefix('/'))
            .filter(|name| !name.contains('/'))
            .map(str::to_owned)
            .collect()
    }

    fn fetch<'a>(&'a self, file: &'a Path) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            if let Some(key) = self.0.key(file) {
                self.0.arrived(&key).await;
            }
        })
    }

    fn flush<'a>(&'a self, file: &'a Path) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let key = (self.0.key(file)).ok_or("the tokens are outside the state directory")?;
            let plain = self.0.local(&key).ok_or("there are no tokens to share")?;
            let sealed = self.0.seal(&key, &plain);
            (self.0.store.put_tokens(&key, &sealed).await).map_err(|e| e.to_string())
        })
    }

    fn lock<'a>(&'a self, file: &'a Path) -> BoxFuture<'a, Option<Box<dyn ShelfGuard>>> {
        Box::pin(async move {
            let key = self.0.key(file)?;
            match self.0.store.lock_tokens(&key).await {
                Ok(lock) => {
                    if let Some(plain) = (lock.sealed.as_deref()).and_then(|s| self.0.open(&key, s))
                    {
                        self.0.keep(&key, plain);
                    }
                    let guard = Guard {
                        lock,
                        shelf: Arc::clone(&self.0),
                        key,
                    };
                    Some(Box::new(guard) as Box<dyn ShelfGuard>)
                }
                Err(e) => {
                    tracing::debug!(error = %e, "Not refreshing tokens until the fleet store is back.");
                    None
                }
            }
        })
    }
}

struct Guard {
    lock: TokenLock,
    shelf: Arc<Shelf>,
    key: String,
}

impl ShelfGuard for Guard {
    fn store<'a>(self: Box<Self>, bytes: &'a [u8]) -> BoxFuture<'a, std::io::Result<()>> {
        Box::pin(async move {
            self.shelf.keep(&self.key, bytes.to_vec());
            let sealed = self.shelf.seal(&self.key, bytes);
            self.lock
                .store(&sealed)
                .await
                .map_err(std::io::Error::other)
        })
    }
}

/// When tokens were obtained (seconds since the epoch; 0 when they do not say).
fn obtained_at(plain: &[u8]) -> u64 {
    serde_json::from_slice::<serde_json::Value>(plain)
        .ok()
        .and_then(|v| v["obtained_at"].as_u64())
        .unwrap_or(0)
}
