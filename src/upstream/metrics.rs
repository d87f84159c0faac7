//! Per upstream, per method and per tool: requests, errors and a latency histogram, recorded on
//! the hot path with a few relaxed atomic adds. A series is found without a lock: the methods are
//! a fixed array, and a tool's series is read from a copy-on-write map (written only the first
//! time a tool is called). The histogram has four buckets per doubling from 1 µs to 2^28 µs
//! (~4.5 min), so p50/p99 read from it are within ±10 %; `/metrics` exposes it at every doubling.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;

use crate::mcp::method::Method;

/// Buckets of a [`Histogram`]: four per doubling up to 2^28 µs, and one beyond.
const BUCKETS: usize = 4 * 28 + 1;

/// Latencies, counted in logarithmic buckets.
#[derive(Debug)]
pub struct Histogram {
    buckets: [AtomicU64; BUCKETS],
    sum_us: AtomicU64,
    count: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_us: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }
}

/// The bucket of `us` microseconds: `4·⌊log2 us⌋` plus the next two bits.
fn bucket_of(us: u64) -> usize {
    if us < 4 {
        return us as usize;
    }
    let exp = 63 - us.leading_zeros() as usize;
    let quarter = ((us >> (exp - 2)) & 3) as usize;
    (4 * exp + quarter).min(BUCKETS - 1)
}

/// The smallest latency (µs) of bucket `i`'s successor: bucket `i` holds what is below it.
fn upper_bound_us(i: usize) -> f64 {
    match i {
        0..4 => (i + 1) as f64,
        // Never used: no latency of 4 µs or more falls below bucket 8.
        4..8 => 4.0,
        _ => (1u64 << (i / 4)) as f64 * (1.0 + (i % 4 + 1) as f64 / 4.0),
    }
}

impl Histogram {
    pub fn record(&self, elapsed: Duration) {
        let us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        self.buckets[bucket_of(us)].fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    pub fn sum(&self) -> Duration {
        Duration::from_micros(self.sum_us.load(Ordering::Relaxed))
    }

    fn counts(&self) -> [u64; BUCKETS] {
        std::array::from_fn(|i| self.buckets[i].load(Ordering::Relaxed))
    }

    /// Adds `other`'s counts to this one (summing an upstream's series).
    fn absorb(&self, other: &Self) {
        for (mine, theirs) in self.buckets.iter().zip(other.counts()) {
            mine.fetch_add(theirs, Ordering::Relaxed);
        }
        self.sum_us
            .fetch_add(other.sum_us.load(Ordering::Relaxed), Ordering::Relaxed);
        self.count.fetch_add(other.count(), Ordering::Relaxed);
    }

    /// The latency below which `q` (0–1) of the recorded ones are, to within a bucket
    /// (interpolated inside it); `None` before anything was recorded.
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        let counts = self.counts();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return None;
        }
        let rank = (q.clamp(0.0, 1.0) * total as f64).max(1.0);
        let mut seen = 0u64;
        for (i, n) in counts.iter().enumerate() {
            if *n == 0 {
                continue;
            }
            if (seen + n) as f64 >= rank {
                let low = if i == 0 { 0.0 } else { upper_bound_us(i - 1) };
                let high = upper_bound_us(i);
                let within = (rank - seen as f64) / *n as f64;
                return Some(Duration::from_secs_f64((low + (high - low) * within) / 1e6));
            }
            seen += n;
        }
        None
    }

    /// Cumulative counts at every doubling (`le` in seconds), as Prometheus histograms have them,
    /// up to the largest bucket in use; the last one is `+Inf`.
    pub fn cumulative(&self) -> Vec<(f64, u64)> {
        let counts = self.counts();
        let last = counts.iter().rposition(|n| *n > 0).unwrap_or(0);
        let mut out = Vec::new();
        let mut total = 0;
        for (i, n) in counts.iter().enumerate() {
            total += n;
            let bound = upper_bound_us(i);
            // The last bound of each doubling is a power of two (in µs).
            if i % 4 == 3 && i != 7 && i < BUCKETS - 1 && i <= last + 4 {
                out.push((bound / 1e6, total));
            }
        }
        out.push((f64::INFINITY, total));
        out
    }
}

/// One series: how many requests, how many failed, how long they took.
#[derive(Debug, Default)]
pub struct Series {
    pub errors: AtomicU64,
    pub latency: Histogram,
}

impl Series {
    pub fn record(&self, elapsed: Duration, failed: bool) {
        self.latency.record(elapsed);
        if failed {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn requests(&self) -> u64 {
        self.latency.count()
    }

    pub fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }
}

/// The methods that have a series of their own; the rest are counted as `other` (`None`).
const METHODS: [Option<Method>; 5] = [
    Some(Method::ToolsCall),
    Some(Method::PromptsGet),
    Some(Method::ResourcesRead),
    Some(Method::Complete),
    None,
];

/// Everything one upstream (with its per-session instances) was asked by hosts.
#[derive(Debug, Default)]
pub struct CallMetrics {
    methods: [Series; METHODS.len()],
    tools: ArcSwap<HashMap<Box<str>, Arc<Series>>>,
    /// Held only while a first-seen tool's series is added.
    adding: Mutex<()>,
}

/// The labels of one series and its numbers, for `/metrics`.
#[derive(Debug)]
pub struct SeriesView<'a> {
    pub method: &'static str,
    pub tool: Option<&'a str>,
    pub series: &'a Series,
}

