//! Random argument vectors for every command in the table: the command's own
//! keywords (from Redis 7.0's COMMAND DOCS, recorded in
//! proxy/src/commands/redis-7.0-commands.resp3), small, huge, negative,
//! float, NaN and infinite numbers, empty and binary strings, and keys of
//! every type.
//!
//! - Shard-side handlers run against a `Shard` directly: no panic, exactly
//!   one well-formed reply (RESP2 or RESP3 as asked), well-formed effects
//!   for the AOF, and no allocation beyond a cap (a counting allocator).
//! - Commands the proxy implements, and multi-key commands that cross
//!   shards, run against the real binary with `--shards 2` over one
//!   connection: every reply well-formed, and the server answers PING after
//!   each case. Commands that stop the server or the connection for good
//!   (SHUTDOWN, SYNC, PSYNC, REPLCONF, REPLICAOF) are left out; blocking ones
//!   get a short timeout.
//!
//! Deterministic: seeded per command (`COMMAND_ARGS_SEED`, default 14).
//! `COMMAND_ARGS_CASES` (default 64) is the number of cases per command on
//! the shard; the server test runs a fifth of that per command.

mod common;

use common::{Server, TempDir};
use proptest::prelude::*;
use proptest::test_runner::{Config as RunnerConfig, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use proxy::resp::Value;
use shard::commands::{all, execute, resolve, CommandSpec, Ctx, Route};
use shard::{Args, Config, Shard};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

// ---------------------------------------------------------------------------
// A counting allocator: the largest single allocation of this thread, and a
// hard stop far beyond anything a case may need.

struct Counting;

/// One case may allocate at most this much at once (proto-max-bulk-len is
/// 1 MiB on the test shard).
const ALLOCATION_CAP: usize = 64 << 20;
/// Beyond this the allocation fails (the process aborts) after printing
/// the command that asked for it.
const ALLOCATION_STOP: usize = 1 << 30;

thread_local! {
    static LARGEST: Cell<usize> = const { Cell::new(0) };
    static CURRENT: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

fn note(size: usize) -> bool {
    let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
    if size < ALLOCATION_STOP {
        return true;
    }
    let _ = CURRENT.try_with(|c| {
        if let Ok(c) = c.try_borrow() {
            let msg: &[u8] = b"\ncommand_args: allocation over 1 GiB while running: ";
            // SAFETY: writing our own buffers to stderr; no allocation here.
            unsafe {
                libc::write(2, msg.as_ptr().cast(), msg.len());
                libc::write(2, c.as_ptr().cast(), c.len());
                libc::write(2, b"\n".as_ptr().cast(), 1);
            }
        }
    });
    false
}

// SAFETY: forwards to the system allocator; only records sizes and refuses
// absurd ones.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !note(layout.size()) {
            return std::ptr::null_mut();
        }
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if !note(layout.size()) {
            return std::ptr::null_mut();
        }
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if !note(new_size) {
            return std::ptr::null_mut();
        }
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

// ---------------------------------------------------------------------------
// Argument pools.

const RECORDED: &[u8] = include_bytes!("../proxy/src/commands/redis-7.0-commands.resp3");

/// Tokens every command may also see (bitfield types, common options).
const COMMON_WORDS: &[&str] = &[
    "u8",
    "i8",
    "u63",
    "i64",
    "u64",
    "i65",
    "u0",
    "#0",
    "#1",
    "#-1",
    "SET",
    "GET",
    "INCRBY",
    "OVERFLOW",
    "WRAP",
    "SAT",
    "FAIL",
    "LIMIT",
    "COUNT",
    "MATCH",
    "TYPE",
    "WITHSCORES",
    "NX",
    "XX",
    "GT",
    "LT",
    "EX",
    "PX",
    "BYTE",
    "BIT",
    "LEFT",
    "RIGHT",
    "MIN",
    "MAX",
    "REV",
    "BYSCORE",
    "BYLEX",
    "string",
    "list",
    "hash",
    "set",
    "zset",
];

const NUMBERS: &[&str] = &[
    "0",
    "1",
    "-1",
    "2",
    "3",
    "-2",
    "10",
    "-10",
    "100",
    "1000",
    "65536",
    "2147483647",
    "-2147483648",
    "4294967295",
    "4294967296",
    "536870911",
    "536870912",
    "8388607",
    "1099511627776",
    "9223372036854775807",
    "-9223372036854775807",
    "-9223372036854775808",
    "9223372036854775808",
    "18446744073709551615",
    "18446744073709551616",
    "-0",
    "01",
    " 1",
    "1 ",
    "+1",
    "0x10",
    "1.5",
    "-1.5",
    "0.5",
    "1e3",
    "1e10",
    "1e300",
    "-1e300",
    "1e400",
    "1e-320",
    "inf",
    "-inf",
    "+inf",
    "Infinity",
    "nan",
    "NaN",
    "-nan",
    "(1",
    "(-inf",
    "(+inf",
    "[a",
    "(a",
    "-",
    "+",
    "1.7976931348623157e308",
    "3.0e-5",
];

const STRINGS: &[&[u8]] = &[
    b"",
    b"x",
    b"value",
    b"\x00\xff\r\n\x01binary",
    b"*",
    b"?",
    b"[a-z]*",
    b"\\",
    b"*a*b*c*d*e*f*",
    b"{tag}",
    b"\r\n",
    b" ",
    b"\"",
    b"'",
    b"h\xc3\xa9llo",
];

/// Keys created before each case, by type (see `SETUP`), and some that do
/// not exist.
const KEYS: &[&str] = &[
    "str", "int", "float", "list", "biglist", "hash", "bighash", "set", "intset", "bigset", "zset", "bigzset", "hll",
    "bitmap", "volatile", "missing", "dst", "",
];

/// Builds the keys of every type, crossing each type's encodings.
fn setup_commands() -> Vec<Vec<Vec<u8>>> {
    let words = |s: &str| s.split(' ').map(|w| w.as_bytes().to_vec()).collect::<Vec<_>>();
    let mut cmds = vec![
        words("SET str hello"),
        words("SET int 12345"),
        words("SET float 3.25"),
        words("RPUSH list a b c 1 2 3"),
        words("HSET hash f1 v1 f2 2 f3 3.5"),
        words("SADD set a b c"),
        words("SADD intset 1 2 3 -5"),
        words("ZADD zset 1 a 2 b 3 c 3 d"),
        words("PFADD hll a b c"),
        words("SETBIT bitmap 100 1"),
        words("SET volatile v PX 100000"),
    ];
    let mut biglist = words("RPUSH biglist");
    let mut bighash = words("HSET bighash");
    let mut bigset = words("SADD bigset");
    let mut bigzset = words("ZADD bigzset");
    for i in 0..300 {
        biglist.push(format!("element-{i}").into_bytes());
        bighash.push(format!("field-{i}").into_bytes());
        bighash.push(i.to_string().into_bytes());
        bigset.push(format!("member-{i}").into_bytes());
        bigzset.push(format!("{}", i as f64 / 7.0).into_bytes());
        bigzset.push(format!("member-{i}").into_bytes());
    }
    cmds.extend([biglist, bighash, bigset, bigzset]);
    cmds
}

/// What arguments are drawn from.
struct Pools {
    /// Per command name (`client|kill` for subcommands): its tokens.
    keywords: HashMap<String, Vec<Vec<u8>>>,
    /// Extra strings: DUMP payloads of the setup keys, scripts...
    strings: Vec<Vec<u8>>,
}

/// Collects every `token` under a COMMAND DOCS entry, subcommands apart.
fn tokens(v: &Value, out: &mut Vec<Vec<u8>>) {
    match v {
        Value::Map(pairs) => {
            for (k, v) in pairs {
                match (k.as_bytes(), v.as_bytes()) {
                    (Some(b"token"), Some(t)) => out.push(t.to_vec()),
                    (Some(b"subcommands"), _) => {}
                    _ => tokens(v, out),
                }
            }
        }
        Value::Array(items) | Value::Set(items) => items.iter().for_each(|i| tokens(i, out)),
        _ => {}
    }
}

fn docs_keywords(docs: &Value, into: &mut HashMap<String, Vec<Vec<u8>>>) {
    let Value::Map(entries) = docs else { return };
    for (name, doc) in entries {
        let Some(name) = name.as_bytes() else { continue };
        let mut found = Vec::new();
        tokens(doc, &mut found);
        found.sort();
        found.dedup();
        into.insert(String::from_utf8_lossy(name).to_lowercase(), found);
        if let Value::Map(fields) = doc {
            for (k, v) in fields {
                if k.as_bytes() == Some(b"subcommands") {
                    docs_keywords(v, into);
                }
            }
        }
    }
}

impl Pools {
    fn load(extra: Vec<Vec<u8>>) -> Pools {
        let (_, used) = Value::decode(RECORDED).unwrap().expect("COMMAND INFO recorded");
        let (docs, _) = Value::decode(&RECORDED[used..]).unwrap().expect("COMMAND DOCS recorded");
        let mut keywords = HashMap::new();
        docs_keywords(&docs, &mut keywords);
        assert!(keywords.get("set").is_some_and(|k| k.iter().any(|w| w == b"KEEPTTL")), "docs parsed");
        assert!(keywords.get("client|kill").is_some_and(|k| k.iter().any(|w| w == b"SKIPME")), "subcommands parsed");
        let mut strings: Vec<Vec<u8>> = STRINGS.iter().map(|s| s.to_vec()).collect();
        strings.extend(extra);
        Pools { keywords, strings }
    }
}

/// The random choices behind one argument.
type Pick = (u8, u32, i64);

/// The words a command line starts with: `["client", "kill"]` for
/// `client|kill`.
fn name_words(spec: &CommandSpec) -> Vec<Vec<u8>> {
    spec.name.split('|').map(|w| w.as_bytes().to_vec()).collect()
}

/// Commands whose reply is as long as the count they are given, by design
/// (Redis too): their numbers stay small or extreme.
const COUNT_IS_OUTPUT: &[&str] = &["srandmember", "hrandfield", "zrandmember"];

fn number(pick: Pick, bounded: bool) -> Vec<u8> {
    let (_, u, n) = pick;
    let s: String = match u % 5 {
        0 | 1 => NUMBERS[(n as u64 % NUMBERS.len() as u64) as usize].to_string(),
        2 => (n % 21 - 10).to_string(),
        3 if !bounded => n.to_string(),
        3 => [i64::MIN, i64::MAX, -i64::MAX, i64::MIN / 2 - 1][(n as u64 % 4) as usize].to_string(),
        _ => format!("{}", (n % 100_000) as f64 / 64.0),
    };
    // A count that is the reply's length: small, or so large Redis refuses it.
    match s.parse::<i64>() {
        Ok(count) if bounded && count.unsigned_abs() > 1000 && count.unsigned_abs() <= (i64::MAX / 2) as u64 => {
            (count % 1000).to_string().into_bytes()
        }
        _ => s.into_bytes(),
    }
}

/// Builds one command line for `spec` (the right arity) from `picks`.
fn command_line(spec: &CommandSpec, pools: &Pools, extra: usize, picks: &[Pick], keys: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let mut line = name_words(spec);
    let argc = if spec.arity >= 0 { spec.arity as usize } else { spec.arity.unsigned_abs() as usize + extra };
    let no_words = Vec::new();
    let own = pools.keywords.get(spec.name).unwrap_or(&no_words);
    let bounded = COUNT_IS_OUTPUT.contains(&spec.name);
    let (first, last, step) = spec.keys;
    let is_key_position = |i: usize| {
        let i = i as i32;
        first > 0 && i >= first && (last < 0 || i <= last) && (i - first) % step.max(1) == 0
    };
    for (i, &pick) in picks.iter().enumerate().take(argc.saturating_sub(line.len())) {
        let i = i + line.len();
        let (kind, u, n) = pick;
        let word = if is_key_position(i) && kind < 90 {
            keys[u as usize % keys.len()].clone()
        } else {
            match kind % 100 {
                0..=34 => {
                    let use_own = !own.is_empty() && u % 4 != 0;
                    let mut w = if use_own {
                        own[(n as u64 % own.len() as u64) as usize].clone()
                    } else {
                        COMMON_WORDS[(n as u64 % COMMON_WORDS.len() as u64) as usize].as_bytes().to_vec()
                    };
                    if u % 3 == 0 {
                        w.make_ascii_lowercase();
                    }
                    w
                }
                35..=64 => number(pick, bounded),
                65..=74 => keys[u as usize % keys.len()].clone(),
                _ => pools.strings[u as usize % pools.strings.len()].clone(),
            }
        };
        line.push(word);
    }
    line
}

fn picks() -> impl Strategy<Value = Vec<Pick>> {
    proptest::collection::vec((any::<u8>(), any::<u32>(), any::<i64>()), 24)
}

fn cases_per_command() -> u32 {
    std::env::var("COMMAND_ARGS_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(64)
}

fn runner(cases: u32, salt: &str) -> TestRunner {
    let seed: u64 = std::env::var("COMMAND_ARGS_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(14);
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    for (i, b) in salt.bytes().enumerate() {
        bytes[8 + i % 24] ^= b;
    }
    let config = RunnerConfig { cases, failure_persistence: None, ..RunnerConfig::default() };
    TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &bytes))
}

fn show(line: &[Vec<u8>]) -> String {
    line.iter().map(|w| format!("{:?}", String::from_utf8_lossy(w))).collect::<Vec<_>>().join(" ")
}

/// Exactly one well-formed reply in `out`; in RESP2, no RESP3 types.
fn check_reply(out: &[u8], resp3: bool) -> Result<Value, String> {
    let (v, used) = Value::decode(out)?.ok_or("incomplete reply")?;
    if used != out.len() {
        return Err(format!("{} bytes after the reply", out.len() - used));
    }
    check_value(&v, resp3)?;
    Ok(v)
}

fn check_value(v: &Value, resp3: bool) -> Result<(), String> {
    match v {
        Value::Error(e) => {
            let code = e.split(|&b| b == b' ').next().unwrap_or(b"");
            if code.is_empty() || !code.iter().all(|b| b.is_ascii_uppercase()) {
                return Err(format!("error without a code: {:?}", String::from_utf8_lossy(e)));
            }
            Ok(())
        }
        Value::Map(_) | Value::Set(_) | Value::Double(_) | Value::Bool(_) | Value::Verbatim(_) | Value::Null
            if !resp3 =>
        {
            Err(format!("RESP3 type in a RESP2 reply: {v:?}"))
        }
        Value::Array(items) | Value::Set(items) => items.iter().try_for_each(|i| check_value(i, resp3)),
        Value::Map(pairs) => pairs.iter().try_for_each(|(k, v)| {
            check_value(k, resp3)?;
            check_value(v, resp3)
        }),
        _ => Ok(()),
    }
}

// ---------------------------------------------------------------------------
// Shard-side handlers.

/// Runs one command line on the shard, as the proxy would (arity checked
/// first); returns the raw reply.
fn run_on_shard(shard: &mut Shard, line: &[Vec<u8>], resp3: bool) -> Vec<u8> {
    let mut buf = Vec::new();
    let mut ranges = Vec::new();
    for w in line {
        let s = buf.len() as u32;
        buf.extend_from_slice(w);
        ranges.push((s, buf.len() as u32));
    }
    let args = Args::new(&buf, &ranges);
    let name = String::from_utf8_lossy(&line[0]).to_lowercase();
    let spec = all().find(|c| c.name == name).expect("known command");
    let mut out = Vec::new();
    let mut ctx = Ctx { db: 0, now: shard::unix_ms(), reply: shard::Reply::new(&mut out, resp3) };
    match resolve(spec, &args) {
        Some(spec) if spec.arity_ok(line.len()) => execute(spec, shard, &mut ctx, args),
        Some(spec) => ctx.reply.error(&shard::commands::arity_error(spec.name)),
        None => ctx.reply.error("ERR unknown subcommand"),
    }
    out
}

fn test_shard() -> Shard {
    let config = Config { proto_max_bulk_len: 1 << 20, ..Config::default() };
    let mut shard = Shard::new(0, 1, config);
    for cmd in setup_commands() {
        let out = run_on_shard(&mut shard, &cmd, false);
        assert!(!out.starts_with(b"-"), "{}: {}", show(&cmd), String::from_utf8_lossy(&out));
    }
    shard.enable_effects();
    shard
}

/// Every effect logged for the AOF is a command: an array of bulk strings.
fn check_effects(bytes: &[u8]) -> Result<(), String> {
    let mut at = 0;
    while at < bytes.len() {
        let (v, used) = Value::decode(&bytes[at..])?.ok_or("truncated effect")?;
        match &v {
            Value::Array(items) if !items.is_empty() && items.iter().all(|i| matches!(i, Value::Bulk(_))) => {}
            other => return Err(format!("effect is not a command: {other:?}")),
        }
        at += used;
    }
    Ok(())
}

/// Every command a shard runs itself (and every subcommand).
fn shard_specs() -> Vec<&'static CommandSpec> {
    let mut specs = Vec::new();
    for spec in all() {
        if spec.subcommands.is_empty() {
            specs.push(spec);
        } else {
            specs.extend(spec.subcommands.iter());
        }
    }
    specs.retain(|s| s.handler.is_some());
    specs
}

