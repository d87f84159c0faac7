//! One whole sign-in for one upstream: the challenge (the one the upstream last answered with,
//! or a fresh unauthenticated probe), discovery, the client identity, then either the client
//! credentials grant (no person involved) or the authorization code flow — a loopback listener
//! on 127.0.0.1 for the redirect, PKCE, `state` checked, the code exchanged — and the tokens
//! stored in the upstream's token file.
//!
//! The redirect listener answers one request: `GET /callback` with the `state` this sign-in
//! issued, once. Anything else (another path or method, a missing or forged `state`, a replay) is
//! refused with 404/405/400 and leaves the sign-in waiting, so a page that guesses the port can
//! neither end it nor slip its own code in (login CSRF). A sign-in is only started by the admin
//! API (`POST /upstreams/{name}/login`, which wants the admin token) for `mcpmux login`; the
//! supervisor only ever renews one without a person ([`Login::renew`]).

use std::collections::HashMap;
use std::time::Duration;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use serde::Deserialize as _;
use tokio::sync::{mpsc, oneshot};
use url::Url;

use super::client;
use super::discovery::{Discovered, discover};
use super::identity::ClientIdentity;
use super::token::{Authorize, Grant, Pkce, random_text};
use super::{Challenge, OAuthError, TokenFile};
use crate::config::{OAuthConfig, OAuthGrant};
use crate::http_body::error_chain;
use crate::mcp::method::Method;

/// How long a started sign-in waits for the person to finish it.
const LOGIN_WAIT: Duration = Duration::from_secs(600);

/// A sign-in about to start.
pub struct Login {
    pub upstream: String,
    /// The upstream's MCP endpoint.
    pub url: Url,
    pub oauth: OAuthConfig,
    /// An HTTP client with the upstream's TLS settings, no credential, following no redirect.
    pub http: reqwest::Client,
    /// The `WWW-Authenticate` value the upstream last refused mcpmux with, if any.
    pub challenge: Option<String>,
    /// Where the person goes on once the sign-in has reached mcpmux (the console's page for it,
    /// when the console started it): the callback page links there.
    pub return_to: Option<Url>,
}

/// A sign-in under way.
pub struct LoginStarted {
    /// Where the person signs in; `None` when nobody needs to (client credentials).
    pub authorization_url: Option<String>,
    /// Resolves once the tokens are stored, or with why the sign-in failed.
    pub finished: oneshot::Receiver<Result<(), OAuthError>>,
}

/// RFC 7523's grant type: a JWT as the authorization grant.
const JWT_BEARER: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";
impl Login {
    /// Discovers how to sign in and starts it.
    pub async fn start(self) -> Result<LoginStarted, OAuthError> {
        let (found, token_endpoint, scope) = self.discover().await?;
        let (done, finished) = oneshot::channel();
        if self.oauth.grant.needs_no_person() {
            self.machine_grant(&found, &token_endpoint, scope).await?;
            let _ = done.send(Ok(()));
            return Ok(LoginStarted {
                authorization_url: None,
                finished,
            });
        }
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", self.oauth.redirect_port))
            .await
            .map_err(|e| {
                OAuthError::new(format!(
                    "cannot listen on 127.0.0.1:{} for the sign-in's redirect: {e}",
                    self.oauth.redirect_port
                ))
            })?;
        let port = listener
            .local_addr()
            .map_err(|e| OAuthError::new(format!("cannot read the redirect listener's port: {e}")))?
            .port();
        let redirect_uri = format!("http://127.0.0.1:{port}/callback");
        let (url, flow) = self
            .authorization(found, token_endpoint, scope, (redirect_uri, None))
            .await?;
        tokio::spawn(async move {
            let outcome = tokio::time::timeout(LOGIN_WAIT, self.finish(listener, flow))
                .await
                .unwrap_or_else(|_| {
                    Err(OAuthError::new(format!(
                        "nobody finished signing in within {} minutes",
                        LOGIN_WAIT.as_secs() / 60
                    )))
                });
            let _ = done.send(outcome);
        });
        Ok(LoginStarted {
            authorization_url: Some(url.to_string()),
            finished,
        })
    }

