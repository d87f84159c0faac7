//! A seeded, randomized isolation test: three principals (alice, bob, carol), each with its own
//! profile, open 11 sessions apiece, all at once, on two shared upstreams (`s1` over Streamable
//! HTTP, `s2` a child process) and one per-session upstream (`p1`). Every session runs its own random sequence of operations — echo
//! calls, progress (alone, and beside an echo), sampling and elicitation, log messages at random
//! levels, resource subscriptions and touches, tools added at run time (`list_changed`),
//! cancellations (its own, and stray ones naming ids other sessions use), listings, and attempts
//! on names its profile hides — and every message any session receives is checked against its
//! rightful recipient and that recipient's profile. Beside them run 9 stateless (2026-07-28)
//! hosts, 3 per principal, on the same upstreams (`stateless`: what their answer streams must
//! carry, and the log messages of theirs the sessions must hear):
//!
//! - an answer carries the marker of the call it answers and no other; progress carries the
//!   call's own token (token values deliberately collide across sessions) on the call's own
//!   stream; a sampling or elicitation request comes on the stream of the call that caused it
//!   (or is refused, where the upstream cannot know whose it is: a child process shared by
//!   calls in flight), never on another's;
//! - a log message reaches exactly the sessions whose profile holds its upstream (for `p1`, the
//!   emitting session alone) and whose level it meets; a resource update exactly the sessions
//!   subscribed to its URI;
//! - `tools/list_changed` reaches a session only when a tool its profile shows was added, and
//!   every listing shows exactly what the profile lets through;
//! - a hidden name answers exactly as a name that never existed.
//!
//! What each session's GET stream must carry is tallied per recipient against what it did
//! carry, so a message that went astray (a cross-delivery) and one that never came (a loss) both
//! show. The seed (default 0x5eed, or `MCPMUX_ISOLATION_SEED`, decimal or 0x-hex) fixes every
//! random choice; only the schedule is the machine's. It is printed first, the figures last.
//!
//! The config, the run, the settling and the figures here; `profiles` (the
//! profiles and `Role`, the model of what each shows; the seeded plan), `tally` (who must receive
//! what, and the judging of every GET stream message), `session` (one session's operations:
//! `calls`, `notices`, `views`).

mod profiles;
mod session;
mod stateless;
mod tally;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::common::{
    Client, Daemon, Messages, Next, RemoteServer, Via, poll_until, sha256_hex, test_upstream,
    test_upstream_via,
};
use rand::SeedableRng;
use rand::rngs::StdRng;

use profiles::{PROFILES, Role, plan};
use session::Session;
use stateless::Stateless;
use tally::{Problem, World, problem};

const DEFAULT_SEED: u64 = 0x5eed;
const SESSIONS_PER_PRINCIPAL: usize = 11;
const OPS_PER_SESSION: usize = 90;
const MIN_DELIVERED: u64 = 10_000;
/// The longest any awaited message may take: a bound, never a pause.
const WAIT: Duration = Duration::from_secs(20);

const UPSTREAMS: [&str; 3] = ["s1", "s2", "p1"];
const PER_SESSION: &str = "p1";
/// The shared upstream reached over Streamable HTTP (the others are child processes).
const REMOTE: &str = "s1";
/// The test upstream's tools with `--protocol-tools`.
const TOOLS: &str = "echo fancy slow fail crash huge add_tool progress sample elicit roots \
                     ping_client notify_cancel log log_level touch subscriptions";
/// Log levels, least severe first (the more severe two are never used).
const LEVELS: [&str; 6] = ["debug", "info", "notice", "warning", "error", "critical"];

fn seed() -> u64 {
    let Ok(text) = std::env::var("MCPMUX_ISOLATION_SEED") else {
        return DEFAULT_SEED;
    };
    let parsed = match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => text.parse(),
    };
    parsed.unwrap_or_else(|e| panic!("MCPMUX_ISOLATION_SEED={text}: {e}"))
}

/// The daemon's config, and the server `REMOTE` runs in (it must outlive the run).
fn config() -> (String, RemoteServer) {
    let mut config = String::new();
    let mut server = None;
    for role in Role::ALL {
        let (name, digest, profile) = (role.principal(), sha256_hex(role.token()), role.profile());
        config +=
            &format!("[hosts.{name}]\ntoken_sha256 = \"{digest}\"\nprofile = \"{profile}\"\n");
    }
    for upstream in UPSTREAMS {
        config += &match upstream {
            REMOTE => {
                let (table, remote) = test_upstream_via(upstream, Via::Http, &["--protocol-tools"]);
                server = remote;
                table
            }
            _ => test_upstream(upstream, &["--protocol-tools"]),
        };
        config += "max_in_flight = 256\n";
        if upstream == PER_SESSION {
            config += "isolation = \"per-session\"\n";
        }
    }
    (
        config + PROFILES,
        server.expect("the remote upstream's server"),
    )
}

/// Reads session `me`'s GET stream until `stop` is set and the stream is quiet.
async fn watch(world: Arc<World>, me: usize, mut events: Messages, stop: Arc<AtomicBool>) {
    loop {
        match events.next_within(Duration::from_millis(100)).await {
            Next::Message(m) => world.on_event(me, &m),
            Next::Timeout if stop.load(Ordering::Relaxed) => return,
            Next::Timeout => {}
            Next::End => return problem!(world, Failure, "session {me}'s GET stream ended"),
        }
    }
}

