//! Opaque, versioned, integrity-protected cursors for aggregate listings (DESIGN rule 3).
//!
//! A handshake session's cursor names a catalog generation, a view of it (the whole catalog or a
//! profile's), a listing and a position: paging stays on one snapshot while upstreams change.
//! A stateless (2026-07-28) host's cursor is a keyset cursor: it names the listing, the view (by
//! its profile's name) and the last exposed name of the page it continues, so it is good in any
//! generation and across restarts. Both are HMAC-SHA256-signed and base64url-encoded, so a host
//! can neither forge nor edit one; keyset cursors carry the id of their key, from a key ring
//! ([`KeyRing`]: the newest key signs, every key still in the ring verifies), so keys can be
//! rotated without refusing every cursor out at once.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::ListKind;

const VERSION: u8 = 2;
const BODY_LEN: usize = 1 + 1 + 8 + 2 + 4;
const MAC_LEN: usize = 16;
/// A keyset cursor: version, listing, key id, view, the last name's length, the last name.
const KEYSET: u8 = 3;
const KEYSET_HEAD: usize = 1 + 1 + 1 + 8 + 2;
/// Longest name a keyset cursor carries (longer exposed names do not exist: names are within
/// the naming budget, URIs within reason).
const KEYSET_NAME_MAX: usize = 4096;

/// Cursor keys: `(id, key)`, the newest last. Kept in `<state dir>/cursor.keys`, one key per
/// line as `<id> <64 hex digits>` (`#` starts a comment); the daemon makes the file with one key
/// at its first start.
#[derive(Clone)]
pub struct KeyRing(Vec<(u8, [u8; 32])>);

/// Why a key ring's text is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyRingError {
    #[error("line {line}: {why} (write `<id 0-255> <64 hex digits>`)")]
    Line { line: usize, why: &'static str },
    #[error("it holds no key")]
    Empty,
}

impl std::fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: Vec<u8> = self.0.iter().map(|(id, _)| *id).collect();
        f.debug_struct("KeyRing").field("ids", &ids).finish()
    }
}

impl KeyRing {
    /// One fresh random key.
    #[cfg(test)]
    pub fn random() -> Self {
        Self(vec![(1, rand::random())])
    }

    /// The ring written as `text`; the error names the line that is wrong.
    pub fn parse(text: &str) -> Result<Self, KeyRingError> {
        let mut keys = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or_default().trim();
            if line.is_empty() {
                continue;
            }
            let wrong = |why: &'static str| KeyRingError::Line { line: n + 1, why };
            let (id, hex) = line
                .split_once(char::is_whitespace)
                .ok_or_else(|| wrong("no key"))?;
            let id: u8 = id
                .parse()
                .map_err(|_| wrong("the id is not a number 0-255"))?;
            let hex = hex.trim();
            if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(wrong("the key is not 64 hex digits"));
            }
            let mut key = [0u8; 32];
            for (i, byte) in key.iter_mut().enumerate() {
                *byte =
                    u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| wrong("bad hex"))?;
            }
            if keys.iter().any(|(seen, _)| *seen == id) {
                return Err(wrong("the id is used twice"));
            }
            keys.push((id, key));
        }
        if keys.is_empty() {
            return Err(KeyRingError::Empty);
        }
        Ok(Self(keys))
    }

    /// The key that signs.
    fn newest(&self) -> (u8, &[u8; 32]) {
        let (id, key) = self
            .0
            .last()
            .unwrap_or_else(|| unreachable!("a ring has a key"));
        (*id, key)
    }

    /// The ring's keys, each turned into a key for `purpose` (HKDF-SHA256): what else is keyed
    /// from the one shared key file (sealed states, forwarded requests) never uses a cursor key
    /// itself, and rotates with it.
    pub fn derived(&self, purpose: &str) -> Vec<(u8, [u8; 32])> {
        use aws_lc_rs::hkdf::{HKDF_SHA256, Salt};
        let salt = Salt::new(HKDF_SHA256, b"mcpmux key ring");
        let info = [purpose.as_bytes()];
        (self.0.iter())
            .map(|(id, key)| {
                let mut derived = [0u8; 32];
                // 32 bytes is within what HKDF-SHA256 expands to: neither step can fail.
                let _ = salt
                    .extract(key)
                    .expand(&info, HKDF_SHA256)
                    .and_then(|okm| okm.fill(&mut derived));
                (*id, derived)
            })
            .collect()
    }

    fn get(&self, id: u8) -> Option<&[u8; 32]> {
        self.0.iter().find(|(k, _)| *k == id).map(|(_, key)| key)
    }
}

