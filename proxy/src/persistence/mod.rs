//! Snapshots of the whole process into one RDB file, and loading it at
//! start (`load.rs`); the per-shard append-only files (`aof/`). See
//! ARCHITECTURE.md, "Persistence: snapshots".
//!
//! A save: one save or AOF rewrite at a time in the process (`SaveStatus::lock`);
//! the cut is a barrier every core's thread waits at (`cut.rs`); then each
//! core walks its shard cooperatively, streaming its part to
//! `temp-<pid>.part<i>.rdb` through glommio's io_uring files; the coordinator
//! joins header, parts, EOF and the CRC64 (combined from the parts' CRCs)
//! into `temp-<pid>.rdb`, fsyncs it, renames it over `dbfilename` and
//! fsyncs the directory, so a crash mid-save leaves the previous file
//! (`file.rs`). This file: the protocol, status, schedule and INFO.

pub mod aof;
mod cut;
mod file;
pub mod load;
pub mod status;
pub mod walk;

use crate::coordinator::dispatch::call_all;
use crate::core::Core;
use crate::log;
use crate::mesh::{CallFn, Request, Response};
use cut::CutBarrier;
use file::{join, part_path, write_part};
pub use status::{CoreSave, PartResult, SaveError, SaveStatus, MISCONF};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long cores wait at the cut for the slowest one before giving up.
const CUT_TIMEOUT: Duration = Duration::from_secs(10);
/// Redis's CONFIG_BGSAVE_RETRY_DELAY: a failed scheduled save is retried
/// after this many seconds.
const RETRY_DELAY_S: u64 = 5;

/// Recomputes every core's MISCONF flag (after a save or a CONFIG SET).
pub async fn refresh_deny_writes(core: &Rc<Core>) {
    call_all(core, |c| {
        let failed = !c.process.save_status.last_bgsave_ok.load(Relaxed);
        let config = c.config();
        let deny = failed && config.stop_writes_on_bgsave_error && !config.save.is_empty();
        c.save.deny_writes.set(deny);
    })
    .await;
}

/// Runs a save protocol in a task of its own, so a caller that goes away
/// (a client hanging up mid-SAVE) cannot cut it short holding the lock.
async fn detached<T, F>(work: F) -> Result<T, SaveError>
where
    T: 'static,
    F: std::future::Future<Output = Result<T, SaveError>> + 'static,
{
    glommio::spawn_local(work).detach().await.unwrap_or_else(|| Err(SaveError::Failed("cancelled".into())))
}

/// Saves a point-in-time snapshot of every shard to `dir/dbfilename`.
/// Other clients are served throughout.
pub async fn save(core: &Rc<Core>, background: bool) -> Result<(), SaveError> {
    let core = core.clone();
    detached(async move { save_here(&core, background).await }).await
}

async fn save_here(core: &Rc<Core>, background: bool) -> Result<(), SaveError> {
    core.process.save_status.lock(false)?;
    let started = begin(core, background);
    let result = match take_cut(core, None, false).await {
        Ok(cut) => finish(core, cut).await,
        Err(e) => Err(e),
    };
    end(core, background, started, result).await
}

/// A snapshot for replicas' full resync, into `dir/file_name`: the same
/// cut and walk as BGSAVE, but it is not the dump (LASTSAVE, the save
/// points' counters and INFO's bgsave status stay as they are). Returns
/// the cut's sequence number, whose marker the replication stream carries.
pub async fn save_for_replicas(core: &Rc<Core>, file_name: String) -> Result<u64, SaveError> {
    let core = core.clone();
    detached(async move {
        core.process.save_status.lock(false)?;
        log::notice("Starting BGSAVE for SYNC with target: disk");
        let result = match take_cut(&core, Some(file_name), false).await {
            Ok(cut) => {
                let seq = cut.seq;
                finish(&core, cut).await.map(|()| seq)
            }
            Err(e) => Err(e),
        };
        core.process.save_status.unlock();
        result.map_err(SaveError::Failed)
    })
    .await
}

/// BGSAVE: takes the cut, then returns while the shards write their parts
/// and the file is joined in the background. As with Redis's fork, what
/// the caller sent before is in the snapshot and what it sends after is not.
pub async fn bgsave(core: &Rc<Core>) -> Result<(), SaveError> {
    let core = core.clone();
    detached(async move { bgsave_here(&core).await }).await
}