    /// The authorization code flow with its redirect to `redirect_uri`, a page of mcpmux's own
    /// (a principal's sign-in through its host): the URL to send the person to, and what
    /// finishes the sign-in once the redirect comes back there. The `state` starts with `owner`
    /// and a dot, where given (the replica the redirect must reach, `[cluster]`).
    pub async fn begin_at(
        self,
        redirect_uri: String,
        owner: Option<&str>,
    ) -> Result<WebSignIn, OAuthError> {
        if self.oauth.grant != OAuthGrant::AuthorizationCode {
            return Err(OAuthError::new(
                "only an authorization_code upstream signs a person in through a browser",
            ));
        }
        let (found, token_endpoint, scope) = self.discover().await?;
        let (url, flow) = self
            .authorization(found, token_endpoint, scope, (redirect_uri, owner))
            .await?;
        Ok(WebSignIn {
            login: self,
            flow,
            authorization_url: url,
        })
    }

    /// The challenge, the authorization server's metadata, its token endpoint and the scopes to
    /// ask for.
    async fn discover(&self) -> Result<(Discovered, String, Option<String>), OAuthError> {
        if self.oauth.grant == OAuthGrant::TokenExchange {
            return Err(OAuthError::new(
                "it exchanges each caller's own token (grant = \"token_exchange\"): there is no sign-in of mcpmux's own; hosts sign in with their identity provider",
            ));
        }
        let challenge = match &self.challenge {
            Some(header) => Challenge::parse(header),
            None => self.probe().await?,
        };
        let found = discover(
            &self.http,
            &self.url,
            &challenge,
            self.oauth.issuer.as_ref(),
        )
        .await?;
        let token_endpoint = found.metadata.token_endpoint.clone().ok_or_else(|| {
            OAuthError::new(format!(
                "its authorization server {} names no token endpoint",
                found.issuer
            ))
        })?;
        let scope = self.scope(&challenge, &found);
        Ok((found, token_endpoint, scope))
    }

    /// The client credentials, JWT bearer or identity assertion grant: tokens without a person,
    /// stored. One at a time per token file: a renewal and a `mcpmux login` that meet do not
    /// interleave (an identity provider may void an ID-JAG it issued before the next).
    async fn machine_grant(
        &self,
        found: &Discovered,
        token_endpoint: &str,
        scope: Option<String>,
    ) -> Result<(), OAuthError> {
        let one_at_a_time = one_at_a_time(&self.oauth.token_file);
        let _turn = one_at_a_time.lock().await;
        let issuer = found.issuer.as_str().trim_end_matches('/');
        let client =
            client::configured(&self.oauth, &found.metadata, issuer)?.ok_or_else(|| {
                OAuthError::new(
                "the client_credentials, jwt_bearer and identity_assertion grants need client_id",
            )
            })?;
        let dpop = found.metadata.dpop_key()?;
        let grant = Grant {
            token_endpoint,
            client: &client,
            resource: &found.resource,
            scope: scope.as_deref(),
            dpop: dpop.as_ref(),
        };
        let mut form = match &self.oauth.assertion {
            // The ID token exchanged at the identity provider for an ID-JAG naming this
            // authorization server, which is the grant (enterprise-managed authorization).
            Some(source) if self.oauth.grant == OAuthGrant::IdentityAssertion => {
                let id_token = source.read().map_err(|why| {
                    OAuthError::new(format!("cannot read the identity token: {why}"))
                })?;
                let audience = (found.metadata.issuer.clone()).unwrap_or_else(|| issuer.to_owned());
                let jag = super::exchange::id_jag(
                    &self.http,
                    self.oauth.idp.as_ref(),
                    (&id_token, &audience, &found.resource),
                    scope.as_deref(),
                )
                .await?;
                vec![("grant_type", JWT_BEARER.to_owned()), ("assertion", jag)]
            }
            // RFC 7523 §2.1: the workload's JWT is the grant, read now (its platform keeps it
            // fresh).
            Some(source) if self.oauth.grant == OAuthGrant::JwtBearer => vec![
                ("grant_type", JWT_BEARER.to_owned()),
                (
                    "assertion",
                    source.read().map_err(|why| {
                        OAuthError::new(format!("cannot read the workload's JWT: {why}"))
                    })?,
                ),
            ],
            _ => vec![("grant_type", "client_credentials".to_owned())],
        };
        if let Some(scope) = &scope {
            form.push(("scope", scope.clone()));
        }
        let tokens = grant.request(&self.http, form, None).await?;
        self.store(&tokens)
    }

