//! Where sign-in keeps what it got: one token file per upstream (`<state dir>/oauth/NAME.json`)
//! and the clients registered with each authorization server (`<state dir>/oauth/clients/`),
//! each written atomically (a temporary file, synced, renamed) with mode 0600. `Debug` never
//! prints a token or a secret.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::Digest;

use super::identity::ClientIdentity;
use super::shelf::shelf;
use crate::config::OAuthConfig;

/// An upstream's tokens, and what refreshing them needs.
#[derive(Clone, Serialize, Deserialize)]
pub struct TokenFile {
    pub access_token: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_token: Option<String>,
    /// When the access token expires (seconds since the Unix epoch), if the server said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<u64>,
    /// When it was obtained (seconds since the Unix epoch), to refresh a short-lived token in time.
    #[serde(default)]
    pub obtained_at: u64,
    /// The scopes granted (space-separated), if the server said, else those requested.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    pub token_endpoint: String,
    pub resource: String,
    pub client: ClientIdentity,
    /// `DPoP` when the token is bound to [`Self::dpop_key`] (RFC 9449); else a bearer token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_type: Option<String>,
    /// The key the token is bound to (PKCS#8, base64url), for DPoP tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dpop_key: Option<String>,
    /// Why the authorization server refused its refresh token, as the replica that tried found
    /// (replicas sharing the tokens, `[cluster] store`): no replica tries it again; a sign-in
    /// replaces these tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_refused: Option<String>,
}

impl std::fmt::Debug for TokenFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenFile")
            .field("expires_at", &self.expires_at)
            .field("scope", &self.scope)
            .field("token_endpoint", &self.token_endpoint)
            .field("resource", &self.resource)
            .field("token_type", &self.token_type)
            .finish_non_exhaustive()
    }
}

impl TokenFile {
    /// The key its token is bound to, when it is a DPoP token.
    pub fn dpop(&self) -> Option<super::dpop::DpopKey> {
        let dpop = self.token_type.as_deref()?.eq_ignore_ascii_case("dpop");
        let key = self.dpop_key.as_deref().filter(|_| dpop)?;
        super::dpop::DpopKey::from_text(key).ok()
    }

    /// The token file at `path`, if there is a readable one.
    pub fn read(path: &Path) -> Option<Self> {
        let text = std::fs::read(path).ok()?;
        serde_json::from_slice(&text).ok()
    }

    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        let text = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        write_private(path, &text)
    }

    /// The tokens of the sign-in `oauth` describes: its token file, or a principal's sealed one
    /// (`None` too when that does not open: sealed for another principal, or with another key).
    pub fn load(oauth: &OAuthConfig) -> Option<Self> {
        if let Some(kept) = shelf().and_then(|s| s.get(&oauth.token_file)) {
            return serde_json::from_slice(&kept).ok();
        }
        let Some(sealed) = &oauth.sealed else {
            return Self::read(&oauth.token_file);
        };
        let text = std::fs::read_to_string(&oauth.token_file).ok()?;
        let plain = (sealed.sealer)
            .open(text.trim(), sealed.binding.as_bytes())
            .ok()?;
        serde_json::from_slice(&plain).ok()
    }

    /// Stores these tokens where [`Self::load`] reads them.
    pub fn save(&self, oauth: &OAuthConfig) -> std::io::Result<()> {
        let text = self.write_copy(oauth)?;
        if let Some(shelf) = shelf() {
            shelf.put(&oauth.token_file, &text);
        }
        Ok(())
    }

    /// Writes this replica's copy (the file `oauth` names, sealed where it is a principal's);
    /// returns the tokens as JSON, as a shelf keeps them.
    pub fn write_copy(&self, oauth: &OAuthConfig) -> std::io::Result<Vec<u8>> {
        let text = serde_json::to_vec(self).map_err(std::io::Error::other)?;
        match &oauth.sealed {
            None => self.write(&oauth.token_file)?,
            Some(sealed) => {
                let binding = sealed.binding.as_bytes();
                let sealed = (sealed.sealer).seal(&text, binding, super::vault::LASTING);
                write_private(&oauth.token_file, sealed.as_bytes())?;
            }
        }
        Ok(text)
    }
}

/// Where the clients registered with `issuer` are remembered, beside `token_file`.
pub(super) fn client_file(token_file: &Path, issuer: &str) -> PathBuf {
    let digest = sha2::Sha256::digest(issuer.as_bytes());
    let name: String = digest[..12].iter().map(|b| format!("{b:02x}")).collect();
    let dir = token_file.parent().unwrap_or(Path::new("."));
    dir.join("clients").join(format!("{name}.json"))
}

/// The client registered with an authorization server, where [`write_client`] kept it (the
/// fleet's, where replicas share a store).
pub(super) fn read_client(path: &Path) -> Option<ClientIdentity> {
    if let Some(kept) = shelf().and_then(|s| s.get(path)) {
        return serde_json::from_slice(&kept).ok();
    }
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

/// Remembers a client registered (dynamically) with an authorization server: in its file, and
/// for every replica where they share a store, so they use one registration.
pub(super) fn write_client(path: &Path, client: &ClientIdentity) -> std::io::Result<()> {
    let text = serde_json::to_vec_pretty(client).map_err(std::io::Error::other)?;
    write_private(path, &text)?;
    if let Some(shelf) = shelf() {
        shelf.put(path, &text);
    }
    Ok(())
}

/// Writes `bytes` to `path` readable by its owner only, whole or not at all.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    // Unique per write: a sign-in and a renewal of one upstream may store at the same moment.
    let tmp = dir.join(format!(
        ".{}.{}.{:08x}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("token"),
        std::process::id(),
        rand::random::<u32>()
    ));
    {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
    }
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oauth::identity::AuthMethod;

    #[test]
    fn token_files_are_private_whole_and_never_printed() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("oauth").join("up.json");
        let tokens = TokenFile {
            access_token: "secret-access".into(),
            refresh_token: Some("secret-refresh".into()),
            expires_at: Some(1),
            obtained_at: 0,
            scope: Some("a b".into()),
            token_endpoint: "https://as/token".into(),
            resource: "https://rs/mcp".into(),
            token_type: None,
            dpop_key: None,
            refresh_refused: None,
            client: ClientIdentity {
                client_id: "id".into(),
                client_secret: Some("secret-client".into()),
                auth: AuthMethod::ClientSecretBasic,
                assertion: None,
            },
        };
        tokens.write(&path).unwrap_or_else(|e| panic!("{e}"));
        let mode = std::fs::metadata(&path)
            .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o777)
            .unwrap_or_default();
        assert_eq!(mode, 0o600);
        let back = TokenFile::read(&path).unwrap_or_else(|| panic!("unreadable"));
        assert_eq!(back.access_token, "secret-access");
        let printed = format!("{back:?}");
        assert!(!printed.contains("secret"), "{printed}");
    }
}
