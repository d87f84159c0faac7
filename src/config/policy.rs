//! How mcpmux treats one upstream: deadlines, restart policy, health checks, limits, lazy start
//! and idle stop. Set in `[defaults]`, overridden per upstream.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

/// Policy keys as written (all optional), in `[defaults]` or an `[upstreams.NAME]` table.
#[derive(Debug, Default, Clone, Deserialize)]
pub(super) struct RawPolicy {
    #[serde(default, with = "humantime_serde")]
    pub request_timeout: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    pub startup_timeout: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    pub shutdown_grace: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    pub restart_initial_backoff: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    pub restart_max_backoff: Option<Duration>,
    pub restart_budget: Option<u32>,
    #[serde(default, with = "humantime_serde")]
    pub restart_window: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    pub ping_interval: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    pub ping_timeout: Option<Duration>,
    pub max_in_flight: Option<usize>,
    pub max_message_bytes: Option<usize>,
    #[serde(default, with = "humantime_serde")]
    pub idle_stop: Option<Duration>,
    pub lazy_start: Option<bool>,
    pub breaker_failures: Option<u32>,
    #[serde(default, with = "humantime_serde")]
    pub breaker_window: Option<Duration>,
}

/// The keys of [`RawPolicy`], for unknown-key messages.
pub(super) const POLICY_KEYS: [&str; 15] = [
    "request_timeout",
    "startup_timeout",
    "shutdown_grace",
    "restart_initial_backoff",
    "restart_max_backoff",
    "restart_budget",
    "restart_window",
    "ping_interval",
    "ping_timeout",
    "max_in_flight",
    "max_message_bytes",
    "idle_stop",
    "lazy_start",
    "breaker_failures",
    "breaker_window",
];

/// The resolved policy of one upstream.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// Deadline for one request (overridden per tool by `tool_timeouts`).
    pub request_timeout: Duration,
    /// Deadline for start, handshake and first catalog read (`npx -y` may download first).
    pub startup_timeout: Duration,
    /// Between SIGTERM and SIGKILL of the process group when stopping.
    pub shutdown_grace: Duration,
    /// First restart delay; doubles per consecutive failure (±20% jitter) up to the maximum.
    pub restart_initial_backoff: Duration,
    pub restart_max_backoff: Duration,
    /// Restarts allowed within `restart_window`; one more puts the upstream in `crash-loop`.
    pub restart_budget: u32,
    pub restart_window: Duration,
    /// How often a ready upstream is pinged (`None`: never).
    pub ping_interval: Option<Duration>,
    /// A ping unanswered this long marks the upstream broken; it is restarted.
    pub ping_timeout: Duration,
    /// Requests in flight to it at once; more get a "busy" error at once.
    pub max_in_flight: usize,
    /// Longest line accepted from it; a longer one means it is broken.
    pub max_message_bytes: usize,
    /// Stop it after this long without requests (`None`: never); the catalog stays listed and
    /// the next call starts it again.
    pub idle_stop: Option<Duration>,
    /// Start it at the first host session instead of at daemon start.
    pub lazy_start: bool,
    /// Per-tool request deadlines, by the upstream's own tool name.
    pub tool_timeouts: BTreeMap<String, Duration>,
    /// Remote upstreams: a failed POST (unreachable, reset, 5xx) fails its request alone; this
    /// many in a row within `breaker_window` end the link, and it is restarted.
    pub breaker_failures: u32,
    pub breaker_window: Duration,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            request_timeout: Duration::from_secs(60),
            startup_timeout: Duration::from_secs(120),
            shutdown_grace: Duration::from_secs(2),
            restart_initial_backoff: Duration::from_secs(1),
            restart_max_backoff: Duration::from_secs(30),
            restart_budget: 5,
            restart_window: Duration::from_secs(60),
            ping_interval: Some(Duration::from_secs(30)),
            ping_timeout: Duration::from_secs(10),
            max_in_flight: 64,
            max_message_bytes: 16 * 1024 * 1024,
            idle_stop: None,
            lazy_start: false,
            tool_timeouts: BTreeMap::new(),
            breaker_failures: 5,
            breaker_window: Duration::from_secs(30),
        }
    }
}

