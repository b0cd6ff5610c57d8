//! Race tests: multi-key commands, transactions and scripts over keys on
//! different shards must be atomic, as in Redis. Every test body takes a
//! port and runs against a real redis-server too, so the reference proves
//! the test itself: a violation count above zero on corekv is a torn read,
//! a double grant or a torn transaction, never a flaw of the test.
//!
//! Run with `--nocapture` to see the counts.

mod common;

use common::{Raw, Redis, Server};
use proxy::resp::Value;
use proxy::slot::{key_slot, SLOTS};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// corekv runs with this many shards; in `cluster-mode no` shard `i` owns
/// the slots `[i * SLOTS / n, (i + 1) * SLOTS / n)`.
const SHARDS: usize = 3;

/// No test runs longer than this, whatever its round count (on a quiet
/// machine each finishes its rounds in a few seconds; on a loaded 2-core CI
/// runner they need longer to reach the thousand rounds they must show).
const TIME_CAP: Duration = Duration::from_secs(12);

fn shard_of(key: &str) -> usize {
    key_slot(key.as_bytes()) as usize * SHARDS / SLOTS
}

/// `per_shard` keys on each shard, in round-robin shard order: neighbours
/// always live on different shards.
fn spread_keys(prefix: &str, per_shard: usize) -> Vec<String> {
    let mut by_shard = vec![Vec::new(); SHARDS];
    let mut i = 0;
    while by_shard.iter().any(|keys| keys.len() < per_shard) {
        let key = format!("{prefix}:{i}");
        let keys = &mut by_shard[shard_of(&key)];
        if keys.len() < per_shard {
            keys.push(key);
        }
        i += 1;
    }
    (0..per_shard).flat_map(|n| by_shard.iter().map(move |keys| keys[n].clone())).collect()
}

fn args(words: &[&str]) -> Vec<u8> {
    Raw::encode(&words.iter().map(|w| w.as_bytes()).collect::<Vec<_>>())
}

fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(n) => Some(*n),
        Value::Bulk(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        _ => None,
    }
}

/// What a race saw: rounds run, violations of the property, and replies
/// that were not what the protocol promises (an error, a wrong shape).
#[derive(Default)]
struct Tally {
    rounds: AtomicU64,
    violations: AtomicU64,
    unexpected: AtomicU64,
    first: Mutex<Vec<String>>,
}

impl Tally {
    fn round(&self) {
        self.rounds.fetch_add(1, Relaxed);
    }

    fn violation(&self, what: impl FnOnce() -> String) {
        self.violations.fetch_add(1, Relaxed);
        self.note(what);
    }

    fn unexpected(&self, what: impl FnOnce() -> String) {
        self.unexpected.fetch_add(1, Relaxed);
        self.note(what);
    }

    fn note(&self, what: impl FnOnce() -> String) {
        let mut first = self.first.lock().unwrap();
        if first.len() < 5 {
            first.push(what());
        }
    }

    /// Prints the counts and fails on any violation or unexpected reply.
    fn check(&self, name: &str, unit: &str) {
        let (rounds, violations, unexpected) =
            (self.rounds.load(Relaxed), self.violations.load(Relaxed), self.unexpected.load(Relaxed));
        println!("{name}: {violations} violations, {unexpected} unexpected replies in {rounds} {unit}");
        assert!(
            violations == 0 && unexpected == 0,
            "{name}: {violations} violations and {unexpected} unexpected replies in {rounds} {unit}; first: {:#?}",
            self.first.lock().unwrap()
        );
        assert!(rounds >= 1000, "{name}: only {rounds} {unit} ran");
    }
}

/// Runs `readers` threads calling `read` (each with its own connection)
/// until `write` (on its own connection) returns.
fn readers_while(port: u16, readers: usize, write: impl FnOnce(&mut Raw), read: impl Fn(&mut Raw) + Sync) {
    let done = AtomicBool::new(false);
    thread::scope(|s| {
        for _ in 0..readers {
            let (done, read) = (&done, &read);
            s.spawn(move || {
                let mut conn = Raw::connect(port);
                while !done.load(Relaxed) {
                    read(&mut conn);
                }
            });
        }
        let mut conn = Raw::connect(port);
        write(&mut conn);
        done.store(true, Relaxed);
    });
}

