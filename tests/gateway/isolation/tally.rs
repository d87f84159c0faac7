//! The bookkeeping of who must receive what: the kinds of message and of problem, the tally of
//! what each session's GET stream must carry and did carry, and `World`, which every task shares
//! and which judges each GET stream message against its rightful recipient.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Mutex, MutexGuard};

use serde_json::Value;

use super::profiles::Plan;
use super::{LEVELS, PER_SESSION};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Kind {
    Answer,
    ErrorAnswer,
    Progress,
    Sampling,
    Elicitation,
    Log,
    Update,
    ListChanged,
    Other,
}

fn kind_of(message: &Value) -> Kind {
    match message.get("method").and_then(Value::as_str) {
        None if message.get("error").is_some() => Kind::ErrorAnswer,
        None => Kind::Answer,
        Some("notifications/progress") => Kind::Progress,
        Some("sampling/createMessage") => Kind::Sampling,
        Some("elicitation/create") => Kind::Elicitation,
        Some("notifications/message") => Kind::Log,
        Some("notifications/resources/updated") => Kind::Update,
        Some(m) if m.ends_with("/list_changed") => Kind::ListChanged,
        Some(_) => Kind::Other,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Problem {
    /// A message reached a session, or a stream, it does not belong to.
    Cross,
    /// A session saw, or could use, something its profile hides.
    Hidden,
    /// A message its rightful recipient never received.
    Lost,
    /// Anything else that went wrong.
    Failure,
}

/// What a GET stream message is: the key it is tallied under, or what is wrong with it.
type Verdict = Result<String, (Problem, String)>;

/// Records a problem: `problem!(session_or_world, Kind, "format", args…)`.
macro_rules! problem {
    ($at:expr, $kind:ident, $($what:tt)+) => {
        $at.problem(Problem::$kind, format!($($what)+))
    };
}
pub(super) use problem;

#[derive(Debug, Default)]
pub(super) struct Tally {
    pub(super) delivered: BTreeMap<Kind, u64>,
    /// Per session: what its GET stream must carry, and what it did carry.
    expected: Vec<HashMap<String, u32>>,
    received: Vec<HashMap<String, u32>>,
    list_changed: Vec<u64>,
    /// Tools added at run time (upstream, name), recorded before the call.
    pub(super) added: Vec<(&'static str, String)>,
    pub(super) problems: Vec<(Problem, String)>,
    pub(super) ops: BTreeMap<String, u64>,
}

/// What every task shares: the plans and the tally.
pub(super) struct World {
    pub(super) plans: Vec<Plan>,
    tally: Mutex<Tally>,
}

impl World {
    pub(super) fn new(plans: Vec<Plan>) -> Self {
        let sessions = plans.len();
        let tally = Tally {
            expected: vec![HashMap::new(); sessions],
            received: vec![HashMap::new(); sessions],
            list_changed: vec![0; sessions],
            ..Tally::default()
        };
        let tally = Mutex::new(tally);
        Self { plans, tally }
    }

    pub(super) fn tally(&self) -> MutexGuard<'_, Tally> {
        self.tally.lock().unwrap()
    }

    pub(super) fn problem(&self, problem: Problem, what: String) {
        self.tally().problems.push((problem, what));
    }

    pub(super) fn delivered(&self, message: &Value) {
        *self.tally().delivered.entry(kind_of(message)).or_default() += 1;
    }

    pub(super) fn count(&self, what: &str) {
        *self.tally().ops.entry(what.to_owned()).or_default() += 1;
    }

    pub(super) fn expect(&self, session: usize, key: String) {
        *self.tally().expected[session].entry(key).or_default() += 1;
    }

    /// How many times session `me`'s GET stream carried `key`.
    pub(super) fn received(&self, me: usize, key: &str) -> u32 {
        self.tally().received[me].get(key).copied().unwrap_or(0)
    }

    /// Checks one message of session `me`'s GET stream: a rightful one is tallied as received.
    pub(super) fn on_event(&self, me: usize, message: &Value) {
        self.delivered(message);
        let role = self.plans[me].role;
        let params = &message["params"];
        let verdict = match message["method"].as_str().unwrap_or_default() {
            "notifications/message" => self.judge_log(me, params),
            "notifications/resources/updated" => self.judge_update(me, params),
            "notifications/tools/list_changed" if role.grows().is_some() => {
                self.tally().list_changed[me] += 1;
                return;
            }
            _ => Err((Problem::Cross, format!("its GET stream carried {message}"))),
        };
        match verdict {
            Ok(key) => *self.tally().received[me].entry(key).or_default() += 1,
            Err((problem, what)) => {
                let profile = role.profile();
                self.problem(problem, format!("session {me} ({profile}): {what}"));
            }
        }
    }

    /// A log message belongs to sessions whose profile holds its upstream (`p1`'s: to the
    /// emitting session) and whose level it meets.
    fn judge_log(&self, me: usize, params: &Value) -> Verdict {
        let plan = &self.plans[me];
        let data = params["data"].as_str().unwrap_or_default();
        let mut parts = data.split(':');
        let (Some("log"), Some(upstream), Some(emitter)) =
            (parts.next(), parts.next(), parts.next())
        else {
            return Err((
                Problem::Failure,
                format!("a log message of no call: {params}"),
            ));
        };
        let rank = LEVELS.iter().position(|l| params["level"] == *l);
        let rightful = plan.role.holds(upstream)
            && (upstream != PER_SESSION || emitter == me.to_string())
            && matches!((plan.level, rank), (Some(wanted), Some(rank)) if rank >= wanted);
        if !rightful {
            let (level, sent) = (plan.level.map(|l| LEVELS[l]), &params["level"]);
            return Err((
                Problem::Cross,
                format!("log {data} ({sent}) at level {level:?}"),
            ));
        }
        if params["logger"] != format!("{upstream}/testlog") {
            return Err((
                Problem::Failure,
                format!("log {data} from {}", params["logger"]),
            ));
        }
        Ok(format!("log {data}"))
    }

    /// A resource update belongs to a session that holds the upstream and shows the URI (an
    /// item's to the session that named it after itself).
    fn judge_update(&self, me: usize, params: &Value) -> Verdict {
        let role = self.plans[me].role;
        let uri = params["uri"].as_str().unwrap_or_default();
        let (prefix, _) = uri.split_once('+').unwrap_or_default();
        let owner = uri
            .rsplit_once("/item/")
            .and_then(|(_, id)| id.split('-').next());
        if !role.holds(prefix) || owner.is_some_and(|o| o != me.to_string()) {
            return Err((Problem::Cross, format!("an update of {uri}")));
        }
        if !role.shows_uri(uri) {
            return Err((Problem::Hidden, format!("an update of hidden {uri}")));
        }
        Ok(format!("update {uri}"))
    }

    /// Whether every session received what it must (whether it received more is judged later).
    pub(super) fn settled(&self) -> bool {
        let tally = self.tally();
        (0..self.plans.len()).all(|me| {
            let role = self.plans[me].role;
            let told = tally.list_changed[me] > 0
                || !tally.added.iter().any(|(u, n)| role.shows_added(u, n));
            let received = &tally.received[me];
            told && tally.expected[me]
                .iter()
                .all(|(k, n)| received.get(k).is_some_and(|r| r >= n))
        })
    }

    /// Deliveries beyond or short of what each session must receive.
    pub(super) fn judge_tallies(&self) {
        let mut found = Vec::new();
        let tally = self.tally();
        for me in 0..self.plans.len() {
            let (expected, received) = (&tally.expected[me], &tally.received[me]);
            for key in expected
                .keys()
                .chain(received.keys())
                .collect::<BTreeSet<_>>()
            {
                let want = expected.get(key).copied().unwrap_or(0);
                let got = received.get(key).copied().unwrap_or(0);
                let problem = if got > want {
                    Problem::Cross
                } else {
                    Problem::Lost
                };
                if got != want {
                    found.push((
                        problem,
                        format!("session {me} got {key:?} {got} times, not {want}"),
                    ));
                }
            }
            // At most one notice per visible change (a burst may share one), none without.
            let role = self.plans[me].role;
            let visible = tally
                .added
                .iter()
                .filter(|(u, n)| role.shows_added(u, n))
                .count();
            let notices = tally.list_changed[me];
            if notices > visible as u64 {
                let what =
                    format!("session {me} got {notices} tools/list_changed for {visible} changes");
                found.push((Problem::Cross, what));
            }
        }
        drop(tally);
        self.tally().problems.extend(found);
    }
}
