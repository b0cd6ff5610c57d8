//! CLIENT PAUSE/UNPAUSE, UNBLOCK, KILL, LIST/INFO and CONFIG SET rollback
//! and REWRITE on the real binary, with clients on different cores (the
//! replies and error texts are in tests/diff/33-client-config.redis).

mod common;

use common::{Raw, Redis, Server, TempDir};
use proxy::resp::Value;
use std::collections::BTreeMap;

const SHARDS: u64 = 3;

fn text(v: &Value) -> String {
    String::from_utf8_lossy(v.as_bytes().unwrap_or_else(|| panic!("not text: {v:?}"))).into_owned()
}

fn id_of(raw: &mut Raw) -> u64 {
    match raw.cmd_str("CLIENT ID") {
        Value::Int(id) => id as u64,
        other => panic!("CLIENT ID: {other:?}"),
    }
}

/// A new connection whose core (its id's residue) is not in `avoid`.
fn connection_off(server: &Server, avoid: &[u64]) -> (Raw, u64) {
    loop {
        let mut raw = server.raw();
        let id = id_of(&mut raw);
        if !avoid.iter().any(|&other| (other - 1) % SHARDS == (id - 1) % SHARDS) {
            return (raw, id);
        }
    }
}

/// CLIENT LIST's line for `id` as field -> value.
fn fields_of(raw: &mut Raw, id: u64) -> BTreeMap<String, String> {
    let list = text(&raw.cmd_str(&format!("CLIENT LIST ID {id}")));
    parse_line(list.lines().next().unwrap_or_else(|| panic!("client {id} not listed")))
}

/// Waits until the server lists `n` clients (killed ones leave a moment
/// after their socket is shut).
fn wait_clients(raw: &mut Raw, n: usize) {
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let listed = text(&raw.cmd_str("CLIENT LIST"));
        if listed.lines().count() == n {
            return;
        }
        assert!(std::time::Instant::now() < give_up, "never saw {n} clients:\n{listed}");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

fn parse_line(line: &str) -> BTreeMap<String, String> {
    line.split(' ')
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (k.to_string(), v.to_string())
        })
        .collect()
}

#[test]
fn pause_write_holds_writers_on_other_cores_until_unpause() {
    let server = Server::shards(3);
    let mut admin = server.raw();
    let admin_id = id_of(&mut admin);
    let (mut writer, writer_id) = connection_off(&server, &[admin_id]);
    let (mut reader, reader_id) = connection_off(&server, &[admin_id, writer_id]);
    assert_eq!(admin.cmd_str("SET k before"), Value::Simple(b"OK".to_vec()));
    assert_eq!(admin.cmd_str("CLIENT PAUSE 100000 WRITE"), Value::Simple(b"OK".to_vec()));

    // The writer's SET waits (it is not refused); its earlier GET is answered.
    writer.send(&Raw::encode(&[b"GET", b"k"]));
    writer.send(&Raw::encode(&[b"SET", b"k", b"after"]));
    assert_eq!(writer.read(), Some(Value::Bulk(b"before".to_vec())));
    reader.wait_blocked(1);
    // Reads go on, on every core; the write has not run.
    assert_eq!(reader.cmd_str("GET k"), Value::Bulk(b"before".to_vec()));
    assert_eq!(
        reader.cmd_str("MGET k a b c"),
        Value::Array(vec![Value::Bulk(b"before".to_vec()), Value::Nil, Value::Nil, Value::Nil])
    );
    let held = fields_of(&mut reader, writer_id);
    assert_eq!((held["flags"].as_str(), held["cmd"].as_str()), ("b", "set"), "{held:?}");
    assert_eq!(held["argv-mem"], "9");
    // What may replicate waits too: PUBLISH, EVAL (even a read-only
    // script), and EXEC of a transaction with a write.
    let (mut publisher, _) = connection_off(&server, &[reader_id]);
    publisher.send(&Raw::encode(&[b"PUBLISH", b"ch", b"m"]));
    let (mut scripter, _) = connection_off(&server, &[reader_id]);
    scripter.send(&Raw::encode(&[b"EVAL", b"return 1", b"0"]));
    reader.wait_blocked(3);
    // EVAL_RO and read-only transactions do not.
    assert_eq!(reader.cmd(&[b"EVAL_RO", b"return 2", b"0"]), Value::Int(2));
    assert_eq!(reader.cmd_str("MULTI"), Value::Simple(b"OK".to_vec()));
    assert_eq!(reader.cmd_str("GET k"), Value::Simple(b"QUEUED".to_vec()));
    assert_eq!(reader.cmd_str("EXEC"), Value::Array(vec![Value::Bulk(b"before".to_vec())]));

    assert_eq!(admin.cmd_str("CLIENT UNPAUSE"), Value::Simple(b"OK".to_vec()));
    assert_eq!(writer.read(), Some(Value::Simple(b"OK".to_vec())));
    assert_eq!(publisher.read(), Some(Value::Int(0)));
    assert_eq!(scripter.read(), Some(Value::Int(1)));
    assert_eq!(reader.cmd_str("GET k"), Value::Bulk(b"after".to_vec()));
    reader.wait_blocked(0);
    assert_eq!(fields_of(&mut reader, writer_id)["flags"], "N");
}

