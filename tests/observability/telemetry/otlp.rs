//! An OTLP receiver for tests: the collector's gRPC trace and metrics services (the generated
//! servers of `opentelemetry-proto`) and its HTTP/protobuf endpoints (`/v1/traces`,
//! `/v1/metrics`), on 127.0.0.1, keeping every span and metric name they were sent.

use std::sync::{Arc, Mutex};
use std::time::Duration;

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

#[derive(Debug, Default)]
pub struct Received {
    pub spans: Vec<ReceivedSpan>,
    pub metrics: Vec<String>,
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

#[derive(Clone)]
struct Grpc(Arc<Mutex<Received>>);

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
                .add_service(MetricsServiceServer::new(service))
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
