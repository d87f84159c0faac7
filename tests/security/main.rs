//! Who may use the daemon and how much of it: hosts known by bearer tokens (`hosts`) and by JSON
//! Web Tokens (`host_jwt`), the admin API's token, origin and record checks (`admin_security`),
//! the bounds on what a stranger can open (`bounds`), and what nothing sent may do to everyone
//! else: stall the daemon or grow it without bound (`stalls`), or hold open what others need
//! beyond its caller's share (`holdings`).
//!
//! One test binary per area (docs/testing.md, "Test layout"): each module here was a binary of its own
//! and keeps its test names, so `cargo test --test security NAME` finds them.

// Tests unwrap: a failure there is the test failing.
#![allow(clippy::unwrap_used)]

// `pub`: the helpers are a library the areas share, so what this one leaves unused is not dead.
#[path = "../common/mod.rs"]
pub mod common;

mod admin_security;
mod bounds;
mod holdings;
mod host_jwt;
mod hosts;
mod signin;
mod stalls;
mod token_exchange;
