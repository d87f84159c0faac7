//! The host side: sessions, what each request method does, and the transports hosts reach.
//!
//! - `session`: one host connection's negotiated state, and the store that expires idle ones.
//! - `gateway`: what every method does — listings from the snapshot, calls routed to upstreams.
//! - `hub`: shared host-side state — session-bound upstream messages, subscriptions, tasks,
//!   per-session upstream instances.
//! - `origin`: the host side of one forwarded request, as upstream connections see it.
//! - `http`: Streamable HTTP at `/mcp`, and the legacy HTTP+SSE transport (axum).

mod gateway;
mod http;
mod hub;
mod origin;
mod session;

pub use gateway::{Gateway, HostRequest};
pub use http::app;
pub use hub::Hub;
pub use session::{Session, SessionStore};
