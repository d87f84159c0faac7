//! Tool search over one view of the catalog: which of its tools answer a person's or a model's
//! words best. Ranking is BM25 over each tool's fields, weighted — its exposed name counts most,
//! then its title, its parameters' names, its description, its parameters' descriptions — with
//! names split where code splits them (`_ - .`, camelCase), lower-cased, stemmed (Snowball
//! English), and the commonest English words left out. A query's word also finds the tools that
//! use a related word (`related`: *folder* finds *directory*), counting less. A query that is a
//! tool's exposed name (or that name without its upstream's prefix) ranks that tool first.
//!
//! An index is built once for a list of tools and read by any number of searches; nothing here
//! is on the forwarding path. Both cost time linear in what they read, and what they read is
//! bounded whatever a caller or an upstream sends: a query's first [`MAX_QUERY_BYTES`] and at
//! most [`MAX_QUERY_TERMS`] distinct terms of it; each field of a tool up to [`MAX_FIELD_BYTES`],
//! and its first [`MAX_PARAMS`] parameters.

mod related;

use std::collections::HashMap;
use std::sync::LazyLock;

use rust_stemmers::{Algorithm, Stemmer};
use serde_json::Value;

/// BM25's term-frequency saturation and length normalization (the usual values).
const K1: f32 = 1.2;
const B: f32 = 0.75;

/// How much a term counts in each field of a tool.
const NAME: f32 = 3.0;
const TITLE: f32 = 2.0;
const PARAM_NAME: f32 = 1.5;
const DESCRIPTION: f32 = 1.0;
const PARAM_DESCRIPTION: f32 = 0.5;

/// How much a related word counts, against the query's own.
const RELATED: f32 = 0.5;

/// The most of a query a search reads: enough for any question a person or a model asks.
pub const MAX_QUERY_BYTES: usize = 4096;
/// The most distinct terms of a query that count (each with its related terms, at most 64 in
/// all: one bit each for what a tool matched).
pub const MAX_QUERY_TERMS: usize = 32;
/// The most of one field of a tool (its name, title, description, one parameter's name or
/// description) that is indexed.
pub const MAX_FIELD_BYTES: usize = 8192;
/// The most parameters of one tool that are indexed.
pub const MAX_PARAMS: usize = 256;

/// How much answering only part of a query costs: a score is multiplied by the part answered
/// to this power.
const COORDINATION: f32 = 1.0;

/// Words too common to tell tools apart (a request's own filler among them, and what is left
/// of `what's`, `don't`, `we'll` once split).
const STOP_WORDS: [&str; 69] = [
    "a",
    "about",
    "an",
    "and",
    "any",
    "anything",
    "are",
    "as",
    "at",
    "be",
    "been",
    "by",
    "can",
    "could",
    "d",
    "did",
    "do",
    "does",
    "everything",
    "for",
    "from",
    "has",
    "have",
    "how",
    "i",
    "if",
    "in",
    "into",
    "is",
    "it",
    "its",
    "just",
    "ll",
    "m",
    "me",
    "my",
    "of",
    "on",
    "or",
    "our",
    "please",
    "re",
    "s",
    "should",
    "so",
    "some",
    "something",
    "t",
    "than",
    "that",
    "the",
    "their",
    "them",
    "then",
    "there",
    "these",
    "they",
    "this",
    "those",
    "to",
    "ve",
    "want",
    "was",
    "we",
    "what",
    "which",
    "who",
    "with",
    "you",
];

/// What one tool offers to be searched by.
#[derive(Debug, Clone, Default)]
pub struct ToolText<'a> {
    /// Its exposed name (prefixed, or renamed by a profile).
    pub name: &'a str,
    pub title: Option<&'a str>,
    pub description: Option<&'a str>,
    /// Its parameters: each name, and its description.
    pub params: Vec<(&'a str, Option<&'a str>)>,
}

