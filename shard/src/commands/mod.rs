//! The command table: every command's name, arity, flags, key positions and
//! routing, declared once. `proxy` reads it to check arity, find keys and
//! route; `shard` runs the handlers of the commands that execute on the shard
//! owning their keys. One file per family of commands.

pub mod aggregate;
pub mod bitmap;
pub mod debug;
pub mod dump;
pub mod geo;
pub mod hash;
pub mod hyperloglog;
pub mod keys;
pub mod lcs;
pub mod list;
pub mod lolwut;
pub mod memory;
pub mod module;
pub mod pubsub;
pub mod scripting;
pub mod server;
pub mod set;
pub mod sort;
pub mod stream;
pub mod string;
pub mod transactions;
pub mod zset;

use crate::args::Args;
use crate::reply::Reply;
use crate::shard::Shard;
use std::sync::OnceLock;

/// Per-command execution context on the shard.
pub struct Ctx<'a> {
    pub db: usize,
    /// Unix time in ms, read once per batch like Redis's cached clock.
    pub now: u64,
    pub reply: Reply<'a>,
}

pub type Handler = fn(&mut Shard, &mut Ctx, Args);

/// How merged replies of a command split over shards combine.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Merge {
    /// Integers added up (DEL, EXISTS, DBSIZE...).
    Sum,
    /// `+OK` when every part said so, else the first error (MSET, FLUSHALL).
    AllOk,
    /// One element per key, back in the order of the request (MGET).
    ByKey,
    /// Arrays concatenated (KEYS).
    Concat,
}

/// Where a command runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Route {
    /// No keys: runs on the connection's own shard (PING, ECHO, TIME).
    Local,
    /// Every key lives on one shard: runs there. Commands naming several keys
    /// that land on different shards take the proxy's cross-shard path.
    Keyed,
    /// Keys are split by owning shard, each part runs where its keys live,
    /// the replies merge.
    SplitKeys(Merge),
    /// Runs on every shard, the replies merge.
    AllShards(Merge),
    /// Implemented by the proxy (connection state, multi-phase commands,
    /// server introspection).
    Proxy,
}

pub mod flags {
    pub const WRITE: u32 = 1;
    pub const READONLY: u32 = 1 << 1;
    pub const DENYOOM: u32 = 1 << 2;
    pub const ADMIN: u32 = 1 << 3;
    pub const NOSCRIPT: u32 = 1 << 4;
    pub const LOADING: u32 = 1 << 5;
    pub const STALE: u32 = 1 << 6;
    pub const FAST: u32 = 1 << 7;
    pub const NO_AUTH: u32 = 1 << 8;
    /// Refused unless its `enable-*-command` setting allows it (DEBUG,
    /// MODULE LOAD...: Redis's CMD_PROTECTED).
    pub const PROTECTED: u32 = 1 << 9;
}

/// Where a keyword names one more key (Redis's getkeys procedures).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum StoreKey {
    None,
    /// The argument after the last STORE or STOREDIST from this index on
    /// (georadiusGetKeys).
    Geo(u8),
    /// The argument after the last STORE, skipping LIMIT's, GET's and BY's
    /// arguments (sortGetKeys).
    Sort,
}

impl StoreKey {
    fn find(self, args: &Args) -> Option<usize> {
        let mut found = None;
        let mut i = match self {
            StoreKey::None => return None,
            StoreKey::Geo(from) => from as usize,
            StoreKey::Sort => 2,
        };
        while i < args.len() {
            let last = i + 1 >= args.len();
            match self {
                StoreKey::Geo(_) if !last && (args.is(i, "store") || args.is(i, "storedist")) => {
                    found = Some(i + 1);
                    i += 1;
                }
                StoreKey::Sort if args.is(i, "limit") => i += 2,
                StoreKey::Sort if args.is(i, "get") || args.is(i, "by") => i += 1,
                StoreKey::Sort if !last && args.is(i, "store") => found = Some(i + 1),
                _ => {}
            }
            i += 1;
        }
        found
    }
}
/// `keynum.0` marking keys that follow a STREAMS keyword.
pub const STREAMS_KEYWORD: u8 = u8::MAX;
/// `keynum.0` marking MIGRATE's keys: argument 3, or those after KEYS.
pub const MIGRATE_KEYWORD: u8 = u8::MAX - 1;

