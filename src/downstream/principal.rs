//! A host known by its token ([`Principal`]) and its limits: requests in flight at once, and
//! requests per second (a GCRA token bucket, lock-free). Its counts show in `mcpmux status`.
//! [`Access`] is what one request is granted: its principal (if any) and the profile it sees.
//! A principal is known by (kind, issuer, name) — its [`Identity`] and name — never by its name
//! alone: a user who signs in with the name of a host is not that host.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use crate::config::{Credential, HeldToken, HostCredential, Profile, UpstreamSecrets};
use crate::jsonrpc::{RpcError, codes};

/// A configured host, its limits and its counts.
#[derive(Debug)]
pub struct Principal {
    /// What status, audit records and logs call it; with [`Self::identity`] who it is.
    pub name: Arc<str>,
    pub identity: Identity,
    /// The digest of its bearer token (`None`: it signs in with a JWT).
    pub token_sha256: Option<[u8; 32]>,
    /// The profile it sees (`None`: the whole catalog).
    pub profile: Option<Arc<Profile>>,
    /// Its own identity toward per-principal upstreams (`[hosts.NAME.upstreams.UP]`), by
    /// upstream name.
    pub secrets: BTreeMap<String, Arc<UpstreamSecrets>>,
    /// What names its own instances of per-principal upstreams ([`Self::instance_key`]).
    instance_key: String,
    max_in_flight: Option<usize>,
    rate: Option<Rate>,
    /// Sessions it may have open at once (`hosts.NAME.max_sessions`; `None`: only the server's
    /// limit).
    max_sessions: Option<usize>,
    in_flight: AtomicUsize,
    /// Its calls parked for its input (stateless hosts' multi-round calls): with `in_flight`
    /// they count against `max_in_flight` for a new request, not for the retry that continues
    /// one of them.
    parked: AtomicUsize,
    calls: AtomicU64,
    refused: AtomicU64,
}

/// What kind of principal one is, and for a signed-in user which issuer vouches for the name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    /// A `[hosts.NAME]` entry: its name is unique among hosts.
    Host,
    /// A user signed in through `[server.authorization]`, named by that issuer's token.
    SignedIn { issuer: Arc<str> },
}

/// Requests per second as the generic cell rate algorithm: the theoretical arrival time of the
/// next request advances by one interval per request and may run ahead of now by a burst.
#[derive(Debug)]
struct Rate {
    per_second: f64,
    interval_ns: u64,
    /// How far ahead of now the arrival time may be: a burst of `per_second` requests.
    burst_ns: u64,
    epoch: Instant,
    tat: AtomicU64,
}

