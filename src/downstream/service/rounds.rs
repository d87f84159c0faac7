//! Multi-round-trip requests (2026-07-28, `basic/patterns/mrtr.md`) for a stateless host whose
//! upstream speaks the handshake era. Such an upstream asks for input in the middle of a call —
//! `sampling/createMessage`, `elicitation/create`, `roots/list` sent as requests of its own — and
//! waits for the answers. A stateless host takes no requests: its call is answered at once with
//! an `input_required` result carrying those requests, while the upstream call stays parked
//! here (bounded, for at most [`PARK_TTL`], then cancelled upstream). The host's retry brings
//! `inputResponses` and the sealed `requestState`; the answers go to the waiting upstream and
//! the call goes on, for as many rounds as the upstream asks.
//!
//! The `requestState` names the parked call and is sealed (`sealed`) for the principal (its
//! kind, issuer and name), the profile, the method, the exposed name or URI and the upstream, so
//! no host can continue another's call or steer a retry elsewhere; it opens once (the parked
//! call is taken).
//!
//! A parked call holds an upstream's request slot, so what parks is bounded: each caller parks
//! at most `server.max_parked_per_caller` calls, each of which counts against its host's
//! `max_in_flight` until it ends (the host's retry continues it on that slot), and a call not
//! continued within `server.park_timeout` is cancelled upstream.
//!
//! A request that needs a capability the host did not declare fails with `-32021`
//! (`requiredCapabilities`), and the upstream's call is cancelled.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use crate::downstream::holdings::{Held, Holder, Holdings};
use crate::downstream::principal::{HeldSlot, Identity, Principal};
use crate::downstream::session::HostInfo;
use crate::downstream::stream::Sink;
use crate::jsonrpc::{RpcError, codes, to_raw};
use crate::sealed::SealRing;
use crate::sync::lock;
use crate::upstream::{InputRequired, Reply, UpstreamError};

mod input;

pub(super) use input::InputCaller;
use input::{Asked, Event};

/// How long a state that continues no parked call (it asks for the call again, or carries a
/// 2026-07-28 upstream's own state) stays valid.
const PARK_TTL: Duration = Duration::from_secs(300);
/// Parked calls the daemon holds at once; past that a call that asks for input is refused.
const MAX_PARKED: usize = 1024;

/// The upstream call itself: driven by the round serving it until the upstream asks for input,
/// then by a task of its own while the host answers (so a call that asks for nothing costs no
/// task).
enum Call {
    Here(BoxFuture<'static, Result<Reply, UpstreamError>>),
    Away(JoinHandle<Result<Reply, UpstreamError>>),
}

impl Call {
    /// Drives it on its own from now on (it is parked).
    fn send_away(&mut self) {
        if let Self::Here(call) = self {
            let call = std::mem::replace(call, Box::pin(std::future::pending()));
            *self = Self::Away(tokio::spawn(call));
        }
    }
}

impl Future for Call {
    type Output = Result<Result<Reply, UpstreamError>, RpcError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            Self::Here(call) => call.as_mut().poll(cx).map(Ok),
            Self::Away(task) => Pin::new(task).poll(cx).map(|ended| {
                ended.map_err(|e| {
                    RpcError::new(
                        codes::INTERNAL_ERROR,
                        format!("the upstream call ended: {e}"),
                    )
                })
            }),
        }
    }
}

/// An upstream call that may take several rounds. Dropping it cancels the call upstream.
pub(super) struct Flight {
    call: Call,
    caller: Arc<InputCaller>,
    /// What it holds of its caller's since it first parked: its place among the calls the
    /// caller has parked, and a slot of its host's `max_in_flight`.
    held: Option<(Held, Option<HeldSlot>)>,
    /// Requests for input the host has not answered yet.
    asked: Vec<Asked>,
    /// Who may continue it, and for what (the sealed state's binding): written once the call
    /// asks for input (a call that never does, nearly all of them, never spells it).
    binding: Option<String>,
    /// When the upstream call began.
    pub started: Instant,
}

impl Drop for Flight {
    fn drop(&mut self) {
        // The request future ends (with its task), and the connection cancels it upstream.
        if let Call::Away(task) = &self.call {
            task.abort();
        }
    }
}