/// MIGRATE's keys in its KEYS form (Redis's migrateGetKeys): what follows
/// KEYS, none when the key argument is not empty (MIGRATE refuses that);
/// `None` for the one-key form.
fn migrate_keys(args: &Args) -> Option<std::ops::Range<usize>> {
    let mut i = 6;
    while i < args.len() {
        if args.is(i, "keys") {
            return Some(if args.get(3).is_empty() { i + 1..args.len() } else { 0..0 });
        }
        i += if args.is(i, "auth") {
            2
        } else if args.is(i, "auth2") {
            3
        } else {
            1
        };
    }
    None
}

pub struct CommandSpec {
    /// Lower case, as `COMMAND` reports it (`client|setname` for subcommands).
    pub name: &'static str,
    /// Redis's arity: N means exactly N arguments including the name, -N at
    /// least N.
    pub arity: i32,
    pub flags: u32,
    /// Key positions as (first, last, step); last -1 means "to the end".
    pub keys: (i32, i32, i32),
    /// Commands whose keys follow a count (SINTERCARD 2 a b, ZUNIONSTORE d 2
    /// a b): (index of the count, index of the first of those keys); (0, 0)
    /// for none. Redis's "keynum" key specs.
    pub keynum: (u8, u8),
    /// A destination key named by a keyword (SORT's and GEORADIUS's STORE).
    pub store_key: StoreKey,
    pub route: Route,
    pub handler: Option<Handler>,
    pub subcommands: &'static [CommandSpec],
}

impl CommandSpec {
    pub fn arity_ok(&self, argc: usize) -> bool {
        let argc = argc as i32;
        if self.arity >= 0 {
            argc == self.arity
        } else {
            argc >= -self.arity
        }
    }

    pub fn has_flag(&self, flag: u32) -> bool {
        self.flags & flag != 0
    }

    /// Indexes of the key arguments of a command line: its fixed positions,
    /// then the keys counted by its numkeys argument (none when the count is
    /// not a valid number; the handler reports that).
    pub fn key_indexes(&self, args: &Args) -> impl Iterator<Item = usize> {
        let argc = args.len();
        let (first, last, step) = self.keys;
        let last = if last < 0 { argc as i32 + last } else { last.min(argc as i32 - 1) };
        let (first, step) = (first.max(0) as usize, step.max(1) as usize);
        let mut end = if first == 0 { 0 } else { (last + 1).max(0) as usize };
        let (at, from) = (self.keynum.0 as usize, self.keynum.1 as usize);
        let counted = if at == STREAMS_KEYWORD as usize {
            // XREAD/XREADGROUP: half of what follows STREAMS.
            match (1..argc).find(|&i| args.is(i, "streams")) {
                Some(i) if (argc - i - 1).is_multiple_of(2) => i + 1..i + 1 + (argc - i - 1) / 2,
                _ => 0..0,
            }
        } else if at == MIGRATE_KEYWORD as usize {
            migrate_keys(args).inspect(|_| end = 0).unwrap_or(0..0)
        } else if at == 0 || at >= argc {
            0..0
        } else {
            match crate::args::parse_i64(args.get(at)) {
                Some(n) if n > 0 && (n as usize) <= argc.saturating_sub(from) => from..from + n as usize,
                _ => 0..0,
            }
        };
        (first..end).step_by(step).chain(counted).chain(self.store_key.find(args))
    }

    /// The same spec with a destination key named by a keyword.
    pub const fn with_store_key(mut self, store: StoreKey) -> Self {
        self.store_key = store;
        self
    }

    /// The same spec with its keys after the STREAMS keyword (XREAD).
    pub const fn with_streams_keys(mut self) -> Self {
        self.keynum = (STREAMS_KEYWORD, 0);
        self
    }

    /// The same spec with MIGRATE's keys (argument 3, or after KEYS).
    pub const fn with_migrate_keys(mut self) -> Self {
        self.keynum = (MIGRATE_KEYWORD, 0);
        self
    }

