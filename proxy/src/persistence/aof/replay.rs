//! Start-up: replaying a shard's base and incr files.

use super::manifest::*;
use crate::core::Core;
use crate::log;
use shard::commands::{execute, resolve, Ctx};
use shard::{Args, Config, Reply, Shard};

/// Replays one file into this core's shard. A torn tail of the last file
/// is cut off when `aof-load-truncated` allows it.
pub(super) fn load_file(core: &Core, config: &Config, f: &FileEntry, last: bool) -> Result<(), String> {
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
    let lfu = shard.config.maxmemory_policy.is_lfu();
    loop {
        match reader.next().map_err(|e| e.to_string())? {
            None => return Err("unexpected end of file".into()),
            Some(Item::Eof { checksum_ok: false }) => return Err("wrong RDB checksum".into()),
            Some(Item::Eof { .. }) => return Ok(()),
            Some(Item::Entry { db, key, expire_at_ms, idle, freq, value }) if db < databases => {
                let ttl = expire_at_ms.map_or(Ttl::Clear, Ttl::At);
                shard.dbs[db].set(&key, value, ttl, now).restore_access(now, lfu, idle, freq);
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

pub(super) enum Parse {
    Incomplete,
    Bad,
}

/// One `*N $len arg...` command at the start of `buf`: its arguments'
/// ranges (relative to `buf`) and its length.
pub(super) fn next_command(buf: &[u8], ranges: &mut Vec<(u32, u32)>) -> Result<usize, Parse> {
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
