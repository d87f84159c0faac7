//! The audit settings as configured: whether the log is on, where it lives, how arguments are
//! kept, how durable each record is and how long records stay. Data validated here (the secret
//! keys compiled once); the `audit` module receives it and opens the store.

use std::path::{Path, PathBuf};
use std::time::Duration;

use aho_corasick::AhoCorasick;
use serde::{Deserialize, Serialize};

/// How arguments are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Redaction {
    /// Not kept at all.
    None,
    /// A SHA-256 of the (secret-masked) arguments: equal arguments can be matched, none is stored.
    #[default]
    Digest,
    /// Kept, with secret-looking keys masked.
    Full,
}

/// How durable each record is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    /// Flush once per batch: a crash loses at most the records of the batch being written
    /// (those that arrived in the last few milliseconds).
    #[default]
    Batch,
    /// Flush after every record: nothing acknowledged is lost, at a throughput cost.
    Record,
}

/// Where sealed records go besides the local log (`[audit] export`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuditExport {
    /// Nowhere.
    #[default]
    None,
    /// As OpenTelemetry log records, through the OTLP endpoint `[telemetry]` names.
    Otlp,
}

/// `[audit] export_queue` unless set: records waiting to leave at most.
pub const DEFAULT_EXPORT_QUEUE: usize = 65_536;
/// `[audit] export_head_interval` unless set.
pub const DEFAULT_EXPORT_HEAD_INTERVAL: Duration = Duration::from_secs(30);

/// The audit settings, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditConfig {
    pub enabled: bool,
    /// Where the store lives (`<state dir>/audit`).
    pub dir: PathBuf,
    pub redaction: Redaction,
    /// Keys whose values are always masked, matched case-insensitively as substrings.
    pub secret_keys: SecretKeys,
    pub durability: Durability,
    /// Records older than this are removed (`None`: kept).
    pub max_age: Option<Duration>,
    /// The store is pruned from the old end beyond this many bytes of records.
    pub max_bytes: u64,
    /// Records waiting for the writer at most; beyond, records are dropped and counted.
    pub queue: usize,
    /// Where sealed records also go.
    pub export: AuditExport,
    /// Records waiting to be exported at most; beyond, they are not exported (and counted).
    pub export_queue: usize,
    /// How often the chain's head is exported.
    pub export_head_interval: Duration,
}

/// Keys masked in every redaction mode unless configured otherwise.
pub const DEFAULT_SECRET_KEYS: [&str; 9] = [
    "password",
    "passwd",
    "secret",
    "token",
    "api_key",
    "apikey",
    "authorization",
    "cookie",
    "private_key",
];

impl AuditConfig {
    /// The default settings, the store in `dir` and these `secret_keys`.
    pub fn new(dir: PathBuf, secret_keys: SecretKeys) -> Self {
        Self {
            enabled: true,
            dir,
            redaction: Redaction::Digest,
            secret_keys,
            durability: Durability::Batch,
            max_age: Some(Duration::from_secs(30 * 24 * 3600)),
            max_bytes: 1024 * 1024 * 1024,
            queue: 65_536,
            export: AuditExport::None,
            export_queue: DEFAULT_EXPORT_QUEUE,
            export_head_interval: DEFAULT_EXPORT_HEAD_INTERVAL,
        }
    }
}

/// The keys whose values are always masked, compiled for matching when the config is validated
/// (as substrings, ASCII case-insensitively, all in one pass), so a config that loaded cannot
/// fail later in the audit writer.
#[derive(Clone)]
pub struct SecretKeys {
    names: Vec<String>,
    matcher: AhoCorasick,
}

impl SecretKeys {
    pub fn new(names: Vec<String>) -> Result<Self, aho_corasick::BuildError> {
        let matcher = AhoCorasick::builder()
            .ascii_case_insensitive(true)
            .build(&names)?;
        Ok(Self { names, matcher })
    }

    /// [`DEFAULT_SECRET_KEYS`].
    pub fn defaults() -> Result<Self, aho_corasick::BuildError> {
        Self::new(
            DEFAULT_SECRET_KEYS
                .iter()
                .map(|s| (*s).to_owned())
                .collect(),
        )
    }

    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Finds any of the keys in a text.
    pub fn matcher(&self) -> &AhoCorasick {
        &self.matcher
    }
}

/// Equal when they name the same keys: the matcher is compiled from them.
impl PartialEq for SecretKeys {
    fn eq(&self, other: &Self) -> bool {
        self.names == other.names
    }
}

impl std::fmt::Debug for SecretKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("SecretKeys").field(&self.names).finish()
    }
}

/// The state directory: `explicit` (config `state_dir` or `--state-dir`), else `MCPMUX_STATE_DIR`,
/// `$STATE_DIRECTORY` (systemd), `$XDG_STATE_HOME/mcpmux`, `~/.local/state/mcpmux`.
pub fn state_dir(explicit: Option<&Path>) -> PathBuf {
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(dir) = explicit {
        return dir.to_path_buf();
    }
    if let Some(dir) = env("MCPMUX_STATE_DIR") {
        return dir;
    }
    if let Some(dir) = env("STATE_DIRECTORY") {
        // systemd may list several, separated by ':'; the first is ours.
        let first = dir
            .to_string_lossy()
            .split(':')
            .next()
            .unwrap_or_default()
            .to_owned();
        return PathBuf::from(first);
    }
    if let Some(dir) = env("XDG_STATE_HOME") {
        return dir.join("mcpmux");
    }
    env("HOME").map_or_else(
        || PathBuf::from(".mcpmux-state"),
        |h| h.join(".local/state/mcpmux"),
    )
}
