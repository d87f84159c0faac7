//! Protocol revisions mcpmux speaks, as an ordered type with what each one has, and how a version
//! is agreed with a peer. Everything that depends on a revision asks a [`Version`] predicate here
//! instead of comparing date strings.

use std::fmt;

/// One handshake-era (`initialize`) revision of MCP. Ordered oldest to newest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Version {
    V2024_11_05,
    V2025_03_26,
    V2025_06_18,
    V2025_11_25,
}

impl Version {
    /// Every revision mcpmux speaks, newest first.
    pub const ALL: [Version; 4] = [
        Self::V2025_11_25,
        Self::V2025_06_18,
        Self::V2025_03_26,
        Self::V2024_11_05,
    ];

    /// What mcpmux offers in `initialize`, to hosts and upstreams alike.
    pub const LATEST: Version = Self::ALL[0];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::V2024_11_05 => "2024-11-05",
            Self::V2025_03_26 => "2025-03-26",
            Self::V2025_06_18 => "2025-06-18",
            Self::V2025_11_25 => "2025-11-25",
        }
    }

    /// The revision named `text`, if mcpmux speaks it.
    pub fn known(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == text)
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

    /// Tasks (2025-11-25).
    pub fn has_tasks(self) -> bool {
        self >= Self::V2025_11_25
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
        assert_eq!(Version::known("2026-07-28"), None);
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
