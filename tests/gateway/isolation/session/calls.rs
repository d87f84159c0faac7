//! The operations answered on the call's own stream: echo, progress (alone and beside an echo),
//! sampling and elicitation, cancellation, prompts.

use rand::Rng;
use rand::seq::IndexedRandom;
use serde_json::{Value, json};

use super::{Asking, Session, markers, text};
use crate::common::{Call, Next};
use crate::isolation::tally::{Problem, problem};
use crate::isolation::{PER_SESSION, WAIT};

impl Session {
    pub(super) async fn echo(&mut self) {
        let (upstream, name) = self.pick("echo").unwrap();
        let marker = self.marker();
        let answer = self.call(&name, json!({"marker": marker})).await;
        self.check_echo(&answer, upstream, &name, &marker);
    }

    fn check_echo(&self, answer: &Value, upstream: &str, name: &str, marker: &str) {
        let echoed = &answer["result"]["structuredContent"];
        if !self.carries(answer, marker, name) {
            problem!(self, Failure, "{name} {marker} failed: {answer}");
        } else if echoed["upstream"] != upstream || echoed["params"]["name"] != "echo" {
            problem!(self, Failure, "{name} was routed wrong: {answer}");
        }
    }

    /// Starts a progress call; its token is a bare number half the time, so that it collides
    /// with other sessions' tokens.
    pub(super) fn start_progress(&mut self) -> (Call, (Value, u64)) {
        let (_, name) = self.pick("progress").unwrap();
        let marker = self.marker();
        let token = if self.rng.random_bool(0.5) {
            json!(self.n)
        } else {
            json!(marker)
        };
        let steps = self.rng.random_range(1..=6);
        let arguments = json!({"steps": steps, "delay_ms": self.rng.random_range(0..=10)});
        let params =
            json!({"name": name, "arguments": arguments, "_meta": {"progressToken": token}});
        (self.client.start("tools/call", params), (token, steps))
    }

    pub(super) fn check_progress(
        &self,
        done: Option<(Vec<Value>, Value)>,
        (token, steps): (Value, u64),
    ) {
        let Some((before, answer)) = done else { return };
        for (i, m) in before.iter().enumerate() {
            if m["method"] != "notifications/progress" || m["params"]["progressToken"] != token {
                problem!(self, Cross, "{m} came on the stream of progress {token}");
            } else if m["params"]["progress"] != json!(i + 1) {
                problem!(self, Failure, "progress {token} out of order: {before:?}");
            }
        }
        let got = before.len() as u64;
        if got < steps {
            problem!(
                self,
                Lost,
                "progress {token}: {got} of {steps} notifications"
            );
        }
        if text(&answer) != format!("done {steps} steps") {
            problem!(self, Failure, "progress {token} answered {answer}");
        }
    }

    /// Two requests of this session in flight at once: each stream carries its own.
    pub(super) async fn progress_beside_echo(&mut self) {
        let (progress, expect) = self.start_progress();
        let (upstream, name) = self.pick("echo").unwrap();
        let marker = self.marker();
        let echo = self.client.start_tool(&name, json!({"marker": marker}));
        let (done, echoed) = tokio::join!(self.drive(progress, None), self.drive(echo, None));
        self.check_progress(done, expect);
        if let Some((before, answer)) = echoed {
            for m in before {
                problem!(self, Cross, "{m} came on the stream of echo {marker}");
            }
            self.check_echo(&answer, upstream, &name, &marker);
        }
    }

    /// Sampling or elicitation: the request comes on this call's stream and the host's answer
    /// completes this call — unless it is refused: the host did not declare the capability, or
    /// the upstream is shared and other sessions' calls are in flight there, so whose it is
    /// cannot be known. It never goes to anyone else.
    pub(super) async fn ask_client(&mut self, tool: &'static str) {
        let (upstream, name) = self.pick(tool).unwrap();
        let marker = self.marker();
        let Asking {
            method,
            capability,
            arguments,
            reply,
            answered,
        } = Asking::of(tool, &marker);
        let call = self.client.start_tool(&name, arguments);
        let Some((before, answer)) = self.drive(call, Some(&reply)).await else {
            return;
        };
        let ours =
            |m: &Value| m["method"] == method && (tool != "sample" || markers(m).contains(&marker));
        for m in before.iter().filter(|m| !ours(m)) {
            problem!(self, Cross, "{m} came on the stream of {name} {marker}");
        }
        let asked = before.iter().filter(|m| ours(m)).count();
        let can = self.role.capabilities().get(capability).is_some();
        let refusal = match (can, upstream == PER_SESSION) {
            (false, _) => Some(format!("`{capability}`")),
            (true, false) => Some("several host sessions".to_owned()),
            (true, true) => None,
        };
        let refused = answer["result"]["isError"] == true
            && refusal.is_some_and(|r| text(&answer).contains(&r));
        if asked == 1 && can && self.carries(&answer, &marker, &name) && text(&answer) == answered {
            self.world.count(&format!("{tool} answered"));
        } else if asked == 0 && refused && markers(&answer).is_empty() {
            self.world.count(&format!("{tool} refused"));
        } else {
            self.carries(&answer, &marker, &name);
            problem!(
                self,
                Failure,
                "{name} {marker}: asked {asked}, answered {answer}"
            );
        }
    }

    /// Cancels a long progress call once its first notification shows the upstream has it.
    pub(super) async fn cancel(&mut self) {
        let (_, name) = self.pick("progress").unwrap();
        let marker = self.marker();
        let token = json!(format!("cancel-{marker}"));
        let arguments = json!({"steps": 400, "delay_ms": 10});
        let params =
            json!({"name": name, "arguments": arguments, "_meta": {"progressToken": token}});
        let mut call = self.client.start("tools/call", params);
        match call.messages.next_within(WAIT).await {
            Next::Message(m) if m["params"]["progressToken"] == token => self.world.delivered(&m),
            other => {
                problem!(self, Failure, "{name} {token}: first came {other:?}");
                return;
            }
        }
        let params = json!({"requestId": call.id, "reason": format!("{marker} changed its mind")});
        self.client.notify("notifications/cancelled", params).await;
        let Some((before, answer)) = self.drive(call, None).await else {
            return;
        };
        for m in before
            .iter()
            .filter(|m| m["params"]["progressToken"] != token)
        {
            problem!(self, Cross, "{m} came on the stream of {name} {token}");
        }
        if answer.get("error").is_none() {
            problem!(self, Failure, "{name} {token}: cancelled, yet {answer}");
        }
    }

    pub(super) async fn prompt(&mut self) {
        let role = self.role;
        let upstreams: Vec<_> = role
            .upstreams()
            .into_iter()
            .filter(|u| role.shows_greet_and_template(u))
            .collect();
        let upstream = *upstreams.choose(&mut self.rng).unwrap();
        let marker = self.marker();
        let params = json!({"name": format!("{upstream}__greet"), "arguments": {"name": marker}});
        let answer = self.ask("prompts/get", params).await;
        let said = &answer["result"]["messages"][0]["content"]["text"];
        if !self.carries(&answer, &marker, "greet")
            || *said != format!("Hello, {marker} from {upstream}")
        {
            problem!(self, Failure, "{upstream}__greet {marker}: {answer}");
        }
    }
}
