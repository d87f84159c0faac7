//! mcpmux's metrics, both exporters generated from one [`catalog`]: `GET /metrics` renders it in
//! Prometheus' text exposition format (0.0.4), and [`otlp_instruments`] turns it into the OTLP
//! instruments the daemon registers. Per upstream its state, requests in flight, restarts,
//! catalog sizes, changed tools and forwarded requests; host sessions; per host its requests,
//! refusals and requests in flight; config reloads; the audit queue and drops; the catalog
//! generation. It reads what the daemon already keeps, so serving it costs the hot path nothing.

pub mod catalog;

use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use super::AdminState;
use crate::telemetry::otel::{Instrument, InstrumentKind};
use catalog::{CATALOG, Kind, Metric, Readings, Sample, Scrape, Value};

/// The exposition being written.
#[derive(Default)]
struct Exposition(String);

impl Exposition {
    /// A metric family: its `# HELP` and `# TYPE` lines, then its samples.
    fn family(&mut self, metric: &Metric, scrape: &Scrape<'_>) {
        let name = metric.prometheus;
        let kind = match metric.kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        };
        let _ = writeln!(self.0, "# HELP {name} {}", metric.help);
        let _ = writeln!(self.0, "# TYPE {name} {kind}");
        (metric.read)(scrape, &mut |sample| self.sample(name, &sample));
    }

    fn sample(&mut self, name: &str, sample: &Sample<'_>) {
        let labels: Vec<String> = (sample.labels.iter())
            .map(|(label, v)| format!("{}=\"{}\"", label.prometheus, escape(v)))
            .collect();
        let labels = labels.join(",");
        match sample.value {
            Value::Count(value) => {
                self.0.push_str(name);
                if !labels.is_empty() {
                    let _ = write!(self.0, "{{{labels}}}");
                }
                let _ = writeln!(self.0, " {value}");
            }
            Value::Latency(histogram) => {
                let sep = if labels.is_empty() { "" } else { "," };
                for (le, n) in histogram.cumulative() {
                    let le = if le.is_infinite() {
                        "+Inf".to_owned()
                    } else {
                        format!("{le}")
                    };
                    let _ = writeln!(self.0, "{name}_bucket{{{labels}{sep}le=\"{le}\"}} {n}");
                }
                let sum = histogram.sum().as_secs_f64();
                let count = histogram.count();
                let _ = writeln!(self.0, "{name}_sum{{{labels}}} {sum}");
                let _ = writeln!(self.0, "{name}_count{{{labels}}} {count}");
            }
        }
    }
}

/// A label value as the format wants it: `\`, `"` and newlines escaped.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Every metric of the catalog as Prometheus text.
pub fn render(readings: &Readings) -> String {
    let scrape = Scrape::of(readings);
    let mut out = Exposition::default();
    for metric in CATALOG {
        out.family(metric, &scrape);
    }
    out.0
}

pub(super) async fn metrics(State(admin): State<Arc<AdminState>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        render(&admin.metrics),
    )
        .into_response()
}