    /// The client, PKCE and `state` of an authorization code flow redirecting to
    /// `redirect_uri`, and the URL the person signs in at.
    async fn authorization(
        &self,
        found: Discovered,
        token_endpoint: String,
        scope: Option<String>,
        (redirect_uri, owner): (String, Option<&str>),
    ) -> Result<(Url, Flow), OAuthError> {
        let client = client::identify(
            &self.http,
            &self.oauth,
            &found.metadata,
            &found.issuer,
            &redirect_uri,
        )
        .await?;
        let endpoint = found
            .metadata
            .authorization_endpoint
            .clone()
            .ok_or_else(|| {
                OAuthError::new(format!(
                    "its authorization server {} names no authorization endpoint",
                    found.issuer
                ))
            })?;
        let pkce = Pkce::new();
        let state = crate::cluster::owned(owner, random_text(16));
        let url = Authorize {
            endpoint: &endpoint,
            client: &client,
            redirect_uri: &redirect_uri,
            challenge: &pkce.challenge,
            state: &state,
            scope: scope.as_deref(),
            resource: &found.resource,
        }
        .url()?;
        let flow = Flow {
            issuer: IssuerCheck {
                issuer: (found.metadata.issuer.clone()).unwrap_or_else(|| found.issuer.to_string()),
                required: found
                    .metadata
                    .authorization_response_iss_parameter_supported,
            },
            state,
            pkce,
            redirect_uri,
            client,
            scope,
            dpop: found.metadata.dpop_key()?,
            resource: found.resource,
            token_endpoint,
        };
        Ok((url, flow))
    }

    /// Signs in again where no person is needed: with the refresh token (unless the server
    /// wants wider scopes, which takes a person), or by the client credentials grant.
    /// `Ok(true)` once new tokens are stored; `Ok(false)` when only `mcpmux login` can help.
    pub async fn renew(self) -> Result<bool, OAuthError> {
        if self.oauth.grant.needs_no_person() {
            let started = self.start().await?;
            let finished = started.finished.await;
            return finished
                .unwrap_or_else(|_| Err(OAuthError::new("the sign-in was dropped")))
                .map(|()| true);
        }
        let challenge = self.challenge.as_deref().map(Challenge::parse);
        let step_up = challenge.is_some_and(|c| c.error.as_deref() == Some("insufficient_scope"));
        let refreshable = TokenFile::load(&self.oauth).is_some_and(|t| t.refresh_token.is_some());
        if step_up || !refreshable {
            return Ok(false);
        }
        super::refresh_if_due(&self.http, &self.oauth, true).await
    }

