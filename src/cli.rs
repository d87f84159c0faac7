//! The command line: `serve`, `stdio`, `check`, `tools`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::config::{self, Config};

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
            Command::Serve { config, listen } => {
                let mut config = load(config)?;
                if let Some(listen) = listen {
                    config.server.listen = listen;
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
