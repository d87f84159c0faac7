//! The namespacing codec (DESIGN rule 1).
//!
//! Tools and prompts are exposed as `{prefix}__{name}`; resources and templates as `{prefix}+{uri}`
//! (a valid RFC 3986 scheme, since a prefix is `[a-z][a-z0-9-]*`). Prefixes contain neither `_` nor
//! `+`, so both splits are unambiguous. Names that break the host-side budget are shortened
//! deterministically with a hash suffix; routing then goes through the catalog's exposed → original
//! map, never by splitting strings. The empty prefix ([`Prefix::none`], `prefix = ""`, allowed for
//! the only upstream a host sees) exposes names and URIs unchanged.

use std::borrow::Cow;
use std::fmt;

use regex::Regex;
use sha2::{Digest, Sha256};

/// The separator between prefix and tool/prompt name.
pub const SEPARATOR: &str = "__";
const MAX_PREFIX_LEN: usize = 32;
/// `_` + 8 hex digits.
const HASH_SUFFIX_LEN: usize = 9;

/// Why a prefix or a name budget cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum NameError {
    #[error(
        "`{0}` is not a valid prefix: use 1 to {MAX_PREFIX_LEN} characters of a-z, 0-9 and `-`, starting with a letter"
    )]
    Prefix(String),
    #[error("no valid prefix can be derived from the server name `{0}`")]
    Underivable(String),
    #[error("invalid name pattern: {0}")]
    Pattern(#[from] regex::Error),
    #[error(
        "a name budget of {0} characters cannot hold a prefix and a shortened name; use at least {min}",
        min = MAX_PREFIX_LEN + SEPARATOR.len() + HASH_SUFFIX_LEN + 1
    )]
    Budget(usize),
}

/// An upstream's namespace prefix: `[a-z][a-z0-9-]{0,31}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Prefix(String);

impl Prefix {
    /// Accepts a prefix as written, or says what is wrong with it.
    pub fn parse(text: &str) -> Result<Self, NameError> {
        let mut chars = text.chars();
        let first_ok = chars.next().is_some_and(|c| c.is_ascii_lowercase());
        let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if !first_ok || !rest_ok || text.len() > MAX_PREFIX_LEN {
            return Err(NameError::Prefix(text.to_owned()));
        }
        Ok(Self(text.to_owned()))
    }

    /// Derives a prefix from a server name as people write it (`My Server`, `my_server`):
    /// lowercase, every other character becomes `-`, runs of `-` collapse, `u-` is put before a
    /// name that does not start with a letter.
    pub fn derive(server_name: &str) -> Result<Self, NameError> {
        let mut out = String::with_capacity(server_name.len());
        for c in server_name.chars().flat_map(char::to_lowercase) {
            let c = if c.is_ascii_lowercase() || c.is_ascii_digit() {
                c
            } else {
                '-'
            };
            if !(c == '-' && (out.is_empty() || out.ends_with('-'))) {
                out.push(c);
            }
        }
        while out.ends_with('-') {
            out.pop();
        }
        if !out.starts_with(|c: char| c.is_ascii_lowercase()) {
            out.insert_str(0, "u-");
        }
        Self::parse(&out).map_err(|_| NameError::Underivable(server_name.to_owned()))
    }

    /// No namespace: names and URIs pass through unchanged (the only upstream a host sees).
    pub const NONE: Self = Self(String::new());

    pub fn none() -> Self {
        Self::NONE
    }

