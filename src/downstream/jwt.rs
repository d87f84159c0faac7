//! Hosts known by JSON Web Tokens ([`JwtGate`]): a token is accepted when an issuer mcpmux trusts
//! signed it (a key of its JWKS, from a file or fetched; read again when a new key id appears, and
//! once the keys are older than `jwks_refresh`, which also forgets remembered tokens if they changed),
//! it has `exp`, `aud` and `iss` (a token without one is refused, whatever the library would allow),
//! names an accepted audience, has not expired, carries the required scopes, and its principal
//! claim names a configured host — or, for `[server.authorization]`, any user, who becomes a
//! principal of that name (a user, never the host of the same name). Verified tokens are
//! remembered by digest until they expire, so a signature is checked once per token, not once per
//! request. Keys are fetched one fetch at a time per issuer (requests that need them meanwhile
//! wait for that fetch), and a key set larger than [`MAX_JWKS_BYTES`] is refused.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{DecodingKey, Validation};
use sha2::Digest;

use super::principal::Principal;
use crate::config::{Authorization, Credential, HostCredential, JwksSource, JwtIssuer, Profile};
use crate::sync::lock;

/// Clock skew allowed on `exp` and `nbf`.
const LEEWAY_SECS: u64 = 30;
/// A JWKS fetched from a URL is fetched again at most this often for an unknown key id.
const REFETCH_AFTER: Duration = Duration::from_secs(10);
/// Tokens remembered at most; beyond, the memory starts over.
const MAX_REMEMBERED: usize = 10_000;
/// Signed-in users remembered at most (each is a principal with its own counts).
const MAX_SIGNED_IN: usize = 10_000;
/// The largest JWKS read, from a file or a URL: real ones are a few KiB; more is an error.
pub const MAX_JWKS_BYTES: usize = 1024 * 1024;
/// The claims every token must have, present (RFC 7519 leaves them optional; mcpmux does not).
const REQUIRED_CLAIMS: [&str; 3] = ["exp", "aud", "iss"];

/// Why a JWT was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JwtRefusal {
    /// 401 `invalid_token`, with what was wrong.
    Invalid(String),
    /// 403 `insufficient_scope`: the scopes it lacks.
    InsufficientScope(String),
}

/// Every issuer mcpmux accepts JWTs from.
pub struct JwtGate {
    issuers: Vec<Issuer>,
    remembered: Mutex<HashMap<[u8; 32], Remembered>>,
    http: reqwest::Client,
}

impl std::fmt::Debug for JwtGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtGate")
            .field("issuers", &self.issuers.len())
            .finish_non_exhaustive()
    }
}

/// A verified token's principal and its `exp`, by the token's digest.
type Remembered = (Arc<Principal>, u64);

struct Issuer {
    config: JwtIssuer,
    required_scopes: Vec<String>,
    /// The hosts its tokens may name, by subject.
    hosts: HashMap<String, Arc<Principal>>,
    /// For `[server.authorization]`: users no host names are principals of their own, seeing
    /// this profile.
    signed_in: Option<SignedIn>,
    keys: Mutex<Keys>,
    /// Held while its keys are fetched: one fetch at a time, the others wait and use its result.
    fetching: tokio::sync::Mutex<()>,
}

struct SignedIn {
    profile: Option<Arc<Profile>>,
    users: Mutex<HashMap<String, Arc<Principal>>>,
}

#[derive(Default)]
struct Keys {
    set: Option<Arc<JwkSet>>,
    fetched: Option<Instant>,
    /// Fetches tried so far: a request that waited for another's fetch sees it changed.
    attempts: u64,
    /// Whether the last fetch failed (then those who waited for it fail too, without a fetch of
    /// their own).
    failed: bool,
}

/// The claims mcpmux reads; signature, `iss`, `aud`, `exp` and `nbf` are checked by the decoder.
#[derive(serde::Deserialize)]
struct Claims {
    /// Optional here so that a token without it is refused by the decoder's required claims,
    /// which name it (it is never `None` past the decoder).
    #[serde(default)]
    exp: Option<u64>,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    scp: Option<serde_json::Value>,
    #[serde(flatten)]
    rest: serde_json::Map<String, serde_json::Value>,
}

impl JwtGate {
    /// The principal of the user `name` signed in through `[server.authorization]` with
    /// `issuer` (a session opened before a reload keeps its user); `None` when such users are no
    /// longer accepted from that issuer. Never a host: a user named like one stays a user.
    pub fn signed_in_user(&self, issuer: &str, name: &str) -> Option<Arc<Principal>> {
        let issuer = (self.issuers.iter()).find(|i| i.config.issuer == issuer)?;
        issuer.signed_in(name).ok()
    }

