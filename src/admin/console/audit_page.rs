//! The console's audit page: the filters of `mcpmux audit query` as a form, a record in full,
//! the chain's verification, and the matching records as CSV or JSON lines. Every address is
//! below the session's path; what a host chose (a tool, a method) is only ever in a query string,
//! encoded.

use std::convert::Infallible;
use std::sync::Arc;

use axum::Extension;
use axum::extract::{Path, Query, RawQuery, State};
use axum::http::{StatusCode, Uri, header};
use axum::response::sse::Event;
use axum::response::{Html, IntoResponse, Response};
use maud::{Markup, html};
use serde::{Deserialize, Serialize};

use super::super::{AdminState, SYNC_DEADLINE, read_store};
use super::events::{Pace, live};
use super::pages::{Signed, page, time_of};
use crate::audit::{FilterArgs, Page, Record, csv_cell, now_us};

/// Query-string fields left empty by the form are no filter.
fn filled(mut args: FilterArgs) -> FilterArgs {
    let clear = |v: &mut Option<String>| {
        if v.as_deref().is_some_and(|s| s.trim().is_empty()) {
            *v = None;
        }
    };
    for field in [
        &mut args.since,
        &mut args.from,
        &mut args.to,
        &mut args.upstream,
        &mut args.tool,
        &mut args.method,
        &mut args.session,
        &mut args.principal,
        &mut args.profile,
        &mut args.outcome,
        &mut args.trace_id,
        &mut args.cursor,
    ] {
        clear(field);
    }
    args
}

pub(super) async fn audit(
    State(admin): State<Arc<AdminState>>,
    Extension(signed): Extension<Signed>,
    Query(args): Query<FilterArgs>,
) -> Html<String> {
    let mut args = filled(args);
    args.limit = Some(args.limit.unwrap_or(50).clamp(1, 500));
    args.newest_first = Some(true);
    let asked = args.clone();
    let page_of = read_store(&admin, move |store| {
        Ok(store.query(&asked.to_filter(now_us())?)?)
    })
    .await;
    let text = |v: &Option<String>| v.clone().unwrap_or_default();
    let query_without_cursor = {
        let mut a = args.clone();
        a.cursor = None;
        a.newest_first = None;
        form_urlencoded::Serializer::new(String::new())
            .extend_pairs(a.to_query())
            .finish()
    };
    // The first page of a query open to the future follows the log live.
    let tail = match (&page_of, &args.cursor, &args.to) {
        (Ok(page), None, None) => {
            let after = (page.records.first()).map_or_else(
                || crate::audit::cursor_at(now_us(), 0),
                crate::audit::cursor_after,
            );
            let after = form_urlencoded::Serializer::new(String::new())
                .append_pair("after", &after)
                .finish();
            Some(format!(
                "{}audit/tail?{query_without_cursor}&{after}",
                signed.base
            ))
        }
        _ => None,
    };
    let body = html! {
        form.grid method="get" action={ (signed.base) "audit" } {
            label { "Since" input type="text" name="since" placeholder="1h, 2d" value=(text(&args.since)); }
            label { "From" input type="text" name="from" placeholder="2026-12-01T10:00:00Z" value=(text(&args.from)); }
            label { "To" input type="text" name="to" value=(text(&args.to)); }
            label { "Host" input type="text" name="principal" value=(text(&args.principal)); }
            label { "Upstream" input type="text" name="upstream" value=(text(&args.upstream)); }
            label { "Tool or URI" input type="text" name="tool" value=(text(&args.tool)); }
            label { "Method" input type="text" name="method" value=(text(&args.method)); }
            label { "Outcome"
                select name="outcome" {
                    @for (value, name) in [("", "any"), ("ok", "ok"), ("error", "error"), ("tool_error", "tool error"), ("info", "event")] {
                        option value=(value) selected[args.outcome.as_deref().unwrap_or_default() == value] { (name) }
                    }
                }
            }
            label { "Trace id" input type="text" name="trace_id" value=(text(&args.trace_id)); }
            div.actions {
                button type="submit" { "Query" }
                a href={ (signed.base) "audit/export?format=csv&" (query_without_cursor) } { "Export CSV" }
                a href={ (signed.base) "audit/export?format=json&" (query_without_cursor) } { "Export JSON" }
                a href={ (signed.base) "audit/verify" } { "Verify the chain" }
            }
        }
        @match &page_of {
            Err((_, error)) => p.error role="alert" { (error) },
            Ok(Page { records, next_cursor }) => {
                p { (records.len()) " records, newest first." }
                @if tail.is_some() {
                    p #tail-status role="status" aria-live="polite" { "New records appear at the top as they are written." }
                }
                (records_table(&signed.base, records, tail.as_deref()))
                @if let Some(next) = next_cursor {
                    @let next = form_urlencoded::Serializer::new(String::new()).append_pair("cursor", next).finish();
                    a href={ (signed.base) "audit?" (query_without_cursor) "&" (next) } { "Older records" }
                }
            }
        }
    };
    page("audit", "Audit log", Some(&signed), None, body)
}

