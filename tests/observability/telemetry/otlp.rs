//! An OTLP receiver for tests: the collector's gRPC trace, metrics and logs services (the
//! generated servers of `opentelemetry-proto`) and its HTTP/protobuf endpoints (`/v1/traces`,
//! `/v1/metrics`, `/v1/logs`), on 127.0.0.1, keeping every span, metric name and log record they
//! were sent. Told to, it refuses log exports (as a receiver that is down or overloaded does).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::logs::v1::logs_service_server::{
    LogsService, LogsServiceServer,
};
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value;
use prost::Message;

/// One span as received, ids in hex.
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    pub name: String,
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: String,
    /// 2 = server, 3 = client (OTLP's `SpanKind`).
    pub kind: i32,
    pub attributes: Vec<(String, String)>,
    pub service_name: Option<String>,
}

impl ReceivedSpan {
    pub fn attribute(&self, key: &str) -> Option<&str> {
        (self.attributes.iter())
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// One log record as received.
#[derive(Debug, Clone)]
pub struct ReceivedLog {
    pub event_name: String,
    pub body: String,
    pub attributes: Vec<(String, String)>,
}

impl ReceivedLog {
    pub fn attribute(&self, key: &str) -> Option<&str> {
        (self.attributes.iter())
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Debug, Default)]
pub struct Received {
    pub spans: Vec<ReceivedSpan>,
    pub metrics: Vec<String>,
    pub logs: Vec<ReceivedLog>,
    /// Log exports refused while `refuse_logs` was set.
    pub refused_logs: usize,
    /// Whether log exports are refused (HTTP 503, gRPC `UNAVAILABLE`).
    pub refuse_logs: bool,
}

/// A receiver; what it got is in `received`.
pub struct Receiver {
    pub port: u16,
    pub received: Arc<Mutex<Received>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn text(value: Option<&opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    match value.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        _ => String::new(),
    }
}

fn keep_spans(received: &Mutex<Received>, request: ExportTraceServiceRequest) {
    let mut received = received.lock().unwrap();
    for resource in request.resource_spans {
        let service_name = (resource.resource.iter())
            .flat_map(|r| &r.attributes)
            .find(|a| a.key == "service.name")
            .map(|a| text(a.value.as_ref()));
        for scope in resource.scope_spans {
            for span in scope.spans {
                received.spans.push(ReceivedSpan {
                    name: span.name,
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    kind: span.kind,
                    attributes: (span.attributes.iter())
                        .map(|a| (a.key.clone(), text(a.value.as_ref())))
                        .collect(),
                    service_name: service_name.clone(),
                });
            }
        }
    }
}

fn keep_metrics(received: &Mutex<Received>, request: ExportMetricsServiceRequest) {
    let mut received = received.lock().unwrap();
    for resource in request.resource_metrics {
        for scope in resource.scope_metrics {
            for metric in scope.metrics {
                received.metrics.push(metric.name);
            }
        }
    }
}

/// Keeps the records of a log export; `false` when it is refused.
fn keep_logs(received: &Mutex<Received>, request: ExportLogsServiceRequest) -> bool {
    let mut received = received.lock().unwrap();
    if received.refuse_logs {
        received.refused_logs += 1;
        return false;
    }
    for resource in request.resource_logs {
        for scope in resource.scope_logs {
            for record in scope.log_records {
                received.logs.push(ReceivedLog {
                    event_name: record.event_name,
                    body: text(record.body.as_ref()),
                    attributes: (record.attributes.iter())
                        .map(|a| (a.key.clone(), text(a.value.as_ref())))
                        .collect(),
                });
            }
        }
    }
    true
}

#[derive(Clone)]
struct Grpc(Arc<Mutex<Received>>);

#[tonic::async_trait]
impl LogsService for Grpc {
    async fn export(
        &self,
        request: tonic::Request<ExportLogsServiceRequest>,
    ) -> Result<tonic::Response<ExportLogsServiceResponse>, tonic::Status> {
        if keep_logs(&self.0, request.into_inner()) {
            Ok(tonic::Response::new(ExportLogsServiceResponse::default()))
        } else {
            Err(tonic::Status::unavailable("refusing logs"))
        }
    }
}

#[tonic::async_trait]
impl TraceService for Grpc {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        keep_spans(&self.0, request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

#[tonic::async_trait]
impl MetricsService for Grpc {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        keep_metrics(&self.0, request.into_inner());
        Ok(tonic::Response::new(ExportMetricsServiceResponse::default()))
    }
}

impl Receiver {
    /// The collector's gRPC services.
    pub async fn grpc() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let received = Arc::new(Mutex::new(Received::default()));
        let service = Grpc(Arc::clone(&received));
        let task = tokio::spawn(async move {
            let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
            let _ = tonic::transport::Server::builder()
                .add_service(TraceServiceServer::new(service.clone()))
                .add_service(MetricsServiceServer::new(service.clone()))
                .add_service(LogsServiceServer::new(service))
                .serve_with_incoming(incoming)
                .await;
        });
        Self {
            port,
            received,
            task,
        }
    }

    /// The collector's HTTP/protobuf endpoints.
    pub async fn http() -> Self {
        use axum::body::Bytes;
        use axum::extract::State;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let received = Arc::new(Mutex::new(Received::default()));
        let app = axum::Router::new()
            .route(
                "/v1/traces",
                axum::routing::post(
                    |State(r): State<Arc<Mutex<Received>>>, body: Bytes| async move {
                        keep_spans(&r, ExportTraceServiceRequest::decode(body).unwrap());
                        ExportTraceServiceResponse::default().encode_to_vec()
                    },
                ),
            )
            .route(
                "/v1/metrics",
                axum::routing::post(
                    |State(r): State<Arc<Mutex<Received>>>, body: Bytes| async move {
                        keep_metrics(&r, ExportMetricsServiceRequest::decode(body).unwrap());
                        ExportMetricsServiceResponse::default().encode_to_vec()
                    },
                ),
            )
            .route(
                "/v1/logs",
                axum::routing::post(
                    |State(r): State<Arc<Mutex<Received>>>, body: Bytes| async move {
                        if keep_logs(&r, ExportLogsServiceRequest::decode(body).unwrap()) {
                            Ok(ExportLogsServiceResponse::default().encode_to_vec())
                        } else {
                            Err(axum::http::StatusCode::SERVICE_UNAVAILABLE)
                        }
                    },
                ),
            )
            .with_state(Arc::clone(&received));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            port,
            received,
            task,
        }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Waits (at most `within`) until `check` holds for what was received.
    pub async fn wait(&self, within: Duration, check: impl Fn(&Received) -> bool) -> bool {
        let deadline = std::time::Instant::now() + within;
        while std::time::Instant::now() < deadline {
            if check(&self.received.lock().unwrap()) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }
}