#[test]
fn every_shard_command_survives_random_arguments() {
    let template = test_shard();
    let mut dumps = Vec::new();
    let mut dumper = template;
    for key in ["list", "bighash", "bigzset", "intset", "str", "hll"] {
        let out = run_on_shard(&mut dumper, &[b"DUMP".to_vec(), key.as_bytes().to_vec()], false);
        if let Ok(Value::Bulk(payload)) = check_reply(&out, false) {
            dumps.push(payload);
        }
    }
    assert_eq!(dumps.len(), 6, "DUMP payloads of the setup keys");
    let pools = Pools::load(dumps);
    let keys: Vec<Vec<u8>> = KEYS.iter().map(|k| k.as_bytes().to_vec()).collect();
    let specs = shard_specs();
    assert!(specs.len() > 120, "{} shard commands", specs.len());
    let cases = cases_per_command();
    for spec in specs {
        let strategy = (any::<bool>(), proptest::collection::vec((0usize..7, picks()), 1..4));
        runner(cases, spec.name)
            .run(&strategy, |(resp3, lines)| {
                let mut shard = test_shard();
                for (extra, picks) in &lines {
                    let line = command_line(spec, &pools, *extra, picks, &keys);
                    CURRENT.with(|c| *c.borrow_mut() = show(&line).into_bytes());
                    LARGEST.with(|l| l.set(0));
                    let out = run_on_shard(&mut shard, &line, resp3);
                    let largest = LARGEST.with(|l| l.get());
                    let effects = shard.effects.as_mut().map(|e| e.take()).unwrap_or_default();
                    let fail = |why: String| TestCaseError::fail(format!("{}: {why}", show(&line)));
                    check_reply(&out, resp3).map_err(fail)?;
                    check_effects(&effects).map_err(fail)?;
                    if largest > ALLOCATION_CAP {
                        return Err(fail(format!("allocated {largest} bytes at once")));
                    }
                }
                Ok(())
            })
            .unwrap_or_else(|e| panic!("{}: {e}", spec.name));
    }
}

