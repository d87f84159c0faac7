//! Server → client requests and notifications: our own request ids, the responses routed back to
//! the task waiting for them, and the tools' "ask the client, then answer" pattern.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::sync::oneshot;

use crate::server::Server;
use crate::tools::{error_result, text_result};
use crate::wire::{Out, Outbox, Outcome, ok_line};

/// What the client answered to one of our requests: its `result`, or
/// `"<error.message> (<error.code>)"`.
pub(crate) type ClientReply = Result<Value, String>;

/// Server → client messages: requests with our own ids (`srv-1`, `srv-2`, ...)
/// whose responses are routed back by id, and notifications.
#[derive(Clone)]
pub(crate) struct ClientLink {
    out: Outbox,
    next_id: Arc<AtomicU64>,
    pending: Arc<Mutex<HashMap<String, oneshot::Sender<ClientReply>>>>,
}

impl ClientLink {
    pub(crate) fn new(out: Outbox) -> Self {
        ClientLink {
            out,
            next_id: Arc::new(AtomicU64::new(1)),
            pending: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// Queues one line; fails only when the process is already exiting.
    pub(crate) fn send(&self, line: String) {
        let _ = self.out.send(Out::Line(line));
    }

    pub(crate) fn notify(&self, method: &str, params: Value) {
        let msg = json!({"jsonrpc": "2.0", "method": method, "params": params});
        self.send(msg.to_string());
    }

    /// [`Self::notify`] for a notification that belongs to the call with id `call` (over HTTP it
    /// goes on that call's stream, as a request's log messages do).
    pub(crate) fn notify_caused_by(&self, call: &Value, method: &str, params: Value) {
        let msg = json!({"jsonrpc": "2.0", "method": method, "params": params});
        let _ = self.out.send(Out::Caused {
            line: msg.to_string(),
            call: call.to_string(),
        });
    }

    /// Sends a request to the client; the receiver gets its response.
    pub(crate) fn request(
        &self,
        method: &str,
        params: Option<Value>,
    ) -> (String, oneshot::Receiver<ClientReply>) {
        self.request_caused_by(None, method, params)
    }

    /// [`Self::request`] for the call with id `call`, which caused it (over HTTP it goes on that
    /// call's stream).
    pub(crate) fn request_caused_by(
        &self,
        call: Option<&Value>,
        method: &str,
        params: Option<Value>,
    ) -> (String, oneshot::Receiver<ClientReply>) {
        let id = format!("srv-{}", self.next_id.fetch_add(1, Ordering::Relaxed));
        let (tx, rx) = oneshot::channel();
        if let Ok(mut pending) = self.pending.lock() {
            pending.insert(id.clone(), tx);
        }
        let mut msg = json!({"jsonrpc": "2.0", "id": id, "method": method});
        if let Some(params) = params {
            msg["params"] = params;
        }
        let line = msg.to_string();
        let _ = match call {
            Some(call) => self.out.send(Out::Caused {
                line,
                call: call.to_string(),
            }),
            None => self.out.send(Out::Line(line)),
        };
        (id, rx)
    }

    /// Stops waiting for the response to `id`; a late one is then ignored.
    pub(crate) fn forget(&self, id: &str) {
        if let Ok(mut pending) = self.pending.lock() {
            pending.remove(id);
        }
    }

    /// Hands a client response to the task waiting for it; unknown ids are ignored.
    pub(crate) fn deliver(&self, id: &Value, response: &serde_json::Map<String, Value>) {
        let Some(id) = id.as_str() else { return };
        let Some(tx) = self.pending.lock().ok().and_then(|mut p| p.remove(id)) else {
            return;
        };
        let reply = match response.get("error") {
            Some(error) => Err(format!(
                "{} ({})",
                error.get("message").and_then(Value::as_str).unwrap_or(""),
                error.get("code").unwrap_or(&Value::Null)
            )),
            None => Ok(response.get("result").cloned().unwrap_or(Value::Null)),
        };
        // The waiting task may be gone (aborted); then the response is dropped.
        let _ = tx.send(reply);
    }
}

impl Server {
    /// Sends `method` to the client and answers tool call `id` once the
    /// client responds: `answer(result)` as text, or an `isError` result
    /// "<what> failed: <message> (<code>)".
    pub(crate) fn ask_client(
        &self,
        id: &Value,
        method: &str,
        params: Option<Value>,
        what: &'static str,
        answer: fn(&Value) -> String,
    ) -> Outcome {
        let (_, response) = self.link.request_caused_by(Some(id), method, params);
        let link = self.link.clone();
        let id = id.clone();
        tokio::spawn(async move {
            let result = match response.await {
                Ok(Ok(result)) => text_result(&answer(&result)),
                Ok(Err(error)) => error_result(&format!("{what} failed: {error}")),
                // The request was forgotten: nothing to answer.
                Err(_) => return,
            };
            link.send(ok_line(&id, &result));
        });
        Outcome::Silent
    }
}

/// The `sampling/createMessage` params of `sample` and `notify_cancel`.
pub(crate) fn sampling_params(call: &Value) -> Value {
    let prompt = call
        .get("arguments")
        .and_then(|a| a.get("prompt"))
        .and_then(Value::as_str)
        .unwrap_or("hello");
    json!({"messages": [{"role": "user", "content": {"type": "text", "text": prompt}}],
           "maxTokens": 50})
}
