//! What operators observe of the commands a core runs, as Redis 7.0 keeps
//! it: per-command calls, time, rejections and failures (INFO
//! commandstats) with a latency histogram each (LATENCY HISTOGRAM, INFO
//! latencystats), error replies by code (INFO errorstats), the slow log and
//! the latency monitor's events. One `Observe` per core, plain data: the
//! proxy records each call where it ran and gathers the cores' parts.

pub mod hdr;
pub mod latency;
pub mod slowlog;

use crate::commands::{flags, numbered, CommandSpec};
use crate::config::Config;
use std::collections::BTreeMap;

/// Distinct error codes kept (Redis 7.2's ERROR_STATS_NUMBER; 7.0 has no
/// bound): codes past it are counted in the totals only.
pub const MAX_ERROR_CODES: usize = 128;

#[derive(Default, Clone)]
pub struct CommandStat {
    pub calls: u64,
    pub usec: u64,
    pub rejected: u64,
    pub failed: u64,
    /// Allocated at the first call recorded with latency-tracking on.
    pub histogram: Option<Box<hdr::Histogram>>,
}

pub struct Observe {
    /// Indexed by `CommandSpec::index`.
    pub commands: Vec<CommandStat>,
    /// Error replies by code ("ERR", "WRONGTYPE"...), sorted as Redis's rax.
    pub errors: BTreeMap<Vec<u8>, u64>,
    pub total_error_replies: u64,
    /// Errors replied to a primary (Redis also counts replicas and AOF).
    pub unexpected_error_replies: u64,
    pub slowlog: slowlog::SlowLog,
    pub latency: latency::Events,
    /// The last spec counted and its index: a pipeline of one command
    /// finds its counters without `CommandSpec::index`'s search.
    last: (usize, usize),
}

impl Default for Observe {
    fn default() -> Self {
        Observe {
            commands: vec![CommandStat::default(); numbered().len()],
            errors: BTreeMap::new(),
            total_error_replies: 0,
            unexpected_error_replies: 0,
            slowlog: Default::default(),
            latency: Default::default(),
            last: (0, usize::MAX),
        }
    }
}

/// Redis's error code of an error reply ("-WRONGTYPE Operation..." ->
/// "WRONGTYPE"): the word before the first space within 32 bytes, else ERR.
pub fn error_code(reply: &[u8]) -> &[u8] {
    let text = reply.strip_suffix(b"\r\n").unwrap_or(reply);
    let window = &text[..text.len().min(32)];
    match window.iter().position(|&b| b == b' ') {
        Some(sp) if sp > 0 => &window[1..sp],
        _ => b"ERR",
    }
}

/// Whether an encoded reply is an error.
#[inline]
pub fn is_error(reply: &[u8]) -> bool {
    reply.first() == Some(&b'-')
}

impl Observe {
    /// Redis's afterErrorReply: one error reply, counted by its code.
    pub fn error(&mut self, reply: &[u8]) {
        self.total_error_replies += 1;
        let code = error_code(reply);
        let room = self.errors.len() < MAX_ERROR_CODES;
        match self.errors.get_mut(code) {
            Some(n) => *n += 1,
            None if room => {
                self.errors.insert(code.to_vec(), 1);
            }
            None => {}
        }
    }

    /// A command refused before it ran (Redis's rejectCommand): its
    /// rejected_calls and the error.
    pub fn rejected(&mut self, spec: Option<&CommandSpec>, reply: &[u8]) {
        if let Some(c) = spec.and_then(|s| self.commands.get_mut(s.index())) {
            c.rejected += 1;
        }
        if is_error(reply) {
            self.error(reply);
        }
    }

    /// A command that ran (Redis's call()): its calls and time, the
    /// "command"/"fast-command" latency event, a failure when it replied an
    /// error (counted unless `error_counted`: a script's error raised by a
    /// command it called). Unless it `blocked`, its histogram sample too.
    /// True when the slow log wants it (the caller builds the entry, see
    /// `log_slow`).
    #[inline]
    pub fn ran(
        &mut self,
        config: &Config,
        spec: &CommandSpec,
        usec: u64,
        reply: &[u8],
        error_counted: bool,
        blocked: bool,
    ) -> bool {
        let Some(c) = self.stat(spec) else { return false };
        c.calls += 1;
        c.usec += usec;
        if is_error(reply) {
            c.failed += 1;
            if !error_counted {
                self.error(reply);
            }
        }
        let event = if spec.has_flag(flags::FAST) { "fast-command" } else { "command" };
        self.latency.add_if_needed(config.latency_monitor_threshold, event, usec / 1000);
        !blocked && self.finished(config, spec, usec)
    }

    /// `spec`'s counters.
    #[inline]
    fn stat(&mut self, spec: &CommandSpec) -> Option<&mut CommandStat> {
        let at = spec as *const CommandSpec as usize;
        if self.last.0 != at {
            self.last = (at, spec.index());
        }
        self.commands.get_mut(self.last.1)
    }

    /// The part of a split command run here: its time (the command is
    /// counted once, where it was split).
    #[inline]
    pub fn part(&mut self, spec: &CommandSpec, usec: u64) {
        if let Some(c) = self.stat(spec) {
            c.usec += usec;
        }
    }

    /// A blocked command served (Redis's updateStatsOnUnblock, without the
    /// wait): its histogram sample; true when the slow log wants it.
    pub fn unblocked(&mut self, config: &Config, spec: &CommandSpec, usec: u64) -> bool {
        self.finished(config, spec, usec)
    }

