//! `--oauth-token-ttl SECS`: the HTTP mode as an OAuth-protected MCP server with its own
//! authorization server, for sign-in tests. Every `/mcp` request needs a valid access token, else
//! 401 with a challenge naming the resource metadata. Served beside it: the Protected Resource
//! Metadata, the authorization server metadata (PKCE S256, dynamic registration, public
//! clients), `/register`, `/authorize` (no person: it redirects at once with a code; with
//! `--oauth-ask-user`, after a form asks who signs in, whose name the tokens then end in), `/token`
//! (the code with its PKCE verifier, or a refresh token; access tokens live SECS seconds, refresh
//! tokens rotate; or the client credentials grant for a client authenticating with Basic), and
//! `GET /oauth-stats` (how many tokens were issued by each grant). While the
//! `--oauth-revoke-while PATH` file exists, refresh tokens are refused (`invalid_grant`).
//!
//! What a compromised or misconfigured server does, for the client's trust checks:
//! `--oauth-authorization-server URL` names another authorization server in the resource
//! metadata, `--oauth-metadata-issuer URL` claims another `issuer` in the server metadata, and
//! `--oauth-token-redirect URL` answers `/token` with a 302 to URL; `--oauth-scope-tool NAME`
//! refuses calls of that tool with 403 `insufficient_scope`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use sha2::Digest;

/// The authorization server's state.
pub(crate) struct Authority {
    ttl: Duration,
    revoke_while: Option<PathBuf>,
    next: AtomicU64,
    /// Access tokens and when they expire.
    access: Mutex<HashMap<String, Instant>>,
    /// Valid refresh tokens.
    refresh: Mutex<Vec<String>>,
    /// Codes issued by `/authorize`: their PKCE challenges and the user who signed in.
    codes: Mutex<HashMap<String, (String, String)>>,
    /// `--oauth-ask-user`: `/authorize` asks who is signing in.
    ask_user: bool,
    by_code: AtomicU64,
    by_refresh: AtomicU64,
    by_client_credentials: AtomicU64,
    /// `--oauth-authorization-server`: the authorization server the resource metadata names.
    names_server: Option<String>,
    /// `--oauth-metadata-issuer`: the issuer the server metadata claims.
    claims_issuer: Option<String>,
    /// `--oauth-token-redirect`: where `/token` redirects to.
    token_redirect: Option<String>,
    /// `--oauth-exchange-audience`: the audience exchanged tokens name instead of theirs.
    exchange_audience: Option<String>,
    by_token_exchange: AtomicU64,
    /// `--oauth-revoke-reuse`: refresh tokens already used, and how often one came again.
    revoke_reuse: bool,
    used_refresh: Mutex<std::collections::HashSet<String>>,
    reused: AtomicU64,
    /// Refresh requests refused while `--oauth-revoke-while`'s file exists.
    refused_refresh: AtomicU64,
}

impl Authority {
    pub(crate) fn new(ttl_secs: u64, args: &crate::Args) -> Self {
        let mut access = HashMap::new();
        if let Some(token) = &args.oauth_static_token {
            access.insert(token.clone(), Instant::now() + Duration::from_secs(86_400));
        }
        Self {
            ttl: Duration::from_secs(ttl_secs),
            revoke_while: args.oauth_revoke_while.clone(),
            next: AtomicU64::new(1),
            access: Mutex::new(access),
            refresh: Mutex::default(),
            codes: Mutex::default(),
            by_code: AtomicU64::new(0),
            by_refresh: AtomicU64::new(0),
            by_client_credentials: AtomicU64::new(0),
            names_server: args.oauth_authorization_server.clone(),
            claims_issuer: args.oauth_metadata_issuer.clone(),
            token_redirect: args.oauth_token_redirect.clone(),
            exchange_audience: args.oauth_exchange_audience.clone(),
            by_token_exchange: AtomicU64::new(0),
            ask_user: args.oauth_ask_user,
            revoke_reuse: args.oauth_revoke_reuse,
            used_refresh: Mutex::default(),
            reused: AtomicU64::new(0),
            refused_refresh: AtomicU64::new(0),
        }
    }

    /// Whether `headers` carry a live access token.
    pub(crate) fn admits(&self, headers: &HeaderMap) -> bool {
        let token = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let access = self.access.lock().unwrap_or_else(|p| p.into_inner());
        token.is_some_and(|t| access.get(t).is_some_and(|until| Instant::now() < *until))
    }

