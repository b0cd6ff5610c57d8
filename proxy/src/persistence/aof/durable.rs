//! Replies wait for durability: with `appendfsync always` no reply to a
//! write leaves before the write is fsynced.

use crate::core::Core;
use crate::log;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

/// Waits until every effect logged on this core so far is written and
/// fdatasync'ed, with `appendfsync always`; returns at once otherwise. The
/// connection calls it before it sends replies, the mesh before it answers
/// another core, so no reply to a write leaves before the write is durable.
pub async fn durable(core: &Rc<Core>) {
    if !core.aof.enabled.get() {
        return;
    }
    let (policy, target) = {
        let shard = core.shard.borrow();
        (shard.config.appendfsync, shard.effects.as_ref().map_or(0, |e| e.end()))
    };
    if core.aof.acknowledged(policy, target) {
        return;
    }
    Durable { core: core.clone(), target }.await
}

/// Whether [`durable`] would wait now.
pub fn must_wait(core: &Core) -> bool {
    if !core.aof.enabled.get() {
        return false;
    }
    let shard = core.shard.borrow();
    shard.effects.as_ref().is_some_and(|e| !core.aof.acknowledged(shard.config.appendfsync, e.end()))
}

/// At shutdown: writes what is pending and fsyncs, whatever the policy.
pub async fn flush_at_exit(core: &Rc<Core>) {
    if !core.aof.enabled.get() {
        return;
    }
    let Ok(_permit) = core.aof.lock.acquire_permit(1).await else { return };
    let Some((bytes, _)) = core.aof.take_effects(&mut core.shard.borrow_mut()) else { return };
    let Some(file) = core.aof.file.borrow().clone() else { return };
    let len = bytes.len() as u64;
    if len > 0 {
        match file.write_at(bytes, core.aof.pos.get()).await {
            Ok(n) if n as u64 == len => core.aof.wrote(len),
            _ => log::warning("Error writing to the AOF file at shutdown"),
        }
    }
    if let Err(e) = file.fdatasync().await {
        log::warning(&format!("Can't persist the AOF at shutdown: {e}"));
    }
}

struct Durable {
    core: Rc<Core>,
    target: u64,
}

impl Future for Durable {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let policy = self.core.config().appendfsync;
        if self.core.aof.acknowledged(policy, self.target) {
            return Poll::Ready(());
        }
        self.core.aof.waiters.borrow_mut().push(cx.waker().clone());
        Poll::Pending
    }
}