/// A writer `MSET`s keys on every shard to one value per round while
/// readers `MGET` them: every reply must hold one value (or none yet).
fn mset_never_torn(port: u16) -> Tally {
    let keys = spread_keys("mset", 1);
    let tally = Tally::default();
    let started = Instant::now();
    readers_while(
        port,
        4,
        |conn| {
            for round in 0..5000 {
                if started.elapsed() > TIME_CAP {
                    break;
                }
                let value = round.to_string();
                let mut cmd = vec!["MSET"];
                for k in &keys {
                    cmd.extend([k.as_str(), value.as_str()]);
                }
                conn.send(&args(&cmd));
                if conn.read() != Some(Value::Simple(b"OK".to_vec())) {
                    tally.unexpected(|| "MSET did not answer +OK".into());
                }
            }
        },
        |conn| {
            let mut cmd = vec!["MGET"];
            cmd.extend(keys.iter().map(String::as_str));
            let reply = conn.cmd(&cmd.iter().map(|w| w.as_bytes()).collect::<Vec<_>>());
            tally.round();
            match &reply {
                Value::Array(items) if items.len() == keys.len() => {
                    if items.iter().any(|v| v != &items[0]) {
                        tally.violation(|| format!("torn MGET: {reply:?}"));
                    }
                }
                _ => tally.unexpected(|| format!("MGET: {reply:?}")),
            }
        },
    );
    tally
}

/// A writer renames a key back and forth between two shards while readers
/// ask `EXISTS a b`: exactly one of the names exists at every instant.
fn rename_never_torn(port: u16) -> Tally {
    let keys = spread_keys("rename", 1);
    let (a, b) = (keys[0].as_str(), keys[1].as_str());
    let tally = Tally::default();
    let mut setup = Raw::connect(port);
    setup.cmd_str(&format!("DEL {a} {b}"));
    setup.cmd_str(&format!("SET {a} v"));
    let started = Instant::now();
    readers_while(
        port,
        4,
        |conn| {
            for round in 0..5000 {
                if started.elapsed() > TIME_CAP {
                    break;
                }
                let (from, to) = if round % 2 == 0 { (a, b) } else { (b, a) };
                let reply = conn.cmd_str(&format!("RENAME {from} {to}"));
                if reply != Value::Simple(b"OK".to_vec()) {
                    tally.unexpected(|| format!("RENAME {from} {to}: {reply:?}"));
                }
            }
        },
        |conn| {
            let reply = conn.cmd_str(&format!("EXISTS {a} {b}"));
            tally.round();
            match reply {
                Value::Int(1) => {}
                Value::Int(n) => tally.violation(|| format!("EXISTS a b = {n}")),
                other => tally.unexpected(|| format!("EXISTS: {other:?}")),
            }
        },
    );
    tally
}

/// Several clients race `MSETNX` over one key set spread over the shards,
/// then the keys are deleted: each round has exactly one winner, and the
/// keys then hold that winner's value, all of them.
fn msetnx_grants_once(port: u16) -> Tally {
    const RACERS: usize = 3;
    let keys = spread_keys("msetnx", 1);
    let tally = Tally::default();
    let winners = AtomicU64::new(0);
    let barrier = Barrier::new(RACERS);
    let stop = AtomicBool::new(false);
    let started = Instant::now();
    Raw::connect(port).cmd(&keys.iter().fold(vec![&b"DEL"[..]], |mut v, k| {
        v.push(k.as_bytes());
        v
    }));
    thread::scope(|s| {
        for racer in 0..RACERS {
            let (keys, tally, winners, barrier, stop) = (&keys, &tally, &winners, &barrier, &stop);
            s.spawn(move || {
                let mut conn = Raw::connect(port);
                let value = format!("racer{racer}");
                let mut msetnx = vec!["MSETNX"];
                for k in keys {
                    msetnx.extend([k.as_str(), value.as_str()]);
                }
                let msetnx = args(&msetnx);
                for _ in 0..3000 {
                    // Racer 0 decides for everyone whether to go on.
                    if racer == 0 && started.elapsed() > TIME_CAP {
                        stop.store(true, Relaxed);
                    }
                    barrier.wait();
                    if stop.load(Relaxed) {
                        break;
                    }
                    conn.send(&msetnx);
                    match conn.read() {
                        Some(Value::Int(1)) => {
                            winners.fetch_add(1, Relaxed);
                        }
                        Some(Value::Int(0)) => {}
                        other => tally.unexpected(|| format!("MSETNX: {other:?}")),
                    }
                    barrier.wait();
                    if racer == 0 {
                        tally.round();
                        let won = winners.swap(0, Relaxed);
                        let mut mget = vec!["MGET"];
                        mget.extend(keys.iter().map(String::as_str));
                        let values = conn.cmd(&mget.iter().map(|w| w.as_bytes()).collect::<Vec<_>>());
                        let one_owner = matches!(&values, Value::Array(items)
                            if items.iter().all(|v| v == &items[0] && matches!(v, Value::Bulk(_))));
                        if won != 1 || !one_owner {
                            tally.violation(|| format!("{won} winners, keys then {values:?}"));
                        }
                        let mut del = vec!["DEL"];
                        del.extend(keys.iter().map(String::as_str));
                        conn.send(&args(&del));
                        conn.read();
                    }
                    barrier.wait();
                }
            });
        }
    });
    tally
}

