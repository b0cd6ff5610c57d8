//! The append-only file, one per shard, in Redis 7's multi-part layout.
//!
//! Every shard appends the effects of its writes (`shard::propagate`) to its
//! own incr file, through glommio's io_uring file API, once per event-loop
//! batch. The files live in `appenddirname`; one manifest names every
//! shard's files with Redis's syntax plus the shard:
//!
//! ```text
//! file appendonly.aof.0.1.base.aof seq 1 type b shard 0
//! file appendonly.aof.0.1.incr.aof seq 1 type i shard 0
//! file appendonly.aof.1.1.incr.aof seq 1 type i shard 1
//! ```
//!
//! (`<appendfilename>.<shard>.<seq>.{base,incr}.aof`). At start each shard
//! replays its base then its incr files, in parallel with the others.
//! `appendfsync always`: a reply leaves only once the effects logged before
//! it are written and fdatasync'ed ([`durable`]); `everysec`: a background
//! fdatasync once a second; `no`: the kernel decides.

use crate::core::Core;
use crate::log;
use glommio::io::{BufferedFile, OpenOptions};
use glommio::sync::Semaphore;
use shard::commands::{execute, resolve, Ctx};
use shard::config::AppendFsync;
use shard::{Args, Config, Reply, Shard};
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// The AOF found (or created) at start.
#[derive(Clone, Debug)]
pub struct Found {
    pub manifest: Manifest,
    /// Created by this start: the shards write what they loaded (from a
    /// dump) as its first content.
    pub fresh: bool,
}

/// One line of the manifest.
#[derive(Clone, Debug, PartialEq)]
pub struct FileEntry {
    pub name: String,
    pub seq: u64,
    pub kind: Kind,
    pub shard: usize,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Kind {
    Base,
    Incr,
}

/// The files of every shard, as the manifest lists them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Manifest {
    pub files: Vec<FileEntry>,
}

impl Manifest {
    pub fn parse(text: &str) -> Result<Manifest, String> {
        let mut files = Vec::new();
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let words: Vec<&str> = line.split_whitespace().collect();
            if !words.len().is_multiple_of(2) {
                return Err(format!("Invalid AOF manifest file format: '{line}'"));
            }
            let (mut name, mut seq, mut kind, mut shard) = (None, None, None, None);
            for pair in words.chunks(2) {
                match pair[0] {
                    "file" => name = Some(pair[1].to_string()),
                    "seq" => seq = pair[1].parse::<u64>().ok(),
                    "type" => {
                        kind = match pair[1] {
                            "b" => Some(Kind::Base),
                            "i" => Some(Kind::Incr),
                            // History files are left for deletion.
                            "h" => None,
                            _ => return Err(format!("Unknown AOF file type '{}' in the manifest", pair[1])),
                        }
                    }
                    "shard" => shard = pair[1].parse::<usize>().ok(),
                    _ => {}
                }
            }
            // Without `shard` (a manifest redis-server wrote): shard 0.
            let (Some(name), Some(seq), Some(shard)) = (name, seq, shard.or(Some(0))) else {
                return Err(format!("Invalid AOF manifest file format: '{line}'"));
            };
            if name.contains('/') {
                return Err(format!("Invalid AOF file name in the manifest: '{name}'"));
            }
            if let Some(kind) = kind {
                files.push(FileEntry { name, seq, kind, shard });
            }
        }
        Ok(Manifest { files })
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        for f in &self.files {
            let kind = if f.kind == Kind::Base { "b" } else { "i" };
            out.push_str(&format!("file {} seq {} type {} shard {}\n", f.name, f.seq, kind, f.shard));
        }
        out
    }

    /// Shard `i`'s base (if any) and incr files, in replay order.
    pub fn of_shard(&self, i: usize) -> Vec<&FileEntry> {
        let mut files: Vec<&FileEntry> = self.files.iter().filter(|f| f.shard == i).collect();
        files.sort_by_key(|f| (f.kind == Kind::Incr, f.seq));
        files
    }

    pub fn shards(&self) -> usize {
        self.files.iter().map(|f| f.shard + 1).max().unwrap_or(0)
    }
}

