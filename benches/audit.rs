//! Audit log benchmarks: how fast the writer takes records, and how fast a large store answers.
//!
//! (a) Writer throughput: an [`AuditHandle`] on a fresh temporary store; T threads (2) push
//! N records (200 000) as fast as they can, realistic `tools/call` request records (session,
//! upstream, target, latency, sizes, trace id, raw arguments; `record` digests the arguments,
//! encodes and chains each record on the pushing thread), then `sync()`. Reported: the push
//! time, the sustained rate (records stored / time until `sync` returned), records dropped
//! because the queue was full, and records stored. It runs with the default queue (65 536) and
//! durability `batch`; if that dropped records, again with a queue
//! holding all N (the writer's own throughput); then durability `record` (one flush per record)
//! on a smaller count.
//!
//! (b) Queries over a large store: 1 000 000 records over 10 upstreams and 24 h of timestamps,
//! appended directly with `Store::append` in blocks of B records (1 024: about what a busy gateway's
//! 50 ms sync indexes as one entry; arguments already digested), then
//! the store is reopened and timed (median of R runs, 20): the first page (limit 100) of a
//! one-hour range with an upstream filter, the first page of the same range alone, and `verify`
//! over every record (once).
//!
//! Every store lives in a temporary directory removed at the end. Run it with:
//!
//! ```text
//! cargo bench --bench audit -- [--records N (200000)] [--threads T (2)]
//!     [--record-durability N (5000)] [--query-records N (1000000)] [--block B (1024)] [--runs R (20)]
//!     [--skip-writer] [--skip-query] [--json]
//! ```
//!
//! `--json` prints one JSON object on stdout instead of the tables; progress goes to stderr.

use std::error::Error;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use mcpmux::audit::{self, AuditHandle, Direction, Ended, Filter, Kind, Record, Store};
use mcpmux::config::{AuditConfig, Durability, Redaction, SecretKeys};
use serde_json::value::RawValue;
use serde_json::{Value, json};

type Res<T> = Result<T, Box<dyn Error>>;

const UPSTREAMS: u64 = 10;
const TOOLS: [&str; 4] = ["read_file", "search", "list_dir", "write_file"];
const HOUR_US: u64 = 3_600_000_000;
const DAY_US: u64 = 24 * HOUR_US;
const SYNC_DEADLINE: Duration = Duration::from_secs(600);

#[derive(Debug)]
struct Args {
    records: u64,
    threads: u64,
    record_durability: u64,
    query_records: u64,
    /// Records per block of the query store.
    block: usize,
    runs: usize,
    skip_writer: bool,
    skip_query: bool,
    json: bool,
}

