//! The parameters of a `WWW-Authenticate: Bearer …` (or `DPoP …`, RFC 9449 §7.1) challenge
//! (RFC 6750 §3, RFC 9728 §5.1): `resource_metadata`, `scope`, `error`.

/// A Bearer or DPoP challenge's parameters that sign-in uses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Challenge {
    pub resource_metadata: Option<String>,
    pub scope: Option<String>,
    pub error: Option<String>,
}

impl Challenge {
    /// The Bearer or DPoP challenge in a `WWW-Authenticate` value (other schemes are skipped),
    /// or an empty one when there is none.
    pub fn parse(header: &str) -> Self {
        let mut challenge = Self::default();
        let mut rest = header.trim();
        let mut in_bearer = false;
        while !rest.is_empty() {
            // A scheme starts a challenge: a token followed by a space (or the end).
            let token_end = rest
                .find(|c: char| c == '=' || c == ',' || c.is_whitespace())
                .unwrap_or(rest.len());
            let token = &rest[..token_end];
            let after = rest[token_end..].trim_start();
            if !after.starts_with('=') {
                if !token.is_empty() {
                    // DPoP's challenge (RFC 9449 §7.1) carries the same parameters.
                    in_bearer =
                        token.eq_ignore_ascii_case("bearer") || token.eq_ignore_ascii_case("dpop");
                }
                rest = after.trim_start_matches(',').trim_start();
                continue;
            }
            let (value, remainder) = value_of(after[1..].trim_start());
            if in_bearer {
                let slot = match token.to_ascii_lowercase().as_str() {
                    "resource_metadata" => Some(&mut challenge.resource_metadata),
                    "scope" => Some(&mut challenge.scope),
                    "error" => Some(&mut challenge.error),
                    _ => None,
                };
                if let Some(slot) = slot {
                    *slot = Some(value);
                }
            }
            rest = remainder.trim_start().trim_start_matches(',').trim_start();
        }
        challenge
    }
}

/// A quoted string (with `\` escapes) or a token, and what follows it.
fn value_of(s: &str) -> (String, &str) {
    if let Some(quoted) = s.strip_prefix('"') {
        let mut value = String::new();
        let mut chars = quoted.char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, escaped)) = chars.next() {
                        value.push(escaped);
                    }
                }
                '"' => return (value, &quoted[i + 1..]),
                c => value.push(c),
            }
        }
        (value, "")
    } else {
        let end = s.find(',').unwrap_or(s.len());
        (s[..end].trim().to_owned(), &s[end..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dpop_challenge_names_the_resource_metadata_too() {
        let c = Challenge::parse(
            r#"DPoP error="use_dpop_nonce", resource_metadata="https://rs/.well-known/oauth-protected-resource/mcp""#,
        );
        assert_eq!(c.error.as_deref(), Some("use_dpop_nonce"));
        assert_eq!(
            c.resource_metadata.as_deref(),
            Some("https://rs/.well-known/oauth-protected-resource/mcp")
        );
    }

    #[test]
    fn bearer_parameters_are_read_quoted_or_not_and_other_schemes_skipped() {
        let c = Challenge::parse(
            r#"Bearer error="invalid_token", error_description="Missing \"Authorization\" header", scope="mcp:basic mcp:write", resource_metadata="http://localhost:1/.well-known/oauth-protected-resource/mcp""#,
        );
        assert_eq!(c.error.as_deref(), Some("invalid_token"));
        assert_eq!(c.scope.as_deref(), Some("mcp:basic mcp:write"));
        assert_eq!(
            c.resource_metadata.as_deref(),
            Some("http://localhost:1/.well-known/oauth-protected-resource/mcp")
        );
        let c =
            Challenge::parse(r#"Basic realm="x", Bearer scope=files, error=insufficient_scope"#);
        assert_eq!(c.scope.as_deref(), Some("files"));
        assert_eq!(c.error.as_deref(), Some("insufficient_scope"));
        assert_eq!(Challenge::parse("Basic realm=\"x\""), Challenge::default());
        assert_eq!(Challenge::parse(""), Challenge::default());
    }
}
