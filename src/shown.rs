//! How much of a string someone else chose mcpmux keeps where it records or logs it: a name, URI
//! or method a host sent, a name an upstream listed. Past a bound it keeps a prefix and a digest
//! of the whole — enough to read it and to tell two apart, never enough to flood a log, an index
//! or a store.

use std::borrow::Cow;

use sha2::{Digest, Sha256};

/// `text` as recorded: itself when it is at most `max` bytes, else its first bytes (cut at a
/// character boundary) and how long it was, with a digest of all of it, in at most about
/// `max` + 60 bytes.
pub fn cut(text: &str, max: usize) -> Cow<'_, str> {
    if text.len() <= max {
        return Cow::Borrowed(text);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let digest = Sha256::digest(text.as_bytes());
    let short: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    Cow::Owned(format!(
        "{}… ({} bytes, sha256 {short}…)",
        &text[..end],
        text.len()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_string_keeps_a_prefix_its_length_and_a_digest() {
        assert_eq!(cut("short", 10), "short");
        let long = "é".repeat(100);
        let shown = cut(&long, 11);
        assert!(shown.starts_with("ééééé…"), "{shown}");
        assert!(shown.contains("(200 bytes, sha256 "), "{shown}");
        assert!(shown.len() < 11 + 60);
        // Two long strings with the same prefix stay apart.
        let other = format!("{}x", "é".repeat(99));
        assert_ne!(cut(&other, 11), shown);
    }
}
