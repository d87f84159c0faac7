//! `completion/complete`: `ref.name` (a namespaced prompt) or `ref.uri` (a namespaced resource
//! template) names the upstream; the reference is rewritten to the upstream's own and forwarded.

use serde_json::value::RawValue;

use super::{Answer, HostRequest, HostService, unknown};
use crate::jsonrpc::{Members, RpcError, raw_string};
use crate::mcp::ListKind;

impl HostService {
    /// `completion/complete`: `ref.name` (a prompt) or `ref.uri` (a resource template) names the upstream.
    pub(super) async fn complete(
        &self,
        host: &HostRequest,
        params: Option<&RawValue>,
    ) -> Result<Answer, RpcError> {
        let mut members = Members::parse(
            params.ok_or_else(|| RpcError::invalid_params("needs params with a `ref`"))?,
        )?;
        let reference = members
            .get("ref")
            .ok_or_else(|| RpcError::invalid_params("needs a `ref`"))?;
        let mut reference = Members::parse(reference)?;
        let kind = reference.string("type").unwrap_or_default();
        let (upstream, key, original) = match kind.as_str() {
            "ref/prompt" => {
                let name = reference
                    .string("name")
                    .ok_or_else(|| RpcError::invalid_params("ref/prompt needs a `name`"))?;
                let snapshot = self.router.view(host.profile());
                let (upstream, original) = snapshot
                    .route_name(ListKind::Prompts, &name)
                    .ok_or_else(|| unknown(&snapshot, ListKind::Prompts, &name))?;
                host.routed(upstream, &name);
                (upstream.clone(), "name", original.to_owned())
            }
            "ref/resource" => {
                let uri = reference
                    .string("uri")
                    .ok_or_else(|| RpcError::invalid_params("ref/resource needs a `uri`"))?;
                let (upstream, original) =
                    self.route_uri(host.profile(), ListKind::ResourceTemplates, &uri)?;
                host.routed(&upstream, &uri);
                (upstream, "uri", original)
            }
            other => {
                return Err(RpcError::invalid_params(format!(
                    "unknown ref type `{other}`"
                )));
            }
        };
        let original = raw_string(&original);
        reference.insert(key, &original);
        let reference = reference.to_raw();
        members.insert("ref", &reference);
        self.forward(host, &upstream, "completion/complete", members)
            .await
            .map(Answer::Upstream)
    }
}