/// The first line of a new ring: key 1.
pub fn new_ring_text(hex_key: &str) -> String {
    format!(
        "# mcpmux cursor keys: `<id> <key>`; the last line signs, every line verifies.\n1 {hex_key}\n"
    )
}

/// Where a listing continues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    pub generation: u64,
    /// The view it pages (0: the whole catalog; otherwise a profile's).
    pub view: u16,
    pub offset: u32,
}

/// Why a cursor was refused; each becomes JSON-RPC -32602.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CursorError {
    #[error("invalid cursor: not a cursor issued by this server")]
    Malformed,
    #[error(
        "invalid cursor: integrity check failed (forged, edited, or from an earlier run of the server)"
    )]
    Forged,
    #[error("invalid cursor: it belongs to another listing")]
    WrongListing,
    #[error("invalid cursor: it belongs to another profile's listing")]
    WrongView,
    #[error(
        "invalid cursor: it belongs to the other protocol era (a session's cursor for a stateless request, or the other way)"
    )]
    WrongEra,
}

/// Signs and checks cursors with the keys of a ring.
#[derive(Clone)]
pub struct CursorCodec {
    keys: KeyRing,
}

impl std::fmt::Debug for CursorCodec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CursorCodec { .. }")
    }
}

impl CursorCodec {
    /// A codec with a fresh random key.
    #[cfg(test)]
    pub fn random() -> Self {
        Self::new(KeyRing::random())
    }

    pub fn new(keys: KeyRing) -> Self {
        Self { keys }
    }

    /// A keyset cursor continuing listing `kind` of the view of `profile` after `last`.
    pub fn encode_after(&self, kind: ListKind, profile: Option<&str>, last: &str) -> String {
        let (id, key) = self.keys.newest();
        let name = &last.as_bytes()[..last.len().min(KEYSET_NAME_MAX)];
        let mut buf = Vec::with_capacity(KEYSET_HEAD + name.len() + MAC_LEN);
        buf.extend_from_slice(&[KEYSET, kind.tag(), id]);
        buf.extend_from_slice(&view_of(profile));
        buf.extend_from_slice(&u16::try_from(name.len()).unwrap_or(u16::MAX).to_be_bytes());
        buf.extend_from_slice(name);
        let mac = mac(key, &buf);
        buf.extend_from_slice(&mac);
        URL_SAFE_NO_PAD.encode(buf)
    }

    /// The last name a keyset `cursor` names, if it is one of ours for listing `kind` of the
    /// view of `profile`.
    pub fn decode_after(
        &self,
        kind: ListKind,
        profile: Option<&str>,
        cursor: &str,
    ) -> Result<String, CursorError> {
        let bytes = URL_SAFE_NO_PAD
            .decode(cursor)
            .map_err(|_| CursorError::Malformed)?;
        match bytes.first() {
            Some(&KEYSET) => {}
            Some(&VERSION) => return Err(CursorError::WrongEra),
            _ => return Err(CursorError::Malformed),
        }
        if bytes.len() < KEYSET_HEAD + MAC_LEN {
            return Err(CursorError::Malformed);
        }
        let (body, tag) = bytes.split_at(bytes.len() - MAC_LEN);
        let key = self.keys.get(body[2]).ok_or(CursorError::Forged)?;
        let mut check = hmac(key);
        check.update(body);
        check
            .verify_truncated_left(tag)
            .map_err(|_| CursorError::Forged)?;
        if body[1] != kind.tag() {
            return Err(CursorError::WrongListing);
        }
        if body[3..11] != view_of(profile) {
            return Err(CursorError::WrongView);
        }
        let len = usize::from(u16::from_be_bytes([body[11], body[12]]));
        let name = body.get(KEYSET_HEAD..).filter(|n| n.len() == len);
        let name = name.ok_or(CursorError::Malformed)?;
        String::from_utf8(name.to_vec()).map_err(|_| CursorError::Malformed)
    }

