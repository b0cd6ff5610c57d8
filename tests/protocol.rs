//! Hostile and broken input: every case gets Redis's protocol error (or a
//! clean close), nothing is lost, and the server keeps serving everyone else.

mod common;

use common::{Raw, Server};
use proxy::resp::Value;
use rand::{Rng, SeedableRng};
use std::io::Write;

fn err(text: &str) -> Value {
    Value::Error(text.as_bytes().to_vec())
}

fn assert_healthy(server: &Server) {
    let mut probe = server.raw();
    assert_eq!(probe.cmd_str("SET health ok"), Value::Simple(b"OK".to_vec()));
    assert_eq!(probe.cmd_str("GET health"), Value::Bulk(b"ok".to_vec()));
}

fn closes_with(server: &Server, input: &[u8], expected: &str) {
    let mut raw = server.raw();
    raw.send(input);
    assert_eq!(raw.read(), Some(err(expected)), "input {:?}", String::from_utf8_lossy(&input[..input.len().min(60)]));
    assert!(raw.closed(), "connection must close after a protocol error");
}

#[test]
fn malformed_frames_get_protocol_errors() {
    for shards in [1, 2] {
        let server = Server::shards(shards);
        let mut bystander = server.raw();
        assert_eq!(bystander.cmd_str("SET before 1"), Value::Simple(b"OK".to_vec()));
        closes_with(&server, b"*1\r\n$-5\r\n", "ERR Protocol error: invalid bulk length");
        closes_with(&server, b"*1\r\n$2147483648\r\n", "ERR Protocol error: invalid bulk length");
        closes_with(&server, b"*1\r\n$536870913\r\n", "ERR Protocol error: invalid bulk length");
        closes_with(&server, b"*1\r\n$99999999999999999999999\r\n", "ERR Protocol error: invalid bulk length");
        closes_with(&server, b"*abc\r\n", "ERR Protocol error: invalid multibulk length");
        closes_with(&server, b"*2147483648\r\n", "ERR Protocol error: invalid multibulk length");
        closes_with(&server, b"*1\r\n:5\r\n", "ERR Protocol error: expected '$', got ':'");
        closes_with(&server, b"*1\r\n$x\r\n", "ERR Protocol error: invalid bulk length");
        closes_with(&server, b"SET \"unbalanced\r\n", "ERR Protocol error: unbalanced quotes in request");
        closes_with(&server, &vec![b'x'; 70 * 1024], "ERR Protocol error: too big inline request");
        // Commands before the bad frame are answered first.
        let mut raw = server.raw();
        raw.send(b"*1\r\n$4\r\nPING\r\nPING\r\n*1\r\n$-1\r\n");
        assert_eq!(raw.read(), Some(Value::Simple(b"PONG".to_vec())));
        assert_eq!(raw.read(), Some(Value::Simple(b"PONG".to_vec())));
        assert_eq!(raw.read(), Some(err("ERR Protocol error: invalid bulk length")));
        assert!(raw.closed());
        // The bystander's connection was never disturbed.
        assert_eq!(bystander.cmd_str("GET before"), Value::Bulk(b"1".to_vec()));
        assert_healthy(&server);
    }
}

