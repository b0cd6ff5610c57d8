//! This process as a replica of a Redis (or corekv) primary: REPLICAOF,
//! the state INFO and ROLE show, and the mode bits every core's router
//! checks. The link itself (a task on core 0 started by `server.rs`) is
//! `link.rs`: the handshake and PSYNC, `transfer.rs` (the RDB received
//! into a file), `load.rs` (that file loaded into every shard in
//! parallel) and `apply.rs` (the command stream applied through a master
//! client on the owning cores).
//!
//! `info_lines`, `role_reply` and `master_replid_offset` read core 0's
//! state: call them there (`dispatch::call(core, 0, ..)`).

pub mod apply;
pub mod io;
pub mod link;
pub mod load;
pub mod state;
pub mod transfer;

use crate::coordinator::dispatch::call_all;
use crate::core::Core;
use crate::log;
use state::{LinkStatus, LINK_DOWN, LOADING, REPLICA};
use std::fmt::Write;
use std::rc::Rc;

/// True on every core while this process is a replica.
pub fn is_replica(core: &Core) -> bool {
    core.repl.replica.mode.get() & REPLICA != 0
}

/// `replicaof host port` in the configuration: every core refuses writes
/// from its first client on; core 0's supervisor connects once it runs.
pub fn start_as_replica(core: &Core, target: (String, u16)) {
    let state = &core.repl.replica;
    state.mode.set(REPLICA | LINK_DOWN);
    for db in &mut core.shard.borrow_mut().dbs {
        db.keep_expired = true;
    }
    if core.index == 0 {
        let mut link = state.link.borrow_mut();
        link.master = Some(target);
        link.generation += 1;
        link.down_since = Some(std::time::Instant::now());
    }
}

/// Core 0: records the new target (`None`: a primary) and wakes the link's
/// supervisor; logs `why` when something changes. Returns the reply's
/// status, the mode every core takes next (when it changed) and whether
/// this was a promotion. A primary turning replica continues its own
/// stream's history, `own` (its replid and end: Redis's
/// replicationCacheMasterUsingMyself); a promoted replica takes a new
/// replication id (shiftReplicationId).
pub fn set_master(
    core: &Core,
    target: Option<(String, u16)>,
    why: &str,
    own: Option<(String, u64)>,
) -> (&'static str, Option<(u64, u8)>, bool) {
    let mut link = core.repl.replica.link.borrow_mut();
    match (&link.master, &target) {
        (None, None) => return ("OK", None, false),
        (Some((h, p)), Some((host, port))) if h.eq_ignore_ascii_case(host) && p == port => {
            log::notice(
                "REPLICAOF would result into synchronization with the master we are already connected with. No operation performed.",
            );
            return ("OK Already connected to specified master", None, false);
        }
        _ => {}
    }
    log::notice(why);
    let promoted = target.is_none();
    if let Some((replid, end)) = own.filter(|_| link.master.is_none()) {
        (link.replid, link.offset, link.read_offset, link.synced) = (replid, end, end, true);
    }
    if promoted {
        *core.repl.replid.borrow_mut() = Some(crate::core::random_id());
    }
    link.master = target;
    link.generation += 1;
    link.status = LinkStatus::Connect;
    if link.down_since.is_none() {
        link.down_since = Some(std::time::Instant::now());
    }
    drop(link);
    core.repl.replica.wake.raise();
    ("OK", Some(next_mode(core)), promoted)
}

/// Core 0: the mode every core should have now, with a sequence number so
/// that a core never goes back to an older one.
pub fn next_mode(core: &Core) -> (u64, u8) {
    let link = core.repl.replica.link.borrow();
    let mut mode = 0;
    if link.master.is_some() {
        mode |= REPLICA;
        if link.status != LinkStatus::Connected {
            mode |= LINK_DOWN;
        }
        if link.loading {
            mode |= LOADING;
        }
    }
    let state = &core.repl.replica;
    state.mode_seq.set(state.mode_seq.get() + 1);
    (state.mode_seq.get(), mode)
}

