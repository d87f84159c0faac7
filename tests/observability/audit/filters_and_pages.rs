//! Sections 2 and 3, every filter returns exactly the records that match it; pages (admin cursors,
//! CLI `--limit`/`--cursor`/`--all`) cover the log once, in order; CSV and table output print every
//! record.

use serde_json::{Value, json};

use super::checks::assert_whole_log;
use super::reading::{
    admin_all, admin_page, cli_all, json_lines, mcpmux, mcpmux_ok, now_us, rfc3339, seqs, ts,
};
use super::three_upstreams;
use super::workload::run_workload;
use crate::common::Daemon;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filters_and_pages_return_exactly_the_matching_records() {
    let daemon = Daemon::start(&three_upstreams());
    let admin = daemon.admin();
    let w = run_workload(&daemon.url).await;
    let all = admin_all(&admin, &[]).await;
    assert_whole_log(&all);
    let (a, b) = (w.sessions[0].clone(), w.sessions[1].clone());

    // Time bounds taken from records: a third and two thirds in.
    let (lo, hi) = (ts(&all[all.len() / 3]), ts(&all[2 * all.len() / 3]));
    type Pred = Box<dyn Fn(&Value) -> bool>;
    let s = |v: &str| v.to_owned();
    let cases: Vec<(Vec<(&str, String)>, Pred)> = vec![
        (
            vec![("upstream", s("alpha"))],
            Box::new(|r| r["upstream"] == "alpha"),
        ),
        (
            vec![("upstream", s("beta"))],
            Box::new(|r| r["upstream"] == "beta"),
        ),
        (
            vec![("tool", s("alpha__echo"))],
            Box::new(|r| r["target"] == "alpha__echo"),
        ),
        (
            vec![("tool", s("alpha+test://alpha/hello"))],
            Box::new(|r| r["target"] == "alpha+test://alpha/hello"),
        ),
        (
            vec![("method", s("prompts/get"))],
            Box::new(|r| r["method"] == "prompts/get"),
        ),
        (
            vec![("method", s("session.opened"))],
            Box::new(|r| r["method"] == "session.opened"),
        ),
        (
            vec![("session", a.clone())],
            Box::new({
                let a = a.clone();
                move |r| r["session"] == json!(a)
            }),
        ),
        (
            vec![("session", b.clone())],
            Box::new({
                let b = b.clone();
                move |r| r["session"] == json!(b)
            }),
        ),
        (
            vec![("outcome", s("ok"))],
            Box::new(|r| r["outcome"] == "ok"),
        ),
        (
            vec![("outcome", s("error"))],
            Box::new(|r| r["outcome"] == "error"),
        ),
        (
            vec![("outcome", s("tool_error"))],
            Box::new(|r| r["outcome"] == "tool_error"),
        ),
        (
            vec![("outcome", s("info"))],
            Box::new(|r| r["outcome"] == "info"),
        ),
        (
            vec![("min_latency_ms", s("200"))],
            Box::new(|r| r["latency_us"].as_u64().is_some_and(|l| l >= 200_000)),
        ),
        (vec![("since", s("1h"))], Box::new(|_| true)),
        (vec![("from", rfc3339(lo))], Box::new(move |r| ts(r) >= lo)),
        (vec![("to", rfc3339(hi))], Box::new(move |r| ts(r) < hi)),
        (
            vec![("from", rfc3339(lo)), ("to", rfc3339(hi))],
            Box::new(move |r| ts(r) >= lo && ts(r) < hi),
        ),
        (
            vec![
                ("upstream", s("alpha")),
                ("from", rfc3339(lo)),
                ("to", rfc3339(hi)),
            ],
            Box::new(move |r| r["upstream"] == "alpha" && ts(r) >= lo && ts(r) < hi),
        ),
        (
            vec![("session", a.clone()), ("outcome", s("error"))],
            Box::new({
                let a = a.clone();
                move |r| r["session"] == json!(a) && r["outcome"] == "error"
            }),
        ),
        (
            vec![
                ("tool", s("alpha__slow")),
                ("method", s("tools/call")),
                ("min_latency_ms", s("100")),
            ],
            Box::new(|r| {
                r["target"] == "alpha__slow"
                    && r["latency_us"].as_u64().is_some_and(|l| l >= 100_000)
            }),
        ),
        (
            vec![("upstream", s("beta")), ("session", b.clone())],
            Box::new({
                let b = b.clone();
                move |r| r["upstream"] == "beta" && r["session"] == json!(b)
            }),
        ),
    ];
    for (filter, pred) in &cases {
        let want: Vec<u64> = seqs(&all.iter().filter(|r| pred(r)).cloned().collect::<Vec<_>>());
        assert!(
            !want.is_empty(),
            "{filter:?} matches nothing: a useless case"
        );
        let admin_got = seqs(&admin_all(&admin, filter).await);
        assert_eq!(admin_got, want, "admin API, filter {filter:?}");
        let cli_got = seqs(&cli_all(&admin, filter).await);
        assert_eq!(cli_got, want, "CLI, filter {filter:?}");
    }
    // Exactly the two 200 ms calls are that slow.
    let slow = admin_all(&admin, &[("min_latency_ms", s("200"))]).await;
    assert_eq!(slow.len(), 2, "{slow:#?}");
    assert!(slow.iter().all(|r| r["target"] == "alpha__slow"));

    // --since with a span ending in the gap before the first 200 ms call ended: the log splits there.
    let first_slow = all.iter().position(|r| r["seq"] == slow[0]["seq"]).unwrap();
    let boundary = ts(&all[first_slow - 1]) + 10_000;
    assert!(
        ts(&all[first_slow]) >= boundary + 150_000,
        "no gap to split at"
    );
    let want = seqs(&all[first_slow..]);
    let since = || format!("{}ms", (now_us() - boundary) / 1000);
    let since_admin = vec![("since", since())];
    assert_eq!(
        seqs(&admin_all(&admin, &since_admin).await),
        want,
        "admin API, {since_admin:?}"
    );
    let since_cli = vec![("since", since())];
    assert_eq!(
        seqs(&cli_all(&admin, &since_cli).await),
        want,
        "CLI, {since_cli:?}"
    );
    // A bad filter is refused with a message.
    let run = mcpmux(&["audit", "query", "--admin", &admin.url, "--outcome", "nope"]).await;
    assert!(!run.status.success(), "{run:?}");
    assert!(run.stderr.contains("unknown outcome"), "{run:?}");

    // 3. Pages of 7 through the admin API: every record once, in order.
    let mut paged = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut q = vec![("limit", s("7"))];
        if let Some(c) = &cursor {
            q.push(("cursor", c.clone()));
        }
        let page = admin_page(&admin, &q).await;
        let records = page["records"].as_array().unwrap();
        assert!(
            records.len() <= 7 && !records.is_empty(),
            "page {pages}: {page}"
        );
        paged.extend(records.iter().cloned());
        pages += 1;
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(pages, all.len().div_ceil(7));
    assert_eq!(seqs(&paged), seqs(&all), "pages of 7");
    assert_eq!(paged, all);
    // Pages of an index-driven filter.
    let mut paged = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut q = vec![("limit", s("3")), ("upstream", s("alpha"))];
        if let Some(c) = &cursor {
            q.push(("cursor", c.clone()));
        }
        let page = admin_page(&admin, &q).await;
        paged.extend(page["records"].as_array().unwrap().iter().cloned());
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    let alpha: Vec<Value> = all
        .iter()
        .filter(|r| r["upstream"] == "alpha")
        .cloned()
        .collect();
    assert_eq!(seqs(&paged), seqs(&alpha), "pages of 3 of upstream alpha");
    // A forged cursor is refused.
    let response = admin.get("/audit/query?cursor=garbage!").await;
    assert_eq!(response.status(), 400);

    // The CLI: --limit 7 --all (JSON), one page, pages followed by hand (table), CSV.
    let base = ["audit", "query", "--admin", &admin.url, "--limit", "7"];
    let cli_paged =
        json_lines(&mcpmux_ok(&[&base[..], &["--format", "json", "--all"]].concat()).await);
    assert_eq!(cli_paged, all, "CLI --limit 7 --all");
    let one = json_lines(&mcpmux_ok(&[&base[..], &["--format", "json"]].concat()).await);
    assert_eq!(seqs(&one), seqs(&all[..7]), "CLI --limit 7");

    let mut table_seqs = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..=all.len() {
        let mut args = base.to_vec();
        if let Some(c) = &cursor {
            args.extend(["--cursor", c.as_str()]);
        }
        let out = mcpmux_ok(&args).await;
        let mut lines = out.lines();
        let header = lines.next().unwrap();
        assert!(
            header.starts_with("TIME") && header.contains("SEQ") && header.contains("OUTCOME"),
            "{out}"
        );
        cursor = None;
        for line in lines {
            if let Some(c) = line.strip_prefix("(more: --cursor ") {
                cursor = Some(c.trim_end_matches(')').to_owned());
            } else {
                let seq = line.split_whitespace().nth(1).unwrap();
                table_seqs.push(seq.parse::<u64>().unwrap_or_else(|_| panic!("{line}")));
            }
        }
        if cursor.is_none() {
            break;
        }
    }
    assert_eq!(table_seqs, seqs(&all), "table pages");

    let out = mcpmux_ok(&[&base[..], &["--format", "csv", "--all"]].concat()).await;
    let rows = parse_csv(&out);
    assert_eq!(
        rows[0],
        [
            "time",
            "seq",
            "session",
            "upstream",
            "method",
            "target",
            "outcome",
            "code",
            "latency_ms",
            "args"
        ]
    );
    assert_eq!(
        rows.len(),
        all.len() + 1,
        "CSV: header + one row per record"
    );
    for (row, r) in rows[1..].iter().zip(&all) {
        assert_eq!(row.len(), 10, "{row:?}");
        assert_eq!(row[1], r["seq"].to_string(), "{row:?}");
        assert_eq!(row[4], r["method"].as_str().unwrap(), "{row:?}");
        assert_eq!(row[6], r["outcome"].as_str().unwrap(), "{row:?}");
        assert_eq!(
            row[7],
            r["error_code"]
                .as_i64()
                .map(|c| c.to_string())
                .unwrap_or_default()
        );
        if r["args"].is_object() {
            let args: Value = serde_json::from_str(&row[9]).unwrap();
            assert_eq!(args, r["args"], "{row:?}");
        }
    }
}

/// Rows of CSV text (quoted fields with doubled quotes; no field spans lines here).
fn parse_csv(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .map(|line| {
            let mut fields = Vec::new();
            let mut field = String::new();
            let mut quoted = false;
            let mut chars = line.chars().peekable();
            while let Some(c) = chars.next() {
                match (c, quoted) {
                    ('"', true) if chars.peek() == Some(&'"') => {
                        field.push('"');
                        chars.next();
                    }
                    ('"', true) => quoted = false,
                    ('"', false) if field.is_empty() => quoted = true,
                    (',', false) => fields.push(std::mem::take(&mut field)),
                    (c, _) => field.push(c),
                }
            }
            assert!(!quoted, "unterminated quote: {line}");
            fields.push(field);
            fields
        })
        .collect()
}
