//! systemd service notifications (`Type=notify`), sent to `$NOTIFY_SOCKET`: `READY=1` once the
//! listeners are up, `STATUS=` lines as upstreams change phase (ready, restarting, failed…), `WATCHDOG=1` at half of
//! `WatchdogSec` while the runtime answers, `STOPPING=1` when shutdown begins. Without
//! `NOTIFY_SOCKET` (not under systemd) every call does nothing.

use std::time::Duration;

use sd_notify::NotifyState;

use crate::router::RouterHandle;

/// Sends `states`; a failure is logged once at debug (systemd may simply not listen).
fn notify(states: &[NotifyState<'_>]) {
    if std::env::var_os("NOTIFY_SOCKET").is_none() {
        return;
    }
    if let Err(e) = sd_notify::notify(false, states) {
        tracing::debug!(error = %e, "Could not notify systemd.");
    }
}

/// The listeners are up: `READY=1` with the first status line; then status lines follow the
/// upstreams' phases (and the set of upstreams, which a reload changes), and the watchdog is fed
/// if systemd asked for one.
pub fn ready(router: &RouterHandle, url: &str) {
    if std::env::var_os("NOTIFY_SOCKET").is_none() {
        return;
    }
    // Watched from before the first status is read, so no change falls in between.
    let mut catalog = router.watch();
    let mut phases = watch_phases(router);
    let status = status_line(router, url);
    notify(&[NotifyState::Ready, NotifyState::Status(&status)]);
    let router = router.clone();
    let url = url.to_owned();
    tokio::spawn(async move {
        // The status is looked at whenever an upstream's phase or the catalog changes, and sent
        // when it reads differently.
        let mut last = status;
        loop {
            let phase = async {
                if phases.is_empty() {
                    return std::future::pending().await;
                }
                let changes = phases.iter_mut().map(|rx| Box::pin(rx.changed()));
                futures_util::future::select_all(changes).await.0
            };
            tokio::select! {
                _ = phase => {}
                changed = catalog.changed() => if changed.is_err() { return },
            }
            phases = watch_phases(&router);
            let status = status_line(&router, &url);
            if status != last {
                notify(&[NotifyState::Status(&status)]);
                last = status;
            }
        }
    });
    if let Some(usec) = watchdog_usec() {
        let every = Duration::from_micros(usec / 2);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                notify(&[NotifyState::Watchdog]);
            }
        });
    }
}

fn watch_phases(
    router: &RouterHandle,
) -> Vec<tokio::sync::watch::Receiver<crate::upstream::Phase>> {
    router
        .snapshot()
        .upstreams()
        .map(|h| h.watch_phase())
        .collect()
}

/// A reload begins: `RELOADING=1`, with the monotonic time systemd wants beside it.
pub fn reloading() {
    let mut states = vec![
        NotifyState::Reloading,
        NotifyState::Status("reloading the config"),
    ];
    states.extend(NotifyState::monotonic_usec_now().ok());
    notify(&states);
}

/// A reload ended (applied or refused): `READY=1` and the status line again.
pub fn reloaded(router: &RouterHandle, url: &str) {
    let status = status_line(router, url);
    notify(&[NotifyState::Ready, NotifyState::Status(&status)]);
}

/// `WATCHDOG_USEC`, when systemd set it for this process (`WATCHDOG_PID` absent or ours, as
/// `sd_watchdog_enabled(3)` reads them).
fn watchdog_usec() -> Option<u64> {
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
    let ours = match std::env::var("WATCHDOG_PID") {
        Ok(pid) => pid.parse::<u32>().ok() == Some(std::process::id()),
        Err(_) => true,
    };
    (ours && usec > 0).then_some(usec)
}

/// Shutdown begins.
pub fn stopping() {
    notify(&[
        NotifyState::Stopping,
        NotifyState::Status("stopping: draining host requests, then upstreams"),
    ]);
}

/// `serving N/M upstreams ready at URL`, with the upstreams that are not ready.
fn status_line(router: &RouterHandle, url: &str) -> String {
    let snapshot = router.snapshot();
    let mut waiting: Vec<String> = snapshot
        .upstreams()
        .filter(|h| h.config().enabled && h.phase() != crate::upstream::Phase::Ready)
        .map(|h| format!("{} {}", h.name(), h.phase()))
        .collect();
    waiting.sort();
    let total = snapshot.upstreams().filter(|h| h.config().enabled).count();
    let mut line = format!(
        "serving {url}: {}/{total} upstreams ready",
        total - waiting.len()
    );
    if !waiting.is_empty() {
        line.push_str(&format!(" ({})", waiting.join(", ")));
    }
    line
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::config::{CatalogConfig, UpstreamConfig};
    use crate::upstream::{Phase, UpstreamHandle, Upstreams};

    fn handle(name: &str, enabled: bool) -> UpstreamHandle {
        let config = UpstreamConfig {
            enabled,
            ..UpstreamConfig::for_tests(name)
        };
        UpstreamHandle::new(config, None, None)
    }

    fn router(handles: Vec<UpstreamHandle>) -> RouterHandle {
        let router = RouterHandle::new(&CatalogConfig::default(), &[], None);
        let (set, observed) = tokio::sync::watch::channel(Upstreams::from(handles));
        router.observe(observed);
        drop(set);
        router
    }

    #[test]
    fn the_status_line_counts_ready_upstreams_and_names_the_others() {
        let (ready, starting, off) = (handle("b", true), handle("a", true), handle("c", false));
        ready.set_phase(Phase::Ready, None);
        starting.set_phase(Phase::Starting, None);
        let router = router(vec![ready, starting, off]);
        assert_eq!(
            status_line(&router, "http://127.0.0.1:7332/mcp"),
            format!(
                "serving http://127.0.0.1:7332/mcp: 1/2 upstreams ready (a {})",
                Phase::Starting
            )
        );
    }

    #[test]
    fn with_every_upstream_ready_the_line_names_none() {
        let a = handle("a", true);
        a.set_phase(Phase::Ready, None);
        let router = router(vec![a]);
        assert_eq!(
            status_line(&router, "http://x/mcp"),
            "serving http://x/mcp: 1/1 upstreams ready"
        );
    }
}
