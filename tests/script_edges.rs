//! Scripts at Redis's edges, with connections on every core: a script
//! inside MULTI/EXEC sees and keeps the transaction's writes, whatever core
//! its keys live on; SCRIPT KILL / FUNCTION KILL / SHUTDOWN NOSAVE reach a
//! busy script from any core (its own core's clients are served while it
//! runs, as Redis's processEventsWhileBlocked serves them); a client
//! queueing a transaction during the busy script gets Redis's BUSY and
//! EXECABORT.

mod common;

use common::{Raw, Redis, Server};
use proxy::resp::Value;
use std::time::{Duration, Instant};

fn ok() -> Value {
    Value::Simple(b"OK".to_vec())
}

fn bulk(s: &str) -> Value {
    Value::Bulk(s.as_bytes().to_vec())
}

const BUSY_EVAL: &[u8] = b"BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.";

/// A connection accepted by core `core` of a server with `cores` shards
/// (client ids interleave the cores').
fn conn_on_core(port: u16, core: u64, cores: u64) -> Raw {
    for _ in 0..400 {
        let mut c = Raw::connect(port);
        let Value::Int(id) = c.cmd(&[b"CLIENT", b"ID"]) else { panic!("CLIENT ID") };
        if (id as u64 - 1) % cores == core {
            return c;
        }
    }
    panic!("no connection landed on core {core}");
}

/// The transaction: writes of the transaction and of scripts,
/// each read by the next command and by the next script.
fn transaction_with_scripts(c: &mut Raw, key: &str) -> (Value, Value) {
    let k = key.as_bytes();
    assert_eq!(c.cmd(&[b"SET", k, b"old"]), ok());
    let get = b"return redis.call('get', KEYS[1])";
    let set = b"return redis.call('set', KEYS[1], 'fromlua')";
    let queued = Value::Simple(b"QUEUED".to_vec());
    assert_eq!(c.cmd(&[b"MULTI"]), ok());
    for cmd in [
        &[b"SET".as_slice(), k, b"new"][..],
        &[b"GET", k],
        &[b"EVAL", get, b"1", k],
        &[b"EVAL", set, b"1", k],
        &[b"GET", k],
        &[b"EVAL", get, b"1", k],
    ] {
        assert_eq!(c.cmd(cmd), queued);
    }
    let exec = c.cmd(&[b"EXEC"]);
    (exec, c.cmd(&[b"GET", k]))
}

#[test]
fn a_script_inside_multi_sees_and_keeps_the_transactions_writes() {
    let redis = Redis::start();
    let want = transaction_with_scripts(&mut redis.raw(), "a");
    assert_eq!(
        want.0,
        Value::Array(vec![ok(), bulk("new"), bulk("new"), ok(), bulk("fromlua"), bulk("fromlua")]),
        "redis-server's answer"
    );
    for shards in [1u64, 3] {
        let server = Server::shards(shards as usize);
        for core in 0..shards {
            let mut c = conn_on_core(server.port, core, shards);
            // With 3 shards b, c and a live on shards 0, 1 and 2: every
            // placement of key and connection.
            for key in ["a", "b", "c", "{a}x"] {
                assert_eq!(
                    transaction_with_scripts(&mut c, key),
                    want,
                    "{shards} shards, connection on core {core}, key {key}"
                );
            }
        }
    }
}