// ---------------------------------------------------------------------------
// The proxy's commands, over a connection to the real binary.

/// Never sent: they stop the server, or turn the connection into something
/// else for good (the subscribe family answers one reply per channel and
/// pushes afterwards: tests/pubsub.rs covers it; MONITOR streams every
/// command afterwards: tests/tracking.rs covers it; CLIENT PAUSE would hold
/// every later case and CLIENT REPLY OFF/SKIP drops the replies waited
/// for: tests/client_admin.rs and tests/diff/33-client-config.redis), or
/// take seconds by design (PFSELFTEST's ten million HLL additions:
/// tests/diff/32 runs it).
const NOT_SENT: &[&str] = &[
    "pfselftest",
    "shutdown",
    "client|pause",
    "client|reply",
    "monitor",
    "sync",
    "psync",
    "replconf",
    "replicaof",
    "slaveof",
    "subscribe",
    "unsubscribe",
    "psubscribe",
    "punsubscribe",
    "ssubscribe",
    "sunsubscribe",
];

/// Blocking commands and where their timeout is (`None`: the last argument).
const TIMEOUT_AT: &[(&str, Option<usize>)] = &[
    ("blpop", None),
    ("brpop", None),
    ("blmove", None),
    ("brpoplpush", None),
    ("bzpopmin", None),
    ("bzpopmax", None),
    ("blmpop", Some(1)),
    ("bzmpop", Some(1)),
    ("wait", Some(2)),
];

