//! The request methods mcpmux answers and forwards, in one place: each one's wire name, the
//! protocol revisions it exists in, the params member that names what it acts on (which a
//! 2026-07-28 request mirrors in `Mcp-Name`), and the listing it pages. The parse of a host
//! request, the metrics, the OTLP spans, the envelope and the HTTP edge all ask this type; none
//! keeps a table of method names of its own.

use super::ListKind;
use super::version::Version;

/// A request method of either era (and of the extensions mcpmux routes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Method {
    Initialize,
    Ping,
    Discover,
    Listen,
    ToolsList,
    PromptsList,
    ResourcesList,
    ResourceTemplatesList,
    SkillsList,
    ToolsCall,
    PromptsGet,
    ResourcesRead,
    ResourcesSubscribe,
    ResourcesUnsubscribe,
    SetLogLevel,
    Complete,
    TasksGet,
    TasksResult,
    TasksCancel,
    TasksList,
    SkillsGet,
    ReadDirectory,
}

impl Method {
    /// Every method, the most frequent first (what [`Self::parse`] compares a name with in turn).
    pub const ALL: [Method; 22] = [
        Self::ToolsCall,
        Self::ToolsList,
        Self::ResourcesRead,
        Self::PromptsGet,
        Self::ResourcesList,
        Self::PromptsList,
        Self::ResourceTemplatesList,
        Self::Complete,
        Self::Ping,
        Self::Initialize,
        Self::Discover,
        Self::Listen,
        Self::SkillsList,
        Self::SkillsGet,
        Self::ReadDirectory,
        Self::ResourcesSubscribe,
        Self::ResourcesUnsubscribe,
        Self::SetLogLevel,
        Self::TasksGet,
        Self::TasksResult,
        Self::TasksCancel,
        Self::TasksList,
    ];

    /// Its name on the wire.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Initialize => "initialize",
            Self::Ping => "ping",
            Self::Discover => "server/discover",
            Self::Listen => "subscriptions/listen",
            Self::ToolsList => "tools/list",
            Self::PromptsList => "prompts/list",
            Self::ResourcesList => "resources/list",
            Self::ResourceTemplatesList => "resources/templates/list",
            Self::SkillsList => "skills/list",
            Self::ToolsCall => "tools/call",
            Self::PromptsGet => "prompts/get",
            Self::ResourcesRead => "resources/read",
            Self::ResourcesSubscribe => "resources/subscribe",
            Self::ResourcesUnsubscribe => "resources/unsubscribe",
            Self::SetLogLevel => "logging/setLevel",
            Self::Complete => "completion/complete",
            Self::TasksGet => "tasks/get",
            Self::TasksResult => "tasks/result",
            Self::TasksCancel => "tasks/cancel",
            Self::TasksList => "tasks/list",
            Self::SkillsGet => "skills/get",
            Self::ReadDirectory => "resources/directory/read",
        }
    }

    /// The method named `name`, if mcpmux knows it.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.as_str() == name)
    }

    /// Whether it is part of `version`: 2026-07-28 has `server/discover` and
    /// `subscriptions/listen`, and drops the handshake, `ping`, `logging/setLevel`,
    /// `resources/(un)subscribe` (a listen stream replaces them) and the core tasks (an extension
    /// there, which mcpmux does not route).
    pub fn exists_in(self, version: Version) -> bool {
        let handshake_only = matches!(
            self,
            Self::Initialize
                | Self::Ping
                | Self::SetLogLevel
                | Self::ResourcesSubscribe
                | Self::ResourcesUnsubscribe
                | Self::TasksGet
                | Self::TasksResult
                | Self::TasksCancel
                | Self::TasksList
        );
        match version.is_modern() {
            true => !handshake_only,
            false => !matches!(self, Self::Discover | Self::Listen),
        }
    }

    /// The params member that names what the request acts on, which a 2026-07-28 request
    /// mirrors in its `Mcp-Name` header: `name` of a call or prompt, `uri` of a read.
    pub fn mirrored_key(self) -> Option<&'static str> {
        match self {
            Self::ToolsCall | Self::PromptsGet => Some("name"),
            Self::ResourcesRead => Some("uri"),
            _ => None,
        }
    }

    /// The listing it pages, for a `*/list` method.
    pub fn listing(self) -> Option<ListKind> {
        match self {
            Self::ToolsList => Some(ListKind::Tools),
            Self::PromptsList => Some(ListKind::Prompts),
            Self::ResourcesList => Some(ListKind::Resources),
            Self::ResourceTemplatesList => Some(ListKind::ResourceTemplates),
            Self::SkillsList => Some(ListKind::Skills),
            _ => None,
        }
    }
}

impl std::fmt::Display for Method {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_method_parses_from_its_own_name_and_lists_page_their_kind() {
        for method in Method::ALL {
            assert_eq!(Method::parse(method.as_str()), Some(method));
            if let Some(kind) = method.listing() {
                assert_eq!(kind.method(), method.as_str());
            }
        }
        for kind in ListKind::ALL {
            assert_eq!(
                Method::parse(kind.method()).and_then(Method::listing),
                Some(kind)
            );
        }
        assert_eq!(Method::parse("tools/Call"), None);
        assert_eq!(Method::parse(""), None);
        assert!(Method::Discover.exists_in(Version::MODERN));
        assert!(!Method::Initialize.exists_in(Version::MODERN));
        assert!(!Method::Listen.exists_in(Version::LATEST));
    }
}
