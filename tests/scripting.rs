//! Scripting behaviour the differential scripts cannot show: the script
//! cache and function libraries on every core, SCRIPT KILL / FUNCTION KILL
//! of a busy script from another core, and FUNCTION DUMP payloads moving
//! between redis-server and corekv.

mod common;

use common::{Raw, Redis, Server};
use proxy::resp::Value;
use std::io::Read;
use std::time::{Duration, Instant};

fn bulk(s: &str) -> Value {
    Value::Bulk(s.as_bytes().to_vec())
}

#[test]
fn evalsha_and_fcall_work_on_every_core() {
    let server = Server::start(&["--shards", "2"]);
    let mut first = server.raw();
    let sha = first.cmd(&[b"SCRIPT", b"LOAD", b"return 'cached'"]);
    let sha = sha.as_bytes().expect("a sha").to_vec();
    let body = b"return 'from eval'";
    assert_eq!(first.cmd(&[b"EVAL", body, b"0"]), bulk("from eval"));
    let eval_sha = proxy::scripting::sha1_hex(body);
    let lib = b"#!lua name=lib\nredis.register_function('f', function(keys) return redis.call('incr', keys[1]) end)";
    assert_eq!(first.cmd(&[b"FUNCTION", b"LOAD", lib]), bulk("lib"));
    // Connections land on either core; with 16 of them both are covered.
    for i in 0..16 {
        let mut c = server.raw();
        assert_eq!(c.cmd(&[b"EVALSHA", &sha, b"0"]), bulk("cached"), "connection {i}");
        assert_eq!(c.cmd(&[b"EVALSHA", eval_sha.as_bytes(), b"0"]), bulk("from eval"), "connection {i}");
        assert_eq!(c.cmd(&[b"SCRIPT", b"EXISTS", &sha]), Value::Array(vec![Value::Int(1)]));
        // Keys on both shards: the script runs where its key lives.
        let key = format!("key{i}");
        assert_eq!(c.cmd(&[b"FCALL", b"f", b"1", key.as_bytes()]), Value::Int(1), "connection {i}");
        let script = b"return redis.call('incr', KEYS[1])";
        assert_eq!(c.cmd(&[b"EVAL", script, b"1", key.as_bytes()]), Value::Int(2), "connection {i}");
    }
    assert_eq!(first.cmd(&[b"SCRIPT", b"FLUSH"]), Value::Simple(b"OK".to_vec()));
    assert_eq!(first.cmd(&[b"FUNCTION", b"FLUSH"]), Value::Simple(b"OK".to_vec()));
    for _ in 0..16 {
        let mut c = server.raw();
        assert!(matches!(c.cmd(&[b"EVALSHA", &sha, b"0"]), Value::Error(e) if e.starts_with(b"NOSCRIPT")));
        assert_eq!(c.cmd(&[b"FCALL", b"f", b"1", b"k"]), Value::Error(b"ERR Function not found".to_vec()));
    }
}