async fn bgsave_here(core: &Rc<Core>) -> Result<(), SaveError> {
    core.process.save_status.lock(false)?;
    let started = begin(core, true);
    match take_cut(core, None, false).await {
        Ok(cut) => {
            let core = core.clone();
            glommio::spawn_local(async move {
                let result = finish(&core, cut).await;
                let _ = end(&core, true, started, result).await;
            })
            .detach();
            Ok(())
        }
        Err(e) => end(core, true, started, Err(e)).await,
    }
}

/// BGSAVE run by a transaction that holds a coordinator unit: the cut
/// waits for every unit to release, this one too, so it cannot be awaited
/// from inside (EXEC would wait for BGSAVE and BGSAVE for EXEC). The save
/// lock is taken now, so the reply is BGSAVE's own; the cut follows once
/// the transaction has released its keys (Redis forks mid-EXEC: here the
/// whole transaction is in the snapshot).
pub fn bgsave_after_unit(core: &Rc<Core>) -> Result<(), SaveError> {
    core.process.save_status.lock(false)?;
    let core = core.clone();
    glommio::spawn_local(async move {
        let started = begin(&core, true);
        let result = match take_cut(&core, None, false).await {
            Ok(cut) => finish(&core, cut).await,
            Err(e) => Err(e),
        };
        let _ = end(&core, true, started, result).await;
    })
    .detach();
    Ok(())
}

/// SAVE for a caller that holds every shard whole already (DEBUG RELOAD,
/// which must load what it saved before anything else runs): the cut is
/// taken under the caller's unit instead of one of its own.
pub async fn save_holding_all(core: &Rc<Core>) -> Result<(), SaveError> {
    let core = core.clone();
    detached(async move {
        core.process.save_status.lock(false)?;
        let started = begin(&core, false);
        let result = match take_cut(&core, None, true).await {
            Ok(cut) => finish(&core, cut).await,
            Err(e) => Err(e),
        };
        end(&core, false, started, result).await
    })
    .await
}

/// Marks a save started (the lock held); returns the start time.
fn begin(core: &Core, background: bool) -> u64 {
    let status = &core.process.save_status;
    let started = shard::unix_ms();
    status.started_ms.store(started, Relaxed);
    status.background.store(background, Relaxed);
    status.last_try.store(started / 1000, Relaxed);
    if background {
        log::notice("Background saving started");
    }
    started
}

/// Records how a save ended and releases the lock. A background save's
/// status decides MISCONF, as Redis's `lastbgsave_status`.
async fn end(core: &Rc<Core>, background: bool, started: u64, result: Result<(), String>) -> Result<(), SaveError> {
    let status = &core.process.save_status;
    let secs = (shard::unix_ms() - started) / 1000;
    match &result {
        Ok(()) => {
            status.last_save.store(shard::unix_ms() / 1000, Relaxed);
            status.saves.fetch_add(1, Relaxed);
            call_all(core, |c| {
                let mut shard = c.shard.borrow_mut();
                shard.dirty = shard.dirty.saturating_sub(c.save.dirty_at_cut.get());
            })
            .await;
            log::notice(if background { "Background saving terminated with success" } else { "DB saved on disk" });
        }
        Err(e) => log::warning(&format!("Failed saving the DB: {e}")),
    }
    if background {
        status.last_bgsave_ok.store(result.is_ok(), Relaxed);
        status.last_bgsave_secs.store(secs as i64, Relaxed);
    }
    status.background.store(false, Relaxed);
    status.unlock();
    if background {
        refresh_deny_writes(core).await;
    }
    result.map_err(SaveError::Failed)
}

/// A cut taken: where the parts go and how the file is finished.
struct Cut {
    seq: u64,
    dir: PathBuf,
    file_name: String,
    checksum: bool,
}

/// Takes the cut on every shard and starts each shard's part writer
/// (`held`: the caller holds every shard whole).
async fn take_cut(core: &Rc<Core>, file_name: Option<String>, held: bool) -> Result<Cut, String> {
    let (dir, file_name, compress, checksum) = {
        let c = core.config();
        (PathBuf::from(&c.dir), file_name.unwrap_or_else(|| c.dbfilename.clone()), c.rdbcompression, c.rdbchecksum)
    };
    let barrier = Arc::new(CutBarrier::new(core.count, CUT_TIMEOUT));
    let seq = core.process.save_status.sequence.fetch_add(1, Relaxed) + 1;
    let cut_ms = shard::unix_ms();
    let cut_dir = dir.clone();
    let arrivals = barrier.clone();
    let on_each = move |c: &Rc<Core>| {
        if !arrivals.wait() {
            return false;
        }
        let mut shard = c.shard.borrow_mut();
        shard.begin_snapshot(cut_ms, compress);
        // Replicas' stream: what each shard logged before this is in the
        // snapshot, what it logs after is not.
        if let Some(feed) = shard.repl_feed() {
            feed.mark(shard::propagate::FeedItem::Cut(seq));
        }
        c.save.dirty_at_cut.set(shard.dirty);
        drop(shard);
        let path = part_path(&cut_dir, c.index);
        let writer = c.clone();
        glommio::spawn_local(async move {
            let result = write_part(&writer, &path).await;
            if result.is_err() {
                writer.shard.borrow_mut().end_snapshot();
                let _ = std::fs::remove_file(&path);
            }
            *writer.save.part.borrow_mut() = Some((seq, result));
        })
        .detach();
        true
    };
    let cut = Cut { seq, dir, file_name, checksum };
    if cut_everywhere(core, &barrier, on_each, held).await {
        Ok(cut)
    } else {
        abort(core, &cut.dir).await;
        Err("the shards did not all reach the cut".to_string())
    }
}

