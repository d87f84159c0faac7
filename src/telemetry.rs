//! Logging: `tracing` to stderr, human-readable or JSON, filtered by `MCPMUX_LOG` (or `RUST_LOG`);
//! and `otel`: traces and metrics over OTLP.
//!
//! Level policy: `error` — something a person must fix (an upstream that cannot start);
//! `warn` — mcpmux worked around a peer's mistake; `info` — lifecycle (started, ready, session
//! opened) and upstreams' stderr; `debug` — per-message detail. Never log request payloads above `debug`.

pub mod audit_logs;
pub mod otel;

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber. `json` selects one JSON object per line.
pub fn init(default_level: &str, json: bool) {
    // ractor wraps every actor in an info-level span, which would put `Actor{id=…}` on every
    // line; unless a filter names ractor itself, its spans stay off.
    let quiet_actors = |filter: String| {
        if filter.contains("ractor") {
            filter
        } else {
            format!("{filter},ractor=warn")
        }
    };
    let filter = std::env::var("MCPMUX_LOG")
        .ok()
        .or_else(|| std::env::var("RUST_LOG").ok())
        .and_then(|f| EnvFilter::try_new(quiet_actors(f)).ok())
        .unwrap_or_else(|| EnvFilter::new(quiet_actors(default_level.to_owned())));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}
