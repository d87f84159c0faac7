//! `subscriptions/listen` (2026-07-28): a stateless host's long-lived stream of the change
//! notifications it opted in to. The acknowledgement comes first, naming what mcpmux agreed to
//! (the list changes of the kinds the host's view offers, the resources it can subscribe to);
//! then one `list_changed` per listing the host sees that changed, per burst, from mcpmux's own
//! catalog, and each `notifications/resources/updated` of a subscribed resource — every message
//! tagged with the subscription's id (the listen request's). When the daemon stops, the stream
//! ends with the listen request's result. Request-scoped notifications never go here.
//!
//! Resource subscriptions ride on a host session kept for the stream's lifetime (counted among
//! `server.max_sessions`): the upstreams are subscribed as for a handshake session's
//! `resources/subscribe`, counted across sessions, and unsubscribed when the stream ends.

use std::sync::Arc;

use futures_util::Stream;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::outcome::Route;
use super::{HostService, RequestCx, Who};
use crate::config::Profile;
use crate::downstream::Access;
use crate::downstream::holdings::{Held, Holder};
use crate::downstream::session::{HostInfo, StreamGuard};
use crate::jsonrpc::{Members, RpcError, codes, notification_line, response_line, to_raw};
use crate::mcp::ListKind;
use crate::mcp::envelope::SUBSCRIPTION_ID;

/// What a listen request opted in to.
#[derive(Debug, Default, Clone)]
pub(super) struct Filter {
    pub tools: bool,
    pub prompts: bool,
    pub resources: bool,
    /// Exposed resource URIs whose updates it wants.
    pub updates: Vec<String>,
}

impl Filter {
    fn wants(&self, kind: ListKind) -> bool {
        match kind {
            ListKind::Tools => self.tools,
            ListKind::Prompts => self.prompts,
            // A server says its skills changed as its resources changing.
            ListKind::Resources | ListKind::ResourceTemplates | ListKind::Skills => self.resources,
        }
    }
}

impl HostService {
    /// The messages of a listen stream for a host that sees `profile`: the acknowledgement,
    /// then its change notifications, for as long as the service runs.
    pub(super) async fn listen_stream(
        self: &Arc<Self>,
        id: &RawValue,
        (host, access): (HostInfo, Access),
        asked: Filter,
    ) -> Result<impl Stream<Item = String> + Send + 'static, RpcError> {
        let held = self.hold_listen_stream(&access)?;
        let profile = access.profile.clone();
        let updates = match asked.updates.is_empty() {
            true => None,
            false => Some(
                self.subscribe_for_stream(id, (host, access), &asked.updates)
                    .await?,
            ),
        };
        let view = self.upstreams.router.view(profile.as_deref());
        let offered = |kind: ListKind| {
            view.offering(&format!("/{}", kind.capability()))
                .next()
                .is_some()
        };
        let agreed = Filter {
            tools: asked.tools && offered(ListKind::Tools),
            prompts: asked.prompts && offered(ListKind::Prompts),
            resources: asked.resources
                && (offered(ListKind::Resources) || offered(ListKind::ResourceTemplates)),
            updates: updates.as_ref().map(|u| u.uris.clone()).unwrap_or_default(),
        };
        drop(view);
        let meta = json!({ SUBSCRIPTION_ID: serde_json::from_str::<Value>(id.get()).unwrap_or(Value::Null) });
        let mut notifications = serde_json::Map::new();
        for (key, on) in [
            ("toolsListChanged", agreed.tools),
            ("promptsListChanged", agreed.prompts),
            ("resourcesListChanged", agreed.resources),
        ] {
            if on {
                notifications.insert(key.to_owned(), Value::Bool(true));
            }
        }
        if !agreed.updates.is_empty() {
            notifications.insert("resourceSubscriptions".to_owned(), json!(agreed.updates));
        }
        let ack = json!({ "_meta": meta, "notifications": notifications });
        let ack = notification_line(
            "notifications/subscriptions/acknowledged",
            Some(to_raw(&ack).get()),
        );
        let tagged = to_raw(&json!({ "_meta": meta }));
        let result = json!({ "resultType": "complete", "_meta": meta });
        let last = response_line(id, &to_raw(&result));
        let state = Watching {
            _held: held,
            ack: Some(ack),
            last: Some(last),
            stopping: self.stopping.clone(),
            service: Arc::downgrade(self),
            changes: self.upstreams.router.watch(),
            seen: self.upstreams.router.views(),
            queued: Vec::new(),
            profile,
            tagged,
            agreed,
            updates,
        };
        Ok(futures_util::stream::unfold(
            state,
            |mut state| async move {
                let line = state.next().await?;
                Some((line, state))
            },
        ))
    }

    /// One of the listen streams the caller of `access` may hold open: at most
    /// `server.max_listen_streams_per_caller`, and no more than a host's `max_sessions`.
    fn hold_listen_stream(&self, access: &Access) -> Result<Held, RpcError> {
        let configured = self.upstreams.limits.load().max_listen_streams_per_caller;
        let own = (access.principal.as_ref()).and_then(|p| p.max_sessions());
        let limit = own.map_or(configured, |own| own.min(configured));
        let holder = Holder::of(access);
        self.listening.take(&holder, limit).ok_or_else(|| {
            let key = match own {
                Some(own) if own < configured => "its hosts.NAME.max_sessions",
                _ => "server.max_listen_streams_per_caller",
            };
            RpcError::new(
                codes::BUSY,
                format!(
                    "{holder} already hold {limit} subscriptions/listen streams open ({key}); close one first"
                ),
            )
        })
    }

    /// A session for a listen stream's resource subscriptions, subscribed to each of `uris` the
    /// host's view has (the others are left out of what is agreed).
    async fn subscribe_for_stream(
        self: &Arc<Self>,
        id: &RawValue,
        (host, access): (HostInfo, Access),
        uris: &[String],
    ) -> Result<Updates, RpcError> {
        let max_sessions = self.upstreams.limits.load().max_sessions;
        let session = (self.upstreams.delivery.sessions)
            .open(None, host, access, max_sessions)
            .map_err(|refused| RpcError::new(codes::TOO_MANY_SESSIONS, refused.to_string()))?;
        let guard = session.attach_stream();
        let mut agreed = Vec::new();
        let who = Who::Session(Arc::clone(&session));
        let request = RequestCx::new(who, id.to_owned(), None, None, None);
        for uri in uris {
            let mut route = Route::default();
            let subscribed = (uri.clone(), true);
            if super::subscriptions::subscribe(&request, subscribed, &self.upstreams, &mut route)
                .await
                .is_ok()
            {
                agreed.push(uri.clone());
            }
        }
        Ok(Updates {
            guard,
            uris: agreed,
            session: session.id.clone(),
            service: Arc::downgrade(self),
        })
    }
}

