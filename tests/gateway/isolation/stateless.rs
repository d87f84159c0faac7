//! The stateless (2026-07-28) hosts of the run: no session and no GET stream, every request with
//! its own envelope, beside the handshake sessions and on the same upstreams. Each runs its own
//! seeded sequence — echo calls, progress, log messages it asks for per request (`logLevel`),
//! sampling and elicitation as `input_required` rounds, echo calls to a per-session upstream
//! (served by the instance of the host's principal and profile) — and everything on each
//! answer stream is checked:
//!
//! - an answer carries its call's marker and no other (markers are `S1xx-n`, so a session's
//!   checks catch them too); progress carries the call's own token, every step of it;
//! - a log message on the stream is the request's own, at or above the level it asked for (over
//!   stdio one the upstream sent while other calls were in flight names no request, so it may be
//!   missing, never another's); the sessions whose level it meets hear it as they hear theirs;
//! - a round's `inputRequests` are its own call's, and the retry with its answers completes that
//!   call — or the request is refused because other calls are in flight on the upstream.

use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

use super::profiles::Role;
use super::tally::{Problem, World, problem};
use super::{LEVELS, PER_SESSION};
use crate::modern::{Answer, ModernHost};
use std::sync::Arc;

/// Stateless hosts per principal, and the operations each runs.
pub(super) const PER_PRINCIPAL: usize = 3;
const OPS: usize = 60;
/// Their numbers start here, so that their markers and log texts are told from sessions'.
const FIRST: usize = 100;

const WEIGHTS: [(&str, u32); 6] = [
    ("echo", 10),
    ("progress", 8),
    ("log", 14),
    ("sample", 5),
    ("elicit", 4),
    ("per-session", 2),
];

pub(super) struct Stateless {
    me: usize,
    role: Role,
    host: ModernHost,
    world: Arc<World>,
    rng: StdRng,
    n: u64,
}

/// The messages of `answer` before its final one.
fn before(answer: &Answer) -> &[Value] {
    &answer.messages[..answer.messages.len().saturating_sub(1)]
}