/// What a retry continues.
pub(super) enum Resumed {
    /// The parked call its state names.
    Flight(Flight),
    /// Nothing parked: the call is sent again (the user has visited the URLs it asked for).
    Again,
    /// A 2026-07-28 upstream's call: sent again with the host's answers and the upstream's own
    /// `requestState`, which the sealed one carried.
    Relay(String),
}

/// The payload of a state that asks for the call again (a parked call's is 16 bytes).
const AGAIN: &[u8] = b"again";
/// What starts the payload of a state that carries a 2026-07-28 upstream's own state.
const RELAY: &[u8] = b"relay:";

/// Whether an upstream's error is `-32042`, URL elicitation required (2025-11-25).
fn is_url_required(error: &RawValue) -> bool {
    error.get().contains("-32042")
        && serde_json::from_str::<Value>(error.get())
            .is_ok_and(|e| e["code"].as_i64() == Some(-32042))
}

/// `-32021` naming the `required` capabilities.
fn missing_capability(required: &Value) -> RpcError {
    let names: Vec<&String> = required
        .as_object()
        .map(|o| o.keys().collect())
        .unwrap_or_default();
    RpcError::new(
        codes::MISSING_CLIENT_CAPABILITY,
        format!(
            "Missing required client capability: the upstream asked for {names:?}, which this request did not declare in io.modelcontextprotocol/clientCapabilities"
        ),
    )
    .with_data(json!({ "requiredCapabilities": required }))
}

/// What a round waits for next: the upstream's answer, or what it said before answering.
enum Next {
    Answer(<Call as Future>::Output),
    Said(Vec<Event>),
}

/// How a round ended.
pub(super) enum Round {
    /// The upstream answered.
    Done(Result<Reply, UpstreamError>),
    /// It waits for input: the `input_required` result for the host.
    InputRequired(Box<RawValue>),
}

/// The parked calls and the key their states are sealed with.
pub(super) struct Rounds {
    parked: Arc<Mutex<HashMap<u128, Flight>>>,
    /// Shared by the replicas of a cluster (derived from the cursor keys): a state that
    /// continues no parked call opens on any of them.
    sealer: SealRing,
    /// The replica a parked call's state names first (`[cluster]`): it alone holds the call.
    owner: Option<Arc<str>>,
    /// The calls each caller has parked.
    holdings: Arc<Holdings>,
}

/// How parking is bounded (`server.max_parked_per_caller`, `server.park_timeout`).
#[derive(Debug, Clone, Copy)]
pub(super) struct Parking {
    pub per_caller: usize,
    pub timeout: Duration,
}

/// Who a call parks for, and how parking is bounded then.
pub(super) struct ParkedFor {
    pub holder: Holder,
    /// Its principal, whose `max_in_flight` a parked call counts against.
    pub principal: Option<Arc<Principal>>,
    pub parking: Parking,
}

impl std::fmt::Debug for Rounds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rounds")
            .field("parked", &lock(&self.parked).len())
            .finish()
    }
}

/// What a call's rounds are bound to: who may continue it (the principal's kind, issuer and
/// name — a signed-in user named like a host is not that host), the profile it sees, and the
/// method, exposed name or URI and upstream of the call. Each part on a line of its own; a part a
/// caller chose cannot hold a line break (names, URIs and methods are checked before they route).
pub(super) fn binding(
    (principal, profile): (Option<&Principal>, Option<&str>),
    method: &str,
    target: &str,
    upstream: &str,
) -> String {
    let (kind, issuer, name) = match principal {
        None => ("anonymous", "", ""),
        Some(p) => match &p.identity {
            Identity::Host => ("host", "", &*p.name),
            Identity::SignedIn { issuer } => ("signed-in", &**issuer, &*p.name),
        },
    };
    let profile = profile.unwrap_or("");
    [
        kind, "\n", issuer, "\n", name, "\n", profile, "\n", method, "\n", target, "\n", upstream,
    ]
    .concat()
}

impl Rounds {
    pub(super) fn new(sealer: SealRing, owner: Option<Arc<str>>) -> Self {
        Self {
            parked: Arc::default(),
            sealer,
            owner,
            holdings: Arc::default(),
        }
    }

