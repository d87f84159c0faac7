//! A minimal host over Streamable HTTP: one session, requests answered whole or read as they
//! stream (`Call`), the session's event stream, answers to server requests.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use super::{Messages, Schemas, read_messages};

/// An HTTP client sending `Authorization: Bearer token` on every request, if a token is given.
fn http_client(token: Option<&str>) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    if let Some(token) = token {
        let value = reqwest::header::HeaderValue::from_str(&format!("Bearer {token}")).unwrap();
        headers.insert(reqwest::header::AUTHORIZATION, value);
    }
    reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .unwrap()
}

/// A minimal host: one session, every answer schema-checked.
pub struct Client {
    http: reqwest::Client,
    pub url: String,
    pub session: Option<String>,
    pub version: String,
    next_id: AtomicU64,
    schemas: Arc<Schemas>,
}

impl Client {
    /// Initializes a session speaking the latest version.
    pub async fn connect(url: &str) -> Self {
        Self::connect_with(url, "2025-11-25", json!({})).await
    }

    pub async fn connect_with(url: &str, version: &str, capabilities: Value) -> Self {
        Self::connect_full(url, version, capabilities, None).await
    }

    /// Initializes a session as the host whose bearer token is `token`.
    pub async fn connect_as(url: &str, token: &str) -> Self {
        Self::connect_full(url, "2025-11-25", json!({}), Some(token)).await
    }

    /// Initializes a session as the host whose bearer token is `token`, declaring `capabilities`.
    pub async fn connect_as_with(url: &str, token: &str, capabilities: Value) -> Self {
        Self::connect_full(url, "2025-11-25", capabilities, Some(token)).await
    }

    /// This session's id and version, presented with `token` instead (or no token).
    pub fn impersonate(&self, token: Option<&str>) -> Self {
        Self {
            http: http_client(token),
            url: self.url.clone(),
            session: self.session.clone(),
            version: self.version.clone(),
            next_id: AtomicU64::new(1000),
            schemas: Arc::clone(&self.schemas),
        }
    }

    async fn connect_full(
        url: &str,
        version: &str,
        capabilities: Value,
        token: Option<&str>,
    ) -> Self {
        let mut client = Self {
            http: http_client(token),
            url: url.to_owned(),
            session: None,
            version: version.to_owned(),
            next_id: AtomicU64::new(1),
            schemas: Schemas::get(version),
        };
        let params = json!({"protocolVersion": version, "capabilities": capabilities, "clientInfo": {"name": "mcpmux-tests", "version": "0"}});
        let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params});
        let response = client.post(&body).await;
        assert_eq!(response.status(), 200, "initialize failed");
        client.session = response
            .headers()
            .get("mcp-session-id")
            .map(|v| v.to_str().unwrap().to_owned());
        assert!(client.session.is_some(), "no Mcp-Session-Id issued");
        let message = read_messages(response).await.pop().unwrap();
        client.schemas.check_message(&message, Some("initialize"));
        let negotiated = message["result"]["protocolVersion"]
            .as_str()
            .unwrap()
            .to_owned();
        client.version = negotiated.clone();
        client.schemas = Schemas::get(&negotiated);
        let notified = client
            .post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        assert_eq!(notified.status(), 202);
        client
    }

    /// POSTs one message with this session's headers.
    pub async fn post(&self, body: &Value) -> reqwest::Response {
        self.post_raw(body.to_string(), &[]).await
    }

    pub async fn post_raw(
        &self,
        body: String,
        extra_headers: &[(&str, &str)],
    ) -> reqwest::Response {
        use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
        let mut headers = HeaderMap::new();
        let mut set = |k: &str, v: &str| {
            headers.insert(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        };
        set("content-type", "application/json");
        set("accept", "application/json, text/event-stream");
        set("mcp-protocol-version", &self.version);
        if let Some(s) = &self.session {
            set("mcp-session-id", s);
        }
        for (k, v) in extra_headers {
            set(k, v);
        }
        self.http
            .post(&self.url)
            .headers(headers)
            .body(body)
            .send()
            .await
            .unwrap()
    }

    /// Sends a request and returns the whole answer (`result` or `error`), schema-checked.
    pub async fn request(&self, method: &str, params: Value) -> Value {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut body = json!({"jsonrpc": "2.0", "id": id, "method": method});
        if !params.is_null() {
            body["params"] = params;
        }
        let response = self.post(&body).await;
        let messages = read_messages(response).await;
        let mut answer = None;
        for m in messages {
            let answers_us = m.get("id") == Some(&json!(id));
            self.schemas.check_message(&m, answers_us.then_some(method));
            if answers_us {
                answer = Some(m);
            }
        }
        answer.unwrap_or_else(|| panic!("no answer to {method}"))
    }

    /// The `result` of a request; panics on an error answer.
    pub async fn result(&self, method: &str, params: Value) -> Value {
        let answer = self.request(method, params).await;
        assert!(answer.get("error").is_none(), "{method} failed: {answer}");
        answer["result"].clone()
    }

    /// Every item of a listing, following `nextCursor` (asserting it is never empty).
    pub async fn list_all(&self, method: &str, field: &str) -> Vec<Value> {
        let mut items = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..100_000 {
            let params = cursor
                .as_ref()
                .map_or(json!({}), |c| json!({ "cursor": c }));
            let page = self.result(method, params).await;
            items.extend(page[field].as_array().unwrap().iter().cloned());
            match page.get("nextCursor").and_then(Value::as_str) {
                Some(next) => {
                    assert!(!next.is_empty(), "empty nextCursor");
                    cursor = Some(next.to_owned());
                }
                None => return items,
            }
        }
        panic!("listing never ended")
    }

    pub fn schemas(&self) -> &Schemas {
        &self.schemas
    }
}

