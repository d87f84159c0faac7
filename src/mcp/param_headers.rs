//! Custom headers from tool parameters (Streamable HTTP, 2026-07-28): a tool's `inputSchema`
//! may mark parameters with `x-mcp-header`; a client mirrors their values into
//! `Mcp-Param-{name}` headers, and a server that reads the body checks that they match. mcpmux is
//! both: it writes them for a 2026-07-28 upstream ([`values`]) and checks a 2026-07-28 host's
//! ([`check`]).

use std::collections::BTreeSet;

use serde_json::Value;

/// One `x-mcp-header` annotation of a tool: the chain of `properties` keys to the parameter,
/// and the name its `Mcp-Param-{name}` header takes.
pub type ParamHeader = (Vec<String>, String);

/// The `x-mcp-header` annotations of a tool's `inputSchema` (Streamable HTTP, "Custom Headers
/// from Tool Parameters"), or why they make the tool invalid: an empty name, one that is not an
/// HTTP token, two alike but for case, one on a parameter that is not a string, integer or
/// boolean, or one not reachable from the root through `properties` alone.
pub fn annotations(schema: &Value) -> Result<Vec<ParamHeader>, InvalidAnnotation> {
    let mut found = Vec::new();
    walk(schema, Some(Vec::new()), &mut found)?;
    let mut seen = BTreeSet::new();
    for (_, name) in &found {
        if !seen.insert(name.to_ascii_lowercase()) {
            return Err(InvalidAnnotation::Twice(name.clone()));
        }
    }
    Ok(found)
}

/// Why a tool's `x-mcp-header` annotations make it invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidAnnotation {
    #[error("an x-mcp-header is not reachable through properties alone")]
    Unreachable,
    #[error("x-mcp-header {0:?} is not an HTTP header name")]
    NotAName(String),
    #[error("x-mcp-header `{0}` is on a parameter that is not a string, integer or boolean")]
    NotScalar(String),
    #[error("x-mcp-header `{0}` is used twice (names are case-insensitive)")]
    Twice(String),
}

/// Why a call's `Mcp-Param-*` headers disagree with its arguments (each names the header).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Mismatch {
    #[error("Mcp-Param-{0} was sent, and the arguments have no value for it")]
    Unexpected(String),
    #[error("Mcp-Param-{0} is missing, and the arguments have a value for it")]
    Missing(String),
    #[error("Mcp-Param-{name} header value does not match the body value of `{path}`")]
    Differs { name: String, path: String },
    #[error("Mcp-Param-{0} was sent more than once")]
    Repeated(String),
}

