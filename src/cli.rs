//! The command line: `serve`, `stdio`, `check`, `tools`, `status`, `restart`, `audit`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::config::{self, Config};

mod admin;
mod audit;
mod render;

use admin::Admin;
use render::{status_table, tools_table, upstream_table};

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
                    config.set_state_dir(dir, true);
                }
                runtime.block_on(crate::daemon::serve(config))?;
                Ok(ExitCode::SUCCESS)
            }
            Command::Stdio { config, url } => {
                let url = match url {
                    Some(url) => url,
                    None => load(config)?.endpoint_url(),
                };
                runtime.block_on(crate::bridge::run(url))?;
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
                let admin = Admin::required(admin.as_deref(), config)?;
                let status: serde_json::Value =
                    runtime.block_on(admin.request(reqwest::Method::GET, "/status", &[]))?;
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
                let admin = Admin::required(admin.as_deref(), config)?;
                let path = format!("/upstreams/{name}/restart");
                runtime.block_on(admin.request::<serde_json::Value>(
                    reqwest::Method::POST,
                    &path,
                    &[],
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
                let tools = runtime.block_on(list_tools(url))?;
                print!("{}", tools_table(&tools));
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

/// Every tool of the daemon's merged catalog, following `nextCursor` to the last page.
async fn list_tools(url: String) -> anyhow::Result<Vec<serde_json::Value>> {
    let mut session = crate::bridge::daemon_client::HttpSession::new(url);
    session.initialize().await?;
    let mut tools = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let params = match &cursor {
            Some(c) => serde_json::json!({ "cursor": c }),
            None => serde_json::json!({}),
        };
        let mut page = session.request("tools/list", params).await?;
        if let Some(listed) = page["tools"].as_array_mut() {
            tools.append(listed);
        }
        match page["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    session.end().await;
    Ok(tools)
}
