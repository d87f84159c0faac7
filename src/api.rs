//! The admin API on the wire: one serde type for every answer (and the one request body) of
//! the admin listener. The server (`admin`, with the parts that fill its answers: `downstream`'s
//! host and session status, `daemon::reload`'s config status) serializes these types, and the
//! CLI (`cli`) deserializes the answers into the very same types.
//!
//! That is what makes a change of shape a compile error: rename a field here and both the code
//! that fills it and the code that prints it stop compiling, where a `json!` on one side and a
//! `value["key"]` on the other used to drift apart silently. The names and shapes are the ones
//! the admin API has always answered (tests and scripts read them); a field a newer daemon adds
//! is ignored by an older CLI, never an error. What an upstream says of itself (`serverInfo`)
//! passes through as it came.
//!
//! The audit answers are the audit log's own types (re-exported here); a pin row is the pin
//! store's.

use serde::{Deserialize, Serialize};

pub use crate::pins::PinRow;

/// `GET /status`: the daemon, its config, its hosts, every upstream and the audit log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Status {
    /// The daemon's version (`CARGO_PKG_VERSION`).
    pub version: String,
    /// This replica's name (`[cluster] replica`; `None`: it stands alone).
    #[serde(default)]
    pub replica: Option<String>,
    pub catalog_generation: u64,
    /// Host sessions open now, and how many may be (`server.max_sessions`).
    pub sessions: usize,
    pub max_sessions: usize,
    pub config: ConfigStatus,
    /// Each configured host (empty while hosts are anonymous).
    pub hosts: Vec<HostStatus>,
    /// By name.
    pub upstreams: Vec<UpstreamStatus>,
    pub audit: AuditStatus,
}

/// One upstream in `GET /status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UpstreamStatus {
    pub name: String,
    pub prefix: String,
    /// Its phase as `upstream::Phase` displays it: `starting`, `ready`, `crash-loop`…
    pub state: String,
    /// `stdio`, or the remote transport it speaks (`streamable-http`, `sse`).
    pub transport: String,
    /// A remote upstream's URL (`None`: a command).
    pub url: Option<String>,
    /// Whether it signs in with OAuth (`mcpmux login`, the console's sign-in button).
    #[serde(default)]
    pub oauth: bool,
    pub last_http_error: Option<String>,
    pub http_session: Option<String>,
    pub last_error: Option<String>,
    pub restarts: u32,
    pub pid: Option<u32>,
    pub protocol_version: Option<String>,
    /// Its `serverInfo` as it sent it.
    pub server: Option<serde_json::Value>,
    pub tools: usize,
    pub prompts: usize,
    pub resources: usize,
    pub resource_templates: usize,
    pub in_flight: usize,
    pub requests: u64,
    pub errors: u64,
    /// Of every request forwarded to it, in milliseconds (`None` before the first).
    pub latency_p50_ms: Option<f64>,
    pub latency_p99_ms: Option<f64>,
    pub idle_seconds: u64,
    /// Tools whose definition changed since it was pinned.
    pub changed_tools: Vec<String>,
    /// `record` or `strict`.
    pub pin: String,
    /// With `credentials = "per-principal"`: how many principals have an instance of their own
    /// running now (never who, never their credentials).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principals: Option<usize>,
    /// When each principal signs in on their own: how many have (never who, never a token).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signed_in: Option<usize>,
}

/// A principal's sign-in link, made by `mcpmux login NAME --principal P`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PrincipalSignIn {
    pub upstream: String,
    pub principal: String,
    /// mcpmux's own sign-in page: the principal opens it and proves who they are first.
    pub url: String,
    pub expires_in_secs: u64,
}

/// A principal's sign-in forgotten by `mcpmux logout NAME --principal P`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PrincipalLoggedOut {
    pub upstream: String,
    pub principal: String,
    /// Whether it had tokens.
    pub revoked: bool,
}

/// A configured host's limits and counts (in `GET /status`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostStatus {
    pub name: String,
    pub profile: Option<String>,
    pub in_flight: usize,
    pub requests: u64,
    pub refused: u64,
    pub max_in_flight: Option<usize>,
    pub max_calls_per_second: Option<f64>,
    pub max_sessions: Option<usize>,
    /// Its sessions open now.
    pub sessions: usize,
}

