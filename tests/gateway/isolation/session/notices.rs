//! The operations whose effect reaches GET streams: log messages, resource touches (a shared
//! hello, an item of its own), tools added at run time. Each records who must receive what.

use rand::Rng;
use rand::seq::IndexedRandom;
use serde_json::json;

use super::{Session, text};
use crate::common::poll_until;
use crate::isolation::tally::{Problem, problem};
use crate::isolation::{LEVELS, PER_SESSION, REMOTE, WAIT};

impl Session {
    /// Logs at a random level; who must hear it follows from the seeded levels alone.
    pub(super) async fn log(&mut self) {
        let (upstream, name) = self.pick("log").unwrap();
        let level = self.rng.random_range(0..LEVELS.len());
        self.n += 1;
        let data = format!("log:{upstream}:{}:{}", self.me, self.n);
        let answer = self
            .call(&name, json!({"level": LEVELS[level], "text": data}))
            .await;
        if text(&answer) != "logged" {
            problem!(self, Failure, "{name} answered {answer}");
        }
        for (r, plan) in self.world.plans.iter().enumerate() {
            let hears = plan.role.holds(upstream) && (upstream != PER_SESSION || r == self.me);
            if hears && plan.level.is_some_and(|wanted| level >= wanted) {
                self.world.expect(r, format!("log {data}"));
            }
        }
    }

    async fn touch(&self, name: &str, uri: &str, subscribed: bool) {
        let answer = self.call(name, json!({"uri": uri})).await;
        if text(&answer) != format!("touched {uri} (subscribed: {subscribed})") {
            problem!(
                self,
                Failure,
                "{uri}: not subscribed: {subscribed}, {answer}"
            );
        }
    }

    /// Touches a hello: a shared one notifies its seeded subscribers, `p1`'s this session alone.
    pub(super) async fn touch_hello(&mut self) {
        let (upstream, name) = self.pick("touch").unwrap();
        let plans = &self.world.plans;
        let subscribers: Vec<usize> = (0..plans.len())
            .filter(|r| plans[*r].hello.contains(&upstream))
            .filter(|r| upstream != PER_SESSION || *r == self.me)
            .collect();
        let uri = format!("test://{upstream}/hello");
        self.touch(&name, &uri, !subscribers.is_empty()).await;
        for r in subscribers {
            self.world.expect(r, format!("update {upstream}+{uri}"));
        }
    }

    /// Subscribes an item of its own, touches it (one update, to this session), unsubscribes,
    /// touches it again (nothing).
    pub(super) async fn item(&mut self) {
        let role = self.role;
        let upstreams: Vec<_> = role
            .upstreams()
            .into_iter()
            .filter(|u| role.shows_uri(&format!("{u}+test://{u}/item/1")))
            .collect();
        let upstream = *upstreams.choose(&mut self.rng).unwrap();
        let name = role.tool(upstream, "touch").unwrap();
        self.n += 1;
        let uri = format!("test://{upstream}/item/{}-{}", self.me, self.n);
        let exposed = format!("{upstream}+{uri}");
        for (method, subscribed) in [
            ("resources/subscribe", true),
            ("resources/unsubscribe", false),
        ] {
            let answer = self.ask(method, json!({"uri": exposed})).await;
            if answer["result"] != json!({}) {
                problem!(self, Failure, "{method} {exposed}: {answer}");
            }
            self.touch(&name, &uri, subscribed).await;
            if subscribed {
                let key = format!("update {exposed}");
                self.world.expect(self.me, key.clone());
                // The remote upstream sends the update on its own stream, which nothing orders
                // with the touch's answer: the host waits for it before it unsubscribes (an
                // update that arrives after that is rightly not delivered).
                if upstream == REMOTE {
                    let (world, me) = (&self.world, self.me);
                    poll_until(WAIT, || async { world.received(me, &key) > 0 }).await;
                }
            }
        }
    }

    /// Adds a tool to its shared upstream; most are `priv_`, which no profile shows.
    pub(super) async fn add_tool(&mut self) {
        let upstream = self.role.grows().unwrap();
        let name = self.role.tool(upstream, "add_tool").unwrap();
        self.n += 1;
        let kind = if self.rng.random_bool(0.3) {
            "pub"
        } else {
            "priv"
        };
        let new = format!("{kind}_{}_{}", self.me, self.n);
        self.world.tally().added.push((upstream, new.clone()));
        let answer = self.call(&name, json!({"name": new})).await;
        if text(&answer) != format!("added {new}") {
            problem!(self, Failure, "{name} {new}: {answer}");
        }
    }
}