pub fn incr_name(config: &Config, shard: usize, seq: u64) -> String {
    format!("{}.{shard}.{seq}.incr.aof", config.appendfilename)
}

/// A base is RDB (`.rdb`, with `aof-use-rdb-preamble yes`) or commands.
pub fn base_name(config: &Config, shard: usize, seq: u64) -> String {
    let ext = if config.aof_use_rdb_preamble { "rdb" } else { "aof" };
    format!("{}.{shard}.{seq}.base.{ext}", config.appendfilename)
}

/// `appenddirname` inside `dir`.
pub fn dir(config: &Config) -> PathBuf {
    PathBuf::from(&config.dir).join(&config.appenddirname)
}

fn manifest_path(config: &Config) -> PathBuf {
    dir(config).join(format!("{}.manifest", config.appendfilename))
}

/// Writes the manifest atomically: a temp file, fsync, rename, fsync of
/// the folder.
pub fn write_manifest(config: &Config, manifest: &Manifest) -> Result<(), String> {
    use std::io::Write;
    let path = manifest_path(config);
    let tmp = dir(config).join(format!("temp-{}.manifest", config.appendfilename));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(manifest.render().as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)?;
        std::fs::File::open(dir(config))?.sync_all()
    };
    write().map_err(|e| format!("Can't write the AOF manifest {}: {e}", path.display()))
}

/// Before the shards start: reads the manifest, or creates the folder,
/// one empty incr file per shard and the manifest naming them. `None`
/// when the AOF is off.
pub fn prepare(config: &Config, shards: usize) -> Result<Option<Found>, String> {
    if !config.appendonly {
        return Ok(None);
    }
    let path = manifest_path(config);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let manifest = Manifest::parse(&text)?;
            if manifest.shards() != shards {
                return Err(format!(
                    "The AOF in {} was written by {} shard(s); this server runs {shards}. Start with --shards {} \
                     (keys live on the shard owning their slots).",
                    config.appenddirname,
                    manifest.shards(),
                    manifest.shards()
                ));
            }
            Ok(Some(Found { manifest, fresh: false }))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir(config))
                .map_err(|e| format!("Can't create the AOF directory {}: {e}", config.appenddirname))?;
            let mut manifest = Manifest::default();
            for shard in 0..shards {
                let name = incr_name(config, shard, 1);
                // A leftover file of that name (no manifest names it) starts over.
                std::fs::File::create(dir(config).join(&name))
                    .map_err(|e| format!("Can't create the AOF file {name}: {e}"))?;
                manifest.files.push(FileEntry { name, seq: 1, kind: Kind::Incr, shard });
            }
            write_manifest(config, &manifest)?;
            log::notice(&format!("Creating AOF incr files in {} ({shards} shard(s))", config.appenddirname));
            Ok(Some(Found { manifest, fresh: true }))
        }
        Err(e) => Err(format!("Can't read the AOF manifest {}: {e}", path.display())),
    }
}

/// INFO persistence's aof_* figures of one shard.
#[derive(Clone, Debug)]
pub struct AofStats {
    pub rewrite_in_progress: bool,
    pub rewrite_started: Option<Instant>,
    pub rewrites: u64,
    pub last_rewrite_secs: i64,
    pub last_rewrite_ok: bool,
    pub last_write_ok: bool,
    pub current_size: u64,
    pub base_size: u64,
}

impl Default for AofStats {
    fn default() -> Self {
        AofStats {
            rewrite_in_progress: false,
            rewrite_started: None,
            rewrites: 0,
            last_rewrite_secs: -1,
            last_rewrite_ok: true,
            last_write_ok: true,
            current_size: 0,
            base_size: 0,
        }
    }
}

/// One core's AOF: its open incr file and how far effects are on disk.
pub struct Aof {
    pub enabled: Cell<bool>,
    file: RefCell<Option<Rc<BufferedFile>>>,
    /// Where the next write goes in the incr file.
    pos: Cell<u64>,
    /// Effects (positions in the shard's effect stream) written / fsynced.
    written: Cell<u64>,
    durable: Cell<u64>,
    waiters: RefCell<Vec<Waker>>,
    /// Held while the incr file is written, synced or switched.
    lock: Semaphore,
    /// This shard's files, as the manifest names them.
    pub files: RefCell<Vec<FileEntry>>,
    /// The next incr file, created by a rewrite's first step.
    next: RefCell<Option<(FileEntry, BufferedFile)>>,
    pub stats: RefCell<AofStats>,
}

