//! Upstream MCP servers: one supervised connection each.
//!
//! - [`handle`]: the public face ([`UpstreamHandle`]) — forward a request, read the status.
//! - `actor`: the ractor actor that owns one connection's life: start, handshake, catalog, stop.
//! - `connection`: the in-flight table and the reader/writer tasks around a child's pipes.
//! - `process`: starting the child (cleared env, own process group) and killing its group.
//! - `handshake`: `initialize` and reading every listing to its last page.
//! - `origin`: what a connection needs from the host side ([`Origin`], [`HostBus`]).

mod actor;
mod connection;
mod handle;
mod handshake;
mod origin;
mod process;

pub use actor::{IDLE_STOP, UpstreamActor, UpstreamMsg};
pub use connection::{CallContext, ProgressTokens};
pub use handle::{Reply, State, Status, UpstreamError, UpstreamHandle};
pub use handshake::{ServerInfo, UpstreamCatalog, UpstreamItem};
pub use origin::{Canceller, HostBus, Origin, ServerRequestReply};
