//! BGREWRITEAOF: a fresh base per shard without stopping writes.

use super::health;
use super::manifest::*;
use crate::core::Core;
use crate::log;
use glommio::io::BufferedFile;
use shard::{Config, Shard};
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// BGREWRITEAOF, coordinated from one core, in Redis 7's order:
/// 1. every shard creates its next incr file, and the manifest names it
///    (after the current files) before anything is written to it;
/// 2. every shard, in one synchronous step, takes its pending effects (they
///    go to the old file), renders its keyspace and switches to the new
///    file, so the base and the new incr file hold exactly the state; then
///    writes the base while it keeps serving;
/// 3. the manifest names each shard's new base and incr file; the files it
///    no longer names are removed.
pub async fn rewrite_all(core: &Rc<Core>) -> Result<(), String> {
    let config = core.config().clone();
    let before = current_files(core).await?;
    let prepared = crate::coordinator::dispatch::call_all_tasks(core, prepare_incr).await;
    let mut next = Manifest::default();
    let mut failure = None;
    for (shard, p) in prepared.into_iter().enumerate() {
        match p {
            Some(Ok(incr)) => {
                next.files.extend(before.of_shard(shard).into_iter().cloned());
                next.files.push(incr);
            }
            Some(Err(e)) => failure = Some(e),
            None => failure = Some("a shard could not be reached".into()),
        }
    }
    if let Some(e) = failure.or_else(|| write_manifest(&config, &next).err()) {
        crate::coordinator::dispatch::call_all(core, |c| {
            if c.aof.next.borrow_mut().take().is_some() {
                let mut stats = c.aof.stats.borrow_mut();
                (stats.rewrite_in_progress, stats.rewrite_started, stats.last_rewrite_ok) = (false, None, false);
            }
        })
        .await;
        remove_unnamed(&config, &next, &before);
        return Err(e);
    }
    // An RDB base is streamed by the snapshot's copy-on-write walk: the
    // rewrite holds the save lock throughout (`start_rewrite`).
    let walk = config.aof_use_rdb_preamble;
    let results = crate::coordinator::dispatch::call_all_tasks(core, move |c| switch_and_write_base(c, walk)).await;
    let after = current_files(core).await?;
    write_manifest(&config, &after)?;
    let mut named = before.clone();
    named.files.extend(next.files);
    remove_unnamed(&config, &named, &after);
    for r in results {
        match r {
            Some(Ok(())) => {}
            Some(Err(e)) => return Err(e),
            None => return Err("a shard could not be reached".into()),
        }
    }
    log::notice("Background AOF rewrite finished successfully");
    Ok(())
}

/// Every shard's files as it uses them now.
async fn current_files(core: &Rc<Core>) -> Result<Manifest, String> {
    let mut m = Manifest::default();
    for files in crate::coordinator::dispatch::call_all(core, |c| c.aof.files.borrow().clone()).await {
        m.files.extend(files.ok_or("a shard could not be reached")?);
    }
    Ok(m)
}

/// Removes the files `old` names and `new` does not.
pub(super) fn remove_unnamed(config: &Config, old: &Manifest, new: &Manifest) {
    for f in &old.files {
        if !new.files.iter().any(|n| n.name == f.name) {
            let _ = std::fs::remove_file(dir(config).join(&f.name));
        }
    }
}

/// Step 1 on a shard: creates its next incr file, kept for step 2.
async fn prepare_incr(core: Rc<Core>) -> Result<FileEntry, String> {
    if !core.aof.enabled.get() {
        return Err("AOF is off".into());
    }
    if core.aof.stats.borrow().rewrite_in_progress {
        return Err("Background append only file rewriting already in progress".into());
    }
    let config = core.config().clone();
    let seq = core.aof.files.borrow().iter().map(|f| f.seq).max().unwrap_or(0) + 1;
    let incr = FileEntry { name: incr_name(&config, core.index, seq), seq, kind: Kind::Incr, shard: core.index };
    let file = BufferedFile::create(dir(&config).join(&incr.name))
        .await
        .map_err(|e| format!("Creating the AOF incr file {}: {e}", incr.name))?;
    log::notice(&format!("Creating AOF incr file {} on background rewrite", incr.name));
    *core.aof.next.borrow_mut() = Some((incr.clone(), file));
    let mut stats = core.aof.stats.borrow_mut();
    stats.rewrite_in_progress = true;
    stats.rewrite_started = Some(Instant::now());
    Ok(incr)
}

