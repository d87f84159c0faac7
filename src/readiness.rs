//! Whether the daemon should be sent requests: `GET /readyz` on the host listener (for load
//! balancers and Kubernetes probes) and on the admin API. Not ready while an upstream is still
//! starting, or from the moment a SIGTERM starts the drain — the load balancer takes the replica
//! out while it still serves everything (`[cluster] unready_delay`), then it stops accepting.

use std::sync::atomic::{AtomicBool, Ordering};

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::router::RouterHandle;
use crate::upstream::Phase;

pub struct Readiness {
    router: RouterHandle,
    draining: AtomicBool,
}

impl std::fmt::Debug for Readiness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Readiness")
            .field("draining", &self.draining.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Readiness {
    pub fn new(router: RouterHandle) -> Self {
        Self {
            router,
            draining: AtomicBool::new(false),
        }
    }

    /// From now on the daemon says it is not ready: it is stopping.
    pub fn drain(&self) {
        self.draining.store(true, Ordering::Relaxed);
    }

    /// 200 `ready`, or 503 and why not.
    pub fn answer(&self) -> Response {
        if self.draining.load(Ordering::Relaxed) {
            return (StatusCode::SERVICE_UNAVAILABLE, "draining: stopping").into_response();
        }
        let starting: Vec<String> = (self.router.snapshot().upstreams())
            .filter(|h| h.phase() == Phase::Starting)
            .map(|h| h.name().to_owned())
            .collect();
        if starting.is_empty() {
            (StatusCode::OK, "ready").into_response()
        } else {
            (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("starting: {}", starting.join(", ")),
            )
                .into_response()
        }
    }
}
