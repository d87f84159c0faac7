//! OpenTelemetry: traces and metrics over OTLP (gRPC or HTTP/protobuf), when `[telemetry]` or the
//! standard `OTEL_EXPORTER_OTLP_*` variables name a collector. Each host request is a server span
//! (`{method} {target}`, attributes after the MCP semantic conventions), continuing the W3C trace
//! context the host sent in `params._meta` or its HTTP headers; each request it causes upstream is
//! a client span under it, whose `traceparent` goes into the upstream request's `params._meta`
//! (and, for a remote upstream, its HTTP headers). Metrics read what the daemon keeps anyway
//! (observed at each export), plus a latency histogram recorded per forwarded request; which
//! instruments there are is the daemon's one metrics catalog (`admin::metrics::catalog`).
//!
//! With no collector configured nothing is set up: the hot path's only cost is one check of
//! [`tracer`], and a host's own trace context still reaches the upstream unchanged.

use std::sync::OnceLock;
use std::time::Duration;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{SpanKind, Status, TraceContextExt, Tracer as _, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};

use crate::config::{OtlpProtocol, TelemetryConfig};
use crate::mcp::method::Method;

/// The tracer, once a collector is configured.
static TRACER: OnceLock<SdkTracer> = OnceLock::new();
/// The forwarded-request latency histogram, once metrics go over OTLP.
static LATENCY: OnceLock<opentelemetry::metrics::Histogram<f64>> = OnceLock::new();

/// The tracer, when traces are exported; `None` costs the caller nothing more.
pub fn tracer() -> Option<&'static SdkTracer> {
    TRACER.get()
}

/// The W3C trace context a host sent with a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceParent {
    pub traceparent: String,
    pub tracestate: Option<String>,
    /// Whether it came in HTTP headers rather than `params._meta` (then mcpmux must write it
    /// into `_meta` for the upstream to see it).
    pub from_headers: bool,
}

impl TraceParent {
    /// The trace id (32 hex digits), when `traceparent` is well formed.
    pub fn trace_id(&self) -> Option<&str> {
        let id = self.traceparent.split('-').nth(1)?;
        (id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit())).then_some(id)
    }

    /// From `traceparent`/`tracestate` headers.
    pub fn from_headers(headers: &axum::http::HeaderMap) -> Option<Self> {
        use axum::http::HeaderName;
        static TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
        static TRACESTATE: HeaderName = HeaderName::from_static("tracestate");
        Self::from_values(headers.get(&TRACEPARENT), headers.get(&TRACESTATE))
    }

    /// [`Self::from_headers`] the (first) `traceparent` and `tracestate` values, found already.
    pub fn from_values(
        traceparent: Option<&axum::http::HeaderValue>,
        tracestate: Option<&axum::http::HeaderValue>,
    ) -> Option<Self> {
        let owned =
            |value: Option<&axum::http::HeaderValue>| Some(value?.to_str().ok()?.to_owned());
        Some(Self {
            traceparent: owned(traceparent)?,
            tracestate: owned(tracestate),
            from_headers: true,
        })
    }
}

/// A host request's span, while it is served.
#[derive(Debug, Clone)]
pub struct HostSpan(Context);

