//! Differential runs of blocked clients for tests/blocking.rs and
//! tests/streams.rs: the same steps against redis-server and corekv with 1
//! and 3 shards, the blocked client and the writer placed on every pair of
//! cores (a connection lands on core `(CLIENT ID - 1) % shards`), so both
//! the inline paths (writer on the keys' core) and the cross-core ones run.

use crate::common::{Raw, Redis, Server};
use proxy::resp::Value;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

/// A command as its words.
pub type Cmd = &'static [&'static str];

/// One scenario. Every reply the writer gets after `setup` is recorded, and
/// the blocked client's reply between `steps` and `then`.
pub struct Case {
    pub name: &'static str,
    pub setup: &'static [Cmd],
    /// The blocking command, sent once `setup` is done.
    pub block: Cmd,
    /// Run once the client counts as blocked.
    pub steps: &'static [Cmd],
    /// `steps` go out in one write (a pipeline) instead of one by one.
    pub pipelined: bool,
    /// Run after the blocked client's reply.
    pub then: &'static [Cmd],
}

fn encode(cmd: Cmd) -> Vec<u8> {
    Raw::encode(&cmd.iter().map(|w| w.as_bytes()).collect::<Vec<_>>())
}

/// A connection that landed on `core` of a server with `cores` shards.
pub fn conn_on_core(port: u16, core: usize, cores: usize) -> Raw {
    for _ in 0..500 {
        let mut c = Raw::connect(port);
        match c.cmd_str("CLIENT ID") {
            Value::Int(id) if (id as usize - 1) % cores == core => return c,
            Value::Int(_) => {}
            other => panic!("CLIENT ID: {other:?}"),
        }
    }
    panic!("no connection landed on core {core}");
}

/// The replies of `case` with the blocked client on core `waiter` and the
/// writer on core `writer`.
pub fn transcript(port: u16, cores: usize, waiter: usize, writer: usize, case: &Case) -> Vec<Value> {
    let mut w = conn_on_core(port, writer, cores);
    // Setup's replies depend on what the previous run left: not recorded.
    for c in case.setup {
        w.send(&encode(c));
        w.read().expect("a reply");
    }
    let mut out = Vec::new();
    let mut blocked = conn_on_core(port, waiter, cores);
    blocked.stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    blocked.send(&encode(case.block));
    w.wait_blocked(1);
    if case.pipelined {
        w.send(&case.steps.iter().flat_map(|c| encode(c)).collect::<Vec<u8>>());
        out.extend(case.steps.iter().map(|_| w.read().expect("a reply")));
    } else {
        for c in case.steps {
            w.send(&encode(c));
            out.push(w.read().expect("a reply"));
        }
    }
    // A client left blocked (no reply in 5 s) shows as such in the transcript.
    let reply = catch_unwind(AssertUnwindSafe(|| blocked.read()));
    out.push(reply.ok().flatten().unwrap_or(Value::Error(b"(still blocked)".to_vec())));
    drop(blocked);
    for c in case.then {
        w.send(&encode(c));
        out.push(w.read().expect("a reply"));
    }
    out
}

/// Runs every case against redis-server, then against corekv with 1 and 3
/// shards over every placement: each transcript must be Redis's.
pub fn check(cases: &[Case]) {
    let redis = Redis::start();
    let want: Vec<Vec<Value>> = cases.iter().map(|c| transcript(redis.port, 1, 0, 0, c)).collect();
    drop(redis);
    let mut wrong = Vec::new();
    for shards in [1, 3] {
        let server = Server::shards(shards);
        for (case, want) in cases.iter().zip(&want) {
            for waiter in 0..shards {
                for writer in 0..shards {
                    let got = transcript(server.port, shards, waiter, writer, case);
                    if &got != want {
                        wrong.push(format!(
                            "{} ({shards} shards, blocked client on core {waiter}, writer on core {writer}):\n  redis:  {}\n  corekv: {}",
                            case.name,
                            show(want),
                            show(&got)
                        ));
                    }
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{} transcripts differ from Redis's:\n{}", wrong.len(), wrong.join("\n"));
}

/// A transcript as text: bulk strings as text, errors marked.
fn show(values: &[Value]) -> String {
    fn one(v: &Value) -> String {
        match v {
            Value::Bulk(b) | Value::Simple(b) => format!("{:?}", String::from_utf8_lossy(b)),
            Value::Error(e) => format!("(error {:?})", String::from_utf8_lossy(e)),
            Value::Array(items) => format!("[{}]", items.iter().map(one).collect::<Vec<_>>().join(", ")),
            other => format!("{other:?}"),
        }
    }
    values.iter().map(one).collect::<Vec<_>>().join(" | ")
}