impl<'a> ToolText<'a> {
    /// The searchable text of a tool definition (`title`, `description`, `inputSchema`'s
    /// properties) listed under `name`.
    pub fn of(name: &'a str, definition: &'a Value) -> Self {
        let text = |v: &'a Value| v.as_str();
        let properties = definition
            .pointer("/inputSchema/properties")
            .and_then(Value::as_object);
        let params = (properties.into_iter().flatten())
            .take(MAX_PARAMS)
            .map(|(param, schema)| (param.as_str(), schema.get("description").and_then(text)))
            .collect();
        Self {
            name,
            title: definition.get("title").and_then(text),
            description: definition.get("description").and_then(text),
            params,
        }
    }
}

/// One tool a search found: its place in the list the index was built from, its exposed name,
/// its score, and the query's terms it matched (an exact name match says so instead).
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    pub tool: usize,
    pub name: String,
    pub score: f32,
    pub matched: Vec<String>,
}

/// The index of one list of tools.
#[derive(Debug, Default)]
pub struct ToolIndex {
    names: Vec<String>,
    /// Each tool's exposed name lower-cased, and that name without its prefix (`a__b` → `b`).
    exact: Vec<(String, Option<String>)>,
    /// Term → its postings.
    terms: HashMap<String, u32, foldhash::fast::RandomState>,
    /// Per term, (tool, weighted frequency), each tool once.
    postings: Vec<Vec<(u32, f32)>>,
    /// Each tool's weighted length, and the average.
    lengths: Vec<f32>,
    average: f32,
}

