//! The CLI's one client of the admin API (`status`, `restart`, `audit`): where the API is —
//! `--admin` (an address or a URL), else the config's `admin.listen` — and one request that turns
//! an unreachable daemon or an error answer into a message for people.

use std::path::PathBuf;
use std::time::Duration;

use reqwest::Method;
use serde::de::DeserializeOwned;

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

    /// `--admin`, else the config's `admin.listen`; `None` when the config turns the API off.
    pub fn configured(
        admin: Option<&str>,
        config: Option<PathBuf>,
    ) -> anyhow::Result<Option<Self>> {
        if let Some(admin) = admin {
            return Ok(Some(Self::at(admin)));
        }
        Ok(super::load(config)?
            .admin
            .map(|addr| Self::at(&addr.to_string())))
    }

    /// Like [`Admin::configured`], for commands that cannot do without the API.
    pub fn required(admin: Option<&str>, config: Option<PathBuf>) -> anyhow::Result<Self> {
        Self::configured(admin, config)?.ok_or_else(|| {
            anyhow::anyhow!(
                "the admin API is turned off in the config (admin.listen = \"off\"); pass --admin ADDR"
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