/// CONFIG SET leaves these alone: they would close or lock out the test's
/// connection, move files, or make every later command fail.
const CONFIG_NOT_SET: &[&str] = &[
    "pass",
    "port",
    "bind",
    "dir",
    "dbfilename",
    "maxclients",
    "protected",
    "timeout",
    "limit",
    "proto",
    "tls",
    "acl",
    "user",
    "repl",
    "slave",
    "master",
    "cluster",
    "append",
    "aof",
    "save",
    "rename",
    "daemon",
    "pid",
    "log",
    "supervised",
    "maxmemory",
    "unix",
    "busy",
    "lua-time",
    "ring",
    "shards",
    "cpu",
    "client-",
    "io-",
    "oom",
    "debug",
    "enable",
    "databases",
];

const SCRIPTS: &[&str] = &[
    "return 1",
    "return redis.call('ping')",
    "return redis.call('get', KEYS[1])",
    "return redis.pcall('incr', KEYS[1])",
    "return redis.call('lrange', KEYS[1], 0, -1)",
    "redis.call('set', KEYS[1], ARGV[1]) return redis.status_reply('OK')",
    "return {1, 2, {3, 'x'}, redis.call('exists', unpack(KEYS))}",
    "return redis.error_reply('MY error')",
    "error('boom')",
    "return redis.call('nosuchcommand')",
    "#!lua flags=no-writes\nreturn #KEYS",
    "return cjson.encode({1, 2, ARGV[1]})",
    "#!lua name=fuzzlib\nredis.register_function('fuzzf', function(keys, args) return #keys end)",
    "#!lua name=fuzzlib2\nredis.register_function{function_name='fuzzro', callback=function(keys, args) return redis.call('mget', unpack(keys)) end, flags={'no-writes'}}",
];

