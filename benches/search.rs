//! Tool search at catalog scale: how long an index of N tools takes to build, how long a search
//! of it takes (p50/p99 over many queries), and what the index holds in memory (the process's
//! RSS before and after building it). The catalog is synthetic and seeded: names made of a verb,
//! an object and a service (`svc17__list_invoices`), a description of the same words plus filler,
//! two to four parameters with descriptions — the vocabulary real servers use, at any size.
//!
//! Quality too: the tools of nine real MCP servers (`benches/search/catalogs.json`, as each listed
//! them) and 111 requests people and models make, each with the one tool that serves it best
//! (`benches/search/queries.tsv`, written before the ranking was tuned): recall@1, recall@5 and
//! the mean reciprocal rank, alone and with the synthetic catalog mixed in; every miss is printed.
//!
//! ```text
//! cargo bench --bench search -- [--tools N (10000)] [--queries N (2000)] [--builds N (5)]
//!                                [--only speed|quality]
//! ```

use std::time::{Duration, Instant};

use clap::Parser;
use mcpmux::search::{ToolIndex, ToolText};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

#[derive(Parser, Debug)]
#[command(about = "mcpmux tool search: index build time, search latency and memory at scale")]
struct Args {
    /// Tools in the synthetic catalog.
    #[arg(long, default_value_t = 10_000)]
    tools: usize,
    /// Searches timed.
    #[arg(long, default_value_t = 2_000)]
    queries: usize,
    /// Index builds timed.
    #[arg(long, default_value_t = 5)]
    builds: usize,
    /// Run only one part.
    #[arg(long, value_parser = ["speed", "quality", "tuning"])]
    only: Option<String>,
    /// Print each query whose tool was not ranked first.
    #[arg(long)]
    misses: bool,
    /// Passed by `cargo bench`; nothing to do with it.
    #[arg(long, hide = true)]
    bench: bool,
}

const VERBS: [&str; 16] = [
    "list",
    "get",
    "create",
    "update",
    "delete",
    "search",
    "read",
    "write",
    "move",
    "copy",
    "send",
    "fetch",
    "export",
    "import",
    "archive",
    "summarize",
];
const OBJECTS: [&str; 24] = [
    "file",
    "directory",
    "invoice",
    "customer",
    "issue",
    "pull_request",
    "message",
    "channel",
    "event",
    "calendar",
    "note",
    "page",
    "table",
    "row",
    "image",
    "document",
    "ticket",
    "user",
    "repository",
    "branch",
    "commit",
    "email",
    "contact",
    "task",
];
const FILLER: [&str; 12] = [
    "the", "given", "current", "selected", "remote", "local", "matching", "recent", "all", "one",
    "by", "from",
];