/// Accounts on every shard; clients move amounts between accounts on
/// different shards with `transfer` while readers check that the total
/// never changes, through `MGET` and through each `audits` reader.
struct Bank {
    accounts: Vec<String>,
    total: i64,
}

const BALANCE: i64 = 1000;

impl Bank {
    fn open(port: u16, prefix: &str) -> Bank {
        let accounts = spread_keys(prefix, 2);
        let mut conn = Raw::connect(port);
        for a in &accounts {
            conn.cmd_str(&format!("SET {a} {BALANCE}"));
        }
        Bank { total: BALANCE * accounts.len() as i64, accounts }
    }

    /// The two accounts of transfer `n` of client `c`: always on different
    /// shards (neighbours in `accounts` are), in both directions.
    fn pair(&self, c: usize, n: usize) -> (&str, &str) {
        let len = self.accounts.len();
        let from = (c + n) % len;
        let step = if (c + n / len) & 1 == 0 { 1 } else { len - 1 };
        (&self.accounts[from], &self.accounts[(from + step) % len])
    }

    /// Runs `clients` transfer connections of `transfers` each, `readers`
    /// MGET readers and one reader per audit.
    #[allow(clippy::type_complexity)]
    fn run(
        &self,
        port: u16,
        clients: usize,
        transfers: usize,
        transfer: &(dyn Fn(&mut Raw, &str, &str, i64) -> Result<(), String> + Sync),
        audits: &[&(dyn Fn(&mut Raw) -> Result<i64, String> + Sync)],
        tally: &Tally,
    ) {
        let done = AtomicBool::new(false);
        let started = Instant::now();
        let mget = |conn: &mut Raw| {
            let mut cmd = vec!["MGET"];
            cmd.extend(self.accounts.iter().map(String::as_str));
            match conn.cmd(&cmd.iter().map(|w| w.as_bytes()).collect::<Vec<_>>()) {
                Value::Array(items) => items.iter().map(|v| int(v).ok_or(format!("MGET item {v:?}"))).sum(),
                other => Err(format!("MGET: {other:?}")),
            }
        };
        thread::scope(|s| {
            let mut readers: Vec<&(dyn Fn(&mut Raw) -> Result<i64, String> + Sync)> = vec![&mget, &mget];
            readers.extend_from_slice(audits);
            for read in readers {
                let done = &done;
                s.spawn(move || {
                    let mut conn = Raw::connect(port);
                    while !done.load(Relaxed) {
                        tally.round();
                        match read(&mut conn) {
                            Ok(sum) if sum == self.total => {}
                            Ok(sum) => tally.violation(|| format!("sum {sum}, not {}", self.total)),
                            Err(e) => tally.unexpected(|| e),
                        }
                    }
                });
            }
            let workers: Vec<_> = (0..clients)
                .map(|c| {
                    s.spawn(move || {
                        let mut conn = Raw::connect(port);
                        // At least `transfers` each, and on until the readers
                        // have audited a thousand times while writes run (a
                        // loaded runner reads slowly).
                        for n in 0.. {
                            let enough = n >= transfers && tally.rounds.load(Relaxed) >= 1000;
                            if enough || started.elapsed() > TIME_CAP {
                                break;
                            }
                            let (from, to) = self.pair(c, n);
                            if let Err(e) = transfer(&mut conn, from, to, 1 + (n % 7) as i64) {
                                tally.unexpected(|| e);
                                break;
                            }
                        }
                    })
                })
                .collect();
            for w in workers {
                w.join().unwrap();
            }
            done.store(true, Relaxed);
        });
        let mut conn = Raw::connect(port);
        let after: i64 = self.accounts.iter().map(|a| int(&conn.cmd_str(&format!("GET {a}"))).unwrap_or(0)).sum();
        if after != self.total {
            tally.violation(|| format!("sum after all transfers {after}, not {}", self.total));
        }
    }
}

