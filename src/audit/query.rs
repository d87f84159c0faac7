//! Reading the audit log: filtered, time-ordered pages with a cursor, and per-upstream/tool
//! statistics. The most selective index (upstream, tool, session, else time) drives the scan, so a
//! time range with an upstream filter reads only that upstream's records in that range.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};

use super::record::{Ended, Record};
use super::store::{IndexField, Store, StoreError, block_key, index_prefix, lines};

/// Most records one page holds.
pub const MAX_PAGE: usize = 10_000;

/// What to look for. Every set field must match.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Filter {
    /// Inclusive lower bound, µs since the Unix epoch.
    pub from_us: Option<u64>,
    /// Exclusive upper bound, µs since the Unix epoch.
    pub to_us: Option<u64>,
    pub upstream: Option<String>,
    /// The tool, prompt or URI (as hosts see it).
    pub tool: Option<String>,
    pub method: Option<String>,
    pub session: Option<String>,
    pub principal: Option<String>,
    pub profile: Option<String>,
    /// `ok`, `error`, `tool_error` or `info`.
    pub outcome: Option<String>,
    pub min_latency_us: Option<u64>,
    /// The trace the request belonged to (its W3C trace id, hex).
    #[serde(default)]
    pub trace_id: Option<String>,
    /// Continue after this position (a page's `next_cursor`).
    pub cursor: Option<String>,
    /// Records per page (default 100, at most [`MAX_PAGE`]).
    pub limit: Option<usize>,
    /// Newest first (for `tail`); the cursor then continues towards older records.
    #[serde(default)]
    pub newest_first: bool,
}

/// One page of matching records, oldest first.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Page {
    pub records: Vec<Record>,
    /// Where the next page starts; absent on the last page.
    pub next_cursor: Option<String>,
}

/// (upstream, target): what statistics are grouped by.
type Group = (Option<String>, Option<String>);

/// Counts and latencies for one (upstream, target).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StatRow {
    pub upstream: Option<String>,
    pub target: Option<String>,
    pub calls: u64,
    pub errors: u64,
    pub p50_us: u64,
    pub p99_us: u64,
}

impl Filter {
    fn matches(&self, r: &Record) -> bool {
        let eq = |want: &Option<String>, have: &Option<String>| {
            want.as_ref().is_none_or(|w| have.as_ref() == Some(w))
        };
        self.from_us.is_none_or(|f| r.ts_us >= f)
            && self.to_us.is_none_or(|t| r.ts_us < t)
            && eq(&self.upstream, &r.upstream)
            && eq(&self.tool, &r.target)
            && eq(&self.session, &r.session)
            && eq(&self.principal, &r.principal)
            && eq(&self.profile, &r.profile)
            && self.method.as_ref().is_none_or(|m| *m == r.method)
            && self
                .outcome
                .as_ref()
                .is_none_or(|o| o == r.outcome.as_str())
            && self
                .min_latency_us
                .is_none_or(|min| r.latency_us.is_some_and(|l| l >= min))
            && eq(&self.trace_id, &r.trace_id)
    }
}

/// The cursor that continues after `record`.
pub fn cursor_after(record: &Record) -> String {
    cursor_at(record.ts_us, record.seq)
}

/// The cursor that continues after the record `seq` at `ts_us` (oldest first: with what was
/// recorded after it; `seq` 0 precedes every record of its microsecond).
pub fn cursor_at(ts_us: u64, seq: u64) -> String {
    URL_SAFE_NO_PAD.encode(block_key(ts_us, seq))
}

fn decode_cursor(cursor: &str) -> Option<(u64, u64)> {
    let bytes = URL_SAFE_NO_PAD.decode(cursor).ok()?;
    let ts = u64::from_be_bytes(bytes.get(..8)?.try_into().ok()?);
    let seq = u64::from_be_bytes(bytes.get(8..16)?.try_into().ok()?);
    Some((ts, seq))
}

