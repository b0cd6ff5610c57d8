//! Values exchanged with redis-server 7.0 both ways: DUMP/RESTORE of every
//! type in its small and large encodings, with TTLs, and whole RDB files
//! (Redis's own, old Redis versions' from Redis's test suite, and files
//! written by `shard::rdb`). Values, OBJECT ENCODING and TTL presence must
//! agree; RESTORE's errors must be Redis's.

mod common;

use common::{Raw, Redis, Server};
use proxy::resp::Value;
use shard::rdb::{self, Item, Reader, SaveOptions};
use std::path::{Path, PathBuf};

fn b(s: &str) -> Vec<u8> {
    s.as_bytes().to_vec()
}

/// Commands that build one key per type and encoding.
fn population() -> Vec<Vec<Vec<u8>>> {
    let mut cmds: Vec<Vec<Vec<u8>>> = Vec::new();
    let mut push = |parts: Vec<Vec<u8>>| cmds.push(parts);
    let noise: Vec<u8> = (0..300u32).map(|i| (i.wrapping_mul(2654435761) >> 11) as u8).collect();
    push(vec![b("SET"), b("s:int"), b("12345")]);
    push(vec![b("SET"), b("s:bigint"), b("-1234567890123")]);
    push(vec![b("SET"), b("s:emb"), b("hello world")]);
    push(vec![b("SET"), b("s:empty"), b("")]);
    push(vec![b("SET"), b("s:raw"), "abcdefghij".repeat(50).into_bytes()]);
    push(vec![b("SET"), b("s:noise"), noise]);
    push(vec![b("RPUSH"), b("l:small"), b("a"), b("1"), b("-70000"), b("hello")]);
    let mut big = vec![b("RPUSH"), b("l:big")];
    big.extend(
        (0..3000).map(|i| if i % 3 == 0 { i.to_string().into_bytes() } else { format!("item-{i}").into_bytes() }),
    );
    push(big);
    push(vec![b("RPUSH"), b("l:huge-element"), vec![b'x'; 100_000], b("tail")]);
    push(vec![b("SADD"), b("set:int16"), b("1"), b("2"), b("-3")]);
    push(vec![b("SADD"), b("set:int64"), b("1"), b("10000000000")]);
    push(vec![b("SADD"), b("set:strings"), b("a"), b("b"), b("c")]);
    let mut s = vec![b("SADD"), b("set:big")];
    s.extend((0..1000).map(|i| format!("member:{i}").into_bytes()));
    push(s);
    let mut s = vec![b("SADD"), b("set:manyints")];
    s.extend((0..600).map(|i| i.to_string().into_bytes()));
    push(s);
    push(vec![b("HSET"), b("h:small"), b("f1"), b("v1"), b("f2"), b("123"), b("99"), b("x")]);
    let mut h = vec![b("HSET"), b("h:big")];
    h.extend((0..600).flat_map(|i| [format!("field:{i}").into_bytes(), i.to_string().into_bytes()]));
    push(h);
    push(vec![b("HSET"), b("h:longvalue"), b("f"), vec![b'v'; 100]]);
    push(vec![b("ZADD"), b("z:small"), b("1"), b("a"), b("2.5"), b("b"), b("-inf"), b("c"), b("1e100"), b("d")]);
    let mut z = vec![b("ZADD"), b("z:big")];
    z.extend((0..300).flat_map(|i| [format!("{}", i as f64 * 0.25 - 10.0).into_bytes(), format!("m{i}").into_bytes()]));
    push(z);
    push(vec![b("ZADD"), b("z:longmember"), b("3"), vec![b'm'; 100], b("0.1"), b("n")]);
    for key in ["s:emb", "l:small", "set:big", "h:small", "z:big"] {
        push(vec![b("PEXPIRE"), b(key), b("100000000")]);
    }
    cmds
}

