//! `mcpmux audit …`: query, tail, stats and verify the audit log — through the running daemon's
//! admin API, or directly on the store when the daemon is stopped (the store lets one process in).

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};
use reqwest::Method;

use super::admin::Admin;
use crate::audit::{
    FilterArgs, Page, Record, StatRow, Store, Verification, csv_cell, cursor_after, now_us,
};

#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Records matching the filters, oldest first, one page at a time.
    Query {
        #[command(flatten)]
        filter: FilterArgs,
        #[arg(long, value_enum, default_value = "table")]
        format: Format,
        /// Records per page.
        #[arg(long, default_value_t = 100)]
        limit: usize,
        /// Continue from a previous page's cursor.
        #[arg(long)]
        cursor: Option<String>,
        /// Print every page, not just the first.
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        access: Access,
    },
    /// The newest records; with -f, keep printing new ones.
    Tail {
        #[command(flatten)]
        filter: FilterArgs,
        /// How many of the newest records to start with.
        #[arg(short = 'n', long, default_value_t = 20)]
        lines: usize,
        /// Follow: print records as they are written.
        #[arg(short, long)]
        follow: bool,
        #[arg(long, value_enum, default_value = "table")]
        format: Format,
        #[command(flatten)]
        access: Access,
    },
    /// Calls, errors and p50/p99 latency per upstream and tool.
    Stats {
        #[command(flatten)]
        filter: FilterArgs,
        #[arg(long, value_enum, default_value = "table")]
        format: Format,
        #[command(flatten)]
        access: Access,
    },
    /// Walk the hash chain; report the first edited, missing or reordered record.
    Verify {
        #[command(flatten)]
        access: Access,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Format {
    Table,
    /// One JSON record per line.
    Json,
    Csv,
}

/// How to reach the log.
#[derive(Debug, Args)]
pub struct Access {
    #[arg(long, env = "MCPMUX_CONFIG")]
    config: Option<PathBuf>,
    /// The running daemon's admin API (default: from the config).
    #[arg(long, env = "MCPMUX_ADMIN")]
    admin: Option<String>,
    /// The state directory: its daemon is asked if one runs there, else its store is read
    /// directly.
    #[arg(long, env = "MCPMUX_STATE_DIR")]
    state_dir: Option<PathBuf>,
    /// Every replica of a cluster (their admin APIs, URL,URL,… or a headless service's name):
    /// `query` merges their chains by time, `verify` checks each chain.
    #[arg(long, env = "MCPMUX_REPLICAS")]
    replicas: Option<String>,
}

/// The running daemon, or the store itself.
enum Source {
    Admin(Admin),
    Store(Store),
}

impl Source {
    async fn open(access: &Access, token_file: Option<&Path>) -> anyhow::Result<Self> {
        // A daemon that runs owns the store: ask it (the one of --state-dir, if given).
        let admin = match &access.state_dir {
            Some(dir) => crate::locator::in_state_dir(dir).and_then(|r| {
                let file = token_file.map(Path::to_path_buf).or(r.admin_token_file);
                r.admin.map(|a| Admin::at(&a, file.as_deref()))
            }),
            None => Admin::configured(access.admin.as_deref(), access.config.clone(), token_file)
                .ok()
                .flatten(),
        };
        if let Some(admin) = admin {
            if admin.is_up().await {
                return Ok(Self::Admin(admin));
            }
        }
        let dir = match &access.state_dir {
            Some(dir) => dir.join("audit"),
            None => super::load(access.config.clone())?.audit.dir,
        };
        if !dir.exists() {
            anyhow::bail!(
                "no audit store at {} and no running daemon to ask",
                dir.display()
            );
        }
        Ok(Self::Store(crate::audit::open(&dir)?))
    }

    async fn query(&self, args: &FilterArgs) -> anyhow::Result<Page> {
        match self {
            Self::Admin(admin) => {
                admin
                    .request(Method::GET, "/audit/query", &args.to_query())
                    .await
            }
            Self::Store(store) => Ok(store.query(&args.to_filter(now_us())?)?),
        }
    }

    async fn stats(&self, args: &FilterArgs) -> anyhow::Result<Vec<StatRow>> {
        match self {
            Self::Admin(admin) => {
                admin
                    .request(Method::GET, "/audit/stats", &args.to_query())
                    .await
            }
            Self::Store(store) => Ok(store.stats(&args.to_filter(now_us())?)?),
        }
    }

    async fn verify(&self) -> anyhow::Result<Verification> {
        match self {
            Self::Admin(admin) => admin.request(Method::GET, "/audit/verify", &[]).await,
            Self::Store(store) => Ok(store.verify()?),
        }
    }
}

/// Runs one `audit` command; the exit status is failure when `verify` finds a break.
/// `token_file` is `--admin-token-file`, where the admin token is when not found otherwise.
// Long: one arm per `audit` subcommand, each short: the subcommands share how the store is
// reached.
pub async fn run(command: AuditCommand, token_file: Option<&Path>) -> anyhow::Result<bool> {
    match command {
        AuditCommand::Query {
            filter,
            format,
            limit,
            cursor,
            all,
            access,
        } => {
            if let Some(list) = &access.replicas {
                let replicas = super::fleet::replicas(list, token_file).await?;
                let merged = super::fleet::query(&replicas, &filter).await?;
                print_merged(&merged, format);
                return Ok(true);
            }
            let source = Source::open(&access, token_file).await?;
            let mut args = FilterArgs {
                limit: Some(limit),
                cursor,
                ..filter
            };
            let mut printer = Printer::new(format);
            loop {
                let page = source.query(&args).await?;
                printer.print(&page.records);
                match page.next_cursor {
                    Some(next) if all => args.cursor = Some(next),
                    Some(next) => {
                        if matches!(format, Format::Table) {
                            emit!("(more: --cursor {next})");
                        }
                        break;
                    }
                    None => break,
                }
            }
        }
        AuditCommand::Tail {
            filter,
            lines,
            follow,
            format,
            access,
        } => {
            one_replica(&access, "tail")?;
            let source = Source::open(&access, token_file).await?;
            let newest = FilterArgs {
                limit: Some(lines.max(1)),
                newest_first: Some(true),
                ..filter.clone()
            };
            let mut records = source.query(&newest).await?.records;
            records.reverse();
            let mut printer = Printer::new(format);
            printer.print(&records);
            let mut cursor = records.last().map(cursor_after);
            if !follow {
                return Ok(true);
            }
            loop {
                tokio::time::sleep(Duration::from_millis(500)).await;
                let args = FilterArgs {
                    limit: Some(1000),
                    cursor: cursor.clone(),
                    ..filter.clone()
                };
                let page = source.query(&args).await?;
                printer.print(&page.records);
                if let Some(last) = page.records.last() {
                    cursor = Some(cursor_after(last));
                }
            }
        }
        AuditCommand::Stats {
            filter,
            format,
            access,
        } => {
            one_replica(&access, "stats")?;
            let rows = Source::open(&access, token_file)
                .await?
                .stats(&filter)
                .await?;
            print_stats(&rows, format);
        }
        AuditCommand::Verify { access } => {
            if let Some(list) = &access.replicas {
                let replicas = super::fleet::replicas(list, token_file).await?;
                return super::fleet::verify(&replicas).await;
            }
            let v = Source::open(&access, token_file).await?.verify().await?;
            return Ok(match &v.first_break {
                None => {
                    emit!(
                        "ok: {} records verified (chain from #{})",
                        v.checked,
                        v.first_seq
                    );
                    true
                }
                Some(b) => {
                    emit!(
                        "BROKEN at record #{}: {} ({} records verified before it)",
                        b.seq,
                        b.problem,
                        v.checked
                    );
                    false
                }
            });
        }
    }
    Ok(true)
}

/// Prints a line; a closed stdout (`| head`) ends the program quietly instead of panicking.
macro_rules! emit {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if writeln!(std::io::stdout().lock(), $($arg)*).is_err() {
            std::process::exit(0);
        }
    }};
}
use emit;

