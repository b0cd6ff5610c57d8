//! Redis's adjustOpenFilesLimit: the descriptors `maxclients` needs, or
//! `maxclients` lowered to what the process may open.

use proxy::log;
use shard::Config;

/// Descriptors kept for everything but clients (Redis's CONFIG_MIN_RESERVED_FDS).
const RESERVED_FDS: u64 = 32;

pub fn adjust_open_files_limit(config: &mut Config) {
    let wanted = config.maxclients + RESERVED_FDS;
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == -1 {
        log::warning(&format!(
            "Unable to obtain the current NOFILE limit ({}), assuming 1024 and setting the max clients configuration accordingly.",
            std::io::Error::last_os_error()
        ));
        config.maxclients = 1024 - RESERVED_FDS;
        return;
    }
    let old = limit.rlim_cur;
    if old >= wanted {
        return;
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
        return;
    }
    if best <= RESERVED_FDS {
        log::warning(&format!("Your current 'ulimit -n' of {old} is not enough for the server to start. Please increase your open file limit to at least {wanted}. Exiting."));
        std::process::exit(1);
    }
    let requested = config.maxclients;
    config.maxclients = best - RESERVED_FDS;
    log::warning(&format!("You requested maxclients of {requested} requiring at least {wanted} max file descriptors."));
    log::warning(&format!(
        "Server can't set maximum open files to {wanted} because of OS error: {}.",
        error.map_or_else(|| "unknown".to_string(), |e| e.to_string())
    ));
    log::warning(&format!(
        "Current maximum open files is {best}. maxclients has been reduced to {} to compensate for low ulimit. If you need higher maxclients increase 'ulimit -n'.",
        config.maxclients
    ));
}
