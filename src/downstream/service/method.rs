//! A host request's method and params, parsed once into what its handler needs: the handler gets
//! the name, URI, cursor or task id as a value and the other members as they came (only what
//! mcpmux owns is rewritten before they go upstream). A request of the next protocol revision is
//! one more variant here and one more handler.

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::jsonrpc::{Members, RpcError, codes};
use crate::mcp::ListKind;
use crate::mcp::method::Method;
use crate::mcp::version::Version;

use super::listen::Filter;

/// A request's params as its handler is given them: as sent, and their members when the edge
/// already read them (a stateless request's, read in the one pass over its envelope, `_meta`
/// left out: it held nothing but the envelope).
#[derive(Debug, Default)]
pub struct Params<'a> {
    /// As sent: JSON text (the edge may have read it in one pass with its message, which gives
    /// no `RawValue`).
    pub raw: Option<&'a str>,
    pub read: Option<Members<'a>>,
}

impl<'a> From<Option<&'a RawValue>> for Params<'a> {
    fn from(raw: Option<&'a RawValue>) -> Self {
        Self {
            raw: raw.map(RawValue::get),
            read: None,
        }
    }
}

impl<'a> Params<'a> {
    /// The members: as read, or parsed now (`None` without params).
    fn members(self) -> Option<Result<Members<'a>, RpcError>> {
        match self.read {
            Some(members) => Some(Ok(members)),
            None => self.raw.map(Members::parse_text),
        }
    }
}

/// What a host asked for.
#[derive(Debug)]
pub(super) enum HostMethod<'a> {
    Ping,
    /// `server/discover` (2026-07-28).
    Discover,
    /// `subscriptions/listen` (2026-07-28): served as a stream, not answered.
    Listen {
        filter: Filter,
    },
    /// `tools/list`, `prompts/list`, `resources/list`, `resources/templates/list`, `skills/list`.
    List {
        kind: ListKind,
        cursor: Option<String>,
    },
    /// `tools/call` (`kind` Tools) and `prompts/get` (Prompts): routed by the exposed `name`.
    CallNamed {
        kind: ListKind,
        name: String,
        members: Members<'a>,
    },
    /// `resources/read`: routed by the exposed `uri`.
    ReadResource {
        uri: String,
        members: Members<'a>,
    },
    /// `skills/get` (`directory` false) and `resources/directory/read` (true), of the Skills
    /// extension: routed by the exposed `uri`.
    ReadSkill {
        uri: String,
        directory: bool,
        members: Members<'a>,
    },
    /// `resources/subscribe` (`on`) and `resources/unsubscribe`.
    Subscribe {
        uri: String,
        on: bool,
    },
    /// `logging/setLevel`.
    SetLogLevel {
        level: String,
    },
    /// `completion/complete`: its `ref` names a prompt or a resource template.
    Complete {
        reference: Reference,
        /// The `ref` object's members besides the one routed on.
        reference_members: Members<'a>,
        members: Members<'a>,
    },
    /// `tasks/get`, `tasks/result`, `tasks/cancel` (`method`): routed by the task id's prefix.
    Task {
        method: Method,
        task: String,
        members: Members<'a>,
    },
    ListTasks,
}

/// What a `completion/complete` refers to.
#[derive(Debug)]
pub(super) enum Reference {
    /// `ref/prompt`: a namespaced prompt name.
    Prompt(String),
    /// `ref/resource`: a namespaced resource template URI.
    Resource(String),
}

