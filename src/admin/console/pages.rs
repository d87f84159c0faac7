//! The console's pages and the actions their forms post. A page is read from what the admin API
//! reads; an action does what its admin API route does, then leads back to its page with a notice.
//! Every address is below the session's own path ([`Signed::base`]); what names an upstream or a
//! tool is a form field, never a part of a path (a tool named `x/../../restart` stays a name).

use std::sync::Arc;

use axum::Extension;
use axum::extract::{Form, Query, State};
use axum::http::header;
use axum::response::{Html, IntoResponse, Redirect, Response};
use maud::{DOCTYPE, Markup, html};
use serde::Deserialize;

use super::super::{AdminState, status_of};
use super::session::ConsoleSession;
use crate::mcp::ListKind;

/// The signed-in session a page is shown to (its CSRF token goes into every form).
#[derive(Debug, Clone)]
pub struct Signed {
    pub id: String,
    pub session: ConsoleSession,
    /// Where the session's pages are (`/console/s/<key>/`): every address a page writes starts so.
    pub base: String,
}

/// The console's pages (below [`Signed::base`]), in the order the navigation lists them.
const PAGES: [(&str, &str); 6] = [
    ("", "Overview"),
    ("catalog", "Catalog"),
    ("hosts", "Hosts"),
    ("audit", "Audit"),
    ("pins", "Pins"),
    ("config", "Config"),
];

/// A page: the navigation (marking `here`, a page of [`PAGES`]), the sign-out form, the notice
/// if any, `body`.
pub(super) fn page(
    here: &str,
    title: &str,
    signed: Option<&Signed>,
    notice: Option<&str>,
    body: Markup,
) -> Html<String> {
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · mcpmux" }
                link rel="stylesheet" href="/console/assets/console.css";
                script src="/console/assets/console.js" defer {}
            }
            body {
                a.skip href="#main" { "Skip to content" }
                header {
                    p.brand { "mcpmux" }
                    @if let Some(signed) = signed {
                        nav aria-label="Console" {
                            ul {
                                @for (href, name) in PAGES {
                                    li {
                                        @if href == here {
                                            a href={ (signed.base) (href) } aria-current="page" { (name) }
                                        } @else {
                                            a href={ (signed.base) (href) } { (name) }
                                        }
                                    }
                                }
                            }
                        }
                        (action(signed, "logout", &[], "Sign out"))
                    }
                }
                main id="main" {
                    h1 { (title) }
                    @if let Some(notice) = notice {
                        p.notice role="status" { (notice) }
                    }
                    (body)
                }
            }
        }
    };
    Html(markup.into_string())
}

pub(super) fn csrf(signed: &Signed) -> Markup {
    html! { input type="hidden" name="csrf" value=(signed.session.csrf); }
}

/// A button that posts `fields` (and the session's CSRF token) to `to`, a path below the
/// session's. Names go as fields, never into the path.
pub(super) fn action(signed: &Signed, to: &str, fields: &[(&str, &str)], label: &str) -> Markup {
    html! {
        form.inline method="post" action={ (signed.base) (to) } {
            (csrf(signed))
            @for (name, value) in fields {
                input type="hidden" name=(name) value=(value);
            }
            button type="submit" { (label) }
        }
    }
}

