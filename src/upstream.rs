//! Upstream MCP servers: one supervised connection each (or one per host session, for
//! `isolation = "per-session"`), over a transport the rest of mcpmux never sees.
//!
//! - [`handle`]: the public face ([`UpstreamHandle`]) — forward a request, read the status.
//! - `actor`: owns one connection's life: open the transport, handshake, catalog, health, stop.
//! - `connection`: the in-flight table and the reader task over a transport's messages, and the
//!   host side it needs (`connection/caller`: [`Caller`], [`HostEvents`]).
//! - `transport`: the seam — messages out with what the connection knows of them, messages in
//!   parsed once where they were read ([`transport::Diagnostics`], links); `transport/stdio`: a
//!   child process; `transport/remote`: Streamable HTTP and the legacy HTTP+SSE transport.
//! - `metrics`: per-upstream request counts and latency histograms.
//! - `handshake`: `initialize` and reading every listing to its last page.
//! - `companion`: the handshake-era session beside a 2026-07-28 link to a server that serves
//!   both eras, for the requests of handshake-era hosts.
//! - `catalog`: what an upstream offers and where it is published ([`CatalogSink`]).
//! - `status`: the phase an upstream is in and its readable account ([`Status`]).
//! - `error`: failures as values ([`UpstreamError`], start and close reasons, [`StopReason`]).
//!
//! The arrows run one way: actor → handle → connection → error → status; nothing here knows the router,
//! the supervisor or the host side beyond the traits it declares.

mod actor;
mod catalog;
mod companion;
mod connection;
mod error;
mod handle;
mod handshake;
pub mod metrics;
mod modern;
mod status;
mod transport;

pub use actor::spawn;
pub use catalog::{CatalogLink, CatalogSink, ServerInfo, UpstreamCatalog, UpstreamItem};
pub use connection::{
    CallContext, Caller, Canceller, HostEvents, ProgressTokens, ServerRequestReply, UpstreamId,
};
pub use error::{Reply, StopReason, UpstreamError};
pub use handle::{UpstreamHandle, Upstreams};
pub use modern::InputRequired;
pub use status::Phase;