/// `--replicas` is for `query` and `verify`: another subcommand given it says so rather than ask
/// one daemon quietly.
fn one_replica(access: &Access, command: &str) -> anyhow::Result<()> {
    if access.replicas.is_some() {
        anyhow::bail!(
            "`audit {command}` reads one daemon's log: pass --admin URL of one replica (--replicas works with `audit query` and `audit verify`)"
        );
    }
    Ok(())
}

/// Records of several replicas' chains, merged by time: as JSON lines each names its replica
/// (the admin API it came from); a table or CSV prints them as one log.
fn print_merged(merged: &[(String, Record)], format: Format) {
    if matches!(format, Format::Json) {
        for (at, record) in merged {
            let mut line = serde_json::to_value(record).unwrap_or_default();
            line["replica"] = serde_json::Value::String(at.clone());
            emit!("{line}");
        }
        return;
    }
    let records: Vec<Record> = merged.iter().map(|(_, r)| r.clone()).collect();
    Printer::new(format).print(&records);
}

struct Printer {
    format: Format,
    header_done: bool,
}

const COLUMNS: [&str; 10] = [
    "time",
    "seq",
    "session",
    "upstream",
    "method",
    "target",
    "outcome",
    "code",
    "latency_ms",
    "args",
];

impl Printer {
    fn new(format: Format) -> Self {
        Self {
            format,
            header_done: false,
        }
    }

