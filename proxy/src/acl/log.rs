//! ACL LOG: denied commands, keys and failed AUTHs, as Redis 7.0's
//! `ACLLog`. Each core keeps the entries of its own connections; ACL LOG
//! merges them into the one list Redis would hold (`merge`).

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
    /// The cores' logs as one, grouped as Redis's single log groups them:
    /// every core's entries, oldest first, go through `add`'s grouping,
    /// counts summed (an entry stands for its group's events at its last
    /// time). Newest first, at most `max_len`.
    pub fn merge(parts: impl IntoIterator<Item = Entry>, max_len: usize) -> AclLog {
        let mut all: Vec<Entry> = parts.into_iter().collect();
        all.sort_by_key(|e| e.at_us);
        let mut log = AclLog::default();
        for e in all {
            log.add(e, max_len);
        }
        log
    }

    /// `addACLLogEntry`: bumps a similar recent entry (among the newest 10)
    /// by the entry's count or adds it, keeping at most `max_len`.
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
                e.count += entry.count;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn at(object: &str, client: &str, at_us: u64) -> Entry {
        let e = Entry::now("command", "toplevel", object.into(), b"u".to_vec(), client.into());
        Entry { at_us, ctime: at_us / 1000, ..e }
    }

    #[test]
    fn cores_entries_merge_into_redis_groups() {
        // Core A saw get, set, get; core B get, get (interleaved in time).
        let mut a = AclLog::default();
        let mut b = AclLog::default();
        a.add(at("get", "a1", 1_000), 128);
        b.add(at("get", "b1", 2_000), 128);
        a.add(at("set", "a2", 3_000), 128);
        a.add(at("get", "a3", 4_000), 128);
        b.add(at("get", "b2", 5_000), 128);
        assert_eq!(a.entries.len() + b.entries.len(), 3);
        let merged = AclLog::merge(a.entries.into_iter().chain(b.entries), 128);
        let got: Vec<(String, u64, String)> = merged
            .entries
            .iter()
            .map(|e| (String::from_utf8_lossy(&e.object).into_owned(), e.count, e.client_info.clone()))
            .collect();
        // One list: get x4 (the last client's info), set x1.
        assert_eq!(got, vec![("get".into(), 4, "b2".into()), ("set".into(), 1, "a2".into())]);
        // A minute apart: separate entries, as in Redis.
        let merged = AclLog::merge([at("get", "x", 0), at("get", "y", 61_000_000)], 128);
        assert_eq!(merged.entries.len(), 2);
        assert_eq!(AclLog::merge([at("a", "", 1), at("b", "", 2), at("c", "", 3)], 2).entries.len(), 2);
    }
}