    pub fn is_none(&self) -> bool {
        self.0.is_empty()
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a host accepts as a tool or prompt name.
#[derive(Debug, Clone)]
pub struct NameBudget {
    pattern: Regex,
    max_len: usize,
}

impl Default for NameBudget {
    fn default() -> Self {
        Self::new(DEFAULT_NAME_PATTERN, 64)
            .unwrap_or_else(|_| unreachable!("the default pattern compiles"))
    }
}

/// The default budget: what Claude and OpenAI accept.
pub const DEFAULT_NAME_PATTERN: &str = "^[A-Za-z0-9_-]{1,64}$";

impl NameBudget {
    pub fn new(pattern: &str, max_len: usize) -> Result<Self, NameError> {
        let pattern = Regex::new(pattern)?;
        if max_len <= MAX_PREFIX_LEN + SEPARATOR.len() + HASH_SUFFIX_LEN {
            return Err(NameError::Budget(max_len));
        }
        Ok(Self { pattern, max_len })
    }

    /// Whether a host accepts `name` as it is.
    pub fn accepts(&self, name: &str) -> bool {
        name.len() <= self.max_len && self.pattern.is_match(name)
    }

    /// The exposed name of `original` from the upstream with `prefix`, or `None` when even the
    /// shortened form does not fit the pattern (the item is then left out, with a warning).
    pub fn expose(&self, prefix: &Prefix, original: &str) -> Option<String> {
        if prefix.is_none() {
            return Some(original.to_owned());
        }
        let plain = format!("{prefix}{SEPARATOR}{original}");
        if plain.len() <= self.max_len && self.pattern.is_match(&plain) {
            return Some(plain);
        }
        let mut short: String = format!("{prefix}{SEPARATOR}");
        short.extend(original.chars().map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        }));
        short.truncate(self.max_len - HASH_SUFFIX_LEN);
        let digest = Sha256::digest(plain.as_bytes());
        short.push('_');
        for byte in &digest[..4] {
            short.push_str(&format!("{byte:02x}"));
        }
        self.pattern.is_match(&short).then_some(short)
    }
}

/// The schemes a URI keeps when it is exposed, each with what follows the prefix: MCP Apps' pages
/// are `ui://` resources, and hosts render a tool's page only from a URI of that scheme
/// (SEP-1865); skills are `skill://` resources whose last directory segment is the skill's name,
/// which hosts check (SEP-2640), so there the prefix is a directory of its own.
const KEPT_SCHEMES: [(&str, char); 2] = [("ui://", '+'), ("skill://", '/')];

/// How resources, resource templates (and task ids) are exposed: `{prefix}+{uri}`; a `ui://`
/// URI keeps its scheme and carries the prefix in front of its authority,
/// `ui://{prefix}+{authority}{path}`, and a `skill://` URI carries it as its first segment,
/// `skill://{prefix}/{rest}` (a prefix has neither `+` nor `/`, so the split is unambiguous,
/// and no prefix contains `:`, so the forms never meet). [`split_uri`] undoes any of them.
pub fn expose_uri(prefix: &Prefix, uri: &str) -> String {
    if prefix.is_none() {
        return uri.to_owned();
    }
    match kept_scheme(uri) {
        Some((scheme, after, rest)) => format!("{scheme}{prefix}{after}{rest}"),
        None => format!("{prefix}+{uri}"),
    }
}

/// `uri`'s kept scheme (as it is spelled), what follows the prefix there, and the rest, if it has
/// one of those schemes.
fn kept_scheme(uri: &str) -> Option<(&str, char, &str)> {
    KEPT_SCHEMES.iter().find_map(|(kept, after)| {
        let scheme = uri.get(..kept.len())?;
        scheme
            .eq_ignore_ascii_case(kept)
            .then(|| (scheme, *after, &uri[kept.len()..]))
    })
}

/// The prefix an exposed tool or prompt name starts with, if it has one. Only for messages about
/// a name the catalog does not have: routing always goes through the catalog's map.
pub fn prefix_of(exposed: &str) -> Option<&str> {
    let (prefix, _) = exposed.split_once(SEPARATOR)?;
    Prefix::parse(prefix).ok().map(|_| prefix)
}

