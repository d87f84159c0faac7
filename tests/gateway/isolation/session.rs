//! One host session: its random sequence of operations and what it needs to run them — calling
//! and reading its own streams to the answer, telling answers apart by their markers, recording
//! problems. The operations themselves live in the submodules.

mod calls;
mod notices;
mod views;

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, LazyLock};

use rand::Rng;
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use regex::Regex;
use serde_json::{Value, json};

use super::profiles::Role;
use super::tally::{Problem, World, problem};
use super::{LEVELS, OPS_PER_SESSION, WAIT};
use crate::common::{Call, Client, Next};

const NEVER_TOOL: &str = "zz__never";
const NEVER_URI: &str = "zz+test://zz/hello";

/// What each call carries so that its answer can be told from every other call's.
static MARKER: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"S\d+-\d+").unwrap());

/// The operations a session draws from, by weight. Log messages fan out to many sessions, so
/// they are the bulk of what is delivered.
const WEIGHTS: [(&str, u32); 14] = [
    ("echo", 12),
    ("progress", 10),
    ("progress beside echo", 6),
    ("log", 24),
    ("touch hello", 8),
    ("item subscribe/touch/unsubscribe", 5),
    ("sample", 5),
    ("elicit", 4),
    ("add_tool", 3),
    ("list", 3),
    ("hidden probe", 8),
    ("cancel", 4),
    ("stray cancel", 3),
    ("prompt", 3),
];

/// One host session and its own random sequence.
pub(super) struct Session {
    pub(super) me: usize,
    pub(super) role: Role,
    pub(super) client: Client,
    pub(super) world: Arc<World>,
    pub(super) rng: StdRng,
    /// Counts what this session made: its markers, tokens, log texts and names come from it.
    pub(super) n: u64,
    /// The error for a name that never existed, per method: (code, message).
    pub(super) nevers: HashMap<&'static str, (Value, String)>,
}

/// What a call of the test upstream's `sample` or `elicit` asks the host, and how the host
/// answers: the request's method and the capability it needs, the call's arguments (a
/// sampling prompt carries the call's marker), the host's reply, and the call's answer then.
pub(super) struct Asking {
    pub(super) method: &'static str,
    pub(super) capability: &'static str,
    pub(super) arguments: Value,
    pub(super) reply: Value,
    pub(super) answered: String,
}

impl Asking {
    pub(super) fn of(tool: &str, marker: &str) -> Self {
        if tool == "sample" {
            let content = json!({"type": "text", "text": marker});
            Self {
                method: "sampling/createMessage",
                capability: "sampling",
                arguments: json!({"prompt": marker}),
                reply: json!({"role": "assistant", "content": content, "model": "m"}),
                answered: format!("sampled: {marker}"),
            }
        } else {
            Self {
                method: "elicitation/create",
                capability: "elicitation",
                arguments: json!({}),
                reply: json!({"action": "accept", "content": {"name": marker}}),
                answered: format!("elicited: accept {{\"name\":\"{marker}\"}}"),
            }
        }
    }
}

fn text(answer: &Value) -> &str {
    answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
}

/// The markers `message` carries. A marker stands alone: one spelled inside a longer token is
/// chance (a sealed `requestState` is base64url, whose letters, digits, `-` and `_` once spelled
/// `…TT7S9-4Kp4g`), not a delivery.
pub(super) fn markers(message: &Value) -> BTreeSet<String> {
    let text = message.to_string();
    let in_token =
        |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || "-_".contains(c));
    MARKER
        .find_iter(&text)
        .filter(|m| {
            !in_token(text[..m.start()].chars().next_back())
                && !in_token(text[m.end()..].chars().next())
        })
        .map(|m| m.as_str().to_owned())
        .collect()
}

#[test]
fn a_marker_spelled_inside_a_token_is_not_one() {
    let message = serde_json::json!({"text": "sampled: S1-2", "requestState": "EdbTT7S9-4Kp4g",
        "a": "x-S3-4-y", "b": {"name": "S5-6"}, "c": "elicited: accept {\"name\":\"S7-8\"}"});
    let expected = ["S1-2", "S5-6", "S7-8"].map(str::to_owned);
    assert_eq!(markers(&message), BTreeSet::from(expected));
}

impl Session {
    fn problem(&self, problem: Problem, what: String) {
        let (me, profile) = (self.me, self.role.profile());
        self.world
            .problem(problem, format!("session {me} ({profile}): {what}"));
    }

    fn marker(&mut self) -> String {
        self.n += 1;
        format!("S{}-{}", self.me, self.n)
    }

    /// Whether `answer` carries `marker` alone; one carrying another call's is a cross-delivery.
    fn carries(&self, answer: &Value, marker: &str, what: &str) -> bool {
        let found = markers(answer);
        if found.iter().any(|m| m != marker) {
            problem!(self, Cross, "{what} {marker} was answered with {answer}");
        }
        found.len() == 1 && found.contains(marker)
    }