impl<'a> HostMethod<'a> {
    /// Parses the params of a request of `method` in `version`; the error is the host's answer
    /// (a method that is not part of the host's revision, missing or malformed params).
    pub(super) fn parse(
        method: Method,
        params: Params<'a>,
        version: Version,
    ) -> Result<Self, RpcError> {
        if !method.exists_in(version) {
            return Err(RpcError::method_not_found(method.as_str()));
        }
        let uri = |params: Params<'a>| {
            let members = needs(params, "uri")?;
            let uri = members
                .string("uri")
                .ok_or_else(|| RpcError::invalid_params("needs a string `uri`"))?;
            Ok::<_, RpcError>((uri, members))
        };
        if let Some(kind) = method.listing() {
            return Ok(Self::List {
                kind,
                cursor: cursor(params)?,
            });
        }
        match method {
            Method::Ping => Ok(Self::Ping),
            Method::Discover => Ok(Self::Discover),
            Method::Listen => Self::listen(params.raw),
            Method::SkillsGet | Method::ReadDirectory => {
                let (uri, members) = uri(params)?;
                let directory = method == Method::ReadDirectory;
                Ok(Self::ReadSkill {
                    uri,
                    directory,
                    members,
                })
            }
            Method::ToolsCall => Self::named(ListKind::Tools, method, params),
            Method::PromptsGet => Self::named(ListKind::Prompts, method, params),
            Method::ResourcesRead => Self::read(params),
            Method::ResourcesSubscribe | Method::ResourcesUnsubscribe => {
                let (uri, _) = uri(params)?;
                let on = method == Method::ResourcesSubscribe;
                Ok(Self::Subscribe { uri, on })
            }
            Method::SetLogLevel => {
                let members = needs(params, "level")?;
                let level = members
                    .string("level")
                    .ok_or_else(|| RpcError::invalid_params("needs a string `level`"))?;
                Ok(Self::SetLogLevel { level })
            }
            Method::Complete => Self::complete(params),
            Method::TasksGet | Method::TasksResult | Method::TasksCancel => {
                let members = needs(params, "taskId")?;
                let task = members
                    .string("taskId")
                    .ok_or_else(|| RpcError::invalid_params("needs a string `taskId`"))?;
                Ok(Self::Task {
                    method,
                    task,
                    members,
                })
            }
            Method::TasksList => Ok(Self::ListTasks),
            Method::Initialize => Err(RpcError::new(
                codes::INVALID_REQUEST,
                "this session is already initialized",
            )),
            // Pages: answered above.
            Method::ToolsList
            | Method::PromptsList
            | Method::ResourcesList
            | Method::ResourceTemplatesList
            | Method::SkillsList => Err(RpcError::method_not_found(method.as_str())),
        }
    }

    fn named(kind: ListKind, method: Method, params: Params<'a>) -> Result<Self, RpcError> {
        let members = params.members().ok_or_else(|| {
            RpcError::invalid_params(format!("{method} needs params with a `name`"))
        })??;
        let name = members
            .string("name")
            .ok_or_else(|| RpcError::invalid_params(format!("{method} needs a string `name`")))?;
        Ok(Self::CallNamed {
            kind,
            name,
            members,
        })
    }

    fn read(params: Params<'a>) -> Result<Self, RpcError> {
        let members = params.members().ok_or_else(|| {
            RpcError::invalid_params("resources/read needs params with a `uri`")
        })??;
        let uri = members
            .string("uri")
            .ok_or_else(|| RpcError::invalid_params("resources/read needs a string `uri`"))?;
        Ok(Self::ReadResource { uri, members })
    }

    fn listen(params: Option<&'a str>) -> Result<Self, RpcError> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Asked {
            #[serde(default)]
            tools_list_changed: bool,
            #[serde(default)]
            prompts_list_changed: bool,
            #[serde(default)]
            resources_list_changed: bool,
            #[serde(default)]
            resource_subscriptions: Vec<String>,
        }
        #[derive(Deserialize)]
        struct Params {
            notifications: Asked,
        }
        let params = params.ok_or_else(|| {
            RpcError::invalid_params("subscriptions/listen needs `notifications`")
        })?;
        let Params {
            notifications: asked,
        } = serde_json::from_str(params)
            .map_err(|e| RpcError::invalid_params(format!("Invalid params: {e}")))?;
        Ok(Self::Listen {
            filter: Filter {
                tools: asked.tools_list_changed,
                prompts: asked.prompts_list_changed,
                resources: asked.resources_list_changed,
                updates: asked.resource_subscriptions,
            },
        })
    }

    fn complete(params: Params<'a>) -> Result<Self, RpcError> {
        let members = needs(params, "ref")?;
        let reference = members
            .get("ref")
            .ok_or_else(|| RpcError::invalid_params("needs a `ref`"))?;
        let reference_members = Members::parse(reference)?;
        let kind = reference_members.string("type").unwrap_or_default();
        let reference = match kind.as_str() {
            "ref/prompt" => Reference::Prompt(
                reference_members
                    .string("name")
                    .ok_or_else(|| RpcError::invalid_params("ref/prompt needs a `name`"))?,
            ),
            "ref/resource" => Reference::Resource(
                reference_members
                    .string("uri")
                    .ok_or_else(|| RpcError::invalid_params("ref/resource needs a `uri`"))?,
            ),
            other => {
                return Err(RpcError::invalid_params(format!(
                    "unknown ref type `{other}`"
                )));
            }
        };
        Ok(Self::Complete {
            reference,
            reference_members,
            members,
        })
    }
}

/// The params' members, which must include `key`.
fn needs<'a>(params: Params<'a>, key: &str) -> Result<Members<'a>, RpcError> {
    params
        .members()
        .ok_or_else(|| RpcError::invalid_params(format!("needs params with a `{key}`")))?
}