impl ToolIndex {
    pub fn build<'a>(tools: impl IntoIterator<Item = ToolText<'a>>) -> Self {
        let mut index = Self::default();
        // Each word is stemmed once per build: catalogs say the same words again and again.
        let mut seen: HashMap<String, u32, foldhash::fast::RandomState> = HashMap::default();
        for (i, tool) in tools.into_iter().enumerate() {
            let id = u32::try_from(i).unwrap_or(u32::MAX);
            // Each word's (term, weight), summed per term once the tool is read (sorting costs
            // little for the few dozen words of a tool, and stays n log n for a huge one).
            let mut weights: Vec<(u32, f32)> = Vec::new();
            let mut length = 0.0;
            let mut add = |text: &str, weight: f32| {
                each_word(bounded(text, MAX_FIELD_BYTES), |word| {
                    let term = match seen.get(word) {
                        Some(term) => *term,
                        None => {
                            let term = index.term(stem(word));
                            seen.insert(word.to_owned(), term);
                            term
                        }
                    };
                    weights.push((term, weight));
                    length += weight;
                });
            };
            add(tool.name, NAME);
            if let Some(title) = tool.title {
                add(title, TITLE);
            }
            if let Some(description) = tool.description {
                add(description, DESCRIPTION);
            }
            for (param, described) in &tool.params {
                add(param, PARAM_NAME);
                if let Some(described) = described {
                    add(described, PARAM_DESCRIPTION);
                }
            }
            weights.sort_unstable_by_key(|(term, _)| *term);
            let mut summed = weights.into_iter();
            if let Some(first) = summed.next() {
                let (mut term, mut weight) = first;
                for (next, added) in summed {
                    if next == term {
                        weight += added;
                    } else {
                        index.postings[term as usize].push((id, weight));
                        (term, weight) = (next, added);
                    }
                }
                index.postings[term as usize].push((id, weight));
            }
            let lower = tool.name.to_lowercase();
            let bare = lower.split_once("__").map(|(_, bare)| bare.to_owned());
            index.exact.push((lower, bare));
            index.names.push(tool.name.to_owned());
            index.lengths.push(length);
        }
        let total: f32 = index.lengths.iter().sum();
        index.average = total / index.lengths.len().max(1) as f32;
        index.postings.shrink_to_fit();
        index
    }

    /// The number of the term `stem`, a new one if it has none yet.
    fn term(&mut self, stem: String) -> u32 {
        let next = u32::try_from(self.postings.len()).unwrap_or(u32::MAX);
        let term = *self.terms.entry(stem).or_insert(next);
        if term == next {
            self.postings.push(Vec::new());
        }
        term
    }

    /// How many tools it indexes.
    pub fn tool_count(&self) -> usize {
        self.names.len()
    }

    /// The `limit` tools that answer `query` best, best first; none for a query of no terms.
    pub fn search(&self, query: &str, limit: usize) -> Vec<Hit> {
        let query = bounded(query, MAX_QUERY_BYTES);
        let wanted = query.trim().to_lowercase();
        let terms = Wanted::of(query);
        let documents = self.names.len() as f32;
        // Dense per-tool scores: no allocation per matching tool.
        let mut scores = vec![0.0f32; self.names.len()];
        let mut matched = vec![0u64; self.names.len()];
        for (bit, term) in terms.iter().enumerate() {
            let Some(&found) = self.terms.get(&term.term) else {
                continue;
            };
            let postings = &self.postings[found as usize];
            let found = postings.len() as f32;
            let idf = (1.0 + (documents - found + 0.5) / (found + 0.5)).ln();
            for &(tool, weight) in postings {
                let tool = tool as usize;
                let length = self.lengths[tool] / self.average.max(f32::EPSILON);
                let saturated = weight * (K1 + 1.0) / (weight + K1 * (1.0 - B + B * length));
                scores[tool] += term.weight * idf * saturated;
                matched[tool] |= 1 << bit;
            }
        }
        // A tool that answers more of the query's words (or words related to them) ranks above
        // one that answers a few of them strongly.
        let sources = terms.iter().map(|t| t.source + 1).max().unwrap_or(0);
        if sources > 1 {
            // Per query word, the bits of its terms.
            let mut masks = vec![0u64; sources];
            for (bit, term) in terms.iter().enumerate() {
                masks[term.source] |= 1 << bit;
            }
            for (score, matched) in scores.iter_mut().zip(&matched) {
                if *score > 0.0 {
                    let answered = masks.iter().filter(|m| *m & matched != 0).count();
                    *score *= (answered as f32 / sources as f32).powf(COORDINATION);
                }
            }
        }
        // An exact name is what was meant, whatever else matches more words.
        let mut exact = Vec::new();
        if !wanted.is_empty() {
            for (tool, (name, bare)) in self.exact.iter().enumerate() {
                if *name == wanted || bare.as_deref() == Some(wanted.as_str()) {
                    scores[tool] = f32::INFINITY;
                    exact.push(tool);
                }
            }
        }
        let mut found: Vec<usize> = (0..scores.len()).filter(|t| scores[*t] > 0.0).collect();
        // Best first; equal scores by name, so a search is repeatable.
        let order = |a: &usize, b: &usize| {
            (scores[*b].total_cmp(&scores[*a])).then_with(|| self.names[*a].cmp(&self.names[*b]))
        };
        if found.len() > limit && limit > 0 {
            found.select_nth_unstable_by(limit - 1, order);
        }
        found.truncate(limit);
        found.sort_by(order);
        (found.into_iter())
            .map(|tool| Hit {
                tool,
                name: self.names[tool].clone(),
                score: scores[tool],
                matched: match exact.contains(&tool) {
                    true => vec!["(exact name)".to_owned()],
                    false => (terms.iter().enumerate())
                        .filter(|(bit, _)| matched[tool] & (1 << bit) != 0)
                        .map(|(_, term)| term.shown.clone())
                        .collect(),
                },
            })
            .collect()
    }
}

/// One term a search looks for: the query's own (weight 1) or one related to them.
#[derive(Debug)]
struct Wanted {
    term: String,
    weight: f32,
    /// Which of the query's own terms it is, or is related to.
    source: usize,
    /// The word it stands for, as a person reads it.
    shown: String,
}