/// Commands sent to the server: those the proxy implements and those whose
/// keys may cross shards.
fn proxy_specs() -> Vec<&'static CommandSpec> {
    let mut specs = Vec::new();
    for spec in all() {
        let crossing = spec.keys.1 < 0 || spec.keys.1 > spec.keys.0 || spec.keynum.0 != 0;
        let wanted =
            |s: &CommandSpec| matches!(s.route, Route::Proxy | Route::SplitKeys(_) | Route::AllShards(_)) || crossing;
        if spec.subcommands.is_empty() {
            if wanted(spec) {
                specs.push(spec);
            }
        } else {
            specs.extend(spec.subcommands.iter().filter(|s| wanted(s)));
        }
    }
    specs.retain(|s| !NOT_SENT.contains(&s.name));
    specs
}

/// A connection that reports a closed socket, a hang or a malformed reply
/// instead of panicking on its own.
struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    fn open(port: u16) -> Conn {
        let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        stream.set_nodelay(true).unwrap();
        Conn { stream, buf: Vec::new() }
    }

    /// Sends one command; its reply, `Ok(None)` if the server closed the
    /// connection.
    fn call(&mut self, line: &[Vec<u8>], resp3: bool) -> Result<Option<Value>, String> {
        let words: Vec<&[u8]> = line.iter().map(|w| &w[..]).collect();
        if self.stream.write_all(&common::Raw::encode(&words)).is_err() {
            return Ok(None);
        }
        loop {
            if let Some((v, used)) = Value::decode(&self.buf)? {
                check_value(&v, resp3)?;
                self.buf.drain(..used);
                return Ok(Some(v));
            }
            let mut chunk = [0u8; 65536];
            match self.stream.read(&mut chunk) {
                Ok(0) => return Ok(None),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return Ok(None),
                Err(e) => return Err(format!("no reply: {e}")),
            }
        }
    }
}

