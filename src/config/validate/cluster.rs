//! `[cluster]`: a replica's name, how it reaches the others, and how it drains.

use std::path::Path;

use super::resolve;
use crate::config::error::ConfigError;
use crate::config::model::{ClusterConfig, DEFAULT_UNREADY_DELAY, ServerConfig, StoreConfig};
use crate::config::raw::RawCluster;
use crate::config::transport::{TokenSource, Transport};
use crate::config::{Config, Credentials};

/// `[cluster]`, checked: a replica name that is a DNS label (the host name's first label unless
/// set), peers that are http(s) URLs, and a way to reach them.
pub(super) fn cluster(
    file: &Path,
    base_dir: &Path,
    raw: Option<RawCluster>,
    server: &ServerConfig,
) -> Result<Option<ClusterConfig>, ConfigError> {
    let Some(mut raw) = raw else {
        return Ok(None);
    };
    if server.cursor_keys.is_none() {
        return Err(ConfigError::invalid(
            file,
            "server.cursor_keys",
            "is not set, but [cluster] replicas must share one key file (cursors, multi-round states and forwarded requests are signed with it)",
            "provision one file on every replica, e.g. `echo \"1 $(openssl rand -hex 32)\" > cursor.keys`, and set server.cursor_keys to it",
        ));
    }
    let store = store(file, base_dir, &raw)?;
    let replica = match raw.replica.take() {
        Some(name) => name,
        None => host_name().ok_or_else(|| {
            ConfigError::invalid(
                file,
                "cluster.replica",
                "is not set and this machine's host name is not a DNS label",
                "name the replica, e.g. replica = \"mcpmux-0\"",
            )
        })?,
    };
    if !is_label(&replica) {
        return Err(ConfigError::invalid(
            file,
            "cluster.replica",
            format!("`{replica}` is not a DNS label"),
            "use 1-63 letters, digits and inner hyphens, e.g. \"mcpmux-0\"",
        ));
    }
    let peers = peers(file, std::mem::take(&mut raw.peers))?;
    if let Some(template) = &raw.peer_url {
        if !template.contains("{replica}") {
            return Err(ConfigError::invalid(
                file,
                "cluster.peer_url",
                format!("`{template}` does not contain {{replica}}"),
                "write where any replica serves hosts, e.g. \"http://{replica}.mcpmux-replicas:7332\"",
            ));
        }
        http_url(
            file,
            "cluster.peer_url",
            &template.replace("{replica}", "r"),
        )?;
    }
    if peers.is_empty() && raw.peer_url.is_none() {
        return Err(ConfigError::invalid(
            file,
            "cluster",
            "names no way to reach the other replicas (a request that lands on a replica that does not own its session is forwarded to the owner)",
            "add peer_url = \"http://{replica}.SERVICE:7332\" (Kubernetes) or a [cluster.peers] table of name = \"http://ADDRESS:PORT\"",
        ));
    }
    Ok(Some(ClusterConfig {
        replica,
        peers,
        peer_url: raw.peer_url.take(),
        state_keys: raw.state_keys.take().map(|f| resolve(base_dir, f)),
        unready_delay: raw.unready_delay.unwrap_or(DEFAULT_UNREADY_DELAY),
        store,
    }))
}

/// Without `[cluster] store`, an upstream signed in with the authorization code flow would need
/// `mcpmux login` on every replica, and replicas refreshing one token each would have a server
/// that rotates refresh tokens revoke them all: refused, naming the fix.
pub(super) fn shared_sign_ins(file: &Path, config: &Config) -> Result<(), ConfigError> {
    let Some(cluster) = &config.cluster else {
        return Ok(());
    };
    if cluster.store.is_some() {
        return Ok(());
    }
    let signed_in = config.upstreams.iter().find(|u| {
        let Transport::Remote(remote) = &u.transport else {
            return false;
        };
        u.credentials == Credentials::Shared
            && remote.oauth.as_ref().is_some_and(|o| {
                o.written && o.grant == crate::config::OAuthGrant::AuthorizationCode
            })
    });
    match signed_in {
        Some(upstream) => Err(ConfigError::invalid(
            file,
            format!("upstreams.{}.oauth", upstream.name),
            "signs in with the authorization code flow, but [cluster] has no store: each replica would need its own `mcpmux login`, and their refreshes of one token would collide",
            "set [cluster] store = \"postgres://…\" so the replicas share its tokens (docs/cluster.md), or use grant = \"client_credentials\" or a bearer token file",
        )),
        None => Ok(()),
    }
}

/// `[cluster.peers]`: replica names (DNS labels) to http(s) URLs.
fn peers(
    file: &Path,
    raw: std::collections::BTreeMap<String, String>,
) -> Result<std::collections::BTreeMap<String, url::Url>, ConfigError> {
    let mut peers = std::collections::BTreeMap::new();
    for (name, url) in raw {
        let key = format!("cluster.peers.{name}");
        if !is_label(&name) {
            return Err(ConfigError::invalid(
                file,
                key,
                "is not a replica name (a DNS label)",
                "name each peer as its [cluster] replica is named",
            ));
        }
        peers.insert(name, http_url(file, &key, &url)?);
    }
    Ok(peers)
}