impl RawPolicy {
    /// `self` where set, else `base`.
    pub(super) fn over(&self, base: &Policy) -> Policy {
        let zero_is_off = |d: Option<Duration>, base: Option<Duration>| match d {
            Some(d) if d.is_zero() => None,
            Some(d) => Some(d),
            None => base,
        };
        Policy {
            request_timeout: self.request_timeout.unwrap_or(base.request_timeout),
            startup_timeout: self.startup_timeout.unwrap_or(base.startup_timeout),
            shutdown_grace: self.shutdown_grace.unwrap_or(base.shutdown_grace),
            restart_initial_backoff: self
                .restart_initial_backoff
                .unwrap_or(base.restart_initial_backoff),
            restart_max_backoff: self.restart_max_backoff.unwrap_or(base.restart_max_backoff),
            restart_budget: self.restart_budget.unwrap_or(base.restart_budget),
            restart_window: self.restart_window.unwrap_or(base.restart_window),
            ping_interval: zero_is_off(self.ping_interval, base.ping_interval),
            ping_timeout: self.ping_timeout.unwrap_or(base.ping_timeout),
            max_in_flight: self.max_in_flight.unwrap_or(base.max_in_flight),
            max_message_bytes: self.max_message_bytes.unwrap_or(base.max_message_bytes),
            idle_stop: zero_is_off(self.idle_stop, base.idle_stop),
            lazy_start: self.lazy_start.unwrap_or(base.lazy_start),
            tool_timeouts: base.tool_timeouts.clone(),
            breaker_failures: self.breaker_failures.unwrap_or(base.breaker_failures),
            breaker_window: self.breaker_window.unwrap_or(base.breaker_window),
        }
    }
}

impl Policy {
    /// What is wrong with this policy, as (key, problem, fix).
    pub(super) fn problem(&self) -> Option<(&'static str, String, &'static str)> {
        for (key, d) in [
            ("request_timeout", self.request_timeout),
            ("startup_timeout", self.startup_timeout),
            ("ping_timeout", self.ping_timeout),
        ] {
            if d.is_zero() {
                return Some((
                    key,
                    "a zero deadline fails every request".into(),
                    "use e.g. \"30s\"",
                ));
            }
        }
        if self.restart_max_backoff < self.restart_initial_backoff {
            return Some((
                "restart_max_backoff",
                "is shorter than restart_initial_backoff".into(),
                "make it at least as long",
            ));
        }
        if self.breaker_window.is_zero() {
            return Some((
                "breaker_window",
                "a zero window never holds two failed requests".into(),
                "use e.g. \"30s\"",
            ));
        }
        if self.breaker_failures == 0 {
            return Some((
                "breaker_failures",
                "0 failed requests cannot trip anything".into(),
                "use a positive number, e.g. 5 (1: every failed request restarts the link)",
            ));
        }
        if self.max_in_flight == 0 {
            return Some((
                "max_in_flight",
                "0 would refuse every request".into(),
                "use a positive number, e.g. 64",
            ));
        }
        if self.max_message_bytes < 1024 {
            return Some((
                "max_message_bytes",
                "is too small for any real message".into(),
                "use at least 1024 (default 16 MiB)",
            ));
        }
        if let Some((tool, _)) = self.tool_timeouts.iter().find(|(_, d)| d.is_zero()) {
            return Some((
                "tool_timeouts",
                format!("tool `{tool}` has a zero deadline"),
                "use e.g. \"5m\"",
            ));
        }
        None
    }

    /// The longest deadline any request to this upstream can have.
    pub fn longest_timeout(&self) -> Duration {
        self.tool_timeouts
            .values()
            .copied()
            .fold(self.request_timeout, Duration::max)
    }

    /// The deadline for one call of `tool` (its override, else the request timeout).
    pub fn timeout_for(&self, tool: Option<&str>) -> Duration {
        tool.and_then(|t| self.tool_timeouts.get(t))
            .copied()
            .unwrap_or(self.request_timeout)
    }
}
