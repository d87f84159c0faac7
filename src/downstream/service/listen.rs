//! `subscriptions/listen` (2026-07-28): a stateless host's long-lived stream of the change
//! notifications it opted in to. The acknowledgement comes first, naming what mcpmux agreed to
//! (the list changes of the kinds the host's view offers); then one `list_changed` per listing
//! the host sees that changed, per burst, from mcpmux's own catalog — every message tagged with
//! the subscription's id (the listen request's). When the daemon stops, the stream ends with the
//! listen request's result. Request-scoped notifications never go here.

use std::sync::Arc;

use futures_util::Stream;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::HostService;
use crate::config::Profile;
use crate::jsonrpc::{notification_line, response_line, to_raw};
use crate::mcp::ListKind;
use crate::mcp::envelope::SUBSCRIPTION_ID;

/// What a listen request opted in to.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Filter {
    pub tools: bool,
    pub prompts: bool,
    pub resources: bool,
}

impl Filter {
    fn wants(self, kind: ListKind) -> bool {
        match kind {
            ListKind::Tools => self.tools,
            ListKind::Prompts => self.prompts,
            ListKind::Resources | ListKind::ResourceTemplates => self.resources,
        }
    }
}

impl HostService {
    /// The messages of a listen stream for a host that sees `profile`: the acknowledgement,
    /// then its change notifications, for as long as the service runs.
    pub(super) fn listen_stream(
        self: &Arc<Self>,
        id: &RawValue,
        profile: Option<Arc<Profile>>,
        asked: Filter,
    ) -> impl Stream<Item = String> + Send + 'static {
        let view = self.router.view(profile.as_deref());
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
        let ack = json!({ "_meta": meta, "notifications": notifications });
        let ack = notification_line(
            "notifications/subscriptions/acknowledged",
            Some(to_raw(&ack).get()),
        );
        let tagged = to_raw(&json!({ "_meta": meta }));
        let result = json!({ "resultType": "complete", "_meta": meta });
        let last = response_line(id, &to_raw(&result));
        let state = Watching {
            ack: Some(ack),
            last: Some(last),
            stopping: self.stopping.clone(),
            service: Arc::downgrade(self),
            changes: self.router.watch(),
            seen: self.router.views(),
            queued: Vec::new(),
            profile,
            tagged,
            agreed,
        };
        futures_util::stream::unfold(state, |mut state| async move {
            let line = state.next().await?;
            Some((line, state))
        })
    }
}

/// A listen stream between messages.
struct Watching {
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
            tokio::select! {
                changed = self.changes.changed() => changed.ok()?,
                () = self.stopping.cancelled() => return self.last.take(),
            }
            self.changes.borrow_and_update();
            let service = self.service.upgrade()?;
            let current = service.router.views();
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
