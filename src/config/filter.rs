//! A profile's [`NameFilter`]: `allow` and `deny` globs on exposed names and URIs.

use std::collections::BTreeMap;

use globset::{Glob, GlobSet, GlobSetBuilder};

use crate::mcp::ListKind;

/// `allow` and `deny` globs on exposed names (tools, prompts) and URIs (resources, templates,
/// skills — a skill by its `SKILL.md` URI). A pattern may name its kind (`tool:`, `prompt:`,
/// `resource:`, `template:`, `skill:`) or apply to all.
/// An item passes when no `deny` pattern matches it and, if any `allow` pattern applies to its
/// kind, one of them matches it: deny wins.
#[derive(Debug, Clone, Default)]
pub struct NameFilter {
    allow: BTreeMap<ListKind, GlobSet>,
    deny: BTreeMap<ListKind, GlobSet>,
}

/// The kind qualifiers a pattern may start with.
pub const KIND_QUALIFIERS: [(&str, ListKind); 5] = [
    ("tool:", ListKind::Tools),
    ("prompt:", ListKind::Prompts),
    ("resource:", ListKind::Resources),
    ("template:", ListKind::ResourceTemplates),
    ("skill:", ListKind::Skills),
];

impl NameFilter {
    /// Compiles `allow` and `deny`; the error names the pattern that is not a glob.
    pub fn new(allow: &[String], deny: &[String]) -> Result<Self, (String, String)> {
        Ok(Self {
            allow: compile(allow)?,
            deny: compile(deny)?,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.allow.is_empty() && self.deny.is_empty()
    }

    /// Whether any pattern applies to `kind`.
    pub fn restricts(&self, kind: ListKind) -> bool {
        self.allow.contains_key(&kind) || self.deny.contains_key(&kind)
    }

    /// Whether an item of `kind` exposed as `exposed` passes.
    pub fn admits(&self, kind: ListKind, exposed: &str) -> bool {
        if self.deny.get(&kind).is_some_and(|d| d.is_match(exposed)) {
            return false;
        }
        self.allow.get(&kind).is_none_or(|a| a.is_match(exposed))
    }
}

fn compile(patterns: &[String]) -> Result<BTreeMap<ListKind, GlobSet>, (String, String)> {
    let mut builders: BTreeMap<ListKind, GlobSetBuilder> = BTreeMap::new();
    for pattern in patterns {
        let (kinds, glob): (Vec<ListKind>, &str) = match KIND_QUALIFIERS
            .iter()
            .find_map(|(q, kind)| pattern.strip_prefix(q).map(|rest| (*kind, rest)))
        {
            Some((kind, rest)) => (vec![kind], rest),
            None => (ListKind::ALL.to_vec(), pattern.as_str()),
        };
        let glob = Glob::new(glob).map_err(|e| (pattern.clone(), e.kind().to_string()))?;
        for kind in kinds {
            builders
                .entry(kind)
                .or_insert_with(GlobSetBuilder::new)
                .add(glob.clone());
        }
    }
    builders
        .into_iter()
        .map(|(kind, b)| {
            b.build()
                .map(|set| (kind, set))
                .map_err(|e| (patterns.join(", "), e.to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn deny_wins_and_allow_restricts_only_the_kinds_it_names() {
        let f = NameFilter::new(
            &strings(&["tool:fs__read_*", "tool:time__*"]),
            &strings(&["*secret*"]),
        )
        .unwrap_or_else(|e| panic!("{e:?}"));
        assert!(f.admits(ListKind::Tools, "fs__read_file"));
        assert!(!f.admits(ListKind::Tools, "fs__write_file"));
        assert!(!f.admits(ListKind::Tools, "fs__read_secret"));
        // No allow pattern names prompts or resources: they pass unless denied.
        assert!(f.admits(ListKind::Prompts, "fs__anything"));
        assert!(f.admits(ListKind::Resources, "fs+file:///docs/a.md"));
        assert!(!f.admits(ListKind::Resources, "fs+file:///secret/a.md"));
        assert!(NameFilter::new(&strings(&["tool:[bad"]), &[]).is_err());
    }
}