fn words(s: &str) -> Vec<Vec<u8>> {
    s.split(' ').map(|w| w.as_bytes().to_vec()).collect()
}

/// The server's keys: every type twice (`list`, `list:2`), spread over
/// both shards' halves of the slot space.
fn server_keys() -> Vec<Vec<u8>> {
    let mut keys = Vec::new();
    for key in KEYS {
        keys.push(key.as_bytes().to_vec());
        keys.push(format!("{key}:2").into_bytes());
    }
    let slots: Vec<u16> = keys.iter().map(|k| proxy::slot::key_slot(k)).collect();
    assert!(slots.iter().any(|&s| s < 8192) && slots.iter().any(|&s| s >= 8192), "keys on both shards");
    keys
}

fn populate(c: &mut Conn) {
    c.call(&words("FLUSHALL"), false).unwrap();
    for cmd in setup_commands() {
        for name in [cmd[1].clone(), [&cmd[1][..], b":2"].concat()] {
            let mut line = cmd.clone();
            line[1] = name;
            let reply = c.call(&line, false).unwrap();
            assert!(!matches!(reply, Some(Value::Error(_)) | None), "{}: {reply:?}", show(&line));
        }
    }
}

/// Settings CONFIG SET may change in this test.
fn settable(port: u16) -> Vec<Vec<u8>> {
    let mut c = Conn::open(port);
    let Ok(Some(Value::Array(items))) = c.call(&words("CONFIG GET *"), false) else { panic!("CONFIG GET *") };
    items
        .chunks(2)
        .filter_map(|p| p[0].as_bytes())
        .filter(|n| {
            let n = String::from_utf8_lossy(n);
            !CONFIG_NOT_SET.iter().any(|bad| n.contains(bad))
        })
        .map(|n| n.to_vec())
        .collect()
}