/// Why a query was refused.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    #[error("invalid cursor: use the next_cursor of a previous page")]
    Cursor,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why a read of the log failed: the filter people wrote (their fix), or the store (ours).
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error(transparent)]
    Filter(#[from] FilterError),
    #[error(transparent)]
    Query(#[from] QueryError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl ReadError {
    /// Whether the asker can fix it (a filter or cursor of theirs), rather than the store failed.
    pub fn is_asked_wrong(&self) -> bool {
        matches!(self, Self::Filter(_) | Self::Query(QueryError::Cursor))
    }
}

impl Store {
    /// One page of records matching `filter`, oldest first.
    pub fn query(&self, filter: &Filter) -> Result<Page, QueryError> {
        let limit = filter.limit.unwrap_or(100).clamp(1, MAX_PAGE);
        let mut records = Vec::with_capacity(limit.min(1024));
        let mut next_cursor = None;
        self.scan(filter, |record| {
            if records.len() == limit {
                next_cursor = records.last().map(cursor_after);
                return false;
            }
            records.push(record);
            true
        })?;
        Ok(Page {
            records,
            next_cursor,
        })
    }

    /// Calls, errors and p50/p99 latency per (upstream, target) over every matching request.
    pub fn stats(&self, filter: &Filter) -> Result<Vec<StatRow>, QueryError> {
        let mut groups: BTreeMap<Group, (u64, Vec<u64>)> = BTreeMap::new();
        self.scan(filter, |r| {
            if r.outcome != Ended::Info {
                let entry = groups
                    .entry((r.upstream.clone(), r.target.clone()))
                    .or_default();
                entry.0 += u64::from(matches!(r.outcome, Ended::Error | Ended::ToolError));
                entry.1.push(r.latency_us.unwrap_or(0));
            }
            true
        })?;
        Ok(groups
            .into_iter()
            .map(|((upstream, target), (errors, mut latencies))| {
                latencies.sort_unstable();
                let at = |q: f64| {
                    latencies
                        .get(((latencies.len() as f64 - 1.0) * q).round() as usize)
                        .copied()
                        .unwrap_or(0)
                };
                StatRow {
                    upstream,
                    target,
                    calls: latencies.len() as u64,
                    errors,
                    p50_us: at(0.50),
                    p99_us: at(0.99),
                }
            })
            .collect())
    }

    /// Visits matching records in time order (or newest first) until `visit` returns false.
    /// Blocks are found through the most selective index (upstream, tool, session) or the block
    /// tree itself, starting at the block that holds the first time of interest.
    fn scan(
        &self,
        filter: &Filter,
        mut visit: impl FnMut(Record) -> bool,
    ) -> Result<(), QueryError> {
        let after = match &filter.cursor {
            Some(c) => Some(decode_cursor(c).ok_or(QueryError::Cursor)?),
            None => None,
        };
        let mut lo = filter.from_us.unwrap_or(0);
        let mut hi = filter.to_us.unwrap_or(u64::MAX);
        match (after, filter.newest_first) {
            (Some((ts, _)), false) => lo = lo.max(ts),
            (Some((ts, _)), true) => hi = hi.min(ts.saturating_add(1)),
            (None, _) => {}
        }
        if lo > hi {
            return Ok(());
        }
        let index = if let Some(u) = &filter.upstream {
            Some((IndexField::Upstream, u))
        } else if let Some(t) = &filter.tool {
            Some((IndexField::Tool, t))
        } else {
            filter.session.as_ref().map(|s| (IndexField::Session, s))
        };
        let (tree, prefix) = match index {
            Some((field, value)) => (self.index(), index_prefix(field, value)),
            None => (self.blocks(), Vec::new()),
        };
        let key = |ts: u64, seq: u64| [prefix.as_slice(), &block_key(ts, seq)].concat();
        // The block holding `lo` may start before it: begin at the last block starting at or before it.
        let start = tree
            .range(key(0, 0)..=key(lo, u64::MAX))
            .next_back()
            .transpose()
            .map_err(StoreError::from)?
            .map_or_else(|| key(lo, 0), |(k, _)| k.to_vec());
        let range = tree.range(start..=key(hi, u64::MAX));
        let keys: Box<dyn Iterator<Item = sled::Result<(sled::IVec, sled::IVec)>>> =
            if filter.newest_first {
                Box::new(range.rev())
            } else {
                Box::new(range)
            };
        let past = |r: &Record| match after {
            Some(at) if filter.newest_first => (r.ts_us, r.seq) >= at,
            Some(at) => (r.ts_us, r.seq) <= at,
            None => false,
        };
        for entry in keys {
            let (k, v) = entry.map_err(StoreError::from)?;
            // A block retention removed meanwhile is skipped.
            let block = if index.is_some() {
                self.block(&k[prefix.len()..])?
            } else {
                self.read_live(&k, &v)?
            };
            let Some(block) = block else { continue };
            // Decoded a line at a time: a page that fills early leaves the rest of the block
            // (a busy gateway's blocks hold a sync interval's records) unread.
            let lines: Box<dyn Iterator<Item = &[u8]>> = if filter.newest_first {
                Box::new(lines(&block).rev())
            } else {
                Box::new(lines(&block))
            };
            for line in lines {
                let record: Record = serde_json::from_slice(line).map_err(StoreError::from)?;
                if !past(&record) && filter.matches(&record) && !visit(record) {
                    return Ok(());
                }
            }
        }
        Ok(())
    }
}

/// Why a filter as people write it means nothing.
#[derive(Debug, thiserror::Error)]
pub enum FilterError {
    #[error("`{text}` is neither a span like 1h nor a time like 2026-11-29T10:00:00Z: {source}")]
    Time {
        text: String,
        source: humantime::TimestampError,
    },
    #[error("`{0}` is before 1970; give a later time")]
    BeforeEpoch(String),
    #[error("unknown outcome `{0}`: use ok, error, tool_error or info")]
    Outcome(String),
}

/// Parses `--since`-style spans ("90s", "15m", "1h", "2d") and RFC 3339 times into µs.
pub fn parse_time(text: &str, now_us: u64) -> Result<u64, FilterError> {
    if let Ok(span) = humantime::parse_duration(text) {
        return Ok(now_us.saturating_sub(u64::try_from(span.as_micros()).unwrap_or(u64::MAX)));
    }
    humantime::parse_rfc3339_weak(text)
        .map_err(|source| FilterError::Time {
            text: text.to_owned(),
            source,
        })?
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
        .map_err(|_| FilterError::BeforeEpoch(text.to_owned()))
}

/// A filter as people write it (CLI flags, admin query strings): times as spans or RFC 3339.
/// The CLI flattens it into `audit query`, `tail` and `stats`; the doc comments are its help.
#[derive(Debug, Clone, Default, Serialize, Deserialize, clap::Args)]
#[serde(deny_unknown_fields)]
pub struct FilterArgs {
    /// Only records newer than this span, e.g. 1h, 30m, 2d.
    #[arg(long)]
    pub since: Option<String>,
    /// From this time (RFC 3339, e.g. 2026-11-29T10:00:00Z, or a span ago).
    #[arg(long)]
    pub from: Option<String>,
    /// Until this time (exclusive).
    #[arg(long)]
    pub to: Option<String>,
    #[arg(long)]
    pub upstream: Option<String>,
    /// The tool, prompt or URI as hosts see it (e.g. memory__read_graph).
    #[arg(long)]
    pub tool: Option<String>,
    #[arg(long)]
    pub method: Option<String>,
    #[arg(long)]
    pub session: Option<String>,
    /// The host (principal) that made the request.
    #[arg(long, visible_alias = "host")]
    pub principal: Option<String>,
    /// The profile the host saw the catalog through.
    #[arg(long)]
    pub profile: Option<String>,
    /// ok, error, tool_error or info.
    #[arg(long)]
    pub outcome: Option<String>,
    /// Only requests that took at least this long.
    #[arg(long)]
    pub min_latency_ms: Option<u64>,
    /// The trace a request belonged to (its trace id, 32 hex digits).
    #[arg(long)]
    pub trace_id: Option<String>,
    /// Continue after this position (the CLI has its own `--cursor`).
    #[arg(skip)]
    pub cursor: Option<String>,
    /// Records per page (the CLI has its own `--limit`).
    #[arg(skip)]
    pub limit: Option<usize>,
    /// Newest first (the first page of `tail`).
    #[arg(skip)]
    pub newest_first: Option<bool>,
}

impl FilterArgs {
    /// The filter these arguments mean, `now_us` being now.
    pub fn to_filter(&self, now_us: u64) -> Result<Filter, FilterError> {
        let time = |t: &Option<String>| t.as_deref().map(|t| parse_time(t, now_us)).transpose();
        let from_us = match (time(&self.since)?, time(&self.from)?) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        if let Some(outcome) = &self.outcome {
            if !["ok", "error", "tool_error", "info"].contains(&outcome.as_str()) {
                return Err(FilterError::Outcome(outcome.clone()));
            }
        }
        Ok(Filter {
            from_us,
            to_us: time(&self.to)?,
            upstream: self.upstream.clone(),
            tool: self.tool.clone(),
            method: self.method.clone(),
            session: self.session.clone(),
            principal: self.principal.clone(),
            profile: self.profile.clone(),
            outcome: self.outcome.clone(),
            min_latency_us: self.min_latency_ms.map(|ms| ms.saturating_mul(1000)),
            trace_id: self.trace_id.clone(),
            cursor: self.cursor.clone(),
            limit: self.limit,
            newest_first: self.newest_first.unwrap_or(false),
        })
    }

    /// The arguments as URL query pairs (for the admin API).
    pub fn to_query(&self) -> Vec<(&'static str, String)> {
        let mut q = Vec::new();
        let mut put = |k: &'static str, v: &Option<String>| {
            if let Some(v) = v {
                q.push((k, v.clone()));
            }
        };
        put("since", &self.since);
        put("from", &self.from);
        put("to", &self.to);
        put("upstream", &self.upstream);
        put("tool", &self.tool);
        put("method", &self.method);
        put("session", &self.session);
        put("principal", &self.principal);
        put("profile", &self.profile);
        put("outcome", &self.outcome);
        put("trace_id", &self.trace_id);
        put("cursor", &self.cursor);
        put(
            "min_latency_ms",
            &self.min_latency_ms.map(|v| v.to_string()),
        );
        put("limit", &self.limit.map(|v| v.to_string()));
        put("newest_first", &self.newest_first.map(|v| v.to_string()));
        q
    }
}