/// Sends `commands` as one MULTI/EXEC (pipelined) and returns EXEC's items.
fn multi_exec(conn: &mut Raw, commands: &[Vec<&str>]) -> Result<Vec<Value>, String> {
    let mut out = args(&["MULTI"]);
    for c in commands {
        out.extend(args(c));
    }
    out.extend(args(&["EXEC"]));
    conn.send(&out);
    let ok = conn.read();
    if ok != Some(Value::Simple(b"OK".to_vec())) {
        // Drain the rest so the connection stays in step.
        let rest: Vec<_> = (0..=commands.len()).map(|_| conn.read()).collect();
        return Err(format!("MULTI: {ok:?}, then {rest:?}"));
    }
    for c in commands {
        let queued = conn.read();
        if queued != Some(Value::Simple(b"QUEUED".to_vec())) {
            return Err(format!("{c:?} in MULTI: {queued:?}"));
        }
    }
    match conn.read() {
        Some(Value::Array(items)) if items.len() == commands.len() => Ok(items),
        other => Err(format!("EXEC: {other:?}")),
    }
}

fn transfer_in_multi(conn: &mut Raw, from: &str, to: &str, amount: i64) -> Result<(), String> {
    let n = amount.to_string();
    let items = multi_exec(conn, &[vec!["DECRBY", from, &n], vec!["INCRBY", to, &n]])?;
    match items.as_slice() {
        [Value::Int(_), Value::Int(_)] => Ok(()),
        other => Err(format!("EXEC: {other:?}")),
    }
}

fn audit_in_multi(bank: &Bank) -> impl Fn(&mut Raw) -> Result<i64, String> + Sync + '_ {
    move |conn: &mut Raw| {
        let gets: Vec<Vec<&str>> = bank.accounts.iter().map(|a| vec!["GET", a.as_str()]).collect();
        multi_exec(conn, &gets)?.iter().map(|v| int(v).ok_or(format!("GET in EXEC: {v:?}"))).sum()
    }
}

const TRANSFER_SCRIPT: &str = "redis.call('DECRBY', KEYS[1], ARGV[1]) \
     return redis.call('INCRBY', KEYS[2], ARGV[1])";

const SUM_SCRIPT: &str = "local sum = 0 \
     for _, k in ipairs(KEYS) do sum = sum + tonumber(redis.call('GET', k)) end \
     return sum";

fn transfer_in_script(conn: &mut Raw, from: &str, to: &str, amount: i64) -> Result<(), String> {
    let amount = amount.to_string();
    conn.send(&args(&["EVAL", TRANSFER_SCRIPT, "2", from, to, &amount]));
    match conn.read().expect("a reply") {
        Value::Int(_) => Ok(()),
        other => Err(format!("EVAL transfer: {other:?}")),
    }
}

/// Clients on every core (many connections: SO_REUSEPORT spreads them)
/// transfer between shards in MULTI/EXEC; MGET and MULTI-of-GETs readers
/// must always see the same total.
fn multi_transfers_isolated(port: u16) -> Tally {
    let bank = Bank::open(port, "multi-acct");
    let tally = Tally::default();
    let audit = audit_in_multi(&bank);
    bank.run(port, 12, 800, &transfer_in_multi, &[&audit, &audit], &tally);
    tally
}

/// The same with the transfer in an EVAL script that declares both keys,
/// and a script that sums every account as a further reader.
fn script_transfers_isolated(port: u16) -> Tally {
    let bank = Bank::open(port, "script-acct");
    let tally = Tally::default();
    let audit = audit_in_multi(&bank);
    let sum_by_script = |conn: &mut Raw| {
        let mut cmd = vec!["EVAL".to_string(), SUM_SCRIPT.to_string(), bank.accounts.len().to_string()];
        cmd.extend(bank.accounts.iter().cloned());
        match conn.cmd(&cmd.iter().map(|w| w.as_bytes()).collect::<Vec<_>>()) {
            Value::Int(sum) => Ok(sum),
            other => Err(format!("EVAL sum: {other:?}")),
        }
    };
    bank.run(port, 12, 800, &transfer_in_script, &[&audit, &sum_by_script], &tally);
    tally
}