impl HostSpan {
    /// Starts the span of a host request to `method`, under the trace the host sent.
    pub fn start(
        tracer: &SdkTracer,
        method: &str,
        parent: Option<&TraceParent>,
        (session, protocol): (Option<&str>, &'static str),
    ) -> Self {
        let parent = parent.map_or_else(Context::new, remote_context);
        let mut attributes = vec![
            KeyValue::new(METHOD_ATTRIBUTE, method_value(method)),
            KeyValue::new("mcp.protocol.version", protocol),
            KeyValue::new("network.transport", "tcp"),
        ];
        // A stateless request belongs to no session.
        if let Some(session) = session {
            attributes.push(KeyValue::new("mcp.session.id", session.to_owned()));
        }
        let span = tracer
            .span_builder(method.to_owned())
            .with_kind(SpanKind::Server)
            .with_attributes(attributes)
            .start_with_context(tracer, &parent);
        Self(parent.with_span(span))
    }

    /// The trace id, for the audit record.
    pub fn trace_id(&self) -> String {
        self.0.span().span_context().trace_id().to_string()
    }

    /// Names what the request was routed to: `{method} {target}`, and the upstream.
    pub fn routed(&self, method: &str, target: Option<&str>, upstream: Option<&str>) {
        let span = self.0.span();
        if !span.is_recording() {
            return;
        }
        if let Some(target) = target {
            span.update_name(format!("{method} {target}"));
            let key = match Method::parse(method) {
                Some(Method::ToolsCall) => TOOL_ATTRIBUTE,
                Some(Method::PromptsGet) => "gen_ai.prompt.name",
                _ => "mcp.resource.uri",
            };
            span.set_attribute(KeyValue::new(key, target.to_owned()));
        }
        if let Some(upstream) = upstream {
            span.set_attribute(KeyValue::new(UPSTREAM_ATTRIBUTE, upstream.to_owned()));
        }
    }

    /// Ends the span; `error` is the JSON-RPC error code the host got, if any.
    pub fn end(&self, error: Option<i64>) {
        let span = self.0.span();
        if let Some(code) = error.filter(|_| span.is_recording()) {
            span.set_attribute(KeyValue::new("rpc.jsonrpc.error_code", code));
            span.set_attribute(KeyValue::new("error.type", code.to_string()));
            span.set_status(Status::error(format!("JSON-RPC error {code}")));
        }
        span.end();
    }

    /// Starts the span of a request this host request sends to `upstream`, and the trace
    /// context to send with it.
    pub fn child(
        &self,
        tracer: &SdkTracer,
        method: &str,
        target: Option<&str>,
        upstream: &str,
    ) -> (UpstreamSpan, TraceParent) {
        // A request the sampler left out gets an unnamed child: it is never exported.
        let builder = if self.0.span().is_recording() {
            let name = match target {
                Some(target) => format!("{method} {target}"),
                None => method.to_owned(),
            };
            tracer.span_builder(name).with_attributes([
                KeyValue::new(METHOD_ATTRIBUTE, method_value(method)),
                KeyValue::new(UPSTREAM_ATTRIBUTE, upstream.to_owned()),
            ])
        } else {
            tracer.span_builder("")
        };
        let span = builder
            .with_kind(SpanKind::Client)
            .start_with_context(tracer, &self.0);
        let cx = self.0.with_span(span);
        // W3C trace context, as `TraceContextPropagator` writes it (without its map).
        let context = cx.span().span_context().clone();
        let state = context.trace_state().header();
        let parent = TraceParent {
            traceparent: format!(
                "00-{}-{}-{:02x}",
                context.trace_id(),
                context.span_id(),
                context.trace_flags().to_u8() & 1
            ),
            tracestate: (!state.is_empty()).then_some(state),
            from_headers: false,
        };
        (UpstreamSpan(cx), parent)
    }
}

/// A request to an upstream, while it is waited for.
#[derive(Debug)]
pub struct UpstreamSpan(Context);

impl UpstreamSpan {
    pub fn end(self, failed: bool) {
        let span = self.0.span();
        if failed {
            span.set_status(Status::error("the upstream request failed"));
        }
        span.end();
    }
}

/// The context a host's `traceparent` names.
fn remote_context(parent: &TraceParent) -> Context {
    TraceContextPropagator::new().extract(parent)
}

/// What the propagator reads a host's trace context from.
impl opentelemetry::propagation::Extractor for TraceParent {
    fn get(&self, key: &str) -> Option<&str> {
        match key {
            "traceparent" => Some(&self.traceparent),
            "tracestate" => self.tracestate.as_deref(),
            _ => None,
        }
    }