    /// The caller a stateless request's upstream call reports to.
    pub(super) fn caller(host: Arc<HostInfo>, sink: Option<Sink>) -> Arc<InputCaller> {
        InputCaller::new(host, sink)
    }

    /// The upstream `call` of a stateless request.
    pub(super) fn flight(
        call: BoxFuture<'static, Result<Reply, UpstreamError>>,
        caller: Arc<InputCaller>,
    ) -> Flight {
        Flight {
            call: Call::Here(call),
            caller,
            held: None,
            asked: Vec::new(),
            binding: None,
            started: Instant::now(),
        }
    }

    /// Serves one round of `flight`: its answer, or the input it waits for (the call is parked).
    /// `bind` spells what the call is bound to, for a state that continues it; `parks_for`, who
    /// it parks for (both spelled only when needed: most calls ask for nothing).
    pub(super) async fn round(
        &self,
        mut flight: Flight,
        (bind, parks_for): (
            &(dyn Fn() -> String + Sync),
            &(dyn Fn() -> ParkedFor + Sync),
        ),
    ) -> Result<(Round, Instant), RpcError> {
        let started = flight.started;
        loop {
            if !flight.asked.is_empty() {
                return self.park(flight, bind, parks_for).map(|r| (r, started));
            }
            // The upstream's answer first; what it said meanwhile only while it has not answered.
            // (A poll of the call and an atomic flag: no waiter list to join and leave per call.)
            let next = std::future::poll_fn(|cx| match Pin::new(&mut flight.call).poll(cx) {
                Poll::Ready(answer) => Poll::Ready(Next::Answer(answer)),
                Poll::Pending => match flight.caller.heard(cx) {
                    Some(events) => Poll::Ready(Next::Said(events)),
                    None => Poll::Pending,
                },
            });
            match next.await {
                Next::Said(events) => {
                    for event in events {
                        flight.take(event)?;
                    }
                }
                Next::Answer(answer) => {
                    if let Some(required) = flight.caller.missing() {
                        return Err(missing_capability(&required));
                    }
                    let round = match answer? {
                        Ok(Reply::Error(error)) if is_url_required(&error) => {
                            let binding = flight.binding.get_or_insert_with(bind);
                            self.open_urls(&flight.caller, binding, &error)?
                        }
                        Ok(Reply::Result(result)) => match flight.caller.relayed() {
                            Some(asked) => {
                                let binding = flight.binding.get_or_insert_with(bind);
                                self.relay(binding, asked, &result)
                            }
                            None => Round::Done(Ok(Reply::Result(result))),
                        },
                        answer => Round::Done(answer),
                    };
                    return Ok((round, started));
                }
            }
        }
    }

    /// A handshake-era upstream's `-32042` (URL elicitation required: the call can only succeed
    /// once the user has visited the URLs) as `input_required` with URL-mode elicitations. The
    /// upstream's call has ended, so its state asks for the call [`Resumed::Again`].
    pub(super) fn open_urls(
        &self,
        caller: &InputCaller,
        binding: &str,
        error: &RawValue,
    ) -> Result<Round, RpcError> {
        #[derive(serde::Deserialize)]
        struct Data {
            #[serde(default)]
            elicitations: Vec<Value>,
        }
        #[derive(serde::Deserialize)]
        struct Error {
            data: Option<Data>,
        }
        let elicitations = serde_json::from_str::<Error>(error.get())
            .ok()
            .and_then(|e| e.data)
            .map(|d| d.elicitations)
            .unwrap_or_default();
        let declared = &caller.host.capabilities.value()["elicitation"];
        if declared.get("url").is_none() {
            let required = json!({ "elicitation": { "url": {} } });
            return Err(missing_capability(&required));
        }
        let requests: serde_json::Map<String, Value> = (elicitations.iter().enumerate())
            .map(|(i, e)| {
                // 2026-07-28 has no `elicitationId`: the retry itself says the user is done.
                let params = json!({ "mode": "url", "url": e["url"], "message": e["message"] });
                let request = json!({ "method": "elicitation/create", "params": params });
                (format!("mcpmux-url-{}", i + 1), request)
            })
            .collect();
        let state = self.sealer.seal(AGAIN, binding.as_bytes(), PARK_TTL);
        let result = json!({
            "resultType": "input_required",
            "inputRequests": requests,
            "requestState": state,
        });
        Ok(Round::InputRequired(to_raw(&result)))
    }

