//! Host sessions: what a host negotiated at `initialize`, and the store that finds them by
//! `Mcp-Session-Id` and forgets idle ones.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use serde_json::Value;

/// One host connection.
#[derive(Debug)]
pub struct Session {
    pub id: String,
    /// The protocol version agreed with this host.
    pub version: &'static str,
    /// What the host declared in `initialize` (sampling, roots, elicitation…).
    pub client_capabilities: Value,
    pub client_info: Value,
    /// Milliseconds since the store's epoch when the host last used this session.
    last_seen: AtomicU64,
}

impl Session {
    fn touch(&self, now_ms: u64) {
        self.last_seen.store(now_ms, Ordering::Relaxed);
    }
}

/// Every live session, by id.
#[derive(Debug)]
pub struct SessionStore {
    sessions: RwLock<HashMap<String, Arc<Session>>>,
    idle_timeout: Duration,
    epoch: Instant,
}

impl SessionStore {
    pub fn new(idle_timeout: Duration) -> Arc<Self> {
        Arc::new(Self {
            sessions: RwLock::new(HashMap::new()),
            idle_timeout,
            epoch: Instant::now(),
        })
    }

    /// Opens a session with a fresh unguessable id.
    pub fn open(
        &self,
        version: &'static str,
        client_capabilities: Value,
        client_info: Value,
    ) -> Arc<Session> {
        let id = format!("{:032x}", rand::random::<u128>());
        let session = Arc::new(Session {
            id: id.clone(),
            version,
            client_capabilities,
            client_info,
            last_seen: AtomicU64::new(self.now_ms()),
        });
        if let Ok(mut map) = self.sessions.write() {
            map.insert(id, Arc::clone(&session));
        }
        tracing::info!(session = %session.id, version, client = %session.client_info, "Host session opened.");
        session
    }

    /// The live session with `id`, marked as used now.
    pub fn get(&self, id: &str) -> Option<Arc<Session>> {
        let session = self.sessions.read().ok()?.get(id).cloned()?;
        session.touch(self.now_ms());
        Some(session)
    }

    pub fn close(&self, id: &str) -> bool {
        let removed = self
            .sessions
            .write()
            .ok()
            .and_then(|mut m| m.remove(id))
            .is_some();
        if removed {
            tracing::info!(session = %id, "Host session closed.");
        }
        removed
    }

    pub fn len(&self) -> usize {
        self.sessions.read().map(|m| m.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets sessions idle longer than the timeout; returns how many.
    pub fn expire_idle(&self) -> usize {
        let limit = u64::try_from(self.idle_timeout.as_millis()).unwrap_or(u64::MAX);
        let now = self.now_ms();
        let Ok(mut map) = self.sessions.write() else {
            return 0;
        };
        let before = map.len();
        map.retain(|_, s| now.saturating_sub(s.last_seen.load(Ordering::Relaxed)) < limit);
        before - map.len()
    }

    /// Runs [`Self::expire_idle`] periodically for as long as the store exists.
    pub fn spawn_reaper(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        let every = (self.idle_timeout / 4).clamp(Duration::from_secs(1), Duration::from_secs(60));
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                let Some(store) = weak.upgrade() else { return };
                let expired = store.expire_idle();
                if expired > 0 {
                    tracing::info!(expired, "Forgot idle host sessions.");
                }
            }
        });
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}
