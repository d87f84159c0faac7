//! The router actor: the only writer of the catalog. Each upstream change rebuilds one snapshot.

use std::collections::BTreeMap;
use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};

use super::Store;
use super::catalog::Snapshot;
use crate::config::CatalogConfig;
use crate::upstream::{UpstreamCatalog, UpstreamHandle};

pub(super) struct RouterActor;

#[derive(Debug)]
pub(super) enum RouterMsg {
    Publish(String, UpstreamCatalog, RpcReplyPort<()>),
    Withdraw(String),
}

pub(super) struct RouterState {
    config: CatalogConfig,
    upstreams: Vec<UpstreamHandle>,
    catalogs: BTreeMap<String, UpstreamCatalog>,
    store: Arc<Store>,
    generation: u64,
}

impl Actor for RouterActor {
    type Msg = RouterMsg;
    type State = RouterState;
    type Arguments = (CatalogConfig, Vec<UpstreamHandle>, Arc<Store>);

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        (config, upstreams, store): Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(RouterState {
            config,
            upstreams,
            catalogs: BTreeMap::new(),
            store,
            generation: 0,
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let mut reply = None;
        match msg {
            RouterMsg::Publish(name, catalog, port) => {
                state.catalogs.insert(name, catalog);
                reply = Some(port);
            }
            RouterMsg::Withdraw(name) => {
                if state.catalogs.remove(&name).is_none() {
                    return Ok(());
                }
            }
        }
        state.generation += 1;
        let next = Snapshot::build(
            state.generation,
            &state.config,
            &state.upstreams,
            &state.catalogs,
        );
        tracing::debug!(
            generation = state.generation,
            tools = next.list(crate::mcp::ListKind::Tools).len(),
            "Published a new catalog."
        );
        state.store.publish(next);
        if let Some(port) = reply {
            let _ = port.send(());
        }
        Ok(())
    }
}
