//! WAIT numreplicas timeout: every write this client made before WAIT is
//! in the stream (each shard's feed shipped to the hub and out of the
//! merge), the replicas are
//! asked for an acknowledgement (REPLCONF GETACK * in the stream), and the
//! answer is how many acknowledged that far before the timeout.

use super::block::Block;
use super::hub::{when_drained, HUB};
use crate::coordinator::dispatch::call;
use crate::core::Core;
use std::rc::Rc;
use std::time::{Duration, Instant};

const GETACK: &[u8] = b"*3\r\n$8\r\nREPLCONF\r\n$6\r\nGETACK\r\n$1\r\n*\r\n";

/// Replicas that acknowledged this client's writes (`timeout_ms` 0: wait
/// for as long as it takes).
pub async fn wait(core: &Rc<Core>, wanted: u64, timeout_ms: u64) -> u64 {
    let deadline = (timeout_ms > 0).then(|| Instant::now() + Duration::from_millis(timeout_ms));
    let target = when_drained(core, |_, p| {
        let target = p.backlog.end;
        if p.replicas.iter().filter(|r| r.ack >= target).count() < p.replicas.len() {
            p.append(Block::raw(GETACK.to_vec()));
        }
        target
    })
    .await;
    let Some(target) = target else { return 0 };
    loop {
        let acked = call(core, HUB, move |c| {
            c.repl.primary.borrow().as_ref().map_or(0, |p| p.replicas.iter().filter(|r| r.ack >= target).count())
        })
        .await
        .unwrap_or(0) as u64;
        if acked >= wanted || deadline.is_some_and(|d| Instant::now() >= d) || core.process.shutting_down() {
            return acked;
        }
        glommio::timer::sleep(Duration::from_millis(2)).await;
    }
}