    pub fn encode(&self, kind: ListKind, at: Position) -> String {
        let mut buf = [0u8; BODY_LEN + MAC_LEN];
        buf[0] = VERSION;
        buf[1] = kind.tag();
        buf[2..10].copy_from_slice(&at.generation.to_be_bytes());
        buf[10..12].copy_from_slice(&at.view.to_be_bytes());
        buf[12..16].copy_from_slice(&at.offset.to_be_bytes());
        let mac = self.mac(&buf[..BODY_LEN]);
        buf[BODY_LEN..].copy_from_slice(&mac);
        URL_SAFE_NO_PAD.encode(buf)
    }

    /// The position `cursor` names, if it is one of ours for listing `kind` of view `view`.
    pub fn decode(&self, kind: ListKind, view: u16, cursor: &str) -> Result<Position, CursorError> {
        let bytes = URL_SAFE_NO_PAD
            .decode(cursor)
            .map_err(|_| CursorError::Malformed)?;
        if bytes.first() == Some(&KEYSET) {
            return Err(CursorError::WrongEra);
        }
        if bytes.len() != BODY_LEN + MAC_LEN || bytes[0] != VERSION {
            return Err(CursorError::Malformed);
        }
        let (body, mac) = bytes.split_at(BODY_LEN);
        let mut check = self.hmac();
        check.update(body);
        check
            .verify_truncated_left(mac)
            .map_err(|_| CursorError::Forged)?;
        if body[1] != kind.tag() {
            return Err(CursorError::WrongListing);
        }
        let generation =
            u64::from_be_bytes(body[2..10].try_into().map_err(|_| CursorError::Malformed)?);
        let at_view = u16::from_be_bytes(
            body[10..12]
                .try_into()
                .map_err(|_| CursorError::Malformed)?,
        );
        if at_view != view {
            return Err(CursorError::WrongView);
        }
        let offset = u32::from_be_bytes(
            body[12..16]
                .try_into()
                .map_err(|_| CursorError::Malformed)?,
        );
        Ok(Position {
            generation,
            view,
            offset,
        })
    }

    fn hmac(&self) -> Hmac<Sha256> {
        hmac(self.keys.newest().1)
    }

    fn mac(&self, body: &[u8]) -> [u8; MAC_LEN] {
        mac(self.keys.newest().1, body)
    }
}

fn hmac(key: &[u8; 32]) -> Hmac<Sha256> {
    <Hmac<Sha256> as Mac>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("HMAC takes any key length"))
}

fn mac(key: &[u8; 32], body: &[u8]) -> [u8; MAC_LEN] {
    let mut h = hmac(key);
    h.update(body);
    let full = h.finalize().into_bytes();
    let mut out = [0u8; MAC_LEN];
    out.copy_from_slice(&full[..MAC_LEN]);
    out
}

