//! The one catalog of mcpmux's metrics ([`CATALOG`]): each quantity once, with its Prometheus
//! name (on `/metrics`) and its OTLP instrument name side by side, its help, kind and labels, and
//! the function that reads its value. Both exporters are generated from this list, so a quantity
//! cannot be exported by one and forgotten by the other, nor described twice.
//!
//! Values are read when a scrape or an export asks (a [`Scrape`] of [`Readings`]): they are the
//! numbers the daemon keeps anyway. The one histogram is recorded per forwarded request by
//! `upstream::metrics::CallMetrics` and `telemetry::otel::record_latency` (atomics, no lock, no
//! lookup by name); the catalog names it and `/metrics` renders what `CallMetrics` counted.

use std::cell::OnceCell;
use std::sync::Arc;

use crate::api::HostStatus;
use crate::audit::AuditHandle;
use crate::mcp::ListKind;
use crate::router::{RouterHandle, Snapshot};
use crate::telemetry::otel;
use crate::upstream::metrics::{Histogram, Series};
use crate::upstream::{Phase, UpstreamHandle};

/// What a metric is, as both formats know it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (until the daemon restarts).
    Counter,
    /// A value now.
    Gauge,
    /// The latency of forwarded requests.
    Histogram,
}

/// A label, spelled as each format wants it (OTLP attributes follow the MCP semantic
/// conventions where they have a name for it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Label {
    pub prometheus: &'static str,
    pub otlp: &'static str,
}

pub const UPSTREAM: Label = Label {
    prometheus: "upstream",
    otlp: otel::UPSTREAM_ATTRIBUTE,
};
pub const METHOD: Label = Label {
    prometheus: "method",
    otlp: otel::METHOD_ATTRIBUTE,
};
pub const TOOL: Label = Label {
    prometheus: "tool",
    otlp: otel::TOOL_ATTRIBUTE,
};
pub const LISTING: Label = Label {
    prometheus: "listing",
    otlp: "mcpmux.listing",
};
pub const HOST: Label = Label {
    prometheus: "host",
    otlp: "mcpmux.host",
};
pub const RESULT: Label = Label {
    prometheus: "result",
    otlp: "result",
};

/// One value read: a count (counters and gauges) or a histogram (rendered on `/metrics`; over
/// OTLP the histogram is recorded per request instead).
#[derive(Debug, Clone, Copy)]
pub enum Value<'a> {
    Count(u64),
    Latency(&'a Histogram),
}

/// One sample of a metric: its labels (a subset of the metric's [`Metric::labels`]) and value.
#[derive(Debug)]
pub struct Sample<'a> {
    pub labels: &'a [(Label, &'a str)],
    pub value: Value<'a>,
}

/// Reads every sample of one metric from a scrape.
pub type Read = fn(&Scrape<'_>, &mut dyn FnMut(Sample<'_>));

/// One quantity: both its names, what it means, and where its value comes from.
#[derive(Debug)]
pub struct Metric {
    /// The family on `/metrics` (counters end in `_total`, as Prometheus has them).
    pub prometheus: &'static str,
    /// The OTLP instrument.
    pub otlp: &'static str,
    pub kind: Kind,
    /// `# HELP` on `/metrics`, the instrument's description over OTLP.
    pub help: &'static str,
    /// The labels its samples may carry (the completeness test holds the readers to them).
    #[cfg_attr(not(test), allow(dead_code))]
    pub labels: &'static [Label],
    pub read: Read,
}

/// What metrics are read from: the parts of the daemon that keep these numbers anyway.
pub struct Readings {
    pub router: RouterHandle,
    pub audit: AuditHandle,
    /// How many host sessions are open now.
    pub sessions: Box<dyn Fn() -> usize + Send + Sync>,
    /// Each configured host's limits and counts (empty while hosts are anonymous).
    pub hosts: Box<dyn Fn() -> Vec<HostStatus> + Send + Sync>,
    /// Config reloads applied, and refused.
    pub reloads: Box<dyn Fn() -> (u64, u64) + Send + Sync>,
}

impl std::fmt::Debug for Readings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Readings").finish_non_exhaustive()
    }
}

/// One reading of the daemon: one catalog snapshot, its upstreams by name, the hosts when asked.
pub struct Scrape<'a> {
    readings: &'a Readings,
    snapshot: Arc<Snapshot>,
    upstreams: Vec<UpstreamHandle>,
    hosts: OnceCell<Vec<HostStatus>>,
}

impl<'a> Scrape<'a> {
    pub fn of(readings: &'a Readings) -> Self {
        let snapshot = readings.router.snapshot();
        let mut upstreams: Vec<_> = snapshot.upstreams().cloned().collect();
        upstreams.sort_by(|a, b| a.name().cmp(b.name()));
        Self {
            readings,
            snapshot,
            upstreams,
            hosts: OnceCell::new(),
        }
    }