    fn print(&mut self, records: &[Record]) {
        for r in records {
            let time = humantime::format_rfc3339_millis(
                std::time::UNIX_EPOCH + Duration::from_micros(r.ts_us),
            )
            .to_string();
            let cells = [
                time,
                r.seq.to_string(),
                r.session
                    .as_deref()
                    .map(|s| s.chars().take(8).collect())
                    .unwrap_or_default(),
                r.upstream.clone().unwrap_or_default(),
                r.method.clone(),
                r.target
                    .clone()
                    .or_else(|| r.detail.clone())
                    .unwrap_or_default(),
                r.outcome.as_str().to_owned(),
                r.error_code.map(|c| c.to_string()).unwrap_or_default(),
                r.latency_us
                    .map(|l| format!("{:.1}", l as f64 / 1000.0))
                    .unwrap_or_default(),
                r.args.as_ref().map(ToString::to_string).unwrap_or_default(),
            ];
            match self.format {
                Format::Json => emit!("{}", serde_json::to_string(r).unwrap_or_default()),
                Format::Csv => {
                    if !self.header_done {
                        emit!("{}", COLUMNS.join(","));
                    }
                    emit!(
                        "{}",
                        cells
                            .iter()
                            .map(|c| csv_cell(c))
                            .collect::<Vec<_>>()
                            .join(",")
                    );
                }
                Format::Table => {
                    if !self.header_done {
                        emit!(
                            "{:<24} {:>7} {:<8} {:<12} {:<16} {:<32} {:<10} {:>6} {:>9}",
                            "TIME",
                            "SEQ",
                            "SESSION",
                            "UPSTREAM",
                            "METHOD",
                            "TARGET",
                            "OUTCOME",
                            "CODE",
                            "MS"
                        );
                    }
                    let target: String = cells[5].chars().take(32).collect();
                    emit!(
                        "{:<24} {:>7} {:<8} {:<12} {:<16} {:<32} {:<10} {:>6} {:>9}",
                        cells[0],
                        cells[1],
                        cells[2],
                        cells[3],
                        cells[4],
                        target,
                        cells[6],
                        cells[7],
                        cells[8]
                    );
                }
            }
            self.header_done = true;
        }
    }
}

fn print_stats(rows: &[StatRow], format: Format) {
    match format {
        Format::Json => rows
            .iter()
            .for_each(|r| emit!("{}", serde_json::to_string(r).unwrap_or_default())),
        Format::Csv | Format::Table => {
            let sep = if matches!(format, Format::Csv) {
                ","
            } else {
                "  "
            };
            emit!(
                "{}",
                ["upstream", "target", "calls", "errors", "p50_ms", "p99_ms"].join(sep)
            );
            // A missing upstream or target: `-` in a table, an empty cell in CSV.
            let none = match format {
                Format::Csv => "",
                _ => "-",
            };
            for r in rows {
                let ms = |us: u64| format!("{:.2}", us as f64 / 1000.0);
                let cells = [
                    r.upstream.clone().unwrap_or_else(|| none.into()),
                    r.target.clone().unwrap_or_else(|| none.into()),
                    r.calls.to_string(),
                    r.errors.to_string(),
                    ms(r.p50_us),
                    ms(r.p99_us),
                ];
                // The upstream and target are chosen by the config, hosts and upstreams.
                let cells = match format {
                    Format::Csv => cells.iter().map(|c| csv_cell(c)).collect(),
                    _ => cells.to_vec(),
                };
                emit!("{}", cells.join(sep));
            }
        }
    }
}