/// A record's cells after its number, as the records table and the live tail show them.
fn cells(r: &Record) -> [String; 7] {
    let text = |v: &Option<String>| v.clone().unwrap_or_default();
    let outcome = match r.error_code {
        Some(code) => format!("{} ({code})", r.outcome.as_str()),
        None => r.outcome.as_str().to_owned(),
    };
    let latency = r
        .latency_us
        .map(|l| format!("{:.2} ms", l as f64 / 1000.0))
        .unwrap_or_default();
    [
        time_of(r.ts_us),
        text(&r.principal),
        r.method.clone(),
        text(&r.upstream),
        text(&r.target),
        outcome,
        latency,
    ]
}

/// Where a record's page is, below the session's path `base`.
fn record_href(base: &str, r: &Record) -> String {
    format!("{base}audit/record/{}-{}", r.ts_us, r.seq)
}

/// The records, newest first; `tail` (the live tail's address) makes the page add what is
/// recorded from now on at the top.
fn records_table(base: &str, records: &[Record], tail: Option<&str>) -> Markup {
    html! {
        table #records data-tail=[tail] {
            thead { tr {
                th scope="col" { "#" } th scope="col" { "Time" } th scope="col" { "Host" }
                th scope="col" { "Method" } th scope="col" { "Upstream" } th scope="col" { "Target" }
                th scope="col" { "Outcome" } th scope="col" { "Latency" }
            } }
            tbody {
                @for r in records {
                    tr {
                        th scope="row" { a href=(record_href(base, r)) { "Record " (r.seq) } }
                        @for cell in cells(r) { td { (cell) } }
                    }
                }
            }
        }
    }
}

/// How many records one tail event carries at most (a busier log is followed a second behind).
const TAIL_BATCH: usize = 200;

/// One record as the live tail sends it.
#[derive(Debug, Serialize)]
struct TailRow {
    href: String,
    seq: u64,
    cells: [String; 7],
}

/// The query's `key`, and the filter in the rest of it. They are read apart: serde's `flatten`
/// cannot read a number (`limit`) from a query string.
fn filter_and(raw: Option<&str>, key: &str) -> Result<(Option<String>, FilterArgs), BadQuery> {
    let mut value = None;
    let pairs = form_urlencoded::parse(raw.unwrap_or_default().as_bytes()).filter(|(k, v)| {
        let ours = k == key;
        if ours {
            value = Some(v.clone().into_owned());
        }
        !ours
    });
    let rest = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish();
    let uri: Uri = format!("/?{rest}").parse()?;
    let Query(args) = Query::<FilterArgs>::try_from_uri(&uri)?;
    Ok((value, args))
}