/// Visits `node`; `path` is its chain of `properties` keys while it is statically reachable.
fn walk(
    node: &Value,
    path: Option<Vec<String>>,
    found: &mut Vec<ParamHeader>,
) -> Result<(), InvalidAnnotation> {
    match node {
        Value::Object(object) => {
            if let Some(name) = object.get("x-mcp-header") {
                let Some(path) = &path else {
                    return Err(InvalidAnnotation::Unreachable);
                };
                let name = name.as_str().unwrap_or_default();
                let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
                if name.is_empty() || !name.chars().all(token) {
                    return Err(InvalidAnnotation::NotAName(name.to_owned()));
                }
                if !matches!(
                    object.get("type").and_then(Value::as_str),
                    Some("string" | "integer" | "boolean")
                ) {
                    return Err(InvalidAnnotation::NotScalar(name.to_owned()));
                }
                found.push((path.clone(), name.to_owned()));
            }
            for (key, child) in object {
                if key == "properties" {
                    if let Value::Object(properties) = child {
                        for (property, schema) in properties {
                            let next = path.clone().map(|mut p| {
                                p.push(property.clone());
                                p
                            });
                            walk(schema, next, found)?;
                        }
                    }
                } else if key != "x-mcp-header" {
                    walk(child, None, found)?;
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                walk(item, None, found)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// The `Mcp-Param-*` headers of a call with `arguments`: each annotated parameter that has a
/// value, as its header value (encoded where it is not plain ASCII).
pub fn values(headers: &[ParamHeader], arguments: &Value) -> Vec<(String, String)> {
    let mut values = Vec::new();
    for (path, name) in headers {
        let value = path.iter().try_fold(arguments, |v, key| v.get(key));
        let text = match value {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Bool(b)) => b.to_string(),
            Some(Value::Number(n)) => n.to_string(),
            _ => continue,
        };
        values.push((
            format!("mcp-param-{name}"),
            super::envelope::encode_header_value(&text),
        ));
    }
    values
}

/// Whether a host's `Mcp-Param-*` headers (`header(name)` gives the values a header was sent
/// with) match the arguments of its call of a tool with `annotations`: every annotated parameter
/// with a value has its header, once, with that value (numbers compared as numbers), and none
/// without a value has one. The error says which does not (`-32020`, HeaderMismatch).
pub fn check<'h>(
    annotations: &[ParamHeader],
    arguments: &Value,
    header: impl Fn(&str) -> Vec<&'h str>,
) -> Result<(), Mismatch> {
    for (path, name) in annotations {
        let value = path.iter().try_fold(arguments, |v, key| v.get(key));
        let sent = header(&format!("mcp-param-{name}"));
        let expected = match value {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Bool(b)) => Some(b.to_string()),
            Some(Value::Number(n)) => Some(n.to_string()),
            _ => None,
        };
        match (expected, sent.as_slice()) {
            (None, []) => {}
            (None, _) => return Err(Mismatch::Unexpected(name.clone())),
            (Some(_), []) => return Err(Mismatch::Missing(name.clone())),
            (Some(expected), [one]) => {
                let decoded = super::envelope::decode_header_value(one);
                let numeric = |text: &str| text.parse::<f64>().ok();
                let matches = match (&decoded, value) {
                    (Some(d), Some(Value::Number(_))) => {
                        numeric(d).is_some() && numeric(d) == numeric(&expected)
                    }
                    (Some(d), _) => *d == expected,
                    (None, _) => false,
                };
                if !matches {
                    return Err(Mismatch::Differs {
                        name: name.clone(),
                        path: path.join("."),
                    });
                }
            }
            (Some(_), _) => return Err(Mismatch::Repeated(name.clone())),
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tool_parameters_become_headers_only_when_annotated_validly() {
        let schema = json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "n": {"type": "integer", "x-mcp-header": "N"},
            "nested": {"type": "object", "properties": {"flag": {"type": "boolean", "x-mcp-header": "Flag"}}},
            "plain": {"type": "string"}}});
        let headers = annotations(&schema).unwrap();
        let values = values(
            &headers,
            &json!({"region": " padded", "n": 42, "nested": {"flag": false}}),
        );
        assert_eq!(
            values,
            [
                (
                    "mcp-param-Region".to_owned(),
                    "=?base64?IHBhZGRlZA==?=".to_owned()
                ),
                ("mcp-param-N".to_owned(), "42".to_owned()),
                ("mcp-param-Flag".to_owned(), "false".to_owned()),
            ]
        );
        for bad in [
            json!({"properties": {"a": {"type": "string", "x-mcp-header": ""}}}),
            json!({"properties": {"a": {"type": "object", "x-mcp-header": "A"}}}),
            json!({"properties": {"a": {"type": "number", "x-mcp-header": "A"}}}),
            json!({"properties": {"a": {"type": "string", "x-mcp-header": "A b"}}}),
            json!({"properties": {"a": {"type": "string", "x-mcp-header": "A"}, "b": {"type": "string", "x-mcp-header": "a"}}}),
            json!({"properties": {"a": {"type": "array", "items": {"type": "string", "x-mcp-header": "A"}}}}),
        ] {
            assert!(annotations(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_hosts_headers_must_say_what_its_arguments_say() {
        let schema = json!({"properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "n": {"type": "integer", "x-mcp-header": "N"}}});
        let headers = annotations(&schema).unwrap();
        let sent = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| -> Vec<&'static str> {
                pairs
                    .iter()
                    .filter(|(n, _)| n.eq_ignore_ascii_case(name))
                    .map(|(_, v)| *v)
                    .collect()
            }
        };
        let args = json!({"region": "us west", "n": 42});
        assert!(
            check(
                &headers,
                &args,
                sent(&[("Mcp-Param-Region", "us west"), ("mcp-param-n", "42.0")])
            )
            .is_ok()
        );
        assert!(
            check(
                &headers,
                &args,
                sent(&[
                    ("Mcp-Param-Region", "=?base64?dXMgd2VzdA==?="),
                    ("mcp-param-n", "42")
                ])
            )
            .is_ok()
        );
        assert!(
            check(
                &headers,
                &args,
                sent(&[("Mcp-Param-Region", "eu"), ("mcp-param-n", "42")])
            )
            .is_err()
        );
        assert!(
            check(&headers, &args, sent(&[("mcp-param-n", "42")])).is_err(),
            "missing"
        );
        assert!(
            check(
                &headers,
                &json!({"n": 42}),
                sent(&[("Mcp-Param-Region", "x"), ("mcp-param-n", "42")])
            )
            .is_err(),
            "no value"
        );
        assert!(
            check(&headers, &json!({"region": null}), sent(&[])).is_ok(),
            "null expects none"
        );
        assert!(
            check(
                &headers,
                &args,
                sent(&[
                    ("Mcp-Param-Region", "us west"),
                    ("Mcp-Param-Region", "us west"),
                    ("mcp-param-n", "42")
                ])
            )
            .is_err(),
            "twice"
        );
    }
}
