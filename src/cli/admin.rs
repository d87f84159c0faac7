//! The CLI's one client of the admin API (`status`, `restart`, `audit`, `pins`…) and how it finds
//! the running daemon ([`locate`]): `--admin` / `--url` (an address or a URL), else the record a
//! daemon left for its `--config` or state directory, else the one daemon running, else the
//! default config — saying what it tried when nothing answers. One request turns an unreachable
//! daemon or an error answer into a message for people.
//!
//! The admin token comes with no flag: `--admin-token-file` / `MCPMUX_ADMIN_TOKEN_FILE` when
//! given, else the file the daemon's record names, else the config's `admin.token_file` or
//! `<state dir>/admin.token`. It goes as `Authorization: Bearer …`, every POST as JSON.

use std::path::{Path, PathBuf};
use std::time::Duration;

use reqwest::Method;
use serde::de::DeserializeOwned;

/// Where the daemon is: its host endpoint and its admin API (`None`: turned off), and where the
/// admin token should be.
#[derive(Debug, Clone)]
pub struct Located {
    pub url: String,
    pub admin: Option<String>,
    pub admin_token_file: Option<PathBuf>,
}

impl Located {
    fn of(record: crate::locator::DaemonRecord) -> Self {
        Self {
            url: record.url,
            admin: record.admin,
            admin_token_file: record.admin_token_file,
        }
    }

    /// What `config` says (no record of a running daemon was found).
    fn configured(config: &crate::config::Config) -> Self {
        Self {
            url: config.endpoint_url(),
            admin: config.admin.map(|a| format!("http://{a}")),
            admin_token_file: Some(token_file_of(config)),
        }
    }
}