#[test]
fn a_pause_runs_out_by_itself_and_all_holds_reads() {
    let server = Server::shards(3);
    let mut admin = server.raw();
    let admin_id = id_of(&mut admin);
    let (mut other, _) = connection_off(&server, &[admin_id]);
    admin.cmd_str("SET k v");
    // ALL: reads wait too, the pausing client's own included; nothing
    // lifts it but time.
    assert_eq!(admin.cmd_str("CLIENT PAUSE 300 ALL"), Value::Simple(b"OK".to_vec()));
    other.send(&Raw::encode(&[b"GET", b"k"]));
    admin.send(&Raw::encode(&[b"CLIENT", b"UNPAUSE"]));
    assert_eq!(other.read(), Some(Value::Bulk(b"v".to_vec())));
    assert_eq!(admin.read(), Some(Value::Simple(b"OK".to_vec())));
    // A WRITE pause after it: writes wait until it runs out.
    assert_eq!(admin.cmd_str("CLIENT PAUSE 300 WRITE"), Value::Simple(b"OK".to_vec()));
    other.send(&Raw::encode(&[b"SET", b"k", b"w"]));
    assert_eq!(other.read(), Some(Value::Simple(b"OK".to_vec())));
    assert_eq!(admin.cmd_str("GET k"), Value::Bulk(b"w".to_vec()));
    assert_eq!(
        admin.cmd_str("INFO clients").as_bytes().map(|b| String::from_utf8_lossy(b).contains("blocked_clients:0")),
        Some(true)
    );
}

#[test]
fn a_killed_client_held_by_a_pause_never_runs_its_write() {
    let server = Server::shards(3);
    let mut admin = server.raw();
    let admin_id = id_of(&mut admin);
    let (mut writer, writer_id) = connection_off(&server, &[admin_id]);
    admin.cmd_str("SET k v");
    admin.cmd_str("CLIENT PAUSE 9223372036854775807 WRITE");
    writer.send(&Raw::encode(&[b"SET", b"k", b"lost"]));
    admin.wait_blocked(1);
    assert_eq!(admin.cmd_str(&format!("CLIENT KILL ID {writer_id}")), Value::Int(1));
    assert!(writer.closed(), "the killed client's connection closes");
    admin.wait_blocked(0);
    admin.cmd_str("CLIENT UNPAUSE");
    assert_eq!(admin.cmd_str("GET k"), Value::Bulk(b"v".to_vec()));
}

