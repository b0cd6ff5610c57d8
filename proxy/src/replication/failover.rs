//! FAILOVER, as Redis 7.0's failoverCommand, updateFailoverStatus and
//! abortFailover: writes pause on every core (a purpose of their own that
//! CLIENT UNPAUSE leaves alone), a task on core 0 waits until the target
//! (named, or the first replica found synced) acknowledged the whole
//! stream, then this process becomes the target's replica and its PSYNC
//! carries FAILOVER (`replica/link.rs`): the target promotes itself and
//! the pause ends with its answer. Core 0 holds the state; every change
//! of it happens there in one step.

use super::hub::{when_drained, HUB};
use super::primary::{LinkState, Primary, ReplicaLink};
use super::replica::{apply_mode, keep_dataset, set_master};
use super::role::set_role;
use super::state::{Failover, Phase};
use crate::coordinator::dispatch::{call, call_all};
use crate::core::Core;
use crate::log;
use std::rc::Rc;
use std::time::Duration;

/// How often core 0 looks at the replicas' acknowledgements (Redis looks
/// before every sleep of its event loop).
const CHECK_PERIOD: Duration = Duration::from_millis(10);

/// FAILOVER's arguments, parsed.
pub struct Request {
    /// TO host port (Redis reads the port as any integer).
    pub target: Option<(String, i64)>,
    pub timeout_ms: u64,
    pub force: bool,
}

/// Starts a failover: Err is Redis's error text. Once this returns, every
/// core holds writes.
pub async fn start(core: &Rc<Core>, request: Request) -> Result<(), &'static str> {
    let seq = call(core, HUB, move |c| begin(c, request)).await.unwrap_or(Err(SHUTTING_DOWN))?;
    call_all(core, move |c| pause(c, (seq, true))).await;
    call(core, HUB, move |c| {
        glommio::spawn_local(drive(c.clone(), seq)).detach();
    })
    .await;
    Ok(())
}

const SHUTTING_DOWN: &str = "ERR shard unavailable (server shutting down)";

/// Core 0: the checks, in Redis's order, then the new state; returns the
/// pause's sequence number.
fn begin(c: &Rc<Core>, request: Request) -> Result<u64, &'static str> {
    let mut f = c.repl.failover.borrow_mut();
    if f.phase != Phase::None {
        return Err("ERR FAILOVER already in progress.");
    }
    if c.repl.replica.link.borrow().master.is_some() {
        return Err("ERR FAILOVER is not valid when server is a replica.");
    }
    let primary = c.repl.primary.borrow();
    let replicas = primary.as_ref().map_or(&[][..], |p| &p.replicas[..]);
    if replicas.is_empty() {
        return Err("ERR FAILOVER requires connected replicas.");
    }
    if request.force && (request.timeout_ms == 0 || request.target.is_none()) {
        return Err("ERR FAILOVER with force option requires both a timeout and target HOST and IP.");
    }
    f.target = None;
    if let Some((host, port)) = &request.target {
        let Some(r) = replicas.iter().find(|r| is(r, host, *port)) else {
            return Err("ERR FAILOVER target HOST and PORT is not a replica.");
        };
        if r.state != LinkState::Online {
            return Err("ERR FAILOVER target replica is not online.");
        }
        log::notice(&format!("FAILOVER requested to {host}:{port}."));
        f.target = Some((host.clone(), r.listening_port));
    } else {
        log::notice("FAILOVER requested to any replica.");
    }
    f.end_ms = if request.timeout_ms > 0 { shard::unix_ms().saturating_add(request.timeout_ms) } else { 0 };
    f.force = request.force;
    f.phase = Phase::WaitForSync;
    f.pause_seq += 1;
    Ok(f.pause_seq)
}

/// Redis's findReplica: the announced (or peer) address and listening port.
fn is(r: &ReplicaLink, host: &str, port: i64) -> bool {
    !r.killed && r.ip.eq_ignore_ascii_case(host) && r.listening_port as i64 == port
}

/// FAILOVER's write pause on one core (keeping the dataset as it is).
fn pause(c: &Rc<Core>, change: (u64, bool)) {
    c.pause.set_failover(change);
    keep_dataset(c);
}

/// What the state calls for now.
enum Step {
    /// This failover is no longer waiting (done, aborted, replaced).
    Gone,
    Wait,
    /// Timed out without FORCE.
    Abort,
    /// A replica to fail over to (or FORCE after the timeout); with
    /// `commit`, this process is its replica now: every core's new mode.
    FailOver(Option<(u64, u8)>),
}

