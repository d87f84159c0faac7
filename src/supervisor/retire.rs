//! Retiring an upstream a reloaded config removed or changed: it is forgotten at once (its
//! shared instance and every session's own), publishes nothing more, and stops once what it has
//! in flight is answered or the grace period ends. What was still in flight when the grace
//! ended is reported ([`Undrained`]), not dropped: the reload says it did not finish cleanly.

use std::time::{Duration, Instant};

use std::collections::HashMap;

use super::{INSTANCE_STOP, Key, Slot, SupervisorState};
use crate::audit::Record;
use crate::sync::lock;
use crate::upstream::{Phase, StopReason, UpstreamHandle};

/// How often a retired upstream is checked for requests still in flight.
const DRAIN_POLL: Duration = Duration::from_millis(20);

/// A retired instance that still had requests in flight when its grace period ended: they were
/// ended with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Undrained {
    pub upstream: String,
    /// The host session whose own instance it was (`None`: the shared one).
    pub session: Option<String>,
    pub in_flight: usize,
    pub grace: Duration,
}

impl std::fmt::Display for Undrained {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "upstream `{}`", self.upstream)?;
        if let Some(session) = &self.session {
            let short: String = session.chars().take(8).collect();
            write!(f, " (the instance of session {short}…)")?;
        }
        write!(
            f,
            " still had {} request(s) in flight after server.drain_timeout ({}); they were ended. Fix: raise server.drain_timeout, or reload when those calls are done",
            self.in_flight,
            humantime::format_duration(self.grace)
        )
    }
}

/// The drains a reload started, one per retired instance: each ends with what it could not
/// finish.
pub(super) type Drains = Vec<tokio::task::JoinHandle<Option<Undrained>>>;

/// What catching up with `upstreams` takes: the names to retire (a shared instance supervised
/// as another handle than the set's, or not in the set at all) and the handles to adopt (those
/// of the set not supervised as themselves). An upstream the set disables is retired if it ran,
/// and its handle adopted (which leaves it alone).
pub(super) fn changes(
    slots: &HashMap<Key, Slot>,
    upstreams: &[UpstreamHandle],
) -> (Vec<String>, Vec<UpstreamHandle>) {
    let supervised = |h: &UpstreamHandle| {
        (slots.iter()).any(|(k, slot)| k.session.is_none() && slot.handle.is(h))
    };
    let mut retire: Vec<String> = (slots.iter())
        .filter(|(k, slot)| k.session.is_none() && !upstreams.iter().any(|h| h.is(&slot.handle)))
        .map(|(k, _)| k.upstream.clone())
        .collect();
    retire.sort();
    let add = (upstreams.iter())
        .filter(|h| !supervised(h))
        .cloned()
        .collect();
    (retire, add)
}

/// Forgets the upstream `name` (its shared instance and every session's own): each stops once
/// what it has in flight is answered, or `grace` passes. Its handles publish nothing more, and
/// their ends are not failures. Returns the drains, each ending with what was still in flight.
pub(super) fn retire(state: &mut SupervisorState, name: &str, grace: Duration) -> Drains {
    let mut drains = Drains::new();
    let keys: Vec<Key> = (state.slots.keys())
        .filter(|k| k.upstream == name)
        .cloned()
        .collect();
    for key in keys {
        let Some(slot) = state.slots.remove(&key) else {
            continue;
        };
        if let Some(session) = &key.session {
            lock(&state.instances).remove(&(key.upstream.clone(), session.clone()));
        }
        slot.handle.retire();
        let actor = slot.actor;
        if let Some(actor) = &actor {
            state.by_actor.remove(&actor.get_id());
        }
        state.audit.record(Record::event(
            "upstream.stopped",
            Some(&key.upstream),
            key.session.as_deref(),
            Some(StopReason::Reload.as_str().into()),
        ));
        drains.push(tokio::spawn(async move {
            let drained = Instant::now() + grace;
            while slot.handle.in_flight() > 0 && Instant::now() < drained {
                tokio::time::sleep(DRAIN_POLL).await;
            }
            let in_flight = slot.handle.in_flight();
            let undrained = (in_flight > 0).then(|| Undrained {
                upstream: key.upstream.clone(),
                session: key.session.clone(),
                in_flight,
                grace,
            });
            if undrained.is_some() {
                tracing::warn!(upstream = %key.upstream, in_flight, "A retired upstream did not drain in time; its requests in flight are ended.");
            }
            if let Some(actor) = actor {
                let reason = StopReason::Reload.as_str().to_owned();
                let _ = actor.stop_and_wait(Some(reason), Some(INSTANCE_STOP)).await;
            }
            slot.handle
                .set_phase(Phase::Stopped, Some("removed by a reload".into()));
            undrained
        }));
    }
    drains
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::UpstreamConfig;

    fn handle(name: &str) -> UpstreamHandle {
        UpstreamHandle::new(UpstreamConfig::for_tests(name), None, None)
    }

    fn slots(handles: &[&UpstreamHandle]) -> HashMap<Key, Slot> {
        (handles.iter())
            .map(|h| {
                let key = Key {
                    upstream: h.name().to_owned(),
                    session: None,
                };
                (key, Slot::new((*h).clone()))
            })
            .collect()
    }

    fn names(handles: &[UpstreamHandle]) -> Vec<&str> {
        handles.iter().map(UpstreamHandle::name).collect()
    }

    #[test]
    fn the_same_handles_change_nothing() {
        let (a, b) = (handle("a"), handle("b"));
        let (retire, add) = changes(&slots(&[&a, &b]), &[a.clone(), b.clone()]);
        assert!(retire.is_empty() && add.is_empty(), "{retire:?} {add:?}");
    }

    #[test]
    fn a_handle_new_to_the_set_is_adopted() {
        let (a, b) = (handle("a"), handle("b"));
        let (retire, add) = changes(&slots(&[&a]), &[a.clone(), b]);
        assert!(retire.is_empty());
        assert_eq!(names(&add), ["b"]);
    }

    #[test]
    fn an_upstream_gone_from_the_set_is_retired() {
        let (a, b) = (handle("a"), handle("b"));
        let (retire, add) = changes(&slots(&[&a, &b]), &[b]);
        assert_eq!(retire, ["a"]);
        assert!(add.is_empty());
    }

    #[test]
    fn another_handle_of_the_same_name_replaces_it() {
        let a = handle("a");
        let successor = handle("a");
        let (retire, add) = changes(&slots(&[&a]), std::slice::from_ref(&successor));
        assert_eq!(retire, ["a"]);
        assert_eq!(add.len(), 1);
        assert!(add[0].is(&successor) && !add[0].is(&a));
    }

    #[test]
    fn a_session_instance_is_not_the_shared_upstream() {
        let a = handle("a");
        let mut slots = slots(&[&a]);
        let key = Key {
            upstream: "a".into(),
            session: Some("s1".into()),
        };
        slots.insert(key, Slot::new(a.instance_for("s1", a.config().clone())));
        let (retire, add) = changes(&slots, std::slice::from_ref(&a));
        assert!(retire.is_empty() && add.is_empty(), "{retire:?} {add:?}");
    }
}
