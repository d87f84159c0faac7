//! The canonical form of a URI ([`canonical`]), so that a view decides on what a URI means, not
//! on how it is spelled: `file:///tmp/../etc/passwd`, `FILE:///etc/passwd` and `file:///%65tc/passwd`
//! are one resource. This is RFC 3986 §6.2.2's syntax-based normalization — the case of scheme and
//! host, percent-decoding of unreserved characters (and upper-case hex in the rest), and removal of
//! dot segments (§5.2.4) — and nothing more: every other byte stays as it was (but a stray `%`,
//! not valid in a URI, is written `%25`, so the form stays canonical). The `url` crate is
//! not used because it keeps `%65` encoded and treats non-special schemes (`test:`, `fs+file:`)
//! differently from special ones.

use std::borrow::Cow;

/// The canonical form of `uri` (RFC 3986 §6.2.2). Borrowed when `uri` is canonical already, which
/// is the common case. Never fails: a string that is not a URI is normalized as far as it has the
/// parts of one (a relative reference is treated as one). Idempotent.
pub fn canonical(uri: &str) -> Cow<'_, str> {
    let parts = Parts::parse(uri);
    if parts.is_canonical() {
        return Cow::Borrowed(uri);
    }
    Cow::Owned(parts.normalized())
}

/// A URI split as RFC 3986 §3 (Appendix B's regular expression) splits it.
struct Parts<'a> {
    scheme: Option<&'a str>,
    authority: Option<&'a str>,
    path: &'a str,
    /// With its `?`.
    query: &'a str,
    /// With its `#`.
    fragment: &'a str,
}

impl<'a> Parts<'a> {
    fn parse(uri: &'a str) -> Self {
        let (before_fragment, fragment) = match uri.find('#') {
            Some(at) => uri.split_at(at),
            None => (uri, ""),
        };
        let (before_query, query) = match before_fragment.find('?') {
            Some(at) => before_fragment.split_at(at),
            None => (before_fragment, ""),
        };
        let (scheme, rest) = match before_query.find(':') {
            Some(at) if is_scheme(&before_query[..at]) => {
                (Some(&before_query[..at]), &before_query[at + 1..])
            }
            _ => (None, before_query),
        };
        let (authority, path) = match rest.strip_prefix("//") {
            Some(rest) => {
                let end = rest.find('/').unwrap_or(rest.len());
                (Some(&rest[..end]), &rest[end..])
            }
            None => (None, rest),
        };
        Self {
            scheme,
            authority,
            path,
            query,
            fragment,
        }
    }

    fn is_canonical(&self) -> bool {
        let whole = [
            self.scheme.unwrap_or_default(),
            self.authority.unwrap_or_default(),
            self.path,
            self.query,
            self.fragment,
        ];
        !whole.iter().any(|part| part.contains('%'))
            && !self
                .scheme
                .is_some_and(|s| s.bytes().any(|b| b.is_ascii_uppercase()))
            && !self
                .authority
                .map(host)
                .is_some_and(|h| h.bytes().any(|b| b.is_ascii_uppercase()))
            && !has_dot_segment(self.path)
    }

    fn normalized(&self) -> String {
        let mut out =
            String::with_capacity(self.path.len() + self.query.len() + self.fragment.len() + 16);
        if let Some(scheme) = self.scheme {
            out.push_str(&scheme.to_ascii_lowercase());
            out.push(':');
        }
        if let Some(authority) = self.authority {
            out.push_str("//");
            let authority = percent_normalized(authority);
            let host_at = host_range(&authority);
            out.push_str(&authority[..host_at.0]);
            lowercase_outside_triplets(&authority[host_at.0..host_at.1], &mut out);
            out.push_str(&authority[host_at.1..]);
        }
        let decoded = percent_normalized(self.path);
        let path = remove_dot_segments(&decoded);
        // Keep the result one that parses back into the same parts: a path without an
        // authority must not start with `//`, and a relative one's first segment must not look
        // like a scheme (both as RFC 3986 §4.2 and the WHATWG URL standard do it).
        if self.authority.is_none() && path.starts_with("//") {
            out.push_str("/.");
        } else if self.scheme.is_none()
            && self.authority.is_none()
            && path.split('/').next().is_some_and(|s| s.contains(':'))
        {
            out.push_str("./");
        }
        out.push_str(&path);
        out.push_str(&percent_normalized(self.query));
        out.push_str(&percent_normalized(self.fragment));
        out
    }
}

/// `ALPHA *( ALPHA / DIGIT / "+" / "-" / "." )`.
fn is_scheme(text: &str) -> bool {
    let mut bytes = text.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_alphabetic())
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
}

/// The host of an authority (`userinfo@host:port`).
fn host(authority: &str) -> &str {
    let (start, end) = host_range(authority);
    &authority[start..end]
}

/// Where the host is in an authority: after the last `@`, before a `:port` (an IP literal's
/// colons are inside its brackets).
fn host_range(authority: &str) -> (usize, usize) {
    let start = authority.rfind('@').map_or(0, |at| at + 1);
    let rest = &authority[start..];
    let end = if rest.starts_with('[') {
        rest.find(']').map_or(rest.len(), |at| at + 1)
    } else {
        rest.rfind(':').unwrap_or(rest.len())
    };
    (start, start + end)
}