/// Waits for the parts and joins them into the file. Leaves no temporary
/// file behind on failure.
async fn finish(core: &Rc<Core>, cut: Cut) -> Result<(), String> {
    let parts = match wait_for_parts(core, cut.seq).await {
        Ok(p) => p,
        Err(e) => {
            abort(core, &cut.dir).await;
            return Err(e);
        }
    };
    let result = join(core, &cut.dir, &cut.file_name, &parts, cut.checksum).await;
    for i in 0..parts.len() {
        let _ = std::fs::remove_file(part_path(&cut.dir, i));
    }
    result
}

/// Stops the walks that did start and drops their files.
async fn abort(core: &Rc<Core>, dir: &Path) {
    let dir = dir.to_path_buf();
    call_all(core, move |c| {
        c.shard.borrow_mut().end_snapshot();
        let _ = std::fs::remove_file(part_path(&dir, c.index));
    })
    .await;
}

/// Runs `take_cut` on every core, this one last (see `cut.rs`): the others
/// block at the barrier while this core keeps its reactor running until
/// they all have arrived. True when every shard took the cut.
async fn cut_everywhere<F>(core: &Rc<Core>, barrier: &CutBarrier, take_cut: F, held: bool) -> bool
where
    F: Fn(&Rc<Core>) -> bool + Send + Clone + 'static,
{
    // No coordinator unit may straddle the cut: hold every shard whole
    // (waiting for running units to finish) while it is taken, unless the
    // caller does.
    let whole = crate::coordinator::Footprint { keys: Vec::new(), whole: true };
    let unit = match held {
        true => None,
        false => Some(crate::coordinator::Unit::acquire(core, &whole).await),
    };
    let mut tickets = Vec::new();
    for shard in (0..core.count).filter(|&s| s != core.index) {
        let f = take_cut.clone();
        let call: CallFn<Core> = Box::new(move |c| Box::new(f(c)));
        tickets.push(core.mesh.send(shard, Request::Call(call)).await);
    }
    let deadline = Instant::now() + CUT_TIMEOUT;
    while barrier.arrived() < core.count - 1 {
        if Instant::now() >= deadline {
            barrier.abandon();
            break;
        }
        glommio::timer::sleep(Duration::from_micros(50)).await;
    }
    let mut all = take_cut(core);
    for ticket in tickets {
        all &= matches!(ticket.await, Response::Call(any) if any.downcast_ref::<bool>() == Some(&true));
    }
    if let Some(unit) = unit {
        unit.release().await;
    }
    all
}

/// A core stopping mid-save (SHUTDOWN NOSAVE during a BGSAVE) removes its
/// part file; the previous dump is untouched.
pub fn abandon(core: &Core) {
    let mut shard = core.shard.borrow_mut();
    if shard.snapshot_running() {
        shard.end_snapshot();
        let _ = std::fs::remove_file(part_path(Path::new(&shard.config.dir), core.index));
    }
}

/// Polls every core until its part is written; (bytes, CRC) per shard.
async fn wait_for_parts(core: &Rc<Core>, seq: u64) -> Result<Vec<(u64, u64)>, String> {
    let mut parts: Vec<Option<(u64, u64)>> = vec![None; core.count];
    let mut error = None;
    while parts.iter().any(Option::is_none) && error.is_none() {
        glommio::timer::sleep(Duration::from_millis(2)).await;
        let done = call_all(core, move |c| {
            let mut part = c.save.part.borrow_mut();
            match part.take() {
                Some((s, result)) if s == seq => Some(result),
                // An abandoned save's writer finishing late: dropped.
                _ => None,
            }
        })
        .await;
        for (i, d) in done.into_iter().enumerate() {
            match d {
                Some(Some(Ok(p))) => parts[i] = Some(p),
                Some(Some(Err(e))) => error = Some(e),
                Some(None) => {}
                None => error = Some("a shard is shutting down".into()),
            }
        }
    }
    match error {
        Some(e) => Err(e),
        None => Ok(parts.into_iter().flatten().collect()),
    }
}

