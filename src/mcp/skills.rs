//! Skills (the `io.modelcontextprotocol/skills` extension, SEP-2640): a server publishes agent
//! skills — a `SKILL.md` and the files it refers to, each a resource whose raw bytes have a
//! `digest` and a `size` the host verifies — through `skills/list` (paginated), `skills/get` (by
//! the `SKILL.md` URI) and, when it declares `directoryRead`, `resources/directory/read`. What
//! mcpmux rewrites of a skill is only where its files live (their URIs, with the codec every
//! resource URI goes through); frontmatter, digests and sizes pass through byte for byte.

use serde_json::value::RawValue;

use crate::jsonrpc::{Members, raw_string, to_raw};

/// The extension's key in `capabilities.extensions`.
pub const EXTENSION: &str = "io.modelcontextprotocol/skills";
/// What ends a skill's URI; its directory is what comes before.
const MANIFEST: &str = "/SKILL.md";

/// The directory a skill's `SKILL.md` URI names (what its files' URIs start with, then `/`).
pub fn root_of(skill_uri: &str) -> Option<&str> {
    skill_uri
        .strip_suffix(MANIFEST)
        .filter(|root| !root.is_empty())
}

/// A skill entry (`json`, an item of `skills/list` or the `skill` of `skills/get`) with its URI
/// and its files' URIs rewritten by `expose`; `None` when it is not an object.
pub fn rewrite_skill(json: &RawValue, expose: &impl Fn(&str) -> String) -> Option<Box<RawValue>> {
    let mut skill = Members::of(json)?;
    let uri = skill.string("uri").map(|uri| raw_string(&expose(&uri)));
    if let Some(uri) = &uri {
        skill.insert("uri", uri);
    }
    let resources = skill
        .get("resources")
        .and_then(|r| rewrite_uris(r, "uri", expose));
    if let Some(resources) = &resources {
        skill.insert("resources", resources);
    }
    Some(skill.to_raw())
}

/// An array of objects (`json`) with each one's `key` member rewritten by `expose`; `None` when
/// `json` is no array (a skill's `resources` may be `"dynamic"`).
pub fn rewrite_uris(
    json: &RawValue,
    key: &str,
    expose: &impl Fn(&str) -> String,
) -> Option<Box<RawValue>> {
    let items: Vec<&RawValue> = serde_json::from_str(json.get()).ok()?;
    let rewritten: Vec<Box<RawValue>> = items
        .into_iter()
        .map(|item| match Members::of(item) {
            Some(mut members) => match members.string(key) {
                Some(uri) => {
                    let uri = raw_string(&expose(&uri));
                    members.insert(key, &uri);
                    members.to_raw()
                }
                None => item.to_owned(),
            },
            None => item.to_owned(),
        })
        .collect();
    Some(to_raw(&rewritten))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn expose(uri: &str) -> String {
        crate::mcp::names::expose_uri(&crate::mcp::names::Prefix::parse("docs").unwrap(), uri)
    }

    #[test]
    fn only_where_files_live_is_rewritten() {
        let skill = json!({
            "uri": "skill://pdf-tools/SKILL.md",
            "frontmatter": {"name": "pdf-tools", "description": "Work with PDFs.", "x": [1]},
            "resources": [
                {"uri": "skill://pdf-tools/SKILL.md", "digest": "sha256:ab", "size": 12},
                {"uri": "skill://pdf-tools/ref/guide.md", "digest": "sha256:cd", "size": 34, "z": true}
            ],
            "_meta": {"k": "v"}
        });
        let raw = serde_json::value::to_raw_value(&skill).unwrap();
        let rewritten: Value =
            serde_json::from_str(rewrite_skill(&raw, &expose).unwrap().get()).unwrap();
        let mut expected = skill.clone();
        expected["uri"] = json!("skill://docs/pdf-tools/SKILL.md");
        expected["resources"][0]["uri"] = json!("skill://docs/pdf-tools/SKILL.md");
        expected["resources"][1]["uri"] = json!("skill://docs/pdf-tools/ref/guide.md");
        assert_eq!(rewritten, expected);
        let dynamic = serde_json::value::to_raw_value(
            &json!({"uri": "skill://a/SKILL.md", "frontmatter": {}, "resources": "dynamic"}),
        )
        .unwrap();
        let rewritten: Value =
            serde_json::from_str(rewrite_skill(&dynamic, &expose).unwrap().get()).unwrap();
        assert_eq!(rewritten["resources"], "dynamic");
        assert_eq!(
            root_of("skill://docs/pdf-tools/SKILL.md"),
            Some("skill://docs/pdf-tools")
        );
        assert_eq!(root_of("SKILL.md"), None);
    }
}
