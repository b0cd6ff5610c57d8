//! AOF write and fsync errors, handled as Redis 7.0's flushAppendOnlyFile
//! and bio fsync do. With `appendfsync always` the process exits: a reply
//! may already have told a client its write is on disk. Otherwise the
//! shard keeps the effects it could not write (`Aof::unwritten`), its
//! writer retries them once a second or with the next effects, and while
//! any shard's file fails every core refuses writes and PING with
//! `MISCONF Errors writing to the AOF file: <strerror>`; the first write
//! that succeeds again lifts it.

use crate::core::Core;
use crate::log;
use shard::config::AppendFsync;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// Redis's AOF_WRITE_LOG_ERROR_RATE: one write-error line per 30 s.
const LOG_EVERY: Duration = Duration::from_secs(30);

/// The MISCONF error for a write refused because some shard's AOF fails.
pub fn misconf(core: &Core) -> String {
    let shards = core.aof.refusals.shards.borrow();
    let why = shards.iter().find_map(|(_, e)| e.as_deref()).unwrap_or("Unknown error");
    format!("MISCONF Errors writing to the AOF file: {why}")
}

/// The operating system's error under glommio's context.
pub(super) fn os_error<T>(e: glommio::GlommioError<T>) -> std::io::Error {
    match e {
        glommio::GlommioError::EnhancedIoError { source, .. } | glommio::GlommioError::IoError(source) => source,
        other => other.into(),
    }
}

/// A write failed (`written` of `expected` bytes when short).
pub(super) async fn write_failed(core: &Rc<Core>, error: Result<(u64, u64), std::io::Error>) {
    let (line, why) = match error {
        Err(e) => {
            let why = shard::config::os_reason(&e);
            (format!("Error writing to the AOF file: {why}"), why)
        }
        Ok((written, expected)) => (
            format!("Short write while writing to the AOF file: (nwritten={written}, expected={expected})"),
            shard::config::os_reason(&std::io::Error::from_raw_os_error(libc::ENOSPC)),
        ),
    };
    if core.config().appendfsync == AppendFsync::Always {
        log::warning(&line);
        log::warning("Can't recover from AOF write error when the AOF fsync policy is 'always'. Exiting...");
        std::process::exit(1);
    }
    let changed = {
        let mut h = core.aof.health.borrow_mut();
        if h.last_logged.is_none_or(|t| t.elapsed() > LOG_EVERY) {
            log::warning(&line);
            h.last_logged = Some(Instant::now());
        }
        h.write_error.replace(why.clone()) != Some(why)
    };
    if changed {
        publish(core).await;
    }
}

/// A write succeeded: a write error is over.
pub(super) async fn write_ok(core: &Rc<Core>) {
    if core.aof.health.borrow_mut().write_error.take().is_some() {
        log::warning("AOF write error looks solved, Redis can write again.");
        publish(core).await;
    }
}

/// How an fsync went.
pub(super) async fn fsync_done(core: &Rc<Core>, result: Result<(), std::io::Error>) {
    let changed = match result {
        Ok(()) => core.aof.health.borrow_mut().fsync_error.take().is_some(),
        Err(e) => {
            let why = shard::config::os_reason(&e);
            if core.config().appendfsync == AppendFsync::Always {
                log::warning(&format!(
                    "Can't persist AOF for fsync error when the AOF fsync policy is 'always': {why}. Exiting..."
                ));
                std::process::exit(1);
            }
            let mut h = core.aof.health.borrow_mut();
            if h.fsync_error.is_none() {
                log::warning(&format!("Fail to fsync the AOF file: {why}"));
            }
            h.fsync_error.replace(why.clone()) != Some(why)
        }
    };
    if changed {
        publish(core).await;
    }
}

/// The AOF turned off: its errors no longer refuse writes.
pub(super) async fn clear(core: &Rc<Core>) {
    let had = {
        let mut h = core.aof.health.borrow_mut();
        h.fsync_error.take().is_some() | h.write_error.take().is_some()
    };
    core.aof.unwritten.borrow_mut().clear();
    if had {
        publish(core).await;
    }
}

/// Tells every core this shard's state (INFO's aof_last_write_status, the
/// MISCONF check). Versions keep a late message from undoing a newer one.
async fn publish(core: &Rc<Core>) {
    let (version, error) = {
        let mut h = core.aof.health.borrow_mut();
        h.version += 1;
        (h.version, h.error())
    };
    core.aof.stats.borrow_mut().last_write_ok = error.is_none();
    let shard = core.index;
    crate::coordinator::dispatch::call_all(core, move |c| {
        let refusals = &c.aof.refusals;
        let mut shards = refusals.shards.borrow_mut();
        shards.resize(c.count, (0, None));
        if shards[shard].0 < version {
            shards[shard] = (version, error.clone());
        }
        refusals.any.set(shards.iter().any(|(_, e)| e.is_some()));
    })
    .await;
}
