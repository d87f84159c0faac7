//! The host side: sessions, what each request method does, and the transports hosts reach.
//!
//! - `session`: one host connection's negotiated state, and the store that expires idle ones.
//! - `gateway`: what every method does — listings from the snapshot, calls routed to upstreams.
//! - `http`: Streamable HTTP at `/mcp` (axum).
//! - `stdio`: the `mcpmux stdio` bridge from a stdio-only host to the running daemon.

mod gateway;
mod http;
mod session;
pub mod stdio;

pub use gateway::Gateway;
pub use http::app;
pub use session::{Session, SessionStore};