#[test]
fn a_two_gigabyte_header_allocates_nothing() {
    let server = Server::shards(2);
    // Under proto-max-bulk-len it is a valid header: the server must wait
    // for the data without reserving 2 GB, and a disconnect frees the client.
    let server2 = Server::start(&["--shards", "1", "--proto-max-bulk-len", "4gb"]);
    for s in [&server, &server2] {
        let mut raw = s.raw();
        raw.send(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2000000000\r\nsome bytes");
        std::thread::sleep(std::time::Duration::from_millis(100));
        drop(raw);
        assert_healthy(s);
    }
    let mut raw = server.raw();
    raw.send(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2000000000\r\n");
    assert_eq!(raw.read(), Some(err("ERR Protocol error: invalid bulk length")));
    let rss_kb: u64 = std::fs::read_to_string(format!("/proc/{}/status", server2.child.id()))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").parse().ok())
        .unwrap();
    assert!(rss_kb < 512 * 1024, "server RSS {rss_kb} kB after a 2 GB header");
}

#[test]
fn a_client_vanishing_mid_command_changes_nothing() {
    let server = Server::shards(2);
    for cut in [b"*3\r\n$3\r\nSET\r\n$4\r\nhalf\r\n$5\r\nval".as_slice(), b"*3\r\n$3\r\nSET\r\n$4\r\nha", b"*3\r\n"] {
        let mut raw = server.raw();
        raw.send(cut);
        drop(raw);
    }
    std::thread::sleep(std::time::Duration::from_millis(100));
    let mut probe = server.raw();
    assert_eq!(probe.cmd_str("EXISTS half"), Value::Int(0));
    assert_healthy(&server);
}

#[test]
fn random_bytes_never_take_the_server_down() {
    let server = Server::shards(2);
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed);
    let mut bystander = server.raw();
    for round in 0..200 {
        let len = rng.gen_range(1..4096);
        let mut junk: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
        if round % 3 == 0 {
            junk[0] = b'*';
        }
        let mut raw = Raw::connect(server.port);
        let _ = raw.stream.write_all(&junk);
        let _ = raw.stream.shutdown(std::net::Shutdown::Write);
        // Whatever came back must be well-formed RESP; then a close.
        let mut all = Vec::new();
        let _ = std::io::Read::read_to_end(&mut raw.stream, &mut all);
        let mut rest = &all[..];
        while !rest.is_empty() {
            let (_, used) = Value::decode(rest).expect("well-formed").expect("complete reply");
            rest = &rest[used..];
        }
        if round % 20 == 0 {
            assert_eq!(bystander.cmd_str("PING"), Value::Simple(b"PONG".to_vec()));
        }
    }
    assert_healthy(&server);
}

#[test]
fn query_buffer_limit_closes_the_client_only() {
    let server = Server::start(&["--shards", "1", "--client-query-buffer-limit", "1mb"]);
    let mut raw = server.raw();
    raw.send(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$10000000\r\n");
    let chunk = vec![b'a'; 64 * 1024];
    let mut closed = false;
    for _ in 0..100 {
        if raw.stream.write_all(&chunk).is_err() {
            closed = true;
            break;
        }
    }
    assert!(closed || raw.closed(), "client over the query buffer limit must be closed");
    assert_healthy(&server);
}

#[test]
fn large_values_and_inline_commands() {
    let server = Server::shards(2);
    let mut raw = server.raw();
    let big = vec![b'z'; 8 << 20];
    assert_eq!(raw.cmd(&[b"SET", b"big", &big]), Value::Simple(b"OK".to_vec()));
    assert_eq!(raw.cmd(&[b"GET", b"big"]), Value::Bulk(big));
    raw.send(b"SET inline \"two words\"\r\nGET inline\r\n\r\nPING\n");
    assert_eq!(raw.read(), Some(Value::Simple(b"OK".to_vec())));
    assert_eq!(raw.read(), Some(Value::Bulk(b"two words".to_vec())));
    assert_eq!(raw.read(), Some(Value::Simple(b"PONG".to_vec())));
}

#[test]
fn unauthenticated_clients_get_small_limits() {
    let server = Server::start(&["--requirepass", "pw"]);
    closes_with(&server, b"*11\r\n", "ERR Protocol error: unauthenticated multibulk length");
    closes_with(&server, b"*2\r\n$4\r\nAUTH\r\n$20000\r\n", "ERR Protocol error: unauthenticated bulk length");
}

#[test]
fn security_probe_lines_close_the_connection() {
    let server = Server::shards(1);
    let mut raw = server.raw();
    raw.send(b"POST / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(raw.closed());
    assert_healthy(&server);
}

#[test]
fn every_command_with_any_argument_count_is_safe() {
    // SAVE and BGSAVE run too: their file goes to a directory of its own,
    // not to the working directory other tests' servers load from.
    let dir = std::env::temp_dir().join(format!("corekv-protocol-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let server = Server::start(&["--shards", "2", "--dir", dir.to_str().unwrap(), "--save", ""]);
    let mut raw = server.raw();
    let Value::Array(names) = raw.cmd_str("COMMAND LIST") else { panic!("COMMAND LIST") };
    let fillers: [&[u8]; 6] = [b"k", b"0", b"-1", b"*", b"", b"\xff\x00"];
    for name in names {
        let full = name.as_bytes().unwrap().to_vec();
        if full == b"shutdown" {
            continue;
        }
        // "client|kill" is sent as CLIENT KILL.
        let words: Vec<Vec<u8>> = full.split(|&b| b == b'|').map(<[u8]>::to_vec).collect();
        for extra in 0..5 {
            for filler in fillers {
                let mut args: Vec<&[u8]> = words.iter().map(Vec::as_slice).collect();
                args.extend(std::iter::repeat_n(filler, extra));
                if words[0].ends_with(b"subscribe") || words[0] == b"monitor" {
                    // One reply per channel, and a subscribed connection
                    // refuses most commands (a monitor streams every
                    // command after its reply): a new connection after it.
                    raw.send(&Raw::encode(&args));
                    raw = server.raw();
                    continue;
                }
                if matches!(words[0].as_slice(), b"sync" | b"psync") {
                    // The connection may turn into a replica's link (a
                    // snapshot, then the stream), as on Redis: a new one.
                    raw.send(&Raw::encode(&args));
                    raw = server.raw();
                    continue;
                }
                let reply = raw.cmd(&args);
                if matches!(words[0].as_slice(), b"quit") || matches!(&reply, Value::Simple(s) if s == b"RESET") {
                    raw = server.raw();
                }
                if words[0] == b"client" && words.get(1).is_some_and(|w| w == b"kill") {
                    raw = server.raw();
                }
            }
        }
    }
    // REPLICAOF k 0 made it a replica (as it would Redis): writable again.
    assert_eq!(raw.cmd_str("REPLICAOF NO ONE"), Value::Simple(b"OK".to_vec()));
    assert_healthy(&server);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A client pipelining reads of large values without reading its replies is
/// held back by TCP: the server's memory stays bounded.
#[test]
fn unread_replies_do_not_pile_up_in_the_server() {
    let server = Server::shards(1);
    let mut raw = server.raw();
    let value = vec![b'v'; 1 << 20];
    assert_eq!(raw.cmd(&[b"SET", b"big", &value]), Value::Simple(b"OK".to_vec()));
    let gets: Vec<u8> = std::iter::repeat_n(Raw::encode(&[b"GET", b"big"]), 400).flatten().collect();
    raw.send(&gets);
    std::thread::sleep(std::time::Duration::from_millis(500));
    let rss_kb: u64 = std::fs::read_to_string(format!("/proc/{}/status", server.child.id()))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").parse().ok())
        .unwrap();
    assert!(rss_kb < 200 * 1024, "400 MB of unread replies buffered in the server ({rss_kb} kB RSS)");
    for _ in 0..400 {
        assert_eq!(raw.read().map(|v| matches!(v, Value::Bulk(b) if b.len() == 1 << 20)), Some(true));
    }
    assert_healthy(&server);
}
