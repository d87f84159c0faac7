//! Who mcpmux is to an authorization server, as a token file remembers it: a client id, its
//! secret or signing key, and how it authenticates at the token endpoint. `client.rs` finds or
//! registers one; `store.rs` keeps it; `token.rs` authenticates with it.

use serde::{Deserialize, Serialize};

/// A client identity and how it authenticates at the token endpoint.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientIdentity {
    pub client_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    pub auth: AuthMethod,
    /// For `private_key_jwt`: what the assertion is signed with and addressed to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assertion: Option<Assertion>,
}

/// How a `private_key_jwt` client assertion is made: the key (read when signing, never stored
/// here), its algorithm, and the authorization server it is addressed to (`aud`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assertion {
    pub key_file: std::path::PathBuf,
    pub algorithm: String,
    pub audience: String,
}

impl std::fmt::Debug for ClientIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientIdentity")
            .field("client_id", &self.client_id)
            .field("auth", &self.auth)
            .finish_non_exhaustive()
    }
}

/// Token endpoint client authentication (RFC 6749 §2.3, RFC 7591 §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuthMethod {
    None,
    ClientSecretBasic,
    ClientSecretPost,
    PrivateKeyJwt,
}

impl AuthMethod {
    pub(super) fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::ClientSecretBasic => "client_secret_basic",
            Self::ClientSecretPost => "client_secret_post",
            Self::PrivateKeyJwt => "private_key_jwt",
        }
    }

    pub(super) fn parse(name: &str) -> Option<Self> {
        [Self::None, Self::ClientSecretBasic, Self::ClientSecretPost]
            .into_iter()
            .find(|m| m.name() == name)
    }
}