/// While paused the dataset stays as it is (Redis 7.0): a key whose time
/// ran out reads as gone but is not deleted until the pause ends.
#[test]
fn a_pause_keeps_expired_keys_until_it_ends() {
    let redis = Redis::start();
    let corekv = Server::shards(3);
    let (mut a, mut b) = (redis.raw(), corekv.raw());
    for cmd in ["SET k v", "SET gone v PX 300", "CLIENT PAUSE 100000 WRITE"] {
        assert_eq!(a.cmd_str(cmd), b.cmd_str(cmd), "{cmd}");
    }
    std::thread::sleep(std::time::Duration::from_millis(500));
    for cmd in ["GET gone", "EXISTS gone", "DBSIZE", "GET gone", "DBSIZE", "CLIENT UNPAUSE", "GET gone", "DBSIZE"] {
        assert_eq!(a.cmd_str(cmd), b.cmd_str(cmd), "{cmd}");
    }
}

#[test]
fn unblock_pops_waiting_on_other_cores() {
    let server = Server::shards(3);
    let mut admin = server.raw();
    let admin_id = id_of(&mut admin);
    let (mut waiter, waiter_id) = connection_off(&server, &[admin_id]);
    assert_eq!(admin.cmd_str(&format!("CLIENT UNBLOCK {waiter_id}")), Value::Int(0));
    // Keys on one shard, on several (notify mode), sorted sets, streams.
    let pops: [&[&[u8]]; 5] = [
        &[b"BLPOP", b"q", b"0"],
        &[b"BRPOP", b"a", b"b", b"c", b"d", b"0"],
        &[b"BZPOPMIN", b"z", b"0"],
        &[b"XREAD", b"BLOCK", b"0", b"STREAMS", b"s", b"$"],
        &[b"BLMOVE", b"src", b"dst", b"LEFT", b"RIGHT", b"0"],
    ];
    for pop in pops {
        for (how, want) in [
            ("TIMEOUT", Value::NilArray),
            ("ERROR", Value::Error(b"UNBLOCKED client unblocked via CLIENT UNBLOCK".to_vec())),
        ] {
            waiter.send(&Raw::encode(pop));
            admin.wait_blocked(1);
            let line = fields_of(&mut admin, waiter_id);
            assert_eq!(line["flags"], "b", "{line:?}");
            assert_eq!(admin.cmd_str(&format!("CLIENT UNBLOCK {waiter_id} {how}")), Value::Int(1));
            assert_eq!(waiter.read().unwrap(), want, "{} {how}", String::from_utf8_lossy(pop[0]));
            admin.wait_blocked(0);
        }
    }
    // The connection goes on as before.
    assert_eq!(waiter.cmd_str("PING"), Value::Simple(b"PONG".to_vec()));
    assert_eq!(admin.cmd_str(&format!("CLIENT UNBLOCK {waiter_id} ERROR")), Value::Int(0));
}

