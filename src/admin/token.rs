//! The admin token: 32 bytes from the operating system's CSPRNG, in hex, that every admin route
//! wants as `Authorization: Bearer …`. Made at first start as `<state dir>/admin.token`, created
//! with mode 0600 (never readable by others, not even for a moment), or read from a provisioned
//! `admin.token_file`. Only its SHA-256 digest is kept, and the token itself is never logged.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use sha2::Digest;

use crate::private_file::{self, PrivateFileError};

/// The file name of the token mcpmux makes, in the state directory.
pub const TOKEN_FILE: &str = "admin.token";

/// Random bytes in a token mcpmux makes (64 hex digits).
const TOKEN_BYTES: usize = 32;

/// Why the admin token cannot be had; the daemon does not start without one.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error(
        "cannot create the admin token {}: {source} (make the state directory writable, or provision one with admin.token_file)",
        path.display()
    )]
    Create {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "cannot read the admin token {}: {source} (fix its permissions, or delete it and a new one is made at the next start)",
        path.display()
    )]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "the admin token {} is readable by other users (mode {mode:04o}), so it may have been read already: delete it and a new one is made at the next start (or chmod 0600 it if you know nobody did)",
        path.display()
    )]
    Exposed { path: PathBuf, mode: u32 },
    #[error(
        "admin.token_file = {} cannot be read: {source} (provision the file, or leave admin.token_file out and mcpmux makes <state dir>/admin.token)",
        path.display()
    )]
    Provisioned {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "admin.token_file = {} {problem} (write a long random token into it, e.g. `openssl rand -hex 32`, readable by its owner and group only)",
        path.display()
    )]
    ProvisionedInvalid { path: PathBuf, problem: String },
}

/// The admin token, as the admin API checks it.
#[derive(Clone)]
pub struct AdminToken {
    /// SHA-256 of the token: compared in constant time with the digest of what a caller sends.
    pub(super) digest: [u8; 32],
    /// Where the token is (for the CLI's record, and for a 401 saying where to find it).
    pub file: PathBuf,
}

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminToken")
            .field("file", &self.file)
            .finish_non_exhaustive()
    }
}

impl AdminToken {
    /// The provisioned `configured` file's token, else the one in `state_dir` (made if missing).
    pub fn load(configured: Option<&Path>, state_dir: &Path) -> Result<Self, TokenError> {
        match configured {
            Some(path) => provisioned(path),
            None => generated(&state_dir.join(TOKEN_FILE)),
        }
    }

    fn of(token: &str, file: &Path) -> Self {
        Self {
            digest: sha2::Sha256::digest(token.as_bytes()).into(),
            file: file.to_path_buf(),
        }
    }

    /// Whether `presented` is this token (in constant time).
    pub fn matches(&self, presented: &str) -> bool {
        use subtle::ConstantTimeEq;
        let digest: [u8; 32] = sha2::Sha256::digest(presented.as_bytes()).into();
        bool::from(digest.ct_eq(&self.digest))
    }
}

/// A token someone provisioned: it must be there, non-empty, and not world-readable. Group read
/// is allowed (sharing it with an admin group is the reason to provision one).
fn provisioned(path: &Path) -> Result<AdminToken, TokenError> {
    let invalid = |problem: &str| TokenError::ProvisionedInvalid {
        path: path.to_path_buf(),
        problem: problem.to_owned(),
    };
    let meta = std::fs::metadata(path).map_err(|source| TokenError::Provisioned {
        path: path.to_path_buf(),
        source,
    })?;
    if meta.mode() & 0o007 != 0 {
        return Err(invalid(&format!(
            "is readable by every user (mode {:04o})",
            meta.mode() & 0o7777
        )));
    }
    let text = std::fs::read_to_string(path).map_err(|source| TokenError::Provisioned {
        path: path.to_path_buf(),
        source,
    })?;
    let token = text.trim();
    if token.is_empty() {
        return Err(invalid("is empty"));
    }
    if token.len() < 16 {
        return Err(invalid("holds a token shorter than 16 characters"));
    }
    Ok(AdminToken::of(token, path))
}

/// The token mcpmux keeps in `path`: read if it is there (and only its owner can read it), else
/// made. Refused rather than fixed when others can read it: a chmod would not un-read it.
fn generated(path: &Path) -> Result<AdminToken, TokenError> {
    let at = || path.to_path_buf();
    let made = private_file::read_or_create(path, || {
        private_file::random_hex(TOKEN_BYTES).map(|token| format!("{token}\n"))
    });
    let (text, made) = made.map_err(|e| match e {
        PrivateFileError::Create { source, .. } => TokenError::Create { path: at(), source },
        PrivateFileError::Read { source, .. } => TokenError::Read { path: at(), source },
        PrivateFileError::Exposed { mode, .. } => TokenError::Exposed { path: at(), mode },
    })?;
    let token = text.trim();
    if token.is_empty() {
        return Err(TokenError::Read {
            path: at(),
            source: std::io::Error::other("it is empty"),
        });
    }
    if made {
        tracing::info!(file = %path.display(), "Made the admin API's token (the CLI reads it from here).");
    }
    Ok(AdminToken::of(token, path))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn a_new_token_is_random_private_and_read_again() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let made = AdminToken::load(None, &state).unwrap();
        let path = state.join(TOKEN_FILE);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.trim().len(), 64);
        assert!(made.matches(text.trim()));
        assert!(!made.matches("nope"));
        let again = AdminToken::load(None, &state).unwrap();
        assert_eq!(again.digest, made.digest);
        let other = tempfile::tempdir().unwrap();
        assert_ne!(
            AdminToken::load(None, other.path()).unwrap().digest,
            made.digest
        );
    }

    #[test]
    fn a_token_others_can_read_or_a_planted_link_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(TOKEN_FILE);
        std::fs::write(&path, "x".repeat(64)).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        let refused = AdminToken::load(None, dir.path()).unwrap_err().to_string();
        assert!(
            refused.contains("0640") && refused.contains("delete it"),
            "{refused}"
        );
        std::fs::remove_file(&path).unwrap();
        let target = dir.path().join("elsewhere");
        std::os::unix::fs::symlink(&target, &path).unwrap();
        assert!(AdminToken::load(None, dir.path()).is_err());
        assert!(!target.exists(), "nothing was written through the link");
    }

    #[test]
    fn a_provisioned_token_must_be_there_and_not_world_readable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("provisioned");
        let missing = AdminToken::load(Some(&path), dir.path()).unwrap_err();
        assert!(
            missing.to_string().contains("admin.token_file"),
            "{missing}"
        );
        std::fs::write(&path, "  \n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        let empty = AdminToken::load(Some(&path), dir.path()).unwrap_err();
        assert!(empty.to_string().contains("is empty"), "{empty}");
        std::fs::write(&path, "s".repeat(40)).unwrap();
        let ok = AdminToken::load(Some(&path), dir.path()).unwrap();
        assert!(ok.matches(&"s".repeat(40)));
        assert!(!dir.path().join(TOKEN_FILE).exists());
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(AdminToken::load(Some(&path), dir.path()).is_err());
    }
}