impl Default for Aof {
    fn default() -> Self {
        Aof {
            enabled: Cell::new(false),
            file: RefCell::new(None),
            pos: Cell::new(0),
            written: Cell::new(0),
            durable: Cell::new(0),
            waiters: RefCell::new(Vec::new()),
            lock: Semaphore::new(1),
            files: RefCell::new(Vec::new()),
            next: RefCell::new(None),
            stats: RefCell::new(AofStats::default()),
        }
    }
}

impl Aof {
    fn set_durable(&self, end: u64) {
        self.durable.set(end);
        for w in self.waiters.borrow_mut().drain(..) {
            w.wake();
        }
    }
}

/// Waits until every effect logged on this core so far is written and
/// fdatasync'ed, with `appendfsync always`; returns at once otherwise. The
/// connection calls it before it sends replies, the mesh before it answers
/// another core, so no reply to a write leaves before the write is durable.
pub async fn durable(core: &Rc<Core>) {
    if !core.aof.enabled.get() {
        return;
    }
    let target = {
        let shard = core.shard.borrow();
        if shard.config.appendfsync != AppendFsync::Always {
            return;
        }
        shard.effects.as_ref().map_or(0, |e| e.end())
    };
    if core.aof.durable.get() >= target {
        return;
    }
    Durable { core: core.clone(), target }.await
}

/// Whether [`durable`] would wait now.
pub fn must_wait(core: &Core) -> bool {
    if !core.aof.enabled.get() {
        return false;
    }
    let shard = core.shard.borrow();
    shard.config.appendfsync == AppendFsync::Always
        && shard.effects.as_ref().is_some_and(|e| e.end() > core.aof.durable.get())
}

/// At shutdown: writes what is pending and fsyncs, whatever the policy.
pub async fn flush_at_exit(core: &Rc<Core>) {
    if !core.aof.enabled.get() {
        return;
    }
    let Ok(_permit) = core.aof.lock.acquire_permit(1).await else { return };
    let bytes = match core.shard.borrow_mut().effects.as_deref_mut() {
        Some(log) => log.take(),
        None => return,
    };
    let Some(file) = core.aof.file.borrow().clone() else { return };
    let len = bytes.len() as u64;
    if len > 0 {
        let pos = core.aof.pos.get();
        match file.write_at(bytes, pos).await {
            Ok(n) if n as u64 == len => core.aof.pos.set(pos + len),
            _ => log::warning("Error writing to the AOF file at shutdown"),
        }
    }
    if let Err(e) = file.fdatasync().await {
        log::warning(&format!("Can't persist the AOF at shutdown: {e}"));
    }
}

struct Durable {
    core: Rc<Core>,
    target: u64,
}

impl Future for Durable {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.core.aof.durable.get() >= self.target {
            return Poll::Ready(());
        }
        self.core.aof.waiters.borrow_mut().push(cx.waker().clone());
        Poll::Pending
    }
}

/// Ready once the shard has effects to write.
struct EffectsPending<'a>(&'a Core);

