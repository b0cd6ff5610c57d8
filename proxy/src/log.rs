//! Redis-style log lines (`pid:M 22 Nov 2026 19:00:00.123 * message`) to
//! stdout or the configured log file. Only rare events are logged, never
//! per request.

use std::io::Write;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

#[derive(Clone, Copy, PartialEq, PartialOrd)]
pub enum Level {
    Debug = 0,
    Verbose = 1,
    Notice = 2,
    Warning = 3,
}

static MIN_LEVEL: AtomicU8 = AtomicU8::new(Level::Notice as u8);
static LOG_FILE: OnceLock<String> = OnceLock::new();

pub fn configure(level: &str, file: &str) {
    set_level(level);
    if !file.is_empty() {
        let _ = LOG_FILE.set(file.to_string());
    }
}

pub fn set_level(level: &str) {
    let l = match level {
        "debug" => Level::Debug,
        "verbose" => Level::Verbose,
        "warning" => Level::Warning,
        "nothing" => return MIN_LEVEL.store(u8::MAX, Ordering::Relaxed),
        _ => Level::Notice,
    };
    MIN_LEVEL.store(l as u8, Ordering::Relaxed);
}

pub fn log(level: Level, msg: &str) {
    if (level as u8) < MIN_LEVEL.load(Ordering::Relaxed) {
        return;
    }
    let mark = match level {
        Level::Debug => '.',
        Level::Verbose => '-',
        Level::Notice => '*',
        Level::Warning => '#',
    };
    let line = format!("{}:M {} {} {}\n", std::process::id(), timestamp(), mark, msg);
    match LOG_FILE.get() {
        Some(path) => {
            if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
                let _ = f.write_all(line.as_bytes());
            }
        }
        None => {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(line.as_bytes());
            let _ = out.flush();
        }
    }
}

pub fn notice(msg: &str) {
    log(Level::Notice, msg)
}

pub fn warning(msg: &str) {
    log(Level::Warning, msg)
}

pub fn verbose(msg: &str) {
    log(Level::Verbose, msg)
}

/// "22 Nov 2026 19:00:00.123" in UTC.
fn timestamp() -> String {
    let ms = shard::unix_ms();
    let secs = (ms / 1000) as i64;
    let (days, rem) = (secs.div_euclid(86400), secs.rem_euclid(86400));
    let (y, m, d) = civil_from_days(days);
    const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    format!(
        "{:02} {} {} {:02}:{:02}:{:02}.{:03}",
        d,
        MONTHS[(m - 1) as usize],
        y,
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms % 1000
    )
}

/// Howard Hinnant's days-to-civil algorithm.
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    #[test]
    fn civil_dates() {
        assert_eq!(super::civil_from_days(0), (1970, 1, 1));
        assert_eq!(super::civil_from_days(20_414), (2025, 11, 22));
    }
}