    /// The 401 for a request without a live token.
    pub(crate) fn challenge(&self, origin: &str) -> Response {
        let value = format!(
            "Bearer error=\"invalid_token\", resource_metadata=\"{origin}/.well-known/oauth-protected-resource/mcp\""
        );
        (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, value)],
            "a valid access token is needed",
        )
            .into_response()
    }

    /// Tokens for `user` (empty: nobody in particular): theirs end in `.USER`.
    fn issue(&self, user: &str) -> serde_json::Value {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let whose = if user.is_empty() {
            String::new()
        } else {
            format!(".{user}")
        };
        let access = format!("mcpmux-test-access-{n}{whose}");
        let refresh = format!("mcpmux-test-refresh-{n}{whose}");
        let until = Instant::now() + self.ttl;
        if let Ok(mut map) = self.access.lock() {
            map.insert(access.clone(), until);
        }
        if let Ok(mut list) = self.refresh.lock() {
            list.push(refresh.clone());
        }
        serde_json::json!({"access_token": access, "token_type": "Bearer",
            "expires_in": self.ttl.as_secs(), "refresh_token": refresh})
    }
}

/// The 403 for a call that wants a scope no token has (`--oauth-scope-tool`).
pub(crate) fn insufficient_scope(origin: &str) -> Response {
    let value = format!(
        "Bearer error=\"insufficient_scope\", scope=\"mcp:admin\", resource_metadata=\"{origin}/.well-known/oauth-protected-resource/mcp\""
    );
    (
        StatusCode::FORBIDDEN,
        [(header::WWW_AUTHENTICATE, value)],
        "this tool needs the mcp:admin scope",
    )
        .into_response()
}

/// The origin requests name in their `Host` header.
pub(crate) fn origin(headers: &HeaderMap) -> String {
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("127.0.0.1");
    format!("http://{host}")
}

pub(crate) async fn resource_metadata(
    State(authority): State<std::sync::Arc<Authority>>,
    headers: HeaderMap,
) -> Response {
    let origin = origin(&headers);
    let server = authority.names_server.clone().unwrap_or(origin.clone());
    axum::Json(serde_json::json!({
        "resource": format!("{origin}/mcp"),
        "authorization_servers": [server],
    }))
    .into_response()
}

pub(crate) async fn server_metadata(
    State(authority): State<std::sync::Arc<Authority>>,
    headers: HeaderMap,
) -> Response {
    let origin = origin(&headers);
    let issuer = authority.claims_issuer.clone().unwrap_or(origin.clone());
    axum::Json(serde_json::json!({
        "issuer": issuer,
        "authorization_endpoint": format!("{origin}/authorize"),
        "token_endpoint": format!("{origin}/token"),
        "registration_endpoint": format!("{origin}/register"),
        "response_types_supported": ["code"],
        "grant_types_supported": ["authorization_code", "refresh_token", "client_credentials",
                                  "urn:ietf:params:oauth:grant-type:token-exchange"],
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": ["none", "client_secret_basic"],
    }))
    .into_response()
}

pub(crate) async fn register() -> Response {
    (
        StatusCode::CREATED,
        axum::Json(serde_json::json!({"client_id": "mcpmux-test-client",
            "token_endpoint_auth_method": "none"})),
    )
        .into_response()
}

pub(crate) async fn authorize(
    State(authority): State<std::sync::Arc<Authority>>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let (Some(redirect), Some(challenge)) =
        (query.get("redirect_uri"), query.get("code_challenge"))
    else {
        return (
            StatusCode::BAD_REQUEST,
            "redirect_uri and code_challenge are needed",
        )
            .into_response();
    };
    let user = query.get("user").cloned().unwrap_or_default();
    let valid = user.chars().all(|c| c.is_ascii_alphanumeric());
    if authority.ask_user && (user.is_empty() || !valid) {
        // The person says who they are; the form sends the same query back with `user`.
        let hidden: String = (query.iter())
            .filter(|(k, _)| *k != "user")
            .map(|(k, v)| {
                let escape = |s: &str| {
                    s.replace('&', "&amp;")
                        .replace('"', "&quot;")
                        .replace('<', "&lt;")
                };
                format!(
                    r#"<input type="hidden" name="{}" value="{}">"#,
                    escape(k),
                    escape(v)
                )
            })
            .collect();
        let page = format!(
            r#"<!doctype html><title>Test sign-in</title><h1>Test authorization server</h1><form method="get" action="/authorize">{hidden}<label>User <input id="user" name="user"></label><button id="approve" type="submit">Approve</button></form>"#
        );
        return ([(header::CONTENT_TYPE, "text/html")], page).into_response();
    }
    let code = format!("code-{}", authority.next.fetch_add(1, Ordering::Relaxed));
    if let Ok(mut codes) = authority.codes.lock() {
        codes.insert(code.clone(), (challenge.clone(), user));
    }
    let state = query.get("state").cloned().unwrap_or_default();
    let mut location = url::Url::parse(redirect)
        .unwrap_or_else(|_| url::Url::parse("http://invalid/").unwrap_or_else(|_| unreachable!()));
    location
        .query_pairs_mut()
        .append_pair("code", &code)
        .append_pair("state", &state);
    (
        StatusCode::FOUND,
        [(header::LOCATION, location.to_string())],
    )
        .into_response()
}