fn keys(cmds: &[Vec<Vec<u8>>]) -> Vec<Vec<u8>> {
    let mut keys: Vec<Vec<u8>> = cmds.iter().filter(|c| c[0] != b"PEXPIRE").map(|c| c[1].clone()).collect();
    keys.dedup();
    keys
}

fn run(conn: &mut Raw, parts: &[Vec<u8>]) -> Value {
    let words: Vec<&[u8]> = parts.iter().map(|p| &p[..]).collect();
    conn.cmd(&words)
}

fn cmd(conn: &mut Raw, parts: &[&[u8]]) -> Value {
    conn.cmd(parts)
}

fn sorted(v: Value) -> Value {
    match v {
        Value::Array(mut items) => {
            items.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
            Value::Array(items)
        }
        other => other,
    }
}

/// Everything observable about a key: type, encoding, TTL presence, value.
fn observe(conn: &mut Raw, key: &[u8]) -> Vec<Value> {
    let t = cmd(conn, &[b"TYPE", key]);
    let value = match &t {
        Value::Simple(s) if s == b"string" => cmd(conn, &[b"GET", key]),
        Value::Simple(s) if s == b"list" => cmd(conn, &[b"LRANGE", key, b"0", b"-1"]),
        Value::Simple(s) if s == b"set" => sorted(cmd(conn, &[b"SMEMBERS", key])),
        Value::Simple(s) if s == b"hash" => {
            let Value::Array(flat) = cmd(conn, &[b"HGETALL", key]) else { panic!("HGETALL") };
            let pairs = flat.chunks(2).map(|p| Value::Array(p.to_vec())).collect();
            sorted(Value::Array(pairs))
        }
        Value::Simple(s) if s == b"zset" => cmd(conn, &[b"ZRANGE", key, b"0", b"-1", b"WITHSCORES"]),
        other => panic!("unexpected type {other:?}"),
    };
    let ttl = match cmd(conn, &[b"PTTL", key]) {
        Value::Int(n) if n > 0 => Value::Simple(b("volatile")),
        other => other,
    };
    vec![t, cmd(conn, &[b"OBJECT", b"ENCODING", key]), ttl, value]
}

/// DUMPs every key from `from`, RESTOREs it into `to` with its TTL, and
/// checks that `to` now holds the same thing as `from`. Returns how many
/// payloads were byte-identical to the target's own DUMP.
fn transfer(from: &mut Raw, to: &mut Raw, keys: &[Vec<u8>]) -> usize {
    let mut identical = 0;
    for key in keys {
        let Value::Bulk(payload) = cmd(from, &[b"DUMP", key]) else { panic!("DUMP {key:?}") };
        let ttl = match cmd(from, &[b"PTTL", key]) {
            Value::Int(n) if n > 0 => n.to_string(),
            _ => "0".to_string(),
        };
        let reply = cmd(to, &[b"RESTORE", key, ttl.as_bytes(), &payload, b"REPLACE"]);
        assert_eq!(reply, Value::Simple(b("OK")), "RESTORE {}", String::from_utf8_lossy(key));
        assert_eq!(observe(from, key), observe(to, key), "{}", String::from_utf8_lossy(key));
        if cmd(to, &[b"DUMP", key]) == Value::Bulk(payload) {
            identical += 1;
        }
    }
    identical
}

#[test]
fn values_move_both_ways_between_redis_and_corekv() {
    let redis = Redis::start();
    let corekv = Server::shards(3);
    let cmds = population();
    let keys = keys(&cmds);
    // Redis -> corekv.
    let (mut r, mut c) = (redis.raw(), corekv.raw());
    for parts in &cmds {
        run(&mut r, parts);
    }
    let same = transfer(&mut r, &mut c, &keys);
    // Every listpack, intset and string payload is byte for byte Redis's.
    let packed = keys
        .iter()
        .filter(|k| !matches!(&observe(&mut r, k)[1], Value::Bulk(e) if e == b"hashtable" || e == b"skiplist"))
        .count();
    assert!(packed >= 12 && same >= packed, "{same} identical payloads of {packed} packed values");
    eprintln!("{same} of {} payloads byte-identical ({packed} packed values)", keys.len());
    // corekv -> Redis, from values corekv built itself.
    cmd(&mut r, &[b"FLUSHALL"]);
    cmd(&mut c, &[b"FLUSHALL"]);
    for parts in &cmds {
        run(&mut c, parts);
    }
    transfer(&mut c, &mut r, &keys);
}

