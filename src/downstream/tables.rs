//! What the host side keeps across sessions: how many sessions want each upstream resource
//! subscription (an upstream stays subscribed while anyone wants it), which session owns each
//! task, and the log level each upstream was last told.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use crate::sync::lock;
use crate::upstream::UpstreamId;

/// Subscriptions counted per upstream instance (a per-session instance is its own) and URI.
#[derive(Debug, Default)]
pub struct Subscriptions(Mutex<HashMap<(String, String), usize>>);

impl Subscriptions {
    /// Counts one more subscription to `uri` on `upstream`; true when it is the first.
    pub fn add(&self, upstream: &UpstreamId, uri: &str) -> bool {
        let mut subs = lock(&self.0);
        let count = subs.entry((key_of(upstream), uri.to_owned())).or_insert(0);
        *count += 1;
        *count == 1
    }

    /// Counts one subscription less; true when it was the last.
    pub fn remove(&self, upstream: &UpstreamId, uri: &str) -> bool {
        let mut subs = lock(&self.0);
        let key = (key_of(upstream), uri.to_owned());
        match subs.get_mut(&key) {
            Some(count) if *count > 1 => {
                *count -= 1;
                false
            }
            Some(_) => {
                subs.remove(&key);
                true
            }
            None => false,
        }
    }

    /// The URIs `upstream` is subscribed to now (to restore them after it restarts).
    pub fn of(&self, upstream: &UpstreamId) -> Vec<String> {
        let instance = key_of(upstream);
        lock(&self.0)
            .keys()
            .filter(|(key, _)| *key == instance)
            .map(|(_, uri)| uri.clone())
            .collect()
    }

    /// Forgets the subscriptions of every instance serving `session` (it ended).
    pub fn forget_session(&self, session: &str) {
        let suffix = scope_suffix(session);
        lock(&self.0).retain(|(instance, _), _| !instance.ends_with(&suffix));
    }
}

/// `name` for a shared instance, `name@session` for a session's own (or for the instance that
/// serves stateless hosts under that key): how the tables here tell instances apart.
pub fn instance_key(name: &str, scope: Option<&str>) -> String {
    match scope {
        Some(scope) => format!("{name}{}", scope_suffix(scope)),
        None => name.to_owned(),
    }
}

/// What the keys of every instance serving `scope` end with.
fn scope_suffix(scope: &str) -> String {
    format!("@{scope}")
}

fn key_of(upstream: &UpstreamId) -> String {
    instance_key(&upstream.name, upstream.scope.as_deref())
}

/// The instances of per-session upstreams that serve stateless (2026-07-28) hosts — one per
/// principal and profile, as a session has its own — by key, with when each was last used: an
/// instance idle as long as a session may be is stopped.
#[derive(Debug, Default)]
pub struct StatelessInstances(Mutex<HashMap<String, Instant>>);

impl StatelessInstances {
    /// `key`'s instances are in use now.
    pub fn touch(&self, key: &str) {
        let now = Instant::now();
        let mut used = lock(&self.0);
        match used.get_mut(key) {
            Some(last) => *last = now,
            None => {
                used.insert(key.to_owned(), now);
            }
        }
    }

    /// The keys unused for `idle` or longer, unless `busy` (a call still in flight there),
    /// forgotten.
    pub fn take_idle(&self, idle: std::time::Duration, busy: impl Fn(&str) -> bool) -> Vec<String> {
        let mut used = lock(&self.0);
        let idle_keys: Vec<String> = (used.iter())
            .filter(|(key, last)| last.elapsed() >= idle && !busy(key))
            .map(|(key, _)| key.clone())
            .collect();
        for key in &idle_keys {
            used.remove(key);
        }
        idle_keys
    }
}

/// Exposed task id → the session that created it.
#[derive(Debug, Default)]
pub struct TaskOwners(Mutex<HashMap<String, String>>);

impl TaskOwners {
    pub fn own(&self, exposed_task: &str, session: &str) {
        lock(&self.0).insert(exposed_task.to_owned(), session.to_owned());
    }

    pub fn owner(&self, exposed_task: &str) -> Option<String> {
        lock(&self.0).get(exposed_task).cloned()
    }
}

/// Upstream → the log level (a rank of `mcp::LOG_LEVELS`) last set there.
#[derive(Debug, Default)]
pub struct LogLevels(Mutex<HashMap<String, usize>>);

impl LogLevels {
    /// Records `wanted` for `upstream`; true when it differs from what it was last told.
    pub fn set(&self, upstream: &str, wanted: usize) -> bool {
        lock(&self.0).insert(upstream.to_owned(), wanted) != Some(wanted)
    }

    /// Records `wanted` for `upstream` when it is more verbose than what it was last told (or it
    /// was told nothing); true when it was.
    pub fn lower(&self, upstream: &str, wanted: usize) -> bool {
        let mut levels = lock(&self.0);
        match levels.get(upstream) {
            Some(told) if *told <= wanted => false,
            _ => {
                levels.insert(upstream.to_owned(), wanted);
                true
            }
        }
    }

    /// Forgets what the instances serving `scope` were told (they were stopped).
    pub fn forget_scope(&self, scope: &str) {
        let suffix = scope_suffix(scope);
        lock(&self.0).retain(|key, _| !key.ends_with(&suffix));
    }

    pub fn get(&self, upstream: &str) -> Option<usize> {
        lock(&self.0).get(upstream).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn an_idle_instance_key_is_taken_once_unless_a_call_is_in_flight_there() {
        let used = StatelessInstances::default();
        used.touch("a");
        used.touch("b");
        assert!(
            used.take_idle(Duration::from_secs(3600), |_| false)
                .is_empty()
        );
        let taken = used.take_idle(Duration::ZERO, |key| key == "b");
        assert_eq!(taken, ["a"], "b is busy");
        assert_eq!(used.take_idle(Duration::ZERO, |_| false), ["b"]);
        assert!(
            used.take_idle(Duration::ZERO, |_| false).is_empty(),
            "taken once"
        );
    }
}
