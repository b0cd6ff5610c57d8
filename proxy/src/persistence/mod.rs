//! Snapshots of the whole process into one RDB file, and loading it at
//! start (`load.rs`); the per-shard append-only files (`aof.rs`). See ARCHITECTURE.md, "Persistence: snapshots".
//!
//! A save: one save at a time in the process (`SaveStatus::in_progress`);
//! the cut is a barrier every core's thread waits at (`cut.rs`); then each
//! core walks its shard cooperatively, streaming its part to
//! `temp-<pid>.part<i>.rdb` through glommio's io_uring files; the coordinator
//! joins header, parts, EOF and the CRC64 (combined from the parts' CRCs)
//! into `temp-<pid>.rdb`, fsyncs it, renames it over `dbfilename` and
//! fsyncs the directory, so a crash mid-save leaves the previous file.

pub mod aof;
mod cut;
pub mod load;

use crate::core::Core;
use crate::log;
use crate::mesh::{self, call_all};
use cut::CutBarrier;
use futures_lite::AsyncWriteExt;
use glommio::io::{BufferedFile, StreamWriterBuilder};
use shard::rdb;
use std::cell::{Cell, RefCell};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bytes a shard serializes before handing them to the file.
const CHUNK: usize = 256 << 10;
/// Work a shard does per step before letting its clients run.
const SLICE: Duration = Duration::from_micros(300);
/// How long cores wait at the cut for the slowest one before giving up.
const CUT_TIMEOUT: Duration = Duration::from_secs(10);
/// Redis's CONFIG_BGSAVE_RETRY_DELAY: a failed scheduled save is retried
/// after this many seconds.
const RETRY_DELAY_S: u64 = 5;

/// Process-wide save facts for INFO, LASTSAVE and the schedule. Written by
/// saves only (rare), never on the data path.
pub struct SaveStatus {
    /// The save lock: one snapshot at a time.
    pub in_progress: AtomicBool,
    /// The running save is a BGSAVE (INFO's rdb_bgsave_in_progress).
    pub background: AtomicBool,
    /// Unix ms when the running save started.
    pub started_ms: AtomicU64,
    /// Unix seconds of the last successful save (LASTSAVE).
    pub last_save: AtomicU64,
    /// Unix seconds of the last attempt, for the retry delay.
    pub last_try: AtomicU64,
    pub last_bgsave_ok: AtomicBool,
    pub last_bgsave_secs: AtomicI64,
    pub saves: AtomicU64,
    /// Saves started, numbering each save's parts.
    pub sequence: AtomicU64,
    /// Keys loaded and keys skipped as expired by the load at start.
    pub loaded_keys: AtomicU64,
    pub load_expired: AtomicU64,
}

impl Default for SaveStatus {
    fn default() -> Self {
        let now = shard::unix_ms() / 1000;
        SaveStatus {
            in_progress: AtomicBool::new(false),
            background: AtomicBool::new(false),
            started_ms: AtomicU64::new(0),
            last_save: AtomicU64::new(now),
            last_try: AtomicU64::new(0),
            last_bgsave_ok: AtomicBool::new(true),
            last_bgsave_secs: AtomicI64::new(-1),
            saves: AtomicU64::new(0),
            sequence: AtomicU64::new(0),
            loaded_keys: AtomicU64::new(0),
            load_expired: AtomicU64::new(0),
        }
    }
}

/// A written part: (bytes, CRC-64), or why it failed.
type PartResult = Result<(u64, u64), String>;

/// A core's part in saves.
#[derive(Default)]
pub struct CoreSave {
    /// Writes refused with MISCONF (a failed BGSAVE with
    /// stop-writes-on-bgsave-error and a save point): one flag per command.
    pub deny_writes: Cell<bool>,
    /// The finished part of save number `.0`: (bytes, CRC64), or why it
    /// failed. The number keeps a writer of an abandoned save from
    /// answering for the next one.
    part: RefCell<Option<(u64, PartResult)>>,
    /// The shard's dirty counter at the cut.
    dirty_at_cut: Cell<u64>,
}

