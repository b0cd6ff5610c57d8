//! Redis's adjustOpenFilesLimit: the descriptors `maxclients` needs, or
//! `maxclients` lowered to what the process may open. Run at start
//! (src/limits.rs) and by `CONFIG SET maxclients` (Redis's updateMaxclients).

use crate::log;

/// Descriptors kept for everything but clients (Redis's CONFIG_MIN_RESERVED_FDS).
pub const RESERVED_FDS: u64 = 32;

/// What `adjust_open_files_limit` could do for `maxclients`.
#[derive(Debug, PartialEq, Eq)]
pub enum Adjusted {
    /// The limit allows `maxclients` (raised if it had to be).
    Enough,
    /// It does not and cannot be raised: the clients it allows, after
    /// Redis's three warnings.
    Lowered(u64),
    /// Not even the reserved descriptors: (the limit, the descriptors wanted).
    TooLow(u64, u64),
}

/// Raises RLIMIT_NOFILE (soft and hard, as Redis) to `maxclients` + 32,
/// trying 16 fewer at a time, with Redis's log lines.
pub fn adjust_open_files_limit(maxclients: u64) -> Adjusted {
    let wanted = maxclients + RESERVED_FDS;
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == -1 {
        log::warning(&format!(
            "Unable to obtain the current NOFILE limit ({}), assuming 1024 and setting the max clients configuration accordingly.",
            std::io::Error::last_os_error()
        ));
        return Adjusted::Lowered(1024 - RESERVED_FDS);
    }
    let old = limit.rlim_cur;
    if old >= wanted {
        return Adjusted::Enough;
    }
    let mut best = wanted;
    let mut error = None;
    while best > old {
        let l = libc::rlimit { rlim_cur: best, rlim_max: best };
        // SAFETY: setrlimit reads the struct we pass.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &l) } != -1 {
            break;
        }
        error = Some(std::io::Error::last_os_error());
        if best < 16 {
            best = old;
            break;
        }
        best -= 16;
    }
    best = best.max(old);
    if best >= wanted {
        log::notice(&format!("Increased maximum number of open files to {wanted} (it was originally set to {old})."));
        return Adjusted::Enough;
    }
    if best <= RESERVED_FDS {
        return Adjusted::TooLow(old, wanted);
    }
    let lowered = best - RESERVED_FDS;
    log::warning(&format!(
        "You requested maxclients of {maxclients} requiring at least {wanted} max file descriptors."
    ));
    log::warning(&format!(
        "Server can't set maximum open files to {wanted} because of OS error: {}.",
        error.map_or_else(|| "unknown".to_string(), |e| e.to_string())
    ));
    log::warning(&format!(
        "Current maximum open files is {best}. maxclients has been reduced to {lowered} to compensate for low ulimit. If you need higher maxclients increase 'ulimit -n'."
    ));
    Adjusted::Lowered(lowered)
}
