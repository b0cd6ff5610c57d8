//! LATENCY GRAPH's ASCII sparkline (Redis's sparkline.c and
//! latencyCommandGenSparkeline) and LATENCY DOCTOR's report
//! (createLatencyReport), with Redis's wording.

use shard::config::AppendFsync;
use shard::observe::latency::Series;
use shard::Config;
use std::fmt::Write;

const GRAPH_COLS: usize = 80;
const CHARSET_FILL: &[u8] = b"_o#";

/// A sparkline's samples: value and label.
struct Sequence {
    samples: Vec<(f64, String)>,
    min: f64,
    max: f64,
}

impl Sequence {
    fn add(&mut self, value: f64, label: String) {
        if self.samples.is_empty() {
            self.min = value;
            self.max = value;
        } else if value < self.min {
            self.min = value;
        } else if value > self.max {
            self.max = value;
        }
        self.samples.push((value, label));
    }

    /// sparklineRenderRange with SPARKLINE_FILL, 4 rows.
    fn render_range(&self, out: &mut String, rows: usize, offset: usize, len: usize) {
        let charset_len = CHARSET_FILL.len() as i64;
        let mut relmax = self.max - self.min;
        if relmax == 0.0 {
            relmax = 1.0;
        }
        let steps = charset_len * rows as i64;
        let labels = self.samples.iter().any(|(_, l)| !l.is_empty());
        let mut row = 0usize;
        loop {
            let mut any = false;
            let mut chars = vec![b' '; len];
            for (j, c) in chars.iter_mut().enumerate() {
                let (value, label) = &self.samples[j + offset];
                let relval = value - self.min;
                let mut step = (((relval * steps as f64) as i64) as f64 / relmax) as i64;
                step = step.clamp(0, steps - 1);
                if row < rows {
                    let charidx = step - ((rows - row - 1) as i64 * charset_len);
                    any = true;
                    if (0..charset_len).contains(&charidx) {
                        *c = CHARSET_FILL[charidx as usize];
                    } else if charidx >= charset_len {
                        *c = b'|';
                    }
                } else {
                    // One blank row between the graph and the labels.
                    if labels && row - rows < 1 {
                        any = true;
                        break;
                    }
                    let label_char = row - rows - 1;
                    if let Some(&b) = label.as_bytes().get(label_char) {
                        any = true;
                        *c = b;
                    }
                }
            }
            if !any {
                break;
            }
            row += 1;
            out.push_str(&String::from_utf8_lossy(&chars));
            out.push('\n');
        }
    }
}

fn now_secs() -> i64 {
    (shard::unix_ms() / 1000) as i64
}

/// LATENCY GRAPH's text.
pub fn graph(event: &str, ts: &Series) -> String {
    let mut seq = Sequence { samples: Vec::new(), min: 0.0, max: 0.0 };
    let (mut min, mut max) = (0u32, 0u32);
    let now = now_secs();
    for s in ts.in_order() {
        if seq.samples.is_empty() {
            (min, max) = (s.latency, s.latency);
        } else {
            max = max.max(s.latency);
            min = min.min(s.latency);
        }
        let elapsed = now - s.time as i64;
        let label = if elapsed < 60 {
            format!("{elapsed}s")
        } else if elapsed < 3600 {
            format!("{}m", elapsed / 60)
        } else if elapsed < 3600 * 24 {
            format!("{}h", elapsed / 3600)
        } else {
            format!("{}d", elapsed / (3600 * 24))
        };
        seq.add(s.latency as f64, label);
    }
    let mut out = format!("{event} - high {max} ms, low {min} ms (all time high {} ms)\n", ts.max);
    out.push_str(&"-".repeat(GRAPH_COLS));
    out.push('\n');
    let mut j = 0;
    while j < seq.samples.len() {
        let sublen = (seq.samples.len() - j).min(GRAPH_COLS);
        if j != 0 {
            out.push('\n');
        }
        seq.render_range(&mut out, 4, j, sublen);
        j += GRAPH_COLS;
    }
    out
}

/// analyzeLatencyForEvent: (samples, avg, mad, period).
fn analyze(ts: &Series) -> (u32, u32, u32, i64) {
    let samples: Vec<_> = ts.in_order().collect();
    if samples.is_empty() {
        return (0, 0, 0, 0);
    }
    let n = samples.len() as u64;
    let sum: u64 = samples.iter().map(|s| s.latency as u64).sum();
    let avg = (sum / n) as u32;
    let oldest = samples.iter().map(|s| s.time as i64).min().unwrap_or(0);
    let mut period = now_secs() - oldest;
    if period == 0 {
        period = 1;
    }
    let mad_sum: u64 = samples.iter().map(|s| (avg as i64 - s.latency as i64).unsigned_abs()).sum();
    (n as u32, avg, (mad_sum / n) as u32, period)
}