/// `[cluster] store`: a Postgres URL holding no password (it comes from `store_password_file` or
/// `store_password_env`), with at most one source of it.
fn store(
    file: &Path,
    base_dir: &Path,
    raw: &RawCluster,
) -> Result<Option<StoreConfig>, ConfigError> {
    let Some(url) = &raw.store else {
        for (key, set) in [
            (
                "cluster.store_password_file",
                raw.store_password_file.is_some(),
            ),
            (
                "cluster.store_password_env",
                raw.store_password_env.is_some(),
            ),
            ("cluster.store_ca_file", raw.store_ca_file.is_some()),
        ] {
            if set {
                return Err(ConfigError::invalid(
                    file,
                    key,
                    "is set, but cluster.store is not",
                    "set store = \"postgres://USER@HOST/DB\", or remove it",
                ));
            }
        }
        return Ok(None);
    };
    let parsed: tokio_postgres::Config = url.parse().map_err(|e| {
        ConfigError::invalid(
            file,
            "cluster.store",
            format!("is not a Postgres connection URL: {e}"),
            "write it as postgres://USER@HOST:PORT/DATABASE?sslmode=require",
        )
    })?;
    if parsed.get_password().is_some() {
        return Err(ConfigError::invalid(
            file,
            "cluster.store",
            "holds a password (config files are shown, diffed and copied)",
            "remove it from the URL and set store_password_file or store_password_env",
        ));
    }
    let password = match (&raw.store_password_file, &raw.store_password_env) {
        (Some(_), Some(_)) => {
            return Err(ConfigError::invalid(
                file,
                "cluster.store_password_env",
                "is set beside store_password_file",
                "keep one of them",
            ));
        }
        (Some(path), None) => Some(TokenSource::File(resolve(base_dir, path.clone()))),
        (None, Some(var)) => Some(TokenSource::Env(var.clone())),
        (None, None) => None,
    };
    Ok(Some(StoreConfig {
        url: url.clone(),
        password,
        ca_file: (raw.store_ca_file.clone()).map(|f| resolve(base_dir, f)),
    }))
}

/// The first label of this machine's host name (what names a replica, and an audit chain, when
/// the config does not), else `mcpmux`.
pub fn machine_name() -> String {
    host_name().unwrap_or_else(|| "mcpmux".to_owned())
}

/// The first label of this machine's host name (a StatefulSet pod's name on Kubernetes).
fn host_name() -> Option<String> {
    let name = nix::unistd::gethostname().ok()?.into_string().ok()?;
    let label = name.split('.').next()?.to_owned();
    is_label(&label).then_some(label)
}

/// Whether `name` is a DNS label: what a replica's name must be, as it starts session ids and
/// names a server in a load balancer's config.
pub fn is_label(name: &str) -> bool {
    (1..=63).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

fn http_url(file: &Path, key: &str, text: &str) -> Result<url::Url, ConfigError> {
    match url::Url::parse(text) {
        Ok(url) if matches!(url.scheme(), "http" | "https") && url.host().is_some() => Ok(url),
        _ => Err(ConfigError::invalid(
            file,
            key,
            format!("`{text}` is not an http(s) URL"),
            "write the replica's host endpoint base, e.g. \"http://10.0.0.11:7332\"",
        )),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn raw(text: &str) -> Result<Option<ClusterConfig>, ConfigError> {
        #[derive(serde::Deserialize)]
        struct Doc {
            cluster: Option<RawCluster>,
        }
        let doc: Doc = toml::from_str(text).unwrap();
        let server = ServerConfig {
            cursor_keys: Some("/etc/mcpmux/cursor.keys".into()),
            ..ServerConfig::default()
        };
        cluster(
            Path::new("m.toml"),
            Path::new("/etc/mcpmux"),
            doc.cluster,
            &server,
        )
    }

    #[test]
    fn a_cluster_names_its_replica_and_reaches_its_peers() {
        let c = raw("[cluster]\nreplica = \"a\"\npeer_url = \"http://{replica}.svc:7332\"\n")
            .unwrap()
            .unwrap();
        assert_eq!(c.replica, "a");
        assert_eq!(c.peer("b").unwrap().as_str(), "http://b.svc:7332/");
        assert_eq!(c.unready_delay, DEFAULT_UNREADY_DELAY);
        let c = raw("[cluster]\nreplica = \"a\"\nunready_delay = \"5s\"\n[cluster.peers]\nb = \"http://127.0.0.12:9\"\n")
            .unwrap()
            .unwrap();
        assert_eq!(c.peer("b").unwrap().as_str(), "http://127.0.0.12:9/");
        assert!(c.peer("c").is_none());
        assert_eq!(c.unready_delay, std::time::Duration::from_secs(5));
        assert!(raw("").unwrap().is_none());
    }

    #[test]
    fn a_bad_cluster_table_names_the_key_and_the_fix() {
        for (text, key) in [
            (
                "[cluster]\nreplica = \"a.b\"\npeer_url = \"http://{replica}:1\"",
                "cluster.replica",
            ),
            ("[cluster]\nreplica = \"a\"", "cluster"),
            (
                "[cluster]\nreplica = \"a\"\npeer_url = \"http://x:1\"",
                "cluster.peer_url",
            ),
            (
                "[cluster]\nreplica = \"a\"\n[cluster.peers]\nb = \"ftp://x\"",
                "cluster.peers.b",
            ),
        ] {
            let e = raw(text).unwrap_err().to_string();
            assert!(e.contains(key), "{text}: {e}");
        }
        let doc: RawCluster =
            toml::from_str("replica = \"a\"\npeer_url = \"http://{replica}:1\"").unwrap();
        let keyless = ServerConfig::default();
        let e = cluster(Path::new("m.toml"), Path::new("/"), Some(doc), &keyless).unwrap_err();
        assert!(e.to_string().contains("server.cursor_keys"), "{e}");
    }
}
