//! What can go wrong with an upstream, as values: a request's failure ([`UpstreamError`], what
//! callers see), a start's failure ([`StartError`]), why a connection ended ([`Closed`]) and why
//! mcpmux stopped an upstream on purpose ([`StopReason`]). Nothing here is compared as text.

use std::sync::Arc;
use std::time::Duration;

use serde_json::value::RawValue;

use crate::mcp::version::Version;

use super::status::Phase;

/// An upstream's answer to one request: its `result` or its `error` object, verbatim.
#[derive(Debug)]
pub enum Reply {
    Result(Box<RawValue>),
    Error(Box<RawValue>),
}

/// Why a request got no answer from the upstream.
#[derive(Debug, Clone, thiserror::Error)]
pub enum UpstreamError {
    #[error("upstream `{upstream}` is {state}{}", reason.as_ref().map(|r| format!(": {r}")).unwrap_or_default())]
    Unavailable {
        upstream: String,
        state: Phase,
        reason: Option<String>,
    },
    #[error("upstream `{upstream}` did not answer within {}s", timeout.as_secs_f32())]
    Timeout { upstream: String, timeout: Duration },
    #[error("upstream `{upstream}` failed while handling the request: {reason}")]
    Failed { upstream: String, reason: String },
    #[error("the request to upstream `{upstream}` was cancelled")]
    Cancelled { upstream: String },
    #[error("upstream `{upstream}` is busy: {limit} requests are already in flight; retry shortly")]
    Busy { upstream: String, limit: usize },
    /// A session or principal would need an instance of its own, and the upstream runs all it
    /// may.
    #[error(
        "upstream `{upstream}` already runs {limit} instances of its own per session or principal, its limit (upstreams.{upstream}.max_instances); retry when another session ends or instance idles out, or raise upstreams.{upstream}.max_instances"
    )]
    TooManyInstances { upstream: String, limit: usize },
}

/// Why an upstream could not start serving.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StartError {
    /// The transport could not be opened (the program is missing, the directory does not exist…).
    #[error("{0}")]
    Open(String),
    /// The upstream's program could not be started.
    #[error("{0}")]
    Spawn(#[source] Arc<SpawnError>),
    /// The connection opened but `initialize` or a first listing failed.
    #[error("{0}")]
    Handshake(#[source] Arc<HandshakeError>),
    #[error("it did not finish starting within {}s", .0.as_secs())]
    Timeout(Duration),
    /// The process ended on the `server/discover` probe (a handshake-era server): it is started
    /// again and spoken to with the handshake.
    #[error("it ended on the server/discover probe")]
    EndedOnProbe,
}

/// Why a connection ended, as its transport saw it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Closed {
    /// The upstream closed its side without saying more (its exit status may).
    #[error("it closed its stdout")]
    Eof,
    /// The upstream's process ended; the sentence says how.
    #[error("{0}")]
    Exited(String),
    /// It wrote something that is not JSON-RPC, so its stream can no longer be trusted.
    #[error("{0}")]
    Protocol(String),
    #[error("it wrote a message longer than {0} bytes (max_message_bytes)")]
    TooLong(usize),
    #[error("{0}")]
    Io(String),
    /// A remote server no longer knows the HTTP session (404): a new one is started at once.
    #[error("{0}")]
    SessionExpired(String),
    /// A remote server refused the credential (401/403): not retried until it changes.
    #[error("{0}")]
    Unauthorized(String),
    /// mcpmux gave up on it for the reason given (a failed health ping, a failed start).
    #[error("{0}")]
    Failed(String),
    /// mcpmux ended it (stop, restart, shutdown).
    #[error("mcpmux stopped it")]
    Stopped,
}

impl Closed {
    /// The upstream wrote `text`, which is not JSON-RPC (`error` says how).
    pub(crate) fn not_json_rpc(text: &str, error: &crate::jsonrpc::RpcError) -> Self {
        let shown: String = text.chars().take(120).collect();
        Self::Protocol(format!(
            "it wrote something that is not JSON-RPC ({}): {shown}",
            error.message
        ))
    }
}

/// Why mcpmux stopped an upstream on purpose, as carried in the actor's stop reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// Unused for longer than `idle_stop`: not restarted; the next call starts it.
    Idle,
    /// An operator asked for a restart.
    Operator,
    /// The daemon is shutting down.
    Shutdown,
    /// The host session a per-session instance served has ended.
    SessionEnded,
    /// A remote server refused the credential: not restarted until an operator (or a changed
    /// credential) asks.
    Unauthorized,
    /// A remote server forgot the HTTP session: started again at once (within the budget).
    SessionExpired,
    /// A reloaded config removed or changed it.
    Reload,
}

impl StopReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Idle => "idle",
            Self::Operator => "operator restart",
            Self::Shutdown => "shutdown",
            Self::SessionEnded => "session ended",
            Self::Unauthorized => "unauthorized",
            Self::SessionExpired => "http session expired",
            Self::Reload => "config reloaded",
        }
    }

    /// The reason an actor was stopped with, if it was one of ours.
    pub fn parse(reason: Option<&str>) -> Option<Self> {
        [
            Self::Idle,
            Self::Operator,
            Self::Shutdown,
            Self::SessionEnded,
            Self::Unauthorized,
            Self::SessionExpired,
            Self::Reload,
        ]
        .into_iter()
        .find(|r| Some(r.as_str()) == reason)
    }
}

/// Why a connection could not be opened in an era, or its catalog read: what the upstream did,
/// as its last error says it.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    #[error("it did not answer server/discover: {0}")]
    NoDiscover(#[source] UpstreamError),
    #[error("it speaks MCP {}, and mcpmux speaks {} to upstreams", .0.join(", "), served())]
    ServesOther(Vec<String>),
    #[error(
        "it speaks MCP {}, and mcpmux speaks {} to upstreams; it refused the initialize handshake (protocol = \"legacy\"): set protocol = \"auto\" for it",
        .0.join(", "),
        served()
    )]
    RefusedLegacy(Vec<String>),
    #[error(
        "it does not speak 2026-07-28 (it did not answer server/discover as such a server does); set protocol = \"auto\" or \"legacy\" for it"
    )]
    NotModern,
    #[error("it answered {what} with an error: {error}")]
    Answered { what: &'static str, error: String },
    #[error("{0}")]
    Request(#[from] UpstreamError),
    #[error("its {what} result is not valid: {source}")]
    Invalid {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("it answered protocol version `{}`, which mcpmux does not speak (known: {})", .0, Version::list())]
    UnknownVersion(String),
    #[error("its {method} result has no `{field}` array")]
    NoList {
        method: &'static str,
        field: &'static str,
    },
    #[error(
        "its {method} listing is over {max} bytes (catalog.max_bytes_per_upstream): mcpmux does not hold a catalog that large; raise catalog.max_bytes_per_upstream if it is meant to be"
    )]
    OverBudget { method: &'static str, max: usize },
}

/// The versions mcpmux speaks to upstreams, for people.
fn served() -> String {
    Version::SERVED.map(Version::as_str).join(", ")
}

/// Why an upstream's program could not be started.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error("working directory {} does not exist", .0.display())]
    NoDirectory(std::path::PathBuf),
    #[error("program `{0}` not found (is it installed and on PATH?)")]
    NotFound(String),
    #[error("program `{0}` is not executable")]
    NotExecutable(String),
    #[error("cannot start `{program}`: {source}")]
    Other {
        program: String,
        #[source]
        source: std::io::Error,
    },
}
