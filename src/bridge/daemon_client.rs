//! A small Streamable HTTP client for the daemon's own endpoint, used by `mcpmux stdio` and
//! `mcpmux tools`. It posts raw JSON-RPC text and returns the messages the daemon answered with,
//! whether as a JSON body or as an SSE stream.

use futures_util::StreamExt;
use reqwest::StatusCode;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderValue};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::mcp::envelope;

use crate::mcp::method::Method;
use crate::mcp::{SESSION_HEADER, VERSION_HEADER};

/// Why a message could not be exchanged with the daemon.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("the mcpmux daemon is not reachable at {url}: {reason} (is `mcpmux serve` running?)")]
    Unreachable { url: String, reason: String },
    #[error("the mcpmux daemon forgot this session (it restarted or the session expired)")]
    SessionGone,
    #[error("the mcpmux daemon answered HTTP {status}: {body}")]
    Http { status: StatusCode, body: String },
}

/// An HTTP client for the daemon on loopback: it never goes through `HTTP_PROXY`, `HTTPS_PROXY`
/// or `ALL_PROXY` (a proxy would see the host's token, and a dead one would cut the bridge off).
pub fn loopback_http() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        // Idle connections are let go before the daemon closes them (`server.header_timeout`,
        // 10 s by default), so a request never goes out on a connection being closed.
        .pool_idle_timeout(std::time::Duration::from_secs(4))
        .build()
        .unwrap_or_default()
}

/// Where the messages of an answer go.
enum Sink<'a> {
    Collect(&'a mut Vec<String>),
    Forward(&'a mpsc::Sender<String>),
}

impl Sink<'_> {
    async fn push(&mut self, message: String) {
        match self {
            Self::Collect(all) => all.push(message),
            Self::Forward(tx) => {
                let _ = tx.send(message).await;
            }
        }
    }
}

/// What a stateless (2026-07-28) request mirrors from its body into its headers. Such a request
/// belongs to no session: it goes without the session's id and version.
#[derive(Debug, Clone)]
pub struct Mirror {
    pub version: String,
    pub method: String,
    /// `params.name` or `params.uri`, for the methods that carry one.
    pub name: Option<String>,
}

impl Mirror {
    /// The mirror of a request, when its envelope makes it a stateless one.
    pub fn of(method: &str, params: Option<&serde_json::value::RawValue>) -> Option<Self> {
        let version = envelope::stateless_version(method, params)?;
        Some(Self {
            version,
            method: method.to_owned(),
            name: envelope::mirrored_name(method, params).map(|(_, name)| name),
        })
    }
}

/// One session with the daemon.
#[derive(Debug, Clone)]
pub struct HttpSession {
    http: reqwest::Client,
    url: String,
    /// `Authorization: Bearer …` for a daemon that knows its hosts (marked sensitive).
    token: Option<HeaderValue>,
    session_id: Option<String>,
    protocol_version: Option<String>,
}

