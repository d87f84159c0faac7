//! The host side of a stateless request's call to a handshake-era upstream: what the upstream
//! asks of the host in the middle of the call (sampling, elicitation, roots) is collected for the
//! call's rounds ([`super::Rounds`]) to send as `input_required`, and its progress goes to the
//! stream of the round being served.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Context;

use futures_util::task::AtomicWaker;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use crate::downstream::session::HostInfo;
use crate::downstream::stream::Sink;
use crate::jsonrpc::{RpcError, codes, raw_string};
use crate::sync::lock;
use crate::upstream::{Caller, Canceller, InputRequired, ServerRequestReply};

/// Requests for input one call may have outstanding at once.
const MAX_ASKED: usize = 16;

/// One request for input from the upstream, waiting for the host's answer.
pub(super) struct Asked {
    pub key: String,
    pub method: String,
    pub params: Option<Box<RawValue>>,
    pub reply: ServerRequestReply,
}

/// What the upstream's side of a call says to its rounds.
pub(super) enum Event {
    Asked(Asked),
    /// It asked for what the host did not declare (the required capabilities, as an object).
    Missing(Value),
    /// It took back a request of its own (`notifications/cancelled`).
    Withdrawn(String),
}

/// The host side of a stateless request forwarded to a handshake-era upstream: its server
/// requests become requests for input, its progress goes to the current round's stream.
pub(in crate::downstream::service) struct InputCaller {
    /// What the host declared in the request's envelope.
    pub(super) host: Arc<HostInfo>,
    /// The call's own id, unique in the process (it belongs to no session).
    id: String,
    /// The response stream of the round being served, while it is open.
    sink: Mutex<Option<Sink>>,
    /// What the upstream said since the round last looked (no allocation until it says
    /// something: most calls never do).
    events: Mutex<Vec<Event>>,
    /// Whether `events` holds something (read without the lock on each poll of the round).
    said: AtomicBool,
    /// The round waiting for what the upstream says.
    round: AtomicWaker,
    next_key: AtomicU64,
    /// A 2026-07-28 upstream's `input_required`, taken for the host: the answer it came with
    /// is relayed ([`Self::relayed`]). Any other answer is the call's.
    relayed: Mutex<Option<InputRequired>>,
}

impl InputCaller {
    /// The caller a stateless request's upstream call reports to; `sink`: the first round's
    /// response stream.
    pub(super) fn new(host: Arc<HostInfo>, sink: Option<Sink>) -> Arc<Self> {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let mut number = itoa::Buffer::new();
        let number = number.format(NEXT.fetch_add(1, Ordering::Relaxed));
        Arc::new(Self {
            host,
            id: ["request-", number].concat(),
            sink: Mutex::new(sink),
            events: Mutex::new(Vec::new()),
            said: AtomicBool::new(false),
            round: AtomicWaker::new(),
            next_key: AtomicU64::new(1),
            relayed: Mutex::new(None),
        })
    }

    /// The `input_required` of the 2026-07-28 upstream's answer that came last, if it was one
    /// (a handshake-era upstream's never is: its results are not looked into).
    pub(super) fn relayed(&self) -> Option<InputRequired> {
        lock(&self.relayed).take()
    }

    pub(super) fn set_sink(&self, sink: Option<Sink>) {
        *lock(&self.sink) = sink;
    }

    /// Passes `event` to the call's rounds; false when the call already waits for all the
    /// inputs it may.
    pub(super) fn say(&self, event: Event) -> bool {
        {
            let mut events = lock(&self.events);
            if events.len() >= MAX_ASKED {
                return false;
            }
            events.push(event);
            self.said.store(true, Ordering::Release);
        }
        self.round.wake();
        true
    }

    /// What the host did not declare, if the upstream asked for it: the host's call then fails
    /// with `-32021` even when the upstream's answer (to mcpmux's refusal) came first.
    pub(super) fn missing(&self) -> Option<Value> {
        if !self.said.load(Ordering::Acquire) {
            return None;
        }
        lock(&self.events).iter().find_map(|event| match event {
            Event::Missing(required) => Some(required.clone()),
            _ => None,
        })
    }

    /// What the upstream said, if it said something since the last look; else the round is
    /// woken when it does.
    pub(super) fn heard(&self, cx: &mut Context<'_>) -> Option<Vec<Event>> {
        self.round.register(cx.waker());
        if !self.said.swap(false, Ordering::Acquire) {
            return None;
        }
        Some(std::mem::take(&mut *lock(&self.events)))
    }
}

/// The capability a server request needs of its host, and the object `-32021` names it by.
fn needed(method: &str, asked_with: Option<&RawValue>) -> Option<(&'static str, Value)> {
    let capability = crate::mcp::capability_for(method)?;
    let required = match capability == "elicitation" && crate::mcp::is_url_elicitation(asked_with) {
        true => json!({ "elicitation": { "url": {} } }),
        false => json!({ capability: {} }),
    };
    Some((capability, required))
}

impl Caller for InputCaller {
    fn session_id(&self) -> &str {
        &self.id
    }

    /// Always yes: whether the host declared what a request needs is decided in
    /// [`Caller::forward_request`], where a request the host cannot take fails the host's call
    /// with `-32021` instead of only the upstream's request.
    fn supports(&self, _capability: &str) -> bool {
        true
    }

    /// The call is cancelled by dropping it (its task is aborted), not through a canceller.
    fn started(&self, _canceller: Canceller) {}

    fn send(&self, line: String) {
        let sink = lock(&self.sink).clone();
        if let Some(sink) = sink {
            let _ = sink.try_send(line);
        }
    }

    fn forward_request(
        &self,
        method: &str,
        asked_with: Option<&RawValue>,
        reply: ServerRequestReply,
    ) -> Result<Box<RawValue>, RpcError> {
        let refused = |why: String| {
            RpcError::new(
                codes::INTERNAL_ERROR,
                format!("mcpmux refused `{method}`: {why}"),
            )
        };
        let Some((capability, required)) = needed(method, asked_with) else {
            return Err(refused(
                "a 2026-07-28 host takes only sampling, elicitation and roots requests, as input_required".into(),
            ));
        };
        let url_mode = required["elicitation"].get("url").is_some();
        let declared = &self.host.capabilities.value()[capability];
        if declared.is_null() || (url_mode && declared.get("url").is_none()) {
            self.say(Event::Missing(required));
            return Err(refused(format!(
                "the host did not declare the `{capability}` capability"
            )));
        }
        let key = format!("mcpmux-{}", self.next_key.fetch_add(1, Ordering::Relaxed));
        let asked = Asked {
            key: key.clone(),
            method: method.to_owned(),
            params: asked_with.map(ToOwned::to_owned),
            reply,
        };
        if !self.say(Event::Asked(asked)) {
            return Err(refused(format!(
                "the call already waits for {MAX_ASKED} inputs"
            )));
        }
        Ok(raw_string(&key))
    }

    fn cancel_forwarded(&self, host_id: &RawValue, _reason: Option<&RawValue>) {
        if let Ok(key) = serde_json::from_str::<String>(host_id.get()) {
            self.say(Event::Withdrawn(key));
        }
    }

    fn capabilities(&self) -> Option<&Value> {
        Some(self.host.capabilities.value())
    }

    fn request_log_level(&self) -> Option<usize> {
        self.host.request_log_level
    }

    /// A 2026-07-28 upstream's `input_required` goes to the host as it is (its state sealed).
    fn take_input_required(&self, asked: InputRequired) -> Option<InputRequired> {
        *lock(&self.relayed) = Some(asked);
        None
    }
}