/// One OTLP instrument per catalog entry: counters and gauges read from `readings` at each
/// export, the latency histogram (recorded per request) by its name.
pub fn otlp_instruments(readings: &Arc<Readings>) -> Vec<Instrument> {
    CATALOG
        .iter()
        .map(|metric| {
            let readings = Arc::clone(readings);
            let read = metric.read;
            let observe: crate::telemetry::otel::Observe = Box::new(move |f| {
                let scrape = Scrape::of(&readings);
                read(&scrape, &mut |sample| {
                    let Value::Count(value) = sample.value else {
                        return;
                    };
                    let attributes: Vec<(&'static str, &str)> = (sample.labels.iter())
                        .map(|(label, v)| (label.otlp, *v))
                        .collect();
                    f(value, &attributes);
                });
            });
            Instrument {
                name: metric.otlp,
                description: metric.help,
                kind: match metric.kind {
                    Kind::Counter => InstrumentKind::Counter(observe),
                    Kind::Gauge => InstrumentKind::Gauge(observe),
                    Kind::Histogram => InstrumentKind::Histogram,
                },
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;
    use crate::audit::AuditHandle;
    use crate::config::CatalogConfig;
    use crate::router::RouterHandle;
    use crate::upstream::metrics::Histogram;

    /// A daemon with no upstreams, one host `c"i` with 3 requests, 2 sessions, a reload of each
    /// outcome.
    fn readings() -> Arc<Readings> {
        Arc::new(Readings {
            router: RouterHandle::new(&CatalogConfig::default(), &[], None),
            audit: AuditHandle::disabled(),
            sessions: Box::new(|| 2),
            hosts: Box::new(|| {
                vec![crate::api::HostStatus {
                    name: "c\"i".into(),
                    profile: None,
                    in_flight: 0,
                    requests: 3,
                    refused: 1,
                    max_in_flight: None,
                    max_calls_per_second: None,
                    max_sessions: None,
                    sessions: 0,
                }]
            }),
            reloads: Box::new(|| (4, 1)),
        })
    }

    #[test]
    fn every_quantity_is_named_once_in_each_format() {
        let (mut prometheus, mut otlp) = (HashSet::new(), HashSet::new());
        for m in CATALOG {
            assert!(prometheus.insert(m.prometheus), "{} twice", m.prometheus);
            assert!(otlp.insert(m.otlp), "{} twice", m.otlp);
            assert!(m.prometheus.starts_with("mcpmux_"), "{}", m.prometheus);
            assert!(m.otlp.starts_with("mcpmux."), "{}", m.otlp);
            assert_eq!(
                m.kind == Kind::Counter,
                m.prometheus.ends_with("_total"),
                "Prometheus counters, and only they, end in _total: {}",
                m.prometheus
            );
            assert!(
                !m.help.is_empty() && m.help.ends_with('.'),
                "{}",
                m.prometheus
            );
        }
        let histograms = CATALOG.iter().filter(|m| m.kind == Kind::Histogram);
        assert_eq!(histograms.count(), 1, "record_latency feeds exactly one");
    }

    #[test]
    fn every_catalog_entry_has_a_prometheus_family_and_an_otlp_instrument() {
        let readings = readings();
        let text = render(&readings);
        let instruments = otlp_instruments(&readings);
        assert_eq!(instruments.len(), CATALOG.len());
        for (m, instrument) in CATALOG.iter().zip(&instruments) {
            assert!(text.contains(&format!("# HELP {} {}\n", m.prometheus, m.help)));
            assert!(
                text.contains(&format!("# TYPE {} ", m.prometheus)),
                "{text}"
            );
            assert_eq!(instrument.name, m.otlp);
            assert_eq!(instrument.description, m.help);
            let matches = matches!(
                (m.kind, &instrument.kind),
                (Kind::Counter, InstrumentKind::Counter(_))
                    | (Kind::Gauge, InstrumentKind::Gauge(_))
                    | (Kind::Histogram, InstrumentKind::Histogram)
            );
            assert!(matches, "{} is exported as another kind", m.otlp);
        }
    }

    #[test]
    fn samples_carry_only_the_labels_their_entry_names() {
        let readings = readings();
        let scrape = Scrape::of(&readings);
        for m in CATALOG {
            (m.read)(&scrape, &mut |sample| {
                for (label, _) in sample.labels {
                    assert!(m.labels.contains(label), "{}: {label:?}", m.prometheus);
                }
            });
        }
    }

    #[test]
    fn prometheus_text_has_labelled_escaped_samples() {
        let text = render(&readings());
        for line in [
            "# TYPE mcpmux_host_requests_total counter\n",
            "mcpmux_host_requests_total{host=\"c\\\"i\"} 3\n",
            "mcpmux_host_refused_total{host=\"c\\\"i\"} 1\n",
            "mcpmux_sessions 2\n",
            "mcpmux_config_reloads_total{result=\"applied\"} 4\n",
            "mcpmux_config_reloads_total{result=\"refused\"} 1\n",
            "mcpmux_catalog_generation 0\n",
            "mcpmux_audit_dropped_total 0\n",
        ] {
            assert!(text.contains(line), "no {line:?} in\n{text}");
        }
        assert_eq!(escape("a\\b\n"), "a\\\\b\\n");
    }

    #[test]
    fn a_histogram_is_rendered_as_cumulative_buckets_a_sum_and_a_count() {
        let histogram = Histogram::default();
        histogram.record(std::time::Duration::from_millis(3));
        histogram.record(std::time::Duration::from_millis(5));
        let mut out = Exposition::default();
        let labels = [(catalog::UPSTREAM, "up")];
        out.sample(
            "d",
            &Sample {
                labels: &labels,
                value: Value::Latency(&histogram),
            },
        );
        let lines: Vec<&str> = out.0.lines().collect();
        assert!(
            lines.contains(&"d_bucket{upstream=\"up\",le=\"+Inf\"} 2"),
            "{lines:?}"
        );
        assert!(lines.contains(&"d_sum{upstream=\"up\"} 0.008"), "{lines:?}");
        assert!(lines.contains(&"d_count{upstream=\"up\"} 2"), "{lines:?}");
        let buckets: Vec<u64> = (lines.iter())
            .filter(|l| l.starts_with("d_bucket"))
            .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
            .collect();
        assert!(buckets.windows(2).all(|w| w[0] <= w[1]), "{buckets:?}");
    }

    #[test]
    fn otlp_instruments_read_the_same_values_with_otlp_attributes() {
        let readings = readings();
        let instruments = otlp_instruments(&readings);
        let observed = |name: &str| {
            let instrument = instruments.iter().find(|i| i.name == name);
            let Some(InstrumentKind::Counter(observe) | InstrumentKind::Gauge(observe)) =
                instrument.map(|i| &i.kind)
            else {
                panic!("no observed instrument {name}");
            };
            let mut seen = Vec::new();
            observe(&mut |v, a| {
                let a: Vec<String> = a.iter().map(|(k, v)| format!("{k}={v}")).collect();
                seen.push((v, a.join(",")));
            });
            seen
        };
        assert_eq!(
            observed("mcpmux.config.reloads"),
            [
                (4, "result=applied".to_owned()),
                (1, "result=refused".to_owned())
            ]
        );
        assert_eq!(observed("mcpmux.sessions"), [(2, String::new())]);
        assert_eq!(
            observed("mcpmux.host.requests"),
            [(3, "mcpmux.host=c\"i".to_owned())]
        );
    }
}
