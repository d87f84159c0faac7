//! What the overview's charts show: each upstream's request rate and mean latency over the last
//! hour, sampled every [`EVERY`] from the counters `/status` reads (one pass over the upstreams
//! from a task of the admin side; nothing on the forwarding path), and drawn as SVG on the server
//! (no script, no chart library).

use std::collections::{HashMap, VecDeque};
use std::fmt::Write;
use std::sync::{Mutex, Weak};
use std::time::Duration;

use maud::{Markup, html};

use super::super::AdminState;
use crate::sync::lock;

/// How often the counters are read.
pub const EVERY: Duration = Duration::from_secs(10);

/// Samples kept: an hour's.
const KEEP: usize = 360;

/// One interval of one upstream.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    /// Requests per second.
    pub rate: f64,
    /// Their mean latency (`None`: no request).
    pub mean_ms: Option<f64>,
}

#[derive(Debug, Default)]
struct Track {
    /// The counters at the last sample: requests, and their summed latency.
    last: Option<(u64, Duration)>,
    points: VecDeque<Point>,
}

/// Every upstream's last hour.
#[derive(Debug, Default)]
pub struct History {
    tracks: Mutex<HashMap<String, Track>>,
}

impl History {
    /// Adds one interval per upstream from its counters now (`interval` long); upstreams no
    /// longer configured are forgotten.
    pub fn sample(&self, counters: &[(String, u64, Duration)], interval: Duration) {
        let mut tracks = lock(&self.tracks);
        tracks.retain(|name, _| counters.iter().any(|(n, _, _)| n == name));
        for (name, requests, latency) in counters {
            let track = tracks.entry(name.clone()).or_default();
            if let Some((before, summed)) = track.last {
                // A restarted upstream's counters may start again from zero.
                let done = requests.saturating_sub(before);
                let spent = latency.saturating_sub(summed);
                track.points.push_back(Point {
                    rate: done as f64 / interval.as_secs_f64().max(f64::EPSILON),
                    mean_ms: (done > 0).then(|| spent.as_secs_f64() * 1000.0 / done as f64),
                });
                if track.points.len() > KEEP {
                    track.points.pop_front();
                }
            }
            track.last = Some((*requests, *latency));
        }
    }

    /// `upstream`'s points, oldest first.
    pub fn points(&self, upstream: &str) -> Vec<Point> {
        lock(&self.tracks)
            .get(upstream)
            .map(|t| t.points.iter().copied().collect())
            .unwrap_or_default()
    }
}

/// Samples every upstream every [`EVERY`] while the admin side lives.
pub async fn sample_forever(admin: Weak<AdminState>) {
    loop {
        tokio::time::sleep(EVERY).await;
        let Some(admin) = admin.upgrade() else {
            return;
        };
        let snapshot = admin.router.snapshot();
        let counters: Vec<(String, u64, Duration)> = (snapshot.upstreams())
            .map(|h| {
                let total = h.metrics().total();
                (h.name().to_owned(), total.requests(), total.latency.sum())
            })
            .collect();
        admin.console.history.sample(&counters, EVERY);
    }
}

/// A small line chart of `values` (missing ones leave a gap), labelled for people who cannot see it.
fn spark(values: &[Option<f64>], label: &str) -> Markup {
    const WIDTH: f64 = 180.0;
    const HEIGHT: f64 = 36.0;
    let peak = values.iter().flatten().fold(0.0f64, |a, b| a.max(*b));
    let step = WIDTH / (KEEP.max(2) - 1) as f64;
    let offset = (KEEP - values.len().min(KEEP)) as f64 * step;
    let mut path = String::new();
    let mut pen_down = false;
    for (i, value) in values.iter().enumerate() {
        match value {
            Some(v) => {
                let x = offset + i as f64 * step;
                let y = HEIGHT - 2.0 - (v / peak.max(f64::EPSILON)) * (HEIGHT - 4.0);
                let _ = write!(path, "{}{x:.1},{y:.1} ", if pen_down { 'L' } else { 'M' });
                pen_down = true;
            }
            None => pen_down = false,
        }
    }
    html! {
        svg.spark role="img" aria-label=(label) width=(WIDTH) height=(HEIGHT) viewBox={ "0 0 " (WIDTH) " " (HEIGHT) } {
            title { (label) }
            rect x="0" y="0" width=(WIDTH) height=(HEIGHT) fill="#f3f5f8" {}
            @if !path.is_empty() {
                path d=(path.trim_end()) fill="none" stroke="#0b57d0" stroke-width="1.5" {}
            }
        }
    }
}

/// The two charts of one upstream's last hour.
pub fn charts(points: &[Point]) -> Markup {
    let rates: Vec<Option<f64>> = points.iter().map(|p| Some(p.rate)).collect();
    let means: Vec<Option<f64>> = points.iter().map(|p| p.mean_ms).collect();
    let now =
        |v: Option<f64>, unit: &str| v.map_or("none".to_owned(), |v| format!("{v:.2} {unit}"));
    let peak = |values: &[Option<f64>]| values.iter().flatten().copied().reduce(f64::max);
    let rate_label = format!(
        "Requests per second over the last hour: now {}, peak {}",
        now(points.last().map(|p| p.rate), "/s"),
        now(peak(&rates), "/s")
    );
    let latency_label = format!(
        "Mean latency over the last hour: now {}, peak {}",
        now(points.last().and_then(|p| p.mean_ms), "ms"),
        now(peak(&means), "ms")
    );
    html! {
        (spark(&rates, &rate_label))
        (spark(&means, &latency_label))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interval_is_its_requests_and_their_mean_latency() {
        let history = History::default();
        let every = Duration::from_secs(10);
        let name = "a".to_owned();
        history.sample(&[(name.clone(), 100, Duration::from_millis(500))], every);
        assert!(
            history.points("a").is_empty(),
            "the first sample is the baseline"
        );
        history.sample(&[(name.clone(), 150, Duration::from_millis(600))], every);
        history.sample(&[(name.clone(), 150, Duration::from_millis(600))], every);
        let points = history.points("a");
        assert_eq!(points[0].rate, 5.0);
        assert_eq!(points[0].mean_ms, Some(2.0));
        assert_eq!(
            points[1],
            Point {
                rate: 0.0,
                mean_ms: None
            }
        );
        history.sample(&[], every);
        assert!(
            history.points("a").is_empty(),
            "a removed upstream is forgotten"
        );
        let svg = charts(&points).into_string();
        assert!(
            svg.contains("role=\"img\"") && svg.contains("now 0.00 /s, peak 5.00 /s"),
            "{svg}"
        );
    }
}