fn parse_args() -> Res<Args> {
    let mut args = Args {
        records: 200_000,
        threads: 2,
        record_durability: 5_000,
        query_records: 1_000_000,
        block: 1024,
        runs: 20,
        skip_writer: false,
        skip_query: false,
        json: false,
    };
    // `cargo bench` passes `--bench`.
    let mut it = std::env::args().skip(1).filter(|a| a != "--bench");
    while let Some(arg) = it.next() {
        let mut number = |name: &str| -> Res<u64> {
            let v = it.next().ok_or(format!("{name} needs a value"))?;
            Ok(v.replace('_', "")
                .parse()
                .map_err(|e| format!("{name}: {e}"))?)
        };
        match arg.as_str() {
            "--records" => args.records = number("--records")?,
            "--threads" => args.threads = number("--threads")?.max(1),
            "--record-durability" => args.record_durability = number("--record-durability")?,
            "--query-records" => args.query_records = number("--query-records")?,
            "--block" => args.block = usize::try_from(number("--block")?.max(1))?,
            "--runs" => args.runs = usize::try_from(number("--runs")?.max(1))?,
            "--skip-writer" => args.skip_writer = true,
            "--skip-query" => args.skip_query = true,
            "--json" => args.json = true,
            "-h" | "--help" => {
                println!(
                    "cargo bench --bench audit -- [--records N] [--threads T] \
                     [--record-durability N] [--query-records N] [--block B] [--runs R] \
                     [--skip-writer] [--skip-query] [--json]"
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument `{other}` (see --help)").into()),
        }
    }
    Ok(args)
}

/// A small deterministic generator (splitmix64), so every run builds the same store.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A host's `tools/call` as the gateway records it, fields drawn from `rng`.
fn request_record(rng: &mut Rng) -> Record {
    let upstream = rng.below(UPSTREAMS);
    let tool = TOOLS[(rng.below(TOOLS.len() as u64)) as usize];
    let outcome = match rng.below(100) {
        0 => Ended::Error,
        1 => Ended::ToolError,
        _ => Ended::Ok,
    };
    let mut r = Record::new(Kind::Request, "tools/call", outcome);
    r.direction = Some(Direction::HostToUpstream);
    r.session = Some(format!("{:032x}", rng.below(64)));
    r.upstream = Some(format!("up{upstream}"));
    r.target = Some(format!("up{upstream}__{tool}"));
    r.error_code = (outcome == Ended::Error).then_some(-32603);
    r.latency_us = Some(200 + rng.below(20_000));
    r.request_bytes = Some(150 + rng.below(300));
    r.response_bytes = Some(200 + rng.below(8_000));
    r.trace_id = Some(format!("{:016x}{:016x}", rng.next(), rng.next()));
    r
}

fn raw_args(i: u64) -> Res<Box<RawValue>> {
    let text = format!(
        r#"{{"path":"/srv/projects/app/src/module_{}.rs","offset":{},"max_bytes":65536,"follow_symlinks":false}}"#,
        i % 5_000,
        i % 97
    );
    Ok(RawValue::from_string(text)?)
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// `count` per second of `d`, rounded to a whole number.
fn per_s(count: u64, d: Duration) -> u64 {
    (count as f64 / secs(d).max(1e-9)).round() as u64
}

fn round(x: f64, digits: i32) -> f64 {
    let p = 10f64.powi(digits);
    (x * p).round() / p
}

/// Bytes under `dir`.
fn disk_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => disk_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

// ------------------------------------------------------------------ (a) writer

/// Pushes `n` records from `threads` threads into a fresh store; returns the report.
fn writer_run(n: u64, threads: u64, durability: Durability, queue: usize) -> Res<Value> {
    let dir = tempfile::tempdir()?;
    let store = audit::open(&dir.path().join("audit"))?;
    let mut config = AuditConfig::new(dir.path().join("audit"), SecretKeys::defaults()?);
    config.durability = durability;
    config.queue = queue;
    let handle = AuditHandle::start(store, &config)?;
    let name = match durability {
        Durability::Batch => "batch",
        Durability::Record => "record",
    };
    eprintln!(
        "audit bench: writer: {n} records, {threads} threads, durability {name}, queue {queue}"
    );
    let start = Instant::now();
    let producers: Vec<_> = (0..threads)
        .map(|t| {
            let handle = handle.clone();
            let (from, to) = (n * t / threads, n * (t + 1) / threads);
            std::thread::spawn(move || -> Result<(), String> {
                let mut rng = Rng(t + 1);
                for i in from..to {
                    let mut r = request_record(&mut rng);
                    let args = raw_args(i).map_err(|e| e.to_string())?;
                    r.raw_args = Some((args, Redaction::Digest));
                    handle.record(r);
                }
                Ok(())
            })
        })
        .collect();
    for p in producers {
        p.join().map_err(|_| "producer panicked")??;
    }
    let pushed = start.elapsed();
    if !handle.sync(SYNC_DEADLINE) {
        return Err(format!("sync did not finish in {SYNC_DEADLINE:?}").into());
    }
    let total = start.elapsed();
    let stored = handle.store().map_or(0, Store::len) as u64;
    let (dropped, queued) = (handle.dropped(), handle.queued());
    if queued != stored {
        eprintln!("audit bench: warning: {queued} records queued but {stored} stored");
    }
    let verified = handle.store().map(Store::verify).transpose()?;
    let chain_ok = verified.is_some_and(|v| v.ok && v.checked == stored);
    handle.close(SYNC_DEADLINE);
    drop(handle);
    // Once the writer has closed the store, the temporary directory can go.
    drop(reopen(&dir.path().join("audit"))?);
    Ok(json!({
        "durability": name,
        "queue": queue,
        "threads": threads,
        "records": n,
        "push_s": round(secs(pushed), 3),
        "push_records_per_s": per_s(n, pushed),
        "total_s": round(secs(total), 3),
        "stored": stored,
        "dropped": dropped,
        "sustained_records_per_s": per_s(stored, total),
        "chain_ok": chain_ok,
    }))
}

/// Opens the store at `dir`, waiting (at most 5 s) until its previous user let go of it: sled
/// holds an exclusive lock while a store is open (the writer thread is detached, and a dropped
/// store may close a moment later).
fn reopen(dir: &Path) -> Res<Store> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match Store::open(dir) {
            Ok(store) => return Ok(store),
            Err(e) if Instant::now() >= deadline => return Err(e.into()),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

fn writer_bench(args: &Args) -> Res<Vec<Value>> {
    let default_queue = AuditConfig::new("x".into(), SecretKeys::defaults()?).queue;
    let mut reports = vec![writer_run(
        args.records,
        args.threads,
        Durability::Batch,
        default_queue,
    )?];
    if reports[0]["dropped"].as_u64() != Some(0) {
        let queue = usize::try_from(args.records)?.max(default_queue);
        reports.push(writer_run(
            args.records,
            args.threads,
            Durability::Batch,
            queue,
        )?);
    }
    if args.record_durability > 0 {
        reports.push(writer_run(
            args.record_durability,
            args.threads,
            Durability::Record,
            default_queue,
        )?);
    }
    Ok(reports)
}

// ------------------------------------------------------------------ (b) queries

/// `n` records over 24 h ending now, appended directly in blocks of `block`; returns the first
/// timestamp.
fn build_store(store: &Store, n: u64, block: usize) -> Res<u64> {
    let first_ts = audit::now_us() - DAY_US;
    let mut head = store.head()?;
    let mut rng = Rng(42);
    let mut batch = Vec::with_capacity(block);
    let started = Instant::now();
    for i in 0..n {
        let mut r = request_record(&mut rng);
        // Requests end slightly out of order: up to 50 ms of jitter.
        r.ts_us = first_ts + i * DAY_US / n.max(1) + rng.below(50_000);
        let digest = (0..4).fold(String::from("sha256:"), |d, _| {
            d + &format!("{:016x}", rng.next())
        });
        r.args = RawValue::from_string(json!({ "digest": digest }).to_string()).ok();
        batch.push(r);
        if batch.len() == block || i + 1 == n {
            store.append(std::mem::take(&mut batch), &mut head)?;
            batch.reserve(block);
        }
        if (i + 1) % 200_000 == 0 {
            let rate = (i + 1) as f64 / secs(started.elapsed());
            eprintln!("audit bench: build: {} records ({rate:.0}/s)", i + 1);
        }
    }
    store.flush()?;
    Ok(first_ts)
}

/// Times `f` `runs` times; returns (median, min, max, first) in ms and the last result.
fn time_runs<T>(runs: usize, mut f: impl FnMut() -> Res<T>) -> Res<(Value, T)> {
    let mut times = Vec::with_capacity(runs);
    let mut last = None;
    for _ in 0..runs {
        let t = Instant::now();
        last = Some(f()?);
        times.push(secs(t.elapsed()) * 1e3);
    }
    let first = times[0];
    times.sort_by(f64::total_cmp);
    let median = if runs % 2 == 1 {
        times[runs / 2]
    } else {
        (times[runs / 2 - 1] + times[runs / 2]) / 2.0
    };
    let stats = json!({
        "runs": runs,
        "median_ms": round(median, 3),
        "min_ms": round(times[0], 3),
        "max_ms": round(times[runs - 1], 3),
        "first_ms": round(first, 3),
    });
    Ok((stats, last.ok_or("no run")?))
}

fn query_bench(args: &Args) -> Res<Value> {
    let n = args.query_records;
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("audit");
    eprintln!(
        "audit bench: query: building a store of {n} records in {}",
        path.display()
    );
    let started = Instant::now();
    let first_ts = {
        let store = audit::open(&path)?;
        build_store(&store, n, args.block)?
    };
    let build = started.elapsed();
    let disk = disk_bytes(&path);
    // Reopened, as the daemon or `mcpmux audit` would find it.
    let store = reopen(&path)?;
    if store.len() as u64 != n {
        return Err(format!("the store holds {} records, not {n}", store.len()).into());
    }
    let from = first_ts + 12 * HOUR_US;
    let range = Filter {
        from_us: Some(from),
        to_us: Some(from + HOUR_US),
        limit: Some(100),
        ..Filter::default()
    };
    let with_upstream = Filter {
        upstream: Some("up3".into()),
        ..range.clone()
    };
    let mut queries = Vec::new();
    for (name, filter) in [
        ("1h range + upstream, first page (100)", &with_upstream),
        ("1h range only, first page (100)", &range),
    ] {
        eprintln!("audit bench: query: {name} x{}", args.runs);
        let (mut stats, page) = time_runs(args.runs, || Ok(store.query(filter)?))?;
        let ok = page.records.iter().all(|r| {
            r.ts_us >= from
                && r.ts_us < from + HOUR_US
                && filter
                    .upstream
                    .as_ref()
                    .is_none_or(|u| r.upstream.as_ref() == Some(u))
        });
        if page.records.len() != 100 || !ok {
            return Err(format!("{name}: unexpected page ({} records)", page.records.len()).into());
        }
        stats["query"] = json!(name);
        stats["returned"] = json!(page.records.len());
        queries.push(stats);
    }
    eprintln!("audit bench: verify over {n} records");
    let t = Instant::now();
    let verification = store.verify()?;
    let verify = t.elapsed();
    if !verification.ok || verification.checked != n {
        return Err(format!("verify failed: {verification:?}").into());
    }
    drop(store);
    Ok(json!({
        "records": n,
        "block_records": args.block,
        "upstreams": UPSTREAMS,
        "span_h": 24,
        "build_s": round(secs(build), 2),
        "build_records_per_s": per_s(n, build),
        "disk_mib": round(disk as f64 / (1024.0 * 1024.0), 1),
        "queries": queries,
        "verify_s": round(secs(verify), 3),
        "verify_records_per_s": per_s(n, verify),
        "verify_ok": verification.ok,
    }))
}

// ------------------------------------------------------------------ output

fn print_tables(writer: &[Value], query: Option<&Value>) {
    let cell = |v: &Value| v.as_str().map_or_else(|| v.to_string(), str::to_owned);
    if !writer.is_empty() {
        println!("\naudit writer (records redacted, encoded and chained by the pushing threads)");
        println!(
            "{:>11}{:>8}{:>9}{:>10}{:>9}{:>14}{:>10}{:>16}{:>10}{:>9}",
            "durability",
            "queue",
            "threads",
            "records",
            "push s",
            "push rec/s",
            "total s",
            "sustained rec/s",
            "dropped",
            "chain"
        );
        for r in writer {
            let chain = if r["chain_ok"] == true {
                "ok"
            } else {
                "BROKEN"
            };
            println!(
                "{:>11}{:>8}{:>9}{:>10}{:>9}{:>14}{:>10}{:>16}{:>10}{:>9}",
                cell(&r["durability"]),
                cell(&r["queue"]),
                cell(&r["threads"]),
                cell(&r["records"]),
                cell(&r["push_s"]),
                cell(&r["push_records_per_s"]),
                cell(&r["total_s"]),
                cell(&r["sustained_records_per_s"]),
                cell(&r["dropped"]),
                chain
            );
        }
    }
    if let Some(q) = query {
        println!(
            "\naudit queries over {} records in blocks of {} ({} upstreams, {} h; built in {} s, {} rec/s, {} MiB on disk)",
            q["records"],
            q["block_records"],
            q["upstreams"],
            q["span_h"],
            q["build_s"],
            q["build_records_per_s"],
            q["disk_mib"]
        );
        println!(
            "{:<40}{:>6}{:>12}{:>10}{:>10}{:>10}",
            "query", "runs", "median ms", "min ms", "max ms", "first ms"
        );
        for s in q["queries"].as_array().into_iter().flatten() {
            println!(
                "{:<40}{:>6}{:>12}{:>10}{:>10}{:>10}",
                cell(&s["query"]),
                cell(&s["runs"]),
                cell(&s["median_ms"]),
                cell(&s["min_ms"]),
                cell(&s["max_ms"]),
                cell(&s["first_ms"])
            );
        }
        println!(
            "verify over {} records: {} s ({} rec/s), ok: {}",
            q["records"], q["verify_s"], q["verify_records_per_s"], q["verify_ok"]
        );
    }
}

fn run() -> Res<()> {
    let args = parse_args()?;
    let writer = if args.skip_writer {
        Vec::new()
    } else {
        writer_bench(&args)?
    };
    let query = if args.skip_query || args.query_records == 0 {
        None
    } else {
        Some(query_bench(&args)?)
    };
    if args.json {
        println!("{}", json!({ "writer": writer, "query": query }));
    } else {
        print_tables(&writer, query.as_ref());
    }
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("audit bench: error: {e}");
            ExitCode::FAILURE
        }
    }
}