    /// Asks the upstream without a credential, for its challenge.
    async fn probe(&self) -> Result<Challenge, OAuthError> {
        let body = serde_json::json!({
            "jsonrpc": "2.0", "id": 0, "method": Method::Initialize.as_str(),
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "mcpmux", "version": env!("CARGO_PKG_VERSION")}}
        });
        let response = self
            .http
            .post(self.url.clone())
            .header(
                reqwest::header::ACCEPT,
                "application/json, text/event-stream",
            )
            .json(&body)
            .send()
            .await
            .map_err(|e| {
                OAuthError::new(format!("cannot reach {}: {}", self.url, error_chain(&e)))
            })?;
        let header = response
            .headers()
            .get(reqwest::header::WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        Ok(Challenge::parse(header))
    }

    /// The scopes to ask for: the challenge's, else the resource's `scopes_supported`, else
    /// none; on a step-up, with those granted before; `offline_access` where the server offers
    /// it, so the sign-in lasts.
    fn scope(&self, challenge: &Challenge, found: &Discovered) -> Option<String> {
        let split = |s: &str| s.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
        let mut scopes = match (&challenge.scope, &found.resource_scopes) {
            (Some(scope), _) => split(scope),
            (None, Some(listed)) => listed.clone(),
            (None, None) => Vec::new(),
        };
        if challenge.error.as_deref() == Some("insufficient_scope") {
            let before = TokenFile::load(&self.oauth).and_then(|t| t.scope);
            for scope in before.as_deref().map(split).unwrap_or_default() {
                if !scopes.contains(&scope) {
                    scopes.push(scope);
                }
            }
        }
        let offline = "offline_access".to_owned();
        let offers_offline = found.metadata.scopes_supported.contains(&offline);
        if !scopes.is_empty() && offers_offline && !scopes.contains(&offline) {
            scopes.push(offline);
        }
        (!scopes.is_empty()).then(|| scopes.join(" "))
    }

    fn store(&self, tokens: &TokenFile) -> Result<(), OAuthError> {
        tokens.save(&self.oauth).map_err(|e| {
            OAuthError::new(format!(
                "cannot store the tokens in {}: {e}",
                self.oauth.token_file.display()
            ))
        })?;
        tracing::info!(upstream = %self.upstream, file = %self.oauth.token_file.display(), "Signed in; tokens stored.");
        Ok(())
    }

    /// Waits for the redirect with the right `state` on `listener`, then exchanges its code.
    async fn finish(self, listener: tokio::net::TcpListener, flow: Flow) -> Result<(), OAuthError> {
        let (tx, mut rx) = mpsc::channel::<HashMap<String, String>>(1);
        let expected = Arc::new(Callback {
            state: flow.state.clone(),
            tx,
            used: AtomicBool::new(false),
            upstream: self.upstream.clone(),
            return_to: self.return_to.clone(),
        });
        let app = axum::Router::new()
            .route("/callback", axum::routing::get(callback))
            .with_state(expected);
        let (stop, stopped) = oneshot::channel::<()>();
        let server = axum::serve(listener, app).with_graceful_shutdown(async {
            let _ = stopped.await;
        });
        let serving = tokio::spawn(async move { server.await });
        let outcome = async {
            loop {
                let Some(query) = rx.recv().await else {
                    return Err(OAuthError::new("the redirect listener stopped"));
                };
                if query.get("state") != Some(&flow.state) {
                    tracing::warn!(upstream = %self.upstream, "A sign-in redirect came back with the wrong state; ignored.");
                    continue;
                }
                return self.redeem(&flow, &query).await;
            }
        }
        .await;
        let _ = stop.send(());
        let _ = serving.await;
        outcome
    }

    /// The redirect of `flow` (its `state` already matched): its issuer checked, its code
    /// exchanged and the tokens stored.
    async fn redeem(&self, flow: &Flow, query: &HashMap<String, String>) -> Result<(), OAuthError> {
        if let Some(why) = flow.issuer.refuses(query.get("iss")) {
            return Err(OAuthError::new(format!(
                "refused the sign-in's redirect: {why}"
            )));
        }
        if let Some(error) = query.get("error") {
            let description = query.get("error_description").map_or("", String::as_str);
            return Err(OAuthError::new(format!(
                "the authorization server refused the sign-in: {error} {description}"
            )));
        }
        let Some(code) = query.get("code") else {
            return Err(OAuthError::new("the sign-in's redirect carried no code"));
        };
        let grant = Grant {
            token_endpoint: &flow.token_endpoint,
            client: &flow.client,
            resource: &flow.resource,
            scope: flow.scope.as_deref(),
            dpop: flow.dpop.as_ref(),
        };
        let form = vec![
            ("grant_type", "authorization_code".to_owned()),
            ("code", code.clone()),
            ("code_verifier", flow.pkce.verifier.clone()),
            ("redirect_uri", flow.redirect_uri.clone()),
        ];
        let tokens = grant.request(&self.http, form, None).await?;
        self.store(&tokens)
    }
}