    /// The same spec with keys counted by a numkeys argument.
    pub const fn with_keynum(mut self, count_at: u8, first_key: u8) -> Self {
        self.keynum = (count_at, first_key);
        self
    }

    /// This (sub)command's position in [`numbered`]: the index of its
    /// per-command statistics, found from where the spec lives in its
    /// table (no name hashing). `usize::MAX` for a spec outside the tables.
    #[inline]
    pub fn index(&self) -> usize {
        let at = self as *const CommandSpec as usize;
        let tables = &numbering().1;
        let found = tables.binary_search_by(|&(start, end, _)| match () {
            _ if at < start => std::cmp::Ordering::Greater,
            _ if at >= end => std::cmp::Ordering::Less,
            _ => std::cmp::Ordering::Equal,
        });
        match found {
            Ok(t) => tables[t].2 + (at - tables[t].0) / std::mem::size_of::<CommandSpec>(),
            Err(_) => usize::MAX,
        }
    }

    pub fn subcommand(&self, name: &[u8]) -> Option<&'static CommandSpec> {
        self.subcommands.iter().find(|s| {
            let short = s.name.rsplit('|').next().unwrap_or(s.name);
            short.as_bytes().eq_ignore_ascii_case(name)
        })
    }
}

macro_rules! cmd {
    ($name:literal, $arity:expr, $flags:expr, $keys:expr, $route:expr, $handler:expr) => {
        cmd!($name, $arity, $flags, $keys, $route, $handler, &[])
    };
    ($name:literal, $arity:expr, $flags:expr, $keys:expr, $route:expr, $handler:expr, $subs:expr) => {
        CommandSpec {
            name: $name,
            arity: $arity,
            flags: $flags,
            keys: $keys,
            keynum: (0, 0),
            store_key: $crate::commands::StoreKey::None,
            route: $route,
            handler: $handler,
            subcommands: $subs,
        }
    };
}
pub(crate) use cmd;

/// What family tables need: flags, routes, the `cmd!` macro and common key
/// positions `(first, last, step)`.
pub(crate) mod prelude {
    pub(crate) use super::cmd;
    pub use super::flags::*;
    pub use super::CommandSpec;
    pub use super::Merge::*;
    pub use super::Route::*;
    pub use super::StoreKey;
    pub const NOKEYS: (i32, i32, i32) = (0, 0, 0);
    pub const KEY1: (i32, i32, i32) = (1, 1, 1);
    pub const KEYS12: (i32, i32, i32) = (1, 2, 1);
    pub const ALLKEYS: (i32, i32, i32) = (1, -1, 1);
    pub const PAIRS: (i32, i32, i32) = (1, -1, 2);
    /// Connection commands: allowed before AUTH, while loading, anywhere.
    pub const CONN: u32 = NOSCRIPT | LOADING | STALE | FAST | NO_AUTH;
}

/// Every command corekv serves, one table per family (each family file
/// declares its own; subcommand tables live with their families).
pub static FAMILIES: &[&[CommandSpec]] = &[
    server::COMMANDS,
    keys::COMMANDS,
    dump::COMMANDS,
    string::COMMANDS,
    bitmap::COMMANDS,
    hyperloglog::COMMANDS,
    hash::COMMANDS,
    set::COMMANDS,
    list::COMMANDS,
    zset::COMMANDS,
    geo::COMMANDS,
    sort::COMMANDS,
    lcs::COMMANDS,
    stream::COMMANDS,
    transactions::COMMANDS,
    scripting::COMMANDS,
    pubsub::COMMANDS,
    memory::COMMANDS,
    debug::COMMANDS,
    lolwut::COMMANDS,
    module::COMMANDS,
];

/// All top-level commands.
pub fn all() -> impl Iterator<Item = &'static CommandSpec> {
    FAMILIES.iter().flat_map(|f| f.iter())
}

/// Every command and subcommand, numbered for per-command statistics
/// (`CommandSpec::index`): each family's table in turn, then each
/// subcommand table.
pub fn numbered() -> &'static [&'static CommandSpec] {
    &numbering().0
}