/// Shapes a generated line for the server: short timeouts for blocking
/// commands, real script bodies and settings where those go.
fn for_server(spec: &CommandSpec, mut line: Vec<Vec<u8>>, pick: Pick, settings: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let (kind, u, _) = pick;
    if let Some((_, at)) = TIMEOUT_AT.iter().find(|(n, _)| *n == spec.name) {
        let at = at.unwrap_or(line.len() - 1);
        if at < line.len() {
            line[at] = b"0.01".to_vec();
        }
        if spec.name == "wait" && line.len() > 2 {
            line[2] = b"10".to_vec();
        }
    }
    let script = SCRIPTS[u as usize % SCRIPTS.len()].as_bytes().to_vec();
    let script_at = match spec.name {
        "eval" | "eval_ro" => Some(1),
        "script|load" => Some(2),
        "function|load" => Some(line.len() - 1),
        _ => None,
    };
    if let Some(at) = script_at.filter(|_| kind < 200) {
        line[at] = script;
    }
    if matches!(spec.name, "fcall" | "fcall_ro") && kind < 200 {
        line[1] = [&b"fuzzf"[..], b"fuzzro"][u as usize % 2].to_vec();
    }
    if matches!(spec.name, "evalsha" | "evalsha_ro") && kind < 200 {
        line[1] = b"e0e1f9fabfc9d4800c877a703b823ac0578ff8db".to_vec(); // sha1("return 1")
    }
    if spec.name == "migrate" && line.len() > 5 {
        // Loopback only, and short: a random host or port may not answer.
        line[1] = b"127.0.0.1".to_vec();
        line[5] = b"50".to_vec();
    }
    if spec.name == "config|set" {
        for i in (2..line.len()).step_by(2) {
            line[i] = settings[(u as usize + i) % settings.len()].clone();
        }
    }
    line
}