    fn keys(&self) -> Vec<&str> {
        vec!["traceparent", "tracestate"]
    }
}

/// A method name as an attribute value: a method mcpmux knows without an allocation.
fn method_value(method: &str) -> opentelemetry::Value {
    match Method::parse(method) {
        Some(known) => opentelemetry::Value::from(known.as_str()),
        None => opentelemetry::Value::from(method.to_owned()),
    }
}

/// The attribute names of a forwarded request, on its spans and its latency histogram (the MCP
/// and GenAI semantic conventions where they have one); the metrics catalog labels its OTLP
/// series with the same.
pub const UPSTREAM_ATTRIBUTE: &str = "mcpmux.upstream";
pub const METHOD_ATTRIBUTE: &str = "mcp.method.name";
pub const TOOL_ATTRIBUTE: &str = "gen_ai.tool.name";

/// Records a forwarded request's latency in the OTLP histogram, when metrics go over OTLP.
pub fn record_latency(
    upstream: &str,
    method: Method,
    tool: Option<&str>,
    elapsed: Duration,
    failed: bool,
) {
    let Some(histogram) = LATENCY.get() else {
        return;
    };
    let mut attributes = vec![
        KeyValue::new(UPSTREAM_ATTRIBUTE, upstream.to_owned()),
        KeyValue::new(METHOD_ATTRIBUTE, method.as_str()),
    ];
    if let Some(tool) = tool {
        attributes.push(KeyValue::new(TOOL_ATTRIBUTE, tool.to_owned()));
    }
    if failed {
        attributes.push(KeyValue::new("error.type", "upstream"));
    }
    histogram.record(elapsed.as_secs_f64(), &attributes);
}

/// Where OTLP goes, from `[telemetry]` and the `OTEL_*` variables; `None` when nowhere.
#[derive(Debug, Clone, PartialEq)]
pub struct Export {
    /// The base URL from the config (`None`: the exporter reads `OTEL_EXPORTER_OTLP_*ENDPOINT`).
    pub endpoint: Option<String>,
    pub protocol: OtlpProtocol,
    pub service_name: String,
    pub traces: bool,
    pub metrics: bool,
    pub metrics_interval: Option<Duration>,
}

impl Export {
    /// What `config` and the environment (`var`) ask for.
    pub fn resolve(config: &TelemetryConfig, var: impl Fn(&str) -> Option<String>) -> Option<Self> {
        let set = |name: &str| var(name).filter(|v| !v.trim().is_empty());
        if set("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
            return None;
        }
        let from_env = set("OTEL_EXPORTER_OTLP_ENDPOINT")
            .or_else(|| set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"));
        let endpoint = config.endpoint.clone();
        let seen = endpoint.clone().or(from_env)?;
        if set("OTEL_TRACES_EXPORTER").is_some_and(|v| v == "none") {
            return None;
        }
        let protocol = config
            .protocol
            .or_else(|| {
                set("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                    .or_else(|| set("OTEL_EXPORTER_OTLP_PROTOCOL"))
                    .and_then(|p| OtlpProtocol::parse(&p))
            })
            // The collector's gRPC port says gRPC; otherwise the specification's default.
            .unwrap_or_else(|| {
                let grpc_port = url::Url::parse(&seen).ok().and_then(|u| u.port()) == Some(4317);
                if grpc_port {
                    OtlpProtocol::Grpc
                } else {
                    OtlpProtocol::HttpProtobuf
                }
            });
        Some(Self {
            endpoint,
            protocol,
            service_name: config
                .service_name
                .clone()
                .or_else(|| set("OTEL_SERVICE_NAME"))
                .unwrap_or_else(|| "mcpmux".to_owned()),
            traces: config.traces.unwrap_or(true),
            metrics: config
                .metrics
                .unwrap_or_else(|| set("OTEL_METRICS_EXPORTER").is_none_or(|v| v != "none")),
            metrics_interval: config.metrics_interval,
        })
    }
}

/// The exporters while the daemon runs; [`Telemetry::shutdown`] sends what is buffered.
#[derive(Debug)]
pub struct Telemetry {
    traces: Option<SdkTracerProvider>,
    metrics: Option<SdkMeterProvider>,
}

/// Reads an observed instrument's values at each export: each value with its attributes.
pub type Observe = Box<dyn Fn(&mut dyn FnMut(u64, &[(&'static str, &str)])) + Send + Sync>;

/// An instrument to register (the daemon makes them from its one metrics catalog,
/// `admin::metrics`).
pub struct Instrument {
    pub name: &'static str,
    pub description: &'static str,
    pub kind: InstrumentKind,
}

/// How an instrument gets its values.
pub enum InstrumentKind {
    /// Observed at each export.
    Counter(Observe),
    /// Observed at each export.
    Gauge(Observe),
    /// The forwarded-request latency, recorded per request by [`record_latency`].
    Histogram,
}

impl std::fmt::Debug for Instrument {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Instrument")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Why an OTLP exporter could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("cannot set up the OTLP {signal} exporter: {source}")]
    Exporter {
        /// `trace` or `metric`.
        signal: &'static str,
        source: opentelemetry_otlp::ExporterBuildError,
    },
}

/// The OTLP exporter of one signal (`opentelemetry_otlp::SpanExporter`, `MetricExporter`,
/// `LogExporter`: each its own builder type) to `export`'s endpoint over its protocol; over
/// HTTP the signal's path (`traces`, `metrics`, `logs`) is appended.
macro_rules! otlp_exporter {
    ($exporter:path, $export:expr, $signal:literal) => {{
        use opentelemetry_otlp::WithExportConfig as _;
        let export: &$crate::telemetry::otel::Export = $export;
        match export.protocol {
            $crate::config::OtlpProtocol::Grpc => {
                let mut b = <$exporter>::builder().with_tonic();
                if let Some(endpoint) = &export.endpoint {
                    b = b.with_endpoint(endpoint.clone());
                }
                b.build()
            }
            $crate::config::OtlpProtocol::HttpProtobuf => {
                let mut b = <$exporter>::builder()
                    .with_http()
                    .with_protocol(opentelemetry_otlp::Protocol::HttpBinary);
                if let Some(endpoint) = &export.endpoint {
                    b = b.with_endpoint($crate::telemetry::otel::signal_url(endpoint, $signal));
                }
                b.build()
            }
        }
    }};
}
pub(super) use otlp_exporter;

/// Sets up the exporters `export` describes (within the tokio runtime, as gRPC needs).
pub fn start(export: &Export, instruments: Vec<Instrument>) -> Result<Telemetry, ExportError> {
    let resource = resource(export);
    let traces = match export.traces {
        true => Some(start_traces(export, &resource)?),
        false => None,
    };
    let metrics = if export.metrics {
        let exporter = otlp_exporter!(opentelemetry_otlp::MetricExporter, export, "metrics")
            .map_err(|source| ExportError::Exporter {
                signal: "metric",
                source,
            })?;
        let mut reader = opentelemetry_sdk::metrics::PeriodicReader::builder(exporter);
        if let Some(interval) = export.metrics_interval {
            reader = reader.with_interval(interval);
        }
        let provider = SdkMeterProvider::builder()
            .with_reader(reader.build())
            .with_resource(resource)
            .build();
        register(&provider, instruments);
        Some(provider)
    } else {
        None
    };
    Ok(Telemetry { traces, metrics })
}

/// What every exported signal says of its source: the service's name and mcpmux's version.
pub(super) fn resource(export: &Export) -> opentelemetry_sdk::Resource {
    opentelemetry_sdk::Resource::builder()
        .with_service_name(export.service_name.clone())
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .build()
}

/// The span exporter and the tracer every span is made with.
fn start_traces(
    export: &Export,
    resource: &opentelemetry_sdk::Resource,
) -> Result<SdkTracerProvider, ExportError> {
    let spans =
        otlp_exporter!(opentelemetry_otlp::SpanExporter, export, "traces").map_err(|source| {
            ExportError::Exporter {
                signal: "trace",
                source,
            }
        })?;
    let traces = SdkTracerProvider::builder()
        .with_batch_exporter(spans)
        .with_resource(resource.clone())
        .build();
    let _ = TRACER.set(traces.tracer("mcpmux"));
    Ok(traces)
}

/// `endpoint` with the path OTLP/HTTP gives `signal` (`/v1/traces`), as the
/// `OTEL_EXPORTER_OTLP_ENDPOINT` base URL is read.
pub(super) fn signal_url(endpoint: &str, signal: &str) -> String {
    format!("{}/v1/{signal}", endpoint.trim_end_matches('/'))
}

/// Registers `instruments`: observed ones call their reader at each export, the histogram
/// becomes what [`record_latency`] records into.
fn register(provider: &SdkMeterProvider, instruments: Vec<Instrument>) {
    use opentelemetry::metrics::MeterProvider as _;
    let meter = provider.meter("mcpmux");
    let attributes = |a: &[(&'static str, &str)]| -> Vec<KeyValue> {
        (a.iter())
            .map(|(k, v)| KeyValue::new(*k, (*v).to_owned()))
            .collect()
    };
    for Instrument {
        name,
        description,
        kind,
    } in instruments
    {
        match kind {
            InstrumentKind::Counter(observe) => {
                meter
                    .u64_observable_counter(name)
                    .with_description(description)
                    .with_callback(move |o| observe(&mut |v, a| o.observe(v, &attributes(a))))
                    .build();
            }
            InstrumentKind::Gauge(observe) => {
                meter
                    .u64_observable_gauge(name)
                    .with_description(description)
                    .with_callback(move |o| observe(&mut |v, a| o.observe(v, &attributes(a))))
                    .build();
            }
            InstrumentKind::Histogram => {
                let _ = LATENCY.set(
                    meter
                        .f64_histogram(name)
                        .with_unit("s")
                        .with_description(description)
                        .with_boundaries(vec![
                            0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                            2.5, 5.0, 10.0, 30.0, 60.0,
                        ])
                        .build(),
                );
            }
        }
    }
}

impl Telemetry {
    /// Sends what is buffered and stops the exporters.
    pub fn shutdown(self) {
        if let Some(Err(e)) = self.traces.map(|t| t.shutdown()) {
            tracing::debug!(error = %e, "The OTLP trace exporter did not shut down cleanly.");
        }
        if let Some(metrics) = self.metrics {
            if let Err(e) = metrics.shutdown() {
                tracing::debug!(error = %e, "The OTLP metric exporter did not shut down cleanly.");
            }
        }
    }
}

#[cfg(test)]
mod tests;