/// AnonHugePages of the process (Redis's THPGetAnonHugePagesSize).
fn anon_huge_pages() -> u64 {
    let Ok(text) = std::fs::read_to_string("/proc/self/smaps_rollup") else { return 0 };
    text.lines()
        .find_map(|l| l.strip_prefix("AnonHugePages:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or(0)
}

/// LATENCY DOCTOR's report for the merged events.
pub fn doctor(events: &[(&'static str, Series)], config: &Config) -> String {
    let threshold = config.latency_monitor_threshold;
    if events.is_empty() && threshold == 0 {
        return "I'm sorry, Dave, I can't do that. Latency monitoring is disabled in this Redis instance. You may use \"CONFIG SET latency-monitor-threshold <milliseconds>.\" in order to enable it. If we weren't in a deep space mission I'd suggest to take a look at https://redis.io/topics/latency-monitor.\n".into();
    }
    let mut report = String::new();
    let mut advices = 0;
    let mut advise = Advice::default();
    for (n, (event, ts)) in events.iter().enumerate() {
        if n == 0 {
            report.push_str(
                "Dave, I have observed latency spikes in this Redis instance. You don't mind talking about it, do you Dave?\n\n",
            );
        }
        let (samples, avg, mad, period) = analyze(ts);
        let _ = write!(
            report,
            "{}. {}: {} latency spikes (average {}ms, mean deviation {}ms, period {:.2} sec). Worst all time event {}ms.",
            n + 1,
            event,
            samples,
            avg,
            mad,
            period as f64 / samples as f64,
            ts.max
        );
        match event.to_ascii_lowercase().as_str() {
            "command" => {
                if config.slowlog_log_slower_than < 0 {
                    advise.slowlog_enabled = true;
                    advices += 1;
                } else if config.slowlog_log_slower_than / 1000 > threshold as i64 {
                    advise.slowlog_tuning = true;
                    advices += 1;
                }
                advise.slowlog_inspect = true;
                advise.large_objects = true;
                advices += 2;
            }
            "fast-command" => {
                advise.scheduler = true;
                advices += 1;
            }
            "aof-write-pending-fsync" => {
                advise.local_disk = true;
                advise.disk_contention = true;
                advise.ssd = true;
                advise.data_writeback = true;
                advices += 4;
            }
            "aof-write-active-child" => {
                advise.no_appendfsync = true;
                advise.data_writeback = true;
                advise.ssd = true;
                advices += 3;
            }
            "aof-write-alone" => {
                advise.local_disk = true;
                advise.data_writeback = true;
                advise.ssd = true;
                advices += 3;
            }
            "aof-fsync-always" => {
                advise.relax_fsync_policy = true;
                advices += 1;
            }
            "aof-fstat" | "rdb-unlink-temp-file" => {
                advise.disk_contention = true;
                advise.local_disk = true;
                advices += 2;
            }
            "aof-rewrite-diff-write" | "aof-rename" => {
                advise.write_load_info = true;
                advise.data_writeback = true;
                advise.ssd = true;
                advise.local_disk = true;
                advices += 4;
            }
            "expire-cycle" => {
                advise.hz = true;
                advise.large_objects = true;
                advices += 2;
            }
            "eviction-del" => {
                advise.large_objects = true;
                advices += 1;
            }
            "eviction-cycle" => {
                advise.mass_eviction = true;
                advices += 1;
            }
            _ => {}
        }
        report.push('\n');
    }
    if anon_huge_pages() > 0 {
        advise.disable_thp = true;
        advices += 1;
    }
    if events.is_empty() && advices == 0 {
        report.push_str("Dave, no latency spike was observed during the lifetime of this Redis instance, not in the slightest bit. I honestly think you ought to sit down calmly, take a stress pill, and think things over.\n");
    } else if !events.is_empty() && advices == 0 {
        report.push_str("\nWhile there are latency events logged, I'm not able to suggest any easy fix. Please use the Redis community to get some help, providing this report in your help request.\n");
    } else {
        advise.write(&mut report, config);
    }
    report
}

#[derive(Default)]
struct Advice {
    slowlog_enabled: bool,
    slowlog_tuning: bool,
    slowlog_inspect: bool,
    disk_contention: bool,
    scheduler: bool,
    data_writeback: bool,
    no_appendfsync: bool,
    local_disk: bool,
    ssd: bool,
    write_load_info: bool,
    hz: bool,
    large_objects: bool,
    mass_eviction: bool,
    relax_fsync_policy: bool,
    disable_thp: bool,
}

impl Advice {
    fn write(&self, report: &mut String, config: &Config) {
        let threshold_us = config.latency_monitor_threshold.saturating_mul(1000);
        report.push_str("\nI have a few advices for you:\n\n");
        if self.slowlog_enabled {
            let _ = writeln!(report, "- There are latency issues with potentially slow commands you are using. Try to enable the Slow Log Redis feature using the command 'CONFIG SET slowlog-log-slower-than {threshold_us}'. If the Slow log is disabled Redis is not able to log slow commands execution for you.");
        }
        if self.slowlog_tuning {
            let _ = writeln!(report, "- Your current Slow Log configuration only logs events that are slower than your configured latency monitor threshold. Please use 'CONFIG SET slowlog-log-slower-than {threshold_us}'.");
        }
        if self.slowlog_inspect {
            report.push_str("- Check your Slow Log to understand what are the commands you are running which are too slow to execute. Please check https://redis.io/commands/slowlog for more information.\n");
        }
        if self.scheduler {
            report.push_str("- The system is slow to execute Redis code paths not containing system calls. This usually means the system does not provide Redis CPU time to run for long periods. You should try to:\n  1) Lower the system load.\n  2) Use a computer / VM just for Redis if you are running other software in the same system.\n  3) Check if you have a \"noisy neighbour\" problem.\n  4) Check with 'redis-cli --intrinsic-latency 100' what is the intrinsic latency in your system.\n  5) Check if the problem is allocator-related by recompiling Redis with MALLOC=libc, if you are using Jemalloc. However this may create fragmentation problems.\n");
        }
        if self.local_disk {
            report.push_str("- It is strongly advised to use local disks for persistence, especially if you are using AOF. Remote disks provided by platform-as-a-service providers are known to be slow.\n");
        }
        if self.ssd {
            report.push_str("- SSD disks are able to reduce fsync latency, and total time needed for snapshotting and AOF log rewriting (resulting in smaller memory usage). With extremely high write load SSD disks can be a good option. However Redis should perform reasonably with high load using normal disks. Use this advice as a last resort.\n");
        }
        if self.data_writeback {
            report.push_str("- Mounting ext3/4 filesystems with data=writeback can provide a performance boost compared to data=ordered, however this mode of operation provides less guarantees, and sometimes it can happen that after a hard crash the AOF file will have a half-written command at the end and will require to be repaired before Redis restarts.\n");
        }
        if self.disk_contention {
            report.push_str("- Try to lower the disk contention. This is often caused by other disk intensive processes running in the same computer (including other Redis instances).\n");
        }
        if self.no_appendfsync {
            report.push_str("- Assuming from the point of view of data safety this is viable in your environment, you could try to enable the 'no-appendfsync-on-rewrite' option, so that fsync will not be performed while there is a child rewriting the AOF file or producing an RDB file (the moment where there is high disk contention).\n");
        }
        if self.relax_fsync_policy && config.appendfsync == AppendFsync::Always {
            report.push_str("- Your fsync policy is set to 'always'. It is very hard to get good performances with such a setup, if possible try to relax the fsync policy to 'onesec'.\n");
        }
        if self.write_load_info {
            report.push_str("- Latency during the AOF atomic rename operation or when the final difference is flushed to the AOF file at the end of the rewrite, sometimes is caused by very high write load, causing the AOF buffer to get very large. If possible try to send less commands to accomplish the same work, or use Lua scripts to group multiple operations into a single EVALSHA call.\n");
        }
        if self.hz && config.hz < 100 {
            report.push_str("- In order to make the Redis keys expiring process more incremental, try to set the 'hz' configuration parameter to 100 using 'CONFIG SET hz 100'.\n");
        }
        if self.large_objects {
            report.push_str("- Deleting, expiring or evicting (because of maxmemory policy) large objects is a blocking operation. If you have very large objects that are often deleted, expired, or evicted, try to fragment those objects into multiple smaller objects.\n");
        }
        if self.mass_eviction {
            report.push_str("- Sudden changes to the 'maxmemory' setting via 'CONFIG SET', or allocation of large objects via sets or sorted sets intersections, STORE option of SORT, Redis Cluster large keys migrations (RESTORE command), may create sudden memory pressure forcing the server to block trying to evict keys. \n");
        }
        if self.disable_thp {
            report.push_str("- I detected a non zero amount of anonymous huge pages used by your process. This creates very serious latency events in different conditions, especially when Redis is persisting on disk. To disable THP support use the command 'echo never > /sys/kernel/mm/transparent_hugepage/enabled', make sure to also add it into /etc/rc.local so that the command will be executed again after a reboot. Note that even if you have already disabled THP, you still need to restart the Redis process to get rid of the huge pages already created.\n");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparkline_as_redis_draws_it() {
        let mut seq = Sequence { samples: Vec::new(), min: 0.0, max: 0.0 };
        for (v, l) in [(1.0, "3s"), (5.0, "2s"), (12.0, "1s")] {
            seq.add(v, l.into());
        }
        let mut out = String::new();
        seq.render_range(&mut out, 4, 0, 3);
        assert_eq!(out, "  #\n  |\n o|\n_||\n   \n321\nsss\n");
    }
}