impl Future for EffectsPending<'_> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut shard = self.0.shard.borrow_mut();
        // Effects switched off (CONFIG SET appendonly no): the writer ends.
        let Some(log) = shard.effects.as_deref_mut() else { return Poll::Ready(()) };
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
                _ => write_failed(core, "Error writing the loaded dataset to the new AOF"),
            }
            if let Err(e) = file.fdatasync().await {
                write_failed(core, &format!("Can't persist the AOF (fdatasync): {e}"));
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
    let started = crate::mesh::call_all_tasks(core, move |c| start_appending(c, seq)).await;
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
            _ => write_failed(&core, "Error writing the dataset to the new AOF"),
        }
    }
    if let Err(e) = file.fdatasync().await {
        write_failed(&core, &format!("Can't persist the AOF (fdatasync): {e}"));
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
/// pending, then stops logging effects (the files stay as they are).
pub async fn turn_off(core: &Rc<Core>) {
    crate::mesh::call_all_tasks(core, |c| async move {
        flush_at_exit(&c).await;
        let Ok(_permit) = c.aof.lock.acquire_permit(1).await else { return };
        c.aof.enabled.set(false);
        let mut shard = c.shard.borrow_mut();
        if let Some(mut log) = shard.effects.take() {
            if let Some(w) = log.waker.take() {
                w.wake();
            }
        }
        for db in &mut shard.dbs {
            db.log_expired = false;
            db.expired_log.clear();
        }
        drop(shard);
        *c.aof.file.borrow_mut() = None;
        c.aof.set_durable(u64::MAX);
    })
    .await;
}

/// Replays one file into this core's shard. A torn tail of the last file
/// is cut off when `aof-load-truncated` allows it.
fn load_file(core: &Core, config: &Config, f: &FileEntry, last: bool) -> Result<(), String> {
    let path = dir(config).join(&f.name);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && f.kind == Kind::Incr => Vec::new(),
        Err(e) => return Err(format!("Can't open the append-only file {}: {e}", f.name)),
    };
    let mut shard = core.shard.borrow_mut();
    if bytes.starts_with(b"REDIS") {
        log::notice("Reading RDB base file on AOF loading...");
        return load_rdb_base(&mut shard, &bytes).map_err(|e| format!("Bad RDB base file {}: {e}", f.name));
    }
    match replay(&mut shard, &core.commands, &bytes) {
        Ok(()) => Ok(()),
        Err(Replay::BadFormat) => Err(format!(
            "Bad file format reading the append only file {}: make a backup of your AOF file, then use \
             ./redis-check-aof --fix <filename.manifest>",
            f.name
        )),
        Err(Replay::Unknown(name)) => Err(format!("Unknown command '{name}' reading the append only file {}", f.name)),
        Err(Replay::Truncated(valid)) if last && config.aof_load_truncated => {
            log::warning(&format!("!!! Warning: short read while loading the AOF file {}!!!", f.name));
            log::warning(&format!("!!! Truncating the AOF {} at offset {valid} !!!", f.name));
            let cut = std::fs::OpenOptions::new().write(true).open(&path).and_then(|file| file.set_len(valid));
            if let Err(e) = cut {
                return Err(format!("Error truncating the AOF file {}: {e}", f.name));
            }
            log::warning(&format!("AOF {} loaded anyway because aof-load-truncated is enabled", f.name));
            Ok(())
        }
        Err(Replay::Truncated(_)) if !last => {
            Err(format!("Fatal error: the truncated file is not the last file ({})", f.name))
        }
        Err(Replay::Truncated(_)) => Err(format!(
            "Unexpected end of file reading the append only file {}. You can: 1) Make a backup of your AOF file, \
             then use ./redis-check-aof --fix <filename.manifest>. 2) Alternatively you can set the \
             'aof-load-truncated' configuration option to yes and restart the server.",
            f.name
        )),
    }
}

/// Loads an RDB-form base (all its keys are this shard's).
fn load_rdb_base(shard: &mut Shard, bytes: &[u8]) -> Result<(), String> {
    use shard::db::Ttl;
    use shard::rdb::{Item, Limits, Reader};
    let mut reader = Reader::with_limits(bytes, Limits::of(&shard.config)).map_err(|e| e.to_string())?;
    reader.set_verify_checksum(true);
    let databases = shard.dbs.len();
    let now = shard::unix_ms();
    loop {
        match reader.next().map_err(|e| e.to_string())? {
            None => return Err("unexpected end of file".into()),
            Some(Item::Eof { checksum_ok: false }) => return Err("wrong RDB checksum".into()),
            Some(Item::Eof { .. }) => return Ok(()),
            Some(Item::Entry { db, key, expire_at_ms, value, .. }) if db < databases => {
                shard.dbs[db].set(&key, value, expire_at_ms.map_or(Ttl::Clear, Ttl::At), now);
            }
            Some(Item::Entry { db, .. }) | Some(Item::SelectDb(db)) if db >= databases => {
                return Err(format!("database {db} out of range (databases {databases})"));
            }
            Some(_) => {}
        }
    }
}