/// Sends `args` on each connection and returns the telling reply among
/// those that come back within `wait` (connections on the busy core answer
/// only later): the first that is not NOTBUSY (a kill that succeeds ends the
/// script, so the other connections then see NOTBUSY), else the first.
fn first_answer(conns: &mut [Raw], args: &[&[u8]], wait: Duration) -> Option<Value> {
    for c in conns.iter_mut() {
        c.send(&Raw::encode(args));
        c.stream.set_nonblocking(true).unwrap();
    }
    let notbusy = Value::Error(b"NOTBUSY No scripts in execution right now.".to_vec());
    let mut deadline = Instant::now() + wait;
    let mut replies = Vec::new();
    let mut answered = vec![false; conns.len()];
    while Instant::now() < deadline {
        for (i, c) in conns.iter_mut().enumerate() {
            let mut buf = [0u8; 512];
            if let (false, Ok(n)) = (answered[i], c.stream.read(&mut buf)) {
                if let Some((v, _)) = Value::decode(&buf[..n]).ok().flatten() {
                    answered[i] = true;
                    if replies.is_empty() {
                        deadline = deadline.min(Instant::now() + Duration::from_millis(200));
                    }
                    replies.push(v);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    replies.iter().find(|v| **v != notbusy).or(replies.first()).cloned()
}

/// Starts a script on its own connection, then kills it from a connection
/// on another core; returns (the kill's reply, the script's reply).
fn kill_busy(server: &Server, script: &[&[u8]], kill: &[&[u8]]) -> (Value, Value) {
    let mut runner = server.raw();
    runner.send(&Raw::encode(script));
    std::thread::sleep(Duration::from_millis(300));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        // Fresh connections each round: ones on the busy core are stuck.
        let mut killers: Vec<Raw> = (0..12).map(|_| server.raw()).collect();
        let answer = first_answer(&mut killers, kill, Duration::from_secs(2));
        if let Some(reply) = answer.clone() {
            if reply != Value::Error(b"NOTBUSY No scripts in execution right now.".to_vec()) {
                runner.stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                let ran = if reply == Value::Simple(b"OK".to_vec()) {
                    runner.read().expect("the script's reply")
                } else {
                    Value::Nil
                };
                return (reply, ran);
            }
        }
        if Instant::now() >= deadline {
            runner.stream.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
            let mut buf = [0u8; 512];
            let n = runner.stream.read(&mut buf).unwrap_or(0);
            panic!(
                "the busy script {:?} was never seen (last: {answer:?}; the script said {:?})",
                String::from_utf8_lossy(script[1]),
                String::from_utf8_lossy(&buf[..n])
            );
        }
    }
}

#[test]
fn script_kill_stops_a_busy_read_only_script_from_another_core() {
    let server = Server::start(&["--shards", "2", "--busy-reply-threshold", "100"]);
    let body = b"#!lua flags=no-writes\nlocal i = 0 while true do i = i + 1 end";
    let (kill, ran) = kill_busy(&server, &[b"EVAL", body, b"0"], &[b"FUNCTION", b"KILL"]);
    assert_eq!(
        kill,
        Value::Error(
            b"BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.".to_vec()
        )
    );
    assert_eq!(ran, Value::Nil);
    let mut killers: Vec<Raw> = (0..12).map(|_| server.raw()).collect();
    let reply = first_answer(&mut killers, &[b"SCRIPT", b"KILL"], Duration::from_secs(2));
    assert_eq!(reply, Some(Value::Simple(b"OK".to_vec())));
    std::thread::sleep(Duration::from_millis(100));
    let mut c = server.raw();
    assert_eq!(c.cmd(&[b"SCRIPT", b"KILL"]), Value::Error(b"NOTBUSY No scripts in execution right now.".to_vec()));
}

#[test]
fn killed_script_replies_with_redis_error() {
    let server = Server::start(&["--shards", "2", "--busy-reply-threshold", "100"]);
    let body = b"#!lua flags=no-writes\nlocal i = 0 while true do i = i + 1 end";
    let (kill, ran) = kill_busy(&server, &[b"EVAL", body, b"0"], &[b"SCRIPT", b"KILL"]);
    assert_eq!(kill, Value::Simple(b"OK".to_vec()));
    let sha = proxy::scripting::sha1_hex(body);
    let want = format!("ERR Script killed by user with SCRIPT KILL... script: {sha}, on @user_script:2.");
    assert_eq!(ran, Value::Error(want.into_bytes()));

    let lib = b"#!lua name=busy\nredis.register_function{function_name='spin', callback=function() while true do end end, flags={'no-writes'}}";
    assert_eq!(server.raw().cmd(&[b"FUNCTION", b"LOAD", lib]), bulk("busy"));
    let (kill, ran) = kill_busy(&server, &[b"FCALL", b"spin", b"0"], &[b"FUNCTION", b"KILL"]);
    assert_eq!(kill, Value::Simple(b"OK".to_vec()));
    let want = "ERR Script killed by user with SCRIPT KILL... script: spin, on @user_function:2.";
    assert_eq!(ran, Value::Error(want.as_bytes().to_vec()));
}

#[test]
fn a_script_that_wrote_cannot_be_killed() {
    let server = Server::start(&["--shards", "2", "--busy-reply-threshold", "100"]);
    let body = b"redis.call('set', KEYS[1], 'v') local t = redis.call('time') while redis.call('time')[1] - t[1] < 2 do end return 'done'";
    let (kill, _) = kill_busy(&server, &[b"EVAL", body, b"1", b"k"], &[b"SCRIPT", b"KILL"]);
    assert_eq!(
        kill,
        Value::Error(
            b"UNKILLABLE Sorry the script already executed write commands against the dataset. You can either wait the script termination or kill the server in a hard way using the SHUTDOWN NOSAVE command.".to_vec()
        )
    );
}

#[test]
fn function_dump_moves_between_redis_and_corekv() {
    let redis = Redis::start();
    let corekv = Server::start(&["--shards", "2"]);
    let mut r = redis.raw();
    let mut k = corekv.raw();
    let lib1 = b"#!lua name=one\nredis.register_function('one', function() return 1 end)";
    let lib2 = b"#!lua name=two\n-- a longer library, so that its code is LZF-compressed in the payload\nredis.register_function{function_name='two', callback=function() return 2 end, flags={'no-writes'}, description='the second'}";
    r.cmd(&[b"FUNCTION", b"LOAD", lib1]);
    r.cmd(&[b"FUNCTION", b"LOAD", lib2]);
    let from_redis = r.cmd(&[b"FUNCTION", b"DUMP"]);
    let payload = from_redis.as_bytes().unwrap().to_vec();
    assert_eq!(k.cmd(&[b"FUNCTION", b"RESTORE", &payload]), Value::Simple(b"OK".to_vec()));
    assert_eq!(k.cmd(&[b"FCALL", b"one", b"0"]), Value::Int(1));
    assert_eq!(k.cmd(&[b"FCALL_RO", b"two", b"0"]), Value::Int(2));
    // The library named is the first one found (dictionary order in Redis).
    let collision = k.cmd(&[b"FUNCTION", b"RESTORE", &payload]);
    let named = |lib: &str| Value::Error(format!("ERR Library {lib} already exists").into_bytes());
    assert!(collision == named("one") || collision == named("two"), "{collision:?}");
    assert_eq!(k.cmd(&[b"FUNCTION", b"RESTORE", &payload, b"REPLACE"]), Value::Simple(b"OK".to_vec()));

    // And back: corekv's dump restores into a flushed redis-server.
    let from_corekv = k.cmd(&[b"FUNCTION", b"DUMP"]);
    r.cmd(&[b"FUNCTION", b"FLUSH"]);
    assert_eq!(r.cmd(&[b"FUNCTION", b"RESTORE", from_corekv.as_bytes().unwrap()]), Value::Simple(b"OK".to_vec()));
    assert_eq!(r.cmd(&[b"FCALL", b"two", b"0"]), Value::Int(2));
    assert_eq!(
        r.cmd(&[b"FUNCTION", b"LIST", b"LIBRARYNAME", b"two"]),
        k.cmd(&[b"FUNCTION", b"LIST", b"LIBRARYNAME", b"two"])
    );

    let mut broken = payload.clone();
    let last = broken.len() - 1;
    broken[last] ^= 1;
    assert_eq!(
        k.cmd(&[b"FUNCTION", b"RESTORE", &broken]),
        Value::Error(b"ERR DUMP payload version or checksum are wrong".to_vec())
    );
    assert_eq!(k.cmd(&[b"FUNCTION", b"RESTORE", &payload, b"FLUSH"]), Value::Simple(b"OK".to_vec()));
}

#[test]
fn other_cores_answer_busy_while_a_script_runs_too_long() {
    let server = Server::start(&["--shards", "2", "--busy-reply-threshold", "100"]);
    let busy = Value::Error(
        b"BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.".to_vec(),
    );
    let mut runner = server.raw();
    runner.send(&Raw::encode(&[b"EVAL", b"#!lua flags=no-writes\nwhile true do end", b"0"]));
    std::thread::sleep(Duration::from_millis(400));
    // Connections on the other core are refused at once, as Redis refuses
    // every client; those on the script's core wait for it.
    let mut others: Vec<Raw> = (0..12).map(|_| server.raw()).collect();
    assert_eq!(first_answer(&mut others, &[b"GET", b"k"], Duration::from_secs(2)), Some(busy.clone()));
    let mut others: Vec<Raw> = (0..12).map(|_| server.raw()).collect();
    assert_eq!(first_answer(&mut others, &[b"PING"], Duration::from_secs(2)), Some(busy));
    let mut killers: Vec<Raw> = (0..12).map(|_| server.raw()).collect();
    assert_eq!(
        first_answer(&mut killers, &[b"SCRIPT", b"KILL"], Duration::from_secs(2)),
        Some(Value::Simple(b"OK".to_vec()))
    );
    runner.stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    assert!(matches!(runner.read(), Some(Value::Error(_))), "the killed script answers with an error");
    let mut c = server.raw();
    assert_eq!(c.cmd(&[b"GET", b"k"]), Value::Nil);
}
