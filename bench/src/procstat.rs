//! Server CPU time from `/proc/<pid>/stat` (utime + stime of all the
//! process's threads), sampled at the edges of the measured window so that
//! every throughput figure can carry the server's CPU time per operation.

use serde::Serialize;
use std::io;
use std::time::{Duration, Instant};

/// Clock ticks per second of `/proc/<pid>/stat` times (`getconf CLK_TCK`).
pub fn clock_ticks_per_sec() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 {
        hz as u64
    } else {
        100
    }
}

/// utime + stime in clock ticks from the text of `/proc/<pid>/stat`. The
/// command name (field 2) may hold spaces and parentheses, so fields are
/// counted from the last `)`.
pub fn parse_stat(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace().skip(11); // fields 3..=13
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// utime + stime of process `pid`, in clock ticks.
pub fn cpu_ticks(pid: u32) -> io::Result<u64> {
    let path = format!("/proc/{pid}/stat");
    let text = std::fs::read_to_string(&path)?;
    parse_stat(&text).ok_or_else(|| io::Error::other(format!("unexpected contents of {path}")))
}

/// Samples the summed CPU time of a set of server processes.
#[derive(Debug, Clone)]
pub struct CpuSampler {
    pids: Vec<u32>,
    hz: u64,
}

#[derive(Debug, Clone, Copy)]
pub struct CpuSample {
    pub at: Instant,
    pub ticks: u64,
}

/// Server CPU time over a window: `cpu` seconds used in `window` of wall time.
#[derive(Debug, Clone, Copy)]
pub struct CpuWindow {
    pub window: Duration,
    pub cpu_s: f64,
}

impl CpuSampler {
    /// Fails at once if a process cannot be read, so a typo in a pid is
    /// reported before the run rather than after it.
    pub fn new(pids: &[u32]) -> io::Result<Self> {
        let s = CpuSampler { pids: pids.to_vec(), hz: clock_ticks_per_sec() };
        s.sample()?;
        Ok(s)
    }

    pub fn pids(&self) -> &[u32] {
        &self.pids
    }

    pub fn sample(&self) -> io::Result<CpuSample> {
        let mut ticks = 0;
        for &pid in &self.pids {
            ticks += cpu_ticks(pid).map_err(|e| io::Error::other(format!("server pid {pid}: {e}")))?;
        }
        Ok(CpuSample { at: Instant::now(), ticks })
    }

    pub fn window(&self, from: CpuSample, to: CpuSample) -> CpuWindow {
        CpuWindow {
            window: to.at.saturating_duration_since(from.at),
            cpu_s: to.ticks.saturating_sub(from.ticks) as f64 / self.hz as f64,
        }
    }
}

/// The JSON form: CPU time of the server processes over the measured window.
#[derive(Debug, Clone, Serialize)]
pub struct ServerCpu {
    pub pids: Vec<u32>,
    /// Wall time between the two samples (the measured window).
    pub window_s: f64,
    /// utime + stime of all the server processes over the window.
    pub cpu_s: f64,
    /// cpu_s / window_s: how many cores the server kept busy.
    pub cores_busy: f64,
    /// Server CPU microseconds per completed request (cores_busy / ops_per_sec).
    pub us_per_op: f64,
}

impl ServerCpu {
    pub fn new(pids: &[u32], w: CpuWindow, ops_per_sec: f64) -> Self {
        let secs = w.window.as_secs_f64();
        let cores_busy = if secs > 0.0 { w.cpu_s / secs } else { 0.0 };
        ServerCpu {
            pids: pids.to_vec(),
            window_s: secs,
            cpu_s: w.cpu_s,
            cores_busy,
            us_per_op: if ops_per_sec > 0.0 { cores_busy * 1e6 / ops_per_sec } else { 0.0 },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_count_from_the_last_parenthesis() {
        let line = "4760 (odd) name)) S 1 4760 4760 0 -1 4194560 1130 0 0 0 17 4 0 0 20 0 4 0 5 1 2";
        assert_eq!(parse_stat(line), Some(21));
        assert_eq!(parse_stat("12 (x) S 1"), None);
    }

    #[test]
    fn own_process_is_readable() {
        let s = CpuSampler::new(&[std::process::id()]).unwrap();
        let a = s.sample().unwrap();
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let b = s.sample().unwrap();
        let w = s.window(a, b);
        assert!(w.cpu_s >= 0.0 && w.window >= Duration::ZERO);
        let cpu = ServerCpu::new(s.pids(), w, 1000.0);
        assert!(cpu.us_per_op >= 0.0);
        assert!(CpuSampler::new(&[u32::MAX]).is_err());
    }
}