/// A host request in flight, its answer read as it streams.
pub struct Call {
    pub id: Value,
    pub method: String,
    pub messages: Messages,
}

impl Call {
    /// The next message of the request's answer stream.
    pub async fn next(&mut self) -> Value {
        self.messages.next().await
    }

    /// Reads to the answer and asserts the answer stream then ends: the messages before the
    /// answer, and the answer (`result` or `error`).
    pub async fn finish(mut self) -> (Vec<Value>, Value) {
        let status = self.messages.status(Duration::from_secs(30)).await;
        assert_eq!(status, 200, "{} answered HTTP {status}", self.method);
        let (before, answer) = self.messages.until_answer(&self.id).await;
        let after = self.messages.rest(Duration::from_secs(10)).await;
        assert!(
            after.is_empty(),
            "messages after the answer to {}: {after:?}",
            self.method
        );
        (before, answer)
    }
}

impl Client {
    fn headers(&self) -> reqwest::header::HeaderMap {
        use reqwest::header::{HeaderMap, HeaderValue};
        let mut headers = HeaderMap::new();
        headers.insert("content-type", HeaderValue::from_static("application/json"));
        headers.insert(
            "accept",
            HeaderValue::from_static("application/json, text/event-stream"),
        );
        headers.insert(
            "mcp-protocol-version",
            HeaderValue::from_str(&self.version).unwrap(),
        );
        if let Some(s) = &self.session {
            headers.insert("mcp-session-id", HeaderValue::from_str(s).unwrap());
        }
        headers
    }

    /// A fresh request id of this client.
    pub fn fresh_id(&self) -> Value {
        json!(self.next_id.fetch_add(1, Ordering::Relaxed))
    }

    /// Starts a request (POST sent in the background) whose answer is read as it streams.
    pub fn start(&self, method: &str, params: Value) -> Call {
        self.start_with_id(self.fresh_id(), method, params)
    }

    pub fn start_with_id(&self, id: Value, method: &str, params: Value) -> Call {
        let mut body = json!({"jsonrpc": "2.0", "id": id, "method": method});
        if !params.is_null() {
            body["params"] = params;
        }
        let request = self
            .http
            .post(&self.url)
            .headers(self.headers())
            .body(body.to_string());
        let handle = tokio::spawn(async move { request.send().await.unwrap() });
        let mut messages = Messages::pending(Some(handle), Arc::clone(&self.schemas));
        messages.expect_answer(&id, method);
        Call {
            id,
            method: method.to_owned(),
            messages,
        }
    }

    /// `tools/call` of `name` with `arguments`, answer read as it streams.
    pub fn start_tool(&self, name: &str, arguments: Value) -> Call {
        self.start("tools/call", json!({"name": name, "arguments": arguments}))
    }

    /// Opens this session's GET event stream.
    pub async fn events(&self) -> Messages {
        let mut headers = self.headers();
        headers.remove("content-type");
        headers.insert(
            "accept",
            reqwest::header::HeaderValue::from_static("text/event-stream"),
        );
        let response = self
            .http
            .get(&self.url)
            .headers(headers)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "GET stream refused");
        Messages::from_response(response, Arc::clone(&self.schemas))
    }

    /// POSTs a host message that gets no answer (notification, response): must be 202.
    pub async fn send_accepted(&self, body: &Value) {
        let response = self.post(body).await;
        assert_eq!(response.status(), 202, "not accepted: {body}");
    }

    pub async fn notify(&self, method: &str, params: Value) {
        self.send_accepted(&json!({"jsonrpc": "2.0", "method": method, "params": params}))
            .await;
    }

    /// Answers a server request.
    pub async fn respond(&self, id: &Value, result: Value) {
        self.send_accepted(&json!({"jsonrpc": "2.0", "id": id, "result": result}))
            .await;
    }

    /// Refuses a server request.
    pub async fn respond_error(&self, id: &Value, error: Value) {
        self.send_accepted(&json!({"jsonrpc": "2.0", "id": id, "error": error}))
            .await;
    }

    /// Ends the session (DELETE); returns the HTTP status.
    pub async fn delete(&self) -> reqwest::StatusCode {
        self.http
            .delete(&self.url)
            .headers(self.headers())
            .send()
            .await
            .unwrap()
            .status()
    }

    /// Calls a tool and returns the text of its first content block, asserting no other message
    /// came on the request's stream and the result is not an error.
    pub async fn tool_text(&self, name: &str, arguments: Value) -> String {
        let (before, answer) = self.start_tool(name, arguments).finish().await;
        assert!(before.is_empty(), "{name}: unexpected messages {before:?}");
        let result = &answer["result"];
        assert!(
            result.is_object() && result["isError"] != true,
            "{name} failed: {answer}"
        );
        result["content"][0]["text"].as_str().unwrap().to_owned()
    }
}
