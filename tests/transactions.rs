//! MULTI/EXEC/WATCH across cores: what the differential scripts (one
//! connection at a time) cannot show. Connections land on the cores the
//! kernel picks (SO_REUSEPORT), so several of them cover every core.

mod common;

use common::{Raw, Server};
use proxy::resp::Value;

fn ok() -> Value {
    Value::Simple(b"OK".to_vec())
}

/// Watches `key` on `watcher`, lets `change` run on `other`, and returns
/// what EXEC answered.
fn exec_after(watcher: &mut Raw, other: &mut Raw, key: &str, change: &str) -> Value {
    assert_eq!(watcher.cmd_str(&format!("WATCH {key}")), ok());
    other.cmd_str(change);
    assert_eq!(watcher.cmd_str("MULTI"), ok());
    watcher.cmd_str(&format!("GET {key}"));
    watcher.cmd_str("EXEC")
}

#[test]
fn watch_sees_changes_made_on_every_core() {
    let server = Server::shards(3);
    let mut conns: Vec<Raw> = (0..8).map(|_| server.raw()).collect();
    let keys = ["k0", "k1", "k2", "k3", "k4", "k5"];
    for (round, key) in keys.iter().enumerate() {
        for w in 0..conns.len() {
            let o = (w + round + 1) % conns.len();
            let (watcher, other) = if w < o {
                let (a, b) = conns.split_at_mut(o);
                (&mut a[w], &mut b[0])
            } else {
                let (a, b) = conns.split_at_mut(w);
                (&mut b[0], &mut a[o])
            };
            let changes = [
                format!("SET {key} v{w}"),
                format!("INCR {key}n"),
                format!("DEL {key}"),
                "FLUSHALL".to_string(),
                format!("RENAME {key}x {key}"),
            ];
            for change in changes {
                // Make the change a real one: the key exists beforehand.
                other.cmd_str(&format!("SET {key} before"));
                other.cmd_str(&format!("SET {key}x renamed"));
                let key_for_change = if change.starts_with("INCR") { format!("{key}n") } else { key.to_string() };
                let got = exec_after(watcher, other, &key_for_change, &change);
                assert_eq!(got, Value::NilArray, "WATCH {key_for_change} then {change:?} on another connection");
            }
            // Unchanged: EXEC runs.
            let got = exec_after(watcher, other, key, &format!("GET {key}"));
            assert!(matches!(got, Value::Array(ref a) if a.len() == 1), "untouched watch ran: {got:?}");
        }
    }
}

#[test]
fn a_failed_watch_does_not_linger() {
    let server = Server::shards(2);
    let mut a = server.raw();
    let mut b = server.raw();
    assert_eq!(exec_after(&mut a, &mut b, "w", "SET w 1"), Value::NilArray);
    // EXEC unwatched everything: the same key changing again is no news.
    b.cmd_str("SET w 2");
    assert_eq!(a.cmd_str("MULTI"), ok());
    a.cmd_str("GET w");
    assert_eq!(a.cmd_str("EXEC"), Value::Array(vec![Value::Bulk(b"2".to_vec())]));
    // Nor after a client that watched goes away.
    let mut gone = server.raw();
    gone.cmd_str("WATCH w");
    drop(gone);
    b.cmd_str("SET w 3");
    assert_eq!(a.cmd_str("WATCH w"), ok());
    assert_eq!(a.cmd_str("MULTI"), ok());
    a.cmd_str("GET w");
    assert_eq!(a.cmd_str("EXEC"), Value::Array(vec![Value::Bulk(b"3".to_vec())]));
}

#[test]
fn client_list_shows_a_transaction_in_progress() {
    let server = Server::shards(2);
    let mut a = server.raw();
    a.cmd_str("CLIENT SETNAME txn");
    a.cmd_str("MULTI");
    a.cmd_str("SET a 1");
    a.cmd_str("SET b 2");
    let mut b = server.raw();
    let Value::Bulk(list) = b.cmd_str("CLIENT LIST") else { panic!("CLIENT LIST") };
    let list = String::from_utf8(list).unwrap();
    let line = list.lines().find(|l| l.contains("name=txn")).expect("the client");
    assert!(line.contains(" flags=x ") && line.contains(" multi=2 "), "{line}");
    a.cmd_str("DISCARD");
}
