//! The host side: sessions, what each request method does, and the transports hosts reach.
//!
//! - `session`: one host connection's negotiated state ([`HostInfo`]) and tables, and the store
//!   that expires idle sessions.
//! - `service`: the [`HostService`] — what every method does; listings from the snapshot, calls
//!   routed to upstreams, each request with its own [`RequestContext`].
//! - `delivery`: which session gets an upstream's message ([`Delivery`], the `HostEvents` impl).
//! - `tables`: what is kept across sessions (subscription counts, task owners, log levels).
//! - `caller`: the host side of one forwarded request, as upstream connections see it.
//! - `stream`: a request's own stream, what it produces before its answer.
//! - `http`: Streamable HTTP at `/mcp`, and the legacy HTTP+SSE transport (axum).
//! - `principal`: a host's identity, limits and [`Access`]; `jwt`: hosts known by JWTs.
//! - `holdings`: what each caller holds open for a while (listen streams, parked calls), counted
//!   per caller.
//! - `sealed`: tokens hosts carry that only mcpmux can open (a multi-round `requestState`).

mod caller;
mod delivery;
mod holdings;
mod http;
mod jwt;
mod principal;
mod service;
mod session;
pub mod signin;
mod stream;
mod tables;

pub use delivery::Delivery;
pub use http::{EdgeControl, Gate, ProtectedResource, Serving, app};
pub use jwt::JwtGate;
pub use principal::{Access, Principal};
pub use service::{HostService, Keys};
pub use session::SessionStore;
