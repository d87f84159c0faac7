//! What an open overview listens to: `GET /console/events`, a server-sent event `upstreams` with
//! every upstream's row whenever one of them changed (state, counts, latency, last error), looked
//! at once per [`TICK`]; nothing is sent while nothing changes. The stream ends with the session.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Extension;
use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use super::super::{AdminState, status_of};
use super::pages::Signed;
use crate::api::UpstreamStatus;

/// How often an open overview's rows are compared with what it was last sent.
pub const TICK: Duration = Duration::from_secs(1);

/// One upstream's row as the overview shows it: every cell already as text.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    pub name: String,
    pub state: String,
    pub era: String,
    pub transport: String,
    pub tools: String,
    pub in_flight: String,
    pub p50: String,
    pub p99: String,
    pub restarts: String,
    pub last_error: String,
}

impl Row {
    pub fn of(upstream: &UpstreamStatus) -> Self {
        let ms = |v: Option<f64>| v.map_or("–".to_owned(), |v| format!("{v:.2} ms"));
        Self {
            name: upstream.name.clone(),
            state: upstream.state.clone(),
            era: upstream
                .protocol_version
                .clone()
                .unwrap_or_else(|| "–".into()),
            transport: upstream.transport.clone(),
            tools: upstream.tools.to_string(),
            in_flight: upstream.in_flight.to_string(),
            p50: ms(upstream.latency_p50_ms),
            p99: ms(upstream.latency_p99_ms),
            restarts: upstream.restarts.to_string(),
            last_error: upstream.last_error.clone().unwrap_or_default(),
        }
    }
}

/// The rows of every upstream now.
pub fn rows(admin: &AdminState) -> Vec<Row> {
    status_of(admin).upstreams.iter().map(Row::of).collect()
}

pub(super) async fn stream(
    State(admin): State<Arc<AdminState>>,
    Extension(signed): Extension<Signed>,
) -> Response {
    let state = (admin, signed.id, None::<Vec<Row>>);
    let stream = futures_util::stream::unfold(state, |(admin, id, mut sent)| async move {
        loop {
            if sent.is_some() {
                tokio::time::sleep(TICK).await;
            }
            if !admin.console.sessions.is_open(&id) {
                return None;
            }
            let now = rows(&admin);
            if sent.as_ref() != Some(&now) {
                let data = serde_json::to_string(&now).unwrap_or_default();
                sent = Some(now);
                let event = Event::default().event("upstreams").data(data);
                return Some((Ok::<_, Infallible>(event), (admin, id, sent)));
            }
        }
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}
