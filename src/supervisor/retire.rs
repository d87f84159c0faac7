//! Retiring an upstream a reloaded config removed or changed: it is forgotten at once (its
//! shared instance and every session's own), publishes nothing more, and stops once what it has
//! in flight is answered or the grace period ends.

use std::time::{Duration, Instant};

use super::{INSTANCE_STOP, Key, SupervisorState};
use crate::audit::Record;
use crate::sync::lock;
use crate::upstream::{Phase, StopReason};

/// How often a retired upstream is checked for requests still in flight.
const DRAIN_POLL: Duration = Duration::from_millis(20);

/// Forgets the upstream `name` (its shared instance and every session's own): each stops once
/// what it has in flight is answered, or `grace` passes. Its handles publish nothing more, and
/// their ends are not failures.
pub(super) fn retire(state: &mut SupervisorState, name: &str, grace: Duration) {
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
        tokio::spawn(async move {
            let drained = Instant::now() + grace;
            while slot.handle.in_flight() > 0 && Instant::now() < drained {
                tokio::time::sleep(DRAIN_POLL).await;
            }
            if let Some(actor) = actor {
                let reason = StopReason::Reload.as_str().to_owned();
                let _ = actor.stop_and_wait(Some(reason), Some(INSTANCE_STOP)).await;
            }
            slot.handle
                .set_phase(Phase::Stopped, Some("removed by a reload".into()));
        });
    }
}