pub(crate) async fn token(
    State(authority): State<std::sync::Arc<Authority>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Some(location) = &authority.token_redirect {
        return (StatusCode::FOUND, [(header::LOCATION, location.clone())]).into_response();
    }
    let form: HashMap<String, String> = url::form_urlencoded::parse(&body).into_owned().collect();
    let refuse = |error: &str| {
        (
            StatusCode::BAD_REQUEST,
            axum::Json(serde_json::json!({"error": error})),
        )
            .into_response()
    };
    match form.get("grant_type").map(String::as_str) {
        Some("authorization_code") => {
            let (challenge, user) = form
                .get("code")
                .and_then(|c| authority.codes.lock().ok()?.remove(c))
                .unzip();
            let verifier = form
                .get("code_verifier")
                .map(String::as_str)
                .unwrap_or_default();
            let computed = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .encode(sha2::Sha256::digest(verifier.as_bytes()));
            if challenge.as_deref() != Some(computed.as_str()) {
                return refuse("invalid_grant");
            }
            authority.by_code.fetch_add(1, Ordering::Relaxed);
            axum::Json(authority.issue(&user.unwrap_or_default())).into_response()
        }
        Some("refresh_token") => {
            if authority.revoke_while.as_ref().is_some_and(|p| p.exists()) {
                authority.refused_refresh.fetch_add(1, Ordering::Relaxed);
                return refuse("invalid_grant");
            }
            let given = form.get("refresh_token").cloned().unwrap_or_default();
            let known = authority.refresh.lock().is_ok_and(|mut list| {
                let before = list.len();
                list.retain(|r| *r != given);
                list.len() < before
            });
            if !known {
                let reused =
                    (authority.used_refresh.lock()).is_ok_and(|used| used.contains(&given));
                if reused && authority.revoke_reuse {
                    // A replayed refresh token: the whole family is revoked.
                    authority.reused.fetch_add(1, Ordering::Relaxed);
                    if let Ok(mut list) = authority.refresh.lock() {
                        list.clear();
                    }
                    if let Ok(mut map) = authority.access.lock() {
                        map.clear();
                    }
                }
                return refuse("invalid_grant");
            }
            if let Ok(mut used) = authority.used_refresh.lock() {
                used.insert(given.clone());
            }
            authority.by_refresh.fetch_add(1, Ordering::Relaxed);
            let user = given.rsplit_once('.').map_or("", |(_, u)| u);
            axum::Json(authority.issue(user)).into_response()
        }
        // A confidential client: any secret will do, as long as it is sent with Basic.
        Some("client_credentials") => {
            let basic = headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.starts_with("Basic "));
            if !basic {
                return refuse("invalid_client");
            }
            authority
                .by_client_credentials
                .fetch_add(1, Ordering::Relaxed);
            axum::Json(authority.issue("")).into_response()
        }
        // RFC 8693: a JWT's `sub` (its signature is the host side's business) for a JWT-shaped
        // token naming that subject and the audience asked for (`resource`).
        Some("urn:ietf:params:oauth:grant-type:token-exchange") => {
            let basic = headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.starts_with("Basic "));
            let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
            let subject = (form.get("subject_token"))
                .and_then(|t| t.split('.').nth(1))
                .and_then(|p| b64.decode(p).ok())
                .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
                .and_then(|c| c["sub"].as_str().map(str::to_owned));
            let typed = form.get("subject_token_type").map(String::as_str)
                == Some("urn:ietf:params:oauth:token-type:jwt");
            let (Some(subject), true, true) = (subject, typed, basic) else {
                return refuse("invalid_request");
            };
            let audience = (authority.exchange_audience.clone())
                .or_else(|| form.get("resource").cloned())
                .unwrap_or_default();
            let n = authority.by_token_exchange.fetch_add(1, Ordering::Relaxed);
            let claims = serde_json::json!({"sub": subject, "aud": audience, "n": n});
            let token = format!(
                "{}.{}.exchanged",
                b64.encode(r#"{"alg":"none"}"#),
                b64.encode(claims.to_string())
            );
            if let Ok(mut map) = authority.access.lock() {
                map.insert(token.clone(), Instant::now() + authority.ttl);
            }
            axum::Json(
                serde_json::json!({"access_token": token, "token_type": "Bearer",
                "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
                "expires_in": authority.ttl.as_secs()}),
            )
            .into_response()
        }
        _ => refuse("unsupported_grant_type"),
    }
}

pub(crate) async fn stats(State(authority): State<std::sync::Arc<Authority>>) -> Response {
    axum::Json(serde_json::json!({
        "authorization_code": authority.by_code.load(Ordering::Relaxed),
        "refresh_token": authority.by_refresh.load(Ordering::Relaxed),
        "client_credentials": authority.by_client_credentials.load(Ordering::Relaxed),
        "token_exchange": authority.by_token_exchange.load(Ordering::Relaxed),
        "reused_refresh": authority.reused.load(Ordering::Relaxed),
        "refused_refresh": authority.refused_refresh.load(Ordering::Relaxed),
    }))
    .into_response()
}