impl HttpSession {
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            http: loopback_http(),
            url: url.into(),
            token: None,
            session_id: None,
            protocol_version: None,
        }
    }

    /// Presents `token` (a host's bearer token) on every request.
    pub fn with_token(mut self, token: Option<&str>) -> Self {
        self.token = token
            .and_then(|t| HeaderValue::from_str(&format!("Bearer {t}")).ok())
            .map(|mut v| {
                v.set_sensitive(true);
                v
            });
        self
    }

    /// Remembers the session and version an `initialize` exchange established.
    pub fn set_session(&mut self, id: Option<String>, protocol_version: Option<String>) {
        self.session_id = id;
        self.protocol_version = protocol_version;
    }

    pub fn session_id(&self) -> Option<&str> {
        self.session_id.as_deref()
    }

    fn headers(&self, mirror: Option<&Mirror>) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        );
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(token) = &self.token {
            h.insert(reqwest::header::AUTHORIZATION, token.clone());
        }
        if let Some(mirror) = mirror {
            let name = mirror.name.as_deref().map(envelope::encode_header_value);
            let mirrored = [
                (VERSION_HEADER, Some(mirror.version.as_str())),
                (envelope::METHOD_HEADER, Some(mirror.method.as_str())),
                (envelope::NAME_HEADER, name.as_deref()),
            ];
            for (header, value) in mirrored {
                if let Some(v) = value.and_then(|v| HeaderValue::from_str(v).ok()) {
                    h.insert(header, v);
                }
            }
            return h;
        }
        if let Some(id) = self
            .session_id
            .as_deref()
            .and_then(|v| HeaderValue::from_str(v).ok())
        {
            h.insert(SESSION_HEADER, id);
        }
        if let Some(v) = self
            .protocol_version
            .as_deref()
            .and_then(|v| HeaderValue::from_str(v).ok())
        {
            h.insert(VERSION_HEADER, v);
        }
        h
    }

    /// Posts one message; returns the messages of the answer (none for a notification) and the
    /// session id the daemon issued, if any.
    pub async fn post(&self, body: String) -> Result<(Vec<String>, Option<String>), ClientError> {
        let mut out = Vec::new();
        let issued = self
            .post_to(body, None, &mut Sink::Collect(&mut out))
            .await?;
        Ok((out, issued))
    }

    /// Posts one message and passes each message of the answer to `out` as it arrives (an event
    /// stream may carry requests the host must answer before the stream can end). Returns the
    /// session id the daemon issued, if any.
    pub async fn post_streaming(
        &self,
        body: String,
        out: &mpsc::Sender<String>,
    ) -> Result<Option<String>, ClientError> {
        self.post_to(body, None, &mut Sink::Forward(out)).await
    }

    /// [`Self::post_streaming`] for a stateless (2026-07-28) request, with its mirrored headers
    /// and outside the session.
    pub async fn post_stateless(
        &self,
        body: String,
        mirror: &Mirror,
        out: &mpsc::Sender<String>,
    ) -> Result<(), ClientError> {
        self.post_to(body, Some(mirror), &mut Sink::Forward(out))
            .await
            .map(drop)
    }

    async fn post_to(
        &self,
        body: String,
        mirror: Option<&Mirror>,
        out: &mut Sink<'_>,
    ) -> Result<Option<String>, ClientError> {
        let response = self
            .http
            .post(&self.url)
            .headers(self.headers(mirror))
            .body(body)
            .send()
            .await
            .map_err(|e| self.unreachable(&e))?;
        let status = response.status();
        let issued = response
            .headers()
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        if status == StatusCode::NOT_FOUND && self.session_id.is_some() {
            return Err(ClientError::SessionGone);
        }
        let is_sse = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.starts_with("text/event-stream"));
        if status == StatusCode::ACCEPTED {
            return Ok(issued);
        }
        if is_sse {
            let mut events = eventsource_stream::EventStream::new(response.bytes_stream());
            while let Some(event) = events.next().await {
                match event {
                    Ok(e) if !e.data.is_empty() => out.push(e.data).await,
                    Ok(_) => {}
                    Err(e) => {
                        return Err(ClientError::Unreachable {
                            url: self.url.clone(),
                            reason: e.to_string(),
                        });
                    }
                }
            }
            return Ok(issued);
        }
        let is_json = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.starts_with("application/json"));
        let text = response.text().await.map_err(|e| self.unreachable(&e))?;
        if text.trim().is_empty() || !is_json {
            if status.is_success() {
                return Ok(issued);
            }
            return Err(ClientError::Http {
                status,
                body: text.trim().to_owned(),
            });
        }
        // Refusals carry a JSON-RPC error body; pass it on so the host sees the reason.
        out.push(text.trim().to_owned()).await;
        Ok(issued)
    }

    /// Opens the server-to-host stream; yields each message.
    pub async fn listen(
        &self,
    ) -> Result<impl futures_util::Stream<Item = String> + use<>, ClientError> {
        let mut headers = self.headers(None);
        headers.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
        let response = self
            .http
            .get(&self.url)
            .headers(headers)
            .send()
            .await
            .map_err(|e| self.unreachable(&e))?;
        if !response.status().is_success() {
            let status = response.status();
            return Err(ClientError::Http {
                status,
                body: response.text().await.unwrap_or_default(),
            });
        }
        let events = eventsource_stream::EventStream::new(response.bytes_stream());
        Ok(events.filter_map(|e| async move { e.ok().map(|e| e.data).filter(|d| !d.is_empty()) }))
    }

    /// Ends the session (DELETE), so the daemon releases it at once.
    pub async fn end(&self) {
        if self.session_id.is_some() {
            let _ = self
                .http
                .delete(&self.url)
                .headers(self.headers(None))
                .send()
                .await;
        }
    }

    /// Initializes a session as a plain client (for `mcpmux tools`).
    pub async fn initialize(&mut self) -> Result<Value, ClientError> {
        let params = serde_json::json!({
            "protocolVersion": crate::mcp::version::Version::LATEST.as_str(),
            "capabilities": {},
            "clientInfo": {"name": "mcpmux-cli", "version": env!("CARGO_PKG_VERSION")},
        });
        let result = self.request(Method::Initialize.as_str(), params).await?;
        let version = result
            .get("protocolVersion")
            .and_then(Value::as_str)
            .map(str::to_owned);
        self.protocol_version = version;
        let _ = self
            .post(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.to_owned())
            .await?;
        Ok(result)
    }

    /// Sends one request and returns its result, or its error as [`ClientError::Http`].
    pub async fn request(&mut self, method: &str, params: Value) -> Result<Value, ClientError> {
        let body =
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
                .to_string();
        let (messages, issued) = self.post(body).await?;
        if issued.is_some() {
            self.session_id = issued;
        }
        let answer: Option<Value> = messages
            .iter()
            .filter_map(|m| serde_json::from_str::<Value>(m).ok())
            .find(|m| m.get("id").is_some());
        match answer {
            Some(mut m) if m.get("result").is_some() => Ok(m["result"].take()),
            Some(m) => Err(ClientError::Http {
                status: StatusCode::OK,
                body: m["error"].to_string(),
            }),
            None => Err(ClientError::Http {
                status: StatusCode::OK,
                body: "no answer".into(),
            }),
        }
    }

    fn unreachable(&self, e: &reqwest::Error) -> ClientError {
        let mut reason = e.to_string();
        let mut source = std::error::Error::source(e);
        while let Some(s) = source {
            reason = s.to_string();
            source = s.source();
        }
        ClientError::Unreachable {
            url: self.url.clone(),
            reason,
        }
    }
}
