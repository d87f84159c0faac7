//! Remote upstreams: Streamable HTTP and legacy HTTP+SSE servers behind the gateway (`remote`),
//! their faults (`remote_faults`), and signing in to them with OAuth (`oauth`).
//!
//! One test binary per area (docs/testing.md, "Test layout"): each module here was a binary of its own
//! and keeps its test names, so `cargo test --test remotes NAME` finds them.

// Tests unwrap: a failure there is the test failing.
#![allow(clippy::unwrap_used)]

// `pub`: the helpers are a library the areas share, so what this one leaves unused is not dead.
#[path = "../common/mod.rs"]
pub mod common;

mod oauth;
mod remote;
mod remote_faults;