/// The numbered specs, and each table's address range with the number of
/// its first spec, sorted by address.
#[allow(clippy::type_complexity)]
fn numbering() -> &'static (Vec<&'static CommandSpec>, Vec<(usize, usize, usize)>) {
    static NUMBERING: OnceLock<(Vec<&'static CommandSpec>, Vec<(usize, usize, usize)>)> = OnceLock::new();
    NUMBERING.get_or_init(|| {
        let subs = all().map(|c| c.subcommands).filter(|s| !s.is_empty());
        let mut list = Vec::new();
        let mut tables = Vec::new();
        for table in FAMILIES.iter().copied().chain(subs) {
            let start = table.as_ptr() as usize;
            tables.push((start, start + std::mem::size_of_val(table), list.len()));
            list.extend(table.iter());
        }
        tables.sort_unstable();
        (list, tables)
    })
}

/// The spec that runs for a command line: the command itself, or its
/// subcommand when it has them (`None` for an unknown subcommand).
pub fn resolve<'a>(spec: &'static CommandSpec, args: &Args<'a>) -> Option<&'static CommandSpec> {
    if spec.subcommands.is_empty() || args.len() < 2 {
        return Some(spec);
    }
    spec.subcommand(args.get(1))
}

/// Runs a shard-side command. `spec` is the resolved (sub)command.
#[inline]
pub fn execute(spec: &CommandSpec, shard: &mut Shard, ctx: &mut Ctx, args: Args) {
    shard.stats.commands += 1;
    let reply_start = ctx.reply.buf.len();
    shard.dirty += (spec.flags & flags::WRITE != 0) as u64;
    // maxmemory: what a write adds on this shard is owed to eviction.
    let counted = shard.config.maxmemory != 0 && spec.flags & flags::WRITE != 0;
    let before = if counted { crate::memory::thread_used() } else { 0 };
    // A replica's writes come only from its primary: keys its own clock
    // calls expired are live to them (Redis 7.0's expireIfNeeded).
    let obey_master = shard.dbs[ctx.db].keep_expired && spec.flags & flags::WRITE != 0;
    if obey_master {
        shard.dbs.iter_mut().for_each(|db| db.obey_master = true);
    }
    match spec.handler {
        Some(handler) => handler(shard, ctx, args),
        None => ctx.reply.error(&format!("ERR command '{}' cannot run on a shard", spec.name)),
    }
    if counted {
        shard.owe(crate::memory::thread_used() - before);
    }
    if obey_master {
        shard.dbs.iter_mut().for_each(|db| db.obey_master = false);
    }
    if shard.effects.is_some() && spec.has_flag(flags::WRITE) {
        crate::propagate::after_command(shard, spec, ctx.db, ctx.now, &args, &ctx.reply.buf[reply_start..]);
    }
    // Keys this command found expired (`expired` events) go out with it.
    shard.collect_db_notes();
    if shard.dbs[ctx.db].watch.is_some() && spec.has_flag(flags::WRITE) {
        touch_watched(shard, spec, ctx.db, &args, &ctx.reply.buf[reply_start..]);
    }
    // Client-side caching: one branch while no client tracks keys here.
    if shard.tracking.is_some() || shard.caller.0 != 0 {
        track(shard, spec, &args, &ctx.reply.buf[reply_start..]);
    }
    // Any write may hand a blocked client its data (a push, ZADD, a STORE,
    // RENAME onto a watched key); the owner checks the key's type and size.
    if !shard.watched.is_empty() && spec.has_flag(flags::WRITE) {
        for i in spec.key_indexes(&args) {
            shard.signal_ready(ctx.db, args.get(i));
        }
    }
}

/// WATCH: a write that changed its keys dirties their watchers. Keys set,
/// removed or expired are touched by `Db` itself; this covers values changed
/// in place. Redis touches only on a real change: an error, or a zero / nil
/// / empty reply from a command for which that means "nothing done", is not
/// one.
fn touch_watched(shard: &mut Shard, spec: &CommandSpec, db: usize, args: &Args, reply: &[u8]) {
    // Searches and sorts read their source; a STORE's destination is set
    // or removed through `Db`, which touches it.
    if matches!(spec.name, "georadius" | "georadiusbymember" | "geosearchstore" | "sort") {
        return;
    }
    if !changed_something(spec, reply) {
        return;
    }
    if let Some(watch) = &mut shard.dbs[db].watch {
        for i in spec.key_indexes(args) {
            watch.touch(args.get(i));
        }
    }
}

/// Whether a write's reply says it changed something (see `touch_watched`).
fn changed_something(spec: &CommandSpec, reply: &[u8]) -> bool {
    const CHANGED_EVEN_AT_ZERO: &[&str] =
        &["incr", "decr", "incrby", "decrby", "hincrby", "hset", "zadd", "setbit", "bitfield", "setrange"];
    let nothing = matches!(reply, b":0\r\n" | b"$-1\r\n" | b"*-1\r\n" | b"_\r\n" | b"*0\r\n");
    !(reply.first() == Some(&b'-') || (nothing && !CHANGED_EVEN_AT_ZERO.contains(&spec.name)))
}

/// CLIENT TRACKING: reads of a tracking client remembered, changed keys
/// invalidated (`crate::tracking`).
#[cold]
fn track(shard: &mut Shard, spec: &CommandSpec, args: &Args, reply: &[u8]) {
    let caller = shard.caller;
    let max_keys = shard.tracking_max_keys();
    let changed = spec.has_flag(flags::WRITE) && changed_something(spec, reply);
    let index = shard.index;
    let table = shard.tracking_table();
    crate::tracking::after_command(table, caller, spec, args, changed, max_keys, index);
}

/// `ERR wrong number of arguments for '<name>' command`.
pub fn arity_error(name: &str) -> String {
    format!("ERR wrong number of arguments for '{name}' command")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_positions() {
        let find = |n: &str| all().find(|c| c.name == n).unwrap();
        let keys = |n: &str, line: &str| {
            let words: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
            let mut buf = Vec::new();
            let mut ranges = Vec::new();
            for w in words {
                ranges.push((buf.len() as u32, (buf.len() + w.len()) as u32));
                buf.extend_from_slice(w);
            }
            find(n).key_indexes(&Args::new(&buf, &ranges)).collect::<Vec<_>>()
        };
        assert_eq!(keys("mset", "mset a 1 b 2"), vec![1, 3]);
        assert_eq!(keys("del", "del a b c"), vec![1, 2, 3]);
        assert_eq!(keys("rename", "rename a b"), vec![1, 2]);
        assert_eq!(keys("migrate", "migrate h 1 k 0 10"), vec![3]);
        assert_eq!(keys("migrate", "migrate h 1  0 10"), vec![3]);
        assert_eq!(keys("migrate", "migrate h 1 k 0 10 keys a"), Vec::<usize>::new());
        assert_eq!(keys("migrate", "migrate h 1  0 10 auth keys auth2 u p keys a b"), vec![12, 13]);
        assert_eq!(keys("ping", "ping x"), Vec::<usize>::new());
        assert_eq!(keys("get", "get a"), vec![1]);
        assert_eq!(keys("sintercard", "sintercard 2 a b LIMIT 1"), vec![2, 3]);
        assert_eq!(keys("sintercard", "sintercard 9 a b"), Vec::<usize>::new());
        assert_eq!(keys("sintercard", "sintercard x a"), Vec::<usize>::new());
        assert_eq!(keys("georadius", "georadius g 1 2 3 m store a storedist b"), vec![1, 9]);
        assert_eq!(keys("georadius", "georadius g 1 2 3 m store"), vec![1]);
        assert_eq!(keys("sort", "sort l by store get store limit 0 1 store d"), vec![1, 10]);
    }

    #[test]
    fn names_are_unique_and_lower_case() {
        let mut seen = std::collections::HashSet::new();
        for c in all() {
            assert_eq!(c.name, c.name.to_lowercase());
            assert!(seen.insert(c.name), "{} twice", c.name);
        }
    }
}