#[test]
fn kill_filters_on_every_core() {
    let server = Server::shards(3);
    let mut admin = server.raw();
    let admin_id = id_of(&mut admin);
    // Two connections on each of the other cores... and on the admin's.
    let mut conns: Vec<(Raw, u64)> = Vec::new();
    while conns.len() < 9 || (0..SHARDS).any(|c| conns.iter().filter(|(_, id)| (id - 1) % SHARDS == c).count() < 2) {
        let mut raw = server.raw();
        let id = id_of(&mut raw);
        conns.push((raw, id));
    }
    let on_other_core =
        |conns: &[(Raw, u64)]| conns.iter().position(|(_, id)| (id - 1) % SHARDS != (admin_id - 1) % SHARDS).unwrap();

    // ID, on another core.
    let (mut victim, id) = conns.remove(on_other_core(&conns));
    assert_eq!(admin.cmd_str(&format!("CLIENT KILL ID {id}")), Value::Int(1));
    assert!(victim.closed());

    // ADDR, new style and old.
    let (mut victim, id) = conns.remove(on_other_core(&conns));
    let addr = fields_of(&mut admin, id)["addr"].clone();
    assert_eq!(admin.cmd_str(&format!("CLIENT KILL ADDR {addr} SKIPME yes")), Value::Int(1));
    assert!(victim.closed());
    let (mut victim, id) = conns.remove(on_other_core(&conns));
    let addr = fields_of(&mut admin, id)["addr"].clone();
    assert_eq!(admin.cmd_str(&format!("CLIENT KILL {addr}")), Value::Simple(b"OK".to_vec()));
    assert!(victim.closed());
    assert_eq!(admin.cmd_str(&format!("CLIENT KILL {addr}")), Value::Error(b"ERR No such client".to_vec()));

    // TYPE pubsub: the subscribed ones, wherever they are.
    let mut subscribed: Vec<(Raw, u64)> = Vec::new();
    for _ in 0..3 {
        let (mut raw, id) = conns.pop().unwrap();
        raw.cmd_str("SUBSCRIBE news");
        subscribed.push((raw, id));
    }
    let listed = text(&admin.cmd_str("CLIENT LIST TYPE pubsub"));
    assert_eq!(listed.lines().count(), 3, "{listed}");
    assert_eq!(admin.cmd_str("CLIENT KILL TYPE pubsub"), Value::Int(3));
    for (mut raw, _) in subscribed {
        assert!(raw.closed());
    }

    // USER, combined with TYPE normal.
    assert_eq!(admin.cmd_str("ACL SETUSER bob on >pw ~* +@all"), Value::Simple(b"OK".to_vec()));
    let mut bobs: Vec<Raw> = Vec::new();
    for _ in 0..2 {
        let (mut raw, _) = conns.pop().unwrap();
        assert_eq!(raw.cmd_str("AUTH bob pw"), Value::Simple(b"OK".to_vec()));
        bobs.push(raw);
    }
    assert_eq!(admin.cmd_str("CLIENT KILL USER bob TYPE pubsub"), Value::Int(0));
    assert_eq!(admin.cmd_str("CLIENT KILL USER bob TYPE normal"), Value::Int(2));
    for mut raw in bobs {
        assert!(raw.closed());
    }

    // LADDR: everyone but the caller (SKIPME yes is the default).
    let laddr = fields_of(&mut admin, admin_id)["laddr"].clone();
    let left = conns.len() as i64;
    wait_clients(&mut admin, conns.len() + 1);
    assert_eq!(admin.cmd_str(&format!("CLIENT KILL LADDR {laddr}")), Value::Int(left));
    for (mut raw, _) in conns {
        assert!(raw.closed());
    }
    wait_clients(&mut admin, 1);

    // SKIPME no: the caller itself, closed after its reply.
    assert_eq!(admin.cmd_str(&format!("CLIENT KILL ID {admin_id} SKIPME no")), Value::Int(1));
    assert!(admin.closed());
}