#[derive(Debug, PartialEq)]
pub enum Replay {
    /// The file ends inside a command; commands end at this offset.
    Truncated(u64),
    BadFormat,
    Unknown(String),
}

/// Executes every command of an AOF on `shard`, as the normal command path
/// would (effects off, so nothing is logged again).
pub fn replay(shard: &mut Shard, table: &crate::core::CommandTable, bytes: &[u8]) -> Result<(), Replay> {
    let mut pos = 0;
    let mut db = 0;
    let mut ranges = Vec::new();
    let mut out = Vec::new();
    let now = shard::unix_ms();
    while pos < bytes.len() {
        let end = match next_command(&bytes[pos..], &mut ranges) {
            Ok(n) => pos + n,
            Err(Parse::Incomplete) => return Err(Replay::Truncated(pos as u64)),
            Err(Parse::Bad) => return Err(Replay::BadFormat),
        };
        let args = Args::new(&bytes[pos..end], &ranges);
        pos = end;
        let name = args.get(0);
        if name.eq_ignore_ascii_case(b"select") {
            db = std::str::from_utf8(args.get(1.min(args.len() - 1)))
                .ok()
                .and_then(|s| s.parse::<usize>().ok())
                .filter(|&d| d < shard.dbs.len())
                .ok_or(Replay::BadFormat)?;
            continue;
        }
        if name.eq_ignore_ascii_case(b"multi") || name.eq_ignore_ascii_case(b"exec") {
            continue;
        }
        let Some(spec) = table.lookup(name).and_then(|s| resolve(s, &args)) else {
            return Err(Replay::Unknown(String::from_utf8_lossy(name).into_owned()));
        };
        if spec.handler.is_none() || !spec.arity_ok(args.len()) {
            return Err(Replay::Unknown(String::from_utf8_lossy(name).into_owned()));
        }
        out.clear();
        let mut ctx = Ctx { db, now, reply: Reply::new(&mut out, false) };
        execute(spec, shard, &mut ctx, args);
    }
    Ok(())
}

enum Parse {
    Incomplete,
    Bad,
}

/// One `*N $len arg...` command at the start of `buf`: its arguments'
/// ranges (relative to `buf`) and its length.
fn next_command(buf: &[u8], ranges: &mut Vec<(u32, u32)>) -> Result<usize, Parse> {
    ranges.clear();
    let mut pos = 0;
    let line = |pos: &mut usize, prefix: u8| -> Result<i64, Parse> {
        let rest = buf.get(*pos..).ok_or(Parse::Incomplete)?;
        let Some(end) = rest.iter().position(|&b| b == b'\n') else {
            // A header longer than any valid one is not a torn tail.
            return Err(if rest.len() > 32 { Parse::Bad } else { Parse::Incomplete });
        };
        if end < 2 || rest[0] != prefix || rest[end - 1] != b'\r' {
            return Err(Parse::Bad);
        }
        let n = std::str::from_utf8(&rest[1..end - 1]).ok().and_then(|s| s.parse::<i64>().ok()).ok_or(Parse::Bad)?;
        *pos += end + 1;
        Ok(n)
    };
    let argc = line(&mut pos, b'*')?;
    if !(1..=1 << 20).contains(&argc) {
        return Err(Parse::Bad);
    }
    for _ in 0..argc {
        let len = line(&mut pos, b'$')?;
        if !(0..=u32::MAX as i64 / 2).contains(&len) {
            return Err(Parse::Bad);
        }
        let start = pos;
        let end = start + len as usize;
        if buf.len() < end + 2 {
            return Err(Parse::Incomplete);
        }
        if &buf[end..end + 2] != b"\r\n" || end > u32::MAX as usize {
            return Err(Parse::Bad);
        }
        ranges.push((start as u32, end as u32));
        pos = end + 2;
    }
    Ok(pos)
}

