//! The stream's two ends on the primary: every shard's feed task, which
//! seals its effects into blocks (compressing them on the core that made
//! them) and ships them to core 0, and core 0's hub, which merges them into
//! the stream, enforces the replicas' output buffer limits, pings the
//! replicas and expires the backlog.

use super::block::Block;
use super::merge::Shipped;
use super::primary::Primary;
use super::state::Phase;
use crate::coordinator::dispatch::{call, call_all};
use crate::core::{random_id, Core};
use crate::log;
use shard::propagate::FeedItem;
use std::future::poll_fn;
use std::rc::Rc;
use std::task::Poll;
use std::time::{Duration, Instant};

/// Core 0 holds the stream.
pub const HUB: usize = 0;
/// While compressing, how long a shard's open item may wait to fill a block.
const FILL_WAIT: Duration = Duration::from_millis(50);

/// Starts the stream the first time a replica arrives: the hub on core 0,
/// then every shard's feed (from here on, each write is in the stream).
/// Redis too creates its backlog with the first replica.
pub async fn ensure_started(core: &Rc<Core>) {
    let created = call(core, HUB, |c| {
        let mut primary = c.repl.primary.borrow_mut();
        if primary.is_some() {
            return false;
        }
        let replica = crate::replication::replica::master_replid_offset(c);
        let (replid2, offset, second) = match replica {
            Some((old, offset)) => (old, offset, offset as i64 + 1),
            None => ("0".repeat(40), 0, -1),
        };
        let replid = c.repl.replid.borrow_mut().get_or_insert_with(random_id).clone();
        *primary = Some(Primary::new(c.count, replid, replid2, offset, second));
        true
    })
    .await
    .unwrap_or(false);
    if created {
        call(core, HUB, |c| {
            glommio::spawn_local(cron(c.clone())).detach();
        })
        .await;
    }
    if core.repl.feeding.get() {
        return;
    }
    // Every shard starts feeding while this holds them all whole: no unit
    // straddles the start, so each unit's release is marked on all of its
    // shards or on none (the hub waits for every marker of a unit).
    let whole = crate::coordinator::Footprint { keys: Vec::new(), whole: true };
    let unit = crate::coordinator::Unit::acquire(core, &whole).await;
    call_all(core, |c| {
        if !c.repl.feeding.replace(true) {
            let size = c.config().replica_output_buffer_block_size as usize;
            c.shard.borrow_mut().enable_repl_feed(size);
            glommio::spawn_local(feed(c.clone())).detach();
        }
    })
    .await;
    unit.release().await;
}

/// A shard's feed task: whenever the shard has items, seals them and ships
/// them to the hub (one mesh message per batch, in the shard's order).
async fn feed(core: Rc<Core>) {
    loop {
        poll_fn(|cx| {
            let mut shard = core.shard.borrow_mut();
            match shard.repl_feed() {
                Some(feed) if !feed.is_empty() => Poll::Ready(()),
                Some(feed) => {
                    feed.waker = Some(cx.waker().clone());
                    Poll::Pending
                }
                None => Poll::Ready(()),
            }
        })
        .await;
        if core.process.shutting_down() {
            return;
        }
        // Compressing: the open item fills up to a block, for a while.
        let whole = !core.repl.compress.get() || {
            let closed = poll_fn(|cx| {
                let mut shard = core.shard.borrow_mut();
                match shard.repl_feed() {
                    Some(feed) if feed.items.is_empty() => {
                        feed.waker = Some(cx.waker().clone());
                        Poll::Pending
                    }
                    _ => Poll::Ready(false),
                }
            });
            futures_lite::future::or(closed, async {
                glommio::timer::sleep(FILL_WAIT).await;
                true
            })
            .await
        };
        ship(&core, whole).await;
    }
}

/// Ships what this shard's feed holds now (`whole`: the open item too);
/// resolves once the hub has it.
async fn ship(core: &Rc<Core>, whole: bool) {
    let (first, items) = match core.shard.borrow_mut().repl_feed() {
        Some(feed) if whole => feed.take(),
        Some(feed) => feed.take_closed(),
        None => return,
    };
    if items.is_empty() {
        return;
    }
    let count = items.len() as u64;
    let compression = codec(core);
    let shipped: Vec<Shipped> = items
        .into_iter()
        .map(|item| match item {
            FeedItem::Effects(bytes) => Shipped::Block(match compression {
                Some((c, level)) => Block::seal(&bytes, c, level),
                None => Block::raw(bytes),
            }),
            FeedItem::UnitPart { unit, bytes } => Shipped::UnitPart { unit, bytes },
            FeedItem::UnitEnd { unit, shards } => Shipped::UnitEnd { unit, shards },
            FeedItem::Cut(seq) => Shipped::Cut(seq),
        })
        .collect();
    let from = core.index;
    call(core, HUB, move |c| absorb(c, from, shipped)).await;
    core.repl.acked.set(first + count);
}