    /// The gate for `hosts` with JWT credentials and the server's `authorization` (its audience
    /// being `resource`); `None` when no JWT is accepted at all.
    pub fn new(
        hosts: &[HostCredential],
        principals: &[Arc<Principal>],
        authorization: Option<(&Authorization, &str)>,
        profiles: &[Arc<Profile>],
    ) -> Option<Self> {
        let mut issuers: Vec<Issuer> = Vec::new();
        if let Some((a, resource)) = authorization {
            let mut config = a.issuer.clone();
            config.audience = vec![resource.to_owned()];
            let profile = (a.profile.as_ref())
                .and_then(|name| profiles.iter().find(|p| &p.name == name).cloned());
            issuers.push(Issuer::new(
                config,
                a.required_scopes.clone(),
                Some(profile),
            ));
        }
        for (host, principal) in hosts.iter().zip(principals) {
            let Credential::Jwt { subject, issuer } = &host.credential else {
                continue;
            };
            let index = match issuer {
                None => 0,
                Some(own) => match issuers.iter().position(|i| i.config == *own) {
                    Some(i) => i,
                    None => {
                        issuers.push(Issuer::new(own.clone(), Vec::new(), None));
                        issuers.len() - 1
                    }
                },
            };
            if let Some(issuer) = issuers.get_mut(index) {
                issuer.hosts.insert(subject.clone(), Arc::clone(principal));
            }
        }
        if issuers.is_empty() {
            return None;
        }
        Some(Self {
            issuers,
            remembered: Mutex::new(HashMap::new()),
            // A redirect is not followed: the keys come from the URL the config names, or not at
            // all.
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap_or_default(),
        })
    }

    /// Whether `token` has the shape of a JWT (three dot-separated parts).
    pub fn looks_like_jwt(token: &str) -> bool {
        token.split('.').count() == 3
    }

    /// The principal `token` proves, or why it proves none.
    pub async fn verify(&self, token: &str) -> Result<Arc<Principal>, JwtRefusal> {
        let digest: [u8; 32] = sha2::Sha256::digest(token.as_bytes()).into();
        let now = unix_now();
        if let Some((principal, exp)) = lock(&self.remembered).get(&digest) {
            if *exp + LEEWAY_SECS > now {
                return Ok(Arc::clone(principal));
            }
        }
        let header = jsonwebtoken::decode_header(token)
            .map_err(|e| JwtRefusal::Invalid(format!("the token is not a JWT: {e}")))?;
        let iss = jsonwebtoken::dangerous::insecure_decode::<serde_json::Value>(token)
            .ok()
            .and_then(|t| {
                t.claims
                    .get("iss")
                    .and_then(|i| i.as_str())
                    .map(str::to_owned)
            })
            .ok_or_else(|| {
                tracing::info!(claim = "iss", "Refused a JWT that lacks a required claim.");
                JwtRefusal::Invalid("the token names no issuer (`iss`)".into())
            })?;
        let issuer = (self.issuers.iter())
            .find(|i| i.config.issuer == iss)
            .ok_or_else(|| {
                JwtRefusal::Invalid(format!(
                    "the token's issuer `{iss}` is not one mcpmux trusts"
                ))
            })?;
        // An issuer without an audience would accept tokens meant for anyone (validation makes
        // sure there is one; this keeps it so if that ever changes).
        if issuer.config.audience.is_empty() {
            return Err(JwtRefusal::Invalid(format!(
                "mcpmux accepts no audience of issuer `{iss}`"
            )));
        }
        let key = self.key(issuer, header.kid.as_deref(), header.alg).await?;
        let mut validation = Validation::new(header.alg);
        validation.set_issuer(&[&issuer.config.issuer]);
        validation.set_audience(&issuer.config.audience);
        validation.set_required_spec_claims(&REQUIRED_CLAIMS);
        validation.leeway = LEEWAY_SECS;
        validation.validate_nbf = true;
        let claims = jsonwebtoken::decode::<Claims>(token, &key, &validation)
            .map_err(|e| {
                if let jsonwebtoken::errors::ErrorKind::MissingRequiredClaim(claim) = e.kind() {
                    tracing::info!(issuer = %iss, claim = %claim, "Refused a JWT that lacks a required claim.");
                }
                JwtRefusal::Invalid(describe(&e))
            })?
            .claims;
        let missing: Vec<&str> = (issuer.required_scopes.iter())
            .filter(|s| !has_scope(&claims, s))
            .map(String::as_str)
            .collect();
        if !missing.is_empty() {
            return Err(JwtRefusal::InsufficientScope(missing.join(" ")));
        }
        let name = claims
            .rest
            .get(&issuer.config.claim)
            .and_then(|v| v.as_str())
            .ok_or_else(|| {
                JwtRefusal::Invalid(format!(
                    "the token has no string claim `{}` naming its principal",
                    issuer.config.claim
                ))
            })?;
        let principal = issuer.principal(name)?;
        let mut remembered = lock(&self.remembered);
        if remembered.len() >= MAX_REMEMBERED {
            remembered.clear();
        }
        remembered.insert(digest, (Arc::clone(&principal), claims.exp.unwrap_or(now)));
        Ok(principal)
    }