/// Opens every session with its GET stream, then runs them all at once; returns them when done.
async fn run_sessions(
    daemon: &Daemon,
    world: &Arc<World>,
    stop: &Arc<AtomicBool>,
) -> (Vec<Session>, Vec<tokio::task::JoinHandle<()>>) {
    let sessions = world.plans.len();
    let hosts = Role::ALL.len() * stateless::PER_PRINCIPAL;
    let barrier = Arc::new(tokio::sync::Barrier::new(sessions + hosts));
    let (mut watchers, mut workers) = (Vec::new(), Vec::new());
    let mut stateless = Vec::new();
    for k in 0..hosts {
        let role = Role::ALL[k % Role::ALL.len()];
        let host = Stateless::new(k, role, &daemon.url, Arc::clone(world), world.plans[0].seed);
        let barrier = Arc::clone(&barrier);
        stateless.push(tokio::spawn(async move {
            barrier.wait().await;
            host.run().await;
        }));
    }
    for (me, plan) in world.plans.iter().enumerate() {
        let client =
            Client::connect_as_with(&daemon.url, plan.role.token(), plan.role.capabilities()).await;
        let events = client.events().await;
        watchers.push(tokio::spawn(watch(
            Arc::clone(world),
            me,
            events,
            Arc::clone(stop),
        )));
        let world = Arc::clone(world);
        let rng = StdRng::seed_from_u64(plan.seed);
        let mut session = Session {
            me,
            role: plan.role,
            client,
            world,
            rng,
            n: 0,
            nevers: HashMap::new(),
        };
        let barrier = Arc::clone(&barrier);
        workers.push(tokio::spawn(async move {
            session.set_up().await;
            // Every level and subscription is in place before anyone logs or touches.
            barrier.wait().await;
            session.run().await;
            session
        }));
    }
    let mut done = Vec::new();
    for worker in workers {
        done.push(worker.await.unwrap());
    }
    for host in stateless {
        host.await.unwrap();
    }
    (done, watchers)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_message_reaches_its_rightful_session_and_profile_only() {
    let seed = seed();
    eprintln!("isolation: seed {seed:#x} (MCPMUX_ISOLATION_SEED replays another)");
    let started = Instant::now();
    let (config, _server) = config();
    let daemon = Daemon::start(&config);
    for role in Role::ALL {
        let probe = Client::connect_as(&daemon.url, role.token()).await;
        let tools = role.tools();
        daemon
            .wait_for_tools(&probe, |n| tools.iter().all(|t| n.contains(t)))
            .await;
        assert_eq!(probe.delete().await, 200);
    }
    let world = Arc::new(World::new(plan(seed)));
    let stop = Arc::new(AtomicBool::new(false));
    let (done, watchers) = run_sessions(&daemon, &world, &stop).await;

    settle(&world, &done).await;
    stop.store(true, Ordering::Relaxed);
    for watcher in watchers {
        watcher.await.unwrap();
    }
    world.judge_tallies();
    let (total, problems) = report(&world, seed, started);
    assert!(
        problems.is_empty(),
        "seed {seed:#x}: {} problems, listed above",
        problems.len()
    );
    assert!(
        total >= MIN_DELIVERED,
        "seed {seed:#x}: only {total} messages delivered"
    );
}

/// Waits (bounded) until what is on its way has arrived; then each final listing must show
/// exactly what its profile lets through, the added tools included.
async fn settle(world: &World, done: &[Session]) {
    if !poll_until(WAIT, || async { world.settled() }).await {
        eprintln!("isolation: not everything arrived within {WAIT:?}");
    }
    for session in done {
        let shown = &session.shown_tools();
        let listed = || async { session.listing("tools/list").await };
        let reached = poll_until(WAIT, || async {
            listed().await.into_iter().collect::<BTreeSet<_>>() == *shown
        })
        .await;
        if !reached {
            let listed = listed().await;
            session.check_listing("final tools/list", &listed, shown, shown, Problem::Lost);
        }
    }
}

/// Prints the figures (and the first problems); returns the messages delivered and the problems.
fn report(world: &World, seed: u64, started: Instant) -> (u64, Vec<(Problem, String)>) {
    let tally = world.tally();
    let count = |p: Problem| tally.problems.iter().filter(|(q, _)| *q == p).count();
    let total: u64 = tally.delivered.values().sum();
    let kinds: Vec<String> = tally
        .delivered
        .iter()
        .map(|(k, n)| format!("{k:?} {n}"))
        .collect();
    let ops: Vec<String> = tally.ops.iter().map(|(k, n)| format!("{k} {n}")).collect();
    let public = tally
        .added
        .iter()
        .filter(|(_, n)| n.starts_with("pub_"))
        .count();
    let sessions = world.plans.len();
    eprintln!(
        "isolation: seed {seed:#x}; {sessions} sessions ({SESSIONS_PER_PRINCIPAL} each of alice/coder, bob/reader, carol/ops), {OPS_PER_SESSION} operations each; {} stateless hosts beside them",
        Role::ALL.len() * stateless::PER_PRINCIPAL
    );
    eprintln!("isolation: operations: {}", ops.join(", "));
    eprintln!(
        "isolation: tools added {} ({public} pub_, shown to their profile)",
        tally.added.len()
    );
    eprintln!(
        "isolation: delivered {total} messages: {}",
        kinds.join(", ")
    );
    eprintln!(
        "isolation: cross-deliveries {}, hidden items seen {}, lost {}, other failures {}",
        count(Problem::Cross),
        count(Problem::Hidden),
        count(Problem::Lost),
        count(Problem::Failure)
    );
    eprintln!("isolation: wall time {:.1?}", started.elapsed());
    let mut problems = tally.problems.clone();
    problems.sort();
    for (problem, what) in problems.iter().take(40) {
        eprintln!("  {problem:?}: {what}");
    }
    (total, problems)
}
