//! The command line: `serve`, `stdio`, `check`, `tools`, `status`, `restart`, `audit`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::config::{self, Config};

mod audit;

#[derive(Debug, Parser)]
#[command(
    name = "mcpmux",
    version,
    about = "Aggregates many MCP servers into one endpoint"
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Log as JSON lines instead of human-readable text.
    #[arg(long, global = true)]
    log_json: bool,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the daemon.
    Serve {
        /// Config file: TOML, or an `mcpServers` JSON file (default: config/mcpmux.toml, then ~/.config/mcpmux/mcpmux.toml, /etc/mcpmux/mcpmux.toml).
        #[arg(long, env = "MCPMUX_CONFIG")]
        config: Option<PathBuf>,
        /// Listen address (overrides `server.listen`), e.g. 127.0.0.1:7332; port 0 picks a free port.
        #[arg(long)]
        listen: Option<std::net::SocketAddr>,
        /// Admin API address (overrides `admin.listen`); port 0 picks a free port.
        #[arg(long)]
        admin: Option<std::net::SocketAddr>,
        /// State directory (overrides `state_dir`; the audit store lives in <dir>/audit).
        #[arg(long, env = "MCPMUX_STATE_DIR")]
        state_dir: Option<PathBuf>,
    },
    /// Show every upstream's state, version, catalog and last error (from the running daemon).
    Status {
        #[arg(long, env = "MCPMUX_CONFIG")]
        config: Option<PathBuf>,
        /// The admin API (default: from the config's `admin.listen`).
        #[arg(long, env = "MCPMUX_ADMIN")]
        admin: Option<String>,
        /// Print the raw JSON.
        #[arg(long)]
        json: bool,
    },
    /// Restart one upstream now (also takes it out of crash-loop).
    Restart {
        /// The upstream's name.
        name: String,
        #[arg(long, env = "MCPMUX_CONFIG")]
        config: Option<PathBuf>,
        #[arg(long, env = "MCPMUX_ADMIN")]
        admin: Option<String>,
    },
    /// Bridge stdin/stdout to the running daemon (for hosts that only start stdio servers).
    Stdio {
        #[arg(long, env = "MCPMUX_CONFIG")]
        config: Option<PathBuf>,
        /// The daemon's endpoint (default: derived from the config's `server.listen`).
        #[arg(long, env = "MCPMUX_URL")]
        url: Option<String>,
    },
    /// Validate the config and print its upstreams.
    Check {
        #[arg(long, env = "MCPMUX_CONFIG")]
        config: Option<PathBuf>,
    },
    /// Query, tail, summarize or verify the audit log.
    Audit {
        #[command(subcommand)]
        command: Box<audit::AuditCommand>,
    },
    /// Print the merged tool catalog of the running daemon.
    Tools {
        #[arg(long, env = "MCPMUX_CONFIG")]
        config: Option<PathBuf>,
        #[arg(long, env = "MCPMUX_URL")]
        url: Option<String>,
    },
}

impl Cli {
    /// Runs the command; errors are printed for people, the exit code says failure.
    pub fn run(self) -> ExitCode {
        let level = if matches!(self.command, Command::Serve { .. }) {
            "info"
        } else {
            "warn"
        };
        crate::telemetry::init(level, self.log_json);
        match self.execute() {
            Ok(code) => code,
            Err(e) => {
                eprintln!("mcpmux: {e:#}");
                ExitCode::FAILURE
            }
        }
    }

    fn execute(self) -> anyhow::Result<ExitCode> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?;
        match self.command {
            Command::Serve {
                config,
                listen,
                admin,
                state_dir,
            } => {
                let mut config = load(config)?;
                if let Some(listen) = listen {
                    config.server.listen = listen;
                }
                if admin.is_some() {
                    config.admin = admin;
                }
                if let Some(dir) = state_dir {
                    config.audit.dir = dir.join("audit");
                }
                runtime.block_on(crate::daemon::serve(config))?;
                Ok(ExitCode::SUCCESS)
            }
            Command::Stdio { config, url } => {
                let url = match url {
                    Some(url) => url,
                    None => load(config)?.endpoint_url(),
                };
                runtime.block_on(crate::downstream::stdio::run(url))?;
                Ok(ExitCode::SUCCESS)
            }
            Command::Check { config } => {
                let config = load(config)?;
                print!("{}", upstream_table(&config));
                Ok(ExitCode::SUCCESS)
            }
            Command::Status {
                config,
                admin,
                json,
            } => {
                let admin = admin_url(admin, config)?;
                let status = runtime
                    .block_on(admin_call(reqwest::Method::GET, format!("{admin}/status")))?;
                if json {
                    println!("{status}");
                } else {
                    print!("{}", status_table(&status));
                }
                Ok(ExitCode::SUCCESS)
            }
            Command::Restart {
                name,
                config,
                admin,
            } => {
                let admin = admin_url(admin, config)?;
                runtime.block_on(admin_call(
                    reqwest::Method::POST,
                    format!("{admin}/upstreams/{name}/restart"),
                ))?;
                println!("restarted {name}");
                Ok(ExitCode::SUCCESS)
            }
            Command::Audit { command } => {
                let ok = runtime.block_on(audit::run(*command))?;
                Ok(if ok {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                })
            }
            Command::Tools { config, url } => {
                let url = match url {
                    Some(url) => url,
                    None => load(config)?.endpoint_url(),
                };
                let rows = runtime.block_on(list_tools(url))?;
                print!("{}", table(&["TOOL", "DESCRIPTION"], &rows));
                Ok(ExitCode::SUCCESS)
            }
        }
    }
}

