//! Keyspace notifications (`notify-keyspace-events`), Redis 7.0's classes
//! and events. A command raises its events on the shard where the change
//! happens, into this shard's [`Outbox`]; the proxy drains the outbox after
//! each command, batch or unit and publishes every event on
//! `__keyspace@<db>__:<key>` and/or `__keyevent@<db>__:<event>`.
//!
//! With the setting empty (the default) a raise point costs one test of
//! `Shard::notify_mask` and allocates nothing. `new` and `expired` happen
//! inside `Db` (a key added, a key whose time ran out); the database keeps
//! them in its own list and the shard moves them into the outbox, in order,
//! before the next event and after each command.

use crate::bytes::CompactBytes;
use crate::shard::Shard;

pub const KEYSPACE: u32 = 1 << 0; // K
pub const KEYEVENT: u32 = 1 << 1; // E
pub const GENERIC: u32 = 1 << 2; // g
pub const STRING: u32 = 1 << 3; // $
pub const LIST: u32 = 1 << 4; // l
pub const SET: u32 = 1 << 5; // s
pub const HASH: u32 = 1 << 6; // h
pub const ZSET: u32 = 1 << 7; // z
pub const EXPIRED: u32 = 1 << 8; // x
pub const EVICTED: u32 = 1 << 9; // e
pub const STREAM: u32 = 1 << 10; // t
/// `m`: excluded from `A`, as in Redis.
pub const KEY_MISS: u32 = 1 << 11;
pub const MODULE: u32 = 1 << 13; // d
pub const NEW: u32 = 1 << 14; // n
/// Not a class: a `Db` keeps its expired keys for CLIENT TRACKING's
/// invalidations (Redis's signalModifiedKey on expiry).
pub const TRACKED: u32 = 1 << 31;
pub const ALL: u32 = GENERIC | STRING | LIST | SET | HASH | ZSET | EXPIRED | EVICTED | STREAM | MODULE;

/// Redis's keyspaceEventsStringToFlags; `None` for a character that names
/// no class.
pub fn parse_flags(classes: &str) -> Option<u32> {
    classes.bytes().try_fold(0, |flags, c| {
        Some(
            flags
                | match c {
                    b'A' => ALL,
                    b'g' => GENERIC,
                    b'$' => STRING,
                    b'l' => LIST,
                    b's' => SET,
                    b'h' => HASH,
                    b'z' => ZSET,
                    b'x' => EXPIRED,
                    b'e' => EVICTED,
                    b'K' => KEYSPACE,
                    b'E' => KEYEVENT,
                    b't' => STREAM,
                    b'm' => KEY_MISS,
                    b'd' => MODULE,
                    b'n' => NEW,
                    _ => return None,
                },
        )
    })
}

/// Redis's keyspaceEventsFlagsToString: what CONFIG GET shows.
pub fn flags_to_string(flags: u32) -> String {
    let mut s = String::new();
    if flags & ALL == ALL {
        s.push('A');
    } else {
        for (bit, c) in [
            (GENERIC, 'g'),
            (STRING, '$'),
            (LIST, 'l'),
            (SET, 's'),
            (HASH, 'h'),
            (ZSET, 'z'),
            (EXPIRED, 'x'),
            (EVICTED, 'e'),
            (STREAM, 't'),
            (MODULE, 'd'),
            (NEW, 'n'),
        ] {
            if flags & bit != 0 {
                s.push(c);
            }
        }
    }
    for (bit, c) in [(KEYSPACE, 'K'), (KEYEVENT, 'E'), (KEY_MISS, 'm')] {
        if flags & bit != 0 {
            s.push(c);
        }
    }
    s
}

/// The classes that publish anything: none unless K or E is on (Redis
/// would build no channel), so a raise point tests one mask.
pub fn effective(flags: u32) -> u32 {
    if flags & (KEYSPACE | KEYEVENT) == 0 {
        0
    } else {
        flags
    }
}

/// One raised event, as the drain sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Event<'a> {
    pub db: usize,
    pub event: &'static str,
    pub key: &'a [u8],
}

/// Events raised on this shard since the proxy last drained it: keys in
/// one byte buffer, so a batch of events is two growing vectors.
#[derive(Default)]
pub struct Outbox {
    keys: Vec<u8>,
    events: Vec<(u32, &'static str, u32)>,
    /// The proxy's drain task, woken by the first event after a drain.
    pub waker: Option<std::task::Waker>,
}

impl Outbox {
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    pub fn len(&self) -> usize {
        self.events.len()
    }

    fn push(&mut self, db: usize, event: &'static str, key: &[u8]) {
        if self.events.is_empty() {
            if let Some(w) = self.waker.take() {
                w.wake();
            }
        }
        self.keys.extend_from_slice(key);
        self.events.push((db as u32, event, self.keys.len() as u32));
    }

