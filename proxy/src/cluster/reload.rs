//! CLUSTER RELOAD and SIGHUP: a new cluster view, installed on every core.

use super::ClusterView;
use crate::coordinator::dispatch::call_all;
use crate::core::Core;
use std::rc::Rc;

/// Re-reads the topology file and installs the new view on every core.
/// Routing changes at once; keys of slots that moved are not migrated.
pub async fn reload_topology(core: &Rc<Core>) -> Result<(), String> {
    let (config, shards) = (core.config().clone(), core.count);
    if config.cluster_config_file.is_empty() {
        return Err("no cluster-config-file to reload".into());
    }
    let text = std::fs::read_to_string(&config.cluster_config_file)
        .map_err(|e| format!("reading {}: {e}", config.cluster_config_file))?;
    let view = ClusterView::build(&config, shards, core.process.tcp_port(), Some(&text))?;
    let old = core.cluster();
    if view.shard_nodes.iter().map(|&n| view.node(n).port).ne(old.shard_nodes.iter().map(|&n| old.node(n).port)) {
        return Err("the reloaded topology changes this host's node ports; restart to apply".into());
    }
    let installed = call_all(core, move |c| {
        *c.cluster.borrow_mut() = Rc::new(view.clone());
    })
    .await;
    if installed.iter().any(Option::is_none) {
        return Err("could not reach every shard".into());
    }
    Ok(())
}