/// Splits an exposed URI ([`expose_uri`]) into the prefix text and the upstream's own URI
/// (borrowed but for one of a kept scheme, which is put back in front of it).
pub fn split_uri(exposed: &str) -> Option<(&str, Cow<'_, str>)> {
    if let Some((scheme, after, rest)) = kept_scheme(exposed) {
        let (prefix, tail) = rest.split_once(after)?;
        Prefix::parse(prefix).ok()?;
        return Some((prefix, Cow::Owned(format!("{scheme}{tail}"))));
    }
    let (prefix, uri) = exposed.split_once('+')?;
    Prefix::parse(prefix).ok()?;
    Some((prefix, Cow::Borrowed(uri)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_empty_prefix_passes_names_and_uris_through() {
        let none = Prefix::none();
        let budget = NameBudget::default();
        let long = "a".repeat(80);
        assert_eq!(budget.expose(&none, "get-sum").as_deref(), Some("get-sum"));
        assert_eq!(budget.expose(&none, &long).as_deref(), Some(long.as_str()));
        assert_eq!(expose_uri(&none, "demo://x"), "demo://x");
        assert!(
            Prefix::parse("").is_err(),
            "only config's `prefix = \"\"` means none"
        );
    }

    fn prefix(p: &str) -> Prefix {
        Prefix::parse(p).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn prefixes_are_validated_and_derived() {
        assert!(Prefix::parse("fs").is_ok());
        assert!(Prefix::parse("my-server2").is_ok());
        for bad in ["", "My", "a_b", "a+b", "1a", "-a", &"a".repeat(33)] {
            assert!(Prefix::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(
            Prefix::derive("my_server").map(|p| p.0),
            Ok("my-server".into())
        );
        assert_eq!(
            Prefix::derive("My Server").map(|p| p.0),
            Ok("my-server".into())
        );
        assert_eq!(
            Prefix::derive("  GitHub (work) ").map(|p| p.0),
            Ok("github-work".into())
        );
        assert_eq!(
            Prefix::derive("1password").map(|p| p.0),
            Ok("u-1password".into())
        );
        assert!(Prefix::derive(&"x".repeat(40)).is_err());
    }

    #[test]
    fn names_in_budget_are_plain() {
        let budget = NameBudget::default();
        assert_eq!(
            budget.expose(&prefix("mem"), "read_graph").as_deref(),
            Some("mem__read_graph")
        );
        assert_eq!(
            budget.expose(&prefix("a-b"), "get-sum").as_deref(),
            Some("a-b__get-sum")
        );
    }

    #[test]
    fn names_over_budget_are_shortened_deterministically_and_distinctly() {
        let budget = NameBudget::default();
        let p = prefix("server");
        let long_a = format!("{}_a", "x".repeat(80));
        let long_b = format!("{}_b", "x".repeat(80));
        let a = budget.expose(&p, &long_a);
        let b = budget.expose(&p, &long_b);
        assert_eq!(a, budget.expose(&p, &long_a));
        assert_ne!(a, b);
        for name in [a, b, budget.expose(&p, "has space/and.dots")]
            .into_iter()
            .flatten()
        {
            assert!(name.len() <= 64 && budget.pattern.is_match(&name), "{name}");
            assert!(name.starts_with("server__"));
        }
        let dotted = budget.expose(&p, "a.b");
        assert_ne!(
            dotted,
            budget.expose(&p, "a_b"),
            "sanitizing alone must not collide"
        );
    }

    #[test]
    fn uris_round_trip() {
        for uri in [
            "file:///tmp/a+b.txt",
            "test://x/item/{id}",
            "memory://",
            "a+b://c",
            "ui://system-monitor/mcp-app.html",
            "UI://a+b/c",
            "ui://",
            "skill://a/SKILL.md",
            "Skill:///x/y",
            "skill://",
        ] {
            let exposed = expose_uri(&prefix("fs"), uri);
            assert_eq!(split_uri(&exposed), Some(("fs", Cow::Borrowed(uri))));
        }
        assert_eq!(split_uri("file:///x"), None);
        assert_eq!(split_uri("Bad+x"), None);
        // A page's URI keeps its scheme, the prefix in front of its authority.
        assert_eq!(
            expose_uri(&prefix("sysmon"), "ui://system-monitor/mcp-app.html"),
            "ui://sysmon+system-monitor/mcp-app.html"
        );
        // A `ui://` URI that names no prefix is no exposed URI.
        assert_eq!(split_uri("ui://system-monitor/mcp-app.html"), None);
        assert_eq!(split_uri("ui://Bad+x/y"), None);
        // A skill's URI keeps its scheme and its last segment (the skill's name), the prefix a
        // directory in front.
        assert_eq!(
            expose_uri(&prefix("docs"), "skill://pdf/tools/SKILL.md"),
            "skill://docs/pdf/tools/SKILL.md"
        );
        assert_eq!(split_uri("skill://Bad/x/SKILL.md"), None);
        assert_eq!(split_uri("skill://docs"), None);
    }
}

#[cfg(test)]
mod properties {
    use proptest::prelude::*;

    use super::*;

    fn prefix() -> impl Strategy<Value = Prefix> {
        "[a-z][a-z0-9-]{0,15}".prop_filter_map("a valid prefix", |p| Prefix::parse(&p).ok())
    }

    proptest! {
        #[test]
        fn a_name_in_budget_round_trips(prefix in prefix(), original in "[A-Za-z0-9_-]{1,40}") {
            let budget = NameBudget::default();
            let exposed = budget.expose(&prefix, &original);
            let Some(exposed) = exposed else {
                return Err(TestCaseError::fail("a name of allowed characters was left out"));
            };
            prop_assert!(budget.accepts(&exposed), "{}", exposed);
            prop_assert_eq!(prefix_of(&exposed), Some(prefix.as_str()));
            if format!("{prefix}{SEPARATOR}{original}").len() <= 64 {
                let back = exposed.strip_prefix(&format!("{prefix}{SEPARATOR}"));
                prop_assert_eq!(back, Some(original.as_str()));
            }
        }

        #[test]
        fn any_name_is_exposed_in_budget_deterministically(prefix in prefix(), original in "\\PC{0,120}") {
            let budget = NameBudget::default();
            let exposed = budget.expose(&prefix, &original);
            prop_assert_eq!(&exposed, &budget.expose(&prefix, &original));
            if let Some(exposed) = exposed {
                prop_assert!(budget.accepts(&exposed), "{}", exposed);
                let start = format!("{prefix}{SEPARATOR}");
                prop_assert!(exposed.starts_with(&start), "{}", exposed);
            }
        }

        #[test]
        fn distinct_names_stay_distinct(prefix in prefix(), a in "\\PC{1,90}", b in "\\PC{1,90}") {
            prop_assume!(a != b);
            let budget = NameBudget::default();
            let (ea, eb) = (budget.expose(&prefix, &a), budget.expose(&prefix, &b));
            if ea.is_some() {
                prop_assert_ne!(ea, eb);
            }
        }

        #[test]
        fn every_uri_round_trips(prefix in prefix(), uri in "\\PC{0,120}") {
            let exposed = expose_uri(&prefix, &uri);
            prop_assert_eq!(split_uri(&exposed), Some((prefix.as_str(), Cow::Borrowed(uri.as_str()))));
        }

        #[test]
        fn every_ui_uri_round_trips_keeping_its_scheme(
            prefix in prefix(),
            scheme in "[uU][iI]://",
            rest in "\\PC{0,100}",
        ) {
            let uri = format!("{scheme}{rest}");
            let exposed = expose_uri(&prefix, &uri);
            prop_assert!(exposed.starts_with(&scheme), "{}", exposed);
            prop_assert_eq!(split_uri(&exposed), Some((prefix.as_str(), Cow::Borrowed(uri.as_str()))));
        }

        #[test]
        fn every_skill_uri_round_trips_keeping_its_scheme(
            prefix in prefix(),
            scheme in "[sS][kK][iI][lL][lL]://",
            rest in "\\PC{0,100}",
        ) {
            let uri = format!("{scheme}{rest}");
            let exposed = expose_uri(&prefix, &uri);
            prop_assert!(exposed.starts_with(&format!("{scheme}{prefix}/")), "{}", exposed);
            prop_assert_eq!(split_uri(&exposed), Some((prefix.as_str(), Cow::Borrowed(uri.as_str()))));
        }

        #[test]
        fn splitting_any_text_does_not_panic(text in "\\PC{0,120}") {
            if let Some((prefix, uri)) = split_uri(&text) {
                let prefix = Prefix::parse(prefix).unwrap_or_else(|_| Prefix::none());
                prop_assert_eq!(expose_uri(&prefix, &uri), text.clone());
            }
            let _ = prefix_of(&text);
            let _ = Prefix::derive(&text);
        }
    }
}