/// Redis 7.0's reply to writes after a failed background save.
pub const MISCONF: &str = "MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk. Commands that may modify the data set are disabled, because this instance is configured to report errors during writes if RDB snapshotting fails (stop-writes-on-bgsave-error option). Please check the Redis logs for details about the RDB error.";

#[derive(Debug, PartialEq)]
pub enum SaveError {
    /// Another save runs.
    InProgress,
    Failed(String),
}

fn part_path(dir: &Path, index: usize) -> PathBuf {
    dir.join(format!("temp-{}.part{index}.rdb", std::process::id()))
}

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
async fn detached<F>(work: F) -> Result<(), SaveError>
where
    F: std::future::Future<Output = Result<(), SaveError>> + 'static,
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
    lock(core)?;
    let started = begin(core, background);
    let result = match take_cut(core).await {
        Ok(cut) => finish(core, cut).await,
        Err(e) => Err(e),
    };
    end(core, background, started, result).await
}

/// BGSAVE: takes the cut, then returns while the shards write their parts
/// and the file is joined in the background. As with Redis's fork, what
/// the caller sent before is in the snapshot and what it sends after is not.
pub async fn bgsave(core: &Rc<Core>) -> Result<(), SaveError> {
    let core = core.clone();
    detached(async move { bgsave_here(&core).await }).await
}