/// A view, as a keyset cursor names it: 8 bytes of the SHA-256 of its profile's name (of the
/// empty name for the whole catalog), the same in every generation and every run.
fn view_of(profile: Option<&str>) -> [u8; 8] {
    use sha2::Digest;
    let digest = Sha256::digest(profile.unwrap_or("").as_bytes());
    let mut view = [0u8; 8];
    view.copy_from_slice(&digest[..8]);
    view
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn keyset_cursors_name_the_last_item_and_open_under_any_key_of_the_ring() {
        let hex = |b: u8| format!("{b:02x}").repeat(32);
        let old = KeyRing::parse(&format!("# a comment\n7 {}\n", hex(7))).unwrap();
        let rotated = KeyRing::parse(&format!("7 {}\n8 {}  # newer\n", hex(7), hex(8))).unwrap();
        let (old, rotated) = (CursorCodec::new(old), CursorCodec::new(rotated));
        let cursor = old.encode_after(ListKind::Tools, Some("dev"), "alpha__echo");
        assert_eq!(
            rotated
                .decode_after(ListKind::Tools, Some("dev"), &cursor)
                .as_deref(),
            Ok("alpha__echo"),
            "a key still in the ring verifies"
        );
        let newer = rotated.encode_after(ListKind::Tools, None, "z");
        assert_eq!(
            old.decode_after(ListKind::Tools, None, &newer),
            Err(CursorError::Forged)
        );
        assert_eq!(
            rotated.decode_after(ListKind::Tools, None, &cursor),
            Err(CursorError::WrongView)
        );
        assert_eq!(
            rotated.decode_after(ListKind::Prompts, Some("dev"), &cursor),
            Err(CursorError::WrongListing)
        );
        let session = old.encode(
            ListKind::Tools,
            Position {
                generation: 1,
                view: 0,
                offset: 2,
            },
        );
        assert_eq!(
            old.decode_after(ListKind::Tools, None, &session),
            Err(CursorError::WrongEra)
        );
        assert_eq!(
            old.decode(ListKind::Tools, 0, &cursor),
            Err(CursorError::WrongEra)
        );
        let mut bytes = URL_SAFE_NO_PAD.decode(&cursor).unwrap();
        let at = bytes.len() - MAC_LEN - 1;
        bytes[at] ^= 1;
        let edited = URL_SAFE_NO_PAD.encode(&bytes);
        assert_eq!(
            old.decode_after(ListKind::Tools, Some("dev"), &edited),
            Err(CursorError::Forged)
        );
        for bad in [
            "",
            "1",
            "1 abc",
            "x 00",
            &format!("1 {}\n1 {}", hex(1), hex(2)),
        ] {
            assert!(KeyRing::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn round_trips_and_refuses_tampering() {
        let codec = CursorCodec::random();
        let at = Position {
            generation: 7,
            view: 2,
            offset: 250,
        };
        let c = codec.encode(ListKind::Tools, at);
        assert!(!c.is_empty());
        assert_eq!(codec.decode(ListKind::Tools, 2, &c), Ok(at));
        assert_eq!(
            codec.decode(ListKind::Prompts, 2, &c),
            Err(CursorError::WrongListing)
        );
        assert_eq!(
            codec.decode(ListKind::Tools, 0, &c),
            Err(CursorError::WrongView)
        );
        assert_eq!(
            CursorCodec::random().decode(ListKind::Tools, 2, &c),
            Err(CursorError::Forged)
        );
        assert_eq!(
            codec.decode(ListKind::Tools, 2, "garbage!"),
            Err(CursorError::Malformed)
        );
        assert_eq!(
            codec.decode(ListKind::Tools, 2, ""),
            Err(CursorError::Malformed)
        );
        let mut bytes = URL_SAFE_NO_PAD.decode(&c).unwrap_or_default();
        bytes[13] ^= 1;
        assert_eq!(
            codec.decode(ListKind::Tools, 2, &URL_SAFE_NO_PAD.encode(&bytes)),
            Err(CursorError::Forged)
        );
    }
}

#[cfg(test)]
mod properties {
    use proptest::prelude::*;

    use super::*;

    fn kind() -> impl Strategy<Value = ListKind> {
        proptest::sample::select(ListKind::ALL.to_vec())
    }

    proptest! {
        #[test]
        fn every_position_round_trips(kind in kind(), generation: u64, view: u16, offset: u32) {
            let codec = CursorCodec::random();
            let at = Position { generation, view, offset };
            let cursor = codec.encode(kind, at);
            prop_assert!(!cursor.is_empty());
            prop_assert_eq!(codec.decode(kind, view, &cursor), Ok(at));
        }

        #[test]
        fn any_text_is_refused_without_a_panic(text in ".{0,80}", kind in kind(), view: u16) {
            // A random string is a forgery with overwhelming likelihood; it must never decode.
            prop_assert!(CursorCodec::random().decode(kind, view, &text).is_err());
        }

        #[test]
        fn a_changed_character_is_refused(
            kind in kind(), generation: u64, view: u16, offset: u32,
            at in 0usize..43, with in proptest::sample::select(
                b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".to_vec()),
        ) {
            let codec = CursorCodec::random();
            let cursor = codec.encode(kind, Position { generation, view, offset });
            let mut edited = cursor.clone().into_bytes();
            let at = at % edited.len();
            prop_assume!(edited[at] != with);
            edited[at] = with;
            let edited = String::from_utf8(edited).unwrap_or_default();
            prop_assert!(codec.decode(kind, view, &edited).is_err(), "{} → {}", cursor, edited);
        }

        #[test]
        fn another_listing_or_view_is_refused(
            kind in kind(), other in kind(), generation: u64, view: u16, offset: u32, other_view: u16,
        ) {
            let codec = CursorCodec::random();
            let cursor = codec.encode(kind, Position { generation, view, offset });
            if other != kind {
                prop_assert_eq!(codec.decode(other, view, &cursor), Err(CursorError::WrongListing));
            }
            if other_view != view {
                prop_assert_eq!(codec.decode(kind, other_view, &cursor), Err(CursorError::WrongView));
            }
        }
    }
}