/// RESTORE fits a value to the target's thresholds, as Redis does: the
/// same payloads land in the same encodings on a redis-server and a corekv
/// both configured with small limits.
#[test]
fn restored_values_take_the_configured_encodings() {
    let source = Redis::start();
    let (redis, corekv) = (Redis::start(), Server::shards(2));
    let (mut src, mut r, mut c) = (source.raw(), redis.raw(), corekv.raw());
    let cmds = population();
    for parts in &cmds {
        run(&mut src, parts);
    }
    let settings: [&[u8]; 12] = [
        b"hash-max-listpack-entries",
        b"2",
        b"hash-max-listpack-value",
        b"4",
        b"zset-max-listpack-entries",
        b"2",
        b"zset-max-listpack-value",
        b"4",
        b"set-max-intset-entries",
        b"2",
        b"list-max-listpack-size",
        b"3",
    ];
    for conn in [&mut r, &mut c] {
        for pair in settings.chunks(2) {
            assert_eq!(cmd(conn, &[b"CONFIG", b"SET", pair[0], pair[1]]), Value::Simple(b("OK")));
        }
    }
    for key in keys(&cmds) {
        let Value::Bulk(payload) = cmd(&mut src, &[b"DUMP", &key]) else { panic!() };
        for conn in [&mut r, &mut c] {
            assert_eq!(cmd(conn, &[b"RESTORE", &key, b"0", &payload]), Value::Simple(b("OK")));
        }
        assert_eq!(observe(&mut r, &key), observe(&mut c, &key), "{}", String::from_utf8_lossy(&key));
    }
}

#[test]
fn restore_errors_and_options_match_redis() {
    let redis = Redis::start();
    let corekv = Server::shards(2);
    let (mut r, mut c) = (redis.raw(), corekv.raw());
    for conn in [&mut r, &mut c] {
        cmd(conn, &[b"RPUSH", b"src", b"a", b"b"]);
        cmd(conn, &[b"SET", b"busy", b"x"]);
    }
    let Value::Bulk(good) = cmd(&mut r, &[b"DUMP", b"src"]) else { panic!() };
    let mut bad_crc = good.clone();
    bad_crc[1] ^= 1;
    let mut bad_version = good.clone();
    let n = good.len();
    bad_version[n - 10] = 11;
    // A valid footer over a body that is not a value.
    let mut bad_body = vec![18u8, 5, 2, 3, b'x', b'y', b'z'];
    bad_body.extend_from_slice(&10u16.to_le_bytes());
    let crc = shard::rdb::crc64::crc64(&bad_body);
    bad_body.extend_from_slice(&crc.to_le_bytes());
    let cases: Vec<Vec<&[u8]>> = vec![
        vec![b"DUMP", b"missing"],
        vec![b"RESTORE", b"busy", b"0", &good],
        vec![b"RESTORE", b"k", b"-1", &good],
        vec![b"RESTORE", b"k", b"abc", &good],
        vec![b"RESTORE", b"k", b"0", b"short"],
        vec![b"RESTORE", b"k", b"0", &bad_crc],
        vec![b"RESTORE", b"k", b"0", &bad_version],
        vec![b"RESTORE", b"k", b"0", &bad_body],
        vec![b"RESTORE", b"k", b"0", &good, b"IDLETIME", b"-1"],
        vec![b"RESTORE", b"k", b"0", &good, b"IDLETIME", b"x"],
        vec![b"RESTORE", b"k", b"0", &good, b"FREQ", b"256"],
        vec![b"RESTORE", b"k", b"0", &good, b"IDLETIME", b"5", b"FREQ", b"5"],
        vec![b"RESTORE", b"k", b"0", &good, b"IDLETIME"],
        vec![b"RESTORE", b"k", b"0", &good, b"BOGUS"],
        vec![b"RESTORE", b"k", b"0", &good, b"FREQ", b"5", b"REPLACE"],
        vec![b"PTTL", b"k"],
        vec![b"LRANGE", b"k", b"0", b"-1"],
        vec![b"RESTORE", b"busy", b"1000", &good, b"REPLACE", b"ABSTTL"],
        vec![b"EXISTS", b"busy"],
        vec![b"RESTORE", b"k2", b"100000", &good],
        vec![b"TYPE", b"k2"],
        vec![b"RESTORE", b"k3", b"99999999999999", &good, b"ABSTTL", b"IDLETIME", b"1000"],
        vec![b"PEXPIRETIME", b"k3"],
        vec![b"RESTORE", b"k4", b"0", &good, b"REPLACE", b"REPLACE", b"ABSTTL"],
        vec![b"TTL", b"k4"],
        vec![b"RESTORE"],
        vec![b"RESTORE", b"k", b"0"],
    ];
    for case in cases {
        let (want, got) = (cmd(&mut r, &case), cmd(&mut c, &case));
        let shown: Vec<String> =
            case.iter().map(|a| String::from_utf8_lossy(&a[..a.len().min(12)]).into_owned()).collect();
        assert_eq!(want, got, "{shown:?}");
    }
    for conn in [&mut r, &mut c] {
        let Value::Int(idle) = cmd(conn, &[b"OBJECT", b"IDLETIME", b"k3"]) else { panic!() };
        assert!(idle >= 1000, "{idle}");
    }
}