/// An authorization code flow whose redirect comes back to a page of mcpmux's own
/// ([`Login::begin_at`]).
pub struct WebSignIn {
    login: Login,
    flow: Flow,
    /// Where the person signs in.
    pub authorization_url: Url,
}

impl WebSignIn {
    /// The `state` the redirect must bring back.
    pub fn state(&self) -> &str {
        &self.flow.state
    }

    /// Finishes it with the redirect's `query` (whose `state` the caller matched, in constant
    /// time): the code exchanged and the tokens stored.
    pub async fn finish(&self, query: &HashMap<String, String>) -> Result<(), OAuthError> {
        self.login.redeem(&self.flow, query).await
    }

    /// The flow as another replica goes on with it ([`Self::resume`]); it holds the PKCE
    /// verifier and the DPoP key, so it is kept sealed.
    pub fn to_value(&self) -> serde_json::Value {
        let flow = &self.flow;
        serde_json::to_value(FlowRecord {
            authorization_url: self.authorization_url.to_string(),
            issuer: flow.issuer.issuer.clone(),
            iss_required: flow.issuer.required,
            state: flow.state.clone(),
            verifier: flow.pkce.verifier.clone(),
            redirect_uri: flow.redirect_uri.clone(),
            client: flow.client.clone(),
            scope: flow.scope.clone(),
            resource: flow.resource.clone(),
            token_endpoint: flow.token_endpoint.clone(),
            dpop: flow.dpop.as_ref().map(super::dpop::DpopKey::to_text),
        })
        .unwrap_or_default()
    }

    /// The flow `value` ([`Self::to_value`]) another replica began, finished by `login`.
    pub fn resume(login: Login, value: &serde_json::Value) -> Result<Self, OAuthError> {
        let record = FlowRecord::deserialize(value).map_err(|e| {
            OAuthError::new(format!("the sign-in's stored flow is unreadable: {e}"))
        })?;
        let authorization_url = Url::parse(&record.authorization_url).map_err(|e| {
            OAuthError::new(format!("the sign-in's stored flow is unreadable: {e}"))
        })?;
        let dpop = (record.dpop.as_deref())
            .map(super::dpop::DpopKey::from_text)
            .transpose()?;
        let flow = Flow {
            issuer: IssuerCheck {
                issuer: record.issuer,
                required: record.iss_required,
            },
            state: record.state,
            pkce: Pkce::of(record.verifier),
            redirect_uri: record.redirect_uri,
            client: record.client,
            scope: record.scope,
            resource: record.resource,
            token_endpoint: record.token_endpoint,
            dpop,
        };
        Ok(Self {
            login,
            flow,
            authorization_url,
        })
    }
}

/// An authorization code flow as replicas pass it on (sealed, in the fleet store).
#[derive(serde::Serialize, serde::Deserialize)]
struct FlowRecord {
    authorization_url: String,
    issuer: String,
    iss_required: bool,
    state: String,
    verifier: String,
    redirect_uri: String,
    client: ClientIdentity,
    scope: Option<String>,
    resource: String,
    token_endpoint: String,
    dpop: Option<String>,
}

/// The lock of the sign-ins that store into `token_file`.
fn one_at_a_time(token_file: &std::path::Path) -> Arc<tokio::sync::Mutex<()>> {
    type Locks =
        std::sync::Mutex<HashMap<std::path::PathBuf, std::sync::Weak<tokio::sync::Mutex<()>>>>;
    static LOCKS: std::sync::LazyLock<Locks> = std::sync::LazyLock::new(Locks::default);
    let mut locks = crate::sync::lock(&LOCKS);
    locks.retain(|_, lock| lock.strong_count() > 0);
    if let Some(lock) = locks.get(token_file).and_then(std::sync::Weak::upgrade) {
        return lock;
    }
    let lock = Arc::new(tokio::sync::Mutex::new(()));
    locks.insert(token_file.to_path_buf(), Arc::downgrade(&lock));
    lock
}