/// A listen stream's resource subscriptions: the session that holds them, whose messages the
/// stream reads; the session ends (and the upstreams are unsubscribed) with the stream.
struct Updates {
    guard: Option<StreamGuard>,
    uris: Vec<String>,
    session: String,
    service: std::sync::Weak<HostService>,
}

impl Drop for Updates {
    fn drop(&mut self) {
        self.guard = None;
        let (service, session) = (self.service.upgrade(), self.session.clone());
        // Without a runtime (the daemon is gone), there is nothing left to unsubscribe.
        let runtime = tokio::runtime::Handle::try_current();
        if let (Some(service), Ok(runtime)) = (service, runtime) {
            runtime.spawn(async move {
                service.close_session(&session).await;
            });
        }
    }
}

/// A listen stream between messages.
struct Watching {
    /// Its place among the listen streams its caller holds open.
    _held: Held,
    /// The acknowledgement, until it is sent.
    ack: Option<String>,
    /// The listen request's result, sent when the daemon stops.
    last: Option<String>,
    stopping: tokio_util::sync::CancellationToken,
    service: std::sync::Weak<HostService>,
    changes: tokio::sync::watch::Receiver<u64>,
    /// The views as of the last change the stream told about.
    seen: Arc<crate::router::Views>,
    /// Notifications of the last change not yet sent.
    queued: Vec<String>,
    profile: Option<Arc<Profile>>,
    /// `{"_meta":{"io.modelcontextprotocol/subscriptionId":…}}`, the params of each notification.
    tagged: Box<RawValue>,
    agreed: Filter,
    /// Its resource subscriptions, if it asked for any.
    updates: Option<Updates>,
}

impl Watching {
    /// The next message; `None` once the service has stopped.
    async fn next(&mut self) -> Option<String> {
        if let Some(ack) = self.ack.take() {
            return Some(ack);
        }
        loop {
            if let Some(line) = self.queued.pop() {
                return Some(line);
            }
            let update = async {
                match self.updates.as_mut().and_then(|u| u.guard.as_mut()) {
                    Some(guard) => guard.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                changed = self.changes.changed() => changed.ok()?,
                () = self.stopping.cancelled() => return self.last.take(),
                update = update => {
                    match update.and_then(|line| tag_update(&line, &self.tagged)) {
                        Some(line) => return Some(line),
                        None => continue,
                    }
                }
            }
            self.changes.borrow_and_update();
            let service = self.service.upgrade()?;
            let current = service.upstreams.router.views();
            let profile = self.profile.as_deref();
            let (before, now) = (self.seen.of(profile), current.of(profile));
            let mut methods: Vec<&str> = ListKind::ALL
                .into_iter()
                .filter(|k| self.agreed.wants(*k) && before.fingerprint(*k) != now.fingerprint(*k))
                .map(ListKind::changed_notification)
                .collect();
            methods.dedup();
            self.queued = methods
                .into_iter()
                .map(|m| notification_line(m, Some(self.tagged.get())))
                .collect();
            self.seen = current;
        }
    }
}

/// A resource update from the stream's session, tagged with the subscription's id; anything
/// else the session is sent (its list changes: the stream sends its own) is left out.
fn tag_update(line: &str, tagged: &RawValue) -> Option<String> {
    let raw = crate::jsonrpc::raw(line.to_owned());
    let message = Members::of(&raw)?;
    if message.string("method").as_deref() != Some("notifications/resources/updated") {
        return None;
    }
    let mut params = Members::of(message.get("params")?)?;
    let tag = Members::of(tagged)?;
    params.insert("_meta", tag.get("_meta")?);
    Some(notification_line(
        "notifications/resources/updated",
        Some(&params.to_json()),
    ))
}
