//! Sealed tokens that mcpmux alone can read: a `requestState` (multi-round-trip requests) that
//! hosts carry, and each principal's upstream tokens at rest (`oauth::vault`), are AEAD-sealed (ChaCha20-Poly1305, a random nonce each) with what it is bound to —
//! who may present it, for which upstream and name — as associated data, and an expiry inside.
//! A token presented by another principal, for another target, altered, or late does not open.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_lc_rs::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// Why a token did not open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Unsealed {
    #[error("it was not issued by this mcpmux for this request (altered, or another host's)")]
    Forged,
    #[error("it has expired")]
    Expired,
}

/// Seals and opens tokens under one key (the daemon's, made when it starts).
pub struct Sealer {
    key: LessSafeKey,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sealer")
    }
}

impl Sealer {
    /// A sealer with a fresh random key.
    pub fn random() -> Self {
        let bytes: [u8; 32] = rand::random();
        Self::with_key(&bytes)
    }

    /// A sealer with the key `bytes` (kept by its owner: a key file, say).
    pub fn with_key(bytes: &[u8; 32]) -> Self {
        // The key length is the algorithm's: constructing it cannot fail.
        let key = UnboundKey::new(&CHACHA20_POLY1305, bytes)
            .map(LessSafeKey::new)
            .unwrap_or_else(|_| unreachable!("a 32-byte ChaCha20-Poly1305 key"));
        Self { key }
    }

    /// `payload`, sealed for `binding`, readable until `ttl` from now.
    pub fn seal(&self, payload: &[u8], binding: &[u8], ttl: Duration) -> String {
        let expires = now_secs().saturating_add(ttl.as_secs());
        let mut sealed = Vec::with_capacity(NONCE_LEN + 8 + payload.len() + 16);
        let nonce: [u8; NONCE_LEN] = rand::random();
        sealed.extend_from_slice(&nonce);
        let mut in_out = Vec::with_capacity(8 + payload.len() + 16);
        in_out.extend_from_slice(&expires.to_be_bytes());
        in_out.extend_from_slice(payload);
        let nonce = Nonce::assume_unique_for_key(nonce);
        // Sealing into a Vec only fails if the Vec cannot grow.
        let _ = self
            .key
            .seal_in_place_append_tag(nonce, Aad::from(binding), &mut in_out);
        sealed.extend_from_slice(&in_out);
        URL_SAFE_NO_PAD.encode(sealed)
    }

    /// The payload of `token`, if it opens for `binding` and has not expired.
    pub fn open(&self, token: &str, binding: &[u8]) -> Result<Vec<u8>, Unsealed> {
        let bytes = URL_SAFE_NO_PAD
            .decode(token)
            .map_err(|_| Unsealed::Forged)?;
        if bytes.len() < NONCE_LEN + 8 + 16 {
            return Err(Unsealed::Forged);
        }
        let (nonce, sealed) = bytes.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| Unsealed::Forged)?;
        let mut in_out = sealed.to_vec();
        let plain = self
            .key
            .open_in_place(nonce, Aad::from(binding), &mut in_out)
            .map_err(|_| Unsealed::Forged)?;
        let (expires, payload) = plain.split_at(8);
        let mut at = [0u8; 8];
        at.copy_from_slice(expires);
        if u64::from_be_bytes(at) < now_secs() {
            return Err(Unsealed::Expired);
        }
        Ok(payload.to_vec())
    }
}

/// Seals with the newest of several keys and opens with any of them, so replicas sharing the ring
/// open each other's tokens and a key can be rotated in two phases (added everywhere first, then
/// made the newest). A token starts with its key's id (two hex digits).
pub struct SealRing {
    /// `(id, sealer)`, the newest last; never empty.
    keys: Vec<(u8, Sealer)>,
}

impl std::fmt::Debug for SealRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: Vec<u8> = self.keys.iter().map(|(id, _)| *id).collect();
        f.debug_struct("SealRing").field("ids", &ids).finish()
    }
}

impl SealRing {
    /// A ring of `keys` (`(id, key)`, the newest last); `None` when it holds none.
    pub fn new(keys: &[(u8, [u8; 32])]) -> Option<Self> {
        let keys: Vec<(u8, Sealer)> = (keys.iter())
            .map(|(id, key)| (*id, Sealer::with_key(key)))
            .collect();
        (!keys.is_empty()).then_some(Self { keys })
    }

    /// A ring of one fresh random key.
    #[cfg(test)]
    pub fn random() -> Self {
        Self {
            keys: vec![(1, Sealer::random())],
        }
    }