/// Every shard's items up to now: (shard's count to reach) for WAIT.
pub async fn flush_marks(core: &Rc<Core>) -> Vec<u64> {
    call_all(core, |c| match c.shard.borrow_mut().repl_feed() {
        Some(feed) => {
            feed.close();
            if let Some(w) = feed.waker.take() {
                w.wake();
            }
            feed.shipped + feed.items.len() as u64
        }
        None => 0,
    })
    .await
    .into_iter()
    .map(Option::unwrap_or_default)
    .collect()
}

/// Whether every shard's hub has what `marks` names.
pub async fn flushed(core: &Rc<Core>, marks: &[u64]) -> bool {
    let marks = marks.to_vec();
    call_all(core, move |c| c.repl.acked.get() >= marks[c.index]).await.into_iter().all(|ok| ok.unwrap_or(true))
}

/// Waits until every shard's items made so far are out of the merge (in
/// the stream), then runs `then` on the hub in that same step (WAIT's
/// target, FAILOVER's offset). `None`: no stream.
pub async fn when_drained<R, F>(core: &Rc<Core>, then: F) -> Option<R>
where
    R: Send + 'static,
    F: FnOnce(&Rc<Core>, &mut Primary) -> R + Send + Clone + 'static,
{
    let started = call(core, HUB, |c| c.repl.primary.borrow().is_some()).await.unwrap_or(false);
    if !started {
        return None;
    }
    let marks = flush_marks(core).await;
    while !flushed(core, &marks).await {
        glommio::timer::sleep(Duration::from_micros(200)).await;
    }
    // Taken in is not yet out: an item may wait in the merge behind a unit.
    loop {
        let (marks, then) = (marks.clone(), then.clone());
        let out = call(core, HUB, move |c| {
            let mut primary = c.repl.primary.borrow_mut();
            let Some(p) = primary.as_mut() else { return Some(None) };
            if marks.iter().enumerate().any(|(s, &m)| p.merger.out_before(s) < m) {
                return None;
            }
            Some(Some(then(c, p)))
        })
        .await
        .unwrap_or(Some(None));
        match out {
            Some(r) => return r,
            None => glommio::timer::sleep(Duration::from_micros(200)).await,
        }
    }
}

/// A promotion (REPLICAOF NO ONE, PSYNC FAILOVER): the stream starts anew
/// before any write is taken, under the new replication id, continuing
/// the primary's history (replid2) from the offset applied. Replicas of
/// the old stream are disconnected (Redis's replicationUnsetMaster): they
/// resync partially with the new id.
pub async fn restart_stream(core: &Rc<Core>) {
    let rebased = when_drained(core, |c, p| {
        let (replid2, offset) =
            crate::replication::replica::master_replid_offset(c).unwrap_or_else(|| ("0".repeat(40), p.backlog.end));
        p.replid = c.repl.replid.borrow_mut().get_or_insert_with(random_id).clone();
        p.second_offset = offset as i64 + 1;
        p.replid2 = replid2;
        p.backlog = super::backlog::Backlog::starting_at(offset);
        p.cuts.clear();
        for r in &mut p.replicas {
            r.killed = true;
            // SAFETY: as in `enforce_limits`.
            unsafe {
                libc::shutdown(r.fd, libc::SHUT_RDWR);
            }
            if let Some(w) = r.waker.take() {
                w.wake();
            }
        }
    })
    .await;
    if rebased.is_none() {
        ensure_started(core).await;
    }
}

/// The codec for this shard's blocks now, if any.
fn codec(core: &Core) -> Option<(shard::config::ReplCompression, i32)> {
    let config = core.config();
    let c = config.replica_output_buffer_compression;
    (core.repl.compress.get() && c != shard::config::ReplCompression::No)
        .then_some((c, config.replica_output_buffer_compression_level))
}

