//! What the daemon tells about itself: the audit log end to end (`audit`), OpenTelemetry through a
//! real OTLP receiver (`telemetry`), the admin API's Prometheus `/metrics` (`metrics`), and the
//! web console in a real browser (`console`).
//!
//! One test binary per area (docs/testing.md, "Test layout"): each module here was a binary of its own
//! and keeps its test names, so `cargo test --test observability NAME` finds them.

// Tests unwrap: a failure there is the test failing.
#![allow(clippy::unwrap_used)]

// `pub`: the helpers are a library the areas share, so what this one leaves unused is not dead.
#[path = "../common/mod.rs"]
pub mod common;

mod audit;
mod audit_export;
mod console;
mod metrics;
mod telemetry;
