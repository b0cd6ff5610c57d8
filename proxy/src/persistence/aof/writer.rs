//! Turning the AOF on and off, and each shard's writer and fsync tasks.

use super::durable::flush_at_exit;
use super::health;
use super::manifest::*;
use super::replay::load_file;
use super::rewrite::{remove_unnamed, render_keyspace};
use super::state::AofStats;
use crate::core::Core;
use crate::log;
use glommio::io::{BufferedFile, OpenOptions};
use shard::config::AppendFsync;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// Ready once the shard has effects to write.
struct EffectsPending<'a>(&'a Core);

impl Future for EffectsPending<'_> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut shard = self.0.shard.borrow_mut();
        // Effects switched off (CONFIG SET appendonly no): the writer ends.
        let Some(log) = shard.effects.as_deref_mut().filter(|log| log.aof) else { return Poll::Ready(()) };
        if !log.buf.is_empty() {
            return Poll::Ready(());
        }
        log.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

/// At a core's start, before clients are accepted: replays this shard's
/// files, opens its last incr file for appending, turns effects on and
/// starts the writer. Exits the process, as Redis does, when the AOF
/// cannot be loaded.
pub async fn start(core: &Rc<Core>, found: &Found) {
    let (manifest, config) = (&found.manifest, core.config().clone());
    let files: Vec<FileEntry> = manifest.of_shard(core.index).into_iter().cloned().collect();
    let started = Instant::now();
    let mut keys = 0;
    for (i, f) in files.iter().enumerate() {
        let last = i + 1 == files.len();
        if let Err(msg) = load_file(core, &config, f, last) {
            log::warning(&msg);
            eprintln!("corekv: {msg}");
            std::process::exit(1);
        }
        keys = core.shard.borrow().keys();
    }
    if !files.is_empty() {
        log::notice(&format!(
            "Shard {}: DB loaded from append only file: {:.3} seconds ({keys} keys)",
            core.index,
            started.elapsed().as_secs_f64()
        ));
    }
    let Some(incr) = files.iter().rev().find(|f| f.kind == Kind::Incr).cloned() else {
        let msg = format!("The AOF manifest names no incr file for shard {}", core.index);
        log::warning(&msg);
        std::process::exit(1);
    };
    // From here on every write is logged (the mesh may bring some before
    // this core listens); the writer catches up once the file is open.
    core.shard.borrow_mut().enable_effects();
    let path = dir(&config).join(&incr.name);
    let file = match OpenOptions::new().write(true).create(true).buffered_open(&path).await {
        Ok(f) => f,
        Err(e) => {
            log::warning(&format!("Can't open the append-only file {}: {e}", path.display()));
            std::process::exit(1);
        }
    };
    let mut size = file.file_size().await.unwrap_or(0);
    if found.fresh && size == 0 {
        // What a dump brought in starts the new AOF (Redis writes a base).
        let loaded = render_keyspace(&core.shard.borrow(), shard::unix_ms());
        if !loaded.is_empty() {
            let len = loaded.len() as u64;
            match file.write_at(loaded, 0).await {
                Ok(n) if n as u64 == len => size = len,
                _ => fatal_write_error(core, "Error writing the loaded dataset to the new AOF"),
            }
            if let Err(e) = file.fdatasync().await {
                fatal_write_error(core, &format!("Can't persist the AOF (fdatasync): {e}"));
            }
        }
    }
    let base_size = files
        .iter()
        .filter(|f| f.kind == Kind::Base)
        .filter_map(|f| std::fs::metadata(dir(&config).join(&f.name)).ok())
        .map(|m| m.len())
        .sum::<u64>();
    {
        let mut stats = core.aof.stats.borrow_mut();
        stats.base_size = base_size;
        stats.current_size = base_size + size;
    }
    core.aof.pos.set(size);
    *core.aof.file.borrow_mut() = Some(Rc::new(file));
    *core.aof.files.borrow_mut() = files;
    core.aof.enabled.set(true);
    glommio::spawn_local(writer(core.clone())).detach();
    glommio::spawn_local(fsync_every_second(core.clone())).detach();
}

/// `CONFIG SET appendonly yes` on a running server: every shard starts a
/// new incr file whose first content is its keyspace at that instant (taken
/// in the same synchronous step that turns its effects on), then one
/// manifest names them all and the files of an older AOF are removed.
pub async fn turn_on(core: &Rc<Core>) -> Result<(), String> {
    let config = core.config().clone();
    std::fs::create_dir_all(dir(&config))
        .map_err(|e| format!("Can't create the AOF directory {}: {e}", config.appenddirname))?;
    let old = match std::fs::read_to_string(manifest_path(&config)) {
        Ok(text) => Manifest::parse(&text).unwrap_or_default(),
        Err(_) => Manifest::default(),
    };
    let seq = old.files.iter().map(|f| f.seq).max().unwrap_or(0) + 1;
    let started = crate::coordinator::dispatch::call_all_tasks(core, move |c| start_appending(c, seq)).await;
    let mut manifest = Manifest::default();
    for r in started {
        manifest.files.push(r.ok_or("a shard could not be reached")??);
    }
    write_manifest(&config, &manifest)?;
    remove_unnamed(&config, &old, &manifest);
    log::notice("Background append only file rewriting started");
    Ok(())
}