/// CLIENT INFO's fields, in order, and their values (those that do not
/// depend on the process) as another connection sees them, in states
/// Redis can be put in the same way.
#[test]
fn client_list_fields_are_redis_fields() {
    let redis = Redis::start();
    let corekv = Server::shards(3);
    let (mut a, mut b) = (redis.raw(), corekv.raw());
    let keys = |line: &str| line.split(' ').map(|kv| kv.split('=').next().unwrap().to_string()).collect::<Vec<_>>();
    let (want, got) = (text(&a.cmd_str("CLIENT INFO")), text(&b.cmd_str("CLIENT INFO")));
    assert_eq!(keys(want.trim_end()), keys(got.trim_end()), "\nredis:  {want}\ncorekv: {got}");
    let (want, got) = (parse_line(want.trim_end()), parse_line(got.trim_end()));
    for field in ["flags", "cmd", "argv-mem", "resp"] {
        assert_eq!(want[field], got[field], "CLIENT INFO's {field}\nredis:  {want:?}\ncorekv: {got:?}");
    }
    let (mut oa, mut ob) = (redis.raw(), corekv.raw());
    let (ida, idb) = (id_of(&mut a), id_of(&mut b));
    let same = [
        "name", "flags", "db", "sub", "psub", "ssub", "multi", "qbuf", "argv-mem", "obl", "oll", "omem", "events",
        "cmd", "user", "redir", "resp",
    ];
    let steps: &[&[&str]] = &[
        &[],
        &["CLIENT SETNAME me", "SELECT 2"],
        &["CLIENT NO-EVICT on"],
        &["CLIENT TRACKING on"],
        &["CLIENT TRACKING off", "CLIENT TRACKING on BCAST PREFIX x"],
        &["CLIENT TRACKING off", "SUBSCRIBE a b", "PSUBSCRIBE p*", "SSUBSCRIBE {s}x"],
        &["RESET"],
        &["MULTI", "SET k v", "GET k"],
        &["EXEC", "HELLO 3"],
        &["CLIENT TRACKING on OPTIN"],
        &["CLIENT NO-EVICT off", "RESET"],
        &["WATCH k", "CLIENT REPLY OFF"],
    ];
    for step in steps {
        for cmd in *step {
            let words: Vec<&[u8]> = cmd.split(' ').map(str::as_bytes).collect();
            if cmd.starts_with("CLIENT REPLY") {
                a.send(&Raw::encode(&words));
                b.send(&Raw::encode(&words));
                continue;
            }
            let (x, y) = (a.cmd(&words), b.cmd(&words));
            if cmd.contains("SUBSCRIBE") {
                for _ in 1..words.len() - 1 {
                    assert_eq!(a.read().is_some(), b.read().is_some());
                }
            }
            if !cmd.starts_with("HELLO") {
                assert_eq!(x, y, "{cmd}");
            }
        }
        oa.cmd_str("PING");
        ob.cmd_str("PING");
        let (want, got) = (fields_of(&mut oa, ida), fields_of(&mut ob, idb));
        for field in same {
            assert_eq!(want[field], got[field], "{field} after {step:?}\nredis:  {want:?}\ncorekv: {got:?}");
        }
    }
    // Blocked: flags=b, cmd, argv-mem.
    a.send(&Raw::encode(&[b"BLPOP", b"nothing", b"0"]));
    b.send(&Raw::encode(&[b"BLPOP", b"nothing", b"0"]));
    oa.wait_blocked(1);
    ob.wait_blocked(1);
    let (want, got) = (fields_of(&mut oa, ida), fields_of(&mut ob, idb));
    for field in same {
        assert_eq!(want[field], got[field], "{field} (blocked)\nredis:  {want:?}\ncorekv: {got:?}");
    }
}

#[test]
fn config_set_rolls_back_when_the_aof_cannot_start() {
    let (rdir, cdir) = (TempDir::new("rollback-redis"), TempDir::new("rollback-corekv"));
    // A file where the AOF directory should go: turning the AOF on fails.
    std::fs::write(rdir.0.join("appendonlydir"), b"").unwrap();
    std::fs::write(cdir.0.join("appendonlydir"), b"").unwrap();
    let redis = Redis::start_with(&["--dir", rdir.path()]);
    let corekv = Server::start(&["--shards", "3", "--dir", cdir.path()]);
    let (mut a, mut b) = (redis.raw(), corekv.raw());
    for cmd in [
        "CONFIG SET maxmemory-samples 7 appendonly yes hz 20",
        "CONFIG GET maxmemory-samples",
        "CONFIG GET hz",
        "CONFIG GET appendonly",
        "CONFIG SET appendonly yes",
        "CONFIG GET appendonly",
        "SET k v",
        "CONFIG SET maxmemory-samples 7 hz 20",
        "CONFIG GET maxmemory-samples",
    ] {
        let (want, got) = (a.cmd_str(cmd), b.cmd_str(cmd));
        assert_eq!(want, got, "{cmd}");
    }
}

