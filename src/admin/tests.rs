//! The admin application in process, its answers read back as the CLI reads them (the
//! `crate::api` types): status, sessions, metrics, login state and refusals, against an empty
//! daemon (no upstreams, the audit log off). One test runs every check: the supervisor actor
//! has a registered name, so two at once would collide.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use sha2::Digest;
use tower_service::Service;

use super::*;
use crate::api::{ConfigStatus, HostStatus, LoginState, Refused, SessionStatus, Sessions};
use crate::config::CatalogConfig;

const TOKEN: &str = "the-admin-token";

/// A reloader that is never asked to reload.
struct Fixed;

impl Reload for Fixed {
    fn reload(
        &self,
    ) -> futures_util::future::BoxFuture<'_, Result<ReloadChanges, crate::config::ReloadError>>
    {
        Box::pin(async {
            Err(crate::config::ReloadError::Invalid(
                "the file is not valid".to_owned(),
            ))
        })
    }
    fn status(&self) -> ConfigStatus {
        ConfigStatus {
            digest: String::new(),
            file: "/etc/mcpmux.toml".into(),
            reloads: 2,
            rejected: 1,
            last_reload: None,
        }
    }
    fn secret_keys(&self) -> crate::config::SecretKeys {
        crate::config::SecretKeys::defaults().unwrap()
    }
}

fn session(id: &str, age_seconds: u64) -> SessionStatus {
    SessionStatus {
        id: id.into(),
        principal: None,
        profile: None,
        client: Some("claude".into()),
        client_version: None,
        protocol_version: "2025-06-18".into(),
        age_seconds,
        in_flight: 0,
        streaming: false,
    }
}

async fn admin() -> (Router, SupervisorHandle) {
    let router = RouterHandle::new(&CatalogConfig::default(), &[], None);
    let audit = AuditHandle::disabled();
    let (_set, upstreams) = tokio::sync::watch::channel(crate::upstream::Upstreams::from([]));
    let supervisor = SupervisorHandle::start(upstreams, audit.clone())
        .await
        .unwrap();
    let reloader: Arc<dyn Reload> = Arc::new(Fixed);
    let metrics = Arc::new(Readings {
        router: router.clone(),
        audit: audit.clone(),
        sessions: Box::new(|| 2),
        hosts: Box::new(|| {
            vec![HostStatus {
                name: "ci".into(),
                profile: None,
                in_flight: 0,
                requests: 5,
                refused: 0,
                max_in_flight: Some(4),
                max_calls_per_second: None,
                max_sessions: None,
                sessions: 2,
            }]
        }),
        reloads: Box::new(|| (2, 1)),
    });
    let router_for_ready = router.clone();
    let admin = app(Arc::new(AdminState {
        router,
        supervisor: supervisor.clone(),
        audit,
        metrics,
        max_sessions: Box::new(|| 64),
        sessions: Box::new(|| vec![session("old", 90), session("new", 3)]),
        logins: std::sync::Mutex::default(),
        reloader,
        principals: Arc::new(NoSignIns),
        guard: AdminGuard {
            token: AdminToken {
                digest: sha2::Sha256::digest(TOKEN.as_bytes()).into(),
                file: "/run/mcpmux/admin.token".into(),
            },
            port: 7333,
            loopback: true,
        },
        console: super::ConsoleState::default(),
        readiness: Arc::new(crate::readiness::Readiness::new(router_for_ready)),
        replica: None,
        fleet: None,
    }));
    (admin, supervisor)
}