async fn start_appending(core: Rc<Core>, seq: u64) -> Result<FileEntry, String> {
    if core.aof.enabled.get() {
        return Err("AOF is already on".into());
    }
    let config = core.config().clone();
    let incr = FileEntry { name: incr_name(&config, core.index, seq), seq, kind: Kind::Incr, shard: core.index };
    let file = BufferedFile::create(dir(&config).join(&incr.name))
        .await
        .map_err(|e| format!("Creating the AOF file {}: {e}", incr.name))?;
    let permit = core.aof.lock.acquire_permit(1).await.map_err(|e| e.to_string())?;
    let state = {
        let mut shard = core.shard.borrow_mut();
        shard.enable_effects();
        if let Some(log) = shard.effects.as_deref_mut() {
            log.buf.clear();
            log.reselect();
        }
        render_keyspace(&shard, shard::unix_ms())
    };
    let len = state.len() as u64;
    if len > 0 {
        match file.write_at(state, 0).await {
            Ok(n) if n as u64 == len => {}
            _ => fatal_write_error(&core, "Error writing the dataset to the new AOF"),
        }
    }
    if let Err(e) = file.fdatasync().await {
        fatal_write_error(&core, &format!("Can't persist the AOF (fdatasync): {e}"));
    }
    let end = core.shard.borrow().effects.as_ref().map_or(0, |e| e.taken);
    core.aof.pos.set(len);
    core.aof.written.set(end);
    core.aof.set_durable(end);
    *core.aof.file.borrow_mut() = Some(Rc::new(file));
    *core.aof.files.borrow_mut() = vec![incr.clone()];
    {
        let mut stats = core.aof.stats.borrow_mut();
        (stats.base_size, stats.current_size) = (0, len);
    }
    core.aof.enabled.set(true);
    drop(permit);
    glommio::spawn_local(writer(core.clone())).detach();
    glommio::spawn_local(fsync_every_second(core.clone())).detach();
    Ok(incr)
}

/// `CONFIG SET appendonly no`: every shard writes and fsyncs what is
/// pending, then stops logging effects (the files stay as they are); a
/// scheduled rewrite is dropped, as Redis's stopAppendOnly does.
pub async fn turn_off(core: &Rc<Core>) {
    core.process.save_status.rewrite_scheduled.store(false, Ordering::Relaxed);
    crate::coordinator::dispatch::call_all_tasks(core, |c| async move {
        flush_at_exit(&c).await;
        let Ok(_permit) = c.aof.lock.acquire_permit(1).await else { return };
        c.aof.enabled.set(false);
        {
            let mut shard = c.shard.borrow_mut();
            if let Some(w) = shard.effects.as_deref_mut().and_then(|log| log.waker.take()) {
                w.wake();
            }
            shard.disable_aof_effects();
        }
        *c.aof.file.borrow_mut() = None;
        c.aof.set_durable(u64::MAX);
        health::clear(&c).await;
    })
    .await;
}

/// Writes the shard's effects to its incr file once per batch; with
/// `appendfsync always` fdatasyncs before waking the replies that wait.
/// After a failed write (`health.rs`) it retries once a second, or sooner
/// when new effects come.
async fn writer(core: Rc<Core>) {
    loop {
        if core.aof.unwritten.borrow().is_empty() {
            EffectsPending(&core).await;
        } else {
            futures_lite::future::or(EffectsPending(&core), async {
                glommio::timer::sleep(Duration::from_secs(1)).await;
            })
            .await;
        }
        let Ok(_permit) = core.aof.lock.acquire_permit(1).await else { return };
        if !core.aof.enabled.get() {
            return;
        }
        let Some((bytes, end)) = core.aof.take_effects(&mut core.shard.borrow_mut()) else { return };
        if bytes.is_empty() {
            continue;
        }
        let Some(file) = core.aof.file.borrow().clone() else { return };
        let len = bytes.len() as u64;
        let timed = latency_start(&core);
        let written = file.write_at(bytes, core.aof.pos.get()).await;
        if let Some(started) = timed {
            // Redis's events for flushAppendOnlyFile's write (here the
            // write's time on the ring, which does not hold the core).
            let ms = started.elapsed().as_millis() as u64;
            let rewriting = core.aof.stats.borrow().rewrite_in_progress;
            latency_sample(&core, if rewriting { "aof-write-active-child" } else { "aof-write-alone" }, ms);
            latency_sample(&core, "aof-write", ms);
        }
        match written {
            Ok(n) => {
                // A short write keeps its part: the rest follows it.
                core.aof.wrote(n as u64);
                if (n as u64) < len {
                    health::write_failed(&core, Ok((n as u64, len))).await;
                    core.aof.wake_waiters();
                    continue;
                }
            }
            Err(e) => {
                health::write_failed(&core, Err(health::os_error(e))).await;
                core.aof.wake_waiters();
                continue;
            }
        }
        core.aof.written.set(end);
        core.aof.wake_waiters();
        health::write_ok(&core).await;
        if core.config().appendfsync == AppendFsync::Always {
            let timed = latency_start(&core);
            let synced = file.fdatasync().await.map_err(health::os_error);
            if let Some(started) = timed {
                latency_sample(&core, "aof-fsync-always", started.elapsed().as_millis() as u64);
            }
            health::fsync_done(&core, synced).await;
            core.aof.set_durable(end);
        }
    }
}

