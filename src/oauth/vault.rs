//! Each principal's own tokens for an upstream that signs every principal in on their own
//! (`credentials = "per-principal"` with `[upstreams.NAME.oauth]`): one file per upstream and
//! principal, `<state dir>/oauth/principals/UPSTREAM/DIGEST.sealed` (the digest of the principal,
//! so no name is on disk), AEAD-sealed (ChaCha20-Poly1305) under a key made at first start
//! (`<state dir>/oauth/principals.key`, 0600, refused when others can read it) and bound to the
//! upstream and the principal: a file copied under another principal's name does not open.
//! Revoking a sign-in deletes its file.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sha2::Digest;

use crate::config::{OAuthConfig, SealedTokens};
use crate::private_file::{PrivateFileError, random_hex, read_or_create};
use crate::sealed::Sealer;

/// The key file, under the state directory.
const KEY_FILE: &str = "oauth/principals.key";
/// The sealed files, under the state directory.
const DIR: &str = "oauth/principals";
/// How long a sealed token file opens: as long as its tokens are good (they say when they
/// expire; the seal itself does not).
pub const LASTING: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// Where principals' upstream tokens are kept, and the key that seals them.
pub struct Vault {
    dir: PathBuf,
    sealer: Arc<Sealer>,
}

impl std::fmt::Debug for Vault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vault").field("dir", &self.dir).finish()
    }
}

/// Why the vault cannot be opened.
#[derive(Debug, thiserror::Error)]
pub enum VaultError {
    #[error("the key sealing principals' upstream tokens: {0}")]
    Key(#[from] PrivateFileError),
    #[error(
        "the key sealing principals' upstream tokens, {0}, is not 64 hex digits: delete it (every principal then signs in again) or restore it"
    )]
    Malformed(String),
}

impl Vault {
    /// The vault under `state_dir`, its key made there at first start.
    pub fn open(state_dir: &Path) -> Result<Self, VaultError> {
        let path = state_dir.join(KEY_FILE);
        let (text, made) = read_or_create(&path, || random_hex(32))?;
        if made {
            tracing::info!(file = %path.display(), "Made the key principals' upstream tokens are sealed with.");
        }
        let key = decode_hex(text.trim())
            .ok_or_else(|| VaultError::Malformed(path.display().to_string()))?;
        Ok(Self {
            dir: state_dir.join(DIR),
            sealer: Arc::new(Sealer::with_key(&key)),
        })
    }

    /// The file `principal`'s tokens for `upstream` are kept in.
    fn file(&self, upstream: &str, principal: &str) -> PathBuf {
        let digest = sha2::Sha256::digest(principal.as_bytes());
        let name: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
        self.dir.join(upstream).join(format!("{name}.sealed"))
    }

    /// `oauth` as `principal`'s own sign-in to `upstream` uses it: its tokens sealed in the
    /// vault. `principal` is its instance key (`Principal::instance_key`).
    pub fn oauth_for(&self, upstream: &str, oauth: &OAuthConfig, principal: &str) -> OAuthConfig {
        let mut own = oauth.clone();
        own.token_file = self.file(upstream, principal);
        own.sealed = Some(SealedTokens {
            sealer: Arc::clone(&self.sealer),
            binding: Arc::from(format!("{upstream}\n{principal}")),
        });
        own
    }

    /// Whether `principal` has tokens for `upstream`.
    pub fn holds(&self, upstream: &str, principal: &str) -> bool {
        let file = self.file(upstream, principal);
        file.is_file() || super::shelf::shelf().is_some_and(|s| s.get(&file).is_some())
    }

    /// Reads `principal`'s tokens for `upstream` from the fleet store again, where replicas
    /// share them (another replica finished the sign-in).
    pub async fn fetch(&self, upstream: &str, principal: &str) {
        if let Some(shelf) = super::shelf::shelf() {
            shelf.fetch(&self.file(upstream, principal)).await;
        }
    }

    /// Waits until `principal`'s tokens for `upstream` are in the fleet store, where replicas
    /// share them.
    pub async fn flush(&self, upstream: &str, principal: &str) -> Result<(), String> {
        match super::shelf::shelf() {
            Some(shelf) => shelf.flush(&self.file(upstream, principal)).await,
            None => Ok(()),
        }
    }

