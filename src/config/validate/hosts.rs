//! `[hosts.NAME]`: each host has exactly one credential — the SHA-256 digest of its bearer token
//! (`token_sha256`), a `token_file` whose content is hashed at load, or a JWT naming it (`subject`,
//! from its own issuer's `jwks_*` or `[server.authorization]`'s) — and no two hosts share a token
//! or a subject of one issuer; its limits, if set, admit something. Also `[server.authorization]`:
//! an issuer with a JWKS that can be read.

use std::collections::BTreeMap;
use std::path::Path;

use sha2::Digest;

use super::super::error::ConfigError;
use super::super::model::{
    Authorization, Credential, HostCredential, JwksSource, JwtIssuer, Profile, UpstreamConfig,
};
use super::super::raw::{RawAuthorization, RawHost};
use super::super::transport::TokenSource;
use super::resolve;

/// Validates `[hosts]`: each host has exactly one credential, a digest is 64 hex digits, a
/// token file is readable and not empty; no two hosts share a token.
// Long: one check per `[hosts.NAME]` key, in the order the file documents them, each naming its
// key in the error; split, the rules of one section would be read in several places.
pub(super) fn hosts(
    file: &Path,
    base_dir: &Path,
    raw: BTreeMap<String, RawHost>,
    (profiles, upstreams): (&[Profile], &[UpstreamConfig]),
    authorization: Option<&Authorization>,
) -> Result<Vec<HostCredential>, ConfigError> {
    let mut hosts: Vec<HostCredential> = Vec::new();
    for (name, host) in raw {
        let key = |field: &str| format!("hosts.{name}.{field}");
        let jwt = host.subject.is_some() || host.jwks_file.is_some() || host.jwks_url.is_some();
        let token = host.token_sha256.is_some() || host.token_file.is_some();
        if jwt && token {
            return Err(ConfigError::invalid(
                file,
                format!("hosts.{name}"),
                "has both a token and a JWT credential",
                "give each host one credential: a token (token_sha256 or token_file) or a JWT (subject, and jwks_file or jwks_url for its own issuer)",
            ));
        }
        let credential = if jwt {
            let issuer = match (&host.jwks_file, &host.jwks_url) {
                (None, None) => {
                    if authorization.is_none() {
                        return Err(ConfigError::invalid(
                            file,
                            key("subject"),
                            "names a JWT subject, but no issuer is configured for it",
                            "set jwks_file or jwks_url with issuer and audience on this host, or configure [server.authorization]",
                        ));
                    }
                    None
                }
                _ => {
                    let audience = host.audience.clone().unwrap_or_default();
                    if audience.is_empty() {
                        return Err(ConfigError::invalid(
                            file,
                            key("audience"),
                            "is missing: a JWT is accepted only for a named audience",
                            "set audience = [\"…\"] to what the identity provider puts in `aud` for mcpmux",
                        ));
                    }
                    Some(jwt_issuer(
                        file,
                        base_dir,
                        &format!("hosts.{name}"),
                        JwtFields {
                            issuer: host.issuer.clone(),
                            jwks_file: host.jwks_file.clone(),
                            jwks_url: host.jwks_url.clone(),
                            jwks_refresh: host.jwks_refresh,
                            claim: host.claim.clone(),
                        },
                        audience,
                    )?)
                }
            };
            let subject = host.subject.clone().unwrap_or_else(|| name.clone());
            let same_issuer = |c: &Credential| matches!(c, Credential::Jwt { subject: s, issuer: i } if *s == subject && *i == issuer);
            if let Some(twin) = hosts.iter().find(|h| same_issuer(&h.credential)) {
                return Err(ConfigError::invalid(
                    file,
                    key("subject"),
                    format!("`{subject}`, the same as host `{}`", twin.name),
                    "give each host its own subject, so mcpmux can tell them apart",
                ));
            }
            Credential::Jwt { subject, issuer }
        } else {
            if let Some(field) = [
                ("issuer", host.issuer.is_some()),
                ("audience", host.audience.is_some()),
                ("claim", host.claim.is_some()),
            ]
            .into_iter()
            .find_map(|(f, set)| set.then_some(f))
            {
                return Err(ConfigError::invalid(
                    file,
                    key(field),
                    "belongs to a JWT credential, which this host does not have",
                    "add jwks_file or jwks_url (and subject), or leave it out",
                ));
            }
            Credential::Token {
                sha256: token_digest(file, base_dir, &name, &host)?,
            }
        };
        if let Credential::Token { sha256 } = &credential {
            let twin = hosts
                .iter()
                .find(|h| matches!(&h.credential, Credential::Token { sha256: d } if d == sha256));
            if let Some(twin) = twin {
                return Err(ConfigError::invalid(
                    file,
                    key("token_sha256"),
                    format!("the same token as host `{}`", twin.name),
                    "give each host its own token, so mcpmux can tell them apart",
                ));
            }
        }
        if host.max_in_flight == Some(0) {
            return Err(ConfigError::invalid(
                file,
                key("max_in_flight"),
                "is 0, which would refuse every request",
                "allow at least 1, or leave it out for no limit",
            ));
        }
        if host.max_sessions == Some(0) {
            return Err(ConfigError::invalid(
                file,
                key("max_sessions"),
                "is 0, which would refuse every session",
                "allow at least 1, or leave it out (then server.max_sessions applies)",
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
        let upstreams =
            super::host_upstreams::secrets(file, base_dir, &name, host.upstreams, upstreams)?;
        hosts.push(HostCredential {
            upstreams,
            profile,
            name,
            credential,
            max_in_flight: host.max_in_flight,
            max_calls_per_second: host.max_calls_per_second,
            max_sessions: host.max_sessions,
        });
    }
    Ok(hosts)
}

/// The digest of a token host's credential: `token_sha256` as written, or `token_file` hashed.
fn token_digest(
    file: &Path,
    base_dir: &Path,
    name: &str,
    host: &RawHost,
) -> Result<[u8; 32], ConfigError> {
    let key = |field: &str| format!("hosts.{name}.{field}");
    match (host.token_sha256.clone(), host.token_file.clone()) {
        (Some(_), Some(_)) => Err(ConfigError::invalid(
            file,
            key("token_file"),
            "set together with `token_sha256`",
            "give each host one credential: keep token_sha256 or token_file",
        )),
        (None, None) => Err(ConfigError::invalid(
            file,
            format!("hosts.{name}"),
            "has no credential",
            "set token_sha256 = \"<sha256 hex of its bearer token>\" (e.g. `printf %s TOKEN | sha256sum`), token_file = \"PATH\", or a JWT subject = \"…\" (with [server.authorization], or jwks_url/jwks_file, issuer and audience)",
        )),
        (Some(hex), None) => parse_digest(&hex).ok_or_else(|| {
            ConfigError::invalid(
                file,
                key("token_sha256"),
                "is not 64 hexadecimal digits",
                "set the SHA-256 digest of the host's bearer token in hex, e.g. from `printf %s TOKEN | sha256sum`",
            )
        }),
        (None, Some(path)) => {
            let token = TokenSource::File(resolve(base_dir, path)).read().map_err(|why| {
                ConfigError::invalid(
                    file,
                    key("token_file"),
                    why.to_string(),
                    "point it at a readable file holding the host's bearer token",
                )
            })?;
            Ok(sha2::Sha256::digest(token.as_bytes()).into())
        }
    }
}

/// An issuer's fields as written, wherever they are.
struct JwtFields {
    issuer: Option<String>,
    jwks_file: Option<std::path::PathBuf>,
    jwks_url: Option<String>,
    jwks_refresh: Option<std::time::Duration>,
    claim: Option<String>,
}

// Long: one check per key of a JWT issuer (keys, issuer, audience, claim, refresh), each naming
// its key in the error.
/// An identity provider, checked: an `issuer`, exactly one of `jwks_file` (readable, a JWK set)
/// and `jwks_url` (http or https).
fn jwt_issuer(
    file: &Path,
    base_dir: &Path,
    section: &str,
    fields: JwtFields,
    audience: Vec<String>,
) -> Result<JwtIssuer, ConfigError> {
    let key = |field: &str| format!("{section}.{field}");
    let issuer = fields.issuer.filter(|i| !i.is_empty()).ok_or_else(|| {
        ConfigError::invalid(
            file,
            key("issuer"),
            "is missing",
            "set issuer = \"…\" to the identity provider's `iss` (its issuer URL)",
        )
    })?;
    let jwks = match (fields.jwks_file, fields.jwks_url) {
        (Some(_), Some(_)) => {
            return Err(ConfigError::invalid(
                file,
                key("jwks_url"),
                "set together with jwks_file",
                "keep one: jwks_file for keys on disk, jwks_url to fetch them",
            ));
        }
        (None, None) => {
            return Err(ConfigError::invalid(
                file,
                key("jwks_url"),
                "is missing: the provider's signing keys are needed to check its tokens",
                "set jwks_url = \"https://…/jwks.json\" or jwks_file = \"PATH\"",
            ));
        }
        (Some(path), None) => {
            let path = resolve(base_dir, path);
            let text = std::fs::read_to_string(&path).map_err(|e| {
                ConfigError::invalid(
                    file,
                    key("jwks_file"),
                    format!("cannot be read ({}): {e}", path.display()),
                    "point it at the identity provider's JSON Web Key Set",
                )
            })?;
            serde_json::from_str::<jsonwebtoken::jwk::JwkSet>(&text).map_err(|e| {
                ConfigError::invalid(
                    file,
                    key("jwks_file"),
                    format!("is not a JSON Web Key Set: {e}"),
                    "use the provider's JWKS document ({\"keys\": [...]})",
                )
            })?;
            JwksSource::File(path)
        }
        (None, Some(url)) => {
            let parsed = url::Url::parse(&url).ok();
            let scheme = parsed.as_ref().map(url::Url::scheme);
            // Keys fetched over plain http could be swapped by anyone on the path.
            if scheme == Some("http") && !parsed.as_ref().is_some_and(super::super::is_loopback) {
                return Err(ConfigError::invalid(
                    file,
                    key("jwks_url"),
                    format!(
                        "`{url}` is plain http beyond this machine: anyone on the path could swap the keys and sign tokens"
                    ),
                    "use the provider's https JWKS URL (plain http only on 127.0.0.1, ::1 or localhost)",
                ));
            }
            if !matches!(scheme, Some("https" | "http")) {
                return Err(ConfigError::invalid(
                    file,
                    key("jwks_url"),
                    format!("`{url}` is not an http(s) URL"),
                    "set the provider's JWKS URL, e.g. https://idp.example.com/.well-known/jwks.json",
                ));
            }
            JwksSource::Url(url)
        }
    };
    let jwks_refresh = fields
        .jwks_refresh
        .unwrap_or(crate::config::model::DEFAULT_JWKS_REFRESH);
    if jwks_refresh.is_zero() {
        return Err(ConfigError::invalid(
            file,
            key("jwks_refresh"),
            "is 0, which would read the keys for every token",
            "use a duration such as \"5m\"",
        ));
    }
    Ok(JwtIssuer {
        issuer,
        audience,
        jwks,
        claim: fields.claim.unwrap_or_else(|| "sub".to_owned()),
        jwks_refresh,
    })
}

/// `[server.authorization]`: an issuer and its keys; the audience is the resource URL.
pub(super) fn authorization(
    file: &Path,
    base_dir: &Path,
    raw: Option<RawAuthorization>,
) -> Result<Option<Authorization>, ConfigError> {
    let Some(a) = raw else {
        return Ok(None);
    };
    if let Some(resource) = &a.resource {
        if url::Url::parse(resource).is_err() {
            return Err(ConfigError::invalid(
                file,
                "server.authorization.resource",
                format!("`{resource}` is not a URL"),
                "set the URL hosts reach mcpmux at, e.g. https://mcpmux.example.com/mcp",
            ));
        }
    }
    let issuer = jwt_issuer(
        file,
        base_dir,
        "server.authorization",
        JwtFields {
            issuer: a.issuer,
            jwks_file: a.jwks_file,
            jwks_url: a.jwks_url,
            jwks_refresh: a.jwks_refresh,
            claim: a.principal_claim,
        },
        a.resource.iter().cloned().collect(),
    )?;
    Ok(Some(Authorization {
        issuer,
        resource: a.resource,
        scopes_supported: a.scopes_supported,
        required_scopes: a.required_scopes,
        profile: a.profile,
    }))
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
