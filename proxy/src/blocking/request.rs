//! What a blocking pop asks its keys' owner for, and the waiters an owner
//! keeps: plain data, held by `Core` and carried by the mesh.

use crate::coordinator::locks::UnitId;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

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
    /// XREAD/XREADGROUP BLOCK: the read and each key's resolved start.
    XRead(Arc<XReadWait>),
    /// XREAD's notify mode: report that a key has entries past its start.
    NotifyStream(Arc<XReadWait>),
}

/// A blocked XREAD/XREADGROUP: the parsed read and where each key starts
/// (`$` resolved when it blocked).
#[derive(Debug)]
pub struct XReadWait {
    pub read: shard::commands::stream::read::XRead,
    pub starts: Vec<(Vec<u8>, shard::commands::stream::read::From)>,
}

impl XReadWait {
    pub fn start_of(&self, key: &[u8]) -> Option<shard::commands::stream::read::From> {
        self.starts.iter().find(|(k, _)| k == key).map(|(_, f)| *f)
    }
}

impl BlockOp {
    /// Whether the op waits for a sorted set (else a list).
    pub(crate) fn wants_zset(&self) -> bool {
        matches!(self, BlockOp::ZPop { .. } | BlockOp::ZMPop { .. } | BlockOp::Notify { zset: true })
    }

    pub(crate) fn is_notify(&self) -> bool {
        matches!(self, BlockOp::Notify { .. } | BlockOp::NotifyStream(_))
    }

    /// The same wait, reduced to being told that a key has data.
    pub fn notify(&self) -> BlockOp {
        match self {
            BlockOp::XRead(w) | BlockOp::NotifyStream(w) => BlockOp::NotifyStream(w.clone()),
            _ => BlockOp::Notify { zset: self.wants_zset() },
        }
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
    /// Keys made ready while a coordinator unit held them (a script holding
    /// every shard pushed to them): served when a unit lets go here.
    pub(crate) held: Vec<(usize, Vec<u8>)>,
    /// How many runs on this core hold serving back (an EXEC running inline,
    /// a script): ready keys wait until the last of them ends.
    pub(crate) holds: u32,
}

impl Waiters {
    pub fn len(&self) -> usize {
        self.waiters.len()
    }

    pub fn is_empty(&self) -> bool {
        self.waiters.is_empty()
    }
}