    /// Deletes `principal`'s tokens for `upstream`; whether there were any.
    pub fn revoke(&self, upstream: &str, principal: &str) -> std::io::Result<bool> {
        let file = self.file(upstream, principal);
        let mut shelved = false;
        if let Some(shelf) = super::shelf::shelf() {
            shelved = shelf.get(&file).is_some();
            shelf.forget(&file);
        }
        match std::fs::remove_file(&file) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(shelved),
            Err(e) => Err(e),
        }
    }

    /// How many principals have tokens for `upstream`.
    pub fn signed_in(&self, upstream: &str) -> usize {
        let dir = self.dir.join(upstream);
        let mut names: std::collections::BTreeSet<String> = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().to_str().map(str::to_owned))
            .collect();
        if let Some(shelf) = super::shelf::shelf() {
            names.extend(shelf.names_under(&dir));
        }
        names.iter().filter(|n| n.ends_with(".sealed")).count()
    }
}

fn decode_hex(text: &str) -> Option<[u8; 32]> {
    if text.len() != 64 || !text.is_ascii() {
        return None;
    }
    let mut key = [0u8; 32];
    for (i, byte) in key.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(key)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::oauth::TokenFile;
    use crate::oauth::identity::{AuthMethod, ClientIdentity};

    fn tokens(access: &str) -> TokenFile {
        TokenFile {
            access_token: access.into(),
            refresh_token: Some("refresh-secret".into()),
            expires_at: None,
            obtained_at: 0,
            scope: None,
            token_endpoint: "https://as/token".into(),
            resource: "https://rs/mcp".into(),
            token_type: None,
            dpop_key: None,
            refresh_refused: None,
            client: ClientIdentity {
                client_id: "id".into(),
                client_secret: None,
                auth: AuthMethod::None,
                assertion: None,
            },
        }
    }

    #[test]
    fn a_principals_tokens_are_sealed_to_it_and_revoked_by_deleting_them() {
        let state = tempfile::tempdir().unwrap();
        let vault = Vault::open(state.path()).unwrap();
        let key = std::fs::metadata(state.path().join(KEY_FILE)).unwrap();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&key.permissions()) & 0o777,
            0o600
        );
        let shared = OAuthConfig::default();
        let alice = vault.oauth_for("gh", &shared, "principal host \"alice\"");
        let bob = vault.oauth_for("gh", &shared, "principal host \"bob\"");
        assert!(!vault.holds("gh", "principal host \"alice\""));
        tokens("alice-access-secret").save(&alice).unwrap();
        assert!(vault.holds("gh", "principal host \"alice\""));
        assert_eq!(vault.signed_in("gh"), 1);
        let on_disk = std::fs::read_to_string(&alice.token_file).unwrap();
        assert!(!on_disk.contains("secret"), "sealed at rest");
        assert_eq!(
            TokenFile::load(&alice).unwrap().access_token,
            "alice-access-secret"
        );
        assert!(TokenFile::load(&bob).is_none());
        // Alice's file put where Bob's belongs does not open as Bob's.
        std::fs::create_dir_all(bob.token_file.parent().unwrap()).unwrap();
        std::fs::copy(&alice.token_file, &bob.token_file).unwrap();
        assert!(TokenFile::load(&bob).is_none());
        // Another daemon's key (a fresh state directory) opens nothing.
        let other = Vault::open(tempfile::tempdir().unwrap().path()).unwrap();
        let mut elsewhere = other.oauth_for("gh", &shared, "principal host \"alice\"");
        elsewhere.token_file.clone_from(&alice.token_file);
        assert!(TokenFile::load(&elsewhere).is_none());
        // The key is kept: the vault opened again reads what it sealed.
        let again = Vault::open(state.path()).unwrap();
        let alice_again = again.oauth_for("gh", &shared, "principal host \"alice\"");
        assert!(TokenFile::load(&alice_again).is_some());
        assert!(vault.revoke("gh", "principal host \"alice\"").unwrap());
        assert!(!vault.revoke("gh", "principal host \"alice\"").unwrap());
        assert!(TokenFile::load(&alice).is_none());
    }

    #[test]
    fn a_key_others_can_read_or_a_malformed_one_is_refused() {
        let state = tempfile::tempdir().unwrap();
        Vault::open(state.path()).unwrap();
        let path = state.path().join(KEY_FILE);
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o644))
            .unwrap();
        let exposed = Vault::open(state.path()).unwrap_err().to_string();
        assert!(exposed.contains("readable by other users"), "{exposed}");
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        std::fs::write(&path, "short").unwrap();
        let malformed = Vault::open(state.path()).unwrap_err().to_string();
        assert!(malformed.contains("64 hex digits"), "{malformed}");
    }
}
