//! The command line: `serve`, `stdio`, `check`, `tools`, `status`, `pins`, `approve`, `restart`,
//! `login`, `logout`, `audit`, `completions`, `man`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::api;
use crate::config::{self, Config};

mod admin;
mod audit_command;
mod fleet;
mod import;
mod login;
mod render;

use crate::mcp::method::Method;
use admin::Admin;
use render::{search_table, status_table, tools_table, upstream_table};

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
    /// The file holding the admin API's token (default: the one the running daemon's record
    /// names, else the config's admin.token_file or <state dir>/admin.token).
    #[arg(long, global = true, env = "MCPMUX_ADMIN_TOKEN_FILE")]
    admin_token_file: Option<PathBuf>,
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
        /// Admin API address (overrides `admin.listen`); port 0 picks a free port; `off` turns
        /// it off.
        #[arg(long, value_parser = parse_admin)]
        admin: Option<AdminListen>,
        /// State directory (overrides `state_dir`; the audit store lives in <dir>/audit).
        #[arg(long, env = "MCPMUX_STATE_DIR")]
        state_dir: Option<PathBuf>,
        /// This replica's name (overrides `[cluster] replica`): several replicas started from
        /// one config file on one machine.
        #[arg(long, env = "MCPMUX_REPLICA")]
        replica: Option<String>,
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
        /// Ask every replica of a cluster (their admin APIs, URL,URL,… or a headless
        /// service's name) and merge.
        #[arg(long, env = "MCPMUX_REPLICAS")]
        replicas: Option<String>,
    },
    /// List the pinned tool definitions, and the ones that changed since they were pinned.
    Pins {
        #[arg(long, env = "MCPMUX_CONFIG")]
        config: Option<PathBuf>,
        #[arg(long, env = "MCPMUX_ADMIN")]
        admin: Option<String>,
        /// Print the raw JSON.
        #[arg(long)]
        json: bool,
    },
    /// Approve a tool's changed definition (after reviewing it): it is pinned as it is now, and
    /// shown again where `pin = "strict"` withheld it.
    Approve {
        /// The upstream's name.
        upstream: String,
        /// The tool's name as the upstream knows it (unprefixed).
        tool: String,
        #[arg(long, env = "MCPMUX_CONFIG")]
        config: Option<PathBuf>,
        #[arg(long, env = "MCPMUX_ADMIN")]
        admin: Option<String>,
    },
    /// Make the running daemon read its config file again and apply what changed (as saving the
    /// file or SIGHUP do); prints what changed, or why the file was refused.
    Reload {
        #[arg(long, env = "MCPMUX_CONFIG")]
        config: Option<PathBuf>,
        #[arg(long, env = "MCPMUX_ADMIN")]
        admin: Option<String>,
    },
    /// List the open host sessions: who, which profile, how long open, requests in flight.
    Sessions {
        #[arg(long, env = "MCPMUX_CONFIG")]
        config: Option<PathBuf>,
        #[arg(long, env = "MCPMUX_ADMIN")]
        admin: Option<String>,
        /// Print the raw JSON.
        #[arg(long)]
        json: bool,
        /// Ask every replica of a cluster (their admin APIs, URL,URL,… or a headless
        /// service's name) and merge.
        #[arg(long, env = "MCPMUX_REPLICAS")]
        replicas: Option<String>,
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
    /// Sign in to a remote upstream that wants OAuth: prints the URL to open (and opens a
    /// browser where there is one), waits until the sign-in is done, then the upstream restarts.
    Login {
        /// The upstream's name.
        name: String,
        #[arg(long, env = "MCPMUX_CONFIG")]
        config: Option<PathBuf>,
        #[arg(long, env = "MCPMUX_ADMIN")]
        admin: Option<String>,
        /// Print the URL only; do not try to open a browser.
        #[arg(long)]
        no_browser: bool,
        /// A principal's own sign-in to a per-principal upstream: the host's name (or, with
        /// --issuer, a signed-in user's name). `login` prints a sign-in link for that principal
        /// (it proves who it is on the page); `logout` forgets its tokens.
        #[arg(long)]
        principal: Option<String>,
        /// With --principal: the issuer that signed the user in.
        #[arg(long, requires = "principal")]
        issuer: Option<String>,
    },
    /// Forget a remote upstream's OAuth tokens (it needs `mcpmux login` again).
    Logout {
        /// The upstream's name.
        name: String,
        #[arg(long, env = "MCPMUX_CONFIG")]
        config: Option<PathBuf>,
        #[arg(long, env = "MCPMUX_ADMIN")]
        admin: Option<String>,
        /// A principal's own sign-in to a per-principal upstream: the host's name (or, with
        /// --issuer, a signed-in user's name). `login` prints a sign-in link for that principal
        /// (it proves who it is on the page); `logout` forgets its tokens.
        #[arg(long)]
        principal: Option<String>,
        /// With --principal: the issuer that signed the user in.
        #[arg(long, requires = "principal")]
        issuer: Option<String>,
    },
    /// Bridge stdin/stdout to the running daemon (for hosts that only start stdio servers).
    Stdio {
        #[arg(long, env = "MCPMUX_CONFIG")]
        config: Option<PathBuf>,
        /// The daemon's endpoint (default: derived from the config's `server.listen`).
        #[arg(long, env = "MCPMUX_URL")]
        url: Option<String>,
        /// A file holding this host's bearer token, for a daemon with `[hosts]` (or set
        /// MCPMUX_TOKEN).
        #[arg(long, env = "MCPMUX_TOKEN_FILE")]
        token_file: Option<PathBuf>,
        /// Use the profile served at `/mcp/NAME` (one with `path = true`).
        #[arg(long, env = "MCPMUX_PROFILE")]
        profile: Option<String>,
    },
    /// Validate the config and print its upstreams.
    Check {
        #[arg(long, env = "MCPMUX_CONFIG")]
        config: Option<PathBuf>,
    },
    /// Query, tail, summarize or verify the audit log.
    Audit {
        #[command(subcommand)]
        command: Box<audit_command::AuditCommand>,
    },
    /// Print the merged tool catalog of the running daemon, or the tools that answer a search.
    Tools {
        #[arg(long, env = "MCPMUX_CONFIG")]
        config: Option<PathBuf>,
        #[arg(long, env = "MCPMUX_URL")]
        url: Option<String>,
        /// Print only the tools that answer these words best, best first, with the words each
        /// matched (a tool's exact name ranks it first): the search a `tools = "search"`
        /// profile's hosts run, through the admin API.
        #[arg(long, value_name = "WORDS")]
        search: Option<String>,
        /// With --search: how many tools to print.
        #[arg(long, default_value_t = 10, requires = "search")]
        limit: usize,
        /// With --search: search this profile's view (default: the whole catalog).
        #[arg(long, requires = "search")]
        profile: Option<String>,
        /// With --search: the admin API to ask.
        #[arg(long, env = "MCPMUX_ADMIN", requires = "search")]
        admin: Option<String>,
        /// With --search: print the raw JSON.
        #[arg(long, requires = "search")]
        json: bool,
    },
    /// Make an mcpmux config of a host's MCP servers (stdio and remote) and print the one entry
    /// that replaces them in the host's config.
    Import {
        /// The host whose config to read.
        host: import::Host,
        /// Its config file (default: where that host keeps it).
        path: Option<PathBuf>,
        /// The mcpmux config to write (default: ~/.config/mcpmux/mcpmux.toml).
        #[arg(long)]
        output: Option<PathBuf>,
        /// Print the config instead of writing it.
        #[arg(long)]
        dry_run: bool,
        /// Replace the output file if it exists.
        #[arg(long)]
        force: bool,
    },
    /// Print a shell completion script (e.g. `mcpmux completions bash > /etc/bash_completion.d/mcpmux`).
    Completions { shell: clap_complete::Shell },
    /// Print the man page (roff), e.g. `mcpmux man > /usr/local/share/man/man1/mcpmux.1`.
    Man,
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
                // A config error quotes the line it is about, which may hold a secret.
                let error = format!("{e:#}");
                let error = match crate::config::SecretKeys::defaults() {
                    Ok(keys) => crate::config::masked(&error, &keys),
                    Err(_) => error,
                };
                eprintln!("mcpmux: {error}");
                ExitCode::FAILURE
            }
        }
    }

    fn execute(self) -> anyhow::Result<ExitCode> {
        let token_file = self.admin_token_file.as_deref();
        match self.command {
            Command::Serve {
                config,
                listen,
                admin,
                state_dir,
                replica,
            } => {
                if let Some(name) = replica
                    .as_deref()
                    .filter(|n| !crate::config::is_replica_name(n))
                {
                    anyhow::bail!(
                        "--replica `{name}` is not a DNS label: use 1-63 letters, digits and inner hyphens"
                    );
                }
                let overrides = crate::daemon::reload::Overrides {
                    listen,
                    admin: admin.map(|AdminListen(a)| a),
                    state_dir,
                    replica,
                };
                serve(config, overrides)
            }
            Command::Stdio {
                config,
                url,
                token_file,
                profile,
            } => stdio(config, url, token_file, profile),
            Command::Check { config } => {
                let config = load(config)?;
                print!("{}", upstream_table(&config));
                Ok(ExitCode::SUCCESS)
            }
            Command::Import {
                host,
                path,
                output,
                dry_run,
                force,
            } => {
                let output = output.unwrap_or_else(default_import_output);
                print!("{}", import::run(host, path, &output, dry_run, force)?);
                Ok(ExitCode::SUCCESS)
            }
            Command::Completions { shell } => {
                let mut command = <Self as clap::CommandFactory>::command();
                let mut script = Vec::new();
                clap_complete::generate(shell, &mut command, "mcpmux", &mut script);
                print_bytes(&script)?;
                Ok(ExitCode::SUCCESS)
            }
            Command::Man => {
                let mut page = Vec::new();
                clap_mangen::Man::new(<Self as clap::CommandFactory>::command())
                    .render(&mut page)?;
                print_bytes(&page)?;
                Ok(ExitCode::SUCCESS)
            }
            asked => match fleet::command(asked, token_file)? {
                Ok(code) => Ok(code),
                Err(asked) => ask_daemon(asked, token_file),
            },
        }
    }
}