/// The audit log in `GET /status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditStatus {
    pub enabled: bool,
    pub queued: u64,
    pub dropped: u64,
    /// Records in the store (`None`: the log is off).
    pub records: Option<u64>,
}

/// The config file and its last reload (in `GET /status`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfigStatus {
    pub file: String,
    /// The first 16 hex digits of the SHA-256 of the config text running (replicas that run
    /// different configs show different digests).
    #[serde(default)]
    pub digest: String,
    /// Reloads applied, and refused.
    pub reloads: u64,
    pub rejected: u64,
    /// `None` until the first reload.
    pub last_reload: Option<LastReload>,
}

/// How the last reload went.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LastReload {
    /// RFC 3339, in seconds.
    pub at: String,
    /// `file`, `signal` or `admin`.
    pub trigger: Option<String>,
    pub applied: bool,
    /// Why the file on disk is not running (`None`: it applied).
    pub error: Option<String>,
    pub changes: Option<ReloadChanges>,
}

/// What a reload changed, by upstream name (`POST /reload`, and status's last reload).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReloadChanges {
    pub added: Vec<String>,
    pub removed: Vec<String>,
    pub changed: Vec<String>,
    pub unchanged: Vec<String>,
    /// Host sessions the new config no longer admits.
    pub sessions_ended: usize,
    /// Settings that changed in the file but keep their running value until a restart.
    pub restart_needed: Vec<String>,
    /// What the reload did not finish (requests a retired upstream still had when its drain
    /// ended); not empty means applied, but not cleanly.
    pub incomplete: Vec<String>,
}

/// `POST /reload`, applied.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reloaded {
    pub reloaded: ReloadChanges,
}

/// One open host session (`GET /sessions`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionStatus {
    /// The start of its id.
    pub id: String,
    pub principal: Option<String>,
    pub profile: Option<String>,
    pub client: Option<String>,
    pub client_version: Option<String>,
    pub protocol_version: String,
    pub age_seconds: u64,
    pub in_flight: usize,
    pub streaming: bool,
}

/// `GET /sessions`, youngest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sessions {
    pub sessions: Vec<SessionStatus>,
}

/// `GET /pins`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Pins {
    pub pins: Vec<PinRow>,
}

/// `GET /tools/search?query=WORDS[&profile=NAME][&limit=N]`: the tools of a view (the whole
/// catalog, or a profile's) that answer a search best, best first — the search a search-mode
/// profile's hosts run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSearch {
    pub profile: Option<String>,
    /// The catalog generation searched.
    pub generation: u64,
    /// How many tools the view has.
    pub indexed: usize,
    pub tools: Vec<FoundTool>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FoundTool {
    /// Its exposed name in the view.
    pub name: String,
    pub upstream: String,
    pub title: Option<String>,
    pub description: Option<String>,
    /// Its BM25 score (`None`: its exact name was the query, which ranks it first).
    pub score: Option<f32>,
    /// The query's words it matched.
    pub matched: Vec<String>,
}

/// `POST /pins/{upstream}/{tool}/approve`, done.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Approved {
    pub approved: ApprovedTool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovedTool {
    pub upstream: String,
    pub tool: String,
}

/// `POST /upstreams/{name}/restart`, done.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Restarted {
    pub restarted: String,
}

/// `POST /upstreams/{name}/logout`, done.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoggedOut {
    pub logged_out: String,
}

/// `POST /upstreams/{name}/login`: where the person signs in (`None` with `done`: no one needs
/// to).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoginStarted {
    pub upstream: String,
    pub authorization_url: Option<String>,
    pub done: bool,
}

/// `GET /upstreams/{name}/login`: where a sign-in started through the admin API is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "lowercase")]
pub enum LoginState {
    /// None was started (or it was signed out since).
    None,
    /// Waiting for the person at the authorization URL.
    Pending {
        authorization_url: String,
    },
    Done,
    Failed {
        error: String,
    },
}

/// Every refused or failed admin request: why, for people.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refused {
    pub error: String,
}

/// The body of every admin POST: an empty JSON object (the admin API takes POSTs as JSON only,
/// so a page cannot send one as a form).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Empty {}

#[cfg(test)]
mod tests {
    use serde::de::DeserializeOwned;
    use serde_json::json;

