//! Independent MCP implementations against mcpmux: clients on the official Python SDK and rmcp
//! (`interop`), the Python SDK's protocol checks (`protocol_python`), the npm reference servers as
//! upstreams (`real_servers`), the official conformance suite (`conformance`), and MCP Apps — the
//! published app servers rendered by an ext-apps host in a real browser (`apps`), an app tool's
//! `_meta.ui` as hosts see it (`apps_meta`) — and Skills, served and read by the TypeScript SDK's
//! Skills extension (`skills`). The Python and Node scripts these drive live beside this file.
//!
//! One test binary per area (docs/testing.md, "Test layout"): each module here was a binary of its own
//! and keeps its test names, so `cargo test --test interop NAME` finds them.

// Tests unwrap: a failure there is the test failing.
#![allow(clippy::unwrap_used)]

// `pub`: the helpers are a library the areas share, so what this one leaves unused is not dead.
#[path = "../common/mod.rs"]
pub mod common;

mod apps;
mod apps_meta;
mod conformance;
mod interop;
mod modern_upstream;
mod protocol_python;
mod real_servers;
mod search_hosts;
mod signin;
mod skills;