    /// A 2026-07-28 upstream's `input_required`, for the host: as the upstream wrote it, with
    /// its `requestState` sealed inside one of mcpmux's (bound as every state is, so no host can
    /// replay another's or steer it to another tool or upstream).
    fn relay(&self, binding: &str, asked: InputRequired, result: &RawValue) -> Round {
        let mut result: Value = serde_json::from_str(result.get()).unwrap_or_else(|_| json!({}));
        if let (Some(state), Some(object)) = (asked.request_state, result.as_object_mut()) {
            let payload = [RELAY, state.as_bytes()].concat();
            let sealed = self.sealer.seal(&payload, binding.as_bytes(), PARK_TTL);
            object.insert("requestState".into(), Value::String(sealed));
        }
        Round::InputRequired(to_raw(&result))
    }

    /// Continues the parked call a retry's `state` names, with the host's `responses`; or says
    /// to send the call again (its state came with URL elicitations).
    pub(super) fn resume(
        &self,
        state: &str,
        binding: &str,
        responses: Option<&RawValue>,
        sink: Option<Sink>,
    ) -> Result<Resumed, RpcError> {
        let invalid = |why: String| {
            RpcError::invalid_params(format!(
                "Invalid params: requestState {why}; send the request again without it"
            ))
        };
        // A parked call's state names the replica holding it; one that reached another replica
        // was forwarded there (`cluster`), unless that replica could not be reached.
        let state = match crate::cluster::owner_of(state) {
            None => state,
            Some(owner) if self.owner.as_deref() == Some(owner) => &state[owner.len() + 1..],
            Some(owner) => {
                return Err(invalid(format!(
                    "names a call waiting on replica `{owner}`, which could not be reached"
                )));
            }
        };
        let payload = self
            .sealer
            .open(state, binding.as_bytes())
            .map_err(|e| invalid(e.to_string()))?;
        if payload == AGAIN {
            return Ok(Resumed::Again);
        }
        if let Some(upstream_state) = payload.strip_prefix(RELAY) {
            let upstream_state = String::from_utf8(upstream_state.to_vec())
                .map_err(|_| invalid("is malformed".into()))?;
            return Ok(Resumed::Relay(upstream_state));
        }
        let id = <[u8; 16]>::try_from(payload.as_slice())
            .map(u128::from_be_bytes)
            .map_err(|_| invalid("is malformed".into()))?;
        let responses: HashMap<String, Box<RawValue>> = match responses {
            Some(raw) => serde_json::from_str(raw.get()).map_err(|e| {
                RpcError::invalid_params(format!("Invalid params: inputResponses: {e}"))
            })?,
            None => HashMap::new(),
        };
        let mut flight = lock(&self.parked).remove(&id).ok_or_else(|| {
            invalid("names no call waiting for input (answered already, or it expired)".into())
        })?;
        let mut still = Vec::new();
        for asked in flight.asked.drain(..) {
            match responses.get(&asked.key) {
                Some(response) => asked.reply.result(response),
                // Asked again in the next round, as the revision says a missing answer is.
                None => still.push(asked),
            }
        }
        flight.asked = still;
        flight.caller.set_sink(sink);
        Ok(Resumed::Flight(flight))
    }