/// The latency monitor's start (Redis's latencyStartMonitor): a clock
/// read only while `latency-monitor-threshold` is on.
fn latency_start(core: &Core) -> Option<std::time::Instant> {
    (core.config().latency_monitor_threshold != 0).then(std::time::Instant::now)
}

fn latency_sample(core: &Core, event: &'static str, ms: u64) {
    let mut shard = core.shard.borrow_mut();
    let threshold = shard.config.latency_monitor_threshold;
    shard.observe.latency.add_if_needed(threshold, event, ms);
}

/// A lost write at start or in a rewrite's switch leaves a hole in the log
/// that no later write can mend: the process stops, loudly.
fn fatal_write_error(core: &Core, msg: &str) -> ! {
    core.aof.stats.borrow_mut().last_write_ok = false;
    log::warning(msg);
    log::warning("Can't recover from AOF write error. Exiting...");
    std::process::exit(1);
}

/// `appendfsync everysec`: one background fdatasync a second when
/// something was written since the last.
async fn fsync_every_second(core: Rc<Core>) {
    loop {
        glommio::timer::sleep(Duration::from_secs(1)).await;
        if core.process.shutting_down() || !core.aof.enabled.get() {
            return;
        }
        let (policy, skip_on_rewrite) = {
            let c = core.config();
            (c.appendfsync, c.no_appendfsync_on_rewrite)
        };
        if policy != AppendFsync::EverySec || core.aof.durable.get() >= core.aof.written.get() {
            continue;
        }
        if skip_on_rewrite && core.aof.stats.borrow().rewrite_in_progress {
            continue;
        }
        let Ok(_permit) = core.aof.lock.acquire_permit(1).await else { return };
        let written = core.aof.written.get();
        let Some(file) = core.aof.file.borrow().clone() else { return };
        let synced = file.fdatasync().await.map_err(health::os_error);
        let ok = synced.is_ok();
        health::fsync_done(&core, synced).await;
        if ok {
            core.aof.set_durable(written);
        }
    }
}

/// INFO persistence's aof_* lines (Redis 7.0's names and order) from every
/// shard's figures; empty `shards` when the AOF is off. `scheduled`: a
/// BGREWRITEAOF waits for a save to end; `rewriting`: one holds the save
/// lock (its shards may not have started their part yet).
pub fn info_fields(shards: &[AofStats], scheduled: bool, rewriting: bool) -> String {
    let enabled = !shards.is_empty();
    let in_progress = rewriting || shards.iter().any(|s| s.rewrite_in_progress);
    let current_secs = shards.iter().filter_map(|s| s.rewrite_started).map(|t| t.elapsed().as_secs() as i64).max();
    let last_secs = shards.iter().map(|s| s.last_rewrite_secs).max().unwrap_or(-1);
    let ok = |b: bool| if b { "ok" } else { "err" };
    let mut out = format!(
        "aof_enabled:{}\r\naof_rewrite_in_progress:{}\r\naof_rewrite_scheduled:{}\r\naof_last_rewrite_time_sec:{last_secs}\r\n\
         aof_current_rewrite_time_sec:{}\r\naof_last_bgrewrite_status:{}\r\naof_rewrites:{}\r\n\
         aof_rewrites_consecutive_failures:0\r\naof_last_write_status:{}\r\naof_last_cow_size:0\r\n\
         module_fork_in_progress:0\r\nmodule_fork_last_cow_size:0\r\n",
        enabled as u8,
        in_progress as u8,
        scheduled as u8,
        current_secs.unwrap_or(-1),
        ok(shards.iter().all(|s| s.last_rewrite_ok)),
        shards.iter().map(|s| s.rewrites).min().unwrap_or(0),
        ok(shards.iter().all(|s| s.last_write_ok)),
    );
    if enabled {
        out.push_str(&format!(
            "aof_current_size:{}\r\naof_base_size:{}\r\naof_pending_rewrite:0\r\naof_buffer_length:0\r\n\
             aof_pending_bio_fsync:0\r\naof_delayed_fsync:0\r\n",
            shards.iter().map(|s| s.current_size).sum::<u64>(),
            shards.iter().map(|s| s.base_size).sum::<u64>(),
        ));
    }
    out
}