/// A listing's `cursor`, if it has one.
fn cursor(params: Params<'_>) -> Result<Option<String>, RpcError> {
    let Some(members) = params.members().transpose()? else {
        return Ok(None);
    };
    let cursor = members.get("cursor").map(|cursor| {
        serde_json::from_str::<Option<String>>(cursor.get())
            .map_err(|e| RpcError::invalid_params(format!("invalid params: {e}")))
    });
    cursor.transpose().map(Option::flatten)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::jsonrpc::raw;

    /// A request of the method named `name` parsed, as the service does.
    fn host_method<'a>(
        name: &str,
        params: Params<'a>,
        version: Version,
    ) -> Result<HostMethod<'a>, RpcError> {
        let method = Method::parse(name).ok_or_else(|| RpcError::method_not_found(name))?;
        HostMethod::parse(method, params, version)
    }

    fn parse(method: &str, params: &str) -> Result<String, RpcError> {
        let params = raw(params.to_owned());
        host_method(method, Some(&*params).into(), Version::LATEST).map(|m| format!("{m:?}"))
    }

    #[test]
    fn each_method_is_read_once_into_what_its_handler_needs() {
        let call = parse("tools/call", r#"{"name":"a__echo","arguments":{}}"#).unwrap();
        assert!(
            call.contains("CallNamed") && call.contains("a__echo"),
            "{call}"
        );
        let list = parse("tools/list", r#"{"cursor":"c1"}"#).unwrap();
        assert!(list.contains("Tools") && list.contains("c1"), "{list}");
        let read = parse("resources/read", r#"{"uri":"a+file:///x"}"#).unwrap();
        assert!(read.contains("ReadResource"), "{read}");
        let unsub = parse("resources/unsubscribe", r#"{"uri":"u"}"#).unwrap();
        assert!(unsub.contains("on: false"), "{unsub}");
        let complete = parse(
            "completion/complete",
            r#"{"ref":{"type":"ref/prompt","name":"a__p"},"argument":{}}"#,
        )
        .unwrap();
        assert!(complete.contains("Prompt(\"a__p\")"), "{complete}");
        assert!(host_method("tasks/list", Params::default(), Version::LATEST).is_ok());
        assert!(host_method("ping", Params::default(), Version::LATEST).is_ok());
    }

    #[test]
    fn members_the_edge_read_are_taken_as_they_are() {
        let read = |method: &str, text: &str| {
            let params = raw(text.to_owned());
            let members = Members::parse(&params).unwrap();
            let given = Params {
                raw: Some(params.get()),
                read: Some(members),
            };
            host_method(method, given, Version::MODERN).map(|m| format!("{m:?}"))
        };
        for (method, text) in [
            ("tools/call", r#"{"name":"a__echo","arguments":{}}"#),
            ("resources/read", r#"{"uri":"a+file:///x"}"#),
            ("tools/list", r#"{"cursor":"c1"}"#),
            ("tools/list", r#"{"cursor":null}"#),
            ("tools/list", "{}"),
        ] {
            assert_eq!(read(method, text).unwrap(), parse(method, text).unwrap());
        }
        let cursor = read("tools/list", r#"{"cursor":5}"#).unwrap_err();
        assert!(cursor.message.starts_with("invalid params"), "{cursor}");
        let nameless = read("tools/call", r#"{"arguments":{}}"#).unwrap_err();
        assert_eq!(nameless.message, "tools/call needs a string `name`");
    }

    #[test]
    fn what_is_missing_is_named_in_the_error() {
        let missing = host_method("tools/call", Params::default(), Version::LATEST).unwrap_err();
        assert_eq!(missing.message, "tools/call needs params with a `name`");
        let no_name = parse("prompts/get", r#"{"arguments":{}}"#).unwrap_err();
        assert_eq!(no_name.message, "prompts/get needs a string `name`");
        let no_uri = parse("resources/subscribe", "{}").unwrap_err();
        assert_eq!(no_uri.message, "needs a string `uri`");
        let bad_ref = parse("completion/complete", r#"{"ref":{"type":"ref/x"}}"#).unwrap_err();
        assert_eq!(bad_ref.message, "unknown ref type `ref/x`");
        let cursor = parse("tools/list", r#"{"cursor":5}"#).unwrap_err();
        assert!(
            cursor.message.starts_with("invalid params"),
            "{}",
            cursor.message
        );
        let again = host_method("initialize", Params::default(), Version::LATEST).unwrap_err();
        assert_eq!(again.code, codes::INVALID_REQUEST);
        let unknown = host_method("tools/unknown", Params::default(), Version::LATEST).unwrap_err();
        assert_eq!(unknown.code, codes::METHOD_NOT_FOUND);
    }

    #[test]
    fn each_revision_has_its_own_methods() {
        let modern = Version::MODERN;
        assert!(matches!(
            host_method("server/discover", Params::default(), modern),
            Ok(HostMethod::Discover)
        ));
        for gone in [
            "ping",
            "logging/setLevel",
            "resources/subscribe",
            "initialize",
            "tasks/list",
        ] {
            let error = host_method(gone, Params::default(), modern).unwrap_err();
            assert_eq!(error.code, codes::METHOD_NOT_FOUND, "{gone}");
        }
        let legacy =
            host_method("server/discover", Params::default(), Version::LATEST).unwrap_err();
        assert_eq!(legacy.code, codes::METHOD_NOT_FOUND);
    }
}