#[test]
fn config_rewrite_round_trip() {
    let dir = TempDir::new("rewrite");
    let file = dir.0.join("corekv.conf");
    let original = "# corekv test configuration\n\n# how often the cron runs\nhz 15\nmaxmemory-samples 3\n\n# nothing else\nrename-command SWAPDB \"\"\n";
    std::fs::write(&file, original).unwrap();
    let path = file.to_str().unwrap();
    let server = Server::start_with_file(path, &["--shards", "3"]);
    let mut c = server.raw();
    for cmd in [
        "CONFIG SET hz 20 maxmemory 100mb notify-keyspace-events Ex",
        "CONFIG SET maxmemory-samples 5",
        "ACL SETUSER bob on >pw ~* +@all",
        "CONFIG REWRITE",
    ] {
        assert_eq!(c.cmd_str(cmd), Value::Simple(b"OK".to_vec()), "{cmd}");
    }
    let written = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<&str> = written.lines().collect();
    // Comments where they were, values replaced in place (a default one
    // too: it was in the file), new ones after the signature.
    assert_eq!(
        &lines[..8],
        [
            "# corekv test configuration",
            "",
            "# how often the cron runs",
            "hz 20",
            "maxmemory-samples 5",
            "",
            "# nothing else",
            "rename-command SWAPDB \"\"",
        ],
        "{written}"
    );
    let generated = lines.iter().position(|l| *l == "# Generated by CONFIG REWRITE").expect(&written);
    let appended = &lines[generated + 1..];
    for want in ["maxmemory 100mb", "notify-keyspace-events \"xE\"", "shards 3", "save \"\"", "port 0"] {
        assert!(appended.contains(&want), "{want} in\n{written}");
    }
    assert!(appended.iter().any(|l| l.starts_with("user bob on ") && l.contains(" #")), "{written}");
    assert!(appended.iter().any(|l| l.starts_with("dir \"")), "{written}");
    drop(c);
    drop(server);

    // Started again from the file alone: the same settings and user.
    let server = Server::start_with_file(path, &[]);
    let mut c = server.raw();
    for (name, want) in
        [("hz", "20"), ("maxmemory", "104857600"), ("maxmemory-samples", "5"), ("notify-keyspace-events", "xE")]
    {
        let got = c.cmd_str(&format!("CONFIG GET {name}"));
        assert_eq!(
            got,
            Value::Array(vec![Value::Bulk(name.as_bytes().to_vec()), Value::Bulk(want.as_bytes().to_vec())]),
            "{name}"
        );
    }
    assert!(text(&c.cmd_str("INFO server")).contains("shards:3"));
    assert_eq!(c.cmd_str("AUTH bob pw"), Value::Simple(b"OK".to_vec()));
    assert!(matches!(c.cmd_str("SWAPDB 0 1"), Value::Error(_)));
    // A second rewrite changes nothing but Redis's trailing blank line.
    assert_eq!(c.cmd_str("CONFIG REWRITE"), Value::Simple(b"OK".to_vec()));
    assert_eq!(std::fs::read_to_string(&file).unwrap().trim_end(), written.trim_end());
}

#[test]
fn config_rewrite_without_a_file() {
    let server = Server::shards(1);
    assert_eq!(
        server.raw().cmd_str("CONFIG REWRITE"),
        Value::Error(b"ERR The server is running without a config file".to_vec())
    );
}

/// A port no one listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Whether 127.0.0.1:`port` takes connections.
fn listening(port: u16) -> bool {
    std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
}

/// The cores connections to `port` land on (a connection's core is
/// `(CLIENT ID - 1) % cores`), out of 30 connections.
fn cores_reached(port: u16, cores: u64) -> std::collections::BTreeSet<u64> {
    (0..30).map(|_| (id_of(&mut Raw::connect(port)) - 1) % cores).collect()
}

