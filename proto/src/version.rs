//! Protocol revisions and their negotiation.
//!
//! MCP has two generations: the stateless *modern* one (2026-07-28), where every request names
//! its version in `_meta`, and the session-based *legacy* ones, negotiated once by `initialize`.

use std::fmt;

/// A protocol revision this crate knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ProtocolVersion {
    /// 2024-11-05, the first revision (HTTP+SSE transport).
    V2024_11_05,
    /// 2025-03-26 (Streamable HTTP).
    V2025_03_26,
    /// 2025-06-18.
    V2025_06_18,
    /// 2025-11-25, the last session-based revision.
    V2025_11_25,
    /// 2026-07-28, stateless: `_meta` on every request, `server/discover`, MRTR.
    V2026_07_28,
}

impl ProtocolVersion {
    /// Every revision, oldest first.
    pub const ALL: [ProtocolVersion; 5] = [
        Self::V2024_11_05,
        Self::V2025_03_26,
        Self::V2025_06_18,
        Self::V2025_11_25,
        Self::V2026_07_28,
    ];
    /// The newest revision.
    pub const LATEST: ProtocolVersion = Self::V2026_07_28;
    /// The newest session-based revision, chosen by `initialize` when the client asks for an
    /// unknown one.
    pub const LATEST_LEGACY: ProtocolVersion = Self::V2025_11_25;

    /// The wire string, e.g. `"2025-11-25"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::V2024_11_05 => "2024-11-05",
            Self::V2025_03_26 => "2025-03-26",
            Self::V2025_06_18 => "2025-06-18",
            Self::V2025_11_25 => "2025-11-25",
            Self::V2026_07_28 => "2026-07-28",
        }
    }

    /// Parses a wire string; `None` for a revision we do not implement.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == s)
    }

    /// True for revisions that use `initialize` and sessions.
    pub const fn is_legacy(self) -> bool {
        !matches!(self, Self::V2026_07_28)
    }

    /// Legacy negotiation: the client's version when we speak it, else our latest legacy one
    /// (the client then decides whether to continue).
    pub fn negotiate_legacy(requested: &str) -> Self {
        match Self::parse(requested) {
            Some(v) if v.is_legacy() => v,
            _ => Self::LATEST_LEGACY,
        }
    }

    /// The versions a server of this crate supports, newest first, as listed in
    /// `server/discover` and in `UnsupportedProtocolVersionError`.
    pub fn supported_strs() -> Vec<&'static str> {
        Self::ALL.iter().rev().map(|v| v.as_str()).collect()
    }
}

impl fmt::Display for ProtocolVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legacy_negotiation_keeps_known_legacy_and_falls_back_otherwise() {
        assert_eq!(
            ProtocolVersion::negotiate_legacy("2025-06-18"),
            ProtocolVersion::V2025_06_18
        );
        assert_eq!(
            ProtocolVersion::negotiate_legacy("1999-01-01"),
            ProtocolVersion::V2025_11_25
        );
        // A modern version cannot be negotiated through initialize.
        assert_eq!(
            ProtocolVersion::negotiate_legacy("2026-07-28"),
            ProtocolVersion::V2025_11_25
        );
    }

    #[test]
    fn every_version_round_trips_through_its_string() {
        for v in ProtocolVersion::ALL {
            assert_eq!(ProtocolVersion::parse(v.as_str()), Some(v));
        }
    }
}
