//! The link to the primary, a task on core 0 for the process's life
//! (`supervise`, started by `server.rs`): while REPLICAOF names a primary,
//! connect, handshake (PING, AUTH, REPLCONF listening-port and capa),
//! PSYNC (continue the cached replid and offset, or `?`), a full resync's
//! RDB (`transfer.rs`, `load.rs`), then the command stream (`apply.rs`);
//! on failure, reconnect a second later with PSYNC.

use super::io::LinkIo;
use super::state::LinkStatus;
use super::{apply, load, publish, transfer};
use crate::core::Core;
use crate::log;
use crate::replication::failover;
use glommio::net::TcpStream;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// Runs on core 0 until shutdown.
pub async fn supervise(core: Rc<Core>) {
    let state = &core.repl.replica;
    loop {
        if core.process.shutting_down() {
            return;
        }
        let (target, generation) = {
            let link = state.link.borrow();
            (link.master.clone(), link.generation)
        };
        if let Some((host, port)) = target {
            let result = session(&core, &host, port, generation).await;
            let lost = {
                let mut link = state.link.borrow_mut();
                let was_up = link.status == LinkStatus::Connected;
                link.status = LinkStatus::Connect;
                link.loading = false;
                link.down_since = Some(Instant::now());
                was_up
            };
            publish(&core).await;
            if let Err(e) = result {
                log::warning(&e);
            }
            if lost {
                log::notice("Caching the disconnected master state.");
            }
            // A new target is taken at once; a failure retries in a second.
            if state.link.borrow().generation != generation {
                state.wake.take();
                continue;
            }
        }
        futures_lite::future::or(state.wake.wait(), glommio::timer::sleep(Duration::from_secs(1))).await;
    }
}

/// One connection to the primary, from connect to link loss.
async fn session(core: &Rc<Core>, host: &str, port: u16, generation: u64) -> Result<(), String> {
    let state = &core.repl.replica;
    let timeout = Duration::from_secs(core.config().repl_timeout.max(1));
    state.link.borrow_mut().status = LinkStatus::Connecting;
    log::notice(&format!("Connecting to MASTER {host}:{port}"));
    let stream = TcpStream::connect_timeout((host, port), timeout)
        .await
        .map_err(|e| format!("Unable to connect to MASTER: {e}"))?;
    let tls = match core.config().tls.replication {
        true => Some(crate::tls::settings::client_config(&core.config().tls)?),
        false => None,
    };
    let mut io = LinkIo::new(stream, tls.map(|c| (c, host)), Instant::now() + timeout).await?;
    log::notice("MASTER <-> REPLICA sync started");
    handshake(core, &mut io, timeout).await?;
    let (replid, offset, synced) = {
        let link = state.link.borrow();
        (link.replid.clone(), link.offset, link.synced)
    };
    let next = (offset + 1).to_string();
    let mut psync: Vec<&[u8]> = match synced {
        true => {
            log::notice(&format!("Trying a partial resynchronization (request {replid}:{next})."));
            vec![&b"PSYNC"[..], replid.as_bytes(), next.as_bytes()]
        }
        false => {
            log::notice("Partial resynchronization not possible (no cached master)");
            vec![&b"PSYNC"[..], b"?", b"-1"]
        }
    };
    // A primary handing over: the target promotes itself on this PSYNC.
    let failing_over = failover::in_progress(core);
    if failing_over {
        // Every core refuses writes before the target's answer lifts the
        // pause: the writes it held must not run here.
        publish(core).await;
        psync.push(b"FAILOVER");
    }
    let reply = match io.call(&psync, timeout).await {
        Ok(reply) => reply,
        Err(e) if failing_over => {
            failover::abort(core, "Write error to failover target").await;
            return Err(e);
        }
        Err(e) => return Err(e),
    };
    // Any resync ends the failover (the pause with it); a refusal aborts it.
    if failing_over {
        match reply.starts_with("+FULLRESYNC") || reply.starts_with("+CONTINUE") {
            true => failover::clear(core).await,
            false => {
                failover::abort(core, "Failover target rejected psync request").await;
                return Err(format!("Failover target rejected PSYNC FAILOVER: {reply}"));
            }
        }
    }
    if let Some(rest) = reply.strip_prefix("+FULLRESYNC") {
        let mut words = rest.split_whitespace();
        let (Some(id), Some(Ok(start))) = (words.next(), words.next().map(str::parse::<u64>)) else {
            return Err(format!("Master replied with wrong +FULLRESYNC syntax: {reply}"));
        };
        log::notice(&format!("Full resync from master: {id}:{start}"));
        full_sync(core, &mut io, id, start, timeout, generation).await?;
        log::notice("MASTER <-> REPLICA sync: Finished with success");
    } else if let Some(rest) = reply.strip_prefix("+CONTINUE") {
        log::notice("Successful partial resynchronization with master.");
        let new_id = rest.trim();
        if !new_id.is_empty() && new_id != replid {
            log::warning(&format!("Master replication ID changed to {new_id}"));
            state.link.borrow_mut().replid = new_id.to_string();
        }
        log::notice("MASTER <-> REPLICA sync: Master accepted a Partial Resynchronization.");
    } else if reply.starts_with("-NOMASTERLINK") || reply.starts_with("-LOADING") {
        return Err(format!("Master is currently unable to PSYNC but should be in the future: {reply}"));
    } else {
        return Err(format!("Unexpected reply to PSYNC from master: {reply}"));
    }
    {
        let mut link = state.link.borrow_mut();
        link.status = LinkStatus::Connected;
        // Bytes read but not applied before a loss are sent again.
        link.read_offset = link.offset;
        link.last_io = Some(Instant::now());
        link.down_since = None;
    }
    publish(core).await;
    // The first ACK puts this replica online on a diskless primary.
    let offset = state.link.borrow().offset;
    apply::ack(&mut io, offset).await?;
    apply::stream(core, &mut io, generation).await
}

