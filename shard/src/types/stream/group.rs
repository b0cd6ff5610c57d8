//! Consumer groups: the last delivered ID, the read counter, the pending
//! entries list (PEL, by ID) and the consumers, each with its own PEL.
//! A pending entry names its consumer; the consumer's PEL holds the IDs.

use super::StreamId;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// `SCG_INVALID_ENTRIES_READ`.
pub const INVALID_ENTRIES_READ: i64 = -1;

#[derive(Clone, Debug, PartialEq)]
pub struct Nack {
    pub delivery_time: u64,
    pub delivery_count: u64,
    /// Its consumer's name; `None` only between XCLAIM FORCE's creation and
    /// its assignment.
    pub consumer: Option<Arc<[u8]>>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Consumer {
    pub name: Arc<[u8]>,
    pub seen_time: u64,
    pub pel: BTreeSet<StreamId>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Group {
    pub last_id: StreamId,
    pub entries_read: i64,
    pub pel: BTreeMap<StreamId, Nack>,
    pub consumers: BTreeMap<Arc<[u8]>, Consumer>,
}

impl Group {
    pub fn new(last_id: StreamId, entries_read: i64) -> Group {
        Group { last_id, entries_read, pel: BTreeMap::new(), consumers: BTreeMap::new() }
    }

    /// Creates consumer `name` (`false`: it existed).
    pub fn create_consumer(&mut self, name: &[u8], now: u64) -> bool {
        if self.consumers.contains_key(name) {
            return false;
        }
        let name: Arc<[u8]> = name.into();
        self.consumers.insert(name.clone(), Consumer { name, seen_time: now, pel: BTreeSet::new() });
        true
    }

    /// Deletes consumer `name` and its pending entries; their number.
    pub fn delete_consumer(&mut self, name: &[u8]) -> Option<usize> {
        let c = self.consumers.remove(name)?;
        for id in &c.pel {
            self.pel.remove(id);
        }
        Some(c.pel.len())
    }

    /// Removes a pending entry from the group and its consumer.
    pub fn ack(&mut self, id: StreamId) -> bool {
        let Some(nack) = self.pel.remove(&id) else { return false };
        if let Some(c) = nack.consumer.and_then(|n| self.consumers.get_mut(&n)) {
            c.pel.remove(&id);
        }
        true
    }

    /// Gives pending entry `id` to consumer `name` (which exists), as
    /// XREADGROUP does for an entry delivered again: a fresh delivery.
    pub fn assign(&mut self, id: StreamId, name: &Arc<[u8]>, now: u64, fresh: bool) {
        let nack = self.pel.entry(id).or_insert(Nack { delivery_time: now, delivery_count: 1, consumer: None });
        if let Some(old) = nack.consumer.take() {
            if let Some(c) = self.consumers.get_mut(&old) {
                c.pel.remove(&id);
            }
        }
        if fresh {
            nack.delivery_time = now;
            nack.delivery_count = 1;
        }
        nack.consumer = Some(name.clone());
        if let Some(c) = self.consumers.get_mut(name) {
            c.pel.insert(id);
        }
    }

    pub fn heap_size(&self) -> usize {
        self.pel.len() * 64 + self.consumers.values().map(|c| 64 + c.name.len() + c.pel.len() * 24).sum::<usize>()
    }
}