/// How many tools of one upstream get a series of their own; calls of more tools count as
/// `tools/call` only (bounds memory and label cardinality against runaway catalogs).
const MAX_TOOL_SERIES: usize = 1000;

impl CallMetrics {
    /// Records a host request to this upstream: `tool` for `tools/call`.
    pub fn record(&self, method: Method, tool: Option<&str>, elapsed: Duration, failed: bool) {
        if let Some(tool) = tool {
            if let Some(series) = self.tool(tool) {
                series.record(elapsed, failed);
                return;
            }
        }
        let i = METHODS
            .iter()
            .position(|m| *m == Some(method))
            .unwrap_or(METHODS.len() - 1);
        self.methods[i].record(elapsed, failed);
    }

    /// The series of `tool`, added on its first call.
    fn tool(&self, tool: &str) -> Option<Arc<Series>> {
        if let Some(series) = self.tools.load().get(tool) {
            return Some(Arc::clone(series));
        }
        let _adding = crate::sync::lock(&self.adding);
        let now = self.tools.load_full();
        if let Some(series) = now.get(tool) {
            return Some(Arc::clone(series));
        }
        if now.len() >= MAX_TOOL_SERIES {
            return None;
        }
        let mut next = (*now).clone();
        let series = Arc::new(Series::default());
        next.insert(tool.into(), Arc::clone(&series));
        self.tools.store(Arc::new(next));
        Some(series)
    }

    /// Every series with a request, tools by name.
    pub fn each(&self, mut f: impl FnMut(SeriesView<'_>)) {
        for (method, series) in METHODS.iter().zip(&self.methods) {
            if series.requests() > 0 {
                f(SeriesView {
                    method: method.map_or("other", Method::as_str),
                    tool: None,
                    series,
                });
            }
        }
        let tools = self.tools.load();
        let mut names: Vec<&Box<str>> = tools.keys().collect();
        names.sort();
        for name in names {
            f(SeriesView {
                method: Method::ToolsCall.as_str(),
                tool: Some(name),
                series: &tools[name],
            });
        }
    }

    /// How many requests went to this upstream, and how many failed: what [`Self::total`] counts,
    /// without summing its histograms.
    pub fn request_counts(&self) -> (u64, u64) {
        let (mut requests, mut errors) = (0, 0);
        self.each(|v| {
            requests += v.series.requests();
            errors += v.series.errors();
        });
        (requests, errors)
    }

    /// Every request to this upstream in one histogram (for status's p50/p99).
    pub fn total(&self) -> Series {
        let total = Series::default();
        self.each(|v| {
            total.latency.absorb(&v.series.latency);
            total.errors.fetch_add(v.series.errors(), Ordering::Relaxed);
        });
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_a_quarter_doubling_wide_and_ordered() {
        let mut last = 0;
        for us in 1..100_000u64 {
            let b = bucket_of(us);
            assert!(b >= last);
            assert!((us as f64) < upper_bound_us(b), "{us} in {b}");
            let below = (0..b).rev().find(|&i| !(4..8).contains(&i));
            assert!(
                below.is_none_or(|i| us as f64 >= upper_bound_us(i)),
                "{us} in {b}"
            );
            last = b;
        }
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn quantiles_are_within_a_bucket() {
        let h = Histogram::default();
        for ms in 1..=100u64 {
            h.record(Duration::from_millis(ms));
        }
        let p50 = h.quantile(0.5).unwrap_or_default().as_secs_f64() * 1e3;
        let p99 = h.quantile(0.99).unwrap_or_default().as_secs_f64() * 1e3;
        assert!((45.0..=56.0).contains(&p50), "{p50}");
        assert!((89.0..=110.0).contains(&p99), "{p99}");
        let cumulative = h.cumulative();
        assert_eq!(cumulative.last().map(|c| c.1), Some(100));
        assert!(
            cumulative
                .windows(2)
                .all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1)
        );
    }

    #[test]
    fn tools_get_their_own_series_and_the_rest_their_method() {
        let m = CallMetrics::default();
        m.record(
            Method::ToolsCall,
            Some("echo"),
            Duration::from_micros(80),
            false,
        );
        m.record(
            Method::ToolsCall,
            Some("echo"),
            Duration::from_micros(90),
            true,
        );
        m.record(
            Method::ResourcesRead,
            None,
            Duration::from_micros(50),
            false,
        );
        m.record(Method::Ping, None, Duration::from_micros(50), false);
        let mut seen = Vec::new();
        m.each(|v| {
            seen.push((
                v.method,
                v.tool.map(str::to_owned),
                v.series.requests(),
                v.series.errors(),
            ))
        });
        assert_eq!(
            seen,
            [
                ("resources/read", None, 1, 0),
                ("other", None, 1, 0),
                ("tools/call", Some("echo".to_owned()), 2, 1),
            ]
        );
        assert_eq!(m.total().requests(), 4);
    }
}