    /// `payload`, sealed with the newest key for `binding`, readable until `ttl` from now.
    pub fn seal(&self, payload: &[u8], binding: &[u8], ttl: Duration) -> String {
        let (id, sealer) = self
            .keys
            .last()
            .unwrap_or_else(|| unreachable!("a ring has a key"));
        format!("{id:02x}{}", sealer.seal(payload, binding, ttl))
    }

    /// The payload of `token`, if a key of the ring opens it for `binding` in time.
    pub fn open(&self, token: &str, binding: &[u8]) -> Result<Vec<u8>, Unsealed> {
        let (id, sealed) = (token.get(..2).zip(token.get(2..))).ok_or(Unsealed::Forged)?;
        let id = u8::from_str_radix(id, 16).map_err(|_| Unsealed::Forged)?;
        let (_, sealer) = (self.keys.iter())
            .find(|(k, _)| *k == id)
            .ok_or(Unsealed::Forged)?;
        sealer.open(sealed, binding)
    }
}

/// Seconds since the Unix epoch (0 if the clock is before it).
pub fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_ring_rotates_in_two_phases_without_refusing_a_token() {
        let (old, new) = ((1, [1u8; 32]), (2, [2u8; 32]));
        let ttl = Duration::from_secs(60);
        let before = SealRing::new(&[old]).unwrap();
        // Phase 1: every replica learns the new key, which only opens.
        let learning = SealRing::new(&[new, old]).unwrap();
        // Phase 2: the new key seals; the old one still opens.
        let rotated = SealRing::new(&[old, new]).unwrap();
        let after = SealRing::new(&[new]).unwrap();
        let t_before = before.seal(b"p", b"b", ttl);
        let t_learning = learning.seal(b"p", b"b", ttl);
        let t_rotated = rotated.seal(b"p", b"b", ttl);
        assert!(t_before.starts_with("01") && t_learning.starts_with("01"));
        assert!(t_rotated.starts_with("02"));
        // During phase 1, tokens of not-yet-restarted replicas and of restarted ones open on both.
        for ring in [&before, &learning] {
            assert_eq!(ring.open(&t_before, b"b").unwrap(), b"p");
            assert_eq!(ring.open(&t_learning, b"b").unwrap(), b"p");
        }
        // During phase 2, every replica opens what every other seals.
        for ring in [&learning, &rotated] {
            assert_eq!(ring.open(&t_rotated, b"b").unwrap(), b"p");
            assert_eq!(ring.open(&t_learning, b"b").unwrap(), b"p");
        }
        // Once the old key is gone, what it sealed no longer opens.
        assert_eq!(after.open(&t_before, b"b"), Err(Unsealed::Forged));
        assert_eq!(after.open(&t_rotated, b"b").unwrap(), b"p");
        assert_eq!(after.open("zz", b"b"), Err(Unsealed::Forged));
        assert_eq!(after.open("", b"b"), Err(Unsealed::Forged));
        assert!(SealRing::new(&[]).is_none());
    }

    #[test]
    fn a_token_opens_only_for_its_binding_unaltered_and_in_time() {
        let sealer = Sealer::random();
        let token = sealer.seal(b"park 7", b"alice|fs|read", Duration::from_secs(60));
        assert!(token.is_ascii() && !token.contains(['+', '/', '=']));
        assert_eq!(sealer.open(&token, b"alice|fs|read").unwrap(), b"park 7");
        assert_eq!(
            sealer.open(&token, b"mallory|fs|read"),
            Err(Unsealed::Forged)
        );
        let mut altered = token.clone().into_bytes();
        let last = altered.len() - 2;
        altered[last] = if altered[last] == b'A' { b'B' } else { b'A' };
        let altered = String::from_utf8(altered).unwrap();
        assert_eq!(
            sealer.open(&altered, b"alice|fs|read"),
            Err(Unsealed::Forged)
        );
        assert_eq!(
            sealer.open("short", b"alice|fs|read"),
            Err(Unsealed::Forged)
        );
        assert_eq!(
            Sealer::random().open(&token, b"alice|fs|read"),
            Err(Unsealed::Forged),
            "another daemon's key"
        );
        let stale = sealer.seal(b"x", b"b", Duration::ZERO);
        // Expiry is in whole seconds: a token sealed with no time left is late one second on.
        std::thread::sleep(Duration::from_millis(1100));
        assert_eq!(sealer.open(&stale, b"b"), Err(Unsealed::Expired));
    }
}
