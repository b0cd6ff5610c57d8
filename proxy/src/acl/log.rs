//! ACL LOG: denied commands, keys and failed AUTHs, as Redis 7.0's
//! `ACLLog`. Each core keeps the entries of its own connections; ACL LOG
//! gathers them, newest first.

use std::collections::VecDeque;

/// Similar entries within this many ms are counted as one.
const GROUPING_MS: u64 = 60_000;

#[derive(Clone, Debug)]
pub struct Entry {
    pub count: u64,
    /// "command", "key", "channel" or "auth".
    pub reason: &'static str,
    /// "toplevel", "multi" or "lua".
    pub context: &'static str,
    pub object: Vec<u8>,
    pub username: Vec<u8>,
    /// Unix ms of the last occurrence.
    pub ctime: u64,
    /// Unix µs of the last occurrence: orders the cores' entries, which
    /// often share a millisecond.
    pub at_us: u64,
    /// CLIENT LIST line of the last client.
    pub client_info: String,
}

impl Entry {
    /// One occurrence, now.
    pub fn now(
        reason: &'static str,
        context: &'static str,
        object: Vec<u8>,
        username: Vec<u8>,
        client_info: String,
    ) -> Entry {
        let at_us =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64);
        Entry { count: 1, reason, context, object, username, ctime: at_us / 1000, at_us, client_info }
    }
}

#[derive(Default)]
pub struct AclLog {
    /// Newest first.
    pub entries: VecDeque<Entry>,
}

impl AclLog {
    /// `addACLLogEntry`: bumps a similar recent entry (among the newest 10)
    /// or adds one, keeping at most `max_len`.
    pub fn add(&mut self, entry: Entry, max_len: usize) {
        let similar = self.entries.iter().take(10).position(|e| {
            e.reason == entry.reason
                && e.context == entry.context
                && e.ctime.abs_diff(entry.ctime) <= GROUPING_MS
                && e.object == entry.object
                && e.username == entry.username
        });
        match similar {
            Some(i) => {
                let mut e = self.entries.remove(i).unwrap_or_else(|| entry.clone());
                e.count += 1;
                e.ctime = entry.ctime;
                e.at_us = entry.at_us;
                e.client_info = entry.client_info;
                self.entries.push_front(e);
            }
            None => self.entries.push_front(entry),
        }
        self.entries.truncate(max_len);
    }
}