/// A scratch directory removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("corekv-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn redis_on_file(dir: &Path, file: &str) -> Redis {
    Redis::start_with(&["--dir", dir.to_str().unwrap(), "--dbfilename", file])
}

fn all_keys(conn: &mut Raw) -> Vec<Vec<u8>> {
    let Value::Array(keys) = cmd(conn, &[b"KEYS", b"*"]) else { panic!("KEYS") };
    let mut keys: Vec<Vec<u8>> = keys.into_iter().map(|k| k.as_bytes().unwrap().to_vec()).collect();
    keys.sort();
    keys
}

/// Every entry of an RDB file, as read by `shard::rdb`.
type Entries = Vec<(Vec<u8>, shard::value::Value, Option<u64>)>;

fn read_file(data: &[u8]) -> Result<(Entries, Vec<Item<'_>>), rdb::RdbError> {
    let mut reader = Reader::new(data)?;
    let (mut entries, mut others) = (Vec::new(), Vec::new());
    while let Some(item) = reader.next()? {
        match item {
            Item::Entry { key, value, expire_at_ms, .. } => entries.push((key.into_owned(), value, expire_at_ms)),
            other => others.push(other),
        }
    }
    Ok((entries, others))
}

/// RESTOREs decoded entries into corekv (with their absolute expiry).
fn restore_into(conn: &mut Raw, entries: &Entries) {
    for (key, value, at) in entries {
        let at = at.unwrap_or(0).to_string();
        let reply = cmd(conn, &[b"RESTORE", key, at.as_bytes(), &rdb::dump_payload(value), b"ABSTTL", b"REPLACE"]);
        assert_eq!(reply, Value::Simple(b("OK")), "{}", String::from_utf8_lossy(key));
    }
}

fn assert_same_keyspace(redis: &mut Raw, corekv: &mut Raw, what: &str) -> usize {
    let keys = all_keys(redis);
    assert_eq!(keys, all_keys(corekv), "{what}");
    for key in &keys {
        assert_eq!(observe(redis, key), observe(corekv, key), "{what}: {}", String::from_utf8_lossy(key));
    }
    keys.len()
}

