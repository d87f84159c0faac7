//! The permit layer: a session has at most `server.max_in_flight_per_session` requests
//! upstream at once, and each one is known as in flight (a host's cancellation finds it) until
//! it is answered.

use std::sync::Arc;

use super::super::HostRequest;
use crate::downstream::caller::InFlightGuard;
use crate::downstream::session::SessionPermit;
use crate::jsonrpc::{RpcError, codes};

/// Held while a request is upstream.
pub(in super::super) struct Permit<'a> {
    _slot: SessionPermit<'a>,
    /// A session's request, in its cancellable set; a stateless request is none (it is
    /// cancelled by dropping it).
    _in_flight: Option<InFlightGuard>,
}

/// One of the session's `limit` slots, or the refusal to retry shortly.
pub(in super::super) fn claim(host: &HostRequest, limit: usize) -> Result<Permit<'_>, RpcError> {
    let slot = host.session.claim_slot(limit).ok_or_else(|| {
        RpcError::new(
            codes::BUSY,
            format!("this session already has {limit} requests in flight; retry shortly"),
        )
    })?;
    Ok(Permit {
        _slot: slot,
        _in_flight: (!host.session.is_stateless()).then(|| InFlightGuard {
            session: Arc::clone(&host.session),
            host_id: host.id.get().to_owned(),
        }),
    })
}
