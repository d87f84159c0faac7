//! Protocol revisions mcpmux speaks and how a version is agreed with a peer.

/// The handshake-era (`initialize`) revisions, newest first.
pub const LEGACY: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// What mcpmux offers in `initialize`, to hosts and upstreams alike.
pub const LATEST: &str = LEGACY[0];

/// What a Streamable HTTP request without `MCP-Protocol-Version` is assumed to speak (spec 2025-06-18+).
pub const HTTP_DEFAULT: &str = "2025-03-26";

/// The version to answer a host that asked for `requested`: the same when we speak it, else our latest.
pub fn negotiate(requested: &str) -> &'static str {
    LEGACY
        .iter()
        .copied()
        .find(|v| *v == requested)
        .unwrap_or(LATEST)
}

/// The canonical static form of a version we speak.
pub fn known(version: &str) -> Option<&'static str> {
    LEGACY.iter().copied().find(|v| *v == version)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_echoes_known_and_counters_unknown() {
        assert_eq!(negotiate("2024-11-05"), "2024-11-05");
        assert_eq!(negotiate("2025-06-18"), "2025-06-18");
        assert_eq!(negotiate("1999-01-01"), LATEST);
        assert_eq!(known("2025-03-26"), Some("2025-03-26"));
        assert_eq!(known("2026-07-28"), None);
    }
}