    fn hosts(&self) -> &[HostStatus] {
        self.hosts.get_or_init(|| (self.readings.hosts)())
    }

    /// One count per upstream.
    fn per_upstream(&self, f: &mut dyn FnMut(Sample<'_>), value: impl Fn(&UpstreamHandle) -> u64) {
        for h in &self.upstreams {
            f(Sample {
                labels: &[(UPSTREAM, h.name())],
                value: Value::Count(value(h)),
            });
        }
    }

    /// One count per configured host.
    fn per_host(&self, f: &mut dyn FnMut(Sample<'_>), value: impl Fn(&HostStatus) -> u64) {
        for h in self.hosts() {
            f(Sample {
                labels: &[(HOST, &h.name)],
                value: Value::Count(value(h)),
            });
        }
    }

    /// One sample per series of forwarded requests (upstream, method, tool).
    fn per_series(
        &self,
        f: &mut dyn FnMut(Sample<'_>),
        value: impl for<'s> Fn(&'s Series) -> Value<'s>,
    ) {
        for h in &self.upstreams {
            h.metrics().each(|v| {
                let labels = [
                    (UPSTREAM, h.name()),
                    (METHOD, v.method),
                    (TOOL, v.tool.unwrap_or_default()),
                ];
                let labelled = if v.tool.is_some() { 3 } else { 2 };
                f(Sample {
                    labels: &labels[..labelled],
                    value: value(v.series),
                });
            });
        }
    }

    fn single(f: &mut dyn FnMut(Sample<'_>), value: u64) {
        f(Sample {
            labels: &[],
            value: Value::Count(value),
        });
    }
}

/// Every metric mcpmux exports, in the order `/metrics` lists them.
pub const CATALOG: &[Metric] = &[
    Metric {
        prometheus: "mcpmux_upstream_up",
        otlp: "mcpmux.upstream.up",
        kind: Kind::Gauge,
        help: "1 while the upstream is ready.",
        labels: &[UPSTREAM],
        read: |s, f| s.per_upstream(f, |h| u64::from(h.phase() == Phase::Ready)),
    },
    Metric {
        prometheus: "mcpmux_upstream_in_flight",
        otlp: "mcpmux.upstream.in_flight",
        kind: Kind::Gauge,
        help: "Requests the upstream is serving now.",
        labels: &[UPSTREAM],
        read: |s, f| s.per_upstream(f, |h| h.in_flight() as u64),
    },
    Metric {
        prometheus: "mcpmux_upstream_restarts_total",
        otlp: "mcpmux.upstream.restarts",
        kind: Kind::Counter,
        help: "Times the upstream was restarted.",
        labels: &[UPSTREAM],
        read: |s, f| s.per_upstream(f, |h| u64::from(h.status().restarts)),
    },
    Metric {
        prometheus: "mcpmux_catalog_items",
        otlp: "mcpmux.catalog.items",
        kind: Kind::Gauge,
        help: "Items each upstream has in the merged catalog, per listing.",
        labels: &[UPSTREAM, LISTING],
        read: catalog_items,
    },
    Metric {
        prometheus: "mcpmux_tools_changed",
        otlp: "mcpmux.tools.changed",
        kind: Kind::Gauge,
        help: "Tools whose definition changed since it was pinned (see mcpmux pins).",
        labels: &[UPSTREAM],
        read: |s, f| {
            let router = &s.readings.router;
            s.per_upstream(f, |h| router.changed_tools(h.name()).len() as u64);
        },
    },
    Metric {
        prometheus: "mcpmux_catalog_generation",
        otlp: "mcpmux.catalog.generation",
        kind: Kind::Gauge,
        help: "The current catalog generation.",
        labels: &[],
        read: |s, f| Scrape::single(f, s.snapshot.generation),
    },
    Metric {
        prometheus: "mcpmux_sessions",
        otlp: "mcpmux.sessions",
        kind: Kind::Gauge,
        help: "Open host sessions.",
        labels: &[],
        read: |s, f| Scrape::single(f, (s.readings.sessions)() as u64),
    },
    Metric {
        prometheus: "mcpmux_host_requests_total",
        otlp: "mcpmux.host.requests",
        kind: Kind::Counter,
        help: "Requests each configured host made.",
        labels: &[HOST],
        read: |s, f| s.per_host(f, |h| h.requests),
    },
    Metric {
        prometheus: "mcpmux_host_refused_total",
        otlp: "mcpmux.host.refused",
        kind: Kind::Counter,
        help: "Requests refused by a host's limits.",
        labels: &[HOST],
        read: |s, f| s.per_host(f, |h| h.refused),
    },
    Metric {
        prometheus: "mcpmux_host_in_flight",
        otlp: "mcpmux.host.in_flight",
        kind: Kind::Gauge,
        help: "Requests of each host in flight now.",
        labels: &[HOST],
        read: |s, f| s.per_host(f, |h| h.in_flight as u64),
    },
    Metric {
        prometheus: "mcpmux_upstream_requests_total",
        otlp: "mcpmux.upstream.requests",
        kind: Kind::Counter,
        help: "Host requests forwarded to the upstream, per method (and tool, for tools/call).",
        labels: &[UPSTREAM, METHOD, TOOL],
        read: |s, f| s.per_series(f, |series| Value::Count(series.requests())),
    },
    Metric {
        prometheus: "mcpmux_upstream_request_errors_total",
        otlp: "mcpmux.upstream.request.errors",
        kind: Kind::Counter,
        help: "Forwarded requests that failed: an error answer, a timeout, or no connection.",
        labels: &[UPSTREAM, METHOD, TOOL],
        read: |s, f| s.per_series(f, |series| Value::Count(series.errors())),
    },
    // Over OTLP its samples also carry `error.type` when the request failed (recorded per
    // request by `telemetry::otel::record_latency`).
    Metric {
        prometheus: "mcpmux_upstream_request_duration_seconds",
        otlp: "mcpmux.upstream.request.duration",
        kind: Kind::Histogram,
        help: "How long forwarded requests took, from mcpmux to the upstream and back.",
        labels: &[UPSTREAM, METHOD, TOOL],
        read: |s, f| s.per_series(f, |series| Value::Latency(&series.latency)),
    },
    Metric {
        prometheus: "mcpmux_config_reloads_total",
        otlp: "mcpmux.config.reloads",
        kind: Kind::Counter,
        help: "Config reloads, by whether the new file was applied or refused.",
        labels: &[RESULT],
        read: |s, f| {
            let (applied, refused) = (s.readings.reloads)();
            for (result, n) in [("applied", applied), ("refused", refused)] {
                f(Sample {
                    labels: &[(RESULT, result)],
                    value: Value::Count(n),
                });
            }
        },
    },
    Metric {
        prometheus: "mcpmux_audit_queue_depth",
        otlp: "mcpmux.audit.queue_depth",
        kind: Kind::Gauge,
        help: "Audit records waiting for the writer.",
        labels: &[],
        read: |s, f| Scrape::single(f, s.readings.audit.queued()),
    },
    Metric {
        prometheus: "mcpmux_audit_dropped_total",
        otlp: "mcpmux.audit.dropped",
        kind: Kind::Counter,
        help: "Audit records dropped because the queue was full.",
        labels: &[],
        read: |s, f| Scrape::single(f, s.readings.audit.dropped()),
    },
    Metric {
        prometheus: "mcpmux_audit_exported_total",
        otlp: "mcpmux.audit.exported",
        kind: Kind::Counter,
        help: "Audit records the OTLP receiver took ([audit] export).",
        labels: &[],
        read: |s, f| {
            if let Some(counts) = s.readings.audit.export_counts() {
                Scrape::single(f, counts.exported());
            }
        },
    },
    Metric {
        prometheus: "mcpmux_audit_export_dropped_total",
        otlp: "mcpmux.audit.export_dropped",
        kind: Kind::Counter,
        help: "Audit records not exported because the export queue was full ([audit] export); they stay in the local log.",
        labels: &[],
        read: |s, f| {
            if let Some(counts) = s.readings.audit.export_counts() {
                Scrape::single(f, counts.dropped());
            }
        },
    },
    Metric {
        prometheus: "mcpmux_audit_export_queue_depth",
        otlp: "mcpmux.audit.export_queue_depth",
        kind: Kind::Gauge,
        help: "Audit records waiting to be exported ([audit] export).",
        labels: &[],
        read: |s, f| {
            if let Some(counts) = s.readings.audit.export_counts() {
                Scrape::single(f, counts.queued() as u64);
            }
        },
    },
];

/// Per listing, then per upstream: how many items it has in the merged catalog.
fn catalog_items(s: &Scrape<'_>, f: &mut dyn FnMut(Sample<'_>)) {
    let counts = s.snapshot.counts();
    for kind in ListKind::ALL {
        for h in &s.upstreams {
            let count = counts.get(&(h.name(), kind)).map_or(0, |&n| n as u64);
            f(Sample {
                labels: &[(UPSTREAM, h.name()), (LISTING, kind.field())],
                value: Value::Count(count),
            });
        }
    }
}