impl Wanted {
    /// The query's terms (its first [`MAX_QUERY_TERMS`] distinct ones), then their related
    /// terms; each once, at its highest weight. At most 64 count (one bit each for what a tool
    /// matched). Linear in the query, of which only the first [`MAX_QUERY_BYTES`] are read.
    fn of(query: &str) -> Vec<Self> {
        let mut wanted: Vec<Self> = Vec::new();
        let mut add = |term: String, weight: f32, source: usize, shown: &str| match wanted
            .iter_mut()
            .find(|w| w.term == term)
        {
            Some(known) if known.weight < weight => {
                known.weight = weight;
                known.source = source;
                shown.clone_into(&mut known.shown);
            }
            Some(_) => {}
            None => wanted.push(Self {
                term,
                weight,
                source,
                shown: shown.to_owned(),
            }),
        };
        let mut own: Vec<(String, String)> = Vec::new();
        each_word(bounded(query, MAX_QUERY_BYTES), |word| {
            if own.len() < MAX_QUERY_TERMS {
                let term = stem(word);
                if !own.iter().any(|(known, _)| *known == term) {
                    own.push((term, word.to_owned()));
                }
            }
        });
        for (source, (term, word)) in own.iter().enumerate() {
            add(term.clone(), 1.0, source, word);
        }
        for (source, (term, _)) in own.iter().enumerate() {
            for (related, word) in related::related(term) {
                add(related.clone(), RELATED, source, word);
            }
        }
        wanted.truncate(64);
        wanted
    }
}