fn text(answer: &Answer) -> &str {
    answer.last()["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
}

impl Stateless {
    /// The `k`th stateless host, of `role`.
    pub(super) fn new(k: usize, role: Role, url: &str, world: Arc<World>, seed: u64) -> Self {
        let host = ModernHost::as_host(url, role.token(), role.capabilities());
        Self {
            me: FIRST + k,
            role,
            host,
            world,
            rng: StdRng::seed_from_u64(seed ^ (k as u64 + 1).wrapping_mul(0x9e37_79b9)),
            n: 0,
        }
    }

    fn problem(&self, problem: Problem, what: String) {
        let (me, profile) = (self.me, self.role.profile());
        let what = format!("stateless host {me} ({profile}): {what}");
        self.world.problem(problem, what);
    }

    fn marker(&mut self) -> String {
        self.n += 1;
        format!("S{}-{}", self.me, self.n)
    }

    /// A random shared upstream of its profile showing `tool` (the per-session one is the
    /// `per-session` operation's: one instance serves the principal's three stateless hosts, so
    /// which of them its requests for input belong to could not be told), and the tool's name
    /// there.
    fn pick(&mut self, tool: &str) -> Option<(&'static str, String)> {
        let shown = self
            .role
            .upstreams()
            .into_iter()
            .filter(|u| *u != PER_SESSION);
        let options: Vec<_> = shown
            .filter_map(|u| self.role.tool(u, tool).map(|n| (u, n)))
            .collect();
        options.choose(&mut self.rng).cloned()
    }

    /// Whether `message` carries `marker` alone; another call's marker in it is a cross-delivery.
    fn carries(&self, message: &Value, marker: &str, what: &str) -> bool {
        let found = super::session::markers(message);
        if found.iter().any(|m| m != marker) {
            problem!(self, Cross, "{what} {marker} was answered with {message}");
        }
        found.len() == 1 && found.contains(marker)
    }

    async fn call(&mut self, name: &str, arguments: Value, meta: Value) -> Answer {
        self.n += 1;
        let params = json!({"name": name, "arguments": arguments, "_meta": meta});
        let answer = self.host.request(self.n, "tools/call", params).await;
        for message in &answer.messages {
            self.world.delivered(message);
        }
        answer
    }

    pub(super) async fn run(mut self) {
        let ops: Vec<(&str, u32)> = WEIGHTS
            .into_iter()
            .filter(|(op, _)| match *op {
                "per-session" => self.role.holds(PER_SESSION),
                "sample" | "elicit" => self.pick(op).is_some(),
                _ => true,
            })
            .collect();
        for _ in 0..OPS {
            let op = ops.choose_weighted(&mut self.rng, |(_, w)| *w).unwrap().0;
            self.world.count(&format!("stateless {op}"));
            match op {
                "echo" => self.echo().await,
                "progress" => self.progress().await,
                "log" => self.log().await,
                "sample" | "elicit" => self.ask_client(op).await,
                _ => self.per_session().await,
            }
        }
    }

    async fn echo(&mut self) {
        let (upstream, name) = self.pick("echo").unwrap();
        let marker = self.marker();
        let answer = self.call(&name, json!({"marker": marker}), json!({})).await;
        for m in before(&answer) {
            problem!(self, Cross, "{m} came on the stream of echo {marker}");
        }
        let echoed = &answer.last()["result"]["structuredContent"];
        if !self.carries(answer.last(), &marker, &name) {
            problem!(self, Failure, "{name} {marker} failed: {}", answer.last());
        } else if echoed["upstream"] != upstream || echoed["params"]["name"] != "echo" {
            problem!(self, Failure, "{name} was routed wrong: {}", answer.last());
        }
    }

    /// Progress under a token that collides with other hosts' half the time.
    async fn progress(&mut self) {
        let (_, name) = self.pick("progress").unwrap();
        let marker = self.marker();
        let token = match self.rng.random_bool(0.5) {
            true => json!(self.n),
            false => json!(marker),
        };
        let steps = self.rng.random_range(1..=6);
        let arguments = json!({"steps": steps, "delay_ms": self.rng.random_range(0..=10)});
        let answer = self
            .call(&name, arguments, json!({"progressToken": token}))
            .await;
        let notes = before(&answer);
        for (i, m) in notes.iter().enumerate() {
            if m["method"] != "notifications/progress" || m["params"]["progressToken"] != token {
                problem!(self, Cross, "{m} came on the stream of progress {token}");
            } else if m["params"]["progress"] != json!(i + 1) {
                problem!(self, Failure, "progress {token} out of order: {notes:?}");
            }
        }
        if (notes.len() as u64) < steps {
            let got = notes.len();
            problem!(
                self,
                Lost,
                "progress {token}: {got} of {steps} notifications"
            );
        }
        if text(&answer) != format!("done {steps} steps") {
            problem!(self, Failure, "progress {token} answered {}", answer.last());
        }
    }

    /// Logs at a random level, asking for messages at a random level or none.
    async fn log(&mut self) {
        let (upstream, name) = self.pick("log").unwrap();
        let level = self.rng.random_range(0..LEVELS.len());
        let wanted = self
            .rng
            .random_bool(0.7)
            .then(|| self.rng.random_range(0..LEVELS.len()));
        let data = format!("log:{upstream}:{}:{}", self.me, self.n + 1);
        let meta = match wanted {
            Some(w) => json!({"io.modelcontextprotocol/logLevel": LEVELS[w]}),
            None => json!({}),
        };
        let arguments = json!({"level": LEVELS[level], "text": data});
        let answer = self.call(&name, arguments, meta).await;
        if text(&answer) != "logged" {
            problem!(self, Failure, "{name} answered {}", answer.last());
        }
        let own = |m: &Value| {
            m["method"] == "notifications/message"
                && m["params"]["data"] == data
                && m["params"]["level"] == LEVELS[level]
                && m["params"]["logger"] == format!("{upstream}/testlog")
        };
        let heard = before(&answer);
        for m in heard.iter().filter(|m| !own(m)) {
            problem!(self, Cross, "{m} came on the stream of log {data}");
        }
        let may_hear = wanted.is_some_and(|w| level >= w);
        if heard.len() > usize::from(may_hear) {
            problem!(self, Cross, "log {data} (asked {wanted:?}) heard {heard:?}");
        }
        if !heard.is_empty() {
            self.world.count("stateless log heard");
        }
        // The sessions that asked for this level hear it, as they hear one of their own.
        for (r, plan) in self.world.plans.iter().enumerate() {
            if plan.role.holds(upstream) && plan.level.is_some_and(|w| level >= w) {
                self.world.expect(r, format!("log {data}"));
            }
        }
    }

    /// Sampling or elicitation: `input_required` carrying this call's own request, then the
    /// retry with its answer completes this call — or it is refused, as the upstream cannot tell
    /// whose request it is while other calls are in flight there.
    async fn ask_client(&mut self, tool: &'static str) {
        let (_, name) = self.pick(tool).unwrap();
        let marker = self.marker();
        let super::session::Asking {
            method,
            arguments,
            reply,
            answered,
            ..
        } = super::session::Asking::of(tool, &marker);
        let round = self.call(&name, arguments.clone(), json!({})).await;
        for m in before(&round) {
            problem!(self, Cross, "{m} came on the stream of {name} {marker}");
        }
        let result = &round.last()["result"];
        if result["resultType"] != "input_required" {
            let refused = result["isError"] == true
                && text(&round).contains("several host sessions")
                && super::session::markers(result).is_empty();
            match refused {
                true => self.world.count(&format!("stateless {tool} refused")),
                false => problem!(self, Failure, "{name} {marker}: {result}"),
            }
            return;
        }
        let requests = result["inputRequests"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        let ours = |r: &Value| {
            r["method"] == method
                && (tool != "sample" || super::session::markers(r).contains(&marker))
        };
        if requests.len() != 1 || !requests.values().all(ours) {
            problem!(self, Cross, "{name} {marker} was asked {result}");
            return;
        }
        if tool == "sample" && !self.carries(result, &marker, &name) {
            return;
        }
        let key = requests.keys().next().unwrap();
        let state = result["requestState"].clone();
        self.n += 1;
        let retry = json!({"name": name, "arguments": arguments, "requestState": state,
                           "inputResponses": {key.as_str(): reply}});
        let done = self.host.request(self.n, "tools/call", retry).await;
        for message in &done.messages {
            self.world.delivered(message);
        }
        if self.carries(done.last(), &marker, &name) && text(&done) == answered {
            self.world.count(&format!("stateless {tool} answered"));
        } else {
            problem!(self, Failure, "{name} {marker}: answered {}", done.last());
        }
    }

    /// A per-session upstream: the instance of this host's principal and profile answers (the
    /// call's own marker, from `p1`).
    async fn per_session(&mut self) {
        let name = self.role.tool(PER_SESSION, "echo").unwrap();
        let marker = self.marker();
        let answer = self.call(&name, json!({"marker": marker}), json!({})).await;
        for m in before(&answer) {
            problem!(self, Cross, "{m} came on the stream of {name} {marker}");
        }
        let echoed = &answer.last()["result"]["structuredContent"];
        if !self.carries(answer.last(), &marker, &name) || echoed["upstream"] != PER_SESSION {
            problem!(self, Failure, "{name} {marker} answered {}", answer.last());
        }
    }
}