/// One admitted request; its in-flight slot is given back when dropped.
#[derive(Debug)]
pub struct Admitted<'a>(&'a Principal);

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        if self.0.max_in_flight.is_some() {
            self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// An in-flight slot held by a parked call ([`Principal::hold_slot`]); given back when dropped.
#[derive(Debug)]
pub struct HeldSlot(Arc<Principal>);

impl Drop for HeldSlot {
    fn drop(&mut self) {
        self.0.parked.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What one request is granted: who it comes from (`None`: anonymous) and the profile it sees
/// (`None`: the whole catalog). A session keeps the access it was opened with (as a reload
/// updates it), and only the same access may use it.
#[derive(Debug, Clone, Default)]
pub struct Access {
    pub principal: Option<Arc<Principal>>,
    pub profile: Option<Arc<Profile>>,
    /// The profile is the one of the path the request came to (`/mcp/NAME`).
    pub via_path: bool,
    /// The address the request came from (`None`: not over HTTP). What an anonymous caller
    /// holds open is counted by it; it is not who the caller is, so [`Access::same`] does not
    /// compare it.
    pub peer: Option<std::net::IpAddr>,
    /// The JWT the request signed in with (`None` for a token host or anonymous), for upstreams
    /// that exchange each caller's own token (`grant = "token_exchange"`); not who the caller
    /// is, so [`Access::same`] does not compare it.
    pub subject_token: Option<HeldToken>,
}

impl Access {
    /// Whether this access may use what `other` opened: the same principal, and where either came
    /// through a profile's path, the same profile by name (a reload replaces both with their new
    /// settings; the names stay). At `/mcp` the profile is the principal's, so it is not compared:
    /// a reload that gives a principal another profile remaps its sessions one by one, and a
    /// request admitted under the new settings before its session's turn is still that session's.
    pub fn same(&self, other: &Self) -> bool {
        let through_a_path = self.via_path || other.via_path;
        let same_profile = !through_a_path
            || match (&self.profile, &other.profile) {
                (None, None) => true,
                (Some(a), Some(b)) => a.name == b.name,
                _ => false,
            };
        same_profile && Principal::same(self.principal.as_ref(), other.principal.as_ref())
    }
}

impl Principal {
    /// The principal of `host`; its profile is looked up in `profiles` (validation made sure it is there).
    pub fn new(host: &HostCredential, profiles: &[Arc<Profile>]) -> Self {
        let rate = host.max_calls_per_second.map(|per_second| {
            let interval_ns = (1e9 / per_second).max(1.0) as u64;
            Rate {
                per_second,
                interval_ns,
                burst_ns: interval_ns.saturating_mul((per_second.ceil() as u64).max(1) - 1),
                epoch: Instant::now(),
                tat: AtomicU64::new(0),
            }
        });
        Self {
            name: Arc::from(host.name.as_str()),
            identity: Identity::Host,
            token_sha256: match &host.credential {
                Credential::Token { sha256 } => Some(*sha256),
                Credential::Jwt { .. } => None,
            },
            profile: (host.profile.as_ref())
                .and_then(|name| profiles.iter().find(|p| &p.name == name).cloned()),
            secrets: host.upstreams.clone(),
            instance_key: instance_key(&Identity::Host, &host.name),
            max_in_flight: host.max_in_flight,
            rate,
            max_sessions: host.max_sessions,
            in_flight: AtomicUsize::new(0),
            parked: AtomicUsize::new(0),
            calls: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }
    }

    /// A user signed in through `[server.authorization]` (its `issuer`) whom no host entry
    /// names: no limits.
    pub fn signed_in(issuer: &str, name: &str, profile: Option<Arc<Profile>>) -> Self {
        let identity = Identity::SignedIn {
            issuer: Arc::from(issuer),
        };
        Self {
            name: Arc::from(name),
            instance_key: instance_key(&identity, name),
            identity,
            token_sha256: None,
            profile,
            secrets: BTreeMap::new(),
            max_in_flight: None,
            rate: None,
            max_sessions: None,
            in_flight: AtomicUsize::new(0),
            parked: AtomicUsize::new(0),
            calls: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }
    }

    /// What names its own instances of per-principal upstreams: its kind, issuer and name, as
    /// [`Self::same`] compares them (a reload keeps them), so its sessions share them and no
    /// other principal's does.
    /// The instance key of the host `name` (no `issuer`), or of the user `name` that `issuer`
    /// signed in: what its instances and sign-ins are bound to.
    pub fn key_of(issuer: Option<&str>, name: &str) -> String {
        let identity = match issuer {
            None => Identity::Host,
            Some(issuer) => Identity::SignedIn {
                issuer: Arc::from(issuer),
            },
        };
        instance_key(&identity, name)
    }

    pub fn instance_key(&self) -> &str {
        &self.instance_key
    }

    /// Its own identity toward the per-principal upstream `upstream`: its table, or the
    /// upstream's settings alone.
    pub fn secrets_for(&self, upstream: &str) -> Arc<UpstreamSecrets> {
        (self.secrets.get(upstream).cloned()).unwrap_or_else(UpstreamSecrets::none)
    }

    /// Whether `asking` may use what `owner` opened: the same principal — the same kind, issuer
    /// and name, as a reload keeps them — or both anonymous.
    pub fn same(owner: Option<&Arc<Self>>, asking: Option<&Arc<Self>>) -> bool {
        match (owner, asking) {
            (None, None) => true,
            (Some(owner), Some(asking)) => {
                owner.identity == asking.identity && owner.name == asking.name
            }
            _ => false,
        }
    }

    /// A slot of its `max_in_flight`, held by a call parked for the host's input (it stays in
    /// flight upstream) and given back when dropped; `None` when it has no in-flight limit.
    /// Taken whatever the count: the request that parks the call holds a slot of its own until
    /// it ends, and the parked call counts against new requests from then on.
    pub fn hold_slot(self: &Arc<Self>) -> Option<HeldSlot> {
        self.max_in_flight?;
        self.parked.fetch_add(1, Ordering::Relaxed);
        Some(HeldSlot(Arc::clone(self)))
    }

    /// Sessions it may have open at once, if it has a limit of its own.
    pub fn max_sessions(&self) -> Option<usize> {
        self.max_sessions
    }

    /// Admits one request within this host's limits, or says which limit it met. Its calls
    /// parked for its input count against `max_in_flight` too, unless `continues` says the
    /// request continues one of them (asked only then, and only of a host with that limit).
    pub fn admit(&self, continues: impl FnOnce() -> bool) -> Result<Admitted<'_>, RpcError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        if let Some(rate) = &self.rate {
            if !rate.take() {
                self.refused.fetch_add(1, Ordering::Relaxed);
                return Err(RpcError::new(
                    codes::RATE_LIMITED,
                    format!(
                        "host `{}` is over its limit of {} requests per second (hosts.{}.max_calls_per_second); retry later",
                        self.name, rate.per_second, self.name
                    ),
                ));
            }
        }
        if let Some(max) = self.max_in_flight {
            let before = self.in_flight.fetch_add(1, Ordering::Relaxed);
            let parked = self.parked.load(Ordering::Relaxed);
            if before >= max || (parked > 0 && before + parked >= max && !continues()) {
                self.in_flight.fetch_sub(1, Ordering::Relaxed);
                self.refused.fetch_add(1, Ordering::Relaxed);
                return Err(RpcError::new(
                    codes::BUSY,
                    format!(
                        "host `{}` already has {max} requests in flight or waiting for its input (hosts.{}.max_in_flight); retry when one ends",
                        self.name, self.name
                    ),
                ));
            }
        }
        Ok(Admitted(self))
    }

    /// Its limits and counts, for status (`sessions` is the session store's to fill in).
    pub fn status(&self) -> crate::api::HostStatus {
        crate::api::HostStatus {
            name: self.name.to_string(),
            profile: self.profile.as_ref().map(|p| p.name.clone()),
            in_flight: self.in_flight.load(Ordering::Relaxed),
            requests: self.calls.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
            max_in_flight: self.max_in_flight,
            max_calls_per_second: self.rate.as_ref().map(|r| r.per_second),
            max_sessions: self.max_sessions,
            sessions: 0,
        }
    }
}

impl Rate {
    /// Takes one request's worth, if the bucket has it.
    fn take(&self) -> bool {
        let now = u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let mut tat = self.tat.load(Ordering::Relaxed);
        loop {
            let start = tat.max(now);
            if start - now > self.burst_ns {
                return false;
            }
            match self.tat.compare_exchange_weak(
                tat,
                start + self.interval_ns,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(seen) => tat = seen,
            }
        }
    }
}

/// The key of a principal's instances: quoted (escaped), so no two (kind, issuer, name) give one.
fn instance_key(identity: &Identity, name: &str) -> String {
    match identity {
        Identity::Host => format!("principal host {name:?}"),
        Identity::SignedIn { issuer } => format!("principal user {:?} {name:?}", &**issuer),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(max_in_flight: Option<usize>, rate: Option<f64>) -> Principal {
        Principal::new(
            &HostCredential {
                name: "h".into(),
                credential: Credential::Token { sha256: [0; 32] },
                max_in_flight,
                max_calls_per_second: rate,
                max_sessions: None,
                profile: None,
                upstreams: Default::default(),
            },
            &[],
        )
    }

    #[test]
    fn in_flight_slots_are_counted_and_given_back() {
        let p = host(Some(2), None);
        let a = p
            .admit(|| false)
            .map_err(|e| e.message)
            .unwrap_or_else(|e| panic!("{e}"));
        let _b = p
            .admit(|| false)
            .map_err(|e| e.message)
            .unwrap_or_else(|e| panic!("{e}"));
        let refused = p
            .admit(|| false)
            .err()
            .map(|e| (e.code, e.message))
            .unwrap_or_default();
        assert_eq!(refused.0, codes::BUSY);
        assert!(refused.1.contains("max_in_flight"), "{}", refused.1);
        drop(a);
        assert!(p.admit(|| false).is_ok());
        assert_eq!(p.status().refused, 1);
    }

    #[test]
    fn a_rate_allows_its_burst_then_refuses_until_time_passes() {
        let p = host(None, Some(5.0));
        let admitted = (0..20).filter(|_| p.admit(|| false).is_ok()).count();
        assert_eq!(admitted, 5);
        std::thread::sleep(std::time::Duration::from_millis(450));
        let later = (0..20).filter(|_| p.admit(|| false).is_ok()).count();
        assert!((2..=3).contains(&later), "{later}");
    }

    fn profiles() -> Vec<Arc<Profile>> {
        let path = std::path::Path::new("/tmp/mcpmux-principal/mcpmux.toml");
        let text = "[profiles.a]\npath = true\n[profiles.b]\npath = true\n";
        let config = crate::config::parse(path, text).unwrap_or_else(|e| panic!("{e}"));
        config.profiles.into_iter().map(Arc::new).collect()
    }

    #[test]
    fn a_session_at_mcp_stays_its_principals_whatever_profile_a_reload_gives_it() {
        let [a, b] = <[_; 2]>::try_from(profiles()).unwrap_or_else(|_| panic!("two profiles"));
        let robot = Arc::new(host(None, None));
        let access = |principal: &Arc<Principal>, profile: &Arc<Profile>, via_path| Access {
            principal: Some(Arc::clone(principal)),
            profile: Some(Arc::clone(profile)),
            via_path,
            peer: None,
            subject_token: None,
        };
        let opened = access(&robot, &a, false);
        // Admitted under the reloaded settings before the session was remapped to them.
        let reloaded = Access {
            profile: None,
            ..access(&robot, &a, false)
        };
        assert!(reloaded.same(&opened) && opened.same(&reloaded));
        assert!(access(&robot, &b, false).same(&opened));
        // Another principal, or anonymous, never.
        let other = Arc::new(Principal {
            name: Arc::from("other"),
            ..host(None, None)
        });
        assert!(!access(&other, &a, false).same(&opened));
        assert!(
            !Access {
                principal: None,
                ..access(&robot, &a, false)
            }
            .same(&opened)
        );
        // A profile's path is part of what a session is: `/mcp/a` is not `/mcp/b`, nor `/mcp`
        // with another profile.
        let at_a = access(&robot, &a, true);
        assert!(access(&robot, &a, true).same(&at_a));
        assert!(!access(&robot, &b, true).same(&at_a));
        assert!(!access(&robot, &b, false).same(&at_a));
        assert!(!at_a.same(&access(&robot, &b, false)));
        assert!(!access(&other, &a, true).same(&at_a));
    }
}
