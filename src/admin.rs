//! The admin API, on its own loopback listener: `GET /status` (every upstream's state, version,
//! catalog counts, restarts, last error), `POST /upstreams/{name}/restart`, `GET /health`
//! (the daemon answers) and `GET /ready` (no upstream is still starting). `mcpmux status` and
//! `mcpmux restart` use it.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Json, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

use crate::downstream::Gateway;
use crate::mcp::ListKind;
use crate::supervisor::RestartError;
use crate::upstream::State as UpstreamState;

/// The admin application.
pub fn app(gateway: Arc<Gateway>) -> Router {
    Router::new()
        .route("/status", get(status))
        .route("/health", get(|| async { "ok" }))
        .route("/ready", get(ready))
        .route("/upstreams/{name}/restart", post(restart))
        .with_state(gateway)
}

async fn status(State(gateway): State<Arc<Gateway>>) -> Json<Value> {
    let snapshot = gateway.router.snapshot();
    let mut counts: HashMap<(&str, ListKind), usize> = HashMap::new();
    for kind in ListKind::ALL {
        for entry in snapshot.list(kind) {
            *counts.entry((entry.upstream.name(), kind)).or_default() += 1;
        }
    }
    let mut upstreams: Vec<Value> = snapshot
        .upstreams()
        .map(|h| {
            let s = h.status();
            let count = |kind| counts.get(&(h.name(), kind)).copied().unwrap_or(0);
            json!({
                "name": h.name(),
                "prefix": h.prefix().as_str(),
                "state": s.state.to_string(),
                "last_error": s.last_error,
                "restarts": s.restarts,
                "pid": s.pid,
                "protocol_version": s.info.as_ref().map(|i| i.protocol_version),
                "server": s.info.as_ref().map(|i| i.server_info.clone()),
                "tools": count(ListKind::Tools),
                "prompts": count(ListKind::Prompts),
                "resources": count(ListKind::Resources),
                "resource_templates": count(ListKind::ResourceTemplates),
                "in_flight": h.in_flight(),
                "idle_seconds": h.idle_for().as_secs(),
            })
        })
        .collect();
    upstreams.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    Json(json!({
        "version": env!("CARGO_PKG_VERSION"),
        "catalog_generation": snapshot.generation,
        "sessions": gateway.hub.sessions.len(),
        "upstreams": upstreams,
    }))
}

async fn ready(State(gateway): State<Arc<Gateway>>) -> Response {
    let starting: Vec<String> = gateway
        .router
        .snapshot()
        .upstreams()
        .filter(|h| h.state() == UpstreamState::Starting)
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

async fn restart(State(gateway): State<Arc<Gateway>>, Path(name): Path<String>) -> Response {
    match gateway.supervisor().restart(&name).await {
        Ok(()) => Json(json!({ "restarted": name })).into_response(),
        Err(e @ RestartError::Unknown(_)) => (
            StatusCode::NOT_FOUND,
            Json(json!({ "error": e.to_string() })),
        )
            .into_response(),
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "error": e.to_string() })),
        )
            .into_response(),
    }
}