/// Writes the shard's effects to its incr file once per batch; with
/// `appendfsync always` fdatasyncs before waking the replies that wait.
async fn writer(core: Rc<Core>) {
    loop {
        EffectsPending(&core).await;
        let Ok(_permit) = core.aof.lock.acquire_permit(1).await else { return };
        if !core.aof.enabled.get() {
            return;
        }
        let (bytes, end) = {
            let mut shard = core.shard.borrow_mut();
            let Some(log) = shard.effects.as_deref_mut() else { return };
            let bytes = log.take();
            (bytes, log.taken)
        };
        if bytes.is_empty() {
            continue;
        }
        let Some(file) = core.aof.file.borrow().clone() else { return };
        let len = bytes.len() as u64;
        let pos = core.aof.pos.get();
        match file.write_at(bytes, pos).await {
            Ok(n) if n as u64 == len => {}
            Ok(n) => write_failed(
                &core,
                &format!("Short write while writing to the AOF file: (nwritten={n}, expected={len})"),
            ),
            Err(e) => write_failed(&core, &format!("Error writing to the AOF file: {e}")),
        }
        core.aof.pos.set(pos + len);
        core.aof.written.set(end);
        core.aof.stats.borrow_mut().current_size += len;
        let always = core.config().appendfsync == AppendFsync::Always;
        if always {
            if let Err(e) = file.fdatasync().await {
                write_failed(&core, &format!("Can't persist the AOF (fdatasync): {e}"));
            }
            core.aof.set_durable(end);
        }
    }
}

/// A lost write leaves a hole in the log that no later write can mend:
/// Redis stops with `always`; here every policy stops, loudly.
fn write_failed(core: &Core, msg: &str) -> ! {
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
        if let Err(e) = file.fdatasync().await {
            log::warning(&format!("Can't persist the AOF (fdatasync): {e}"));
            continue;
        }
        core.aof.set_durable(written);
    }
}

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
    let prepared = crate::mesh::call_all_tasks(core, prepare_incr).await;
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
        crate::mesh::call_all(core, |c| {
            if c.aof.next.borrow_mut().take().is_some() {
                let mut stats = c.aof.stats.borrow_mut();
                (stats.rewrite_in_progress, stats.rewrite_started, stats.last_rewrite_ok) = (false, None, false);
            }
        })
        .await;
        remove_unnamed(&config, &next, &before);
        return Err(e);
    }
    // An RDB base is streamed by the snapshot's copy-on-write walk, which
    // serves one snapshot at a time: the rewrite holds the save lock (a
    // BGSAVE meanwhile is refused as "in progress"); without it the bases
    // are rendered in one synchronous pass per shard.
    let saves = &core.process.save_status.in_progress;
    let walk = config.aof_use_rdb_preamble
        && saves.compare_exchange(false, true, Ordering::Relaxed, Ordering::Relaxed).is_ok();
    let results = crate::mesh::call_all_tasks(core, move |c| switch_and_write_base(c, walk)).await;
    if walk {
        saves.store(false, Ordering::Relaxed);
    }
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
    for files in crate::mesh::call_all(core, |c| c.aof.files.borrow().clone()).await {
        m.files.extend(files.ok_or("a shard could not be reached")?);
    }
    Ok(m)
}

