//! What the daemon does when things go wrong or change under it: faulty stdio upstreams
//! (`faults`), config reload (`reload`) and reloads that fail or race (`reload_faults`).
//!
//! One test binary per area (docs/testing.md, "Test layout"): each module here was a binary of its own
//! and keeps its test names, so `cargo test --test resilience NAME` finds them.

// Tests unwrap: a failure there is the test failing.
#![allow(clippy::unwrap_used)]

// `pub`: the helpers are a library the areas share, so what this one leaves unused is not dead.
#[path = "../common/mod.rs"]
pub mod common;

mod faults;
mod reload;
mod reload_faults;
