//! JSON-RPC 2.0 as mcpmux forwards it: envelopes parsed without copying their payloads,
//! lines built around raw JSON, the members of a raw object, newline framing for stdio, the error codes we emit,
//! and the texts looked for in every message ([`Needle`]).
//!
//! Payloads (`params`, `result`, `error`) stay [`RawValue`]s: mcpmux rewrites only the fields it owns
//! and passes every other byte through (DESIGN rule 2).

mod depth;
mod error;
mod framing;
mod members;
mod message;
mod needle;
mod one_pass;

pub use depth::{MAX_DEPTH, nests_deeper_than};
pub use error::{RpcError, codes};
pub use framing::line_codec;
pub use members::{Key, Members, raw, raw_string, text_of, to_raw};
pub use message::{
    Incoming, Message, Received, error_line, error_line_without_id, notification_line,
    raw_error_line, request_line, request_line_raw, response_line,
};
pub use needle::Needle;
pub use one_pass::OnePass;