/// Takes `mode` unless a newer one is already in; a replica's databases
/// keep expired keys for the primary's DELs.
pub fn apply_mode(core: &Core, (seq, mode): (u64, u8)) {
    let state = &core.repl.replica;
    if seq <= state.mode_seen.get() {
        return;
    }
    state.mode_seen.set(seq);
    state.mode.set(mode);
    keep_dataset(core);
}

/// A replica's databases, and any while paused (Redis 7.0), stay as they
/// are: expired keys are hidden but not deleted, no active expiry, no
/// eviction (router.rs).
pub fn keep_dataset(core: &Core) {
    let keep = is_replica(core) || core.pause.recorded();
    for db in &mut core.shard.borrow_mut().dbs {
        db.keep_expired = keep;
    }
}

/// Core 0: publishes the link's state to every core (after the link went
/// up or down, or a load began or ended).
pub async fn publish(core: &Rc<Core>) {
    let mode = next_mode(core);
    call_all(core, move |c| apply_mode(c, mode)).await;
}

/// Core 0: the primary's replication id and the offset applied, when this
/// process holds a dataset synced from it (a promotion keeps them as
/// replid2, as Redis does).
pub fn master_replid_offset(core: &Core) -> Option<(String, u64)> {
    let link = core.repl.replica.link.borrow();
    link.synced.then(|| (link.replid.clone(), link.offset))
}

/// Core 0: ROLE on a replica: (host, port, state, offset applied while
/// connected, else -1).
pub fn role_reply(core: &Core) -> Option<(String, u16, &'static str, i64)> {
    let link = core.repl.replica.link.borrow();
    let (host, port) = link.master.clone()?;
    let offset = if link.status == LinkStatus::Connected { link.offset as i64 } else { -1 };
    Some((host, port, link.status.word(), offset))
}

/// Core 0: INFO replication's replica fields, in Redis 7.0's order and
/// words (after `role:slave`, before `connected_slaves`).
pub fn info_lines(core: &Core, out: &mut String) {
    let link = core.repl.replica.link.borrow();
    let Some((host, port)) = &link.master else { return };
    let now = std::time::Instant::now();
    let ago = |t: Option<std::time::Instant>| t.map_or(-1, |t| now.duration_since(t).as_secs() as i64);
    let (applied, read) = if link.synced { (link.offset as i64, link.read_offset as i64) } else { (1, 1) };
    let up = link.status == LinkStatus::Connected;
    let transfer = link.status == LinkStatus::Sync;
    let _ = write!(
        out,
        "master_host:{host}\r\nmaster_port:{port}\r\nmaster_link_status:{}\r\nmaster_last_io_seconds_ago:{}\r\nmaster_sync_in_progress:{}\r\nslave_read_repl_offset:{read}\r\nslave_repl_offset:{applied}\r\n",
        if up { "up" } else { "down" },
        if up { ago(link.last_io) } else { -1 },
        transfer as u8,
    );
    if transfer {
        let size = link.transfer_size;
        let read = link.transfer_read as i64;
        let perc = if size > 0 { read as f64 / size as f64 * 100.0 } else { 0.0 };
        let _ = write!(
            out,
            "master_sync_total_bytes:{size}\r\nmaster_sync_read_bytes:{read}\r\nmaster_sync_left_bytes:{}\r\nmaster_sync_perc:{perc:.2}\r\nmaster_sync_last_io_seconds_ago:{}\r\n",
            size - read,
            ago(link.transfer_last_io).max(0),
        );
    }
    if !up {
        let _ = write!(out, "master_link_down_since_seconds:{}\r\n", ago(link.down_since));
    }
    let config = core.config();
    let _ = write!(
        out,
        "slave_priority:{}\r\nslave_read_only:{}\r\nreplica_announced:1\r\n",
        config.replica_priority, config.replica_read_only as u8
    );
}