    #[inline]
    fn finished(&mut self, config: &Config, spec: &CommandSpec, usec: u64) -> bool {
        if config.latency_tracking {
            if let Some(c) = self.stat(spec) {
                c.histogram.get_or_insert_with(Default::default).record(usec.saturating_mul(1000) as i64);
            }
        }
        // EXEC is Redis's only CMD_SKIP_SLOWLOG command.
        let slower_than = config.slowlog_log_slower_than;
        slower_than >= 0 && usec >= slower_than as u64 && spec.name != "exec"
    }

    /// Logs a slow command: `entry` gets this core's next id.
    pub fn log_slow(&mut self, config: &Config, index: usize, count: usize, mut entry: slowlog::Entry) {
        entry.id = self.slowlog.next_id(index, count);
        self.slowlog.push(entry, config.slowlog_max_len.min(usize::MAX as u64) as usize);
    }

    /// CONFIG RESETSTAT: counters, errors and histograms (not the slow log
    /// nor the latency events, as Redis).
    pub fn reset_stats(&mut self) {
        for c in &mut self.commands {
            *c = CommandStat::default();
        }
        self.errors.clear();
        self.total_error_replies = 0;
        self.unexpected_error_replies = 0;
    }

    /// This core's counters for INFO: (index, calls, usec, rejected,
    /// failed) of every command with any, and the errors.
    pub fn counters(&self) -> Counters {
        Counters {
            commands: self
                .commands
                .iter()
                .enumerate()
                .filter(|(_, c)| c.calls != 0 || c.rejected != 0 || c.failed != 0)
                .map(|(i, c)| (i, [c.calls, c.usec, c.rejected, c.failed]))
                .collect(),
            errors: self.errors.iter().map(|(k, v)| (k.clone(), *v)).collect(),
            total_error_replies: self.total_error_replies,
            unexpected_error_replies: self.unexpected_error_replies,
        }
    }

    /// Copies of the histograms of `wanted` commands (all when `None`).
    pub fn histograms(&self, wanted: Option<&[usize]>) -> Vec<(usize, hdr::Histogram)> {
        self.commands
            .iter()
            .enumerate()
            .filter(|(i, _)| wanted.is_none_or(|w| w.contains(i)))
            .filter_map(|(i, c)| c.histogram.as_ref().map(|h| (i, (**h).clone())))
            .collect()
    }
}

/// One core's INFO counters; `merge` sums several.
#[derive(Default, Clone, Debug)]
pub struct Counters {
    /// (command index, [calls, usec, rejected_calls, failed_calls]).
    pub commands: Vec<(usize, [u64; 4])>,
    pub errors: Vec<(Vec<u8>, u64)>,
    pub total_error_replies: u64,
    pub unexpected_error_replies: u64,
}

impl Counters {
    pub fn merge<'a>(parts: impl IntoIterator<Item = &'a Counters>) -> Counters {
        let mut commands: BTreeMap<usize, [u64; 4]> = BTreeMap::new();
        let mut errors: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
        let mut sum = Counters::default();
        for p in parts {
            for (i, c) in &p.commands {
                let e = commands.entry(*i).or_default();
                for k in 0..4 {
                    e[k] += c[k];
                }
            }
            for (code, n) in &p.errors {
                *errors.entry(code.clone()).or_default() += n;
            }
            sum.total_error_replies += p.total_error_replies;
            sum.unexpected_error_replies += p.unexpected_error_replies;
        }
        sum.commands = commands.into_iter().collect();
        sum.errors = errors.into_iter().collect();
        sum
    }

    /// Redis's total_commands_processed: every call counted.
    pub fn calls(&self) -> u64 {
        self.commands.iter().map(|(_, c)| c[0]).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_codes() {
        assert_eq!(error_code(b"-ERR syntax error\r\n"), b"ERR");
        assert_eq!(error_code(b"-WRONGTYPE Operation against a key\r\n"), b"WRONGTYPE");
        assert_eq!(error_code(b"-NOSPACEHERE\r\n"), b"ERR");
        assert_eq!(error_code(b"-AVERYLONGCODETHATGOESPASTTHIRTYTWOBYTES x\r\n"), b"ERR");
    }

    #[test]
    fn counts_calls_failures_and_errors() {
        let config = Config::default();
        let mut o = Observe::default();
        let get = crate::commands::all().find(|c| c.name == "get").unwrap();
        assert!(!o.ran(&config, get, 3, b"$1\r\nx\r\n", false, false));
        assert!(o.ran(&config, get, 20_000, b"-WRONGTYPE Operation\r\n", false, false));
        o.rejected(Some(get), b"-ERR wrong number of arguments for 'get' command\r\n");
        o.rejected(None, b"-ERR unknown command 'x'\r\n");
        let c = o.counters();
        assert_eq!(c.commands, vec![(get.index(), [2, 20_003, 1, 1])]);
        assert_eq!(c.errors, vec![(b"ERR".to_vec(), 2), (b"WRONGTYPE".to_vec(), 1)]);
        assert_eq!(c.total_error_replies, 3);
        assert_eq!(o.commands[get.index()].histogram.as_ref().map(|h| h.total), Some(2));
        o.reset_stats();
        assert!(o.counters().commands.is_empty());
    }
}
