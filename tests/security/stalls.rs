//! Nothing a caller or an upstream sends may stall everyone else, nor grow the daemon without
//! bound: a search query of megabytes, a tool description of hundreds of thousands of words, a
//! listing of a hundred megabytes, an answer nested 200 000 levels deep. Each is met while
//! another host pings the daemon, whose pings must stay prompt.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::{Client, Daemon, assert_upstream_error, poll_until, proc_kib, test_upstream};

/// How long a ping may take while the daemon deals with what another caller sent; a stalled
/// daemon takes seconds (the attacks this guards against took 6 to 7 s), a loaded machine a few
/// milliseconds.
const PROMPT: Duration = Duration::from_secs(2);

/// Runs `work` while `pinger` pings the daemon every 20 ms; `work`'s output and the slowest ping.
async fn while_pinging<T>(
    pinger: &Client,
    work: impl std::future::Future<Output = T>,
) -> (T, Duration) {
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let pings = async {
        let mut slowest = Duration::ZERO;
        while !done.load(std::sync::atomic::Ordering::Relaxed) {
            let started = Instant::now();
            let answer = pinger.request("ping", json!({})).await;
            assert!(answer.get("result").is_some(), "{answer}");
            slowest = slowest.max(started.elapsed());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        slowest
    };
    let work = async {
        let output = work.await;
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        output
    };
    tokio::join!(work, pings)
}

/// `n` distinct made-up words (none splits, none is a stop word).
fn distinct_words(n: usize) -> String {
    (0..n).map(|i| format!("zq{i}x ")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_search_query_of_megabytes_stalls_no_one() {
    let daemon = Daemon::start(&format!(
        "{}\n[profiles.finder]\ntools = \"search\"\npath = true\n",
        test_upstream("a", &["--tools", "200"])
    ));
    let other = Client::connect(&daemon.url).await;
    daemon
        .wait_for_tools(&other, |n| n.iter().any(|t| t == "a__tool_00199"))
        .await;
    let finder = Client::connect(&format!("{}/finder", daemon.url)).await;
    // 2 MiB of distinct words: the de-duplication that was quadratic in them took minutes.
    let query = distinct_words(230_000);
    assert!(query.len() > 2 << 20);
    let search = finder.request(
        "tools/call",
        json!({"name": "search_tools", "arguments": {"query": query}}),
    );
    let (answer, slowest) = while_pinging(&other, async {
        tokio::time::timeout(Duration::from_secs(30), search).await
    })
    .await;
    let answer = answer.expect("the search did not answer within 30 s");
    eprintln!("slowest ping during the search: {slowest:?}");
    assert!(
        slowest < PROMPT,
        "a ping took {slowest:?} during the search"
    );
    let result = &answer["result"];
    assert_eq!(result["isError"], true, "{answer}");
    let text = result["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("bytes long") && text.contains("4096"),
        "{text}"
    );
    // A query of a few words still finds.
    let found = finder
        .result(
            "tools/call",
            json!({"name": "search_tools", "arguments": {"query": "generated tool 42"}}),
        )
        .await;
    assert!(
        found["structuredContent"]["tools"][0]["name"].is_string(),
        "{found}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_description_of_a_million_bytes_stalls_no_one() {
    let daemon = Daemon::start(&format!(
        "{}\n[catalog]\nmax_definition_bytes = 4194304\n[profiles.finder]\ntools = \"search\"\npath = true\n",
        test_upstream("a", &[])
    ));
    let other = Client::connect(&daemon.url).await;
    daemon
        .wait_for_tools(&other, |n| n.iter().any(|t| t == "a__add_tool"))
        .await;
    let finder = Client::connect(&format!("{}/finder", daemon.url)).await;
    // A description of 200 000 distinct words: building the search index over it was quadratic,
    // on the runtime, at every list_changed.
    let description = format!("Finds the marigold. {}", distinct_words(200_000));
    let added = other.request(
        "tools/call",
        json!({"name": "a__add_tool", "arguments": {"name": "gardener", "description": description}}),
    );
    let (added, slowest) = while_pinging(&other, async {
        let added = added.await;
        // Listed (the catalog was rebuilt), then found by a search (the index was built).
        let listed = poll_until(Duration::from_secs(30), || async {
            let tools = other.list_all("tools/list", "tools").await;
            tools.iter().any(|t| t["name"] == "a__gardener")
        })
        .await;
        let found = finder
            .result(
                "tools/call",
                json!({"name": "search_tools", "arguments": {"query": "marigold"}}),
            )
            .await;
        (added, listed, found)
    })
    .await;
    let (added, listed, found) = added;
    assert!(added.get("result").is_some(), "{added}");
    assert!(listed, "the added tool was never listed");
    assert_eq!(
        found["structuredContent"]["tools"][0]["name"],
        "a__gardener",
        "{found}\n{}",
        daemon.stderr()
    );
    eprintln!("slowest ping while the huge tool was indexed: {slowest:?}");
    assert!(slowest < PROMPT, "a ping took {slowest:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_over_its_byte_budget_is_refused_clearly_and_memory_stays_bounded() {
    // 2 000 tools of 50 KB: a 100 MB listing, against the default budget of 16 MiB.
    let daemon = Daemon::start(&format!(
        "{}{}",
        test_upstream(
            "big",
            &[
                "--tools",
                "2000",
                "--tool-description-bytes",
                "51200",
                "--page-size",
                "100"
            ]
        ),
        test_upstream("small", &[]),
    ));
    let client = Client::connect(&daemon.url).await;
    daemon
        .wait_for_tools(&client, |n| n.iter().any(|t| t == "small__echo"))
        .await;
    let refused = poll_until(Duration::from_secs(60), || async {
        let status = daemon.upstream_status("big").await;
        status["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("max_bytes_per_upstream"))
    })
    .await;
    let status = daemon.upstream_status("big").await;
    assert!(
        refused,
        "the budget is not named: {status}\n{}",
        daemon.stderr()
    );
    assert_ne!(status["state"], "ready", "{status}");
    let tools = client.list_all("tools/list", "tools").await;
    assert!(
        !tools
            .iter()
            .any(|t| t["name"].as_str().unwrap().starts_with("big__")),
        "the over-budget listing was published"
    );
    let peak = proc_kib(daemon.pid(), "VmHWM").unwrap();
    eprintln!("daemon peak RSS: {peak} KiB");
    assert!(peak < 150 * 1024, "the daemon grew to {peak} KiB");
    let pins = std::fs::metadata(daemon.state_dir.join("pins.json")).map_or(0, |m| m.len());
    assert!(pins < 1 << 20, "pins.json is {pins} bytes");
    // The other upstream serves on.
    let answer = client
        .request(
            "tools/call",
            json!({"name": "small__echo", "arguments": {}}),
        )
        .await;
    assert!(answer.get("result").is_some(), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_nested_deeper_than_mcpmux_forwards_is_not_passed_on() {
    let daemon = Daemon::start(&test_upstream("deep", &["--fault-tools"]));
    let client = Client::connect(&daemon.url).await;
    daemon
        .wait_for_tools(&client, |n| n.iter().any(|t| t == "deep__deep"))
        .await;
    let call = |depth: u64| {
        client.request(
            "tools/call",
            json!({"name": "deep__deep", "arguments": {"depth": depth}}),
        )
    };
    let answer = call(200_000).await;
    let message = assert_upstream_error(&answer, -32010, "deep");
    assert!(message.contains("nested deeper than 128"), "{message}");
    // What nests no deeper than hosts may send passes as it is.
    let answer = call(100).await;
    let nested: Value = answer["result"]["structuredContent"]["deep"].clone();
    assert!(nested.is_array(), "{answer}");
    // The upstream was not restarted over it.
    let status = daemon.upstream_status("deep").await;
    assert_eq!(status["restarts"], 0, "{status}");
}

/// The size of the files under `dir`.
fn disk_bytes(dir: &std::path::Path) -> u64 {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_of_megabytes_do_not_flood_the_audit_log() {
    let daemon = Daemon::start(&format!(
        "[audit]\nmax_bytes = 65536\n\n{}",
        test_upstream("a", &[])
    ));
    let client = Client::connect(&daemon.url).await;
    daemon
        .wait_for_tools(&client, |n| n.iter().any(|t| t == "a__echo"))
        .await;
    let audit = daemon.state_dir.join("audit");
    let before = disk_bytes(&audit);
    // Forty calls of tools named with a megabyte each (each an unknown tool, each recorded).
    for n in 0..40 {
        let name = format!("a__{n}{}", "x".repeat(1 << 20));
        let answer = client
            .request("tools/call", json!({"name": name, "arguments": {}}))
            .await;
        assert_eq!(answer["error"]["code"], -32602, "call {n}");
    }
    let records: Vec<Value> = (daemon.audit_json().lines())
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|r: &Value| r["method"] == "tools/call")
        .collect();
    assert!(!records.is_empty(), "the calls were not recorded");
    for record in &records {
        let target = record["target"].as_str().unwrap_or_default();
        assert!(
            target.len() < 700,
            "a target of {} bytes was recorded",
            target.len()
        );
        assert!(target.contains("sha256"), "{target}");
    }
    let grown = disk_bytes(&audit).saturating_sub(before);
    eprintln!("the audit store grew by {grown} bytes");
    assert!(grown < 8 << 20, "the audit store grew by {grown} bytes");
    // 100 calls' records (with their index entries) cross audit.max_bytes of 64 KiB: the store
    // is brought back under it at once, not at the next minute.
    for n in 0..100 {
        let name = format!("a__{n}{}", "y".repeat(100 << 10));
        client
            .request("tools/call", json!({"name": name, "arguments": {}}))
            .await;
    }
    let pruned = poll_until(Duration::from_secs(10), || async {
        let status = daemon.status().await;
        status["audit"]["records"].as_u64().is_some_and(|n| n < 100)
    })
    .await;
    assert!(
        pruned,
        "over its budget, the store kept {}",
        daemon.status().await["audit"]
    );
}
