//! A host on the 2024-11-05 HTTP+SSE transport: `GET /sse`, then every message POSTed to the
//! endpoint the stream announced.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use super::{Messages, Schemas, SseReader};

/// A legacy host: `GET /sse`, then every message POSTed to the announced endpoint.
pub struct LegacyHost {
    http: reqwest::Client,
    /// The absolute URL of the endpoint the stream announced.
    pub endpoint: String,
    pub events: Messages,
    next_id: AtomicU64,
}

impl LegacyHost {
    /// Opens `/sse` next to `mcp_url` and reads the `endpoint` event (it must come first).
    pub async fn open(mcp_url: &str, version: &str) -> Self {
        let base = mcp_url.strip_suffix("/mcp").unwrap();
        let http = reqwest::Client::new();
        let response = http
            .get(format!("{base}/sse"))
            .header("accept", "text/event-stream")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let mut reader = SseReader::new(response);
        let first = reader
            .next_event(Duration::from_secs(10))
            .await
            .expect("no endpoint event")
            .expect("the stream ended");
        assert_eq!(first.event.as_deref(), Some("endpoint"), "{first:?}");
        assert!(
            first.data.starts_with("/messages?sessionId="),
            "endpoint: {}",
            first.data
        );
        Self {
            http,
            endpoint: format!("{base}{}", first.data),
            events: Messages::from_sse(reader, Schemas::get(version)),
            next_id: AtomicU64::new(1),
        }
    }

    /// POSTs one message to the endpoint; returns the status.
    pub async fn post(&self, body: &Value) -> reqwest::StatusCode {
        self.http
            .post(&self.endpoint)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap()
            .status()
    }

    /// Sends a request (202) and reads the stream to its answer: the messages before it, and it.
    pub async fn request(&mut self, method: &str, params: Value) -> (Vec<Value>, Value) {
        let id = json!(self.next_id.fetch_add(1, Ordering::Relaxed));
        let mut body = json!({"jsonrpc": "2.0", "id": id, "method": method});
        if !params.is_null() {
            body["params"] = params;
        }
        self.events.expect_answer(&id, method);
        assert_eq!(self.post(&body).await, 202, "{method} not accepted");
        self.events.until_answer(&id).await
    }
}
