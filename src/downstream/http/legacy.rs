//! The 2024-11-05 HTTP+SSE transport, for older hosts: `GET /sse` opens the stream and names the
//! endpoint (`/messages?sessionId=…`) in its first `endpoint` event; each host message is POSTed
//! there (202), and every answer and server message arrives on the stream as a `message` event.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::Event;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::sync::mpsc;

use super::admission::{Admitted, Refusal, refuse};
use super::{AppState, Edge, accept, sse};
use crate::downstream::Access;
use crate::downstream::service::{HostService, RequestCx, Who};
use crate::downstream::stream::Sink;
use crate::jsonrpc::{Incoming, Message, RpcError, codes, error_line};
use crate::mcp::method::Method;
use crate::telemetry::otel::TraceParent;

/// Messages a legacy stream may fall behind by.
const STREAM: usize = 1024;

/// An open legacy stream and the access that opened it.
type Stream = (mpsc::Sender<String>, Access);

/// Open legacy streams, by session id.
#[derive(Debug, Default)]
pub(super) struct Connections(Mutex<HashMap<String, Stream>>);

impl Connections {
    /// The stream of session `id`, if the same `access` opened it.
    fn get(&self, id: &str, access: &Access) -> Option<mpsc::Sender<String>> {
        let streams = crate::sync::lock(&self.0);
        let (stream, owner) = streams.get(id)?;
        owner.same(access).then(|| stream.clone())
    }
}

/// Ends the session when the host's stream goes away.
struct Closing {
    id: String,
    state: Arc<AppState>,
}

impl Drop for Closing {
    fn drop(&mut self) {
        crate::sync::lock(&self.state.legacy.0).remove(&self.id);
        let service = Arc::clone(&self.state.service);
        let id = std::mem::take(&mut self.id);
        tokio::spawn(async move { service.close_session(&id).await });
    }
}

pub(super) async fn handle_sse(
    State(state): State<Arc<AppState>>,
    Admitted { access, .. }: Admitted,
) -> Response {
    let id = state.service.new_session_id();
    let (tx, rx) = mpsc::channel::<String>(STREAM);
    crate::sync::lock(&state.legacy.0).insert(id.clone(), (tx, access));
    let endpoint = Event::default()
        .event("endpoint")
        .data(format!("/messages?sessionId={id}"));
    let closing = Closing {
        id,
        state: Arc::clone(&state),
    };
    let first = futures_util::stream::once(async move { Ok::<_, Infallible>(endpoint) });
    let rest = futures_util::stream::unfold((rx, closing), |(mut rx, closing)| async move {
        let line = rx.recv().await?;
        Some((
            Ok(Event::default().event("message").data(line)),
            (rx, closing),
        ))
    });
    sse(futures_util::StreamExt::chain(first, rest))
}

#[derive(Debug, Deserialize)]
pub(super) struct Target {
    #[serde(rename = "sessionId")]
    session_id: String,
}

pub(super) async fn handle_message(
    State(state): State<Arc<AppState>>,
    Admitted { access, edge }: Admitted,
    Query(target): Query<Target>,
    request: axum::extract::Request,
) -> Response {
    // Taken whole, so the headers are moved out rather than copied (as on `/mcp`).
    let (axum::http::request::Parts { headers, .. }, body) = request.into_parts();
    let posted = message(&state, (access, &edge), &target, &headers, body).await;
    posted.unwrap_or_else(|refused| refused.respond(&headers))
}

/// [`handle_message`], refused with `?`.
async fn message(
    state: &AppState,
    (access, edge): (Access, &Edge),
    target: &Target,
    headers: &HeaderMap,
    body: axum::body::Body,
) -> Result<Response, Refusal> {
    let body = edge.body(body).await?;
    let Some(stream) = state.legacy.get(&target.session_id, &access) else {
        return Err(refuse(
            StatusCode::NOT_FOUND,
            codes::INVALID_REQUEST,
            "Session not found: open /sse first",
        ));
    };
    let Ok(text) = std::str::from_utf8(&body) else {
        return Err(refuse(
            StatusCode::BAD_REQUEST,
            codes::PARSE_ERROR,
            "Parse error: body is not UTF-8",
        ));
    };
    let message = match Incoming::parse(text) {
        Ok(message) => message,
        Err(error) => {
            let _ = stream.send(error_line(None, &error)).await;
            return Ok(StatusCode::ACCEPTED.into_response());
        }
    };
    let service = Arc::clone(&state.service);
    match message {
        Message::Request { id, method, params } if method == Method::Initialize.as_str() => {
            return Ok(initialize(&service, (id, params), (target, access), stream).await);
        }
        Message::Request { id, method, params } => match service.session(&target.session_id) {
            Some(session) => {
                let trace = TraceParent::from_headers(headers);
                let cx = RequestCx::new(
                    Who::Session(session),
                    id.to_owned(),
                    Some(Sink::Session(stream.clone())),
                    params.map(serde_json::value::RawValue::get),
                    trace,
                );
                let (method, params) = (method.into_owned(), params.map(ToOwned::to_owned));
                tokio::spawn(async move {
                    let answered = service
                        .request(&cx, &method, params.as_deref().into())
                        .await;
                    let _ = stream.send(answered.line).await;
                });
            }
            None => {
                let error = RpcError::new(
                    codes::INVALID_REQUEST,
                    "the session is not initialized; send initialize first",
                );
                let _ = stream.send(error_line(Some(id), &error)).await;
            }
        },
        other => {
            if let Some(session) = service.session(&target.session_id) {
                accept(&service, &session, &other);
            }
        }
    }
    Ok(StatusCode::ACCEPTED.into_response())
}

/// `initialize` on the stream `target` names, answered on it. Initializing again on the same
/// stream replaces the session it had: that one is closed first (its instances stopped, its
/// subscriptions dropped).
async fn initialize(
    service: &Arc<HostService>,
    (id, params): (&RawValue, Option<&RawValue>),
    (target, access): (&Target, Access),
    stream: mpsc::Sender<String>,
) -> Response {
    let session_id = target.session_id.clone();
    let replaces = Some(target.session_id.as_str());
    let (line, status) = match service
        .initialize(id, params, (Some(session_id), replaces), access)
        .await
    {
        Ok((session, line)) => {
            pump_outbox(service, &session.id, stream.clone());
            (line, StatusCode::ACCEPTED)
        }
        Err(error) => (
            error_line(Some(id), &error),
            super::initialize_status(&error),
        ),
    };
    if status == StatusCode::ACCEPTED {
        let _ = stream.send(line).await;
        return status.into_response();
    }
    // A refusal goes on the stream (where the host waits for its answer) and in the body.
    let _ = stream.send(line.clone()).await;
    (status, super::json_response(line)).into_response()
}

/// Forwards the session's own messages (not tied to a request) onto the legacy stream.
fn pump_outbox(service: &HostService, session_id: &str, stream: mpsc::Sender<String>) {
    let Some(mut guard) = service.session(session_id).and_then(|s| s.attach_stream()) else {
        return;
    };
    tokio::spawn(async move {
        while let Some(line) = guard.recv().await {
            if stream.send(line).await.is_err() {
                break;
            }
        }
    });
}