    /// Parks `flight` (bound as `bind` spells it, for the caller `parks_for` names) and writes
    /// its `input_required` result; refused when its caller has parked as many calls as it may.
    fn park(
        &self,
        mut flight: Flight,
        bind: &dyn Fn() -> String,
        parks_for: &dyn Fn() -> ParkedFor,
    ) -> Result<Round, RpcError> {
        let ParkedFor {
            holder,
            principal,
            parking,
        } = parks_for();
        if flight.held.is_none() {
            let Some(place) = self.holdings.take(&holder, parking.per_caller) else {
                return Err(RpcError::new(
                    codes::BUSY,
                    format!(
                        "{holder} already have {} calls waiting for input (server.max_parked_per_caller); answer or abandon one first",
                        parking.per_caller
                    ),
                ));
            };
            flight.held = Some((place, principal.as_ref().and_then(Principal::hold_slot)));
        }
        flight.call.send_away();
        let id: u128 = rand::random();
        let binding = flight.binding.get_or_insert_with(bind);
        let sealed = self
            .sealer
            .seal(&id.to_be_bytes(), binding.as_bytes(), parking.timeout);
        let state = crate::cluster::owned(self.owner.as_deref(), sealed);
        let requests: serde_json::Map<String, Value> = flight
            .asked
            .iter()
            .map(|a| {
                let mut request = json!({ "method": a.method });
                if let Some(params) = &a.params {
                    request["params"] = serde_json::from_str(params.get()).unwrap_or(Value::Null);
                }
                (a.key.clone(), request)
            })
            .collect();
        let result = json!({
            "resultType": "input_required",
            "inputRequests": requests,
            "requestState": state,
        });
        flight.caller.set_sink(None);
        {
            let mut parked = lock(&self.parked);
            if parked.len() >= MAX_PARKED {
                return Err(RpcError::new(
                    codes::BUSY,
                    format!(
                        "mcpmux already holds {MAX_PARKED} calls waiting for input; retry later"
                    ),
                ));
            }
            parked.insert(id, flight);
        }
        let parked = Arc::downgrade(&self.parked);
        tokio::spawn(async move {
            tokio::time::sleep(parking.timeout).await;
            if let Some(parked) = parked.upgrade() {
                // Dropped here, outside the lock: its call is cancelled upstream.
                let expired = lock(&parked).remove(&id);
                if expired.is_some() {
                    tracing::info!(
                        "A call waiting for a host's input was not continued within server.park_timeout; cancelled it upstream."
                    );
                }
            }
        });
        Ok(Round::InputRequired(to_raw(&result)))
    }
}

impl Flight {
    fn take(&mut self, event: Event) -> Result<(), RpcError> {
        match event {
            Event::Asked(asked) => self.asked.push(asked),
            Event::Withdrawn(key) => self.asked.retain(|a| a.key != key),
            Event::Missing(required) => return Err(missing_capability(&required)),
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::downstream::session::ClientInfo;
    use crate::jsonrpc::raw_string;
    use crate::mcp::version::Version;

    #[test]
    fn a_binding_names_the_principals_kind_issuer_and_the_profile() {
        let bound = |principal: Option<&Principal>, profile| {
            binding((principal, profile), "tools/call", "fs__read", "fs")
        };
        let (a, b) = (
            Principal::signed_in("https://a.example", "ci", None),
            Principal::signed_in("https://b.example", "ci", None),
        );
        let all = [
            bound(None, None),
            bound(Some(&a), None),
            bound(Some(&b), None),
            bound(Some(&a), Some("reader")),
            bound(Some(&a), Some("writer")),
        ];
        for (i, one) in all.iter().enumerate() {
            for other in &all[i + 1..] {
                assert_ne!(one, other);
            }
        }
        assert_eq!(
            bound(Some(&a), Some("reader")),
            all[3],
            "the same binding again"
        );
    }

    #[tokio::test]
    async fn what_the_host_lacks_fails_its_call_even_when_the_answer_came_first() {
        let host = HostInfo {
            version: Version::MODERN,
            capabilities: Default::default(),
            client_info: ClientInfo::default(),
            request_log_level: None,
        };
        let caller = Rounds::caller(Arc::new(host), None);
        // The upstream asked for sampling, was refused, and answered its call (with what the
        // refusal made of it) before the round looked again.
        caller.say(Event::Missing(json!({ "sampling": {} })));
        let answered: BoxFuture<'static, Result<Reply, UpstreamError>> =
            Box::pin(async { Ok(Reply::Result(raw_string("sampling failed"))) });
        let flight = Rounds::flight(answered, caller);
        let parks_for = || ParkedFor {
            holder: Holder::Address(None),
            principal: None,
            parking: Parking {
                per_caller: 1,
                timeout: Duration::from_secs(60),
            },
        };
        let Err(error) = Rounds::new(SealRing::random(), None)
            .round(flight, (&String::new, &parks_for))
            .await
        else {
            panic!("the upstream's answer was taken");
        };
        assert_eq!(error.code, codes::MISSING_CLIENT_CAPABILITY, "{error}");
    }
}