#[test]
fn proxy_commands_survive_random_arguments_over_a_connection() {
    let dir = TempDir::new("command-args");
    let server = RefCell::new(Server::start_in(Some(&dir.0), &["--shards", "2", "--dir", dir.path()]));
    let port = server.borrow().port;
    let first_failure: RefCell<Option<String>> = RefCell::new(None);
    let keys = server_keys();
    let settings = settable(port);
    let pools = Pools::load(SCRIPTS.iter().map(|s| s.as_bytes().to_vec()).collect());
    let specs = proxy_specs();
    assert!(specs.len() > 100, "{} commands for the server", specs.len());
    // Proptest's case closure is `Fn`: the connection is replaced after a close.
    let conn = RefCell::new(Conn::open(port));
    populate(&mut conn.borrow_mut());
    let cases = (cases_per_command() / 5).max(1);
    for spec in &specs {
        // Each case: one to four lines of this command with, at times, other
        // commands of the set around them inside MULTI/EXEC or after WATCH.
        let strategy =
            (any::<bool>(), 0u8..10, proptest::collection::vec((0usize..7, picks(), 0usize..specs.len() * 4), 1..5));
        runner(cases, spec.name)
            .run(&strategy, |(resp3, shape, lines)| {
                if first_failure.borrow().is_some() {
                    // No shrinking against a server that may be hung or
                    // gone: the first failing case is the report.
                    return Ok(());
                }
                let mut sent = Vec::new();
                if resp3 {
                    sent.push(words("HELLO 3"));
                }
                if shape == 0 {
                    sent.push(vec![b"WATCH".to_vec(), keys[lines[0].1[0].1 as usize % keys.len()].clone()]);
                }
                if shape <= 2 {
                    sent.push(words("MULTI"));
                }
                for (i, (extra, picks, other)) in lines.iter().enumerate() {
                    // Every other line may be another command of the set.
                    let spec = if i % 2 == 1 && *other < specs.len() { specs[*other] } else { spec };
                    let line = command_line(spec, &pools, *extra, picks, &keys);
                    sent.push(for_server(spec, line, picks[23], &settings));
                }
                if shape <= 2 {
                    sent.push(words(if shape == 1 { "DISCARD" } else { "EXEC" }));
                }
                let fail = |why: String| {
                    let lines: Vec<String> = sent.iter().map(|l| show(l)).collect();
                    let msg = format!("{why}\n  case: {}", lines.join("\n        "));
                    first_failure.borrow_mut().get_or_insert_with(|| msg.clone());
                    TestCaseError::fail(msg)
                };
                let mut closed = false;
                let mut may_close = false;
                let mut conn = conn.borrow_mut();
                for line in &sent {
                    // QUIT and CLIENT KILL may close this connection.
                    let name = String::from_utf8_lossy(&line[0]).to_lowercase();
                    may_close |= name == "quit" || name == "client";
                    match conn.call(line, resp3) {
                        Ok(Some(_)) => {}
                        Ok(None) => {
                            if !may_close {
                                return Err(fail(format!("connection closed after {}", show(line))));
                            }
                            closed = true;
                            break;
                        }
                        Err(e) => return Err(fail(format!("{}: {e}", show(line)))),
                    }
                }
                if closed || may_close {
                    *conn = Conn::open(port);
                }
                match conn.call(&words("RESET"), true) {
                    Ok(Some(Value::Simple(s))) if s == b"RESET" => {}
                    other => return Err(fail(format!("RESET: {other:?}"))),
                }
                match conn.call(&words("PING"), false) {
                    Ok(Some(Value::Simple(s))) if s == b"PONG" => {}
                    other => return Err(fail(format!("PING: {other:?}"))),
                }
                Ok(())
            })
            .unwrap_or_else(|e| {
                let first = first_failure.borrow_mut().take().unwrap_or_default();
                let alive = server.borrow_mut().is_running();
                let log = server.borrow().log.lock().unwrap().iter().rev().take(30).rev().cloned().collect::<Vec<_>>();
                panic!(
                    "{}: {e}\nfirst failure: {first}\nserver alive: {alive}; its log ends:\n{}",
                    spec.name,
                    log.join("\n")
                )
            });
        // Keys of every type again for the next command (some cases flush).
        populate(&mut conn.borrow_mut());
    }
    // Still whole: a fresh connection gets answers.
    let mut fresh = Conn::open(port);
    assert_eq!(fresh.call(&words("PING"), false).unwrap(), Some(Value::Simple(b"PONG".to_vec())));
    assert!(matches!(fresh.call(&words("DBSIZE"), false), Ok(Some(Value::Int(n))) if n > 0));
}
