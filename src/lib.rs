//! mcpmux: one daemon that merges many MCP servers into one namespaced, paginated MCP endpoint.
//!
//! Module map (see docs/architecture.md):
//! - [`cli`]: the command line (`serve`, `stdio`, `check`, `tools`, `status`, `sessions`, `pins`,
//!   `approve`, `reload`, `restart`, `login`, `logout`, `audit`, `import`, `completions`, `man`).
//! - [`admin`]: the admin API (status, restart, health, readiness, audit, metrics) on its own
//!   listener, and the one metrics catalog both `/metrics` and OTLP are made from.
//! - [`api`]: the admin API's answers as serde types, shared by the server and the CLI.
//! - [`daemon`]: wires config → upstreams → router → supervisor → HTTP, and shuts down in order.
//! - [`config`]: the validated model and its defaults; loading TOML or an `mcpServers` JSON file.
//! - [`jsonrpc`]: envelopes parsed without copying payloads, the members of a raw object, line
//!   framing, error codes.
//! - [`mcp`]: protocol knowledge — versions, listings, the namespacing codec, cursors.
//! - [`upstream`]: one actor and one connection per upstream server (or per host session), over a
//!   transport behind one seam (a stdio child process, or a remote server over HTTP).
//! - [`oauth`]: signing in to remote upstreams (discovery, registration, PKCE, tokens).
//! - [`supervisor`]: starts upstreams and per-session instances, restarts failed ones with backoff.
//! - [`router`]: the merged catalog upstreams publish to, as immutable snapshots — one view per
//!   profile; tool search over a view (`router::search`, BM25 over each tool's fields).
//! - [`pins`]: tool-definition pinning (first-seen digests in the state directory; rug-pull
//!   detection).
//! - [`downstream`]: host sessions, the host service (what each method does, per-request context),
//!   who a host is (tokens, JWTs, profiles), Streamable HTTP and legacy SSE.
//! - [`bridge`]: `mcpmux stdio`, a stdio host's bridge to the daemon, and the daemon's HTTP client
//!   (bridge and CLI).
//! - [`audit`]: the hash-chained audit log: records in append-only segment files, their
//!   directory and indexes in sled (the only module that knows sled).
//! - [`http_body`]: reading fetched HTTP bodies within a size limit (OAuth, JWKS, upstream
//!   error answers).
//! - [`listener`]: serving HTTP within bounds (connection limit, header-read and idle timeout)
//!   on the host and admin listeners.
//! - [`locator`]: where a running daemon is (records it leaves for the CLI).
//! - [`loopback`]: which `Host` and `Origin` headers name this machine (host endpoint and admin
//!   API).
//! - [`private_file`]: files that hold secrets (the admin token, the cursor keys), made and read
//!   so that only their owner can read them.
//! - [`sealed`]: AEAD-sealed tokens only this mcpmux opens (a multi-round call's `requestState`,
//!   each principal's upstream tokens at rest).
//! - [`shown`]: how much of a string someone else chose is recorded or logged (a prefix and a
//!   digest past a bound).
//! - [`sync`]: the one mutex-poison policy.
//! - [`telemetry`]: logging setup, and OpenTelemetry export (`telemetry::otel`).

mod admin;
mod api;
pub mod audit;
mod bridge;
pub mod cli;
mod cluster;
pub mod config;
mod daemon;
mod downstream;
mod http_body;
mod jsonrpc;
mod listener;
mod locator;
mod loopback;
mod mcp;
mod oauth;
mod pins;
mod private_file;
mod readiness;
mod router;
mod sealed;
mod shown;
mod supervisor;
mod sync;
mod telemetry;
mod upstream;

/// Tool search over a catalog view (`mcpmux tools --search`; its benchmark reads it).
pub use router::search;