/// CONFIG SET port and bind at run time, as Redis 7.0's updatePort and
/// applyBind: the server listens on the new address (on every core) and no
/// longer on the old one, connections already open go on; an address that
/// cannot be listened on gets Redis's error and the old listener stays;
/// port 0 closes the TCP listener and a later port opens one again.
fn check_rebinding(server: &str, port: u16, cores: u64) {
    let ok = Value::Simple(b"OK".to_vec());
    let config_get = |raw: &mut Raw, name: &str| match raw.cmd(&[b"CONFIG", b"GET", name.as_bytes()]) {
        Value::Array(v) if v.len() == 2 => text(&v[1]),
        other => panic!("{server}: CONFIG GET {name}: {other:?}"),
    };
    let mut kept = Raw::connect(port);
    let mut admin = Raw::connect(port);
    let moved = free_port();
    assert_eq!(admin.cmd(&[b"CONFIG", b"SET", b"port", moved.to_string().as_bytes()]), ok, "{server}");
    assert!(!listening(port), "{server}: still listening on the old port");
    assert_eq!(cores_reached(moved, cores).len() as u64, cores, "{server}: not every core listens");
    assert_eq!(config_get(&mut admin, "port"), moved.to_string(), "{server}");
    let info = text(&admin.cmd(&[b"INFO", b"server"]));
    assert!(info.contains(&format!("tcp_port:{moved}\r\n")), "{server}: {info}");
    // The same port again changes nothing.
    assert_eq!(admin.cmd(&[b"CONFIG", b"SET", b"port", moved.to_string().as_bytes()]), ok, "{server}");
    assert!(listening(moved), "{server}");

    // A port another process holds: Redis's error, the old port kept.
    let blocker = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = blocker.local_addr().unwrap().port();
    assert_eq!(
        admin.cmd(&[b"CONFIG", b"SET", b"port", taken.to_string().as_bytes()]),
        Value::Error(
            b"ERR CONFIG SET failed (possibly related to argument 'port') - Unable to listen on this port. Check server logs."
                .to_vec()
        ),
        "{server}"
    );
    assert_eq!(config_get(&mut admin, "port"), moved.to_string(), "{server}");
    assert_eq!(cores_reached(moved, cores).len() as u64, cores, "{server}: the old listener was not kept");
    drop(blocker);

    // Port 0: no TCP listener; another port: one again.
    assert_eq!(admin.cmd(&[b"CONFIG", b"SET", b"port", b"0"]), ok, "{server}");
    assert!(!listening(moved), "{server}: port 0 still listens");
    let again = free_port();
    assert_eq!(admin.cmd(&[b"CONFIG", b"SET", b"port", again.to_string().as_bytes()]), ok, "{server}");
    assert_eq!(cores_reached(again, cores).len() as u64, cores, "{server}");

    // bind: an optional address the host may lack is skipped.
    assert_eq!(admin.cmd(&[b"CONFIG", b"SET", b"bind", b"127.0.0.1 -::1"]), ok, "{server}");
    assert_eq!(config_get(&mut admin, "bind"), "127.0.0.1 -::1", "{server}");
    assert_eq!(cores_reached(again, cores).len() as u64, cores, "{server}");
    // An address the host lacks (TEST-NET-1), not optional: Redis's error,
    // the old addresses kept.
    assert_eq!(
        admin.cmd(&[b"CONFIG", b"SET", b"bind", b"127.0.0.1 192.0.2.1"]),
        Value::Error(
            b"ERR CONFIG SET failed (possibly related to argument 'bind') - Failed to bind to specified addresses."
                .to_vec()
        ),
        "{server}"
    );
    assert_eq!(config_get(&mut admin, "bind"), "127.0.0.1 -::1", "{server}");
    assert_eq!(cores_reached(again, cores).len() as u64, cores, "{server}: the old listener was not kept");
    let many = vec!["127.0.0.1"; 17].join(" ");
    assert_eq!(
        admin.cmd(&[b"CONFIG", b"SET", b"bind", many.as_bytes()]),
        Value::Error(
            b"ERR CONFIG SET failed (possibly related to argument 'bind') - Too many bind addresses specified."
                .to_vec()
        ),
        "{server}"
    );
    assert_eq!(config_get(&mut admin, "bind"), "127.0.0.1 -::1", "{server}");

    // The connection opened before any of it is still served.
    assert_eq!(kept.cmd(&[b"PING"]), Value::Simple(b"PONG".to_vec()), "{server}");
}

#[test]
fn config_set_port_and_bind_move_the_listeners_as_redis() {
    let redis = Redis::start();
    check_rebinding("redis-server", redis.port, 1);
    let ring = Server::start(&["--shards", &SHARDS.to_string()]);
    check_rebinding("corekv", ring.port, SHARDS);
    let reactor = Server::start(&["--shards", "2", "--client-ring", "no"]);
    check_rebinding("corekv on glommio's reactor", reactor.port, 2);
}