/// Back to the page `to` (below the session's path) after an action, saying what happened.
pub(super) fn done(signed: &Signed, to: &str, notice: &str) -> Response {
    let query = form_urlencoded::Serializer::new(String::new())
        .append_pair("notice", notice)
        .finish();
    Redirect::to(&format!("{}{to}?{query}", signed.base)).into_response()
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct Notice {
    pub(super) notice: Option<String>,
}

// ---------------------------------------------------------------------------------------------
// Catalog: what each profile's hosts see, searchable.

#[derive(Debug, Default, Deserialize)]
pub(super) struct CatalogAsked {
    profile: Option<String>,
    query: Option<String>,
}

pub(super) async fn catalog(
    State(admin): State<Arc<AdminState>>,
    Extension(signed): Extension<Signed>,
    Query(asked): Query<CatalogAsked>,
) -> Response {
    let views = admin.router.views();
    let profile = asked.profile.filter(|p| !p.is_empty());
    let Some(view) = views.named(profile.as_deref()).cloned() else {
        let notice = format!("No profile {} is configured.", profile.unwrap_or_default());
        return done(&signed, "catalog", &notice);
    };
    let profiles: Vec<String> = (admin.router.views().all())
        .filter_map(|v| v.profile_name().map(str::to_owned))
        .collect();
    let query = asked.query.filter(|q| !q.trim().is_empty());
    let tools = view.list(ListKind::Tools);
    let shown: Vec<(usize, Option<String>)> = match &query {
        Some(query) => {
            let view = Arc::clone(&view);
            let query = query.clone();
            let hits = tokio::task::spawn_blocking(move || view.tool_index().search(&query, 50))
                .await
                .unwrap_or_default();
            hits.into_iter()
                .map(|h| (h.tool, Some(h.matched.join(", "))))
                .collect()
        }
        None => (0..tools.len()).map(|i| (i, None)).collect(),
    };
    let body = html! {
        form.row method="get" action={ (signed.base) "catalog" } role="search" {
            label for="profile" { "View" }
            select #profile name="profile" {
                option value="" selected[profile.is_none()] { "The whole catalog" }
                @for name in &profiles {
                    option value=(name) selected[profile.as_deref() == Some(name.as_str())] { "Profile " (name) }
                }
            }
            label for="query" { "Search tools" }
            input #query type="search" name="query" value=(query.clone().unwrap_or_default());
            button type="submit" { "Show" }
        }
        p { (tools.len()) " tools in this view; "
            (view.list(ListKind::Prompts).len()) " prompts, "
            (view.list(ListKind::Resources).len()) " resources, "
            (view.list(ListKind::ResourceTemplates).len()) " resource templates." }
        @for (i, matched) in &shown {
            @if let Some(entry) = tools.get(*i) {
                @let definition: serde_json::Value = serde_json::from_str(entry.json.get()).unwrap_or_default();
                details.tool {
                    summary {
                        code { (entry.exposed) } " — "
                        (definition["description"].as_str().unwrap_or_default().lines().next().unwrap_or_default())
                        @if let Some(matched) = matched { " " span.matched { "(matches " (matched) ")" } }
                    }
                    p { "Upstream " code { (entry.upstream.name()) } ", its name " code { (entry.original) } }
                    pre { (serde_json::to_string_pretty(&definition).unwrap_or_default()) }
                }
            }
        }
    };
    page("catalog", "Catalog", Some(&signed), None, body).into_response()
}

// ---------------------------------------------------------------------------------------------
// Hosts and sessions.

pub(super) async fn hosts(
    State(admin): State<Arc<AdminState>>,
    Extension(signed): Extension<Signed>,
) -> Html<String> {
    let status = status_of(&admin);
    let mut sessions = (admin.sessions)();
    sessions.sort_by_key(|s| s.age_seconds);
    let or_dash = |v: Option<String>| v.unwrap_or_else(|| "–".to_owned());
    let body = html! {
        h2 { "Hosts" }
        @if status.hosts.is_empty() {
            p { "No [hosts] are configured: hosts are anonymous." }
        } @else {
            table {
                thead { tr {
                    th scope="col" { "Host" } th scope="col" { "Profile" } th scope="col" { "Sessions" }
                    th scope="col" { "In flight" } th scope="col" { "Requests" } th scope="col" { "Refused" }
                    th scope="col" { "Limits" }
                } }
                tbody {
                    @for host in &status.hosts {
                        tr {
                            th scope="row" { (host.name) }
                            td { (or_dash(host.profile.clone())) }
                            td { (host.sessions) }
                            td { (host.in_flight) }
                            td { (host.requests) }
                            td { (host.refused) }
                            td { "in flight " (or_dash(host.max_in_flight.map(|v| v.to_string())))
                                 ", calls/s " (or_dash(host.max_calls_per_second.map(|v| v.to_string())))
                                 ", sessions " (or_dash(host.max_sessions.map(|v| v.to_string()))) }
                        }
                    }
                }
            }
        }
        h2 { "Open sessions" }
        table {
            thead { tr {
                th scope="col" { "Session" } th scope="col" { "Host" } th scope="col" { "Profile" }
                th scope="col" { "Client" } th scope="col" { "Era" } th scope="col" { "Age" }
                th scope="col" { "In flight" }
            } }
            tbody {
                @for s in &sessions {
                    tr {
                        th scope="row" { code { (s.id) } }
                        td { (or_dash(s.principal.clone())) }
                        td { (or_dash(s.profile.clone())) }
                        td { (or_dash(s.client.clone())) " " (s.client_version.clone().unwrap_or_default()) }
                        td { (s.protocol_version) }
                        td { (s.age_seconds) " s" }
                        td { (s.in_flight) }
                    }
                }
            }
        }
    };
    page("hosts", "Hosts and sessions", Some(&signed), None, body)
}