#[test]
fn old_redis_files_load_as_redis_7_loads_them() {
    let assets = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/assets/rdb");
    let corekv = Server::shards(2);
    let mut c = corekv.raw();
    let mut loaded = 0;
    for name in ["encodings", "hash-ziplist", "hash-zipmap", "list-quicklist", "zset-ziplist", "corrupt_empty_keys"] {
        let file = format!("{name}.rdb");
        let dir = TempDir::new(&format!("assets-{name}"));
        let data = std::fs::read(assets.join(&file)).unwrap();
        std::fs::write(dir.0.join(&file), &data).unwrap();
        let (entries, _) = read_file(&data).unwrap_or_else(|e| panic!("{name}: {e}"));
        let redis = redis_on_file(&dir.0, &file);
        let mut r = redis.raw();
        cmd(&mut c, &[b"FLUSHALL"]);
        restore_into(&mut c, &entries);
        loaded += assert_same_keyspace(&mut r, &mut c, name);
    }
    assert!(loaded >= 16, "{loaded} keys compared");
    // A damaged ziplist is an error naming its offset, not a panic.
    let data = std::fs::read(assets.join("corrupt_ziplist.rdb")).unwrap();
    let err = read_file(&data).expect_err("corrupt_ziplist.rdb is refused");
    assert!(err.message.contains("Ziplist integrity") && err.offset > 75, "{err}");
}

#[test]
fn rdb_files_move_both_ways_between_redis_and_corekv() {
    let dir = TempDir::new("rdb-files");
    let redis = redis_on_file(&dir.0, "redis.rdb");
    let mut r = redis.raw();
    let cmds = population();
    for parts in &cmds {
        run(&mut r, parts);
    }
    let lib = b"#!lua name=mylib\nredis.register_function('f', function() return 1 end)";
    cmd(&mut r, &[b"FUNCTION", b"LOAD", lib]);
    assert_eq!(cmd(&mut r, &[b"SAVE"]), Value::Simple(b("OK")));
    // Redis's file, read by shard::rdb and restored into corekv.
    let data = std::fs::read(dir.0.join("redis.rdb")).unwrap();
    let (entries, others) = read_file(&data).unwrap();
    assert_eq!(entries.len(), keys(&cmds).len());
    assert!(others
        .iter()
        .any(|i| matches!(i, Item::Aux { key, value } if &key[..] == b"redis-ver" && &value[..] == b"7.0.15")));
    assert!(others.iter().any(|i| matches!(i, Item::Function(f) if f[..] == lib[..])));
    assert!(matches!(others.last(), Some(Item::Eof { checksum_ok: true })));
    let corekv = Server::shards(3);
    let mut c = corekv.raw();
    restore_into(&mut c, &entries);
    assert_same_keyspace(&mut r, &mut c, "redis.rdb");
    // The same entries written by shard::rdb, loaded by a second redis-server.
    for compress in [true, false] {
        let mut out = Vec::new();
        let bits: &[u8] = b"64";
        rdb::write_header(&mut out, &[("redis-ver", b"7.0.15"), ("redis-bits", bits), ("aof-base", b"0")]);
        rdb::write_select_db(&mut out, 0);
        let expires = entries.iter().filter(|e| e.2.is_some()).count() as u64;
        rdb::write_resize_db(&mut out, entries.len() as u64, expires);
        for (key, value, at) in &entries {
            rdb::write_entry(&mut out, key, value, *at, rdb::Access::None, &SaveOptions { compress });
        }
        rdb::write_eof(&mut out);
        let crc = rdb::crc64::crc64(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        let name = format!("ours-{compress}.rdb");
        std::fs::write(dir.0.join(&name), &out).unwrap();
        let second = redis_on_file(&dir.0, &name);
        let mut r2 = second.raw();
        assert_same_keyspace(&mut r, &mut r2, &name);
    }
}
