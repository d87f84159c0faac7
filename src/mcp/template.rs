//! Whether a URI is one a URI template (RFC 6570) produces: literal parts match exactly, each
//! `{…}` expression matches any run of characters (every operator, `{+path}`, `{?query}`, `{/seg}`
//! included). Loose on purpose — it answers "could this template have made this URI", which is
//! what deciding whether a profile shows a template's resources needs.

/// Whether `template` could expand to `uri`.
pub fn matches(template: &str, uri: &str) -> bool {
    let mut literals: Vec<&str> = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        literals.push(&rest[..open]);
        match rest[open..].find('}') {
            Some(close) => rest = &rest[open + close + 1..],
            // An unclosed brace: the rest is literal.
            None => {
                literals.push(&rest[open..]);
                return glue(&literals, uri, false);
            }
        }
    }
    literals.push(rest);
    glue(&literals, uri, true)
}

/// Whether `uri` is `literals` in order with anything between consecutive ones (`gaps`: the
/// parts were separated by expressions; else the last part follows without a gap).
fn glue(literals: &[&str], uri: &str, gaps: bool) -> bool {
    let Some((first, others)) = literals.split_first() else {
        return uri.is_empty();
    };
    let Some(mut rest) = uri.strip_prefix(first) else {
        return false;
    };
    if others.is_empty() {
        return rest.is_empty();
    }
    let (middle, last) = others.split_at(others.len() - 1);
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    let last = last[0];
    if !gaps {
        return rest.ends_with(last);
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn expressions_match_any_run_and_literals_match_exactly() {
        assert!(matches("test://b/item/{id}", "test://b/item/42"));
        assert!(matches("test://b/item/{id}", "test://b/item/"));
        assert!(!matches("test://b/item/{id}", "test://a/item/42"));
        assert!(matches("file:///{+path}", "file:///home/me/notes.md"));
        assert!(matches(
            "db://{table}/rows{?limit,offset}",
            "db://users/rows?limit=5"
        ));
        assert!(matches("x://{a}/mid/{b}.json", "x://1/mid/2.json"));
        assert!(!matches("x://{a}/mid/{b}.json", "x://1/mid/2.txt"));
        assert!(matches("static://doc", "static://doc"));
        assert!(!matches("static://doc", "static://doc2"));
    }
}

#[cfg(test)]
mod properties {
    use proptest::prelude::*;

    use super::matches;

    /// A template of literal parts and expressions, and one of its expansions.
    fn template_and_uri() -> impl Strategy<Value = (String, String)> {
        let part = (
            "[a-z:/.?=&-]{0,8}",
            "\\{[+/?#]?[a-z]{1,5}\\}",
            "[a-zA-Z0-9%/._-]{0,10}",
        );
        proptest::collection::vec(part, 0..5).prop_map(|parts| {
            let (mut template, mut uri) = (String::new(), String::new());
            for (literal, expression, value) in parts {
                template.push_str(&literal);
                template.push_str(&expression);
                uri.push_str(&literal);
                uri.push_str(&value);
            }
            (template, uri)
        })
    }

    proptest! {
        #[test]
        fn every_expansion_matches((template, uri) in template_and_uri(), tail in "[a-z.]{0,6}") {
            prop_assert!(matches(&template, &uri), "{} ⊭ {}", template, uri);
            let (template, uri) = (format!("{template}{tail}"), format!("{uri}{tail}"));
            prop_assert!(matches(&template, &uri), "{} ⊭ {}", template, uri);
        }

        #[test]
        fn a_template_without_expressions_matches_only_itself(literal in "[^{}]{0,30}", other in "\\PC{0,30}") {
            prop_assert!(matches(&literal, &literal));
            prop_assert_eq!(matches(&literal, &other), literal == other);
        }

        #[test]
        fn any_text_does_not_panic(template in "\\PC{0,60}", uri in "\\PC{0,60}") {
            let _ = matches(&template, &uri);
        }
    }
}