/// The first `max` bytes of `text`, cut at a character boundary.
fn bounded(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The terms of `text`: its [`words`], stemmed.
pub fn terms(text: &str) -> Vec<String> {
    words(text).iter().map(|w| stem(w)).collect()
}

/// The words of `text`: split at anything not a letter or a digit and where camelCase turns
/// (`readFile`, `HTTPServer`), lower-cased, stop words and numbers left out.
fn words(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    each_word(text, |word| words.push(word.to_owned()));
    words
}

/// Calls `found` with each of the [`words`] of `text`, in one buffer.
fn each_word(text: &str, mut found: impl FnMut(&str)) {
    let mut lower = String::new();
    let mut keep = |word: &str| {
        lower.clear();
        lower.extend(word.chars().flat_map(char::to_lowercase));
        // A number is an argument (`issue 42`, `port 8080`), not what a tool is about.
        let number = lower.chars().all(|c| c.is_ascii_digit());
        if !lower.is_empty() && !number && !STOP_WORDS.contains(&lower.as_str()) {
            found(&lower);
        }
    };
    for chunk in text.split(|c: char| !c.is_alphanumeric()) {
        let mut start = 0;
        let mut chars = chunk.char_indices().peekable();
        let mut before: Option<char> = None;
        while let Some((at, here)) = chars.next() {
            if let Some(before) = before {
                let next_lower = chars.peek().is_some_and(|(_, c)| c.is_lowercase());
                // `readFile` → read|File; `HTTPServer` → HTTP|Server; `v2Api` → v2|Api.
                let turns = (before.is_lowercase() && here.is_uppercase())
                    || (before.is_uppercase() && here.is_uppercase() && next_lower)
                    || (before.is_ascii_digit() && here.is_uppercase());
                if turns {
                    keep(&chunk[start..at]);
                    start = at;
                }
            }
            before = Some(here);
        }
        if start < chunk.len() {
            keep(&chunk[start..]);
        }
    }
}

/// A lower-cased word's stem: `files` and `file`, `directories` and `directory`, `deleted` and
/// `delete` are one term.
fn stem(word: &str) -> String {
    static ENGLISH: LazyLock<Stemmer> = LazyLock::new(|| Stemmer::create(Algorithm::English));
    ENGLISH.stem(word).into_owned()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn terms_split_where_code_splits_names() {
        assert_eq!(words("read_file"), ["read", "file"]);
        assert_eq!(
            words("fs__readMultipleFiles"),
            ["fs", "read", "multiple", "files"]
        );
        assert_eq!(
            words("HTTPServer.getStatus"),
            ["http", "server", "get", "status"]
        );
        assert_eq!(words("the path of a file"), ["path", "file"]);
        assert_eq!(words("v2Api"), ["v2", "api"]);
        assert_eq!(
            words("issue 42 on port 8080"),
            ["issue", "port"],
            "numbers are arguments"
        );
        assert!(words("  ,, ").is_empty());
        // One term for a word's forms.
        assert_eq!(terms("list-directories"), terms("list directory"));
        assert_eq!(terms("deleted files"), terms("delete file"));
    }

    #[test]
    fn a_related_word_finds_a_tool_and_counts_less_than_its_own() {
        let tools = [
            (
                "fs__list_directory",
                definition(
                    "List the entries of a directory",
                    &[("path", "The directory")],
                ),
            ),
            (
                "gh__list_issues",
                definition("List the issues of a repository", &[("repo", "owner/name")]),
            ),
            (
                "mail__list_folders",
                definition("List the mail folders of an account", &[]),
            ),
        ];
        let index = index(&tools);
        let found = index.search("what's in my folder", 3);
        assert_eq!(found[0].name, "mail__list_folders", "its own word first");
        assert_eq!(found[1].name, "fs__list_directory", "then a related one");
        assert!(
            found[1].matched.contains(&"directory".to_owned()),
            "{found:?}"
        );
        assert_eq!(index.search("open tickets", 1)[0].name, "gh__list_issues");
    }

    fn definition(description: &str, params: &[(&str, &str)]) -> Value {
        let properties: serde_json::Map<String, Value> = (params.iter())
            .map(|(p, d)| ((*p).to_owned(), json!({"type": "string", "description": d})))
            .collect();
        json!({"description": description,
               "inputSchema": {"type": "object", "properties": properties}})
    }

    fn index(tools: &[(&str, Value)]) -> ToolIndex {
        ToolIndex::build(tools.iter().map(|(n, d)| ToolText::of(n, d)))
    }

    #[test]
    fn the_tool_whose_words_the_query_uses_ranks_first() {
        let tools = [
            (
                "fs__read_file",
                definition(
                    "Read the complete contents of a file",
                    &[("path", "Path of the file")],
                ),
            ),
            (
                "fs__write_file",
                definition(
                    "Create a new file or overwrite one",
                    &[("path", "Path of the file"), ("content", "What to write")],
                ),
            ),
            (
                "fs__list_directory",
                definition(
                    "List the entries of a directory",
                    &[("path", "The directory")],
                ),
            ),
            (
                "time__get_current_time",
                definition("Current time in a timezone", &[("timezone", "IANA name")]),
            ),
            (
                "memory__search_nodes",
                definition("Search the knowledge graph", &[("query", "Words to find")]),
            ),
        ];
        let index = index(&tools);
        let first = |q: &str| index.search(q, 5).first().map(|h| h.name.clone());
        assert_eq!(first("read a file").as_deref(), Some("fs__read_file"));
        assert_eq!(
            first("what time is it in Tokyo timezone").as_deref(),
            Some("time__get_current_time")
        );
        assert_eq!(
            first("show the files in a folder directory").as_deref(),
            Some("fs__list_directory")
        );
        assert_eq!(
            first("overwrite file contents").as_deref(),
            Some("fs__write_file")
        );
        let hit = &index.search("read file", 1)[0];
        assert_eq!(
            hit.matched[..2],
            ["read", "file"],
            "the query's own words first"
        );
        assert_eq!(index.search("read file", 2).len(), 2, "the limit");
        assert!(index.search("", 5).is_empty());
        assert!(index.search("zebra", 5).is_empty(), "no term matches");
    }

    #[test]
    fn an_exact_name_ranks_first() {
        let tools = [
            (
                "a__search",
                definition("Search search search everything", &[("search", "search")]),
            ),
            ("b__find", definition("Find things; search too", &[])),
        ];
        let index = index(&tools);
        assert_eq!(index.search("b__find", 2)[0].name, "b__find");
        assert_eq!(
            index.search("FIND", 2)[0].name,
            "b__find",
            "without its prefix, any case"
        );
        assert_eq!(index.search("find", 2)[0].matched, ["(exact name)"]);
        assert_eq!(index.search("search", 2)[0].name, "a__search");
    }

    #[test]
    fn a_title_and_parameters_are_searched_too() {
        let tools = [
            (
                "x__t1",
                json!({"title": "Weather forecast", "inputSchema": {"type": "object"}}),
            ),
            (
                "x__t2",
                definition("Something else", &[("latitude", "Where")]),
            ),
        ];
        let index = index(&tools);
        assert_eq!(index.search("forecast", 2)[0].name, "x__t1");
        assert_eq!(index.search("latitude", 2)[0].name, "x__t2");
        assert_eq!(index.tool_count(), 2);
    }

    /// `n` distinct made-up words (`w0a`, `w1a`, … are split nowhere and stem to themselves).
    fn distinct_words(n: usize) -> String {
        (0..n).map(|i| format!("zq{i}x ")).collect()
    }

    /// The shortest of seven timings of each of `a` and `b`, taken in turns (what the machine's
    /// other work adds is least there, and a burst of it slows one turn of each).
    fn fastest(
        mut a: impl FnMut(),
        mut b: impl FnMut(),
    ) -> (std::time::Duration, std::time::Duration) {
        let time = |f: &mut dyn FnMut()| {
            let started = std::time::Instant::now();
            f();
            started.elapsed()
        };
        let mut least = (std::time::Duration::MAX, std::time::Duration::MAX);
        for _ in 0..7 {
            least.0 = least.0.min(time(&mut a));
            least.1 = least.1.min(time(&mut b));
        }
        least
    }

    #[test]
    fn a_query_counts_its_first_distinct_terms_once_each() {
        let query = "file file files folder ".repeat(3) + &distinct_words(100);
        let wanted = Wanted::of(&query);
        let own: Vec<&Wanted> = wanted.iter().filter(|w| w.weight == 1.0).collect();
        assert_eq!(own.len(), MAX_QUERY_TERMS);
        assert_eq!(own[0].term, "file");
        assert_eq!(own[1].term, "folder");
        assert!(wanted.len() <= 64);
    }

    #[test]
    fn a_huge_query_or_description_costs_what_a_bounded_one_does() {
        // An index whose one tool has a description of 200 000 distinct words builds in about
        // the time of one with 8 KiB of them (only that much is read, in linear time).
        let huge = distinct_words(200_000);
        let small = huge[..MAX_FIELD_BYTES].to_owned();
        let build = |description: &str| {
            let tools = [("a__big", definition(description, &[("p", description)]))];
            index(&tools)
        };
        let (built_huge, built_small) = fastest(|| drop(build(&huge)), || drop(build(&small)));
        assert!(
            built_huge < built_small * 8 + std::time::Duration::from_millis(20),
            "a huge description took {built_huge:?}, a bounded one {built_small:?}"
        );
        // A 4 MiB query of distinct words answers in about the time a 4 KiB one does.
        let tools: Vec<(String, Value)> = (0..500)
            .map(|i| (format!("u__tool{i}"), definition(&distinct_words(20), &[])))
            .collect();
        let named: Vec<(&str, Value)> =
            tools.iter().map(|(n, d)| (n.as_str(), d.clone())).collect();
        let index = index(&named);
        let big = distinct_words(450_000);
        assert!(big.len() >= 4 << 20);
        let small = &big[..MAX_QUERY_BYTES];
        let (searched_big, searched_small) = fastest(
            || drop(index.search(&big, 5)),
            || drop(index.search(small, 5)),
        );
        assert!(
            searched_big < searched_small * 4 + std::time::Duration::from_millis(5),
            "a 4 MiB query took {searched_big:?}, a 4 KiB one {searched_small:?}"
        );
    }

    proptest::proptest! {
        /// Any text is a query: no panic, at most the bounded number of terms, at most `limit`
        /// hits.
        #[test]
        fn any_text_is_a_bounded_query(query in ".{0,2000}", limit in 0usize..20) {
            let wanted = Wanted::of(&query);
            proptest::prop_assert!(wanted.len() <= 64);
            proptest::prop_assert!(wanted.iter().filter(|w| w.weight == 1.0).count() <= MAX_QUERY_TERMS);
            let tools = [("a__read_file", definition("Reads a file", &[("path", "Where")]))];
            proptest::prop_assert!(index(&tools).search(&query, limit).len() <= limit.max(1));
        }
    }
}
