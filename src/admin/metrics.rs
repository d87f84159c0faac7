//! `GET /metrics`: the daemon's state in Prometheus' text exposition format (0.0.4) — per
//! upstream its state, requests in flight, restarts, catalog sizes and changed tools; host
//! sessions; per host its requests, refusals and requests in flight; the audit queue and drops;
//! the catalog generation. It reads what the daemon already keeps, so serving it costs the hot
//! path nothing.

use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use super::AdminState;
use crate::mcp::ListKind;
use crate::upstream::Phase;

/// One sample: its labels and value.
type Sample = (Vec<(&'static str, String)>, f64);

/// The exposition being written.
#[derive(Default)]
struct Exposition(String);

impl Exposition {
    /// A metric family: its `# HELP` and `# TYPE` lines, then its samples.
    fn family(&mut self, name: &str, kind: &str, help: &str, samples: Vec<Sample>) {
        let _ = writeln!(self.0, "# HELP {name} {help}");
        let _ = writeln!(self.0, "# TYPE {name} {kind}");
        for (labels, value) in samples {
            self.0.push_str(name);
            if !labels.is_empty() {
                let labels: Vec<String> = labels
                    .iter()
                    .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
                    .collect();
                let _ = write!(self.0, "{{{}}}", labels.join(","));
            }
            let _ = writeln!(self.0, " {value}");
        }
    }
}

/// Host requests forwarded to each upstream, per method and tool: counts, errors, and the latency
/// histogram.
fn requests(out: &mut Exposition, upstreams: &[crate::upstream::UpstreamHandle]) {
    let (mut counts, mut errors) = (Vec::new(), Vec::new());
    let mut histogram = String::new();
    for h in upstreams {
        h.metrics().each(|v| {
            let mut labels = vec![
                ("upstream", h.name().to_owned()),
                ("method", v.method.to_owned()),
            ];
            if let Some(tool) = v.tool {
                labels.push(("tool", tool.to_owned()));
            }
            counts.push((labels.clone(), v.series.requests() as f64));
            errors.push((labels.clone(), v.series.errors() as f64));
            let text: Vec<String> = (labels.iter())
                .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
                .collect();
            let text = text.join(",");
            let name = "mcpmux_upstream_request_duration_seconds";
            for (le, n) in v.series.latency.cumulative() {
                let le = if le.is_infinite() {
                    "+Inf".to_owned()
                } else {
                    format!("{le}")
                };
                let _ = writeln!(histogram, "{name}_bucket{{{text},le=\"{le}\"}} {n}");
            }
            let sum = v.series.latency.sum().as_secs_f64();
            let _ = writeln!(histogram, "{name}_sum{{{text}}} {sum}");
            let _ = writeln!(histogram, "{name}_count{{{text}}} {}", v.series.requests());
        });
    }
    out.family(
        "mcpmux_upstream_requests_total",
        "counter",
        "Host requests forwarded to the upstream, per method (and tool, for tools/call).",
        counts,
    );
    out.family(
        "mcpmux_upstream_request_errors_total",
        "counter",
        "Forwarded requests that failed: an error answer, a timeout, or no connection.",
        errors,
    );
    out.family(
        "mcpmux_upstream_request_duration_seconds",
        "histogram",
        "How long forwarded requests took, from mcpmux to the upstream and back.",
        Vec::new(),
    );
    out.0.push_str(&histogram);
}

/// A label value as the format wants it: `\`, `"` and newlines escaped.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

pub(super) async fn metrics(State(admin): State<Arc<AdminState>>) -> Response {
    let snapshot = admin.router.snapshot();
    let mut upstreams: Vec<_> = snapshot.upstreams().cloned().collect();
    upstreams.sort_by(|a, b| a.name().cmp(b.name()));
    let by_upstream = |f: &dyn Fn(&crate::upstream::UpstreamHandle) -> f64| -> Vec<Sample> {
        upstreams
            .iter()
            .map(|h| (vec![("upstream", h.name().to_owned())], f(h)))
            .collect()
    };
    let mut out = Exposition::default();
    out.family(
        "mcpmux_upstream_up",
        "gauge",
        "1 while the upstream is ready.",
        by_upstream(&|h| f64::from(u8::from(h.phase() == Phase::Ready))),
    );
    out.family(
        "mcpmux_upstream_in_flight",
        "gauge",
        "Requests the upstream is serving now.",
        by_upstream(&|h| h.in_flight() as f64),
    );
    out.family(
        "mcpmux_upstream_restarts_total",
        "counter",
        "Times the upstream was restarted.",
        by_upstream(&|h| f64::from(h.status().restarts)),
    );
    let mut items = Vec::new();
    for kind in ListKind::ALL {
        for h in &upstreams {
            let count = (snapshot.list(kind).iter())
                .filter(|e| e.upstream.name() == h.name())
                .count();
            let labels = vec![
                ("upstream", h.name().to_owned()),
                ("listing", kind.field().to_owned()),
            ];
            items.push((labels, count as f64));
        }
    }
    out.family(
        "mcpmux_catalog_items",
        "gauge",
        "Items each upstream has in the merged catalog, per listing.",
        items,
    );
    out.family(
        "mcpmux_tools_changed",
        "gauge",
        "Tools whose definition changed since it was pinned (see mcpmux pins).",
        by_upstream(&|h| admin.router.changed_tools(h.name()).len() as f64),
    );
    out.family(
        "mcpmux_catalog_generation",
        "gauge",
        "The current catalog generation.",
        vec![(vec![], snapshot.generation as f64)],
    );
    out.family(
        "mcpmux_sessions",
        "gauge",
        "Open host sessions.",
        vec![(vec![], (admin.session_count)() as f64)],
    );
    let hosts = (admin.hosts)();
    let per_host = |key: &str| -> Vec<Sample> {
        hosts
            .iter()
            .map(|h| {
                let name = h["name"].as_str().unwrap_or_default().to_owned();
                (vec![("host", name)], h[key].as_f64().unwrap_or(0.0))
            })
            .collect()
    };
    out.family(
        "mcpmux_host_requests_total",
        "counter",
        "Requests each configured host made.",
        per_host("requests"),
    );
    out.family(
        "mcpmux_host_refused_total",
        "counter",
        "Requests refused by a host's limits.",
        per_host("refused"),
    );
    out.family(
        "mcpmux_host_in_flight",
        "gauge",
        "Requests of each host in flight now.",
        per_host("in_flight"),
    );
    requests(&mut out, &upstreams);
    let (reloads, rejected) = admin.reloader.counts();
    out.family(
        "mcpmux_config_reloads_total",
        "counter",
        "Config reloads, by whether the new file was applied or refused.",
        vec![
            (vec![("result", "applied".into())], reloads as f64),
            (vec![("result", "refused".into())], rejected as f64),
        ],
    );
    let audit = &admin.audit;
    out.family(
        "mcpmux_audit_queue_depth",
        "gauge",
        "Audit records waiting for the writer.",
        vec![(vec![], audit.queued() as f64)],
    );
    out.family(
        "mcpmux_audit_dropped_total",
        "counter",
        "Audit records dropped because the queue was full.",
        vec![(vec![], audit.dropped() as f64)],
    );
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        out.0,
    )
        .into_response()
}
