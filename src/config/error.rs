//! [`ConfigError`]: why a config cannot be used. Every refusal names the file, and for a value the
//! key and the fix.

use std::path::{Path, PathBuf};

/// A config that cannot be used, and why.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {file}: {source}")]
    Read {
        file: PathBuf,
        source: std::io::Error,
    },
    #[error("{file}: {detail}")]
    Syntax { file: PathBuf, detail: String },
    #[error("{file}: `{key}`: {problem}. Fix: {fix}")]
    Invalid {
        file: PathBuf,
        key: String,
        problem: String,
        fix: String,
    },
    #[error(
        "no config file found (looked at {tried}). Fix: pass --config PATH or set MCPMUX_CONFIG"
    )]
    NotFound { tried: String },
}

impl ConfigError {
    /// The value at `key` in `file` cannot be used: `problem`, and how to `fix` it.
    pub(super) fn invalid(
        file: &Path,
        key: impl Into<String>,
        problem: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Self::Invalid {
            file: file.into(),
            key: key.into(),
            problem: problem.into(),
            fix: fix.into(),
        }
    }
}

/// Why a reload changed nothing.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ReloadError {
    /// The file is not a valid config: why, with any secret a line it quotes held masked.
    #[error("{0}")]
    Invalid(String),
    #[error(
        "{}: mcpmux listens on {listen}, beyond this machine, and the new config has no [hosts] credential or [server.authorization]. Fix: keep a credential, or listen on 127.0.0.1 (a restart)",
        .file.display()
    )]
    Exposed {
        file: std::path::PathBuf,
        listen: std::net::SocketAddr,
    },
}
