//! The legacy HTTP+SSE transport (2024-11-05), the client side: GET the SSE URL, wait for its
//! `endpoint` event, POST every message there (same origin only: the credential goes nowhere
//! else), and take every answer and server message from the stream's `message` events. When the
//! stream ends the link ends: a new stream is a new session, so the supervisor starts over. A
//! POST that fails (unreachable, reset, 5xx) fails its request alone until the breaker trips.

use std::sync::Arc;

use futures_util::StreamExt;
use reqwest::StatusCode;
use reqwest::header::{ACCEPT, CONTENT_TYPE};

use super::events::events;
use super::streamable::{excerpt, location_of};
use super::{Outgoing, Shared};
use crate::http_body::error_chain;
use crate::upstream::error::{Closed, StartError};

/// Opens the SSE stream and returns the endpoint messages are POSTed to; the stream's messages
/// go to the connection from a task of their own. The stream must open and name its endpoint
/// within the upstream's `startup_timeout`: a server that accepts connections but answers
/// nothing (frozen, overloaded) is a failed start, not a wait without end.
pub(super) async fn connect(shared: &Arc<Shared>) -> Result<url::Url, StartError> {
    let within = shared.limits.open;
    tokio::time::timeout(within, open_stream(shared))
        .await
        .unwrap_or_else(|_| {
            Err(StartError::Open(format!(
                "its SSE stream at {} did not open and name its endpoint within {}",
                shared.url,
                humantime::format_duration(within)
            )))
        })
}

async fn open_stream(shared: &Arc<Shared>) -> Result<url::Url, StartError> {
    let request = shared
        .client
        .get(shared.url.clone())
        .headers(shared.headers())
        .header(ACCEPT, "text/event-stream");
    let response = shared
        .authorized(request, "GET", &shared.url)
        .send()
        .await
        .map_err(|e| {
            let why = format!("cannot reach {}: {}", shared.url, error_chain(&e));
            shared.note(why.clone());
            StartError::Open(why)
        })?;
    let status = response.status();
    if !status.is_success() {
        let why = format!(
            "HTTP {status} from upstream `{}` to the GET of its SSE stream: {}",
            shared.upstream,
            excerpt(response).await
        );
        shared.note(why.clone());
        return Err(StartError::Open(why));
    }
    let mut stream = events(response, shared.max_message_bytes);
    let first = loop {
        match stream.next().await {
            Some(Ok(event)) if event.event == "endpoint" => break Ok(event.data),
            Some(Ok(_)) => continue,
            Some(Err(e)) => break Err(e.to_string()),
            None => break Err("the stream ended".to_owned()),
        }
    };
    let data = first.map_err(|why| {
        StartError::Open(format!(
            "its SSE stream at {} named no endpoint: {why}",
            shared.url
        ))
    })?;
    let endpoint = shared.url.join(data.trim()).map_err(|e| {
        StartError::Open(format!(
            "its `endpoint` event `{}` is not a URL: {e}",
            data.trim()
        ))
    })?;
    if endpoint.origin() != shared.url.origin() {
        return Err(StartError::Open(format!(
            "its `endpoint` event names another origin ({endpoint}); mcpmux sends this upstream's credential only to {}",
            shared.url.origin().ascii_serialization()
        )));
    }
    tokio::spawn(read(Arc::clone(shared), stream));
    shared
        .diagnostics
        .set_http_session(Some("SSE stream open (legacy HTTP+SSE)".to_owned()));
    Ok(endpoint)
}

/// The stream's `message` events, until it ends.
async fn read(
    shared: Arc<Shared>,
    mut stream: impl futures_util::Stream<Item = Result<super::events::Event, Closed>> + Unpin,
) {
    let why = loop {
        let event = tokio::select! {
            () = shared.stop.cancelled() => return,
            event = stream.next() => event,
        };
        match event {
            Some(Ok(event)) if event.event.is_empty() || event.event == "message" => {
                shared.deliver_text(&event.data).await;
            }
            Some(Ok(_)) => {}
            Some(Err(closed)) => break closed,
            None => break Closed::Io("its SSE stream ended".into()),
        }
    };
    shared.close(why).await;
}

/// POSTs one message to the endpoint; its answer comes on the stream.
pub(super) async fn post(shared: &Arc<Shared>, endpoint: &url::Url, mut message: Outgoing) {
    let request = shared
        .client
        .post(endpoint.clone())
        .headers(shared.headers())
        .header(CONTENT_TYPE, "application/json");
    let request = shared.authorized(request, "POST", endpoint);
    let body = std::mem::take(&mut message.bytes);
    let request = super::traced(&message, request).body(body);
    let response = tokio::select! {
        () = shared.stop.cancelled() => return,
        response = request.send() => response,
    };
    match response {
        Ok(r) if r.status().is_success() => shared.succeeded(),
        Ok(r) => {
            let status = r.status();
            let location = location_of(&r);
            let why = format!(
                "HTTP {status} from upstream `{}`: {}",
                shared.upstream,
                excerpt(r).await
            );
            match status {
                StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                    shared.note(why.clone());
                    shared.close(Closed::Unauthorized(why)).await;
                }
                StatusCode::NOT_FOUND => {
                    shared.note(why);
                    let why = "its SSE session is gone (404); a new one is started".to_owned();
                    shared.close(Closed::SessionExpired(why)).await;
                }
                s if s.is_redirection() => {
                    shared.redirected(&message, s, location.as_deref()).await;
                }
                s if s.is_server_error() => shared.failed(&message, why).await,
                _ => shared.refused(&message, why).await,
            }
        }
        Err(e) => {
            let why = format!(
                "upstream `{}`: cannot reach {endpoint}: {}",
                shared.upstream,
                error_chain(&e)
            );
            shared.failed(&message, why).await;
        }
    }
}