/// PING, AUTH, REPLCONF: Redis's syncWithMaster handshake.
async fn handshake(core: &Core, io: &mut LinkIo, timeout: Duration) -> Result<(), String> {
    let reply = io.call(&[b"PING"], timeout).await?;
    if reply.starts_with('-')
        && !reply.starts_with("-NOAUTH")
        && !reply.starts_with("-NOPERM")
        && !reply.starts_with("-ERR operation not permitted")
    {
        return Err(format!("Error reply to PING from master: '{}'", &reply[1..]));
    }
    log::notice("Master replied to PING, replication can continue...");
    let (user, pass, port) = {
        let c = core.config();
        // As Redis: the port the primary would reach this replica on.
        let port = if c.tls.replication && c.tls.port != 0 { c.tls.port } else { core.process.tcp_port() };
        (c.masteruser.clone(), c.masterauth.clone(), port)
    };
    if !pass.is_empty() {
        let reply = match user.is_empty() {
            true => io.call(&[b"AUTH", pass.as_bytes()], timeout).await?,
            false => io.call(&[b"AUTH", user.as_bytes(), pass.as_bytes()], timeout).await?,
        };
        if let Some(err) = reply.strip_prefix('-') {
            return Err(format!("Unable to AUTH to MASTER: {err}"));
        }
    }
    let reply = io.call(&[b"REPLCONF", b"listening-port", port.to_string().as_bytes()], timeout).await?;
    if let Some(err) = reply.strip_prefix('-') {
        log::notice(&format!("(Non critical) Master does not understand REPLCONF listening-port: {err}"));
    }
    let reply = io.call(&[b"REPLCONF", b"capa", b"eof", b"capa", b"psync2"], timeout).await?;
    if let Some(err) = reply.strip_prefix('-') {
        log::notice(&format!("(Non critical) Master does not understand REPLCONF capa: {err}"));
    }
    Ok(())
}

/// +FULLRESYNC: the RDB into a temp file, then into every shard.
async fn full_sync(
    core: &Rc<Core>,
    io: &mut LinkIo,
    replid: &str,
    start: u64,
    timeout: Duration,
    generation: u64,
) -> Result<(), String> {
    {
        let mut link = core.repl.replica.link.borrow_mut();
        link.status = LinkStatus::Sync;
        link.transfer_size = -1;
        link.transfer_read = 0;
        link.transfer_last_io = Some(Instant::now());
        // Until the new dataset is in, nothing can be continued.
        link.synced = false;
    }
    let dir = core.config().dir.clone();
    let temp = std::path::Path::new(&dir).join(format!("temp-{}.{}.rdb", shard::unix_ms() / 1000, std::process::id()));
    let received = transfer::receive(core, io, &temp, timeout, generation).await;
    if let Err(e) = received {
        let _ = std::fs::remove_file(&temp);
        return Err(e);
    }
    if let Err(e) = load::load_received(core, &temp).await {
        let _ = std::fs::remove_file(&temp);
        return Err(e);
    }
    let mut link = core.repl.replica.link.borrow_mut();
    link.replid = replid.to_string();
    link.offset = start;
    link.read_offset = start;
    link.synced = true;
    Ok(())
}
