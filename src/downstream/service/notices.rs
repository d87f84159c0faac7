//! Background work of the host side: forgetting idle sessions (and stopping the idle instances
//! that served stateless hosts), and telling sessions with an
//! event stream when a listing they see changed.

use std::sync::Arc;

use super::HostService;
use crate::jsonrpc::notification_line;
use crate::mcp::ListKind;

impl HostService {
    /// Forgets idle sessions periodically, for as long as the service lives.
    pub fn spawn_reaper(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        let every = self.upstreams.delivery.sessions.reap_interval();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                let Some(service) = weak.upgrade() else {
                    return;
                };
                for id in service.upstreams.delivery.sessions.idle() {
                    tracing::info!(session = %id, "Forgetting an idle host session.");
                    service.close_session(&id).await;
                }
                let idle = service.upstreams.delivery.sessions.idle_timeout();
                let busy = |key: &str| service.upstreams.supervisor.serving(key);
                for key in service
                    .upstreams
                    .delivery
                    .stateless_instances
                    .take_idle(idle, busy)
                {
                    tracing::info!(instances = %key, "Stopping the idle instances that served stateless requests.");
                    service.upstreams.supervisor.stop_instances(&key).await;
                    service.upstreams.delivery.log_levels.forget_scope(&key);
                }
            }
        });
    }

    /// Tells sessions with an event stream when a listing they see changed: one notification per
    /// listing per burst (the watch channel keeps only the newest generation), and only for the
    /// session's own view, so a change to items its profile hides says nothing.
    pub fn spawn_change_notices(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        let mut rx = self.upstreams.router.watch();
        let mut seen = self.upstreams.router.views();
        tokio::spawn(async move {
            while rx.changed().await.is_ok() {
                rx.borrow_and_update();
                let Some(service) = weak.upgrade() else {
                    return;
                };
                let current = service.upstreams.router.views();
                for session in service
                    .upstreams
                    .delivery
                    .sessions
                    .all()
                    .iter()
                    .filter(|s| s.is_streaming())
                {
                    let (before, now) = (
                        seen.of(session.profile().as_deref()),
                        current.of(session.profile().as_deref()),
                    );
                    let mut methods: Vec<&str> = ListKind::ALL
                        .into_iter()
                        .filter(|k| before.fingerprint(*k) != now.fingerprint(*k))
                        .map(|k| k.changed_notification())
                        .collect();
                    methods.dedup();
                    for method in methods {
                        session.deliver(notification_line(method, None));
                    }
                }
                seen = current;
            }
        });
    }
}
