//! `[hosts.NAME]`: each host has exactly one credential — the SHA-256 digest of its bearer token
//! (`token_sha256`), or a `token_file` whose content is hashed at load — and no two hosts share
//! a token; its limits, if set, admit something.

use std::collections::BTreeMap;
use std::path::Path;

use sha2::Digest;

use super::super::error::ConfigError;
use super::super::model::{HostCredential, Profile};
use super::super::raw::RawHost;
use super::super::transport::TokenSource;
use super::resolve;

/// Validates `[hosts]`: each host has exactly one credential, a digest is 64 hex digits, a
/// token file is readable and not empty; no two hosts share a token.
pub(super) fn hosts(
    file: &Path,
    base_dir: &Path,
    raw: BTreeMap<String, RawHost>,
    profiles: &[Profile],
) -> Result<Vec<HostCredential>, ConfigError> {
    let mut hosts: Vec<HostCredential> = Vec::new();
    for (name, host) in raw {
        let key = |field: &str| format!("hosts.{name}.{field}");
        let token_sha256 = match (host.token_sha256, host.token_file) {
            (Some(_), Some(_)) => {
                return Err(ConfigError::invalid(
                    file,
                    key("token_file"),
                    "set together with `token_sha256`",
                    "give each host one credential: keep token_sha256 or token_file",
                ));
            }
            (None, None) => {
                return Err(ConfigError::invalid(
                    file,
                    format!("hosts.{name}"),
                    "has no credential",
                    "set token_sha256 = \"<sha256 hex of its bearer token>\" (e.g. `printf %s TOKEN | sha256sum`) or token_file = \"PATH\"",
                ));
            }
            (Some(hex), None) => parse_digest(&hex).ok_or_else(|| {
                ConfigError::invalid(
                    file,
                    key("token_sha256"),
                    "is not 64 hexadecimal digits",
                    "set the SHA-256 digest of the host's bearer token in hex, e.g. from `printf %s TOKEN | sha256sum`",
                )
            })?,
            (None, Some(path)) => {
                let token = TokenSource::File(resolve(base_dir, path)).read().map_err(|why| {
                    ConfigError::invalid(
                        file,
                        key("token_file"),
                        why,
                        "point it at a readable file holding the host's bearer token",
                    )
                })?;
                sha2::Sha256::digest(token.as_bytes()).into()
            }
        };
        if let Some(twin) = hosts.iter().find(|h| h.token_sha256 == token_sha256) {
            return Err(ConfigError::invalid(
                file,
                key("token_sha256"),
                format!("the same token as host `{}`", twin.name),
                "give each host its own token, so mcpmux can tell them apart",
            ));
        }
        if host.max_in_flight == Some(0) {
            return Err(ConfigError::invalid(
                file,
                key("max_in_flight"),
                "is 0, which would refuse every request",
                "allow at least 1, or leave it out for no limit",
            ));
        }
        if let Some(rate) = host.max_calls_per_second {
            if !(rate.is_finite() && rate > 0.0) {
                return Err(ConfigError::invalid(
                    file,
                    key("max_calls_per_second"),
                    format!("{rate} is not a positive rate"),
                    "set the calls per second it may make, e.g. 20, or leave it out for no limit",
                ));
            }
        }
        let profile = super::profiles::named(file, &key("profile"), host.profile, profiles)?;
        hosts.push(HostCredential {
            profile,
            name,
            token_sha256,
            max_in_flight: host.max_in_flight,
            max_calls_per_second: host.max_calls_per_second,
        });
    }
    Ok(hosts)
}

fn parse_digest(hex: &str) -> Option<[u8; 32]> {
    let hex = hex.trim();
    if hex.len() != 64 {
        return None;
    }
    let mut digest = [0u8; 32];
    for (i, byte) in digest.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(digest)
}