/// Step 2 on a shard: the cut, the switch, the base.
async fn switch_and_write_base(core: Rc<Core>, walk: bool) -> Result<(), String> {
    let config = core.config().clone();
    let started = core.aof.stats.borrow().rewrite_started.unwrap_or_else(Instant::now);
    let result = switch_steps(&core, &config, walk).await;
    let mut stats = core.aof.stats.borrow_mut();
    stats.rewrite_in_progress = false;
    stats.rewrite_started = None;
    stats.last_rewrite_secs = started.elapsed().as_secs() as i64;
    stats.last_rewrite_ok = result.is_ok();
    if result.is_ok() {
        stats.rewrites += 1;
    }
    result
}

async fn switch_steps(core: &Rc<Core>, config: &Config, walk: bool) -> Result<(), String> {
    let Ok(permit) = core.aof.lock.acquire_permit(1).await else { return Err("AOF lock closed".into()) };
    let Some((incr, new_file)) = core.aof.next.borrow_mut().take() else {
        return Err("no prepared incr file".into());
    };
    // The cut: no await from here until the switch.
    let (tail, tail_end, snapshot) = {
        let mut shard = core.shard.borrow_mut();
        shard.log_expired_keys();
        // What a failed write left goes first; `Aof::unwritten` keeps the
        // tail until it is in the old file.
        let Some((tail, end)) = core.aof.take_effects(&mut shard) else { return Err("AOF is off".into()) };
        if let Some(log) = shard.effects.as_deref_mut() {
            log.reselect();
        }
        let now = shard::unix_ms();
        let snapshot = if walk {
            shard.begin_snapshot(now, config.rdbcompression);
            Vec::new()
        } else {
            render_keyspace(&shard, now)
        };
        (tail, end, snapshot)
    };
    let old_file = core.aof.file.borrow_mut().replace(Rc::new(new_file));
    let old_pos = core.aof.pos.replace(0);
    core.aof.files.borrow_mut().push(incr.clone());
    // The old file gets the effects of before the cut.
    if let Some(old_file) = old_file {
        let len = tail.len() as u64;
        let wrote = if len == 0 { Ok(0) } else { old_file.write_at(tail, old_pos).await.map(|n| n as u64) };
        if !matches!(wrote, Ok(n) if n == len) {
            // Back to the old file, where the writer retries the rest of
            // the tail; this shard's rewrite fails (its new incr file is
            // unnamed by the final manifest and removed).
            let n = *wrote.as_ref().unwrap_or(&0);
            *core.aof.file.borrow_mut() = Some(old_file);
            core.aof.pos.set(old_pos);
            core.aof.wrote(n);
            core.aof.files.borrow_mut().pop();
            if walk {
                core.shard.borrow_mut().end_snapshot();
            }
            drop(permit);
            health::write_failed(core, wrote.map(|n| (n, len)).map_err(health::os_error)).await;
            return Err("Error writing to the AOF file before the rewrite's switch".into());
        }
        core.aof.unwritten.borrow_mut().clear();
        let synced = old_file.fdatasync().await.map_err(health::os_error);
        health::fsync_done(core, synced).await;
    }
    core.aof.written.set(tail_end);
    core.aof.set_durable(tail_end);
    drop(permit);
    // The base, written while the shard goes on serving.
    let seq = incr.seq;
    let base = FileEntry { name: base_name(config, core.index, seq), seq, kind: Kind::Base, shard: core.index };
    let io = |what: &str, e: glommio::GlommioError<()>| format!("{what} {}: {e}", base.name);
    let base_file = match BufferedFile::create(dir(config).join(&base.name)).await {
        Ok(f) => f,
        Err(e) => {
            if walk {
                core.shard.borrow_mut().end_snapshot();
            }
            return Err(io("Creating", e));
        }
    };
    let written = if walk { stream_rdb_base(core, &base_file).await } else { write_whole(&base_file, snapshot).await };
    if walk {
        // Stopped early on an error: the hooks go off.
        core.shard.borrow_mut().end_snapshot();
    }
    let base_len = written.map_err(|e| format!("Writing {}: {e}", base.name))?;
    base_file.fdatasync().await.map_err(|e| io("Syncing", e))?;
    let _ = base_file.close().await;
    *core.aof.files.borrow_mut() = vec![base, incr];
    let mut stats = core.aof.stats.borrow_mut();
    stats.base_size = base_len;
    stats.current_size = base_len + core.aof.pos.get();
    Ok(())
}

