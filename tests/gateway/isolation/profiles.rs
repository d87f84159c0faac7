//! The three profiles the daemon is given, `Role`: the test's model of what each one shows its
//! principal, and the plan the seed draws for every session before the run.

use std::collections::BTreeSet;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

use super::{SESSIONS_PER_PRINCIPAL, TOOLS, UPSTREAMS};

/// The three views; `Role` is the test's model of what each shows.
pub(super) const PROFILES: &str = r#"
[profiles.coder]
upstreams = ["s1", "p1"]
allow = ["tool:s1__*", "tool:p1__*"]
deny = ["tool:*__crash", "tool:*__huge", "tool:p1__add_tool", "tool:*__priv_*"]

[profiles.reader]
upstreams = ["s2", "p1"]
allow = ["tool:s2__*", "tool:p1__echo", "tool:p1__progress", "tool:p1__log", "tool:p1__touch",
         "tool:p1__sample", "tool:p1__elicit", "prompt:p1__*", "resource:s2+test://s2/hello",
         "resource:p1+*", "template:p1+*"]
deny = ["tool:*__crash", "tool:*__huge", "tool:s2__sample", "tool:s2__elicit", "tool:*__priv_*"]
[profiles.reader.rename]
"p1__echo" = "mine"

[profiles.ops]
upstreams = ["s1", "s2"]
allow = ["tool:s1__echo", "tool:s1__progress", "tool:s1__log", "tool:s1__touch", "tool:s1__sample",
         "tool:s2__echo", "tool:s2__progress", "tool:s2__log", "tool:s2__touch"]
[profiles.ops.rename]
"s1__echo" = "run"
"s2__echo" = "say"
"#;

/// A principal and its profile, as the test expects mcpmux to show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    Coder,
    Reader,
    Ops,
}

impl Role {
    pub(super) const ALL: [Self; 3] = [Self::Coder, Self::Reader, Self::Ops];

    pub(super) fn principal(self) -> &'static str {
        ["alice", "bob", "carol"][self as usize]
    }

    pub(super) fn profile(self) -> &'static str {
        ["coder", "reader", "ops"][self as usize]
    }

    pub(super) fn token(self) -> &'static str {
        [
            "alice-isolation-4b1e",
            "bob-isolation-d07a",
            "carol-isolation-93c6",
        ][self as usize]
    }

    pub(super) fn upstreams(self) -> [&'static str; 2] {
        [["s1", "p1"], ["s2", "p1"], ["s1", "s2"]][self as usize]
    }

    pub(super) fn holds(self, upstream: &str) -> bool {
        self.upstreams().contains(&upstream)
    }

    /// What its host declares: bob cannot sample, carol cannot elicit.
    pub(super) fn capabilities(self) -> Value {
        [
            json!({"sampling": {}, "elicitation": {}}),
            json!({"elicitation": {}}),
            json!({"sampling": {}}),
        ][self as usize]
            .clone()
    }

    /// The name this profile shows `upstream`'s tool `tool` under, if it shows it.
    pub(super) fn tool(self, upstream: &str, tool: &str) -> Option<String> {
        let shown = match (self, upstream) {
            (Self::Coder, "s1") => !["crash", "huge"].contains(&tool),
            (Self::Coder, "p1") => !["crash", "huge", "add_tool"].contains(&tool),
            (Self::Reader, "s2") => !["crash", "huge", "sample", "elicit"].contains(&tool),
            (Self::Reader, "p1") => {
                ["echo", "progress", "log", "touch", "sample", "elicit"].contains(&tool)
            }
            (Self::Ops, "s1") => ["echo", "progress", "log", "touch", "sample"].contains(&tool),
            (Self::Ops, "s2") => ["echo", "progress", "log", "touch"].contains(&tool),
            _ => false,
        };
        shown.then(|| match (self, upstream, tool) {
            (Self::Reader, "p1", "echo") => "mine".to_owned(),
            (Self::Ops, "s1", "echo") => "run".to_owned(),
            (Self::Ops, "s2", "echo") => "say".to_owned(),
            _ => format!("{upstream}__{tool}"),
        })
    }

    /// Every tool it shows before any is added.
    pub(super) fn tools(self) -> BTreeSet<String> {
        let all = UPSTREAMS
            .iter()
            .flat_map(|u| TOOLS.split_whitespace().map(move |t| (u, t)));
        all.filter_map(|(u, t)| self.tool(u, t)).collect()
    }

    /// The shared upstream whose `add_tool` it calls; it shows the `pub_` tools added there.
    pub(super) fn grows(self) -> Option<&'static str> {
        [Some("s1"), Some("s2"), None][self as usize]
    }

    pub(super) fn shows_added(self, upstream: &str, name: &str) -> bool {
        self.grows() == Some(upstream) && name.starts_with("pub_")
    }

    pub(super) fn shows_uri(self, uri: &str) -> bool {
        let (prefix, _) = uri.split_once('+').unwrap_or_default();
        match self {
            Self::Reader if prefix == "s2" => uri == "s2+test://s2/hello",
            _ => self.holds(prefix) && uri.starts_with(&format!("{prefix}+test://{prefix}/")),
        }
    }

    /// Whether it shows `upstream`'s prompt `greet` and resource template.
    pub(super) fn shows_greet_and_template(self, upstream: &str) -> bool {
        self.holds(upstream) && !(self == Self::Reader && upstream == "s2")
    }
}

/// What the seed decides about one session before the run.
#[derive(Debug)]
pub(super) struct Plan {
    pub(super) role: Role,
    /// Its `logging/setLevel` (an index in `LEVELS`), kept for the whole run.
    pub(super) level: Option<usize>,
    /// The upstreams whose `test://NAME/hello` it subscribes before the run and keeps.
    pub(super) hello: Vec<&'static str>,
    pub(super) seed: u64,
}

pub(super) fn plan(seed: u64) -> Vec<Plan> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut plans: Vec<Plan> = (0..3 * SESSIONS_PER_PRINCIPAL)
        .map(|i| {
            let role = Role::ALL[i % 3];
            let level = rng.random_bool(0.8).then(|| rng.random_range(0..5));
            let upstreams = role.upstreams().into_iter();
            let hello = upstreams.filter(|_| rng.random_bool(0.5)).collect();
            let seed = rng.random();
            Plan {
                role,
                level,
                hello,
                seed,
            }
        })
        .collect();
    // Each shared hello has a subscriber, so touching it always notifies someone.
    for upstream in ["s1", "s2"] {
        if !plans.iter().any(|p| p.hello.contains(&upstream)) {
            let plan = plans.iter_mut().find(|p| p.role.holds(upstream)).unwrap();
            plan.hello.push(upstream);
        }
    }
    plans
}
