//! A core's slow log (Redis's slowlog.c): entries of the commands that ran
//! for at least `slowlog-log-slower-than` µs, newest first, at most
//! `slowlog-max-len`. SLOWLOG GET merges every core's log by the time each
//! command finished.

use std::collections::VecDeque;
use std::time::Instant;

/// Redis's SLOWLOG_ENTRY_MAX_ARGC / SLOWLOG_ENTRY_MAX_STRING.
pub const MAX_ARGC: usize = 32;
pub const MAX_STRING: usize = 128;

#[derive(Clone, Debug)]
pub struct Entry {
    /// Unique over the process: this core's sequence interleaved with the
    /// other cores'.
    pub id: u64,
    /// Unix seconds when it was logged.
    pub time: i64,
    /// µs the command ran.
    pub duration: u64,
    /// The arguments as Redis keeps them: at most 32 (the last one says how
    /// many more there were), each cut at 128 bytes, secrets redacted.
    pub args: Vec<Vec<u8>>,
    /// "ip:port" of the client ("?:0" for a script's commands).
    pub peer: String,
    pub name: Vec<u8>,
    /// When the command finished, to order the cores' entries.
    pub at: Instant,
}

impl Entry {
    /// A slow command's entry, its id and client still to fill in.
    pub fn new<'a>(
        argc: usize,
        args: impl Iterator<Item = &'a [u8]>,
        redacted: &[usize],
        duration: u64,
        at: Instant,
    ) -> Entry {
        Entry {
            id: 0,
            time: (crate::unix_ms() / 1000) as i64,
            duration,
            args: entry_args(argc, args, redacted),
            peer: String::new(),
            name: Vec::new(),
            at,
        }
    }
}

/// An entry's arguments (slowlogCreateEntry); `redacted` lists the
/// positions Redis shows as "(redacted)".
pub fn entry_args<'a>(argc: usize, args: impl Iterator<Item = &'a [u8]>, redacted: &[usize]) -> Vec<Vec<u8>> {
    let kept = argc.min(MAX_ARGC);
    let mut out = Vec::with_capacity(kept);
    for (j, a) in args.take(kept).enumerate() {
        if kept != argc && j == kept - 1 {
            out.push(format!("... ({} more arguments)", argc - kept + 1).into_bytes());
        } else if redacted.contains(&j) {
            out.push(b"(redacted)".to_vec());
        } else if a.len() > MAX_STRING {
            let mut s = a[..MAX_STRING].to_vec();
            s.extend_from_slice(format!("... ({} more bytes)", a.len() - MAX_STRING).as_bytes());
            out.push(s);
        } else {
            out.push(a.to_vec());
        }
    }
    out
}

#[derive(Default)]
pub struct SlowLog {
    /// Newest first (by `at`).
    pub entries: VecDeque<Entry>,
    /// Entries logged here so far (the id sequence).
    seq: u64,
}

impl SlowLog {
    /// The next id of core `index` of `count`.
    pub fn next_id(&mut self, index: usize, count: usize) -> u64 {
        let id = self.seq * count as u64 + index as u64;
        self.seq += 1;
        id
    }

    /// Adds an entry in finishing order (one that ran on another core may
    /// arrive after a later local one) and trims to `max_len`.
    pub fn push(&mut self, entry: Entry, max_len: usize) {
        let at = self.entries.iter().position(|e| e.at <= entry.at).unwrap_or(self.entries.len());
        self.entries.insert(at, entry);
        self.entries.truncate(max_len);
    }

    pub fn reset(&mut self) {
        self.entries.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_cut_as_redis_cuts_them() {
        let long = vec![b'x'; 130];
        let args: Vec<&[u8]> = vec![b"set", b"k", &long];
        let out = entry_args(3, args.into_iter(), &[]);
        assert_eq!(out[2], [vec![b'x'; 128], b"... (2 more bytes)".to_vec()].concat());
        let many: Vec<Vec<u8>> = (0..40).map(|i| i.to_string().into_bytes()).collect();
        let out = entry_args(40, many.iter().map(Vec::as_slice), &[1]);
        assert_eq!(out.len(), 32);
        assert_eq!(out[1], b"(redacted)");
        assert_eq!(out[31], b"... (9 more arguments)");
        assert_eq!(out[30], b"30");
    }

    #[test]
    fn newest_first_and_trimmed() {
        let mut log = SlowLog::default();
        let t0 = Instant::now();
        let entry =
            |id, at| Entry { id, time: 0, duration: 0, args: Vec::new(), peer: String::new(), name: Vec::new(), at };
        log.push(entry(0, t0), 10);
        log.push(entry(1, t0 + std::time::Duration::from_micros(5)), 10);
        log.push(entry(2, t0 + std::time::Duration::from_micros(2)), 10);
        assert_eq!(log.entries.iter().map(|e| e.id).collect::<Vec<_>>(), vec![1, 2, 0]);
        log.push(entry(3, t0 + std::time::Duration::from_micros(9)), 2);
        assert_eq!(log.entries.iter().map(|e| e.id).collect::<Vec<_>>(), vec![3, 1]);
        assert_eq!((log.next_id(1, 3), log.next_id(1, 3)), (1, 4));
    }
}
