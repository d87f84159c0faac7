use super::*;

fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
    move |name| {
        vars.iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| (*v).to_owned())
    }
}

#[test]
fn nothing_is_exported_without_an_endpoint_or_when_disabled() {
    let none = TelemetryConfig::default();
    assert_eq!(Export::resolve(&none, env(&[])), None);
    let vars = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
        ("OTEL_SDK_DISABLED", "true"),
    ];
    assert_eq!(Export::resolve(&none, env(&vars)), None);
}

#[test]
fn the_environment_fills_in_what_the_config_leaves_out() {
    let vars = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317"),
        ("OTEL_SERVICE_NAME", "gateway"),
        ("OTEL_METRICS_EXPORTER", "none"),
    ];
    let export = Export::resolve(&TelemetryConfig::default(), env(&vars))
        .unwrap_or_else(|| panic!("no export"));
    assert_eq!(export.endpoint, None);
    assert_eq!(export.protocol, OtlpProtocol::Grpc);
    assert_eq!(export.service_name, "gateway");
    assert!(!export.metrics);
    let config = TelemetryConfig {
        endpoint: Some("http://127.0.0.1:4318".into()),
        service_name: Some("mine".into()),
        ..TelemetryConfig::default()
    };
    let vars = [("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")];
    let export = Export::resolve(&config, env(&vars)).unwrap_or_else(|| panic!("no export"));
    assert_eq!(export.protocol, OtlpProtocol::HttpProtobuf);
    assert_eq!(export.service_name, "mine");
    assert!(export.metrics);
    assert_eq!(
        signal_url("http://c:4318/", "traces"),
        "http://c:4318/v1/traces"
    );
}

#[test]
fn a_trace_id_is_read_from_a_well_formed_traceparent() {
    let tp = TraceParent {
        traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into(),
        tracestate: None,
        from_headers: true,
    };
    assert_eq!(tp.trace_id(), Some("0af7651916cd43dd8448eb211c80319c"));
    let bad = TraceParent {
        traceparent: "garbage".into(),
        ..tp
    };
    assert_eq!(bad.trace_id(), None);
}