/// Core 0's cron, as Redis's serverCron: a rewrite scheduled during a
/// save, then the save points (a BGSAVE when some `(seconds, changes)` is
/// met), then a BGSAVE scheduled during a rewrite; each only while neither
/// a save nor a rewrite runs.
pub async fn cron(core: &Rc<Core>) {
    let status = &core.process.save_status;
    if !status.busy() && status.rewrite_scheduled.load(Relaxed) {
        // A failed start (the AOF turned off meanwhile) drops the schedule.
        let _ = aof::start_rewrite(core);
    }
    if status.busy() {
        return;
    }
    let now = shard::unix_ms() / 1000;
    let retry_ok =
        status.last_bgsave_ok.load(Relaxed) || now.saturating_sub(status.last_try.load(Relaxed)) > RETRY_DELAY_S;
    let points = core.config().save.clone();
    if !points.is_empty() {
        let dirty: u64 = call_all(core, |c| c.shard.borrow().dirty).await.into_iter().flatten().sum();
        let since_save = now.saturating_sub(status.last_save.load(Relaxed));
        if let Some((secs, changes)) = points.iter().find(|(s, c)| dirty >= *c && since_save > *s) {
            if retry_ok {
                log::notice(&format!("{changes} changes in {secs} seconds. Saving..."));
                let _ = bgsave(core).await;
                return;
            }
        }
    }
    if status.bgsave_scheduled.load(Relaxed) && retry_ok && bgsave(core).await.is_ok() {
        status.bgsave_scheduled.store(false, Relaxed);
    }
}

/// Whether a shutdown should save: SAVE or NOSAVE, else when a save point
/// is configured.
pub fn save_on_shutdown(core: &Core, save: bool, nosave: bool) -> bool {
    save || (!nosave && !core.config().save.is_empty())
}

/// Waits for a running save, then saves in the foreground (for shutdown).
pub async fn final_save(core: &Rc<Core>) -> Result<(), String> {
    log::notice("Saving the final RDB snapshot before exiting.");
    loop {
        match save(core, false).await {
            Err(SaveError::InProgress | SaveError::Rewriting) => glommio::timer::sleep(Duration::from_millis(10)).await,
            Err(SaveError::Failed(e)) => return Err(e),
            Ok(()) => return Ok(()),
        }
    }
}

/// INFO's persistence section. `save_keys`: (keys written, keys at the
/// cut) of a running save; `aof`: every shard's AOF figures, none when the
/// AOF is off.
pub fn info(core: &Core, dirty: u64, save_keys: (u64, u64), aof: &[aof::AofStats]) -> String {
    let s = &core.process.save_status;
    let background = s.saving() && s.background.load(Relaxed);
    let current = if background { ((shard::unix_ms() - s.started_ms.load(Relaxed)) / 1000) as i64 } else { -1 };
    format!(
        "loading:0\r\nasync_loading:0\r\ncurrent_cow_peak:0\r\ncurrent_cow_size:0\r\ncurrent_cow_size_age:0\r\ncurrent_fork_perc:0.00\r\ncurrent_save_keys_processed:{}\r\ncurrent_save_keys_total:{}\r\nrdb_changes_since_last_save:{dirty}\r\nrdb_bgsave_in_progress:{}\r\nrdb_last_save_time:{}\r\nrdb_last_bgsave_status:{}\r\nrdb_last_bgsave_time_sec:{}\r\nrdb_current_bgsave_time_sec:{current}\r\nrdb_saves:{}\r\nrdb_last_cow_size:0\r\nrdb_last_load_keys_expired:{}\r\nrdb_last_load_keys_loaded:{}\r\n{}",
        save_keys.0,
        save_keys.1,
        background as u8,
        s.last_save.load(Relaxed),
        if s.last_bgsave_ok.load(Relaxed) { "ok" } else { "err" },
        s.last_bgsave_secs.load(Relaxed),
        s.saves.load(Relaxed),
        s.load_expired.load(Relaxed),
        s.loaded_keys.load(Relaxed),
        aof::info_fields(aof, s.rewrite_scheduled.load(Relaxed), s.rewriting()),
    )
}