    /// The events in the order they were raised.
    pub fn iter(&self) -> impl Iterator<Item = Event<'_>> {
        let mut start = 0;
        self.events.iter().map(move |&(db, event, end)| {
            let key = &self.keys[start as usize..end as usize];
            start = end;
            Event { db: db as usize, event, key }
        })
    }

    pub fn clear(&mut self) {
        self.keys.clear();
        self.events.clear();
        if self.keys.capacity() > 1 << 20 {
            self.keys = Vec::new();
            self.events = Vec::new();
        }
    }
}

/// What a `Db` raises itself (a key added, a key expired), kept until the
/// shard moves it into its outbox.
#[derive(Default)]
pub struct DbNotes {
    /// `NEW`, `EXPIRED` and/or `TRACKED` when on; 0 otherwise.
    pub mask: u32,
    pub pending: Vec<(&'static str, CompactBytes)>,
}

impl DbNotes {
    #[inline]
    pub fn new_key(&mut self, key: &[u8]) {
        if self.mask & NEW != 0 {
            self.pending.push(("new", CompactBytes::new(key)));
        }
    }

    #[inline]
    pub fn expired(&mut self, key: &[u8]) {
        if self.mask & (EXPIRED | TRACKED) != 0 {
            self.pending.push(("expired", CompactBytes::new(key)));
        }
    }
}

impl Shard {
    /// Raises `event` on `key` of `db` when its class is on (Redis's
    /// notifyKeyspaceEvent); one branch otherwise.
    #[inline]
    pub fn notify(&mut self, class: u32, event: &'static str, db: usize, key: &[u8]) {
        if self.notify_mask & class != 0 {
            self.raise(event, db, key);
        }
    }

    /// Puts an event raised elsewhere (a script's scratch shard) in this
    /// shard's outbox, whatever the classes.
    #[cold]
    pub fn raise(&mut self, event: &'static str, db: usize, key: &[u8]) {
        self.collect_db_notes();
        self.outbox.push(db, event, key);
    }

    /// `keymiss` for a read of a missing `key` (class `m`), checked before
    /// the read borrows the value: one branch when the class is off.
    #[inline]
    pub fn notify_miss(&mut self, db: usize, key: &[u8], now: u64) {
        if self.notify_mask & KEY_MISS != 0 && !self.dbs[db].contains(key, now) {
            self.raise("keymiss", db, key);
        }
    }

    /// Moves what the databases raised (`new`, `expired`) into the outbox,
    /// ahead of whatever is raised next; expired keys a tracking client
    /// read are invalidated (Redis: expiry is a modification).
    #[inline]
    pub fn collect_db_notes(&mut self) {
        if self.notify_mask & (NEW | EXPIRED) == 0 && self.tracking.is_none() {
            return;
        }
        let classes = self.notify_mask;
        // The command that found them expired is the current client's.
        let current = self.caller.id();
        for (i, db) in self.dbs.iter_mut().enumerate() {
            for (event, key) in db.notes.pending.drain(..) {
                if event == "expired" {
                    if let Some(table) = &mut self.tracking {
                        table.expired(&key, current);
                    }
                }
                let class = if event == "new" { NEW } else { EXPIRED };
                if classes & class != 0 {
                    self.outbox.push(i, event, &key);
                }
            }
        }
    }

    /// Events raised and not yet drained (after `collect_db_notes`).
    pub fn notifications(&mut self) -> &mut Outbox {
        self.collect_db_notes();
        &mut self.outbox
    }

    /// Copies the setting into the mask raise points test (after start and
    /// every CONFIG SET).
    pub(crate) fn apply_notify_config(&mut self) {
        let mask = effective(self.config.notify_keyspace_events);
        self.notify_mask = mask;
        let tracked = if self.tracking.is_some() { TRACKED } else { 0 };
        for db in &mut self.dbs {
            db.notes.mask = mask & (NEW | EXPIRED) | tracked;
            if db.notes.mask == 0 {
                db.notes.pending = Vec::new();
            }
        }
        if mask == 0 {
            self.outbox.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_round_trip_as_redis_prints_them() {
        let show = |s: &str| flags_to_string(parse_flags(s).unwrap());
        assert_eq!(show(""), "");
        assert_eq!(show("KEA"), "AKE");
        assert_eq!(show("Ex"), "xE");
        assert_eq!(show("Kg$lshzxetd"), "AK");
        assert_eq!(show("Am"), "Am");
        assert_eq!(show("nKE"), "nKE");
        assert_eq!(show("El$"), "$lE");
        assert_eq!(parse_flags("Q"), None);
        assert_eq!(effective(parse_flags("A").unwrap()), 0);
        assert_ne!(effective(parse_flags("Kg").unwrap()), 0);
    }
}
