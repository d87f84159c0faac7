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
