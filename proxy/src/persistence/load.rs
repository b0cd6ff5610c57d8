//! Loading the RDB file at start. The file is mapped once; every core runs
//! the reader over all of it in parallel and keeps only the keys whose slot
//! its shard owns, skipping the others' values without decoding them. A core
//! serves nothing before its load is done, and no core accepts clients
//! before all are done. A bad file stops the start with the offset named.

use crate::core::Core;
use crate::log;
use crate::slot::key_slot;
use shard::db::Ttl;
use shard::rdb::{Item, Limits, Reader};
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

/// A read-only mapping of the dump file, shared by the cores.
pub struct Dump {
    ptr: *mut libc::c_void,
    len: usize,
    pub path: String,
}

// SAFETY: the mapping is read-only and private; it is only read.
unsafe impl Send for Dump {}
unsafe impl Sync for Dump {}

impl Dump {
    /// Maps `path`; `None` when there is no such file (an empty start).
    pub fn open(path: &Path) -> Result<Option<Dump>, String> {
        let file = match std::fs::File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("Can't open {}: {e}", path.display())),
        };
        let len = file.metadata().map_err(|e| format!("{}: {e}", path.display()))?.len() as usize;
        let display = path.display().to_string();
        if len == 0 {
            return Ok(Some(Dump { ptr: std::ptr::null_mut(), len: 0, path: display }));
        }
        use std::os::fd::AsRawFd;
        // SAFETY: a private read-only mapping of a file we hold open; the
        // descriptor may close afterwards.
        let ptr =
            unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_PRIVATE, file.as_raw_fd(), 0) };
        if ptr == libc::MAP_FAILED {
            return Err(format!("Can't map {}: {}", display, std::io::Error::last_os_error()));
        }
        Ok(Some(Dump { ptr, len, path: display }))
    }

    pub fn bytes(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: `ptr` maps `len` readable bytes until drop.
        unsafe { std::slice::from_raw_parts(self.ptr as *const u8, self.len) }
    }
}

impl Drop for Dump {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: the mapping made in `open`.
            unsafe { libc::munmap(self.ptr, self.len) };
        }
    }
}

/// Loads this core's keys. Core 0 logs progress about once a second.
pub fn load(core: &Core, dump: &Dump) -> Result<(), String> {
    load_keys(core, dump, true)
}

/// `load`, keeping keys already expired when `drop_expired` is false (a
/// replica loading its primary's RDB: the primary's DELs remove them).
pub fn load_keys(core: &Core, dump: &Dump, drop_expired: bool) -> Result<(), String> {
    load_with(core, dump, drop_expired, true)
}

/// DEBUG RELOAD's load into a running shard: a key already here is
/// replaced with `merge` (Redis's RDBFLAGS_ALLOW_DUP), else the load stops
/// with Redis's "duplicated key" line (where Redis stops the process).
/// Expired keys are dropped unless `keep_expired` (a replica: its
/// primary's DELs remove them, as Redis's rdbLoad keeps them there).
pub fn reload(core: &Core, dump: &Dump, merge: bool, keep_expired: bool) -> Result<(), String> {
    load_with(core, dump, !keep_expired, merge)
}

fn load_with(core: &Core, dump: &Dump, drop_expired: bool, replace: bool) -> Result<(), String> {
    let data = dump.bytes();
    let started = Instant::now();
    let mut next_report = started + Duration::from_secs(1);
    let cluster = core.cluster();
    let (index, count) = (core.index, core.count);
    let owned = |key: &[u8]| {
        count == 1
            || match cluster.local_shard(key_slot(key)) {
                Some(s) => s == index,
                // Slots of other hosts: kept (as Redis would) on shard 0.
                None => index == 0,
            }
    };
    let fail = |e: shard::rdb::RdbError| {
        format!("Short read or OOM loading DB. Unrecoverable error, aborting now. {}: {e}", dump.path)
    };
    let mut shard = core.shard.borrow_mut();
    let (checksum, databases) = (shard.config.rdbchecksum, shard.dbs.len());
    // Loaded values take the configured encodings, as Redis fits them.
    let mut reader = Reader::with_limits(data, Limits::of(&shard.config)).map_err(fail)?;
    // One core checks the file's CRC-64; a mismatch stops the process.
    reader.set_verify_checksum(checksum && index == 0);
    let now = shard::unix_ms();
    let (mut loaded, mut expired) = (0u64, 0u64);
    let lfu = shard.config.maxmemory_policy.is_lfu();
    loop {
        let item = reader.next_with(owned).map_err(fail)?;
        match item {
            None => return Err(format!("Unexpected EOF reading RDB file {} at offset {}", dump.path, data.len())),
            Some(Item::Eof { checksum_ok }) => {
                if !checksum_ok && checksum {
                    return Err(format!("Wrong RDB checksum in {}. Aborting now.", dump.path));
                }
                break;
            }
            Some(Item::SelectDb(db)) if db >= databases => {
                return Err(format!(
                    "FATAL: Data file was created with a Redis server configured to handle more than {databases} databases. Exiting"
                ));
            }
            Some(Item::Entry { db, key, expire_at_ms, idle, freq, value }) => {
                // Keys already expired are dropped, as a primary does
                // (rdbLoad: `expiretime < now`).
                if drop_expired && expire_at_ms.is_some_and(|at| at < now) {
                    expired += 1;
                    continue;
                }
                if !replace && shard.dbs[db].has_entry(&key) {
                    return Err(format!(
                        "RDB has duplicated key '{}' in DB {db}: Duplicated key found in RDB file",
                        String::from_utf8_lossy(&key)
                    ));
                }
                let ttl = expire_at_ms.map_or(Ttl::Clear, Ttl::At);
                shard.dbs[db].set(&key, value, ttl, now).restore_access(now, lfu, idle, freq);
                loaded += 1;
            }
            // Redis's own start-up lines, once.
            Some(Item::Aux { key, value }) if index == 0 => {
                let value = String::from_utf8_lossy(&value);
                match &*key {
                    b"redis-ver" => log::notice(&format!("Loading RDB produced by version {value}")),
                    b"ctime" => {
                        let age = (now / 1000).saturating_sub(value.parse().unwrap_or(now / 1000));
                        log::notice(&format!("RDB age {age} seconds"));
                    }
                    b"used-mem" => {
                        let mb = value.parse::<f64>().unwrap_or(0.0) / 1048576.0;
                        log::notice(&format!("RDB memory usage when created {mb:.2} Mb"));
                    }
                    _ => {}
                }
            }
            Some(Item::Function(_)) => {
                if index == 0 {
                    log::warning("The RDB file holds a function library; corekv has no functions: skipped");
                }
            }
            Some(_) => {}
        }
        if index == 0 && Instant::now() >= next_report {
            next_report += Duration::from_secs(1);
            let at = reader.offset() as f64;
            let secs = started.elapsed().as_secs_f64().max(1e-3);
            log::notice(&format!(
                "Loading RDB: {:.1}% of {:.1} MB, {:.1} MB/s, {loaded} keys on shard 0",
                100.0 * at / data.len().max(1) as f64,
                data.len() as f64 / 1e6,
                at / 1e6 / secs
            ));
        }
    }
    // The load is not a change to save again.
    shard.dirty = 0;
    let status = &core.process.save_status;
    status.loaded_keys.fetch_add(loaded, Relaxed);
    status.load_expired.fetch_add(expired, Relaxed);
    Ok(())
}
