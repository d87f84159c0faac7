//! DPoP (RFC 9449): tokens bound to a key mcpmux holds, so a stolen access token is of no use
//! without it. Used when the upstream's authorization server advertises ES256 in
//! `dpop_signing_alg_values_supported`: mcpmux makes a P-256 key for the sign-in, proves it at
//! the token endpoint, keeps it with the tokens (the token file is 0600, a principal's sealed),
//! and sends each request to the upstream with `Authorization: DPoP <token>` and a fresh proof
//! (its method, URL, the token's hash, the server's nonce when it asked for one).

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, EncodingKey, Header, jwk::Jwk};
use sha2::Digest;

use super::OAuthError;

/// The one algorithm mcpmux signs proofs with.
pub const ALGORITHM: &str = "ES256";

/// A DPoP key: its PKCS#8 form (kept with the tokens) and what signs with it.
#[derive(Clone)]
pub struct DpopKey {
    pkcs8: Vec<u8>,
    jwk: Jwk,
}

impl std::fmt::Debug for DpopKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DpopKey(..)")
    }
}

impl DpopKey {
    /// A new P-256 key.
    pub fn generate() -> Result<Self, OAuthError> {
        use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair};
        let rng = aws_lc_rs::rand::SystemRandom::new();
        let document = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .map_err(|_| OAuthError::new("cannot make a DPoP key"))?;
        Self::of(document.as_ref().to_vec())
    }

    fn of(pkcs8: Vec<u8>) -> Result<Self, OAuthError> {
        let key = EncodingKey::from_ec_der(&pkcs8);
        let mut jwk = Jwk::from_encoding_key(&key, Algorithm::ES256)
            .map_err(|e| OAuthError::new(format!("cannot read the DPoP key: {e}")))?;
        jwk.common.key_algorithm = None;
        Ok(Self { pkcs8, jwk })
    }

    /// The key as the token file keeps it.
    pub fn to_text(&self) -> String {
        URL_SAFE_NO_PAD.encode(&self.pkcs8)
    }

    /// The key a token file kept.
    pub fn from_text(text: &str) -> Result<Self, OAuthError> {
        let pkcs8 = URL_SAFE_NO_PAD
            .decode(text)
            .map_err(|_| OAuthError::new("the stored DPoP key is not base64"))?;
        Self::of(pkcs8)
    }

    /// A proof for a `method` request to `url` (its query and fragment left out), with the
    /// access token's hash (`ath`) for a resource request and the server's `nonce` if it gave one.
    pub fn proof(
        &self,
        method: &str,
        url: &url::Url,
        access_token: Option<&str>,
        nonce: Option<&str>,
    ) -> Result<String, OAuthError> {
        let mut htu = url.clone();
        htu.set_query(None);
        htu.set_fragment(None);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut claims = serde_json::json!({
            "jti": URL_SAFE_NO_PAD.encode(rand::random::<[u8; 16]>()),
            "htm": method,
            "htu": htu.as_str(),
            "iat": now,
        });
        if let Some(token) = access_token {
            claims["ath"] = URL_SAFE_NO_PAD
                .encode(sha2::Sha256::digest(token.as_bytes()))
                .into();
        }
        if let Some(nonce) = nonce {
            claims["nonce"] = nonce.into();
        }
        let header = Header {
            typ: Some("dpop+jwt".into()),
            jwk: Some(self.jwk.clone()),
            ..Header::new(Algorithm::ES256)
        };
        jsonwebtoken::encode(&header, &claims, &EncodingKey::from_ec_der(&self.pkcs8))
            .map_err(|e| OAuthError::new(format!("cannot sign a DPoP proof: {e}")))
    }
}

/// The nonce a response asks the next proof to carry (`DPoP-Nonce`), if it asks.
pub fn nonce_of(headers: &reqwest::header::HeaderMap) -> Option<String> {
    let nonce = headers.get("dpop-nonce")?.to_str().ok()?;
    // RFC 9449 §8.1: a nonce is visible ASCII; anything else is not one.
    (!nonce.is_empty() && nonce.bytes().all(|b| (0x21..=0x7e).contains(&b)))
        .then(|| nonce.to_owned())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_proof_names_its_request_and_token_and_verifies_with_its_public_key() {
        let key = DpopKey::generate().unwrap();
        let again = DpopKey::from_text(&key.to_text()).unwrap();
        let url = url::Url::parse("https://rs.example/mcp?x=1#f").unwrap();
        let proof = again.proof("POST", &url, Some("tok"), Some("n-1")).unwrap();
        let header = jsonwebtoken::decode_header(&proof).unwrap();
        assert_eq!(header.typ.as_deref(), Some("dpop+jwt"));
        let jwk = header.jwk.unwrap();
        let printed = serde_json::to_string(&jwk).unwrap();
        assert!(!printed.contains("\"d\""), "a private part in {printed}");
        let decoding = jsonwebtoken::DecodingKey::from_jwk(&jwk).unwrap();
        let mut validation = jsonwebtoken::Validation::new(Algorithm::ES256);
        validation.required_spec_claims.clear();
        validation.validate_exp = false;
        let claims = jsonwebtoken::decode::<serde_json::Value>(&proof, &decoding, &validation)
            .unwrap()
            .claims;
        assert_eq!(claims["htm"], "POST");
        assert_eq!(claims["htu"], "https://rs.example/mcp");
        assert_eq!(claims["nonce"], "n-1");
        let ath = URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(b"tok"));
        assert_eq!(claims["ath"], ath.as_str());
        let other = key.proof("POST", &url, None, None).unwrap();
        let other = jsonwebtoken::decode::<serde_json::Value>(&other, &decoding, &validation)
            .unwrap()
            .claims;
        assert_ne!(other["jti"], claims["jti"], "each proof is fresh");
        assert!(other.get("ath").is_none());
    }
}