/// `serve`: the daemon, on a runtime of the config's `server.workers` threads.
fn serve(
    config: Option<PathBuf>,
    overrides: crate::daemon::reload::Overrides,
) -> anyhow::Result<ExitCode> {
    let mut config = load(config)?;
    overrides.apply(&mut config);
    let runtime = threads(Some(config.server.workers))?;
    runtime.block_on(crate::daemon::serve(config, overrides))?;
    Ok(ExitCode::SUCCESS)
}

/// `stdio`: the bridge from a stdio host to the running daemon (its URL from the config unless
/// given; a profile's path when one is named; the bearer token from `--token-file` or
/// `MCPMUX_TOKEN`).
fn stdio(
    config: Option<PathBuf>,
    url: Option<String>,
    token_file: Option<PathBuf>,
    profile: Option<String>,
) -> anyhow::Result<ExitCode> {
    let mut url = match url {
        Some(url) => url,
        None => admin::locate(config)?.url,
    };
    if let Some(profile) = profile {
        url = format!("{}/{profile}", url.trim_end_matches('/'));
    }
    let token = match token_file {
        Some(path) => Some(
            std::fs::read_to_string(&path)
                .map_err(|e| anyhow::anyhow!("cannot read --token-file {}: {e}", path.display()))?
                .trim()
                .to_owned(),
        ),
        None => std::env::var("MCPMUX_TOKEN").ok(),
    };
    threads(None)?.block_on(crate::bridge::run(url, token))?;
    Ok(ExitCode::SUCCESS)
}