/// On the hub: a shard's items join the stream.
fn absorb(core: &Rc<Core>, shard: usize, items: Vec<Shipped>) {
    let compression = codec(core).unwrap_or((shard::config::ReplCompression::No, 0));
    let mut primary = core.repl.primary.borrow_mut();
    let Some(p) = primary.as_mut() else { return };
    p.absorb(shard, items, compression);
    enforce_limits(core, p);
}

/// Marks replicas over their output buffer limit (their feeders close
/// them) and trims the backlog.
pub fn enforce_limits(core: &Core, p: &mut Primary) {
    let (limit, backlog_size) = {
        let c = core.config();
        (c.client_output_buffer_limit.replica, c.repl_backlog_size)
    };
    let killed = p.enforce(&limit, backlog_size, Instant::now());
    let beyond_backlog = match p.replicas.is_empty() {
        true => 0,
        false => p.backlog.held().saturating_sub(backlog_size),
    };
    core.process.replicas_held.store(beyond_backlog, std::sync::atomic::Ordering::Relaxed);
    for (client, fd) in killed {
        log::warning(&format!("Client {client} scheduled to be closed ASAP for overcoming of output buffer limits."));
        // SAFETY: `fd` is the open socket of a live link (the link leaves
        // the list before its connection closes the socket).
        unsafe {
            libc::shutdown(fd, libc::SHUT_RDWR);
        }
    }
}

/// Replicas streaming that sent no ACK for `timeout` are cut off, as
/// Redis's replicationCron does.
fn drop_silent(p: &mut Primary, timeout: Duration) {
    for r in p.replicas.iter_mut().filter(|r| r.loaded && !r.killed && r.ack_at.elapsed() > timeout) {
        log::warning(&format!("Disconnecting timedout replica (streaming sync): {}:{}", r.ip, r.listening_port));
        r.killed = true;
        // SAFETY: as in `enforce_limits`.
        unsafe {
            libc::shutdown(r.fd, libc::SHUT_RDWR);
        }
    }
}

/// Turns compression of new blocks on every shard on while some replica
/// waits for its snapshot or loads it (until its first ACK after it).
pub async fn refresh_compression(core: &Rc<Core>) {
    let syncing = call(core, HUB, |c| {
        c.repl.primary.borrow().as_ref().is_some_and(|p| p.replicas.iter().any(|r| !r.loaded && !r.killed))
    })
    .await
    .unwrap_or(false);
    call_all(core, move |c| c.repl.compress.set(syncing)).await;
}

/// The hub's timer: a PING into the stream every repl-ping-replica-period
/// (replicas time out on silence), soft limits, and the backlog's TTL.
async fn cron(core: Rc<Core>) {
    let mut last_ping = Instant::now();
    while !core.process.shutting_down() {
        glommio::timer::sleep(Duration::from_millis(100)).await;
        let (period, ttl) = {
            let c = core.config();
            (c.repl_ping_replica_period, c.repl_backlog_ttl)
        };
        let max_lag = core.config().min_replicas_max_lag;
        let mut primary = core.repl.primary.borrow_mut();
        let Some(p) = primary.as_mut() else { return };
        let good = p.good_replicas(max_lag) as u64;
        if good != core.repl.good_replicas.get() {
            core.repl.good_replicas.set(good);
            let all = core.clone();
            glommio::spawn_local(async move {
                call_all(&all, move |c| c.repl.good_replicas.set(good)).await;
            })
            .detach();
        }
        // Not while a failover waits for a replica to reach the offset.
        let failing_over = core.repl.failover.borrow().phase == Phase::WaitForSync;
        if !p.replicas.is_empty() && !failing_over && last_ping.elapsed() >= Duration::from_secs(period) {
            last_ping = Instant::now();
            p.append(Block::raw(b"*1\r\n$4\r\nPING\r\n".to_vec()));
        }
        enforce_limits(&core, p);
        drop_silent(p, Duration::from_secs(core.config().repl_timeout));
        if p.replicas.is_empty() {
            let since = *p.alone_since.get_or_insert_with(Instant::now);
            if ttl > 0 && since.elapsed() >= Duration::from_secs(ttl) && p.backlog.histlen() > 0 {
                p.backlog.trim(0, None);
                log::notice(&format!("Replication backlog freed after {ttl} seconds without connected replicas."));
            }
        } else {
            p.alone_since = None;
        }
    }
}
