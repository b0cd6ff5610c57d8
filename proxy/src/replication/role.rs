//! Changing roles: REPLICAOF, and FAILOVER's demotion and promotion. Core
//! 0 records the change (`replica::set_master`); a primary's stream is
//! complete before it turns replica (its offset is where it continues
//! from), a promoted replica's stream starts anew before it takes writes
//! (`hub::restart_stream`); then every core takes the new mode.

use super::hub::{restart_stream, when_drained};
use super::replica::{apply_mode, is_replica, master_replid_offset, set_master};
use crate::coordinator::dispatch::{call, call_all};
use crate::core::Core;
use std::rc::Rc;

/// REPLICAOF host port / REPLICAOF NO ONE (`None`). Ok: the status text to
/// reply (`OK`, `OK Already connected to specified master`); Err: the
/// error text. Once this returns, every core refuses writes (or accepts
/// them again).
pub async fn replicaof(core: &Rc<Core>, target: Option<(String, u16)>) -> Result<&'static str, String> {
    if core.cluster().enabled() {
        return Err("ERR REPLICAOF not allowed in cluster mode.".into());
    }
    if core.pause.in_failover() {
        return Err("ERR REPLICAOF not allowed while failing over.".into());
    }
    let why = match &target {
        Some((host, port)) => format!("REPLICAOF {host}:{port} enabled (user request)"),
        None => "MASTER MODE enabled (user request)".into(),
    };
    set_role(core, target, why).await
}

/// Makes this process a replica of `target`, or a primary; `why` is the
/// log line when the role or the primary changes.
pub async fn set_role(core: &Rc<Core>, target: Option<(String, u16)>, why: String) -> Result<&'static str, String> {
    if target.is_some() && !is_replica(core) {
        when_drained(core, |_, _| ()).await;
    }
    let changed = call(core, 0, move |c| {
        let own = c.repl.primary.borrow().as_ref().map(|p| (p.replid.clone(), p.backlog.end));
        set_master(c, target, &why, own)
    })
    .await;
    let Some((reply, mode, promoted)) = changed else {
        return Err("ERR shard unavailable (server shutting down)".into());
    };
    if let Some(mode) = mode {
        if promoted {
            restart_stream(core).await;
        }
        call_all(core, move |c| apply_mode(c, mode)).await;
    }
    Ok(reply)
}

/// `PSYNC <replid> <offset> FAILOVER` sent to this process: its primary
/// hands over, and this process is promoted when `replid` is the history
/// it follows (Redis's syncCommand).
pub async fn failover_request(core: &Rc<Core>, replid: String, client: String) -> Result<(), &'static str> {
    crate::log::warning(&format!("Failover request received for replid {replid}."));
    let mine = call(core, 0, |c| {
        let replica = c.repl.replica.link.borrow().master.is_some();
        let mine = master_replid_offset(c)
            .map(|(id, _)| id)
            .unwrap_or_else(|| c.repl.replid.borrow_mut().get_or_insert_with(crate::core::random_id).clone());
        (replica, mine)
    })
    .await;
    match mine {
        None => Err("ERR shard unavailable (server shutting down)"),
        Some((false, _)) => Err("ERR PSYNC FAILOVER can't be sent to a master."),
        Some((true, mine)) if !mine.eq_ignore_ascii_case(&replid) => {
            Err("ERR PSYNC FAILOVER replid must match my replid.")
        }
        Some(_) => {
            let why = format!("MASTER MODE enabled (failover request from '{client}')");
            set_role(core, None, why).await.map(|_| ()).map_err(|_| "ERR shard unavailable (server shutting down)")
        }
    }
}
