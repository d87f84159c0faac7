//! What the profile shows: the listings, checked against `Role`, and probes of hidden names,
//! which must answer exactly as names that never existed.

use std::collections::BTreeSet;

use rand::Rng;
use rand::seq::IndexedRandom;
use serde_json::json;

use super::{NEVER_TOOL, NEVER_URI, Session};
use crate::isolation::tally::{Problem, problem};
use crate::isolation::{TOOLS, UPSTREAMS};

impl Session {
    /// The tools this profile shows once everything added so far is listed.
    pub(crate) fn shown_tools(&self) -> BTreeSet<String> {
        let added = self.world.tally().added.clone();
        let shown = added.iter().filter(|(u, n)| self.role.shows_added(u, n));
        let mut tools = self.role.tools();
        tools.extend(shown.map(|(u, n)| format!("{u}__{n}")));
        tools
    }

    /// One listing (one page: the default page holds it all), by `key` of its items.
    pub(crate) async fn listing(&self, method: &str) -> Vec<String> {
        let (field, key) = match method {
            "tools/list" => ("tools", "name"),
            "prompts/list" => ("prompts", "name"),
            "resources/list" => ("resources", "uri"),
            _ => ("resourceTemplates", "uriTemplate"),
        };
        let answer = self.ask(method, json!({})).await;
        if answer["result"].get("nextCursor").is_some() {
            problem!(self, Failure, "{method} has more than one page");
        }
        let items = answer["result"][field]
            .as_array()
            .cloned()
            .unwrap_or_default();
        items
            .iter()
            .map(|i| i[key].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    /// A listing shows nothing beyond `allowed`, nothing twice, and all of `required`.
    pub(crate) fn check_listing(
        &self,
        method: &str,
        listed: &[String],
        allowed: &BTreeSet<String>,
        required: &BTreeSet<String>,
        missing: Problem,
    ) {
        let mut seen = BTreeSet::new();
        for item in listed {
            if !allowed.contains(item) {
                problem!(self, Hidden, "{method} shows {item}");
            } else if !seen.insert(item.clone()) {
                problem!(self, Failure, "{method} shows {item} twice");
            }
        }
        for item in required.difference(&seen) {
            self.problem(missing, format!("{method} lacks {item}"));
        }
    }

    pub(super) async fn list(&self) {
        let tools = self.listing("tools/list").await;
        let base = self.role.tools();
        self.check_listing(
            "tools/list",
            &tools,
            &self.shown_tools(),
            &base,
            Problem::Failure,
        );
        let held = self.role.upstreams().into_iter();
        let greets = held
            .clone()
            .filter(|u| self.role.shows_greet_and_template(u));
        let expected = [
            (
                "prompts/list",
                greets.clone().map(|u| format!("{u}__greet")).collect(),
            ),
            (
                "resources/list",
                held.map(|u| format!("{u}+test://{u}/hello"))
                    .filter(|r| self.role.shows_uri(r))
                    .collect(),
            ),
            (
                "resources/templates/list",
                greets
                    .map(|u| format!("{u}+test://{u}/item/{{id}}"))
                    .collect::<BTreeSet<_>>(),
            ),
        ];
        for (method, items) in expected {
            let listed = self.listing(method).await;
            self.check_listing(method, &listed, &items, &items, Problem::Failure);
        }
    }

    /// Tries something its profile hides: it must answer exactly as a name that never existed.
    pub(super) async fn hidden(&mut self) {
        let (me, role) = (self.me, self.role);
        let (method, never, hidden, params) = match self.rng.random_range(0..4) {
            0 => {
                let shown = self.shown_tools();
                let added = self.world.tally().added.clone();
                let all = UPSTREAMS
                    .iter()
                    .flat_map(|u| TOOLS.split_whitespace().map(move |t| format!("{u}__{t}")));
                let renamed = ["run", "say", "mine"].map(String::from);
                let added = added.iter().map(|(u, n)| format!("{u}__{n}"));
                let names: Vec<String> = all
                    .chain(renamed)
                    .chain(added)
                    .filter(|n| !shown.contains(n))
                    .collect();
                let name = names.choose(&mut self.rng).unwrap().clone();
                (
                    "tools/call",
                    NEVER_TOOL,
                    name.clone(),
                    json!({"name": name, "arguments": {}}),
                )
            }
            1 => {
                let hidden = UPSTREAMS
                    .iter()
                    .filter(|u| !role.shows_greet_and_template(u));
                let names: Vec<String> = hidden.map(|u| format!("{u}__greet")).collect();
                let name = names.choose(&mut self.rng).unwrap().clone();
                let params = json!({"name": name, "arguments": {"name": "x"}});
                ("prompts/get", NEVER_TOOL, name, params)
            }
            k => {
                let uris = UPSTREAMS.iter().flat_map(|u| {
                    [
                        format!("{u}+test://{u}/hello"),
                        format!("{u}+test://{u}/item/{me}-0"),
                    ]
                });
                let uris: Vec<String> = uris.filter(|uri| !role.shows_uri(uri)).collect();
                let uri = uris.choose(&mut self.rng).unwrap().clone();
                let method = if k == 2 {
                    "resources/read"
                } else {
                    "resources/subscribe"
                };
                (method, NEVER_URI, uri.clone(), json!({"uri": uri}))
            }
        };
        let answer = self.ask(method, params).await;
        let (code, message) = &self.nevers[method];
        let error = &answer["error"];
        let unknown = message.replace(never, &hidden);
        if error["code"] != *code || error["message"] != unknown.as_str() {
            problem!(
                self,
                Hidden,
                "{method} {hidden}: {answer}, not {code} {unknown}"
            );
        }
    }
}
