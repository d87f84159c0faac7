//! The permit layer: a session has at most `server.max_in_flight_per_session` requests
//! upstream at once, and each one is known as in flight (a host's cancellation finds it) until
//! it is answered.

use std::sync::Arc;

use super::super::RequestCx;
use crate::downstream::caller::InFlightGuard;
use crate::downstream::session::SessionPermit;
use crate::jsonrpc::{RpcError, codes};

/// Held while a session's request is upstream: one of its slots, and its place in the
/// session's cancellable set. A stateless request holds none (it is one request, cancelled by
/// dropping it).
pub(in super::super) struct Permit<'a> {
    _held: Option<(SessionPermit<'a>, InFlightGuard)>,
}

/// One of the session's `limit` slots, or the refusal to retry shortly.
pub(in super::super) fn claim(cx: &RequestCx, limit: usize) -> Result<Permit<'_>, RpcError> {
    let Some(session) = &cx.session else {
        return Ok(Permit { _held: None });
    };
    let slot = session.claim_slot(limit).ok_or_else(|| {
        RpcError::new(
            codes::BUSY,
            format!("this session already has {limit} requests in flight; retry shortly"),
        )
    })?;
    let in_flight = InFlightGuard {
        session: Arc::clone(session),
        host_id: cx.id.get().to_owned(),
    };
    Ok(Permit {
        _held: Some((slot, in_flight)),
    })
}
