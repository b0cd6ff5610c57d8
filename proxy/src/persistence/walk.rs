//! The cooperative walk over a shard that saves and AOF rewrites share.

use crate::core::Core;
use std::time::{Duration, Instant};

/// One step of a snapshot walk into `out` (at most `max_bytes`, or one
/// segment when `rdb-key-save-delay` is set, then the pause for each key
/// it wrote: Redis's debugging delay, for tests that need a long save).
/// True when the walk is complete.
pub async fn walk_step(core: &Core, out: &mut Vec<u8>, max_bytes: usize, slice: Duration) -> bool {
    let delay = core.config().rdb_key_save_delay;
    if delay == 0 {
        return core.shard.borrow_mut().snapshot_step(out, max_bytes, Instant::now() + slice);
    }
    let (before, total) = core.shard.borrow().snapshot_progress();
    let done = core.shard.borrow_mut().snapshot_step(out, 1, Instant::now() + slice);
    // A finished walk has dropped its counts: it wrote the rest.
    let after = if done { total } else { core.shard.borrow().snapshot_progress().0 };
    let per_key =
        if delay > 0 { Duration::from_micros(delay as u64) } else { Duration::from_nanos(delay.unsigned_abs()) };
    let keys = after.saturating_sub(before).min(u32::MAX as u64) as u32;
    glommio::timer::sleep(per_key * keys).await;
    done
}
