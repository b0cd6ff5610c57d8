//! What a blocking pop asks its keys' owner for, and the waiters an owner
//! keeps: plain data, held by `Core` and carried by the mesh.

use crate::coordinator::locks::UnitId;
use std::collections::{HashMap, VecDeque};

/// What a waiter does when one of its keys gets data.
#[derive(Clone, Debug)]
pub enum BlockOp {
    /// BLPOP/BRPOP: `[key, element]`.
    Pop { from_head: bool },
    /// BLMOVE/BRPOPLPUSH: move one element to `dst` (on `dst_shard`),
    /// replying with it.
    Move { dst: Vec<u8>, dst_shard: usize, from_head: bool, to_head: bool },
    /// BLMPOP: `[key, [elements]]`.
    MPop { from_head: bool, count: usize },
    /// BZPOPMIN/BZPOPMAX: `[key, member, score]`.
    ZPop { max: bool },
    /// BZMPOP: `[key, [[member, score], ...]]`.
    ZMPop { max: bool, count: usize },
    /// Only report that a key has data (keys on several shards).
    Notify { zset: bool },
}

impl BlockOp {
    /// Whether the op waits for a sorted set (else a list).
    pub(crate) fn wants_zset(&self) -> bool {
        matches!(self, BlockOp::ZPop { .. } | BlockOp::ZMPop { .. } | BlockOp::Notify { zset: true })
    }

    /// The same wait, reduced to being told that a key has data.
    pub fn notify(&self) -> BlockOp {
        BlockOp::Notify { zset: self.wants_zset() }
    }
}

pub struct BlockRequest {
    pub id: u64,
    /// Core of the blocked connection, and the ticket it awaits there.
    pub origin: usize,
    pub ticket: u32,
    pub db: usize,
    pub resp3: bool,
    pub keys: Vec<Vec<u8>>,
    pub op: BlockOp,
    /// The coordinator unit the pop runs in (inside EXEC), if any.
    pub unit: Option<UnitId>,
}

/// The waiters this core owns, by key, in blocking order.
#[derive(Default)]
pub struct Waiters {
    pub(crate) by_key: HashMap<(usize, Vec<u8>), VecDeque<u64>>,
    pub(crate) waiters: HashMap<u64, BlockRequest>,
}

impl Waiters {
    pub fn len(&self) -> usize {
        self.waiters.len()
    }

    pub fn is_empty(&self) -> bool {
        self.waiters.is_empty()
    }
}
