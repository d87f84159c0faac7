//! What a view knows of the MCP Apps in it (`mcp::apps`): which tools only their page may call
//! (a host that renders no apps is never shown them, and no model finds them), and how a page's
//! own requests route. A page talks to the host through its app bridge with the names its own
//! server gave — unprefixed — so a tool or resource that is no exposed name is routed when it is
//! the original name of exactly one item, in this view, of the upstreams that serve apps; when
//! several upstreams could own it, it is refused naming them all (never guessed).

use std::collections::{HashMap, HashSet};

use super::{Entry, Shown, Snapshot};
use crate::mcp::ListKind;

/// What a view knows of its apps, built with it.
#[derive(Debug, Default)]
pub(super) struct Apps {
    /// The positions in the tools listing of the tools a model may see (`None`: every tool;
    /// no tool of the view is its page's only).
    for_models: Option<Vec<usize>>,
    /// Original name → positions in the tools listing, of the upstreams that serve apps.
    calls: HashMap<Box<str>, Vec<usize>>,
    /// Original URI → positions in the resources listing, of the upstreams that serve apps.
    pages: HashMap<Box<str>, Vec<usize>>,
}

/// How a page's own request for a name that is no exposed one routes.
#[derive(Debug)]
pub enum AppRoute<'a> {
    /// It names nothing of an app's upstream in this view.
    Unknown,
    /// Exactly one item has that original name.
    One(&'a Entry),
    /// Several upstreams' items have it: their exposed names, sorted.
    Several(Vec<&'a str>),
}

impl Apps {
    /// What `tools` and `resources` (a view's listings) hold of apps.
    pub(super) fn of(tools: &[Entry], resources: &[Entry]) -> Self {
        let serving: HashSet<&str> = (tools.iter())
            .filter(|e| e.app.is_some())
            .map(|e| e.upstream.name())
            .collect();
        if serving.is_empty() {
            return Self::default();
        }
        let by_original = |entries: &[Entry]| {
            let mut found: HashMap<Box<str>, Vec<usize>> = HashMap::new();
            for (i, entry) in entries.iter().enumerate() {
                if serving.contains(entry.upstream.name()) {
                    found.entry(entry.original.clone()).or_default().push(i);
                }
            }
            found
        };
        let app_only = |e: &Entry| e.app.as_ref().is_some_and(|a| a.app_only);
        Self {
            for_models: (tools.iter().any(app_only)).then(|| {
                (tools.iter().enumerate())
                    .filter(|(_, e)| !app_only(e))
                    .map(|(i, _)| i)
                    .collect()
            }),
            calls: by_original(tools),
            pages: by_original(resources),
        }
    }
}

impl Snapshot {
    /// The tools a host that renders no apps is shown: all but those only their page may call.
    pub(super) fn tools_for_models(&self) -> Option<Shown<'_>> {
        let picked = self.apps.for_models.as_deref()?;
        Some(Shown::Picked(self.list(ListKind::Tools), picked))
    }

    /// Whether some tool of this view is only its page's to call.
    pub fn has_app_only_tools(&self) -> bool {
        self.apps.for_models.is_some()
    }

    /// How many tools of this view only their page may call.
    pub fn app_only_tools(&self) -> usize {
        let shown = self.apps.for_models.as_ref().map_or(0, Vec::len);
        self.apps
            .for_models
            .as_ref()
            .map_or(0, |_| self.list(ListKind::Tools).len() - shown)
    }

    /// How an app's page's request for `name` (a tool, or for `kind` Resources a URI) routes,
    /// when it is no exposed name of this view.
    pub fn route_app(&self, kind: ListKind, name: &str) -> AppRoute<'_> {
        let found = match kind {
            ListKind::Tools => self.apps.calls.get(name),
            ListKind::Resources => self.apps.pages.get(name),
            _ => None,
        };
        let entries = self.list(kind);
        match found.map(Vec::as_slice) {
            None | Some([]) => AppRoute::Unknown,
            Some([one]) => entries.get(*one).map_or(AppRoute::Unknown, AppRoute::One),
            Some(several) => {
                let mut names: Vec<&str> = (several.iter())
                    .filter_map(|i| entries.get(*i))
                    .map(|e| &*e.exposed)
                    .collect();
                names.sort_unstable();
                AppRoute::Several(names)
            }
        }
    }
}