/// A mover BLMOVEs each element a pusher adds to `a` over to `b`, on
/// another shard (served at once or after blocking, as the race falls).
/// Once the mover has its reply the element is in `b`, and readers asking
/// `MULTI LLEN a LLEN b EXEC` never see the total go down: an element in
/// neither list is a torn move.
fn blmove_never_torn(port: u16) -> Tally {
    let keys = spread_keys("blmove", 1);
    let (a, b) = (keys[0].as_str(), keys[1].as_str());
    let tally = Tally::default();
    Raw::connect(port).cmd_str(&format!("DEL {a} {b}"));
    thread_local!(static LAST_TOTAL: std::cell::Cell<i64> = const { std::cell::Cell::new(0) });
    readers_while(
        port,
        2,
        |mover| {
            let noisy = AtomicBool::new(true);
            thread::scope(|s| {
                // Pipelined writes to keys in `a`'s slot keep its shard's
                // task queue long: work it defers after serving the mover
                // waits behind them.
                for n in 0..3 {
                    let noisy = &noisy;
                    s.spawn(move || {
                        let mut conn = Raw::connect(port);
                        let mut batch = Vec::new();
                        for i in 0..100 {
                            batch.extend(args(&["SET", &format!("{{{a}}}noise{n}:{i}"), "x"]));
                        }
                        while noisy.load(Relaxed) {
                            conn.send(&batch);
                            for _ in 0..100 {
                                conn.read();
                            }
                        }
                    });
                }
                move_rounds(port, mover, (a, b), &tally);
                noisy.store(false, Relaxed);
            });
        },
        |conn| {
            let lens = multi_exec(conn, &[vec!["LLEN", a], vec!["LLEN", b]]);
            tally.round();
            match lens.as_deref() {
                Ok([Value::Int(in_a), Value::Int(in_b)]) => {
                    let total = in_a + in_b;
                    let last = LAST_TOTAL.with(|t| t.replace(total));
                    if total < last {
                        tally.violation(|| format!("LLEN a + LLEN b went from {last} to {total} ({in_a} + {in_b})"));
                    }
                }
                other => tally.unexpected(|| format!("MULTI LLEN: {other:?}")),
            }
        },
    );
    tally
}

/// `blmove_never_torn`'s rounds: push one element, wait for the mover's
/// reply, then look at the end of `b` from a third connection.
fn move_rounds(port: u16, mover: &mut Raw, (a, b): (&str, &str), tally: &Tally) {
    let (mut pusher, mut checker) = (Raw::connect(port), Raw::connect(port));
    let started = Instant::now();
    for round in 0..3000 {
        if started.elapsed() > TIME_CAP {
            break;
        }
        let value = format!("v{round}");
        mover.send(&args(&["BLMOVE", a, b, "LEFT", "RIGHT", "5"]));
        let pushed = pusher.cmd_str(&format!("RPUSH {a} {value}"));
        if pushed != Value::Int(1) {
            tally.unexpected(|| format!("RPUSH: {pushed:?}"));
        }
        let moved = mover.read();
        if moved != Some(Value::Bulk(value.clone().into_bytes())) {
            tally.unexpected(|| format!("BLMOVE: {moved:?}, not {value}"));
        }
        let last = checker.cmd_str(&format!("LINDEX {b} -1"));
        if last != Value::Bulk(value.clone().into_bytes()) {
            tally.violation(|| format!("after BLMOVE replied {value}, {b} ends with {last:?}"));
        }
    }
}

fn corekv() -> Server {
    Server::start(&["--shards", &SHARDS.to_string()])
}

#[test]
fn keys_are_spread_over_distinct_shards() {
    let keys = spread_keys("k", 2);
    let shards: Vec<usize> = keys.iter().map(|k| shard_of(k)).collect();
    assert_eq!(shards, vec![0, 1, 2, 0, 1, 2]);
    // Slot boundaries of `cluster-mode no`: 16384 slots over 3 shards.
    assert_eq!((5461 * SHARDS / SLOTS, 5462 * SHARDS / SLOTS), (0, 1));
}

macro_rules! against_both {
    ($body:ident, $unit:literal, $redis:ident, $corekv:ident) => {
        #[test]
        fn $redis() {
            let redis = Redis::start();
            $body(redis.port).check(concat!(stringify!($body), " (redis-server)"), $unit);
        }

        #[test]
        fn $corekv() {
            let server = corekv();
            $body(server.port).check(concat!(stringify!($body), " (corekv, 3 shards)"), $unit);
        }
    };
}

against_both!(mset_never_torn, "MGET reads", mset_mget_redis, mset_mget_corekv);
against_both!(rename_never_torn, "EXISTS reads", rename_exists_redis, rename_exists_corekv);
against_both!(msetnx_grants_once, "MSETNX rounds", msetnx_race_redis, msetnx_race_corekv);
against_both!(multi_transfers_isolated, "audits", multi_transfers_redis, multi_transfers_corekv);
against_both!(script_transfers_isolated, "audits", script_transfers_redis, script_transfers_corekv);
against_both!(blmove_never_torn, "MULTI LLEN reads", blmove_race_redis, blmove_race_corekv);