// ---------------------------------------------------------------------------------------------
// Pins.

pub(super) async fn pins(
    State(admin): State<Arc<AdminState>>,
    Extension(signed): Extension<Signed>,
    Query(notice): Query<Notice>,
) -> Html<String> {
    let rows = admin.router.pins();
    let body = html! {
        @match &rows {
            None => p { "Pinning is off." },
            Some(rows) => {
                @let changed: Vec<_> = rows.iter().filter(|r| r.changed_to.is_some()).collect();
                h2 { "Changed since pinned" }
                @if changed.is_empty() {
                    p { "No tool definition changed since it was pinned." }
                } @else {
                    table {
                        thead { tr {
                            th scope="col" { "Upstream" } th scope="col" { "Tool" } th scope="col" { "Pinned" }
                            th scope="col" { "Now" } th scope="col" { "Changed" } th scope="col" { "Action" }
                        } }
                        tbody {
                            @for row in &changed {
                                tr {
                                    td { (row.upstream) }
                                    th scope="row" { (row.tool) }
                                    td { code { (short(&row.digest)) } }
                                    td { code { (short(row.changed_to.as_deref().unwrap_or_default())) } }
                                    td { (row.changed_us.map(time_of).unwrap_or_default()) }
                                    td { (action(&signed, "pins/approve", &[("upstream", &row.upstream), ("tool", &row.tool)], &format!("Approve {}", row.tool))) }
                                }
                            }
                        }
                    }
                    @for row in &changed {
                        (change_of(&admin, &row.upstream, &row.tool))
                    }
                }
                h2 { "Every pin" }
                table {
                    thead { tr { th scope="col" { "Upstream" } th scope="col" { "Tool" } th scope="col" { "Digest" } th scope="col" { "Pinned" } } }
                    tbody {
                        @for row in rows {
                            tr {
                                td { (row.upstream) }
                                th scope="row" { (row.tool) }
                                td { code { (short(&row.digest)) } }
                                td { (time_of(row.pinned_us)) }
                            }
                        }
                    }
                }
            }
        }
    };
    page(
        "pins",
        "Pins",
        Some(&signed),
        notice.notice.as_deref(),
        body,
    )
}

/// A changed tool's definition as pinned beside what it is now: the changed lines of each (its
/// JSON, keys sorted), with three lines of context.
fn change_of(admin: &AdminState, upstream: &str, tool: &str) -> Markup {
    let Some((Some(pinned), Some(now))) = admin.router.pin_change(upstream, tool) else {
        return html! {
            p { "The definition of " code { (upstream) "/" (tool) } " was pinned before mcpmux kept \
                 definitions: only its digests can be compared." }
        };
    };
    let pretty = |v: &serde_json::Value| serde_json::to_string_pretty(v).unwrap_or_default();
    let (pinned, now) = (pretty(&pinned), pretty(&now));
    let diff = similar::TextDiff::from_lines(&pinned, &now);
    let (old, new) = (diff.old_slices(), diff.new_slices());
    html! {
        h3 { "What changed in " code { (upstream) "/" (tool) } }
        table.diff {
            caption { "The pinned definition beside the one " (upstream) " lists now (− removed, + added)" }
            thead { tr { th scope="col" { "Pinned" } th scope="col" { "Now" } } }
            tbody {
                @for group in diff.grouped_ops(3) {
                    @for op in &group {
                        @let (left, right) = (op.old_range(), op.new_range());
                        @let tag = op.tag();
                        @for i in 0..left.len().max(right.len()) {
                            @let before = left.clone().nth(i).and_then(|l| old.get(l));
                            @let after = right.clone().nth(i).and_then(|r| new.get(r));
                            @let same = tag == similar::DiffTag::Equal;
                            tr {
                                td class=(if same { "same" } else { "del" }) {
                                    @if let Some(line) = before { (if same { "  " } else { "− " }) (line.trim_end()) }
                                }
                                td class=(if same { "same" } else { "ins" }) {
                                    @if let Some(line) = after { (if same { "  " } else { "+ " }) (line.trim_end()) }
                                }
                            }
                        }
                    }
                    tr.gap { td colspan="2" { "…" } }
                }
            }
        }
    }
}

