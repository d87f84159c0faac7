//! Serving an HTTP application on a listener within bounds a stranger cannot stretch (the host
//! endpoint and the admin API alike):
//!
//! - at most `server.max_connections` connections at once: the next one is accepted only when
//!   one closes, so beyond the limit new connections wait in the kernel's accept queue (they are
//!   not refused, and what is open keeps working);
//! - a connection must send a request's headers within `server.header_timeout` of opening, or of
//!   the end of its previous answer, or it is closed. The same timer is therefore the idle
//!   keep-alive timeout: a connection idle between requests that long is closed too. It runs only
//!   while a request head is awaited (hyper's header timer), so an answer in progress — an event
//!   stream, a long call — is never cut by it.
//!
//! Each connection is HTTP/1.1 served by hyper, as `axum::serve` would serve it (the peer's
//! address as [`ConnectInfo`], one clone of the router per connection); nothing is added per
//! request. Graceful shutdown stops accepting, lets every connection finish the request it is
//! serving, and waits until all are closed (the caller bounds that wait).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::connect_info::{ConnectInfo, IntoMakeServiceWithConnectInfo};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tower_service::Service;

use crate::config::ServerConfig;

/// How long accepting pauses after an error that is not one connection's (out of descriptors):
/// retrying at once would spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// The bounds of one listener.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Connections open at once.
    pub max_connections: usize,
    /// How long a connection may take to send a request's headers (and may stay idle between
    /// requests).
    pub header_timeout: Duration,
}

impl Bounds {
    /// The bounds `[server]` sets (they apply to the admin listener too, each its own count).
    pub fn of(server: &ServerConfig) -> Self {
        Self {
            max_connections: server.max_connections,
            header_timeout: server.header_timeout,
        }
    }
}

/// Serves `app` on `listener` within `bounds` until `shutdown` completes, then drains: no new
/// connection is accepted, open ones end once their request is answered, and it returns when
/// all are closed.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    bounds: Bounds,
    shutdown: impl Future<Output = ()>,
) {
    let limit = bounds.max_connections.clamp(1, Semaphore::MAX_PERMITS);
    let slots = Arc::new(Semaphore::new(limit));
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(bounds.header_timeout);
    let mut make = app.into_make_service_with_connect_info::<SocketAddr>();
    let stopping = CancellationToken::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = accept(&listener, &slots) => accepted,
            () = &mut shutdown => break,
        };
        let Some((stream, peer, slot)) = accepted else {
            break;
        };
        let service = connection_service(&mut make, peer).await;
        let http = http.clone();
        let stopping = stopping.clone();
        tokio::spawn(async move {
            let conn = http.serve_connection(TokioIo::new(stream), service);
            let mut conn = std::pin::pin!(conn);
            let result = tokio::select! {
                result = conn.as_mut() => result,
                () = stopping.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if let Err(e) = result {
                tracing::debug!(%peer, error = %e, "A connection ended with an error.");
            }
            drop(slot);
        });
    }
    drop(listener);
    stopping.cancel();
    // Every slot back means every connection closed.
    let all = u32::try_from(limit).unwrap_or(u32::MAX);
    let _ = slots.acquire_many(all).await;
}

/// The next connection, once a slot is free for it; `None` if the slots are gone (never, while
/// `serve` holds them).
async fn accept(
    listener: &TcpListener,
    slots: &Arc<Semaphore>,
) -> Option<(
    tokio::net::TcpStream,
    SocketAddr,
    tokio::sync::OwnedSemaphorePermit,
)> {
    let slot = Arc::clone(slots).acquire_owned().await.ok()?;
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => return Some((stream, peer, slot)),
            Err(e) if is_connection_error(&e) => {}
            Err(e) => {
                tracing::error!(error = %e, "Accepting a connection failed; retrying shortly.");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
            }
        }
    }
}

/// An accept error that concerns only the connection being accepted.
fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    )
}

/// The router for one connection, knowing its peer (what `ConnectInfo<SocketAddr>` extracts).
async fn connection_service(
    make: &mut IntoMakeServiceWithConnectInfo<Router, SocketAddr>,
    peer: SocketAddr,
) -> TowerToHyperService<axum::middleware::AddExtension<Router, ConnectInfo<SocketAddr>>> {
    let ready: Result<(), Infallible> =
        std::future::poll_fn(|cx| Service::<SocketAddr>::poll_ready(make, cx)).await;
    let Ok(()) = ready;
    let Ok(service) = make.call(peer).await;
    TowerToHyperService::new(service)
}
