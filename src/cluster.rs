//! One of several identical replicas (`[cluster]`). What is bound to a process names its owner:
//! handshake-era session ids, legacy SSE session ids, parked multi-round calls and sign-in links
//! start with the replica's name and a dot (`mcpmux-1.3f9a…`), so a load balancer can route on
//! the prefix; a request that still lands on another replica is forwarded one hop to its owner
//! (`downstream::http::forward`), marked with [`FORWARDED`] — signed with a key derived from the
//! shared cursor key file, so a host can neither forge a forward nor make one loop.
//!
//! Nothing here is shared between replicas but the key file: no session store, no gossip.

pub mod signins;
pub mod store;

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::config::ClusterConfig;
use crate::mcp::cursor::KeyRing;
use crate::sealed::now_secs;

/// The header a forwarded request carries: `<from> <unix seconds> <key id> <base64url HMAC>`.
pub const FORWARDED: &str = "mcpmux-forwarded";
/// What the forwarding key is derived for (never the cursor key itself).
const FORWARD_PURPOSE: &str = "mcpmux forwarded request v1";
/// What the sealing key of multi-round states is derived for.
pub const STATE_PURPOSE: &str = "mcpmux requestState v1";
/// How old a forward's signature may be (replicas' clocks differ a little).
const FORWARD_SKEW: Duration = Duration::from_secs(60);
/// How long reaching an owner may take before the request is served here instead.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// This replica: its name, its peers, and how it signs and checks forwards.
pub struct Cluster {
    pub replica: Arc<str>,
    config: ClusterConfig,
    /// `(id, key)` derived from the cursor key ring, the newest last.
    keys: Vec<(u8, [u8; 32])>,
    pub client: reqwest::Client,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("replica", &self.replica)
            .finish_non_exhaustive()
    }
}

/// `rest` as an id of `owner`'s (`<owner>.<rest>`); as it is where no replica owns it (no
/// `[cluster]`).
pub fn owned(owner: Option<&str>, rest: String) -> String {
    match owner {
        None => rest,
        Some(owner) => format!("{owner}.{rest}"),
    }
}

/// The replica an id names, if it names one (`<replica>.<rest>`).
pub fn owner_of(id: &str) -> Option<&str> {
    let (owner, rest) = id.split_once('.')?;
    (!rest.is_empty() && crate::config::is_replica_name(owner)).then_some(owner)
}

impl Cluster {
    pub fn new(config: &ClusterConfig, ring: &KeyRing) -> Self {
        // No proxy: replicas reach each other directly.
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_default();
        Self {
            replica: Arc::from(config.replica.as_str()),
            config: config.clone(),
            keys: ring.derived(FORWARD_PURPOSE),
            client,
        }
    }

    /// Where the replica `owner` serves hosts.
    pub fn peer(&self, owner: &str) -> Option<url::Url> {
        self.config.peer(owner)
    }

    /// The value of [`FORWARDED`] for a request this replica forwards now.
    pub fn stamp(&self) -> String {
        let (id, key) = self
            .keys
            .last()
            .unwrap_or_else(|| unreachable!("a key ring has a key"));
        let at = now_secs();
        let mac = keyed(key, &self.replica, at).finalize().into_bytes();
        format!("{} {at} {id} {}", self.replica, URL_SAFE_NO_PAD.encode(mac))
    }

    /// The replica a [`FORWARDED`] value says forwarded the request, if a key of the ring signed
    /// it recently; why not otherwise.
    pub fn check(&self, value: &str) -> Result<String, &'static str> {
        let mut parts = value.split(' ');
        let (Some(from), Some(at), Some(id), Some(sig), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return Err("it is malformed");
        };
        let at: u64 = at.parse().map_err(|_| "it is malformed")?;
        let id: u8 = id.parse().map_err(|_| "it is malformed")?;
        let (_, key) = (self.keys.iter())
            .find(|(k, _)| *k == id)
            .ok_or("its key is not in server.cursor_keys")?;
        let sig = URL_SAFE_NO_PAD.decode(sig).map_err(|_| "it is malformed")?;
        keyed(key, from, at)
            .verify_slice(&sig)
            .map_err(|_| "its signature is wrong")?;
        if now_secs().abs_diff(at) > FORWARD_SKEW.as_secs() {
            return Err("it is stale");
        }
        Ok(from.to_owned())
    }
}

/// The HMAC of a forward by `from` at `at`, fed and ready to finish or verify.
fn keyed(key: &[u8; 32], from: &str, at: u64) -> Hmac<Sha256> {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("HMAC takes any key"));
    mac.update(format!("{FORWARDED}\n{from}\n{at}").as_bytes());
    mac
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn cluster(name: &str, ring: &str) -> Cluster {
        let config = ClusterConfig {
            replica: name.into(),
            peers: std::collections::BTreeMap::new(),
            peer_url: Some("http://{replica}.svc:7332".into()),
            state_keys: None,
            unready_delay: Duration::from_secs(2),
            store: None,
        };
        Cluster::new(&config, &KeyRing::parse(ring).unwrap())
    }

    #[test]
    fn ids_name_their_owner() {
        let a = cluster("a", &format!("1 {}", "11".repeat(32)));
        assert_eq!(owner_of("a.3f9a"), Some("a"));
        assert_eq!(owner_of("3f9a"), None);
        assert_eq!(owner_of("a."), None);
        assert_eq!(owner_of("-a.x"), None);
        assert_eq!(owned(Some("a"), "3f9a".into()), "a.3f9a");
        assert_eq!(owned(None, "3f9a".into()), "3f9a");
        assert_eq!(a.peer("b").unwrap().as_str(), "http://b.svc:7332/");
    }

    #[test]
    fn a_forward_is_believed_only_when_a_replica_of_the_ring_signed_it() {
        let ring = format!("1 {}", "11".repeat(32));
        let (a, b) = (cluster("a", &ring), cluster("b", &ring));
        let stamp = a.stamp();
        assert_eq!(b.check(&stamp).unwrap(), "a");
        let stranger = cluster("a", &format!("1 {}", "22".repeat(32)));
        assert_eq!(stranger.check(&stamp), Err("its signature is wrong"));
        let renamed = stamp.replacen("a ", "c ", 1);
        assert_eq!(b.check(&renamed), Err("its signature is wrong"));
        assert_eq!(b.check("a 1 1 AA"), Err("its signature is wrong"));
        assert_eq!(b.check("nonsense"), Err("it is malformed"));
        let rotated = cluster("b", &format!("2 {}", "33".repeat(32)));
        assert_eq!(
            rotated.check(&stamp),
            Err("its key is not in server.cursor_keys")
        );
        let mac = keyed(&a.keys[0].1, "a", 1000).finalize().into_bytes();
        let old = format!("a 1000 1 {}", URL_SAFE_NO_PAD.encode(mac));
        assert_eq!(b.check(&old), Err("it is stale"));
    }
}
