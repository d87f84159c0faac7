//! The CLI's one client of the admin API (`status`, `restart`, `audit`, `pins`…) and how it finds
//! the running daemon ([`locate`]): `--admin` / `--url` (an address or a URL), else the record a
//! daemon left for its `--config` or state directory, else the one daemon running, else the
//! default config — saying what it tried when nothing answers. One request turns an unreachable
//! daemon or an error answer into a message for people.

use std::path::PathBuf;
use std::time::Duration;

use reqwest::Method;
use serde::de::DeserializeOwned;

/// Where the daemon is: its host endpoint and its admin API (`None`: turned off).
#[derive(Debug, Clone)]
pub struct Located {
    pub url: String,
    pub admin: Option<String>,
}

impl Located {
    fn of(record: crate::locator::DaemonRecord) -> Self {
        Self {
            url: record.url,
            admin: record.admin,
        }
    }
}

/// Finds the running daemon: the record the daemon of `--config` left (or, without `--config`,
/// of `MCPMUX_STATE_DIR`'s daemon, then the one daemon running), else what the config says. The
/// error says what was tried.
pub fn locate(config: Option<PathBuf>) -> anyhow::Result<Located> {
    use crate::locator;
    let mut tried = Vec::new();
    if let Some(path) = &config {
        let wanted = std::fs::canonicalize(path).unwrap_or_else(|_| path.clone());
        if let Some(record) = locator::running().into_iter().find(|r| r.config == wanted) {
            return Ok(Located::of(record));
        }
        let config = super::load(Some(path.clone()))?;
        return Ok(Located {
            url: config.endpoint_url(),
            admin: config.admin.map(|a| format!("http://{a}")),
        });
    }
    if let Some(dir) = std::env::var_os("MCPMUX_STATE_DIR").filter(|d| !d.is_empty()) {
        let dir = PathBuf::from(dir);
        if let Some(record) = locator::in_state_dir(&dir) {
            return Ok(Located::of(record));
        }
        tried.push(format!(
            "no running daemon recorded in $MCPMUX_STATE_DIR ({})",
            dir.display()
        ));
    }
    let mut running = locator::running();
    match running.len() {
        1 => return Ok(Located::of(running.remove(0))),
        0 => tried.push(format!(
            "no running daemon recorded in {}",
            locator::runtime_dir().join("daemons").display()
        )),
        _ => {
            let list: Vec<String> = running
                .iter()
                .map(|r| {
                    format!(
                        "pid {} (config {}, admin {})",
                        r.pid,
                        r.config.display(),
                        r.admin.as_deref().unwrap_or("off")
                    )
                })
                .collect();
            anyhow::bail!(
                "several mcpmux daemons run: {}; say which with --config FILE or --admin ADDR",
                list.join("; ")
            );
        }
    }
    match super::load(None) {
        Ok(config) => Ok(Located {
            url: config.endpoint_url(),
            admin: config.admin.map(|a| format!("http://{a}")),
        }),
        Err(e) => {
            tried.push(format!("the default config: {e}"));
            anyhow::bail!(
                "cannot find a running mcpmux: {}. Start one with `mcpmux serve`, or pass --admin ADDR / --url URL / --config FILE",
                tried.join("; ")
            )
        }
    }
}

/// How long `is_up` waits for the daemon to answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// The admin API of a running daemon.
#[derive(Debug, Clone)]
pub struct Admin {
    /// `http://HOST:PORT`, no trailing path.
    base: String,
    http: reqwest::Client,
}

impl Admin {
    /// The API at `addr` as written on the command line: `HOST:PORT`, or a URL.
    pub fn at(addr: &str) -> Self {
        let base = if addr.contains("://") {
            addr.to_owned()
        } else {
            format!("http://{addr}")
        };
        Self {
            base,
            http: reqwest::Client::new(),
        }
    }

    /// The running daemon's admin API, found as [`locate`] says; `None` when it is turned off.
    pub fn configured(
        admin: Option<&str>,
        config: Option<PathBuf>,
    ) -> anyhow::Result<Option<Self>> {
        if let Some(admin) = admin {
            return Ok(Some(Self::at(admin)));
        }
        Ok(locate(config)?.admin.as_deref().map(Self::at))
    }

    /// Like [`Admin::configured`], for commands that cannot do without the API.
    pub fn required(admin: Option<&str>, config: Option<PathBuf>) -> anyhow::Result<Self> {
        Self::configured(admin, config)?.ok_or_else(|| {
            anyhow::anyhow!(
                "the daemon's admin API is turned off (admin.listen = \"off\"); pass --admin ADDR of one that has it"
            )
        })
    }

    /// Whether a daemon answers `GET /health` here (within [`PROBE_TIMEOUT`]).
    pub async fn is_up(&self) -> bool {
        self.http
            .get(format!("{}/health", self.base))
            .timeout(PROBE_TIMEOUT)
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
    }

    /// `POST path`, for an action whose answer only says it was done.
    pub async fn post(&self, path: &str) -> anyhow::Result<()> {
        self.request::<serde_json::Value>(Method::POST, path, &[])
            .await
            .map(drop)
    }

    /// `method path?query`, its JSON answer decoded; an error answer becomes its `error` text.
    pub async fn request<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, String)],
    ) -> anyhow::Result<T> {
        let url = format!("{}{path}", self.base);
        let response = self
            .http
            .request(method, &url)
            .query(query)
            .send()
            .await
            .map_err(|e| {
                anyhow::anyhow!(
                    "the mcpmux admin API is not reachable at {url}: {e} (is `mcpmux serve` running?)"
                )
            })?;
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        if !status.is_success() {
            let body: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
            let fallback = if text.is_empty() {
                status.as_str()
            } else {
                &text
            };
            anyhow::bail!("{}", body["error"].as_str().unwrap_or(fallback));
        }
        Ok(serde_json::from_str(&text)?)
    }
}