/// Removes the files `old` names and `new` does not.
fn remove_unnamed(config: &Config, old: &Manifest, new: &Manifest) {
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
        let Some(log) = shard.effects.as_deref_mut() else { return Err("AOF is off".into()) };
        let tail = log.take();
        let end = log.taken;
        log.reselect();
        let now = shard::unix_ms();
        let snapshot = if walk {
            shard.begin_snapshot(now, config.rdbcompression);
            Vec::new()
        } else if config.aof_use_rdb_preamble {
            render_rdb(&shard, now)
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
        if len > 0 {
            match old_file.write_at(tail, old_pos).await {
                Ok(n) if n as u64 == len => {}
                Ok(_) | Err(_) => write_failed(core, "Error writing to the AOF file during a rewrite"),
            }
        }
        if let Err(e) = old_file.fdatasync().await {
            write_failed(core, &format!("Can't persist the AOF (fdatasync): {e}"));
        }
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
        let done = core.shard.borrow_mut().snapshot_step(&mut pending, CHUNK, Instant::now() + SLICE);
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

/// The shard's keyspace as an RDB file (an AOF base with the RDB preamble),
/// as Redis 7.0 writes one: aux fields with `aof-base 1`, then per database
/// SELECTDB, RESIZEDB and the entries, EOF and the CRC-64.
pub fn render_rdb(shard: &Shard, now: u64) -> Vec<u8> {
    use shard::rdb;
    let mut out = Vec::new();
    rdb::write_standard_header(&mut out, now / 1000, 0, true);
    let opts = rdb::SaveOptions { compress: shard.config.rdbcompression };
    for (i, db) in shard.dbs.iter().enumerate() {
        if db.is_empty() {
            continue;
        }
        rdb::write_select_db(&mut out, i);
        rdb::write_resize_db(&mut out, db.len() as u64, db.volatile() as u64);
        for e in db.iter_live(now) {
            rdb::write_entry(&mut out, &e.key, &e.value, e.expire_at(), &opts);
        }
    }
    rdb::write_eof(&mut out);
    let mut crc = rdb::Crc64::new();
    crc.update(&out);
    let sum = crc.value();
    out.extend_from_slice(&sum.to_le_bytes());
    out
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

/// INFO persistence's aof_* lines (Redis 7.0's names and order) from every
/// shard's figures; empty `shards` when the AOF is off.
pub fn info_fields(shards: &[AofStats]) -> String {
    let enabled = !shards.is_empty();
    let in_progress = shards.iter().any(|s| s.rewrite_in_progress);
    let current_secs = shards.iter().filter_map(|s| s.rewrite_started).map(|t| t.elapsed().as_secs() as i64).max();
    let last_secs = shards.iter().map(|s| s.last_rewrite_secs).max().unwrap_or(-1);
    let ok = |b: bool| if b { "ok" } else { "err" };
    let mut out = format!(
        "aof_enabled:{}\r\naof_rewrite_in_progress:{}\r\naof_rewrite_scheduled:0\r\naof_last_rewrite_time_sec:{last_secs}\r\n\
         aof_current_rewrite_time_sec:{}\r\naof_last_bgrewrite_status:{}\r\naof_rewrites:{}\r\n\
         aof_rewrites_consecutive_failures:0\r\naof_last_write_status:{}\r\naof_last_cow_size:0\r\n\
         module_fork_in_progress:0\r\nmodule_fork_last_cow_size:0\r\n",
        enabled as u8,
        in_progress as u8,
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

/// `BGREWRITEAOF`: started in the background, answered at once as Redis.
pub fn bgrewriteaof(conn: &mut crate::conn::Connection) {
    let core = conn.core.clone();
    if !core.aof.enabled.get() {
        // Redis rewrites a file even with the AOF off; here there is no
        // file to rewrite until the AOF is on.
        return conn.error("ERR AOF is off (appendonly no): nothing to rewrite");
    }
    if REWRITING.with(Cell::get) {
        return conn.error("ERR Background append only file rewriting already in progress");
    }
    REWRITING.with(|r| r.set(true));
    glommio::spawn_local(async move {
        log::notice("Background append only file rewriting started");
        if let Err(e) = rewrite_all(&core).await {
            log::warning(&format!("Background AOF rewrite failed: {e}"));
        }
        REWRITING.with(|r| r.set(false));
    })
    .detach();
    conn.pipeline.local(|out| shard::Reply::new(out, false).simple("Background append only file rewriting started"));
}

thread_local! {
    /// A rewrite coordinated from this core is running.
    static REWRITING: Cell<bool> = const { Cell::new(false) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_round_trip() {
        let text = "file appendonly.aof.0.2.base.aof seq 2 type b shard 0\n\
                    file appendonly.aof.0.2.incr.aof seq 2 type i shard 0\n\
                    file appendonly.aof.1.1.incr.aof seq 1 type i shard 1\n";
        let m = Manifest::parse(text).unwrap();
        assert_eq!(m.shards(), 2);
        assert_eq!(m.render(), text);
        assert_eq!(m.of_shard(0)[0].kind, Kind::Base);
        assert!(Manifest::parse("file a seq 1 type x shard 0\n").is_err());
        assert!(Manifest::parse("file a seq\n").is_err());
        let redis = Manifest::parse("file appendonly.aof.1.base.rdb seq 1 type b\n").unwrap();
        assert_eq!((redis.shards(), redis.files[0].shard), (1, 0));
        assert!(Manifest::parse("file ../a seq 1 type i shard 0\n").is_err());
        assert_eq!(Manifest::parse("# c\nfile h seq 1 type h shard 0\n").unwrap().files.len(), 0);
    }

    #[test]
    fn commands_and_torn_tails() {
        let mut ranges = Vec::new();
        let cmd = b"*2\r\n$3\r\nDEL\r\n$1\r\na\r\n";
        assert_eq!(next_command(cmd, &mut ranges).ok(), Some(cmd.len()));
        assert_eq!(ranges, vec![(8, 11), (17, 18)]);
        for cut in 0..cmd.len() {
            assert!(matches!(next_command(&cmd[..cut], &mut ranges), Err(Parse::Incomplete)), "cut {cut}");
        }
        assert!(matches!(next_command(b"*1\r\n$3\r\nDELxx", &mut ranges), Err(Parse::Bad)));
        assert!(matches!(next_command(b"+OK\r\n", &mut ranges), Err(Parse::Bad)));
        assert!(matches!(next_command(b"*-1\r\n", &mut ranges), Err(Parse::Bad)));
        assert!(matches!(next_command(b"*1\r\n$99999999999\r\n", &mut ranges), Err(Parse::Bad)));
    }

    #[test]
    fn replay_rebuilds_the_shard() {
        let table = crate::core::CommandTable::new();
        let mut shard = Shard::new(0, 1, Config::default());
        let mut log = Vec::new();
        shard::propagate::put_command(&mut log, &[b"SELECT", b"2"]);
        shard::propagate::put_command(&mut log, &[b"RPUSH", b"l", b"a", b"b"]);
        shard::propagate::put_command(&mut log, &[b"SET", b"k", b"v", b"PXAT", b"99999999999999"]);
        replay(&mut shard, &table, &log).unwrap();
        assert_eq!(shard.dbs[2].len(), 2);
        let text = render_keyspace(&shard, 0);
        let mut other = Shard::new(0, 1, Config::default());
        replay(&mut other, &table, &text).unwrap();
        assert_eq!(render_keyspace(&other, 0), text);
        let torn = &log[..log.len() - 3];
        let mut third = Shard::new(0, 1, Config::default());
        let valid = (log.len()
            - b"*5\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n$4\r\nPXAT\r\n$14\r\n99999999999999\r\n".len())
            as u64;
        assert_eq!(replay(&mut third, &table, torn), Err(Replay::Truncated(valid)));
        assert_eq!(replay(&mut third, &table, b"*1\r\n$4\r\nNOPE\r\n"), Err(Replay::Unknown("NOPE".into())));
    }

    proptest::proptest! {
        /// Any bytes, any cut or flipped bit of a valid log: an error or a
        /// load, never a panic; a whole log replays to what it wrote.
        #[test]
        fn hostile_logs_never_panic(
            cmds in proptest::collection::vec(
                proptest::collection::vec(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..12), 1..5),
                0..20,
            ),
            cut in 0usize..400,
            flip in 0usize..400,
            noise in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
        ) {
            let table = crate::core::CommandTable::new();
            let mut log = Vec::new();
            for (i, parts) in cmds.iter().enumerate() {
                let key = format!("k{i}");
                let mut line: Vec<&[u8]> = vec![b"RPUSH", key.as_bytes()];
                line.extend(parts.iter().map(Vec::as_slice));
                shard::propagate::put_command(&mut log, &line);
            }
            let mut shard = Shard::new(0, 1, Config::default());
            proptest::prop_assert_eq!(replay(&mut shard, &table, &log), Ok(()));
            proptest::prop_assert_eq!(shard.dbs[0].len(), cmds.len());
            let mut cut_log = log.clone();
            cut_log.truncate(cut.min(log.len()));
            let _ = replay(&mut Shard::new(0, 1, Config::default()), &table, &cut_log);
            let mut flipped = log.clone();
            if !flipped.is_empty() {
                let at = flip % flipped.len();
                flipped[at] ^= 1 << (flip % 8);
            }
            let _ = replay(&mut Shard::new(0, 1, Config::default()), &table, &flipped);
            let _ = replay(&mut Shard::new(0, 1, Config::default()), &table, &noise);
            let _ = Manifest::parse(&String::from_utf8_lossy(&noise));
        }
    }
}