    /// The key that signed a token of `issuer` with key id `kid`: from its JWKS, fetched (again)
    /// when the set is not loaded yet or does not know the key id.
    async fn key(
        &self,
        issuer: &Issuer,
        kid: Option<&str>,
        alg: jsonwebtoken::Algorithm,
    ) -> Result<DecodingKey, JwtRefusal> {
        let find = |set: &JwkSet| -> Option<DecodingKey> {
            let jwk = match kid {
                Some(kid) => set.find(kid),
                None => (set.keys.len() == 1).then(|| &set.keys[0]),
            }?;
            DecodingKey::from_jwk(jwk).ok()
        };
        let (mut cached, mut stale, expired, attempts) = {
            let keys = lock(&issuer.keys);
            let age = keys.fetched.map(|at| at.elapsed());
            let stale = age.is_none_or(|age| age >= REFETCH_AFTER);
            let expired = age.is_some_and(|age| age >= issuer.config.jwks_refresh);
            (keys.set.clone(), stale, expired, keys.attempts)
        };
        // Keys older than `jwks_refresh` are read again, so a key the provider removed stops
        // being trusted; if they cannot be read, the ones held are used meanwhile.
        if expired {
            if let Ok(set) = self.refresh(issuer, attempts).await {
                cached = Some(set);
                stale = false;
            }
        }
        if let Some(key) = cached.as_deref().and_then(find) {
            return Ok(key);
        }
        if cached.is_none() || stale {
            let set = self.refresh(issuer, attempts).await?;
            if let Some(key) = find(&set) {
                return Ok(key);
            }
        }
        Err(JwtRefusal::Invalid(format!(
            "no key of issuer `{}` matches the token (kid {kid:?}, {alg:?})",
            issuer.config.issuer
        )))
    }

    /// `issuer`'s keys read again — by this request, or by the one whose fetch it waited for
    /// (`attempts`: the fetches tried when this request looked). Tokens verified with a key that
    /// is gone are forgotten.
    async fn refresh(&self, issuer: &Issuer, attempts: u64) -> Result<Arc<JwkSet>, JwtRefusal> {
        let _one_at_a_time = issuer.fetching.lock().await;
        {
            let keys = lock(&issuer.keys);
            if keys.attempts != attempts {
                return match (&keys.set, keys.failed) {
                    (Some(set), false) => Ok(Arc::clone(set)),
                    _ => Err(unavailable_keys()),
                };
            }
        }
        let loaded = self.load(&issuer.config.jwks).await;
        let mut keys = lock(&issuer.keys);
        keys.attempts += 1;
        keys.failed = loaded.is_err();
        let set = Arc::new(loaded?);
        let changed = keys.set.as_deref().map(kids) != Some(kids(&set));
        keys.set = Some(Arc::clone(&set));
        keys.fetched = Some(Instant::now());
        drop(keys);
        // Tokens verified with a key that is gone must be checked again.
        if changed {
            lock(&self.remembered).clear();
        }
        Ok(set)
    }