/// Core 0, Redis's updateFailoverStatus: looks (`commit` false), or acts
/// on what it finds (after the stream is complete: nothing written before
/// the pause is still on its way to it).
fn step(c: &Core, p: &Primary, seq: u64, commit: bool) -> Step {
    let mut f = c.repl.failover.borrow_mut();
    if f.phase != Phase::WaitForSync || f.pause_seq != seq {
        return Step::Gone;
    }
    let timed_out = f.end_ms != 0 && f.end_ms <= shard::unix_ms();
    if timed_out && !f.force {
        return Step::Abort;
    }
    let synced = synced(&f, p);
    let target = match (timed_out, synced) {
        (false, None) => return Step::Wait,
        (true, _) => f.target.clone(),
        (false, synced) => synced,
    };
    let Some((host, port)) = target else { return Step::Abort };
    if !commit {
        return Step::FailOver(None);
    }
    match timed_out {
        true => log::notice(&format!("FAILOVER to {host}:{port} time out exceeded, failing over.")),
        false => log::notice(&format!("Failover target {host}:{port} is synced, failing over.")),
    }
    f.phase = Phase::InProgress;
    f.target = Some((host.clone(), port));
    drop(f);
    let why = format!("Connecting to the failover target {host}:{port} as its replica");
    let own = Some((p.replid.clone(), p.backlog.end));
    Step::FailOver(set_master(c, Some((host, port)), &why, own).1)
}

/// The target, or the first replica, when it acknowledged the stream's
/// end (an ACK of its own: a full resync's cut is not one, Redis counts
/// from 0 until the first).
fn synced(f: &Failover, p: &Primary) -> Option<(String, u16)> {
    let end = p.backlog.end;
    let acked = |r: &&ReplicaLink| r.loaded && r.ack == end;
    let found = match &f.target {
        Some((host, port)) => p.replicas.iter().find(|r| is(r, host, *port as i64)).filter(acked),
        None => p.replicas.iter().filter(|r| !r.killed).find(acked),
    }?;
    Some((found.ip.clone(), found.listening_port))
}

/// Core 0's task for one failover, while it waits for sync.
async fn drive(core: Rc<Core>, seq: u64) {
    loop {
        glommio::timer::sleep(CHECK_PERIOD).await;
        if core.process.shutting_down() {
            return;
        }
        let peek = core.repl.primary.borrow().as_ref().map(|p| step(&core, p, seq, false));
        match peek.unwrap_or(Step::Gone) {
            Step::Gone => return,
            Step::Wait => continue,
            Step::Abort => {
                abort(&core, "Replica never caught up before timeout").await;
                return;
            }
            Step::FailOver(_) => {}
        }
        match when_drained(&core, move |c, p| step(c, p, seq, true)).await {
            Some(Step::FailOver(Some(mode))) => {
                call_all(&core, move |c| apply_mode(c, mode)).await;
                return;
            }
            Some(Step::Gone) | None => return,
            _ => {}
        }
    }
}

/// FAILOVER ABORT, a timeout, or a target that refused: a process that
/// already turned replica is a primary again; writes resume. False when no
/// failover was in progress.
pub async fn abort(core: &Rc<Core>, why: &str) -> bool {
    let why = why.to_string();
    let phase = call(core, HUB, move |c| {
        let f = c.repl.failover.borrow();
        match &f.target {
            _ if f.phase == Phase::None => {}
            Some((host, port)) => log::notice(&format!("FAILOVER to {host}:{port} aborted: {why}")),
            None => log::notice(&format!("FAILOVER to any replica aborted: {why}")),
        }
        f.phase
    })
    .await
    .unwrap_or_default();
    if phase == Phase::None {
        return false;
    }
    if phase == Phase::InProgress {
        let _ = set_role(core, None, "MASTER MODE enabled (failover aborted)".into()).await;
    }
    clear(core).await;
    true
}

/// The failover is over (the target answered PSYNC, or it was aborted):
/// the state is cleared and every core's writes resume.
pub async fn clear(core: &Rc<Core>) {
    let seq = call(core, HUB, |c| {
        let mut f = c.repl.failover.borrow_mut();
        let seq = f.pause_seq + 1;
        *f = Failover { pause_seq: seq, ..Failover::default() };
        seq
    })
    .await;
    if let Some(seq) = seq {
        call_all(core, move |c| pause(c, (seq, false))).await;
    }
}

/// Core 0: this process's PSYNC carries FAILOVER.
pub fn in_progress(c: &Core) -> bool {
    c.repl.failover.borrow().phase == Phase::InProgress
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn link(id: u64, port: u16, ack: u64, loaded: bool) -> ReplicaLink {
        ReplicaLink {
            id,
            fd: -1,
            ip: "127.0.0.1".into(),
            listening_port: port,
            state: LinkState::Online,
            pos: 0,
            ack,
            ack_at: Instant::now(),
            loaded,
            killed: false,
            soft_since: None,
            waker: None,
            peak_held: 0,
            peak_raw: 0,
            held: Default::default(),
        }
    }

    #[test]
    fn the_target_is_the_named_replica_or_the_first_that_acknowledged_the_end() {
        let mut p = Primary::new(1, "a".repeat(40), "0".repeat(40), 100, -1);
        // Its cut's offset is not an acknowledgement: it never sent one.
        p.replicas = vec![link(1, 7001, 100, false), link(2, 7002, 90, true), link(3, 7003, 100, true)];
        let mut f = Failover::default();
        assert_eq!(synced(&f, &p), Some(("127.0.0.1".into(), 7003)));
        f.target = Some(("127.0.0.1".into(), 7002));
        assert_eq!(synced(&f, &p), None);
        p.replicas[1].ack = 100;
        assert_eq!(synced(&f, &p), Some(("127.0.0.1".into(), 7002)));
        f.target = Some(("127.0.0.1".into(), 7001));
        assert_eq!(synced(&f, &p), None);
    }
}
