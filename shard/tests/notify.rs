//! Keyspace notifications raised per command on one shard: the events, in
//! Redis 7.0's order, that `notify-keyspace-events` lets through (the
//! expected lists are what redis-server publishes for the same commands).

mod common;

use common::run;
use shard::{Config, Shard};

fn shard_with(events: &str) -> Shard {
    let config = Config { notify_keyspace_events: shard::notify::parse_flags(events).unwrap(), ..Default::default() };
    Shard::new(0, 1, config)
}

fn words(line: &str) -> Vec<Vec<u8>> {
    line.split(' ').map(|w| w.as_bytes().to_vec()).collect()
}

/// Runs `line`, returns the events it raised as "event key" (db 0) and
/// drains them.
fn events(s: &mut Shard, line: &str) -> Vec<String> {
    run(s, &words(line));
    let out = s.notifications();
    let got = out
        .iter()
        .map(|e| {
            let db = if e.db == 0 { String::new() } else { format!("@{}", e.db) };
            format!("{}{} {}", e.event, db, String::from_utf8_lossy(e.key))
        })
        .collect();
    out.clear();
    got
}

fn check(s: &mut Shard, line: &str, want: &[&str]) {
    assert_eq!(events(s, line), want, "{line}");
}

#[test]
fn off_by_default_and_without_k_or_e() {
    let mut s = Shard::new(0, 1, Config::default());
    check(&mut s, "set a 1", &[]);
    let mut s = shard_with("A");
    check(&mut s, "set a 1", &[]);
}

#[test]
fn strings_and_generic() {
    let mut s = shard_with("KEA");
    check(&mut s, "set a 1", &["set a"]);
    check(&mut s, "set a 2 ex 100", &["set a", "expire a"]);
    check(&mut s, "set a 3 nx", &[]);
    check(&mut s, "setex b 100 x", &["set b", "expire b"]);
    check(&mut s, "setnx b y", &[]);
    check(&mut s, "getset b z", &["set b"]);
    check(&mut s, "mset c 1 d 2", &["set c", "set d"]);
    check(&mut s, "msetnx e 1 f 2", &["set e", "set f"]);
    check(&mut s, "incr c", &["incrby c"]);
    check(&mut s, "decrby c 5", &["incrby c"]);
    check(&mut s, "incrbyfloat c 1.5", &["incrbyfloat c"]);
    check(&mut s, "incr a", &["incrby a"]);
    check(&mut s, "append d x", &["append d"]);
    check(&mut s, "setrange d 5 y", &["setrange d"]);
    check(&mut s, "setrange d 0 ", &[]);
    check(&mut s, "setbit g 3 1", &["setbit g"]);
    check(&mut s, "bitfield g set u8 0 255 get u8 0", &["setbit g"]);
    check(&mut s, "bitfield g get u8 0", &[]);
    check(&mut s, "bitop or h g d", &["set h"]);
    check(&mut s, "bitop and h missing1 missing2", &["del h"]);
    check(&mut s, "pfadd p a b", &["pfadd p"]);
    check(&mut s, "pfadd p a", &[]);
    check(&mut s, "pfmerge p2 p", &["pfadd p2"]);
    check(&mut s, "getex a persist", &["persist a"]);
    check(&mut s, "getex a persist", &[]);
    check(&mut s, "getex a px 5000", &["expire a"]);
    check(&mut s, "getex a exat 1", &["del a"]);
    check(&mut s, "getdel b", &["del b"]);
    check(&mut s, "getdel b", &[]);
    check(&mut s, "expire c 100", &["expire c"]);
    check(&mut s, "persist c", &["persist c"]);
    check(&mut s, "expire c -1", &["del c"]);
    check(&mut s, "del d e nothing", &["del d", "del e"]);
    check(&mut s, "rename f f2", &["rename_from f", "rename_to f2"]);
    check(&mut s, "copy f2 f3", &["copy_to f3"]);
    check(&mut s, "copy f2 f3 db 1", &["copy_to@1 f3"]);
    check(&mut s, "set x 1", &["set x"]);
    run(&mut s, &words("set rr 1"));
    let dumped = common::run(&mut s, &words("dump rr")).bulk().unwrap();
    s.notifications().clear();
    let mut line = words("restore rr2 0");
    line.push(dumped.clone());
    run(&mut s, &line);
    let names: Vec<_> = s.notifications().iter().map(|e| e.event).collect();
    assert_eq!(names, ["restore"]);
}

#[test]
fn new_keys() {
    let mut s = shard_with("gn$lKE");
    check(&mut s, "set a 1", &["new a", "set a"]);
    check(&mut s, "set a 2", &["set a"]);
    check(&mut s, "rpush l x", &["new l", "rpush l"]);
    check(&mut s, "rename a l", &["new l", "rename_from a", "rename_to l"]);
    check(&mut s, "incr n", &["new n", "incrby n"]);
}

#[test]
fn lists() {
    let mut s = shard_with("KEA");
    check(&mut s, "lpush l a b c", &["lpush l"]);
    check(&mut s, "rpushx l d", &["rpush l"]);
    check(&mut s, "lpushx nol d", &[]);
    check(&mut s, "lpop l", &["lpop l"]);
    check(&mut s, "rpop l 0", &[]);
    check(&mut s, "lset l 0 z", &["lset l"]);
    check(&mut s, "linsert l before z y", &["linsert l"]);
    check(&mut s, "linsert l before nothing y", &[]);
    check(&mut s, "lrem l 0 nothing", &[]);
    check(&mut s, "lrem l 0 y", &["lrem l"]);
    check(&mut s, "ltrim l 0 -1", &["ltrim l"]);
    check(&mut s, "lmove l m left right", &["rpush m", "lpop l"]);
    check(&mut s, "rpoplpush l m", &["lpush m", "rpop l"]);
    check(&mut s, "lmpop 2 nol m right count 5", &["rpop m", "del m"]);
    check(&mut s, "rpush r 1", &["rpush r"]);
    check(&mut s, "lmove r r left left", &["lpush r", "lpop r"]);
    check(&mut s, "ltrim r 1 0", &["ltrim r", "del r"]);
}