/// Where the daemon of `config` keeps its admin token.
fn token_file_of(config: &crate::config::Config) -> PathBuf {
    (config.admin_access.token_file.clone())
        .unwrap_or_else(|| config.state_dir.join(crate::admin::TOKEN_FILE))
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
        return Ok(Located::configured(&config));
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
        Ok(config) => Ok(Located::configured(&config)),
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

/// `addr` as written on the command line (`HOST:PORT`, or a URL) as a base URL.
fn base_url(addr: &str) -> String {
    let base = if addr.contains("://") {
        addr.to_owned()
    } else {
        format!("http://{addr}")
    };
    base.trim_end_matches('/').to_owned()
}

/// The token in `path` (trimmed), or why it cannot be read.
fn read_token(path: &Path) -> std::io::Result<String> {
    Ok(std::fs::read_to_string(path)?.trim().to_owned())
}

/// Where the token of the daemon whose admin API is at `base` is: the record of a running daemon
/// there, else the config's.
fn token_file_for(base: &str, config: Option<PathBuf>) -> Option<PathBuf> {
    let state_dir = std::env::var_os("MCPMUX_STATE_DIR").filter(|d| !d.is_empty());
    let recorded = (crate::locator::running().into_iter())
        .chain(state_dir.and_then(|d| crate::locator::in_state_dir(Path::new(&d))))
        .find(|r| r.admin.as_deref().map(base_url).as_deref() == Some(base));
    if let Some(file) = recorded.and_then(|r| r.admin_token_file) {
        return Some(file);
    }
    super::load(config).ok().map(|c| token_file_of(&c))
}

/// The admin API of a running daemon.
#[derive(Debug, Clone)]
pub struct Admin {
    /// `http://HOST:PORT`, no trailing path.
    base: String,
    http: reqwest::Client,
    /// `Bearer <admin token>` (marked sensitive), when one was found.
    token: Option<reqwest::header::HeaderValue>,
}

impl Admin {
    /// The API at `addr` (`HOST:PORT`, or a URL), with the token in `token_file` if it can be
    /// read (else requests go without one, and the daemon's 401 says where it is).
    pub fn at(addr: &str, token_file: Option<&Path>) -> Self {
        let token = token_file
            .and_then(|f| read_token(f).ok())
            .filter(|t| !t.is_empty());
        Self::with_token(addr, token.as_deref())
    }

    fn with_token(addr: &str, token: Option<&str>) -> Self {
        let token = token
            .and_then(|t| reqwest::header::HeaderValue::from_str(&format!("Bearer {t}")).ok())
            .map(|mut v| {
                v.set_sensitive(true);
                v
            });
        Self {
            base: base_url(addr),
            http: crate::bridge::daemon_client::loopback_http(),
            token,
        }
    }

    /// The running daemon's admin API, found as [`locate`] says; `None` when it is turned off.
    /// `token_file` (`--admin-token-file`) overrides where the token is looked for.
    pub fn configured(
        admin: Option<&str>,
        config: Option<PathBuf>,
        token_file: Option<&Path>,
    ) -> anyhow::Result<Option<Self>> {
        let explicit = match token_file {
            Some(path) => Some(read_token(path).map_err(|e| {
                anyhow::anyhow!("cannot read the admin token file {}: {e}", path.display())
            })?),
            None => None,
        };
        if let Some(admin) = admin {
            if let Some(token) = &explicit {
                return Ok(Some(Self::with_token(admin, Some(token))));
            }
            let found = token_file_for(&base_url(admin), config);
            return Ok(Some(Self::at(admin, found.as_deref())));
        }
        let located = locate(config)?;
        Ok(located.admin.as_deref().map(|admin| match &explicit {
            Some(token) => Self::with_token(admin, Some(token)),
            None => Self::at(admin, located.admin_token_file.as_deref()),
        }))
    }

    /// Like [`Admin::configured`], for commands that cannot do without the API.
    pub fn required(
        admin: Option<&str>,
        config: Option<PathBuf>,
        token_file: Option<&Path>,
    ) -> anyhow::Result<Self> {
        Self::configured(admin, config, token_file)?.ok_or_else(|| {
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

    /// `POST path` (with an empty JSON body), its answer decoded.
    pub async fn post<T: DeserializeOwned>(&self, path: &str) -> anyhow::Result<T> {
        self.request(Method::POST, path, &[]).await
    }

    /// `method path?query`, its JSON answer decoded; an error answer becomes its `error` text.
    pub async fn request<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, String)],
    ) -> anyhow::Result<T> {
        let url = format!("{}{path}", self.base);
        let mut request = self.http.request(method.clone(), &url).query(query);
        if let Some(token) = &self.token {
            request = request.header(reqwest::header::AUTHORIZATION, token.clone());
        }
        if method == Method::POST {
            request = request.json(&crate::api::Empty {});
        }
        let response = request.send().await.map_err(|e| {
            anyhow::anyhow!(
                "the mcpmux admin API is not reachable at {url}: {e} (is `mcpmux serve` running?)"
            )
        })?;
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        if !status.is_success() {
            if let Ok(refused) = serde_json::from_str::<crate::api::Refused>(&text) {
                anyhow::bail!("{}", refused.error);
            }
            let fallback = if text.is_empty() {
                status.as_str()
            } else {
                &text
            };
            anyhow::bail!("{fallback}");
        }
        Ok(serde_json::from_str(&text)?)
    }
}

/// `name` (an upstream's or a tool's, which an upstream chose) as one segment of an admin API
/// path: percent-encoded, so `/`, `?`, `#` and `%` in it stay in it. A name that is `.` or `..`
/// cannot be one (a URL parser removes such a segment, however it is encoded).
pub(super) fn segment(name: &str) -> anyhow::Result<String> {
    use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
    /// What stays as it is: RFC 3986's unreserved characters.
    const KEPT: &AsciiSet = &NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'_')
        .remove(b'.')
        .remove(b'~');
    if matches!(name, "." | "..") {
        anyhow::bail!("`{name}` cannot be named in the admin API's paths; use the web console");
    }
    Ok(utf8_percent_encode(name, KEPT).to_string())
}

#[cfg(test)]
mod tests {
    use super::segment;

    #[test]
    fn a_name_stays_one_path_segment() {
        assert_eq!(segment("fs").unwrap_or_default(), "fs");
        assert_eq!(
            segment("x/../../../upstreams/ev/restart?").unwrap_or_default(),
            "x%2F..%2F..%2F..%2Fupstreams%2Fev%2Frestart%3F"
        );
        assert_eq!(segment("a b%").unwrap_or_default(), "a%20b%25");
        assert!(segment("..").is_err());
    }
}
