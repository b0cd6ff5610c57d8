//! HyperLogLog end to end: the estimate's error stays within Redis's
//! bounds, counts equal redis-server's for the same elements, values move
//! between the two servers with GET/SET, and multi-key PFCOUNT/PFMERGE over
//! keys on different shards equal the count of the union.

mod common;

use common::{Raw, Redis, Server};
use proxy::resp::Value;

/// Redis's documented standard error with 16384 registers.
const STD_ERROR: f64 = 0.0081;

/// PFADDs `count` elements `{prefix}{i}` in pipelined batches.
fn pfadd(conn: &mut Raw, key: &str, prefix: &str, range: std::ops::Range<u64>) {
    let batch = 1000;
    let mut pending = 0;
    let mut out = Vec::new();
    let mut start = range.start;
    while start < range.end {
        let end = (start + batch).min(range.end);
        let elems: Vec<String> = (start..end).map(|i| format!("{prefix}{i}")).collect();
        let mut args: Vec<&[u8]> = vec![b"PFADD", key.as_bytes()];
        args.extend(elems.iter().map(|e| e.as_bytes()));
        out.extend(Raw::encode(&args));
        pending += 1;
        start = end;
        if pending == 100 {
            flush(conn, &mut out, &mut pending);
        }
    }
    flush(conn, &mut out, &mut pending);
}

fn flush(conn: &mut Raw, out: &mut Vec<u8>, pending: &mut usize) {
    conn.send(out);
    for _ in 0..*pending {
        match conn.read() {
            Some(Value::Int(_)) => {}
            other => panic!("PFADD: {other:?}"),
        }
    }
    out.clear();
    *pending = 0;
}

fn int(conn: &mut Raw, args: &[&str]) -> i64 {
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    match conn.cmd(&args) {
        Value::Int(n) => n,
        other => panic!("{args:?}: {other:?}"),
    }
}

fn get(conn: &mut Raw, key: &str) -> Vec<u8> {
    match conn.cmd(&[b"GET", key.as_bytes()]) {
        Value::Bulk(b) => b,
        other => panic!("GET {key}: {other:?}"),
    }
}

fn ok(conn: &mut Raw, args: &[&[u8]]) {
    assert_eq!(conn.cmd(args), Value::Simple(b"OK".to_vec()), "{args:?}");
}

#[test]
fn error_is_within_redis_bounds_and_counts_match_redis() {
    let redis = Redis::start();
    let server = Server::shards(2);
    let (mut r, mut c) = (redis.raw(), server.raw());
    let mut sum_sq = 0.0;
    let mut samples = 0;
    for (key, n) in [("k1k", 1_000u64), ("k10k", 10_000), ("k100k", 100_000), ("k1m", 1_000_000)] {
        pfadd(&mut c, key, key, 0..n);
        pfadd(&mut r, key, key, 0..n);
        let estimate = int(&mut c, &["PFCOUNT", key]);
        assert_eq!(estimate, int(&mut r, &["PFCOUNT", key]), "{key}");
        assert_eq!(get(&mut c, key), get(&mut r, key), "{key}: representation differs");
        let err = (estimate as f64 - n as f64).abs() / n as f64;
        assert!(err < 3.0 * STD_ERROR, "{n} elements: estimate {estimate}, error {:.3}%", err * 100.0);
        sum_sq += err * err;
        samples += 1;
    }
    // Many independent sets: the root mean square error is the standard error.
    for set in 0..40 {
        let key = format!("set{set}");
        let n = 20_000;
        pfadd(&mut c, &key, &format!("s{set}:"), 0..n);
        let estimate = int(&mut c, &["PFCOUNT", &key]);
        let err = (estimate as f64 - n as f64) / n as f64;
        sum_sq += err * err;
        samples += 1;
    }
    let rms = (sum_sq / samples as f64).sqrt();
    eprintln!("standard error {:.3}% over {samples} sets", rms * 100.0);
    assert!(rms < 1.5 * STD_ERROR, "standard error {:.3}% over {samples} sets", rms * 100.0);
}

#[test]
fn values_move_between_redis_and_corekv() {
    let redis = Redis::start();
    let server = Server::shards(3);
    let (mut r, mut c) = (redis.raw(), server.raw());
    // Sparse (200 elements) and dense (50000) HLLs, written by each side.
    for (key, n) in [("sparse", 200u64), ("dense", 50_000)] {
        pfadd(&mut r, key, "r", 0..n);
        let bytes = get(&mut r, key);
        ok(&mut c, &[b"SET", key.as_bytes(), &bytes]);
        assert_eq!(int(&mut c, &["PFCOUNT", key]), int(&mut r, &["PFCOUNT", key]), "{key} from redis");
        pfadd(&mut c, key, "c", 0..n);
        pfadd(&mut r, key, "c", 0..n);
        assert_eq!(get(&mut c, key), get(&mut r, key), "{key} after more PFADDs");
        let back = format!("{key}:back");
        pfadd(&mut c, &back, "b", 0..n);
        let bytes = get(&mut c, &back);
        ok(&mut r, &[b"SET", back.as_bytes(), &bytes]);
        assert_eq!(int(&mut r, &["PFCOUNT", &back]), int(&mut c, &["PFCOUNT", &back]), "{back} from corekv");
    }
}

#[test]
fn multi_key_count_and_merge_across_shards_equal_the_union() {
    let server = Server::shards(3);
    let mut c = server.raw();
    // a, b and c hash to three different shards; u holds every element.
    let parts = [("a", 0..30_000u64), ("b", 20_000..45_000), ("c", 40_000..41_000)];
    for (key, range) in &parts {
        pfadd(&mut c, key, "e", range.clone());
        pfadd(&mut c, "u", "e", range.clone());
    }
    let union = int(&mut c, &["PFCOUNT", "u"]);
    assert_eq!(int(&mut c, &["PFCOUNT", "a", "b", "c"]), union);
    assert_eq!(int(&mut c, &["PFCOUNT", "c", "missing", "b", "a"]), union);
    ok(&mut c, &[b"PFMERGE", b"dest", b"a", b"b", b"c"]);
    assert_eq!(int(&mut c, &["PFCOUNT", "dest"]), union);
    // The same registers as the union built by PFADD (headers differ only in
    // the cached cardinality).
    assert_eq!(get(&mut c, "dest")[16..], get(&mut c, "u")[16..]);
    // A sparse destination on another shard than its source.
    pfadd(&mut c, "f", "e", 0..10);
    ok(&mut c, &[b"PFMERGE", b"f", b"c"]);
    pfadd(&mut c, "g", "e", 0..10);
    pfadd(&mut c, "g", "e", 40_000..41_000);
    assert_eq!(int(&mut c, &["PFCOUNT", "f"]), int(&mut c, &["PFCOUNT", "g"]));
    assert_eq!(get(&mut c, "f")[16..], get(&mut c, "g")[16..]);
    // Errors come from the first bad key in argument order.
    ok(&mut c, &[b"SET", b"s", b"not an hll"]);
    let err = c.cmd(&[b"PFCOUNT", b"a", b"s"]);
    assert_eq!(err, Value::Error(b"WRONGTYPE Key is not a valid HyperLogLog string value.".to_vec()));
}
