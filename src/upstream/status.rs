//! Where an upstream is in its life ([`Phase`]) and a readable account of it ([`Status`]), for
//! errors, logs and status output. Plain data: the handle keeps it, everyone reads it.

use std::sync::Arc;

use super::catalog::ServerInfo;

/// Where an upstream is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    Starting,
    Ready,
    /// Serving, but something is off (a changed listing could not be re-read).
    Degraded,
    Restarting,
    /// Failed more often than its restart budget allows; not retried until an operator restarts it.
    CrashLoop,
    /// A remote server refused its credential (401/403); not retried until an operator restarts it.
    Unauthorized,
    /// A remote server wants OAuth and mcpmux holds no usable token: `mcpmux login NAME`.
    NeedsLogin,
    /// Not running: stopped when idle, not started yet (lazy), or shut down. Calls start it.
    Stopped,
    Disabled,
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Starting => "starting",
            Self::Ready => "ready",
            Self::Degraded => "degraded",
            Self::Restarting => "restarting",
            Self::CrashLoop => "crash-loop",
            Self::Unauthorized => "unauthorized",
            Self::NeedsLogin => "needs-login",
            Self::Stopped => "stopped",
            Self::Disabled => "disabled",
        })
    }
}

/// A readable account of an upstream, for errors, logs and status output.
#[derive(Debug, Clone)]
pub struct Status {
    pub phase: Phase,
    pub last_error: Option<String>,
    pub restarts: u32,
    pub pid: Option<u32>,
    pub info: Option<Arc<ServerInfo>>,
    /// How many times it became ready (the supervisor tells a failure after serving from one
    /// while starting by it).
    pub times_ready: u64,
}
