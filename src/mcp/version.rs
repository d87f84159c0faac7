//! Protocol revisions mcpmux speaks, as an ordered type with what each one has, and how a version
//! is agreed with a peer. Everything that depends on a revision asks a [`Version`] predicate here
//! instead of comparing date strings.
//!
//! Two eras: the handshake revisions (`initialize` agrees on one per session) and the stateless
//! 2026-07-28 revision, which every request names in its `_meta` envelope (`mcp::envelope`).

use std::fmt;

/// One revision of MCP. Ordered oldest to newest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Version {
    V2024_11_05,
    V2025_03_26,
    V2025_06_18,
    V2025_11_25,
    /// The stateless revision: no handshake, every request carries its version.
    V2026_07_28,
}

impl Version {
    /// Every handshake-era revision mcpmux speaks, newest first.
    pub const ALL: [Version; 4] = [
        Self::V2025_11_25,
        Self::V2025_06_18,
        Self::V2025_03_26,
        Self::V2024_11_05,
    ];

    /// What mcpmux offers in `initialize`, to hosts and upstreams alike.
    pub const LATEST: Version = Self::ALL[0];

    /// The stateless revision mcpmux serves per request.
    pub const MODERN: Version = Self::V2026_07_28;

    /// Every revision mcpmux serves, newest first (`server/discover`'s `supportedVersions`).
    pub const SERVED: [Version; 5] = [
        Self::MODERN,
        Self::V2025_11_25,
        Self::V2025_06_18,
        Self::V2025_03_26,
        Self::V2024_11_05,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::V2024_11_05 => "2024-11-05",
            Self::V2025_03_26 => "2025-03-26",
            Self::V2025_06_18 => "2025-06-18",
            Self::V2025_11_25 => "2025-11-25",
            Self::V2026_07_28 => "2026-07-28",
        }
    }

    /// The handshake-era revision named `text`, if mcpmux speaks it.
    pub fn known(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == text)
    }

    /// The revision named `text`, of either era, if mcpmux serves it.
    pub fn served(text: &str) -> Option<Self> {
        Self::SERVED.into_iter().find(|v| v.as_str() == text)
    }

    /// Whether requests of this revision carry their own version and capabilities (no session).
    pub fn is_modern(self) -> bool {
        self >= Self::MODERN
    }

    /// The version to answer a peer that asked for `requested`: the same when we speak it, else our latest.
    pub fn negotiate(requested: &str) -> Self {
        Self::known(requested).unwrap_or(Self::LATEST)
    }

    /// The known revisions, newest first, for messages.
    pub fn list() -> String {
        Self::ALL.map(Self::as_str).join(", ")
    }

    /// JSON-RPC batches: only 2025-03-26 has them (added there, removed in 2025-06-18).
    pub fn has_batches(self) -> bool {
        self == Self::V2025_03_26
    }

    /// The `completions` server capability (2025-03-26).
    pub fn has_completions(self) -> bool {
        self >= Self::V2025_03_26
    }

    /// Audio content (2025-03-26).
    pub fn has_audio(self) -> bool {
        self >= Self::V2025_03_26
    }

    /// Elicitation (2025-06-18).
    pub fn has_elicitation(self) -> bool {
        self >= Self::V2025_06_18
    }

    /// `resource_link` content (2025-06-18).
    pub fn has_resource_links(self) -> bool {
        self >= Self::V2025_06_18
    }

    /// URL-mode elicitation (2025-11-25).
    pub fn has_url_elicitation(self) -> bool {
        self >= Self::V2025_11_25
    }

    /// Tasks in the core protocol (2025-11-25 only: 2026-07-28 moved them to an extension).
    pub fn has_tasks(self) -> bool {
        self == Self::V2025_11_25
    }

    /// An error response to a message whose id is unknown omits `id` instead of sending `null`
    /// (2025-11-25; older schemas allow neither).
    pub fn omits_unknown_error_id(self) -> bool {
        self >= Self::V2025_11_25
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_echoes_known_and_counters_unknown() {
        assert_eq!(Version::negotiate("2024-11-05"), Version::V2024_11_05);
        assert_eq!(Version::negotiate("2025-06-18").as_str(), "2025-06-18");
        assert_eq!(Version::negotiate("1999-01-01"), Version::LATEST);
        assert_eq!(Version::known("2025-03-26"), Some(Version::V2025_03_26));
        assert_eq!(
            Version::known("2026-07-28"),
            None,
            "not an initialize version"
        );
        assert_eq!(Version::served("2026-07-28"), Some(Version::MODERN));
        assert!(Version::MODERN.is_modern() && !Version::LATEST.is_modern());
        assert!(!Version::MODERN.has_tasks() && Version::LATEST.has_tasks());
    }

    #[test]
    fn order_and_features_follow_the_revisions() {
        let mut sorted = Version::ALL;
        sorted.sort();
        assert_eq!(sorted.map(Version::as_str), {
            let mut by_text = Version::ALL.map(Version::as_str);
            by_text.sort();
            by_text
        });
        assert!(Version::V2025_03_26.has_batches() && !Version::V2025_06_18.has_batches());
        assert!(!Version::V2024_11_05.has_audio() && Version::V2025_03_26.has_completions());
        assert!(Version::V2025_06_18.has_elicitation() && !Version::V2025_06_18.has_tasks());
        assert_eq!(
            Version::list(),
            "2025-11-25, 2025-06-18, 2025-03-26, 2024-11-05"
        );
    }
}
