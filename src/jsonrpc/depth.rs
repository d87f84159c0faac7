//! How deeply a raw JSON value nests, checked without parsing it: a forwarded `params` nested
//! deeper than a server can read is refused at the edge instead of stalling an upstream.

/// The deepest nesting mcpmux forwards (as serde_json, and most servers' parsers, accept).
pub const MAX_DEPTH: usize = 128;

/// Whether the JSON text `raw` nests arrays and objects deeper than `max`. Text too short to
/// nest that deep is not scanned (a level takes two bytes), so ordinary params cost nothing.
pub fn nests_deeper_than(raw: &str, max: usize) -> bool {
    let bytes = raw.as_bytes();
    if bytes.len() <= 2 * max {
        return false;
    }
    let opening = bytes.iter().filter(|&&b| b == b'[' || b == b'{').count();
    if opening <= max {
        return false;
    }
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for &b in bytes {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(levels: usize) -> String {
        format!("{}{}", "[".repeat(levels), "]".repeat(levels))
    }

    #[test]
    fn nesting_is_counted_outside_strings_only() {
        assert!(!nests_deeper_than(&nested(128), 128));
        assert!(nests_deeper_than(&nested(129), 128));
        assert!(nests_deeper_than(&nested(100_000), 128));
        let in_strings = format!(
            r#"{{"a": "{}", "b": "\"{}"}}"#,
            "[".repeat(500),
            "{".repeat(500)
        );
        assert!(!nests_deeper_than(&in_strings, 128));
        let objects = format!("{}1{}", r#"{"k":"#.repeat(200), "}".repeat(200));
        assert!(nests_deeper_than(&objects, 128));
        assert!(!nests_deeper_than(
            r#"{"name":"echo","arguments":{"text":"hi"}}"#,
            128
        ));
    }
}