/// Writes `bytes` at the start of `file`; returns the length.
async fn write_whole(file: &BufferedFile, bytes: Vec<u8>) -> Result<u64, String> {
    let len = bytes.len() as u64;
    match file.write_at(bytes, 0).await {
        Ok(n) if n as u64 == len => Ok(len),
        Ok(n) => Err(format!("short write ({n} of {len} bytes)")),
        Err(e) => Err(e.to_string()),
    }
}

/// Streams the shard's RDB base from the snapshot walk begun at the cut:
/// header, the walk's steps (each ~300 µs or 256 KB, other tasks running
/// in between; writes meanwhile preserve what they change first), EOF and
/// the CRC-64. Returns the length.
async fn stream_rdb_base(core: &Rc<Core>, file: &BufferedFile) -> Result<u64, String> {
    use shard::rdb;
    const CHUNK: usize = 256 << 10;
    const SLICE: Duration = Duration::from_micros(300);
    let mut crc = rdb::Crc64::new();
    let mut head = Vec::new();
    rdb::write_standard_header(&mut head, shard::unix_ms() / 1000, 0, true);
    let mut pos = 0u64;
    let mut pending = head;
    loop {
        let done = crate::persistence::walk::walk_step(core, &mut pending, CHUNK, SLICE).await;
        if done {
            rdb::write_eof(&mut pending);
        }
        crc.update(&pending);
        if done {
            pending.extend_from_slice(&crc.value().to_le_bytes());
        }
        let len = pending.len() as u64;
        if len > 0 {
            let chunk = std::mem::replace(&mut pending, Vec::with_capacity(CHUNK * 2));
            match file.write_at(chunk, pos).await {
                Ok(n) if n as u64 == len => pos += len,
                Ok(n) => return Err(format!("short write ({n} of {len} bytes)")),
                Err(e) => return Err(e.to_string()),
            }
        }
        if done {
            return Ok(pos);
        }
        glommio::executor().yield_task_queue_now().await;
    }
}

/// The shard's keyspace as commands (a RESP-form AOF base).
pub fn render_keyspace(shard: &Shard, now: u64) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, db) in shard.dbs.iter().enumerate() {
        if db.is_empty() {
            continue;
        }
        shard::propagate::put_command(&mut out, &[b"SELECT", i.to_string().as_bytes()]);
        for e in db.iter_live(now) {
            shard::propagate::write_value(&mut out, &e.key, &e.value, e.expire_at());
        }
    }
    out
}
/// Starts a rewrite in a task of its own, holding the save lock (one
/// snapshot walk at a time, as Redis runs one child) until it ends.
pub fn start_rewrite(core: &Rc<Core>) -> Result<(), crate::persistence::status::SaveError> {
    let status = &core.process.save_status;
    if !core.aof.enabled.get() {
        status.rewrite_scheduled.store(false, Ordering::Relaxed);
        return Err(crate::persistence::status::SaveError::Failed("AOF is off".into()));
    }
    status.lock(true)?;
    status.rewrite_scheduled.store(false, Ordering::Relaxed);
    let core = core.clone();
    glommio::spawn_local(async move {
        log::notice("Background append only file rewriting started");
        if let Err(e) = rewrite_all(&core).await {
            log::warning(&format!("Background AOF rewrite failed: {e}"));
        }
        core.process.save_status.unlock();
    })
    .detach();
    Ok(())
}