/// A time in the audit log's and pins' microseconds, as people read it.
pub(super) fn time_of(ts_us: u64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_micros(ts_us);
    humantime::format_rfc3339_millis(at).to_string()
}

fn short(digest: &str) -> &str {
    digest.get(..16).unwrap_or(digest)
}

/// The tool a pin's approve button names.
#[derive(Debug, Deserialize)]
pub(super) struct PinForm {
    upstream: String,
    tool: String,
}

pub(super) async fn approve(
    State(admin): State<Arc<AdminState>>,
    Extension(signed): Extension<Signed>,
    Form(PinForm { upstream, tool }): Form<PinForm>,
) -> Response {
    match super::super::approve_pin(&admin, &upstream, &tool).await {
        Ok(()) => done(
            &signed,
            "pins",
            &format!("Approved the new definition of {upstream}/{tool}."),
        ),
        Err(why) => done(&signed, "pins", &why.to_string()),
    }
}

// ---------------------------------------------------------------------------------------------
// Config.

pub(super) async fn config(
    State(admin): State<Arc<AdminState>>,
    Extension(signed): Extension<Signed>,
    Query(notice): Query<Notice>,
) -> Html<String> {
    let status = admin.reloader.status();
    let keys = admin.reloader.secret_keys();
    let text =
        std::fs::read_to_string(&status.file).map(|text| crate::config::masked(&text, &keys));
    let body = html! {
        p { "File " code { (status.file) } ": " (status.reloads) " reloads applied, " (status.rejected) " refused." }
        (action(&signed, "reload", &[], "Reload the config"))
        h2 { "Last reload" }
        @match &status.last_reload {
            None => p { "None since the daemon started." },
            Some(last) => {
                @if let Some(error) = &last.error {
                    div.error role="alert" {
                        p { "Refused at " (last.at) " (" (last.trigger.clone().unwrap_or_default()) "); the running config is unchanged:" }
                        pre { (error) }
                    }
                } @else {
                    p { "Applied at " (last.at) " (" (last.trigger.clone().unwrap_or_default()) ")." }
                }
                @if let Some(changes) = &last.changes {
                    ul {
                        li { "Added: " (list(&changes.added)) }
                        li { "Removed: " (list(&changes.removed)) }
                        li { "Changed: " (list(&changes.changed)) }
                        li { "Needs a restart: " (list(&changes.restart_needed)) }
                    }
                }
            }
        }
        h2 { "The file" }
        p { "As it is on disk now, with what may be a secret masked: the values of " code { "env" } " and "
            code { "headers" } " and of keys that name a secret, header and secret arguments, and URLs' userinfo and query values." }
        @match &text {
            Ok(text) => pre.file { @for (i, line) in text.lines().enumerate() { span.line { span.number aria-hidden="true" { (i + 1) } (line) } "\n" } },
            Err(e) => p.error role="alert" { "Cannot read it: " (e) },
        }
    };
    page(
        "config",
        "Config",
        Some(&signed),
        notice.notice.as_deref(),
        body,
    )
}

fn list(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}

pub(super) async fn reload(
    State(admin): State<Arc<AdminState>>,
    Extension(signed): Extension<Signed>,
) -> Response {
    match admin.reloader.reload().await {
        Ok(_) => done(&signed, "config", "Reloaded."),
        Err(_) => done(&signed, "config", "The reload was refused; see why below."),
    }
}

// ---------------------------------------------------------------------------------------------
// Assets: ours, compiled in.

pub(super) async fn stylesheet() -> Response {
    asset(
        "text/css; charset=utf-8",
        include_str!("assets/console.css"),
    )
}

pub(super) async fn script() -> Response {
    asset(
        "text/javascript; charset=utf-8",
        include_str!("assets/console.js"),
    )
}

fn asset(kind: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        body,
    )
        .into_response()
}