    use super::*;

    /// `value` is `wire` on the wire (the names and shapes the admin API has always answered),
    /// and `wire` reads back as `value`.
    #[track_caller]
    fn round_trip<T>(value: &T, wire: serde_json::Value)
    where
        T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug,
    {
        let written = serde_json::to_value(value).unwrap_or_default();
        assert_eq!(written, wire, "written");
        let read: T = serde_json::from_value(wire).unwrap_or_else(|e| panic!("read: {e}"));
        assert_eq!(&read, value);
    }

    fn changes() -> ReloadChanges {
        ReloadChanges {
            added: vec!["new".into()],
            removed: vec![],
            changed: vec!["far".into()],
            unchanged: vec!["up".into()],
            sessions_ended: 1,
            restart_needed: vec!["server.listen".into()],
            incomplete: vec!["`far` still had 1 request".into()],
        }
    }

    fn changes_wire() -> serde_json::Value {
        json!({
            "added": ["new"], "removed": [], "changed": ["far"], "unchanged": ["up"],
            "sessions_ended": 1, "restart_needed": ["server.listen"],
            "incomplete": ["`far` still had 1 request"],
        })
    }

    fn upstream() -> UpstreamStatus {
        UpstreamStatus {
            name: "up".into(),
            prefix: "up".into(),
            state: "ready".into(),
            transport: "stdio".into(),
            url: None,
            oauth: false,
            last_http_error: None,
            http_session: None,
            last_error: Some("exited".into()),
            restarts: 2,
            pid: Some(42),
            protocol_version: Some("2025-06-18".into()),
            server: Some(json!({"name": "test", "version": "1"})),
            tools: 3,
            prompts: 1,
            resources: 0,
            resource_templates: 0,
            in_flight: 1,
            requests: 10,
            errors: 1,
            latency_p50_ms: Some(0.05),
            latency_p99_ms: None,
            idle_seconds: 7,
            changed_tools: vec!["echo".into()],
            pin: "strict".into(),
            principals: None,
            signed_in: None,
        }
    }

    fn host() -> HostStatus {
        HostStatus {
            name: "ci".into(),
            profile: Some("dev".into()),
            in_flight: 0,
            requests: 3,
            refused: 1,
            max_in_flight: Some(4),
            max_calls_per_second: Some(2.5),
            max_sessions: None,
            sessions: 1,
        }
    }

    #[test]
    fn status_round_trips_with_its_wire_names() {
        let status = Status {
            replica: Some("mcpmux-1".into()),
            version: "0.1.0".into(),
            catalog_generation: 5,
            sessions: 1,
            max_sessions: 64,
            config: ConfigStatus {
                digest: "0123456789abcdef".into(),
                file: "/etc/mcpmux.toml".into(),
                reloads: 1,
                rejected: 0,
                last_reload: Some(LastReload {
                    at: "2026-12-02T00:00:00Z".into(),
                    trigger: Some("admin".into()),
                    applied: true,
                    error: None,
                    changes: Some(changes()),
                }),
            },
            hosts: vec![host()],
            upstreams: vec![upstream()],
            audit: AuditStatus {
                enabled: true,
                queued: 0,
                dropped: 0,
                records: Some(12),
            },
        };
        let wire = json!({
            "version": "0.1.0", "replica": "mcpmux-1", "catalog_generation": 5, "sessions": 1,
            "max_sessions": 64,
            "config": {
                "file": "/etc/mcpmux.toml", "digest": "0123456789abcdef", "reloads": 1, "rejected": 0,
                "last_reload": {
                    "at": "2026-12-02T00:00:00Z", "trigger": "admin", "applied": true,
                    "error": null, "changes": changes_wire(),
                },
            },
            "hosts": [{
                "name": "ci", "profile": "dev", "in_flight": 0, "requests": 3, "refused": 1,
                "max_in_flight": 4, "max_calls_per_second": 2.5, "max_sessions": null,
                "sessions": 1,
            }],
            "upstreams": [{
                "name": "up", "prefix": "up", "state": "ready", "transport": "stdio",
                "url": null, "oauth": false, "last_http_error": null, "http_session": null,
                "last_error": "exited", "restarts": 2, "pid": 42,
                "protocol_version": "2025-06-18", "server": {"name": "test", "version": "1"},
                "tools": 3, "prompts": 1, "resources": 0, "resource_templates": 0,
                "in_flight": 1, "requests": 10, "errors": 1,
                "latency_p50_ms": 0.05, "latency_p99_ms": null, "idle_seconds": 7,
                "changed_tools": ["echo"], "pin": "strict",
            }],
            "audit": {"enabled": true, "queued": 0, "dropped": 0, "records": 12},
        });
        round_trip(&status, wire);
        // Before the first reload there is none to tell.
        let config = ConfigStatus {
            digest: String::new(),
            file: "f".into(),
            reloads: 0,
            rejected: 0,
            last_reload: None,
        };
        let wire =
            json!({"file": "f", "digest": "", "reloads": 0, "rejected": 0, "last_reload": null});
        round_trip(&config, wire);
    }

