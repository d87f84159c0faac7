//! The gateway as hosts and operators meet it, on the real daemon with real upstreams: namespacing,
//! routing and pass-through (`gateway`), exact routing of host-bound traffic (`routing`), the
//! seeded isolation run (`isolation`), resource URIs, profiles, pins, tasks; starting and stopping
//! (`lifecycle`, `first_start`), the CLI's own documents, `import`, the systemd units, and how the
//! CLI finds its daemon (`discovery`).
//!
//! One test binary per area (docs/testing.md, "Test layout"): each module here was a binary of its own
//! and keeps its test names, so `cargo test --test gateway NAME` finds them.

// Tests unwrap: a failure there is the test failing.
#![allow(clippy::unwrap_used)]

// `pub`: the helpers are a library the areas share, so what this one leaves unused is not dead.
#[path = "../common/mod.rs"]
pub mod common;

mod cli_docs;
mod discovery;
mod first_start;
mod gateway;
mod import;
mod isolation;
mod lifecycle;
mod modern;
mod pins;
mod principals;
mod profiles;
mod resource_uris;
mod routing;
mod search_mode;
mod systemd;
mod tasks;