fn load(path: Option<PathBuf>) -> anyhow::Result<Config> {
    let path = match path {
        Some(p) => p,
        None => config::default_path()?,
    };
    Ok(config::load(&path)?)
}

/// The admin API's base URL: `--admin`, else the config's `admin.listen`.
fn admin_url(admin: Option<String>, config: Option<PathBuf>) -> anyhow::Result<String> {
    if let Some(admin) = admin {
        return Ok(if admin.contains("://") {
            admin
        } else {
            format!("http://{admin}")
        });
    }
    match load(config)?.admin {
        Some(addr) => Ok(format!("http://{addr}")),
        None => anyhow::bail!(
            "the admin API is turned off in the config (admin.listen = \"off\"); pass --admin ADDR"
        ),
    }
}

async fn admin_call(method: reqwest::Method, url: String) -> anyhow::Result<serde_json::Value> {
    let response = reqwest::Client::new()
        .request(method, &url)
        .send()
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "the mcpmux admin API is not reachable at {url}: {e} (is `mcpmux serve` running?)"
            )
        })?;
    let status = response.status();
    let body: serde_json::Value =
        serde_json::from_str(&response.text().await.unwrap_or_default()).unwrap_or_default();
    if !status.is_success() {
        anyhow::bail!("{}", body["error"].as_str().unwrap_or(status.as_str()));
    }
    Ok(body)
}

fn status_table(status: &serde_json::Value) -> String {
    let rows: Vec<Vec<String>> = status["upstreams"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|u| {
            let text = |k: &str| {
                u[k].as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| u[k].to_string())
            };
            vec![
                text("name"),
                text("state"),
                u["protocol_version"].as_str().unwrap_or("-").to_owned(),
                text("tools"),
                text("restarts"),
                text("in_flight"),
                u["last_error"]
                    .as_str()
                    .unwrap_or("")
                    .chars()
                    .take(90)
                    .collect(),
            ]
        })
        .collect();
    let mut out = format!(
        "mcpmux {} — {} host sessions, catalog generation {}\n",
        status["version"].as_str().unwrap_or("?"),
        status["sessions"],
        status["catalog_generation"]
    );
    out.push_str(&table(
        &[
            "UPSTREAM",
            "STATE",
            "VERSION",
            "TOOLS",
            "RESTARTS",
            "IN-FLIGHT",
            "LAST ERROR",
        ],
        &rows,
    ));
    out
}

fn upstream_table(config: &Config) -> String {
    let rows: Vec<Vec<String>> = config
        .upstreams
        .iter()
        .map(|u| {
            let command = std::iter::once(u.command.as_str())
                .chain(u.args.iter().map(String::as_str))
                .collect::<Vec<_>>()
                .join(" ");
            vec![
                u.name.clone(),
                u.prefix.to_string(),
                if u.enabled { "yes".into() } else { "no".into() },
                if program_exists(&u.command) {
                    "found".into()
                } else {
                    "NOT FOUND".into()
                },
                format!("{}s", u.policy.request_timeout.as_secs()),
                command,
            ]
        })
        .collect();
    let mut out = format!(
        "config {} is valid; listening on {}\n",
        config.source.display(),
        config.server.listen
    );
    out.push_str(&table(
        &[
            "UPSTREAM", "PREFIX", "ENABLED", "PROGRAM", "TIMEOUT", "COMMAND",
        ],
        &rows,
    ));
    out
}

/// Whether `command` names an existing file, directly or on PATH.
fn program_exists(command: &str) -> bool {
    if command.contains('/') {
        return std::path::Path::new(command).is_file();
    }
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(command).is_file()))
}

async fn list_tools(url: String) -> anyhow::Result<Vec<Vec<String>>> {
    let mut session = crate::client::HttpSession::new(url);
    session.initialize().await?;
    let mut rows = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let params = match &cursor {
            Some(c) => serde_json::json!({ "cursor": c }),
            None => serde_json::json!({}),
        };
        let page = session.request("tools/list", params).await?;
        for tool in page["tools"].as_array().into_iter().flatten() {
            let description = tool["description"]
                .as_str()
                .unwrap_or_default()
                .lines()
                .next()
                .unwrap_or_default();
            let description: String = description.chars().take(80).collect();
            rows.push(vec![
                tool["name"].as_str().unwrap_or_default().to_owned(),
                description,
            ]);
        }
        match page["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    session.end().await;
    Ok(rows)
}

/// A plain left-aligned text table.
fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        padded.join("  ").trim_end().to_owned() + "\n"
    };
    let mut out = line(headers.to_vec());
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}