    async fn load(&self, source: &JwksSource) -> Result<JwkSet, JwtRefusal> {
        let unavailable = |why: String| {
            tracing::warn!(jwks = ?source, error = %why, "Cannot read an issuer's signing keys.");
            unavailable_keys()
        };
        let too_large = |what: &str| {
            format!(
                "{what} is larger than {} MiB, the most mcpmux reads of a key set; \
                 point the issuer's jwks at its key set itself",
                MAX_JWKS_BYTES / (1024 * 1024)
            )
        };
        let bytes = match source {
            JwksSource::File(path) => {
                let read = async {
                    let file = tokio::fs::File::open(path).await?;
                    let mut bytes = Vec::new();
                    // One byte more than allowed tells an over-size file without reading it all.
                    tokio::io::AsyncReadExt::read_to_end(
                        &mut tokio::io::AsyncReadExt::take(file, MAX_JWKS_BYTES as u64 + 1),
                        &mut bytes,
                    )
                    .await?;
                    Ok::<_, std::io::Error>(bytes)
                };
                let bytes = read.await.map_err(|e| unavailable(e.to_string()))?;
                if bytes.len() > MAX_JWKS_BYTES {
                    return Err(unavailable(too_large(&format!(
                        "the file {}",
                        path.display()
                    ))));
                }
                bytes
            }
            JwksSource::Url(url) => {
                let response =
                    (self.http.get(url).send().await).map_err(|e| unavailable(e.to_string()))?;
                if response.status().is_redirection() {
                    let to = (response.headers().get(reqwest::header::LOCATION))
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("nowhere");
                    return Err(unavailable(format!(
                        "{url} answered HTTP {} redirecting to {to}; a JWKS redirect is not followed (set jwks_url to where the keys are)",
                        response.status()
                    )));
                }
                let response =
                    (response.error_for_status()).map_err(|e| unavailable(e.to_string()))?;
                let what = format!("the answer of {url}");
                crate::http_body::read_bounded(response, MAX_JWKS_BYTES, &what)
                    .await
                    .map_err(|e| unavailable(e.to_string()))?
                    .to_vec()
            }
        };
        serde_json::from_slice(&bytes).map_err(|e| unavailable(e.to_string()))
    }
}

impl Issuer {
    fn new(
        config: JwtIssuer,
        required_scopes: Vec<String>,
        signed_in: Option<Option<Arc<Profile>>>,
    ) -> Self {
        Self {
            config,
            required_scopes,
            hosts: HashMap::new(),
            signed_in: signed_in.map(|profile| SignedIn {
                profile,
                users: Mutex::new(HashMap::new()),
            }),
            keys: Mutex::new(Keys::default()),
            fetching: tokio::sync::Mutex::new(()),
        }
    }

    /// The principal a token of this issuer names: a configured host, or a signed-in user.
    fn principal(&self, name: &str) -> Result<Arc<Principal>, JwtRefusal> {
        if let Some(host) = self.hosts.get(name) {
            return Ok(Arc::clone(host));
        }
        self.signed_in(name)
    }

    /// The signed-in user `name` (never a host of that name).
    fn signed_in(&self, name: &str) -> Result<Arc<Principal>, JwtRefusal> {
        let Some(signed_in) = &self.signed_in else {
            return Err(JwtRefusal::Invalid(format!(
                "the token names `{name}`, which is not a configured host"
            )));
        };
        let mut users = lock(&signed_in.users);
        if let Some(user) = users.get(name) {
            return Ok(Arc::clone(user));
        }
        if users.len() >= MAX_SIGNED_IN {
            return Err(JwtRefusal::Invalid(
                "too many signed-in users; configure them as [hosts]".into(),
            ));
        }
        let user = Arc::new(Principal::signed_in(
            &self.config.issuer,
            name,
            signed_in.profile.clone(),
        ));
        users.insert(name.to_owned(), Arc::clone(&user));
        Ok(user)
    }
}

/// What a host is told when an issuer's keys cannot be read (the log says why).
fn unavailable_keys() -> JwtRefusal {
    JwtRefusal::Invalid("the issuer's signing keys are unavailable; see the mcpmux log".into())
}

/// The key ids of a key set, to tell whether it changed.
fn kids(set: &JwkSet) -> Vec<Option<&str>> {
    set.keys
        .iter()
        .map(|k| k.common.key_id.as_deref())
        .collect()
}

/// Whether the token grants `scope` (`scope` as a space-separated string, or `scp` as a list or
/// string, as providers write it).
fn has_scope(claims: &Claims, scope: &str) -> bool {
    let in_text = |s: &str| s.split_whitespace().any(|s| s == scope);
    claims.scope.as_deref().is_some_and(in_text)
        || match &claims.scp {
            Some(serde_json::Value::String(s)) => in_text(s),
            Some(serde_json::Value::Array(list)) => list.iter().any(|s| s == scope),
            _ => false,
        }
}

fn describe(e: &jsonwebtoken::errors::Error) -> String {
    use jsonwebtoken::errors::ErrorKind;
    match e.kind() {
        ErrorKind::ExpiredSignature => "the token expired".into(),
        ErrorKind::ImmatureSignature => "the token is not valid yet (`nbf`)".into(),
        ErrorKind::InvalidAudience => "the token is for another audience".into(),
        ErrorKind::InvalidIssuer => "the token is from another issuer".into(),
        ErrorKind::InvalidSignature => "the token's signature does not verify".into(),
        ErrorKind::MissingRequiredClaim(claim) => format!("the token has no `{claim}` claim"),
        other => format!("the token is not valid: {other:?}"),
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