async fn bgsave_here(core: &Rc<Core>) -> Result<(), SaveError> {
    lock(core)?;
    let started = begin(core, true);
    match take_cut(core).await {
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

/// Takes the one-save-at-a-time lock.
fn lock(core: &Core) -> Result<(), SaveError> {
    let status = &core.process.save_status;
    match status.in_progress.compare_exchange(false, true, Relaxed, Relaxed) {
        Ok(_) => Ok(()),
        Err(_) => Err(SaveError::InProgress),
    }
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
    status.in_progress.store(false, Relaxed);
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

/// Takes the cut on every shard and starts each shard's part writer.
async fn take_cut(core: &Rc<Core>) -> Result<Cut, String> {
    let (dir, file_name, compress, checksum) = {
        let c = core.config();
        (PathBuf::from(&c.dir), c.dbfilename.clone(), c.rdbcompression, c.rdbchecksum)
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
    if cut_everywhere(core, &barrier, on_each).await {
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
async fn cut_everywhere<F>(core: &Rc<Core>, barrier: &CutBarrier, take_cut: F) -> bool
where
    F: Fn(&Rc<Core>) -> bool + Send + Clone + 'static,
{
    let mut tickets = Vec::new();
    for shard in (0..core.count).filter(|&s| s != core.index) {
        let f = take_cut.clone();
        let call: mesh::CallFn = Box::new(move |c| Box::new(f(c)));
        tickets.push(mesh::send(core, shard, mesh::Request::Call(call)).await);
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
        all &= matches!(ticket.await, mesh::Response::Call(any) if any.downcast_ref::<bool>() == Some(&true));
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

/// Streams this shard's part to `path`, a step at a time.
async fn write_part(core: &Rc<Core>, path: &Path) -> PartResult {
    let io = |e: std::io::Error| format!("writing {}: {e}", path.display());
    let file = BufferedFile::create(path).await.map_err(|e| io(e.into()))?;
    let mut out = StreamWriterBuilder::new(file).with_buffer_size(CHUNK).build();
    let mut buf = Vec::with_capacity(CHUNK * 2);
    let mut crc = rdb::Crc64::new();
    let mut len = 0u64;
    loop {
        let done = core.shard.borrow_mut().snapshot_step(&mut buf, CHUNK, Instant::now() + SLICE);
        crc.update(&buf);
        len += buf.len() as u64;
        out.write_all(&buf).await.map_err(io)?;
        buf.clear();
        if done {
            break;
        }
        glommio::executor().yield_task_queue_now().await;
    }
    out.close().await.map_err(io)?;
    Ok((len, crc.value()))
}

/// Joins header, parts, EOF and checksum into `temp-<pid>.rdb`, fsyncs it
/// and renames it over `dir/file_name`.
async fn join(
    core: &Rc<Core>,
    dir: &Path,
    file_name: &str,
    parts: &[(u64, u64)],
    checksum: bool,
) -> Result<(), String> {
    let temp = dir.join(format!("temp-{}.rdb", std::process::id()));
    let io = |e: glommio::GlommioError<()>| format!("writing {}: {e}", temp.display());
    let mut head = Vec::new();
    let ctime = (shard::unix_ms() / 1000).to_string();
    let used = (core.process.memory)().rss.to_string();
    rdb::write_header(
        &mut head,
        &[
            ("redis-ver", b"7.0.15"),
            ("redis-bits", b"64"),
            ("ctime", ctime.as_bytes()),
            ("used-mem", used.as_bytes()),
            ("aof-base", b"0"),
        ],
    );
    let mut crc = rdb::Crc64::new();
    crc.update(&head);
    let mut crc = crc.value();
    let file = BufferedFile::create(&temp).await.map_err(io)?;
    let result: Result<(), String> = async {
        let mut pos = head.len() as u64;
        file.write_at(head, 0).await.map_err(io)?;
        for (i, &(len, part_crc)) in parts.iter().enumerate() {
            let from = part_path(dir, i);
            let to = file.as_raw_fd();
            let at = pos;
            // The kernel copies (copy_file_range): no pass through this core.
            glommio::executor()
                .spawn_blocking(move || copy_range(&from, to, at, len))
                .await
                .map_err(|e| format!("copying shard {i}'s part: {e}"))?;
            crc = rdb::crc64_combine(crc, part_crc, len);
            pos += len;
        }
        let mut tail = Vec::new();
        rdb::write_eof(&mut tail);
        let mut eof_crc = rdb::Crc64::new();
        eof_crc.update(&tail);
        crc = rdb::crc64_combine(crc, eof_crc.value(), tail.len() as u64);
        tail.extend_from_slice(&if checksum { crc } else { 0 }.to_le_bytes());
        file.write_at(tail, pos).await.map_err(io)?;
        file.fdatasync().await.map_err(io)?;
        Ok(())
    }
    .await;
    let _ = file.close().await;
    if let Err(e) = result {
        let _ = std::fs::remove_file(&temp);
        return Err(e);
    }
    let target = dir.join(file_name);
    if let Err(e) = std::fs::rename(&temp, &target) {
        let _ = std::fs::remove_file(&temp);
        return Err(format!("renaming {} to {}: {e}", temp.display(), target.display()));
    }
    let directory = glommio::io::Directory::open(dir).await.map_err(|e| format!("{e}"))?;
    directory.sync().await.map_err(|e| format!("fsync of {}: {e}", dir.display()))?;
    let _ = directory.close().await;
    Ok(())
}

/// Copies all of `from` to `to` at offset `at` with copy_file_range.
fn copy_range(from: &Path, to: std::os::fd::RawFd, at: u64, len: u64) -> std::io::Result<()> {
    let src = std::fs::File::open(from)?;
    let (mut src_off, mut dst_off) = (0i64, at as i64);
    let mut left = len;
    while left > 0 {
        let chunk = left.min(1 << 30) as usize;
        // SAFETY: both descriptors are open for the duration of the call and
        // the offsets are plain integers the kernel advances.
        let n = unsafe { libc::copy_file_range(src.as_raw_fd(), &mut src_off, to, &mut dst_off, chunk, 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            return match e.raw_os_error() {
                // No kernel copy here (old kernel, odd filesystem): by hand.
                Some(libc::ENOSYS | libc::EXDEV | libc::EINVAL | libc::EOPNOTSUPP) => {
                    copy_by_hand(&src, to, src_off as u64, dst_off as u64, left)
                }
                _ => Err(e),
            };
        }
        if n == 0 {
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "part shorter than written"));
        }
        left -= n as u64;
    }
    Ok(())
}

/// `copy_range` without copy_file_range: pread/pwrite through a buffer.
fn copy_by_hand(
    src: &std::fs::File,
    to: std::os::fd::RawFd,
    mut from: u64,
    mut at: u64,
    mut left: u64,
) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    // SAFETY: `to` stays open for the call; ManuallyDrop keeps it open after.
    let dst = std::mem::ManuallyDrop::new(unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(to) });
    let mut buf = vec![0u8; 1 << 20];
    while left > 0 {
        let n = src.read_at(&mut buf[..left.min(1 << 20) as usize], from)?;
        if n == 0 {
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "part shorter than written"));
        }
        dst.write_all_at(&buf[..n], at)?;
        (from, at, left) = (from + n as u64, at + n as u64, left - n as u64);
    }
    Ok(())
}

/// The save schedule, checked by core 0's cron: a BGSAVE when some save
/// point `(seconds, changes)` is met, as Redis's serverCron does.
pub async fn cron(core: &Rc<Core>) {
    let points = core.config().save.clone();
    let status = &core.process.save_status;
    if points.is_empty() || status.in_progress.load(Relaxed) {
        return;
    }
    let dirty: u64 = call_all(core, |c| c.shard.borrow().dirty).await.into_iter().flatten().sum();
    let now = shard::unix_ms() / 1000;
    let since_save = now.saturating_sub(status.last_save.load(Relaxed));
    let retry_ok =
        status.last_bgsave_ok.load(Relaxed) || now.saturating_sub(status.last_try.load(Relaxed)) > RETRY_DELAY_S;
    if let Some((secs, changes)) = points.iter().find(|(s, c)| dirty >= *c && since_save >= *s) {
        if retry_ok {
            log::notice(&format!("{changes} changes in {secs} seconds. Saving..."));
            let _ = bgsave(core).await;
        }
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
            Err(SaveError::InProgress) => glommio::timer::sleep(Duration::from_millis(10)).await,
            Err(SaveError::Failed(e)) => return Err(e),
            Ok(()) => return Ok(()),
        }
    }
}

/// INFO's persistence section (`aof`: every shard's AOF figures, none
/// when the AOF is off).
pub fn info(core: &Core, dirty: u64, aof: &[aof::AofStats]) -> String {
    let s = &core.process.save_status;
    let running = s.in_progress.load(Relaxed);
    let background = running && s.background.load(Relaxed);
    let current = if background { ((shard::unix_ms() - s.started_ms.load(Relaxed)) / 1000) as i64 } else { -1 };
    format!(
        "loading:0\r\nasync_loading:0\r\ncurrent_cow_peak:0\r\ncurrent_cow_size:0\r\ncurrent_cow_size_age:0\r\ncurrent_fork_perc:0.00\r\ncurrent_save_keys_processed:0\r\ncurrent_save_keys_total:0\r\nrdb_changes_since_last_save:{dirty}\r\nrdb_bgsave_in_progress:{}\r\nrdb_last_save_time:{}\r\nrdb_last_bgsave_status:{}\r\nrdb_last_bgsave_time_sec:{}\r\nrdb_current_bgsave_time_sec:{current}\r\nrdb_saves:{}\r\nrdb_last_cow_size:0\r\nrdb_last_load_keys_expired:{}\r\nrdb_last_load_keys_loaded:{}\r\n{}",
        background as u8,
        s.last_save.load(Relaxed),
        if s.last_bgsave_ok.load(Relaxed) { "ok" } else { "err" },
        s.last_bgsave_secs.load(Relaxed),
        s.saves.load(Relaxed),
        s.load_expired.load(Relaxed),
        s.loaded_keys.load(Relaxed),
        aof::info_fields(aof),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn parts_are_copied_at_their_offset_either_way() {
        let dir = std::env::temp_dir().join(format!("corekv-copy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let part = dir.join("part");
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&part, &data).unwrap();
        for by_hand in [false, true] {
            let out = dir.join(format!("out{by_hand}"));
            std::fs::write(&out, b"HEAD").unwrap();
            let file = std::fs::OpenOptions::new().write(true).open(&out).unwrap();
            if by_hand {
                let src = std::fs::File::open(&part).unwrap();
                copy_by_hand(&src, file.as_raw_fd(), 0, 4, data.len() as u64).unwrap();
            } else {
                copy_range(&part, file.as_raw_fd(), 4, data.len() as u64).unwrap();
            }
            let got = std::fs::read(&out).unwrap();
            assert_eq!(&got[..4], b"HEAD");
            assert!(got[4..] == data[..], "by hand: {by_hand}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