/// Transactions that move units between keys of three cores, half with a
/// plain command and half through a script (EVAL and FCALL), while readers
/// on every core check the total: 0 torn reads, and no move lost.
#[test]
fn transactions_mixing_commands_and_scripts_stay_atomic() {
    let server = Server::shards(3);
    let keys = ["a", "b", "c"];
    let mut admin = server.raw();
    let lib = b"#!lua name=moves\nredis.register_function('move', function(keys, args) redis.call('decrby', keys[1], args[1]) return redis.call('incrby', keys[2], args[1]) end)";
    assert_eq!(admin.cmd(&[b"FUNCTION", b"LOAD", lib]), bulk("moves"));
    assert_eq!(admin.cmd(&[b"MSET", b"a", b"0", b"b", b"0", b"c", b"0"]), ok());
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let port = server.port;
    let readers: Vec<_> = (0..3u64)
        .map(|core| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut c = conn_on_core(port, core, 3);
                let (mut reads, mut torn) = (0, Vec::new());
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let Value::Array(vals) = c.cmd(&[b"MGET", b"a", b"b", b"c"]) else { panic!("MGET") };
                    let sum: i64 = vals
                        .iter()
                        .map(|v| std::str::from_utf8(v.as_bytes().unwrap()).unwrap().parse::<i64>().unwrap())
                        .sum();
                    if sum != 0 {
                        torn.push(sum);
                    }
                    reads += 1;
                }
                (reads, torn)
            })
        })
        .collect();
    let writers: Vec<_> = (0..3u64)
        .map(|core| {
            std::thread::spawn(move || {
                let mut c = conn_on_core(port, core, 3);
                let script = b"redis.call('decrby', KEYS[1], ARGV[1]) return redis.call('incrby', KEYS[2], ARGV[1])";
                for i in 0..150usize {
                    let (from, to) = (keys[i % 3].as_bytes(), keys[(i + 1) % 3].as_bytes());
                    let via = keys[(i + 2) % 3].as_bytes();
                    assert_eq!(c.cmd(&[b"MULTI"]), ok());
                    // from -> via by commands, via -> to by a script.
                    c.cmd(&[b"DECRBY", from, b"2"]);
                    c.cmd(&[b"INCRBY", via, b"2"]);
                    if i % 2 == 0 {
                        c.cmd(&[b"EVAL", script, b"2", via, to, b"2"]);
                    } else {
                        c.cmd(&[b"FCALL", b"move", b"2", via, to, b"2"]);
                    }
                    c.cmd(&[b"INCRBY", via, b"0"]);
                    let Value::Array(replies) = c.cmd(&[b"EXEC"]) else { panic!("EXEC") };
                    assert!(replies.iter().all(|r| matches!(r, Value::Int(_))), "{replies:?}");
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for r in readers {
        let (reads, torn) = r.join().unwrap();
        assert!(reads > 0);
        assert!(torn.is_empty(), "{} torn reads of {reads}: sums {:?}", torn.len(), &torn[..torn.len().min(10)]);
    }
    // Each of the 450 transactions moved 2 from one key to the next: every
    // key lost 2 and gained 2 150 times (a lost script write shows here).
    let Value::Array(vals) = admin.cmd(&[b"MGET", b"a", b"b", b"c"]) else { panic!("MGET") };
    assert_eq!(vals, vec![bulk("0"), bulk("0"), bulk("0")]);
}

/// Starts a script that spins on `runner`, and waits until `probe` (on
/// another core, or the same) sees it busy. Connections are placed on
/// their cores beforehand: CLIENT ID is refused during a busy script.
fn start_busy(runner: &mut Raw, probe: &mut Raw, script: &[&[u8]]) {
    runner.send(&Raw::encode(script));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        // FUNCTION STATS answers BUSY during an EVAL script, and shows a
        // busy function.
        match probe.cmd(&[b"FUNCTION", b"STATS"]) {
            Value::Error(e) if e.starts_with(b"BUSY") => return,
            Value::Array(m) if m[1] != Value::Nil && m[1] != Value::Null => return,
            _ => {}
        }
        assert!(Instant::now() < deadline, "the script never became busy");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn read_within(c: &mut Raw, wait: Duration) -> Option<Value> {
    c.stream.set_read_timeout(Some(wait)).unwrap();
    let v = c.read();
    c.stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    v
}

#[test]
fn a_busy_script_is_killed_from_every_core_every_time() {
    let shards = 2u64;
    let server = Server::start(&["--shards", "2", "--busy-reply-threshold", "10"]);
    let spin: &[&[u8]] = &[b"EVAL", b"while true do end", b"0"];
    let fspin = b"#!lua name=spin\nredis.register_function{function_name='spin', callback=function() while true do end end, flags={'no-writes'}}";
    assert_eq!(server.raw().cmd(&[b"FUNCTION", b"LOAD", fspin]), bulk("spin"));
    // Two connections on each core, placed before any script is busy.
    let mut conns: Vec<Vec<Raw>> =
        (0..shards).map(|core| (0..3).map(|_| conn_on_core(server.port, core, shards)).collect()).collect();
    for round in 0..100u64 {
        let (script_core, kill_core) = ((round % shards) as usize, ((round / 2) % shards) as usize);
        let function = round % 5 == 4;
        let script: &[&[u8]] = if function { &[b"FCALL", b"spin", b"0"] } else { spin };
        let kill: &[&[u8]] = if function { &[b"FUNCTION", b"KILL"] } else { &[b"SCRIPT", b"KILL"] };
        let mut runner = conns[script_core].pop().unwrap();
        // Every third round another client has a transaction pending.
        let pending_core = ((round / 3) % shards) as usize;
        let mut pending = conns[pending_core].pop().unwrap();
        let with_multi = round % 3 == 0;
        if with_multi {
            assert_eq!(pending.cmd(&[b"MULTI"]), ok());
        }
        let mut killer = conns[kill_core].pop().unwrap();
        start_busy(&mut runner, &mut killer, script);
        killer.send(&Raw::encode(kill));
        let answer = read_within(&mut killer, Duration::from_secs(5));
        assert_eq!(answer, Some(ok()), "round {round}: script on core {script_core}, kill from core {kill_core}");
        let ran = read_within(&mut runner, Duration::from_secs(5)).expect("the script's reply");
        assert!(
            matches!(&ran, Value::Error(e) if e.starts_with(b"ERR Script killed by user with SCRIPT KILL")),
            "round {round}: {ran:?}"
        );
        if with_multi {
            assert_eq!(pending.cmd(&[b"SET", b"k", b"v"]), Value::Simple(b"QUEUED".to_vec()));
            assert_eq!(pending.cmd(&[b"EXEC"]), Value::Array(vec![ok()]));
        }
        conns[script_core].push(runner);
        conns[pending_core].push(pending);
        conns[kill_core].push(killer);
    }
    assert_eq!(
        server.raw().cmd(&[b"SCRIPT", b"KILL"]),
        Value::Error(b"NOTBUSY No scripts in execution right now.".to_vec())
    );
}

/// Redis's own scenario (tests/unit/multi.tcl, "MULTI-EXEC body and script
/// timeout"): a client's MULTI is accepted during a busy script, its
/// command refused with BUSY, so EXEC after the kill answers EXECABORT.
fn multi_during_busy_script(port: u16, client_core: Option<(u64, u64)>) -> Vec<Value> {
    let conn = |core: u64| match client_core {
        Some((_, cores)) => conn_on_core(port, core, cores),
        None => Raw::connect(port),
    };
    let (script_core, cores) = client_core.unwrap_or((0, 1));
    let (mut admin, mut runner, mut r2) = (conn(script_core), conn(script_core), conn(script_core));
    let mut killer = conn((script_core + 1) % cores);
    assert_eq!(admin.cmd(&[b"SET", b"xx", b"1"]), ok());
    runner.send(&Raw::encode(&[b"EVAL", b"while true do end", b"0"]));
    std::thread::sleep(Duration::from_millis(200));
    let mut seen = vec![r2.cmd(&[b"MULTI"]), r2.cmd(&[b"INCR", b"xx"])];
    seen.push(killer.cmd(&[b"SCRIPT", b"KILL"]));
    let ran = read_within(&mut runner, Duration::from_secs(5)).expect("the script's reply");
    assert!(matches!(ran, Value::Error(_)));
    seen.push(r2.cmd(&[b"INCR", b"xx"]));
    seen.push(r2.cmd(&[b"EXEC"]));
    seen.push(admin.cmd(&[b"GET", b"xx"]));
    seen
}

#[test]
fn a_transaction_queued_during_a_busy_script_is_aborted_as_in_redis() {
    let redis = Redis::start_with(&["--busy-reply-threshold", "10"]);
    let want = multi_during_busy_script(redis.port, None);
    assert_eq!(want[1], Value::Error(BUSY_EVAL.to_vec()));
    assert!(matches!(&want[4], Value::Error(e) if e.starts_with(b"EXECABORT")), "{want:?}");
    for shards in [1u64, 2] {
        let server = Server::start(&["--shards", &shards.to_string(), "--busy-reply-threshold", "10"]);
        for core in 0..shards {
            assert_eq!(
                multi_during_busy_script(server.port, Some((core, shards))),
                want,
                "{shards} shards, script and client on core {core}"
            );
        }
    }
}

#[test]
fn function_stats_shows_a_busy_function_from_its_own_core() {
    let server = Server::start(&["--shards", "2", "--busy-reply-threshold", "10"]);
    let fspin = b"#!lua name=spin\nredis.register_function{function_name='spin', callback=function() while true do end end, flags={'no-writes'}}";
    assert_eq!(server.raw().cmd(&[b"FUNCTION", b"LOAD", fspin]), bulk("spin"));
    let (mut runner, mut same) = (conn_on_core(server.port, 0, 2), conn_on_core(server.port, 0, 2));
    start_busy(&mut runner, &mut same, &[b"FCALL", b"spin", b"0"]);
    let Value::Array(stats) = same.cmd(&[b"FUNCTION", b"STATS"]) else { panic!("FUNCTION STATS") };
    let Value::Array(running) = &stats[1] else { panic!("running_script: {stats:?}") };
    assert_eq!(
        running[..4],
        [bulk("name"), bulk("spin"), bulk("command"), Value::Array(vec![bulk("fcall"), bulk("spin"), bulk("0")])]
    );
    assert_eq!(
        stats[3],
        Value::Array(vec![
            bulk("LUA"),
            Value::Array(vec![bulk("libraries_count"), Value::Int(1), bulk("functions_count"), Value::Int(1)])
        ])
    );
    assert_eq!(
        same.cmd(&[b"GET", b"k"]),
        Value::Error(
            b"BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE.".to_vec()
        )
    );
    assert_eq!(same.cmd(&[b"FUNCTION", b"KILL"]), ok());
    assert!(matches!(read_within(&mut runner, Duration::from_secs(5)), Some(Value::Error(_))));
}

#[test]
fn shutdown_nosave_ends_a_server_whose_core_runs_a_busy_script() {
    for (script_core, shutdown_core) in [(0u64, 0u64), (0, 1), (1, 0)] {
        let server = Server::start(&["--shards", "2", "--busy-reply-threshold", "10"]);
        let mut runner = conn_on_core(server.port, script_core, 2);
        let mut c = conn_on_core(server.port, shutdown_core, 2);
        // One that wrote (unkillable) and one that did not.
        let body: &[u8] = match shutdown_core {
            0 => b"redis.call('set', 'k', 'v') while true do end",
            _ => b"while true do end",
        };
        start_busy(&mut runner, &mut c, &[b"EVAL", body, b"0"]);
        assert_eq!(c.cmd(&[b"SHUTDOWN"]), Value::Error(BUSY_EVAL.to_vec()), "a save would wait for the script");
        c.send(&Raw::encode(&[b"SHUTDOWN", b"NOSAVE"]));
        let status = server.wait_exit(Duration::from_secs(10));
        assert!(
            status.is_some(),
            "still running after SHUTDOWN NOSAVE (script on core {script_core}, shutdown from core {shutdown_core})"
        );
    }
}

/// `redis.acl_check_cmd` answers for the script's user: its commands,
/// keys and channels, as redis-server does.
fn acl_checks(port: u16) -> Vec<Value> {
    let mut admin = Raw::connect(port);
    admin.cmd(&[b"ACL", b"SETUSER", b"limited", b"on", b"nopass", b"+eval", b"+get", b"+publish", b"~k*", b"&news"]);
    let mut c = Raw::connect(port);
    assert_eq!(c.cmd(&[b"AUTH", b"limited", b"x"]), ok());
    let check = |c: &mut Raw, args: &str| {
        let body = format!("return redis.acl_check_cmd({args})");
        c.cmd(&[b"EVAL", body.as_bytes(), b"0"])
    };
    let mut seen = Vec::new();
    for args in [
        "'get', 'k1'",
        "'get', 'other'",
        "'set', 'k1', 'v'",
        "'publish', 'news', 'm'",
        "'publish', 'sports', 'm'",
        "'nosuchcommand'",
        "'config', 'nosuchsub'",
        "'config', 'get', 'x'",
    ] {
        seen.push(check(&mut c, args));
    }
    let mut unrestricted = Raw::connect(port);
    seen.push(check(&mut unrestricted, "'set', 'other', 'v'"));
    seen
}

#[test]
fn acl_check_cmd_answers_for_the_scripts_user() {
    let redis = Redis::start();
    let want = acl_checks(redis.port);
    assert_eq!(want[0], Value::Int(1), "redis-server: {want:?}");
    for shards in ["1", "3"] {
        let server = Server::start(&["--shards", shards]);
        assert_eq!(acl_checks(server.port), want, "{shards} shards");
    }
}