/// Where `import` writes unless told: `$XDG_CONFIG_HOME/mcpmux/mcpmux.toml` (or under
/// `~/.config`).
fn default_import_output() -> PathBuf {
    let config = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))
        .unwrap_or_default();
    config.join("mcpmux/mcpmux.toml")
}

/// A command that asks the running daemon something, on one thread (the daemon's runtime is
/// sized by its config, once that is read): what it shows, or what it is asked to do.
fn ask_daemon(command: Command, token_file: Option<&std::path::Path>) -> anyhow::Result<ExitCode> {
    let runtime = || threads(Some(1));
    match command {
        Command::Status {
            config,
            admin,
            json,
            replicas: None,
        } => {
            let admin = Admin::required(admin.as_deref(), config, token_file)?;
            let status: api::Status =
                runtime()?.block_on(admin.request(reqwest::Method::GET, "/status", &[]))?;
            if json {
                println!("{}", serde_json::to_string(&status)?);
            } else {
                print!("{}", status_table(&status));
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Pins {
            config,
            admin,
            json,
        } => {
            let admin = Admin::required(admin.as_deref(), config, token_file)?;
            let pins: api::Pins =
                runtime()?.block_on(admin.request(reqwest::Method::GET, "/pins", &[]))?;
            show(&pins, json, render::pins)
        }
        Command::Sessions {
            config,
            admin,
            json,
            replicas: None,
        } => {
            let admin = Admin::required(admin.as_deref(), config, token_file)?;
            let answer: api::Sessions =
                runtime()?.block_on(admin.request(reqwest::Method::GET, "/sessions", &[]))?;
            show(&answer, json, |a| render::sessions_table(&a.sessions))
        }
        Command::Audit { command } => {
            let ok = runtime()?.block_on(audit_command::run(*command, token_file))?;
            Ok(if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Command::Tools {
            config,
            search: Some(words),
            limit,
            profile,
            admin,
            json,
            ..
        } => {
            let admin = Admin::required(admin.as_deref(), config, token_file)?;
            let mut query = vec![("query", words), ("limit", limit.to_string())];
            query.extend(profile.map(|p| ("profile", p)));
            let found: api::ToolSearch = runtime()?.block_on(admin.request(
                reqwest::Method::GET,
                "/tools/search",
                &query,
            ))?;
            show(&found, json, search_table)
        }
        Command::Tools { config, url, .. } => {
            let url = match url {
                Some(url) => url,
                None => admin::locate(config)?.url,
            };
            let tools = runtime()?.block_on(list_tools(url))?;
            print!("{}", tools_table(&tools));
            Ok(ExitCode::SUCCESS)
        }
        acted => act_on_daemon(acted, token_file),
    }
}

/// A command that has the running daemon do something: approve a pin, reload, restart an
/// upstream, sign in to or out of one.
fn act_on_daemon(
    command: Command,
    token_file: Option<&std::path::Path>,
) -> anyhow::Result<ExitCode> {
    let runtime = || threads(Some(1));
    match command {
        Command::Approve {
            upstream,
            tool,
            config,
            admin,
        } => {
            let admin = Admin::required(admin.as_deref(), config, token_file)?;
            let path = format!(
                "/pins/{}/{}/approve",
                admin::segment(&upstream)?,
                admin::segment(&tool)?
            );
            let _: api::Approved = runtime()?.block_on(admin.post(&path))?;
            println!("approved the new definition of {upstream}/{tool}");
            Ok(ExitCode::SUCCESS)
        }
        Command::Reload { config, admin } => {
            let admin = Admin::required(admin.as_deref(), config, token_file)?;
            let api::Reloaded { reloaded } = runtime()?.block_on(admin.post("/reload"))?;
            print!("{}", render::reload_summary(&reloaded));
            // Applied, but not cleanly (a drain ended with requests in flight): exit 1.
            if reloaded.incomplete.is_empty() {
                Ok(ExitCode::SUCCESS)
            } else {
                Ok(ExitCode::FAILURE)
            }
        }
        Command::Restart {
            name,
            config,
            admin,
        } => {
            let admin = Admin::required(admin.as_deref(), config, token_file)?;
            let path = format!("/upstreams/{}/restart", admin::segment(&name)?);
            let _: api::Restarted = runtime()?.block_on(admin.post(&path))?;
            println!("restarted {name}");
            Ok(ExitCode::SUCCESS)
        }
        signs @ (Command::Login { .. } | Command::Logout { .. }) => sign_in(signs, token_file),
        // Never: `execute` and `ask_daemon` took the others.
        other => anyhow::bail!("{other:?} is not a command the daemon carries out"),
    }
}

/// `mcpmux login` and `mcpmux logout`: an upstream's own sign-in, or (`--principal`) a
/// principal's.
fn sign_in(command: Command, token_file: Option<&std::path::Path>) -> anyhow::Result<ExitCode> {
    let runtime = || threads(Some(1));
    match command {
        Command::Login {
            name,
            config,
            admin,
            no_browser,
            principal,
            issuer,
        } => {
            let admin = Admin::required(admin.as_deref(), config, token_file)?;
            match principal {
                Some(principal) => runtime()?.block_on(login::principal(
                    &admin,
                    (&name, &principal, issuer),
                    login::Act::Login,
                ))?,
                None => runtime()?.block_on(login::login(&admin, &name, !no_browser))?,
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Logout {
            name,
            config,
            admin,
            principal: Some(principal),
            issuer,
        } => {
            let admin = Admin::required(admin.as_deref(), config, token_file)?;
            runtime()?.block_on(login::principal(
                &admin,
                (&name, &principal, issuer),
                login::Act::Logout,
            ))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Logout {
            name,
            config,
            admin,
            ..
        } => {
            let admin = Admin::required(admin.as_deref(), config, token_file)?;
            let path = format!("/upstreams/{}/logout", admin::segment(&name)?);
            let _: api::LoggedOut = runtime()?.block_on(admin.post(&path))?;
            println!("signed out of {name}; it needs `mcpmux login {name}` again");
            Ok(ExitCode::SUCCESS)
        }
        other => anyhow::bail!("{other:?} is not a sign-in command"),
    }
}

/// Prints an admin answer as indented JSON (`--json`) or as the table `render` makes of it.
fn show<T: serde::Serialize>(
    answer: &T,
    json: bool,
    render: impl Fn(&T) -> String,
) -> anyhow::Result<ExitCode> {
    if json {
        println!("{}", serde_json::to_string_pretty(answer)?);
    } else {
        print!("{}", render(answer));
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes `bytes` to stdout; a reader that stopped early (`| head`) is not an error.
fn print_bytes(bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// `serve --admin`: an address, or `off` (as `admin.listen` takes them).
#[derive(Debug, Clone, Copy)]
struct AdminListen(Option<std::net::SocketAddr>);

/// `serve --admin` given something that is neither an address nor `off`.
#[derive(Debug, thiserror::Error)]
#[error("`{text}` is not an address ({source}); write IP:PORT, e.g. 127.0.0.1:7333, or off")]
struct NotAnAdminAddress {
    text: String,
    source: std::net::AddrParseError,
}

fn parse_admin(text: &str) -> Result<AdminListen, NotAnAdminAddress> {
    if text == "off" {
        return Ok(AdminListen(None));
    }
    text.parse()
        .map(|a| AdminListen(Some(a)))
        .map_err(|source| NotAnAdminAddress {
            text: text.to_owned(),
            source,
        })
}

/// A runtime of `workers` threads (`None`: one per core).
fn threads(workers: Option<usize>) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(workers) = workers {
        builder.worker_threads(workers);
    }
    builder.enable_all().build()
}

fn load(path: Option<PathBuf>) -> anyhow::Result<Config> {
    let path = match path {
        Some(p) => p,
        None => config::default_path()?,
    };
    Ok(config::load(&path)?)
}

/// Every tool of the daemon's merged catalog, following `nextCursor` to the last page.
async fn list_tools(url: String) -> anyhow::Result<Vec<render::ListedTool>> {
    let mut session = crate::bridge::daemon_client::HttpSession::new(url);
    session.initialize().await?;
    let mut tools = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let params = match &cursor {
            Some(c) => serde_json::json!({ "cursor": c }),
            None => serde_json::json!({}),
        };
        let mut page: ToolsPage =
            serde_json::from_value(session.request(Method::ToolsList.as_str(), params).await?)?;
        tools.append(&mut page.tools);
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    session.end().await;
    Ok(tools)
}

/// A page of `tools/list`, as far as `mcpmux tools` reads it.
#[derive(Debug, serde::Deserialize)]
struct ToolsPage {
    #[serde(default)]
    tools: Vec<render::ListedTool>,
    #[serde(rename = "nextCursor")]
    next_cursor: Option<String>,
}
