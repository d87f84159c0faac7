//! What mcpmux knows about MCP itself: protocol versions, the request methods, the listable kinds, the namespacing codec,
//! the aggregate-listing cursors, URI-template matching, canonical URIs, and the MCP Apps
//! extension's fields (`apps`). No I/O here.

pub mod apps;
pub mod cursor;
pub mod envelope;
pub mod method;
pub mod names;
pub mod param_headers;
pub mod skills;
pub mod template;
pub mod uri;
pub mod version;

/// HTTP header naming a request's protocol version (Streamable HTTP, 2025-06-18 on).
pub const VERSION_HEADER: &str = "mcp-protocol-version";
/// HTTP header carrying a handshake-era session's id (Streamable HTTP).
pub const SESSION_HEADER: &str = "mcp-session-id";

/// RFC 5424 severities, as MCP's `logging/setLevel` names them, least severe first.
pub const LOG_LEVELS: [&str; 8] = [
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

/// The rank of a log level name (`None` for an unknown name).
pub fn log_rank(level: &str) -> Option<usize> {
    LOG_LEVELS.iter().position(|l| *l == level)
}

/// The aggregate listings, with the wire names that belong to each: the four of the core
/// protocol, and the skills of the Skills extension (SEP-2640, `skills`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ListKind {
    Tools,
    Prompts,
    Resources,
    ResourceTemplates,
    Skills,
}

impl ListKind {
    pub const ALL: [ListKind; 5] = [
        Self::Tools,
        Self::Prompts,
        Self::Resources,
        Self::ResourceTemplates,
        Self::Skills,
    ];

    /// The `*/list` method.
    pub fn list_method(self) -> method::Method {
        match self {
            Self::Tools => method::Method::ToolsList,
            Self::Prompts => method::Method::PromptsList,
            Self::Resources => method::Method::ResourcesList,
            Self::ResourceTemplates => method::Method::ResourceTemplatesList,
            Self::Skills => method::Method::SkillsList,
        }
    }

    /// The `*/list` method's name.
    pub fn method(self) -> &'static str {
        self.list_method().as_str()
    }

    /// The array field of the list result.
    pub fn field(self) -> &'static str {
        match self {
            Self::Tools => "tools",
            Self::Prompts => "prompts",
            Self::Resources => "resources",
            Self::ResourceTemplates => "resourceTemplates",
            Self::Skills => "skills",
        }
    }

    /// The field of one item that mcpmux namespaces.
    pub fn key(self) -> &'static str {
        match self {
            Self::Tools | Self::Prompts => "name",
            Self::Resources | Self::Skills => "uri",
            Self::ResourceTemplates => "uriTemplate",
        }
    }

    /// Where in a server's capabilities it says it offers this listing: a capability, or (the
    /// skills) an extension's key in `extensions`.
    pub fn capability(self) -> &'static str {
        match self {
            Self::Tools => "tools",
            Self::Prompts => "prompts",
            Self::Resources | Self::ResourceTemplates => "resources",
            Self::Skills => skills::EXTENSION,
        }
    }

    /// Whether the capability is an extension's (under `extensions`).
    pub fn is_extension(self) -> bool {
        self == Self::Skills
    }

    /// The notification that tells a client this listing changed. The skills extension has none
    /// of its own: a server says its skills changed as its resources changing (the SDK's
    /// `SkillCatalog` does), and a host lists both again.
    pub fn changed_notification(self) -> &'static str {
        match self {
            Self::Tools => "notifications/tools/list_changed",
            Self::Prompts => "notifications/prompts/list_changed",
            Self::Resources | Self::ResourceTemplates | Self::Skills => {
                "notifications/resources/list_changed"
            }
        }
    }

    /// A one-byte tag used inside cursors.
    pub fn tag(self) -> u8 {
        match self {
            Self::Tools => b't',
            Self::Prompts => b'p',
            Self::Resources => b'r',
            Self::ResourceTemplates => b'T',
            Self::Skills => b's',
        }
    }

    /// Whether items are namespaced as URIs (`{prefix}+{uri}`) rather than names (`{prefix}__{name}`).
    pub fn is_uri(self) -> bool {
        matches!(
            self,
            Self::Resources | Self::ResourceTemplates | Self::Skills
        )
    }
}

/// The client capability a request of a server needs of its client — `sampling`, `elicitation`
/// or `roots` — if it is one of those.
pub fn capability_for(method: &str) -> Option<&'static str> {
    match method {
        "sampling/createMessage" => Some("sampling"),
        "elicitation/create" => Some("elicitation"),
        "roots/list" => Some("roots"),
        _ => None,
    }
}

/// Whether an `elicitation/create` with `params` asks for URL mode (2025-11-25).
pub fn is_url_elicitation(params: Option<&serde_json::value::RawValue>) -> bool {
    params.is_some_and(|p| p.get().contains(r#""mode":"url""#))
}

/// The params of `notifications/cancelled` for request `id` (raw JSON), with an optional
/// `reason` (raw JSON too).
pub fn cancelled_params(id: &str, reason: Option<&str>) -> String {
    match reason {
        Some(reason) => format!(r#"{{"requestId":{id},"reason":{reason}}}"#),
        None => format!(r#"{{"requestId":{id}}}"#),
    }
}
