//! Words that tools and the people who ask for them use for the same thing: a person keeps a
//! *folder*, a server lists a *directory*; a person files a *ticket*, GitHub has *issues*. A query's
//! word also finds the tools that use a related word, at a discount ([`super::RELATED`]).
//!
//! The groups are the vocabulary of tool catalogs — files, version control, issue trackers,
//! browsers, databases, memory, time — not of any one server; a word may be in several groups.

use std::collections::HashMap;
use std::sync::LazyLock;

/// Each group: words (or phrases) that stand for one another in a request for a tool.
const GROUPS: &[&[&str]] = &[
    // Things.
    &["folder", "directory", "dir"],
    &["file", "document"],
    &["repository", "repo", "project", "codebase"],
    &["issue", "ticket", "bug"],
    &["pr", "pull request", "merge request"],
    &["commit", "changeset", "revision"],
    &["history", "log", "commits"],
    &["branch", "checkout", "switch"],
    &["page", "webpage", "website", "site", "browser", "tab"],
    &["url", "link", "address", "webpage", "website", "web"],
    &["entity", "person", "people", "thing", "node"],
    &["observation", "fact", "note"],
    &["relation", "relationship", "connection", "connect", "link"],
    &["memory", "remember", "knowledge", "recall", "know", "graph"],
    &["user", "people", "person", "account", "member"],
    &["table", "database", "db", "sql"],
    &["row", "record", "entry", "insert"],
    &["column", "field", "schema", "describe"],
    &["query", "sql", "select"],
    &["image", "picture", "photo", "png", "jpg", "media"],
    &["screenshot", "capture", "screen"],
    &["timezone", "zone", "tz"],
    &["time", "clock", "date", "now", "today", "current"],
    &["javascript", "js", "script", "evaluate"],
    &["key", "keyboard", "keystroke", "press", "hit"],
    &["type", "input", "enter", "fill"],
    &["click", "tap", "press"],
    &["hover", "mouse", "cursor"],
    &["viewport", "window", "screen", "resize"],
    &["network", "request", "api", "traffic"],
    &["console", "output"],
    &["size", "space", "big", "large", "bytes"],
    &["allowed", "permitted", "access", "permission"],
    &["tree", "hierarchy", "nested", "outline"],
    &[
        "snapshot",
        "outline",
        "accessibility",
        "structure",
        "elements",
    ],
    &["diff", "compare", "difference", "changes"],
    &["status", "modified", "state"],
    &["stage", "staged", "index"],
    &["unstage", "reset", "undo"],
    &["sum", "add", "plus", "total", "calculate", "numbers"],
    &["echo", "repeat"],
    &["env", "environment", "variables"],
    &["progress", "long", "running", "slow"],
    &["elicitation", "ask", "form"],
    &["sampling", "llm", "model", "completion"],
    &["review", "approve", "approval"],
    &["comment", "reply", "respond", "discussion"],
    &["fork", "copy", "clone", "duplicate"],
    &["merge", "combine", "integrate"],
    &["upload", "push", "attach"],
    &["download", "fetch", "retrieve", "grab", "pull"],
    // Actions.
    &[
        "read", "open", "view", "show", "load", "display", "see", "contents", "inside",
    ],
    &["write", "save", "store", "put", "overwrite"],
    &["create", "make", "new", "add", "start", "set up", "init"],
    &[
        "delete", "remove", "drop", "erase", "forget", "clear", "discard",
    ],
    &[
        "edit", "change", "modify", "update", "replace", "alter", "patch",
    ],
    &["search", "find", "look", "locate", "lookup", "grep"],
    &["list", "show", "enumerate", "all", "browse"],
    &["move", "rename", "relocate"],
    &["navigate", "go", "visit", "open"],
    &["back", "previous"],
    &["close", "shut", "quit"],
    &["wait", "pause", "sleep"],
    &["convert", "translate", "transform"],
    &["info", "metadata", "details", "stat", "properties"],
    &["run", "execute", "evaluate", "invoke"],
];

/// A term's related terms (stemmed), each with the word a person would read for it.
type Related = HashMap<String, Vec<(String, &'static str)>>;

static RELATED_TERMS: LazyLock<Related> = LazyLock::new(|| {
    let mut related: Related = HashMap::new();
    for group in GROUPS {
        // Each member's terms, with the member's words as they are read.
        let members: Vec<Vec<(String, &'static str)>> = (group.iter())
            .map(|phrase| {
                (phrase.split(' '))
                    .map(|word| (super::stem(word), word))
                    .collect()
            })
            .collect();
        for (i, member) in members.iter().enumerate() {
            for (term, _) in member {
                let list = related.entry(term.clone()).or_default();
                for (j, other) in members.iter().enumerate() {
                    if i == j {
                        continue;
                    }
                    for (related_term, word) in other {
                        if related_term != term && !list.iter().any(|(t, _)| t == related_term) {
                            list.push((related_term.clone(), word));
                        }
                    }
                }
            }
        }
    }
    related
});

/// The terms related to `term` (a stemmed term), each with a word to show for it.
pub(super) fn related(term: &str) -> &'static [(String, &'static str)] {
    RELATED_TERMS.get(term).map_or(&[], Vec::as_slice)
}