/// `method path` with the token (`None`: without), as the CLI sends it; the status, the
/// content type and the body.
async fn ask(app: &mut Router, method: &str, path: &str, token: Option<&str>) -> Answer {
    let mut request = Request::builder()
        .method(method)
        .uri(path)
        .header(header::HOST, "127.0.0.1:7333");
    if let Some(token) = token {
        request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    if method == "POST" {
        request = request.header(header::CONTENT_TYPE, "application/json");
    }
    let response = app
        .call(request.body(Body::from("{}")).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let content_type = (response.headers().get(header::CONTENT_TYPE))
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let body = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    Answer {
        status,
        content_type,
        body: String::from_utf8(body.to_vec()).unwrap(),
    }
}

struct Answer {
    status: StatusCode,
    content_type: String,
    body: String,
}

impl Answer {
    fn read<T: serde::de::DeserializeOwned>(&self) -> T {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

async fn status_is_the_typed_answer_of_what_the_daemon_keeps(app: &mut Router) {
    let answer = ask(app, "GET", "/status", Some(TOKEN)).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    let status: Status = answer.read();
    assert_eq!(status.version, env!("CARGO_PKG_VERSION"));
    assert_eq!((status.sessions, status.max_sessions), (2, 64));
    assert_eq!(status.config, Fixed.status());
    assert_eq!(status.hosts[0].requests, 5);
    assert!(status.upstreams.is_empty());
    assert!(!status.audit.enabled && status.audit.records.is_none());
}

async fn sessions_come_youngest_first(app: &mut Router) {
    let sessions: Sessions = ask(app, "GET", "/sessions", Some(TOKEN)).await.read();
    let ids: Vec<&str> = sessions.sessions.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, ["new", "old"]);
}

async fn metrics_are_the_catalog_in_prometheus_text(app: &mut Router) {
    let answer = ask(app, "GET", "/metrics", Some(TOKEN)).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(
        answer.content_type,
        "text/plain; version=0.0.4; charset=utf-8"
    );
    for metric in metrics::catalog::CATALOG {
        let help = format!("# HELP {} {}\n", metric.prometheus, metric.help);
        assert!(answer.body.contains(&help), "{}", answer.body);
    }
    assert!(
        answer
            .body
            .contains("mcpmux_host_requests_total{host=\"ci\"} 5\n")
    );
    assert!(
        answer
            .body
            .contains("mcpmux_config_reloads_total{result=\"refused\"} 1\n")
    );
}

async fn refusals_are_one_shape_saying_why(app: &mut Router) {
    let answer = ask(app, "GET", "/status", None).await;
    assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
    let refused: Refused = answer.read();
    assert!(
        refused.error.contains("/run/mcpmux/admin.token"),
        "{}",
        refused.error
    );

    let answer = ask(app, "POST", "/upstreams/nope/restart", Some(TOKEN)).await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND);
    assert!(answer.read::<Refused>().error.contains("`nope`"));

    let answer = ask(app, "POST", "/reload", Some(TOKEN)).await;
    assert_eq!(answer.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(answer.read::<Refused>().error, "the file is not valid");

    let answer = ask(app, "POST", "/upstreams/nope/login", Some(TOKEN)).await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND);
    assert!(answer.read::<Refused>().error.contains("`nope`"));
}

async fn a_login_never_started_is_none(app: &mut Router) {
    let answer = ask(app, "GET", "/upstreams/far/login", Some(TOKEN)).await;
    assert_eq!(answer.read::<LoginState>(), LoginState::None);
}

#[tokio::test]
async fn the_admin_api_answers_in_its_types() {
    let (mut app, supervisor) = admin().await;
    status_is_the_typed_answer_of_what_the_daemon_keeps(&mut app).await;
    sessions_come_youngest_first(&mut app).await;
    metrics_are_the_catalog_in_prometheus_text(&mut app).await;
    refusals_are_one_shape_saying_why(&mut app).await;
    a_login_never_started_is_none(&mut app).await;
    supervisor.shutdown().await;
}

/// No upstream signs principals in.
struct NoSignIns;

impl crate::admin::principals::PrincipalSignIns for NoSignIns {
    fn link<'a>(
        &'a self,
        _: &'a crate::upstream::UpstreamHandle,
        _: crate::admin::principals::Named<'a>,
    ) -> futures_util::future::BoxFuture<'a, Result<(String, u64), String>> {
        Box::pin(async { Err("none".into()) })
    }

    fn revoke<'a>(
        &'a self,
        _: &'a str,
        _: crate::admin::principals::Named<'a>,
    ) -> futures_util::future::BoxFuture<'a, Result<bool, String>> {
        Box::pin(async { Ok(false) })
    }

    fn signed_in(&self, _: &str) -> usize {
        0
    }
}