    /// A random upstream of this profile showing `tool`, and the tool's name there.
    fn pick(&mut self, tool: &str) -> Option<(&'static str, String)> {
        let shown = self.role.upstreams().into_iter();
        let options: Vec<_> = shown
            .filter_map(|u| self.role.tool(u, tool).map(|n| (u, n)))
            .collect();
        options.choose(&mut self.rng).cloned()
    }

    /// Reads `call` to its answer, answering a server request with `reply` (refusing it when
    /// there is none): the messages before the answer, and the answer. Nothing may follow it.
    async fn drive(&self, mut call: Call, reply: Option<&Value>) -> Option<(Vec<Value>, Value)> {
        let (mut before, method, id) = (Vec::new(), call.method.clone(), call.id.clone());
        loop {
            let message = match call.messages.next_within(WAIT).await {
                Next::Message(m) => m,
                other => {
                    problem!(self, Failure, "{method} {id}: {other:?} before its answer");
                    return None;
                }
            };
            self.world.delivered(&message);
            if message.get("method").is_none() && message["id"] == id {
                for after in call.messages.rest(WAIT).await {
                    self.world.delivered(&after);
                    problem!(
                        self,
                        Cross,
                        "{after} came after the answer to {method} {id}"
                    );
                }
                return Some((before, message));
            }
            if message.get("method").is_some() && message.get("id").is_some() {
                let id = &message["id"];
                match reply {
                    Some(result) => self.client.respond(id, result.clone()).await,
                    None => {
                        let refusal = json!({"code": -32603, "message": "not this call's request"});
                        self.client.respond_error(id, refusal).await;
                    }
                }
            }
            before.push(message);
        }
    }

    /// A request that causes nothing but its answer: anything else on its stream is astray.
    async fn ask(&self, method: &str, params: Value) -> Value {
        let label = format!("{method} {params}");
        let Some((before, answer)) = self.drive(self.client.start(method, params), None).await
        else {
            return Value::Null;
        };
        for m in before {
            problem!(self, Cross, "{m} came on the stream of {label}");
        }
        answer
    }

    async fn call(&self, name: &str, arguments: Value) -> Value {
        self.ask("tools/call", json!({"name": name, "arguments": arguments}))
            .await
    }

    /// Learns the errors for names that never existed; sets the seeded level and subscriptions.
    pub(super) async fn set_up(&mut self) {
        let probes = [
            ("tools/call", json!({"name": NEVER_TOOL, "arguments": {}})),
            (
                "prompts/get",
                json!({"name": NEVER_TOOL, "arguments": {"name": "x"}}),
            ),
            ("resources/read", json!({"uri": NEVER_URI})),
            ("resources/subscribe", json!({"uri": NEVER_URI})),
        ];
        for (method, params) in probes {
            let error = self.ask(method, params).await["error"].clone();
            assert!(
                error.is_object(),
                "{method} of a name that never existed: {error}"
            );
            let message = error["message"].as_str().unwrap_or_default().to_owned();
            self.nevers.insert(method, (error["code"].clone(), message));
        }
        let plan = &self.world.plans[self.me];
        let level = plan
            .level
            .map(|l| ("logging/setLevel", json!({"level": LEVELS[l]})));
        let hello = plan
            .hello
            .iter()
            .map(|u| json!({"uri": format!("{u}+test://{u}/hello")}));
        let requests: Vec<_> = level
            .into_iter()
            .chain(hello.map(|p| ("resources/subscribe", p)))
            .collect();
        for (method, params) in requests {
            let answer = self.ask(method, params).await;
            assert_eq!(answer["result"], json!({}), "{method}: {answer}");
        }
        self.list().await;
    }

    pub(super) async fn run(&mut self) {
        let ops: Vec<(&str, u32)> = WEIGHTS.into_iter().filter(|(op, _)| self.can(op)).collect();
        for _ in 0..OPS_PER_SESSION {
            let op = ops.choose_weighted(&mut self.rng, |(_, w)| *w).unwrap().0;
            self.world.count(op);
            match op {
                "echo" => self.echo().await,
                "progress" => {
                    let (call, expect) = self.start_progress();
                    let done = self.drive(call, None).await;
                    self.check_progress(done, expect);
                }
                "progress beside echo" => self.progress_beside_echo().await,
                "log" => self.log().await,
                "touch hello" => self.touch_hello().await,
                "item subscribe/touch/unsubscribe" => self.item().await,
                "sample" | "elicit" => self.ask_client(op).await,
                "add_tool" => self.add_tool().await,
                "list" => self.list().await,
                "hidden probe" => self.hidden().await,
                "cancel" => self.cancel().await,
                "stray cancel" => {
                    // No request of this session is in flight: the ids are other sessions'.
                    let last = self.client.fresh_id().as_u64().unwrap();
                    let id = self.rng.random_range(1..=last + 3);
                    let params = json!({"requestId": id, "reason": "stray"});
                    self.client.notify("notifications/cancelled", params).await;
                }
                _ => self.prompt().await,
            }
        }
    }

    fn can(&self, op: &str) -> bool {
        match op {
            "sample" | "elicit" => self
                .role
                .upstreams()
                .iter()
                .any(|u| self.role.tool(u, op).is_some()),
            "add_tool" => self.role.grows().is_some(),
            _ => true,
        }
    }
}
