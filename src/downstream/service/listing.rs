//! Aggregate listings: one page of a snapshot, continued by a signed cursor — for a handshake
//! session one that names the snapshot's generation, so paging stays consistent while upstreams
//! change; for a stateless host one that names the last item of the page, so it needs no state.

use serde_json::value::RawValue;

use super::{Answer, RequestCx, internal};
use crate::jsonrpc::RpcError;
use crate::mcp::ListKind;
use crate::mcp::cursor::CursorCodec;
use crate::mcp::cursor::{CursorError, Position};
use crate::router::RouterHandle;
use crate::router::{Shown, Snapshot};

/// One page of an aggregate listing: a handshake session pages one generation of the
/// catalog; a stateless host pages by name (a keyset cursor, good in any generation and
/// across restarts).
pub(super) fn list(
    cx: &RequestCx,
    (kind, cursor): (ListKind, Option<String>),
    (router, cursors): (&RouterHandle, &CursorCodec),
) -> Result<Answer, RpcError> {
    let current = router.view(cx.profile());
    let invalid = |e: CursorError| RpcError::invalid_params(e.to_string());
    let profile = cx.profile().map(|p| p.name.as_str());
    let stateless = cx.session.is_none();
    let (snapshot, offset) = match cursor {
        None => (current, 0),
        Some(cursor) if stateless => {
            let last = cursors
                .decode_after(kind, profile, &cursor)
                .map_err(invalid)?;
            let offset = shown(cx, &current, kind).after(&last);
            (current, offset)
        }
        Some(cursor) => {
            let Position {
                generation,
                view,
                offset,
            } = cursors
                .decode(kind, current.view, &cursor)
                .map_err(invalid)?;
            let snapshot = router.generation(generation, view).ok_or_else(|| {
                RpcError::invalid_params("invalid cursor: the catalog it belongs to has expired; list again from the start")
            })?;
            (snapshot, offset as usize)
        }
    };
    let shown = shown(cx, &snapshot, kind);
    let size = snapshot.config().page_size(kind);
    let end = offset.saturating_add(size).min(shown.len());
    let page = || (offset.min(end)..end).filter_map(|i| shown.item(i));
    let mut out = String::with_capacity(32 + page().map(|(_, j)| j.get().len() + 1).sum::<usize>());
    out.push_str("{\"");
    out.push_str(kind.field());
    out.push_str("\":[");
    for (i, (_, json)) in page().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(json.get());
    }
    out.push(']');
    let last = (end > offset).then(|| shown.item(end - 1)).flatten();
    if let (true, Some((last, _))) = (end < shown.len(), last) {
        let next = if stateless {
            cursors.encode_after(kind, profile, last)
        } else {
            let position = Position {
                generation: snapshot.generation,
                view: snapshot.view,
                offset: u32::try_from(end).unwrap_or(u32::MAX),
            };
            cursors.encode(kind, position)
        };
        out.push_str(",\"nextCursor\":\"");
        out.push_str(&next);
        out.push('"');
    }
    out.push('}');
    RawValue::from_string(out)
        .map(Answer::Result)
        .map_err(internal)
}

/// What `host` is shown of `kind` in `snapshot`: a host that renders no apps is never shown the
/// tools only an app's page may call (asked only of a view that has such tools).
fn shown<'a>(cx: &RequestCx, snapshot: &'a Snapshot, kind: ListKind) -> Shown<'a> {
    match kind == ListKind::Tools && snapshot.has_app_only_tools() {
        true => snapshot.shown_to(kind, cx.host.renders_apps()),
        false => snapshot.shown(kind),
    }
}