#[test]
fn hashes_and_sets() {
    let mut s = shard_with("KEA");
    check(&mut s, "hset h a 1 b 2", &["hset h"]);
    check(&mut s, "hsetnx h a 1", &[]);
    check(&mut s, "hsetnx h c 1", &["hset h"]);
    check(&mut s, "hincrby h a 2", &["hincrby h"]);
    check(&mut s, "hincrbyfloat h a 2.5", &["hincrbyfloat h"]);
    check(&mut s, "hdel h nothing", &[]);
    check(&mut s, "hdel h a b c", &["hdel h", "del h"]);
    check(&mut s, "sadd s a b c", &["sadd s"]);
    check(&mut s, "sadd s a", &[]);
    check(&mut s, "srem s a", &["srem s"]);
    check(&mut s, "smove s t b", &["srem s", "sadd t"]);
    check(&mut s, "sadd t c", &["sadd t"]);
    check(&mut s, "smove s t c", &["srem s", "del s"]);
    check(&mut s, "sunionstore u t", &["sunionstore u"]);
    check(&mut s, "sinterstore u t nothing", &["del u"]);
    check(&mut s, "sdiffstore u t", &["sdiffstore u"]);
    check(&mut s, "spop t", &["spop t"]);
    check(&mut s, "spop t 5", &["spop t", "del t"]);
}

#[test]
fn sorted_sets() {
    let mut s = shard_with("KEA");
    check(&mut s, "zadd z 1 a 2 b 3 c 4 d", &["zadd z"]);
    check(&mut s, "zadd z 1 a", &[]);
    check(&mut s, "zadd z xx ch 5 a", &["zadd z"]);
    check(&mut s, "zincrby z 1 a", &["zincr z"]);
    check(&mut s, "zadd z incr 1 a", &["zincr z"]);
    check(&mut s, "zrem z nothing", &[]);
    check(&mut s, "zrem z a", &["zrem z"]);
    check(&mut s, "zrangestore y z 0 -1", &["zrangestore y"]);
    check(&mut s, "zunionstore w 2 y z", &["zunionstore w"]);
    check(&mut s, "zinterstore w 2 y nothing", &["del w"]);
    check(&mut s, "zdiffstore w 1 y", &["zdiffstore w"]);
    check(&mut s, "zpopmin z", &["zpopmin z"]);
    check(&mut s, "zpopmax z 0", &[]);
    check(&mut s, "zremrangebyscore y 100 200", &[]);
    check(&mut s, "zremrangebyscore y 0 2", &["zremrangebyscore y"]);
    check(&mut s, "zremrangebylex w - +", &["zremrangebylex w", "del w"]);
    check(&mut s, "zremrangebyrank y 0 0", &["zremrangebyrank y"]);
    check(&mut s, "zmpop 1 z max count 9", &["zpopmax z", "del z"]);
}

#[test]
fn classes_filter() {
    let mut s = shard_with("Kl");
    check(&mut s, "set a 1", &[]);
    check(&mut s, "lpush l a", &["lpush l"]);
    check(&mut s, "del l", &[]);
    let mut s = shard_with("Eg");
    check(&mut s, "set a 1", &[]);
    check(&mut s, "del a", &["del a"]);
}

#[test]
fn expired_lazily_and_actively() {
    let mut s = shard_with("Ex");
    run(&mut s, &words("set a 1 px 1"));
    run(&mut s, &words("set b 1 px 1"));
    // common::run's clock is 1_000_000: both are due at 1_000_001.
    let mut out = Vec::new();
    let mut ctx = shard::Ctx { db: 0, now: 2_000_000, reply: shard::Reply::new(&mut out, false) };
    let spec = shard::commands::all().find(|c| c.name == "get").unwrap();
    let (buf, ranges) = (b"geta".to_vec(), vec![(0, 3), (3, 4)]);
    shard::commands::execute(spec, &mut s, &mut ctx, shard::Args::new(&buf, &ranges));
    let got: Vec<_> = s.notifications().iter().map(|e| (e.event, e.key.to_vec())).collect();
    assert_eq!(got, [("expired", b"a".to_vec())]);
    s.notifications().clear();
    s.active_expire(2_000_000);
    let got: Vec<_> = s.notifications().iter().map(|e| (e.event, e.key.to_vec())).collect();
    assert_eq!(got, [("expired", b"b".to_vec())]);
}

#[test]
fn key_misses() {
    let mut s = shard_with("Em");
    check(&mut s, "get nothing", &["keymiss nothing"]);
    check(&mut s, "mget a b", &["keymiss a", "keymiss b"]);
    check(&mut s, "hget h f", &["keymiss h"]);
    check(&mut s, "zscore z m", &["keymiss z"]);
    check(&mut s, "set a 1", &[]);
    check(&mut s, "get a", &[]);
    let mut s = shard_with("EA");
    check(&mut s, "get nothing", &[]);
}