/// What the redirect's `iss` must be (RFC 9207, "mix-up" defence): the issuer this sign-in
/// went to, exactly as its metadata spells it (no normalisation), and whether it must be there.
struct IssuerCheck {
    issuer: String,
    required: bool,
}

impl IssuerCheck {
    /// Why a redirect with `iss` cannot be from this sign-in's server, if it cannot.
    fn refuses(&self, iss: Option<&String>) -> Option<String> {
        match iss {
            None if self.required => Some(format!(
                "its authorization server {} says its redirects carry `iss`, and this one did not",
                self.issuer
            )),
            Some(iss) if *iss != self.issuer => Some(format!(
                "the redirect names issuer `{iss}`, not `{}`, the server this sign-in went to (a mix-up attack, or a misconfigured server)",
                self.issuer
            )),
            _ => None,
        }
    }
}

/// The authorization code flow once the person is on their way.
struct Flow {
    issuer: IssuerCheck,
    state: String,
    pkce: Pkce,
    redirect_uri: String,
    client: ClientIdentity,
    scope: Option<String>,
    resource: String,
    token_endpoint: String,
    /// The key its tokens are bound to (DPoP), when the server takes proofs.
    dpop: Option<super::dpop::DpopKey>,
}

/// The one redirect the listener waits for.
struct Callback {
    /// The `state` this sign-in issued.
    state: String,
    tx: mpsc::Sender<HashMap<String, String>>,
    /// Set by the first redirect with the right `state`: any later one is a replay.
    used: AtomicBool,
    upstream: String,
    return_to: Option<Url>,
}

async fn callback(
    State(expected): State<Arc<Callback>>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    use subtle::ConstantTimeEq;
    let issued = query
        .get("state")
        .is_some_and(|s| bool::from(s.as_bytes().ct_eq(expected.state.as_bytes())));
    if !issued {
        tracing::warn!(upstream = %expected.upstream, "Refused a sign-in redirect with a state this sign-in did not issue.");
        let page = "<p>mcpmux did not start this sign-in (its state is not the one issued); nothing was done.</p>";
        return (StatusCode::BAD_REQUEST, Html(page)).into_response();
    }
    if expected.used.swap(true, Ordering::SeqCst) {
        let page = "<p>mcpmux already received this sign-in.</p>";
        return (StatusCode::BAD_REQUEST, Html(page)).into_response();
    }
    let _ = expected.tx.send(query).await;
    let page = match &expected.return_to {
        Some(url) => maud::html! {
            p { "mcpmux received the sign-in to " (expected.upstream) "." }
            p { a href=(url.as_str()) { "Back to the mcpmux console" } }
        },
        None => maud::html! { p { "mcpmux received the sign-in. You can close this tab." } },
    };
    Html(page.into_string()).into_response()
}

#[cfg(test)]
mod tests {
    use super::IssuerCheck;

    #[test]
    fn a_redirect_names_the_issuer_of_its_sign_in_exactly() {
        let check = |required| IssuerCheck {
            issuer: "https://as.example/tenant".into(),
            required,
        };
        let iss = |s: &str| Some(s.to_owned());
        assert!(
            check(true)
                .refuses(iss("https://as.example/tenant").as_ref())
                .is_none()
        );
        assert!(check(false).refuses(None).is_none());
        assert!(check(true).refuses(None).is_some());
        for other in [
            "https://as.example/tenant/",
            "https://AS.example/tenant",
            "https://as.example:443/tenant",
            "https://evil.example/tenant",
        ] {
            assert!(
                check(false).refuses(iss(other).as_ref()).is_some(),
                "{other}"
            );
        }
    }
}