/// Appends `text` lower-cased, except the hex digits of its `%XX` triplets (upper case there).
fn lowercase_outside_triplets(text: &str, out: &mut String) {
    let mut hex_left = 0;
    for c in text.chars() {
        if hex_left > 0 {
            hex_left -= 1;
            out.push(c);
        } else {
            if c == '%' {
                hex_left = 2;
            }
            out.push(c.to_ascii_lowercase());
        }
    }
}

/// `ALPHA / DIGIT / "-" / "." / "_" / "~"`.
fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// `text` with `%XX` of unreserved characters decoded and the hex of every other triplet in
/// upper case; a `%` not followed by two hex digits (not valid in a URI) becomes `%25`, what it
/// means to whoever decodes it once — else decoding could make a new triplet of it (`%a%41` →
/// `%aA`), and the form would not be canonical.
fn percent_normalized(text: &str) -> Cow<'_, str> {
    if !text.contains('%') {
        return Cow::Borrowed(text);
    }
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let mut copied = 0;
    while i < bytes.len() {
        if bytes[i] != b'%' {
            i += 1;
            continue;
        }
        let triplet =
            (bytes.get(i + 1).copied().and_then(hex)).zip(bytes.get(i + 2).copied().and_then(hex));
        out.push_str(&text[copied..i]);
        let Some((high, low)) = triplet else {
            out.push_str("%25");
            i += 1;
            copied = i;
            continue;
        };
        let decoded = high * 16 + low;
        if is_unreserved(decoded) {
            out.push(char::from(decoded));
        } else {
            out.push('%');
            out.push(char::from(bytes[i + 1].to_ascii_uppercase()));
            out.push(char::from(bytes[i + 2].to_ascii_uppercase()));
        }
        i += 3;
        copied = i;
    }
    out.push_str(&text[copied..]);
    Cow::Owned(out)
}

/// Whether `path` has a `.` or `..` segment.
fn has_dot_segment(path: &str) -> bool {
    path.split('/').any(|s| s == "." || s == "..")
}

/// RFC 3986 §5.2.4, `remove_dot_segments`.
pub fn remove_dot_segments(path: &str) -> Cow<'_, str> {
    if !has_dot_segment(path) {
        return Cow::Borrowed(path);
    }
    let mut input = path;
    let mut output = String::with_capacity(path.len());
    while !input.is_empty() {
        if let Some(rest) = input.strip_prefix("../") {
            // A.
            input = rest;
        } else if let Some(rest) = input.strip_prefix("./") {
            input = rest;
        } else if input.starts_with("/./") {
            // B: "/./" becomes "/".
            input = &input[2..];
        } else if input == "/." {
            input = "/";
            // C needs an owned "/"; handled by the loop as a one-byte input.
        } else if input.starts_with("/../") {
            input = &input[3..];
            truncate_last_segment(&mut output);
        } else if input == "/.." {
            input = "/";
            truncate_last_segment(&mut output);
        } else if input == "." || input == ".." {
            // D.
            input = "";
        } else {
            // E: the first segment, with its leading "/", moves to the output.
            let start = usize::from(input.starts_with('/'));
            let end = input[start..]
                .find('/')
                .map_or(input.len(), |at| at + start);
            output.push_str(&input[..end]);
            input = &input[end..];
        }
    }
    Cow::Owned(output)
}

