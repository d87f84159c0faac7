//! Opaque, versioned, integrity-protected cursors for aggregate listings (DESIGN rule 3).
//!
//! A cursor names a catalog generation, a view of it (the whole catalog or a profile's), a
//! listing and a position. It is HMAC-SHA256-signed with a
//! key drawn at process start, so a host can neither forge nor edit one, and base64url-encoded.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::ListKind;

const VERSION: u8 = 2;
const BODY_LEN: usize = 1 + 1 + 8 + 2 + 4;
const MAC_LEN: usize = 16;

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
}

/// Signs and checks cursors with one per-process key.
#[derive(Clone)]
pub struct CursorCodec {
    key: [u8; 32],
}

impl std::fmt::Debug for CursorCodec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CursorCodec { .. }")
    }
}

impl CursorCodec {
    /// A codec with a fresh random key.
    pub fn random() -> Self {
        Self {
            key: rand::random(),
        }
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
        <Hmac<Sha256> as Mac>::new_from_slice(&self.key)
            .unwrap_or_else(|_| unreachable!("HMAC takes any key length"))
    }

    fn mac(&self, body: &[u8]) -> [u8; MAC_LEN] {
        let mut h = self.hmac();
        h.update(body);
        let full = h.finalize().into_bytes();
        let mut out = [0u8; MAC_LEN];
        out.copy_from_slice(&full[..MAC_LEN]);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