/// One of `words`, at random.
fn pick(rng: &mut StdRng, words: &[&'static str]) -> &'static str {
    words[rng.random_range(0..words.len())]
}

fn catalog(n: usize) -> Vec<(String, Value)> {
    let mut rng = StdRng::seed_from_u64(0x5ea7c4);
    (0..n)
        .map(|i| {
            let (verb, object) = (pick(&mut rng, &VERBS), pick(&mut rng, &OBJECTS));
            let name = format!("svc{}__{verb}_{object}_{i}", i % 97);
            let mut words = vec![verb, "the", object];
            for _ in 0..rng.random_range(4..12) {
                words.push(pick(&mut rng, &FILLER));
            }
            let params: serde_json::Map<String, Value> = (0..rng.random_range(2..5))
                .map(|p| {
                    let param = format!("{}_{p}", pick(&mut rng, &OBJECTS));
                    let about = format!("The {} to {verb}", pick(&mut rng, &OBJECTS));
                    (param, json!({"type": "string", "description": about}))
                })
                .collect();
            let definition = json!({"description": words.join(" "),
                                    "inputSchema": {"type": "object", "properties": params}});
            (name, definition)
        })
        .collect()
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    (status.lines())
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(at).copied().unwrap_or_default()
}

fn main() {
    let args = Args::parse();
    if matches!(args.only.as_deref(), None | Some("speed")) {
        speed(&args);
    }
    if args.only.as_deref() != Some("speed") {
        quality(&args);
    }
}

/// The real servers' tools, as `server__tool` with each definition.
fn real_catalog() -> Vec<(String, Value)> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/search/catalogs.json");
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let catalogs: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    let servers = catalogs["servers"].as_array().cloned().unwrap_or_default();
    (servers.iter())
        .flat_map(|server| {
            let prefix = server["name"].as_str().unwrap_or_default().to_owned();
            let tools = server["tools"].as_array().cloned().unwrap_or_default();
            tools.into_iter().map(move |tool| {
                let name = format!("{prefix}__{}", tool["name"].as_str().unwrap_or_default());
                (name, tool)
            })
        })
        .collect()
}

/// Each query of `file` (under `benches/search/`) and the tool it expects.
fn queries(file: &str) -> Vec<(String, String)> {
    let path = format!("{}/benches/search/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    (text.lines().skip(1))
        .filter_map(|l| l.split_once('\t'))
        .map(|(q, e)| (q.trim().to_owned(), e.trim().to_owned()))
        .collect()
}

/// Recall@1 and @5 and the mean reciprocal rank (over the first 10) of the queries against the
/// real catalog, alone and among `--tools` synthetic tools.
fn quality(args: &Args) {
    let real = real_catalog();
    for (set, synthetic) in [
        ("queries.tsv", 0),
        ("queries.tsv", args.tools),
        ("holdout.tsv", 0),
        ("holdout.tsv", args.tools),
    ] {
        if args.only.as_deref() == Some("tuning") && set != "queries.tsv" {
            continue;
        }
        let queries = queries(set);
        let mut tools = real.clone();
        tools.extend(catalog(synthetic));
        let index = ToolIndex::build(tools.iter().map(|(n, d)| ToolText::of(n, d)));
        let (mut at1, mut at5, mut reciprocal) = (0usize, 0usize, 0.0f64);
        let mut misses = Vec::new();
        for (query, expected) in &queries {
            let hits = index.search(query, 10);
            let rank = hits.iter().position(|h| &h.name == expected);
            match rank {
                Some(0) => at1 += 1,
                _ => misses.push((query, expected, rank, hits)),
            }
            if rank.is_some_and(|r| r < 5) {
                at5 += 1;
            }
            reciprocal += rank.map_or(0.0, |r| 1.0 / (r as f64 + 1.0));
        }
        let n = queries.len() as f64;
        println!(
            "tool search quality, {set}, {} real tools + {synthetic} synthetic, {} queries: recall@1 {:.3}, recall@5 {:.3}, MRR@10 {:.3}",
            real.len(),
            queries.len(),
            at1 as f64 / n,
            at5 as f64 / n,
            reciprocal / n,
        );
        for (query, expected, rank, hits) in misses.into_iter().filter(|_| args.misses) {
            let top: Vec<&str> = hits.iter().take(3).map(|h| h.name.as_str()).collect();
            let rank = rank.map_or("-".to_owned(), |r| (r + 1).to_string());
            println!(
                "  rank {rank:>2}  {query:?} → {expected}; top: {}",
                top.join(", ")
            );
        }
    }
}

/// Index build time, search latency and the index's memory, on `--tools` synthetic tools.
fn speed(args: &Args) {
    let tools = catalog(args.tools);
    let texts = || tools.iter().map(|(n, d)| ToolText::of(n, d));
    // The first index's memory is measured (later builds reuse what the allocator kept).
    let before = rss_kib();
    let index = ToolIndex::build(texts());
    let after = rss_kib();
    let mut builds = Vec::new();
    for _ in 0..args.builds {
        let started = Instant::now();
        let again = ToolIndex::build(texts());
        builds.push(started.elapsed());
        drop(again);
    }
    builds.sort();
    let mut rng = StdRng::seed_from_u64(7);
    let mut times = Vec::with_capacity(args.queries);
    let mut found = 0usize;
    for _ in 0..args.queries {
        let query = format!(
            "{} {} {}",
            pick(&mut rng, &VERBS),
            pick(&mut rng, &FILLER),
            pick(&mut rng, &OBJECTS).replace('_', " ")
        );
        let started = Instant::now();
        let hits = index.search(&query, 5);
        times.push(started.elapsed());
        found += hits.len();
    }
    times.sort();
    println!(
        "tool search, {} tools: index build p50 {:.1?} (min {:.1?}, {} builds); search p50 {:.1?} p99 {:.1?} ({} queries, {found} hits); index RSS {} KiB",
        index.tool_count(),
        percentile(&builds, 0.5),
        builds[0],
        args.builds,
        percentile(&times, 0.5),
        percentile(&times, 0.99),
        args.queries,
        after.saturating_sub(before),
    );
}