/// Removes the output's last segment and its preceding `/` (if any).
fn truncate_last_segment(output: &mut String) {
    let at = output.rfind('/').unwrap_or(0);
    output.truncate(at);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 3986 §5.4's examples, resolved against `http://a/b/c/d;p?q`: the merged paths they
    /// make, with dot segments removed.
    #[test]
    fn dot_segments_are_removed_as_rfc_3986_resolves_its_examples() {
        let cases = [
            ("/b/c/./g", "/b/c/g"),
            ("/b/c/g/", "/b/c/g/"),
            ("/b/c/.", "/b/c/"),
            ("/b/c/./", "/b/c/"),
            ("/b/c/..", "/b/"),
            ("/b/c/../", "/b/"),
            ("/b/c/../g", "/b/g"),
            ("/b/c/../..", "/"),
            ("/b/c/../../", "/"),
            ("/b/c/../../g", "/g"),
            // Abnormal examples: more `..` than segments stay at the root.
            ("/b/c/../../../g", "/g"),
            ("/b/c/../../../../g", "/g"),
            ("/./g", "/g"),
            ("/../g", "/g"),
            ("/b/c/g.", "/b/c/g."),
            ("/b/c/.g", "/b/c/.g"),
            ("/b/c/g..", "/b/c/g.."),
            ("/b/c/..g", "/b/c/..g"),
            ("/b/c/./../g", "/b/g"),
            ("/b/c/./g/.", "/b/c/g/"),
            ("/b/c/g/./h", "/b/c/g/h"),
            ("/b/c/g/../h", "/b/c/h"),
            // §5.2.4's own walk-throughs.
            ("/a/b/c/./../../g", "/a/g"),
            ("mid/content=5/../6", "mid/6"),
        ];
        for (path, want) in cases {
            assert_eq!(remove_dot_segments(path), want, "{path}");
        }
    }

    #[test]
    fn scheme_and_host_case_unreserved_escapes_and_dot_segments_are_normalized() {
        let cases = [
            ("fs+file:///tmp/../etc/passwd", "fs+file:///etc/passwd"),
            ("fs+file:///tmp/./../etc/passwd", "fs+file:///etc/passwd"),
            ("fs+file:///tmp/%2E%2E/etc/passwd", "fs+file:///etc/passwd"),
            ("fs+file:///tmp/%2e%2e/etc/passwd", "fs+file:///etc/passwd"),
            ("fs+file:///%65tc/passwd", "fs+file:///etc/passwd"),
            ("fs+FILE:///etc/passwd", "fs+file:///etc/passwd"),
            ("HTTP://Example.COM:80/a", "http://example.com:80/a"),
            ("http://User@Example.com/", "http://User@example.com/"),
            ("http://[::1]:8080/x/./y", "http://[::1]:8080/x/y"),
            ("test://b/text/x/../2", "test://b/text/2"),
            ("test://b/%7euser/%2fslash%2F", "test://b/~user/%2Fslash%2F"),
            ("test://b/a?q=%2e%2e/../x#F%3a", "test://b/a?q=../../x#F%3A"),
            ("test://h%C3%A9llo/", "test://h%C3%A9llo/"),
            ("test://H%c3%a9/", "test://h%C3%A9/"),
            // Only a triplet of two hex digits is one; a stray `%` is escaped.
            ("test://b/100%/x%zz/%4", "test://b/100%25/x%25zz/%254"),
            ("test://b/%a%41", "test://b/%25aA"),
            ("urn:ietf:rfc:3986", "urn:ietf:rfc:3986"),
            ("x:/..//etc", "x:/.//etc"),
            ("./a:b", "./a:b"),
            ("", ""),
        ];
        for (uri, want) in cases {
            let once = canonical(uri);
            assert_eq!(once, want, "{uri}");
            assert_eq!(canonical(&once), want, "idempotent: {uri}");
        }
    }

    #[test]
    fn a_canonical_uri_is_borrowed() {
        for uri in ["fs+file:///etc/passwd", "test://b/item/42?x=1#y", "a+b"] {
            assert!(matches!(canonical(uri), Cow::Borrowed(_)), "{uri}");
        }
    }
}

#[cfg(test)]
mod properties {
    use proptest::prelude::*;

    use super::canonical;

    /// URI-ish text: the pieces that make canonicalizing hard, in any order.
    fn uri_ish() -> impl Strategy<Value = String> {
        let piece = proptest::sample::select(vec![
            "a", "Z", "0", ":", "/", "//", ".", "..", "%", "%2E", "%2e", "%41", "%7e", "%2F",
            "%zz", "?", "#", "@", "[", "]", "+", "-", "~", "é", "FILE:", "x:", "%3A", "%a",
        ]);
        proptest::collection::vec(piece, 0..14).prop_map(|p| p.concat())
    }

    /// `%XX` of one ASCII character.
    fn escaped(c: char) -> String {
        format!("%{:02X}", c as u32)
    }

    proptest! {
        #[test]
        fn canonicalizing_any_text_is_idempotent(text in prop_oneof![uri_ish(), "\\PC{0,60}"]) {
            let once = canonical(&text).into_owned();
            prop_assert_eq!(canonical(&once).into_owned(), once, "not idempotent on {:?}", text);
        }

        #[test]
        fn spellings_of_one_uri_are_one_canonical_uri(
            scheme in "[a-z][a-z0-9+]{0,6}",
            host in "[a-z0-9.-]{0,10}",
            segments in proptest::collection::vec("[a-z0-9_~-]{1,6}", 1..5),
            detour in "[a-z]{1,5}",
            at in any::<proptest::sample::Index>(),
        ) {
            let plain = format!("{scheme}://{host}/{}", segments.join("/"));
            // Upper case scheme and host.
            let shouted = format!("{}://{}/{}", scheme.to_uppercase(), host.to_uppercase(), segments.join("/"));
            // A detour through a sibling and back, and `.` segments.
            let mut detoured = segments.clone();
            detoured.insert(at.index(segments.len()), format!("{detour}/../."));
            let detoured = format!("{scheme}://{host}/{}", detoured.join("/"));
            // One unreserved character (of the first segment) percent-encoded.
            let first = &segments[0];
            let i = at.index(first.len());
            let encoded = format!(
                "{scheme}://{host}/{}{}{}{}",
                &first[..i],
                escaped(char::from(first.as_bytes()[i])),
                &first[i + 1..],
                segments[1..].iter().map(|s| format!("/{s}")).collect::<String>(),
            );
            let want = canonical(&plain).into_owned();
            for spelling in [&shouted, &detoured, &encoded] {
                prop_assert_eq!(canonical(spelling).into_owned(), want.clone(), "{}", spelling);
            }
        }
    }
}
