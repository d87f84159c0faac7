//! What an open overview listens to: `GET /console/events`, a server-sent event `upstreams` with
//! every upstream's row whenever one of them changed (state, counts, latency, last error); nothing
//! is sent while nothing changes. An upstream's change of state wakes it at once; counts are
//! looked at once per [`TICK`] while they move, less often ([`Pace`]) while they rest. Rows are
//! built (their latency histograms summed) only when a cheap [`pulse`] moved, so an open console
//! at rest costs the daemon a few counter reads every few seconds. The stream ends with the
//! session.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Extension;
use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use tokio::sync::watch;

use super::super::{AdminState, status_of};
use super::pages::Signed;
use crate::api::UpstreamStatus;
use crate::upstream::Phase;

/// How often an open page looks again while what it shows moves.
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

/// A digest of what moves whenever a row can change, read without summing a histogram: the
/// catalog's generation and each upstream's phase, restarts, last error, in-flight requests, and
/// request and error counts.
fn pulse(admin: &AdminState) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut digest = std::collections::hash_map::DefaultHasher::new();
    let snapshot = admin.router.snapshot();
    snapshot.generation.hash(&mut digest);
    for upstream in snapshot.upstreams() {
        let status = upstream.status();
        upstream.name().hash(&mut digest);
        status.phase.hash(&mut digest);
        status.restarts.hash(&mut digest);
        status.last_error.hash(&mut digest);
        upstream.in_flight().hash(&mut digest);
        upstream.metrics().request_counts().hash(&mut digest);
    }
    digest.finish()
}

/// The rows of every upstream now.
pub fn rows(admin: &AdminState) -> Vec<Row> {
    status_of(admin).upstreams.iter().map(Row::of).collect()
}

/// How long a live stream waits before it looks again: [`TICK`] after something moved, then
/// twice as long each time nothing did, up to [`REST`] — a page open on a daemon at rest wakes it
/// every few seconds, not every second.
#[derive(Debug)]
pub struct Pace(Duration);

/// The longest a live stream waits between looks.
pub const REST: Duration = Duration::from_secs(4);

impl Default for Pace {
    fn default() -> Self {
        Self(TICK)
    }
}

impl Pace {
    pub fn wait(&self) -> Duration {
        self.0
    }

    /// After a look: back to [`TICK`] if something moved, else slower.
    pub fn looked(&mut self, moved: bool) {
        self.0 = match moved {
            true => TICK,
            false => (self.0 * 2).min(REST),
        };
    }
}

/// The upstreams' phases, watched: a state change wakes the overview at once, whatever its pace.
#[derive(Debug)]
struct Phases {
    generation: u64,
    receivers: Vec<watch::Receiver<Phase>>,
}

impl Phases {
    fn of(admin: &AdminState) -> Self {
        let snapshot = admin.router.snapshot();
        Self {
            generation: snapshot.generation,
            receivers: snapshot.upstreams().map(|u| u.watch_phase()).collect(),
        }
    }

    /// Watches the upstreams of the catalog now, if it changed since.
    fn follow(&mut self, admin: &AdminState) {
        if admin.router.snapshot().generation != self.generation {
            *self = Self::of(admin);
        }
    }

    /// Until one of them changes phase (or is gone: then they are watched afresh).
    async fn changed(&mut self) {
        if self.receivers.is_empty() {
            return std::future::pending().await;
        }
        let each = self.receivers.iter_mut().map(|r| Box::pin(r.changed()));
        if futures_util::future::select_all(each).await.0.is_err() {
            self.generation = u64::MAX;
        }
    }
}

pub(super) async fn stream(
    State(admin): State<Arc<AdminState>>,
    Extension(signed): Extension<Signed>,
) -> Response {
    let phases = Phases::of(&admin);
    let state = (
        admin,
        signed.id,
        None::<Vec<Row>>,
        None::<u64>,
        Pace::default(),
        phases,
    );
    let stream = futures_util::stream::unfold(state, |mut state| async move {
        let (admin, id, sent, felt, pace, phases) = &mut state;
        loop {
            if sent.is_some() {
                tokio::select! {
                    () = tokio::time::sleep(pace.wait()) => {}
                    () = phases.changed() => {}
                }
            }
            if !admin.console.sessions.is_open(id) {
                return None;
            }
            phases.follow(admin);
            let beat = pulse(admin);
            pace.looked(*felt != Some(beat));
            if *felt == Some(beat) {
                continue;
            }
            *felt = Some(beat);
            let now = rows(admin);
            if sent.as_ref() != Some(&now) {
                let data = serde_json::to_string(&now).unwrap_or_default();
                *sent = Some(now);
                let event = Event::default().event("upstreams").data(data);
                return Some((Ok::<_, Infallible>(event), state));
            }
        }
    });
    live(stream)
}

/// A live stream's answer: its events, and a keep-alive comment every 15 s so that nothing
/// between the page and the daemon takes the quiet stream for a dead one.
pub fn live(
    events: impl futures_util::Stream<Item = Result<Event, Infallible>> + Send + 'static,
) -> Response {
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}