    #[test]
    fn a_reload_answer_round_trips() {
        round_trip(
            &Reloaded {
                reloaded: changes(),
            },
            json!({ "reloaded": changes_wire() }),
        );
    }

    #[test]
    fn sessions_round_trip() {
        let sessions = Sessions {
            sessions: vec![SessionStatus {
                id: "0123abcd".into(),
                principal: Some("ci".into()),
                profile: None,
                client: Some("claude".into()),
                client_version: None,
                protocol_version: "2025-06-18".into(),
                age_seconds: 30,
                in_flight: 0,
                streaming: true,
            }],
        };
        let wire = json!({"sessions": [{
            "id": "0123abcd", "principal": "ci", "profile": null, "client": "claude",
            "client_version": null, "protocol_version": "2025-06-18", "age_seconds": 30,
            "in_flight": 0, "streaming": true,
        }]});
        round_trip(&sessions, wire);
    }

    #[test]
    fn pins_round_trip() {
        let wire = json!({"pins": [{
            "upstream": "up", "tool": "echo", "digest": "abc", "pinned_us": 1,
            "changed_to": "def", "changed_us": 2,
        }]});
        let pins: Pins = serde_json::from_value(wire.clone()).unwrap_or_else(|e| panic!("{e}"));
        let row = &pins.pins[0];
        assert_eq!(
            (row.tool.as_str(), row.changed_to.as_deref()),
            ("echo", Some("def"))
        );
        assert_eq!(serde_json::to_value(&pins).unwrap_or_default(), wire);
    }

    #[test]
    fn action_answers_round_trip() {
        let approved = Approved {
            approved: ApprovedTool {
                upstream: "up".into(),
                tool: "echo".into(),
            },
        };
        round_trip(
            &approved,
            json!({"approved": {"upstream": "up", "tool": "echo"}}),
        );
        let restarted = Restarted {
            restarted: "up".into(),
        };
        round_trip(&restarted, json!({"restarted": "up"}));
        let logged_out = LoggedOut {
            logged_out: "far".into(),
        };
        round_trip(&logged_out, json!({"logged_out": "far"}));
        let refused = Refused {
            error: "no upstream is named `x`".into(),
        };
        round_trip(&refused, json!({"error": "no upstream is named `x`"}));
        round_trip(&Empty {}, json!({}));
    }

    #[test]
    fn login_answers_round_trip() {
        let started = LoginStarted {
            upstream: "far".into(),
            authorization_url: Some("https://as.example/authorize".into()),
            done: false,
        };
        let wire = json!({
            "upstream": "far", "authorization_url": "https://as.example/authorize", "done": false,
        });
        round_trip(&started, wire);
        let url = "https://as.example/authorize".to_owned();
        let states = [
            (LoginState::None, json!({"state": "none"})),
            (
                LoginState::Pending {
                    authorization_url: url.clone(),
                },
                json!({"state": "pending", "authorization_url": url}),
            ),
            (LoginState::Done, json!({"state": "done"})),
            (
                LoginState::Failed { error: "no".into() },
                json!({"state": "failed", "error": "no"}),
            ),
        ];
        for (state, wire) in states {
            round_trip(&state, wire);
        }
    }

    #[test]
    fn a_newer_daemons_extra_field_is_ignored() {
        let wire = json!({"restarted": "up", "after_ms": 12});
        let read: Restarted = serde_json::from_value(wire).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(read.restarted, "up");
    }
}