/// A query string the console cannot read.
#[derive(Debug, thiserror::Error)]
pub(super) enum BadQuery {
    #[error(transparent)]
    Uri(#[from] axum::http::uri::InvalidUri),
    #[error("{}", .0.body_text())]
    Filter(#[from] axum::extract::rejection::QueryRejection),
}

/// The live tail an open audit page listens to: `GET /console/audit/tail`, a server-sent event
/// `records` with the records matching the page's filters written since the last one. At its
/// [`Pace`] (each [`super::events::TICK`] while records come, less often while none do) it compares
/// the count of queued records; only when that moved does it query the store (twice: a record
/// queued just before is indexed within the writer's sync interval). It begins with a query, for
/// what was written between the page and its stream. The stream ends with the session.
pub(super) async fn audit_tail(
    State(admin): State<Arc<AdminState>>,
    Extension(signed): Extension<Signed>,
    RawQuery(query): RawQuery,
) -> Response {
    let Some(store) = admin.audit.store().cloned() else {
        let why = "the audit log is turned off (audit.enabled = false)";
        return (StatusCode::NOT_FOUND, why).into_response();
    };
    // `after`: the cursor after the newest record the page shows (none: from now on).
    let (after, args) = match filter_and(query.as_deref(), "after") {
        Ok(asked) => asked,
        Err(why) => return (StatusCode::BAD_REQUEST, why.to_string()).into_response(),
    };
    let mut args = filled(args);
    args.cursor = None;
    args.newest_first = None;
    args.limit = Some(TAIL_BATCH);
    let mut filter = match args.to_filter(now_us()) {
        Ok(filter) => filter,
        Err(e) => return (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    };
    match after {
        Some(after) => filter.cursor = Some(after),
        None => filter.from_us = Some(filter.from_us.unwrap_or(0).max(now_us())),
    }
    let seen = admin.audit.queued();
    let session = (signed.id, signed.base);
    let state = (admin, session, store, filter, seen, 2u8, Pace::default());
    let stream = futures_util::stream::unfold(state, |mut state| async move {
        let (admin, (id, base), store, filter, seen, pending, pace) = &mut state;
        loop {
            tokio::time::sleep(pace.wait()).await;
            if !admin.console.sessions.is_open(id) {
                return None;
            }
            let queued = admin.audit.queued();
            pace.looked(queued != *seen);
            if queued != *seen {
                *seen = queued;
                *pending = 2;
            }
            if *pending == 0 {
                continue;
            }
            *pending -= 1;
            let (asked, store) = (filter.clone(), store.clone());
            let Ok(Ok(page)) = tokio::task::spawn_blocking(move || store.query(&asked)).await
            else {
                continue;
            };
            let Some(last) = page.records.last() else {
                continue;
            };
            filter.cursor = Some(crate::audit::cursor_after(last));
            if page.next_cursor.is_some() {
                *pending = (*pending).max(1);
            }
            let rows: Vec<TailRow> = (page.records.iter())
                .map(|r| TailRow {
                    href: record_href(base, r),
                    seq: r.seq,
                    cells: cells(r),
                })
                .collect();
            let data = serde_json::to_string(&rows).unwrap_or_default();
            let event = Event::default().event("records").data(data);
            return Some((Ok::<_, Infallible>(event), state));
        }
    });
    live(stream)
}

/// Which record a record's page shows: `{ts_us}-{seq}`.
#[derive(Debug, Deserialize)]
pub(super) struct RecordAt {
    at: String,
}

pub(super) async fn audit_record(
    State(admin): State<Arc<AdminState>>,
    Extension(signed): Extension<Signed>,
    Path(RecordAt { at }): Path<RecordAt>,
) -> Response {
    let Some((ts, seq)) = at
        .split_once('-')
        .and_then(|(t, s)| Some((t.parse::<u64>().ok()?, s.parse::<u64>().ok()?)))
    else {
        return (StatusCode::NOT_FOUND, "no such record").into_response();
    };
    let found = read_store(&admin, move |store| {
        let filter = crate::audit::Filter {
            from_us: Some(ts),
            to_us: Some(ts.saturating_add(1)),
            limit: Some(1000),
            ..crate::audit::Filter::default()
        };
        let page = store.query(&filter)?;
        Ok(page.records.into_iter().find(|r| r.seq == seq))
    })
    .await;
    let body = match found {
        Ok(Some(record)) => html! {
            p { "Recorded " (time_of(record.ts_us)) "." }
            pre { (serde_json::to_string_pretty(&record).unwrap_or_default()) }
            a href={ (signed.base) "audit" } { "Back to the audit log" }
        },
        Ok(None) => html! { p.error role="alert" { "No record " (seq) " at that time." } },
        Err((_, error)) => html! { p.error role="alert" { (error) } },
    };
    page(
        "audit",
        &format!("Audit record {seq}"),
        Some(&signed),
        None,
        body,
    )
    .into_response()
}

pub(super) async fn audit_verify(
    State(admin): State<Arc<AdminState>>,
    Extension(signed): Extension<Signed>,
) -> Html<String> {
    let verified = read_store(&admin, |store| Ok(store.verify()?)).await;
    let body = match verified {
        Ok(report) => html! {
            p role="status" { "The chain verifies." }
            pre { (serde_json::to_string_pretty(&report).unwrap_or_default()) }
        },
        Err((_, error)) => html! { p.error role="alert" { "The chain does not verify: " (error) } },
    };
    page("audit", "Audit chain", Some(&signed), None, body)
}

/// The matching records as a download (CSV or JSON lines), oldest first: streamed a page at a
/// time as a blocking task reads them, so an export of any size holds one page in memory.
pub(super) async fn audit_export(
    State(admin): State<Arc<AdminState>>,
    RawQuery(query): RawQuery,
) -> Response {
    let (format, args) = match filter_and(query.as_deref(), "format") {
        Ok(asked) => asked,
        Err(why) => return (StatusCode::BAD_REQUEST, why.to_string()).into_response(),
    };
    let csv = format.as_deref() == Some("csv");
    let mut args = filled(args);
    args.newest_first = None;
    let mut filter = match args.to_filter(now_us()) {
        Ok(filter) => filter,
        Err(why) => return (StatusCode::BAD_REQUEST, why.to_string()).into_response(),
    };
    filter.limit = Some(crate::audit::MAX_PAGE);
    let audit = admin.audit.clone();
    let Some(store) = audit.store().cloned() else {
        let why = "the audit log is turned off (audit.enabled = false)";
        return (StatusCode::NOT_FOUND, why).into_response();
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<String, std::io::Error>>(2);
    tokio::task::spawn_blocking(move || {
        audit.sync(SYNC_DEADLINE);
        if csv {
            let head = "seq,time,principal,profile,method,upstream,target,outcome,error_code,latency_us,trace_id\n";
            if tx.blocking_send(Ok(head.to_owned())).is_err() {
                return;
            }
        }
        loop {
            let page = match store.query(&filter) {
                Ok(page) => page,
                Err(e) => {
                    let _ = tx.blocking_send(Err(std::io::Error::other(e.to_string())));
                    return;
                }
            };
            let mut out = String::new();
            for r in &page.records {
                if csv {
                    out.push_str(&csv_line(r));
                } else {
                    out.push_str(&serde_json::to_string(r).unwrap_or_default());
                    out.push('\n');
                }
            }
            // The browser went away: nothing more to read.
            if tx.blocking_send(Ok(out)).is_err() {
                return;
            }
            match page.next_cursor {
                Some(next) => filter.cursor = Some(next),
                None => return,
            }
        }
    });
    let (kind, file) = match csv {
        true => ("text/csv; charset=utf-8", "mcpmux-audit.csv"),
        false => ("application/x-ndjson", "mcpmux-audit.jsonl"),
    };
    let disposition = format!("attachment; filename=\"{file}\"");
    let pages = tokio_stream::wrappers::ReceiverStream::new(rx);
    (
        [
            (header::CONTENT_TYPE, kind.to_owned()),
            (header::CONTENT_DISPOSITION, disposition),
        ],
        axum::body::Body::from_stream(pages),
    )
        .into_response()
}

/// One record as a CSV row; every text cell through [`csv_cell`] (no formula, quoted as needed).
fn csv_line(r: &Record) -> String {
    let field = csv_cell;
    let text = |v: &Option<String>| field(v.as_deref().unwrap_or_default());
    format!(
        "{},{},{},{},{},{},{},{},{},{},{}\n",
        r.seq,
        time_of(r.ts_us),
        text(&r.principal),
        text(&r.profile),
        field(&r.method),
        text(&r.upstream),
        text(&r.target),
        r.outcome.as_str(),
        r.error_code.map(|c| c.to_string()).unwrap_or_default(),
        r.latency_us.map(|l| l.to_string()).unwrap_or_default(),
        text(&r.trace_id),
    )
}
