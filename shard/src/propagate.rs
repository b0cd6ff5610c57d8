//! The log of *effects* of executed writes, in RESP, one per shard: what the
//! AOF appends now and what replicas will be sent. As Redis 7.0 propagates
//! (`alsoPropagate`, `rewriteClientCommandVector`), an effect replays to the
//! same state whatever the clock or the random generator says later:
//! relative expiries become absolute (`SET .. PXAT`, `PEXPIREAT`), `SPOP`
//! becomes `SREM` of what it popped, `INCRBYFLOAT` a `SET .. KEEPTTL` of
//! the result, keys that expired (lazily or by the sweep) a `DEL`, and a
//! `SELECT` precedes an effect in another database. A write that changed
//! nothing (an error, a no-op) is not logged, as Redis's dirty counter
//! decides.
//!
//! Effects are appended to one reusable buffer; the AOF writer takes the
//! buffer once per event-loop batch. Replication has a feed of its own
//! ([`ReplFeed`]): effects cut into items of whole commands, those of a
//! coordinator unit kept apart so the stream can carry the unit as one
//! MULTI/EXEC. When nothing consumes effects the log does not exist and a
//! write costs one branch.

use crate::args::{parse_i64, Args};
use crate::commands::CommandSpec;
use crate::numbers::{format_double, DoubleBuf};
use crate::shard::Shard;
use crate::types::pack::Item;
use crate::value::Value;
use std::collections::HashMap;
use std::task::Waker;

/// Elements per command when a whole value is written out (Redis's
/// `AOF_REWRITE_ITEMS_PER_CMD`).
const ITEMS_PER_CMD: usize = 64;

#[derive(Default)]
pub struct EffectLog {
    /// The AOF takes effects (`buf` fills only then).
    pub aof: bool,
    /// Replicas take effects.
    pub repl: Option<ReplFeed>,
    /// Effects not yet taken by the writer.
    pub buf: Vec<u8>,
    /// Bytes taken from `buf` so far: `taken + buf.len()` is the position of
    /// the log's end in the stream of effects.
    pub taken: u64,
    /// Database of the last effect; `None` until the first, so a log (or a
    /// new AOF file) always starts with a `SELECT`.
    db: Option<usize>,
    /// The writer waiting for effects, woken by the next one.
    pub waker: Option<Waker>,
}

impl EffectLog {
    /// The position of the log's end in the stream of effects.
    pub fn end(&self) -> u64 {
        self.taken + self.buf.len() as u64
    }

    /// Takes every pending effect (for the writer, whose write consumes
    /// the buffer): the next batch starts with room for as much.
    pub fn take(&mut self) -> Vec<u8> {
        let room = self.buf.len().next_power_of_two();
        let bytes = std::mem::replace(&mut self.buf, Vec::with_capacity(room));
        self.taken += bytes.len() as u64;
        bytes
    }

    /// The next effect starts with a `SELECT` (a new file begins).
    pub fn reselect(&mut self) {
        self.db = None;
    }

    fn select(&mut self, db: usize) {
        if self.db != Some(db) {
            let mut n = itoa::Buffer::new();
            put_command(&mut self.buf, &[b"SELECT", n.format(db).as_bytes()]);
            self.db = Some(db);
        }
    }

    fn wake(&mut self) {
        if let Some(w) = self.waker.take() {
            w.wake();
        }
    }

    /// Appends one effect in `db` to each consumer's buffer.
    fn append(&mut self, db: usize, write: impl FnOnce(&mut Vec<u8>)) {
        if self.aof {
            self.select(db);
            let start = self.buf.len();
            write(&mut self.buf);
            self.wake();
            if let Some(feed) = &mut self.repl {
                feed.append(db, |out| out.extend_from_slice(&self.buf[start..]));
            }
        } else if let Some(feed) = &mut self.repl {
            feed.append(db, write);
        }
    }
}

/// One item of a shard's replication feed, in the order the shard made
/// them.
#[derive(Debug)]
pub enum FeedItem {
    /// Whole commands of ordinary writes, starting with a `SELECT`.
    Effects(Vec<u8>),
    /// Whole commands coordinator unit `unit` wrote on this shard.
    UnitPart { unit: u64, bytes: Vec<u8> },
    /// Unit `unit` let go of this shard; it spans `shards` shards.
    UnitEnd { unit: u64, shards: u16 },
    /// A snapshot's cut (`seq`): every shard's items before it happened
    /// before the snapshot, every one after it after.
    Cut(u64),
}

/// A shard's effects on their way to replicas: cut into items of whole
/// commands, at most about `block_size` bytes each, and at every change
/// between ordinary writes and a unit's.
pub struct ReplFeed {
    current: Vec<u8>,
    /// The unit `current` belongs to.
    current_unit: Option<u64>,
    /// The unit the next effect belongs to: the holder of its key.
    unit: Option<u64>,
    /// A copy of this shard's coordinator locks ((db, key) -> unit, or the
    /// whole shard), kept while replicas take effects: an effect on a held
    /// key is the holder's work.
    held: HashMap<usize, HashMap<Vec<u8>, u64, ahash::RandomState>, ahash::RandomState>,
    whole: Option<u64>,
    /// Units that logged effects here since they took their locks.
    wrote: Vec<u64>,
    /// Database of the last effect in `current`.
    db: Option<usize>,
    /// Start of an open MULTI in `current` (a transaction or script running
    /// on this shard alone).
    group: Option<usize>,
    pub items: Vec<FeedItem>,
    pub block_size: usize,
    /// The task that ships items, woken by the next one.
    pub waker: Option<Waker>,
    /// Items made so far (with `items.len()`, the next one's number).
    pub shipped: u64,
}

impl ReplFeed {
    pub fn new(block_size: usize) -> ReplFeed {
        ReplFeed {
            current: Vec::new(),
            current_unit: None,
            unit: None,
            held: HashMap::default(),
            whole: None,
            wrote: Vec::new(),
            db: None,
            group: None,
            items: Vec::new(),
            block_size,
            waker: None,
            shipped: 0,
        }
    }

    /// Unit `unit` took these keys (or the whole shard) here.
    pub fn hold(&mut self, unit: u64, keys: impl Iterator<Item = (usize, Vec<u8>)>, whole: bool) {
        if whole {
            self.whole = Some(unit);
        }
        for (db, key) in keys {
            self.held.entry(db).or_default().insert(key, unit);
        }
    }

    /// Unit `unit`, spanning `shards` shards, let go of this shard: its
    /// work here is done, and the stream may carry it once every shard's
    /// part is in. `shards` 0: a unit that wrote nothing, left unmarked.
    pub fn release(&mut self, unit: u64, shards: u16) {
        if self.whole == Some(unit) {
            self.whole = None;
        }
        for keys in self.held.values_mut() {
            keys.retain(|_, u| *u != unit);
        }
        self.held.retain(|_, keys| !keys.is_empty());
        let wrote = match self.wrote.iter().position(|&u| u == unit) {
            Some(i) => {
                self.wrote.swap_remove(i);
                true
            }
            None => false,
        };
        // A read-only unit that expired a key here still ends its part.
        let shards = if shards == 0 && wrote { 1 } else { shards };
        if shards > 0 {
            self.mark(FeedItem::UnitEnd { unit, shards });
        }
    }

    /// The next effects are about `key` of `db` (none: the whole database).
    pub fn about(&mut self, db: usize, key: Option<&[u8]>) {
        self.unit = self.whole;
        if let (None, Some(key), false) = (self.unit, key, self.held.is_empty()) {
            self.unit = self.held.get(&db).and_then(|keys| keys.get(key)).copied();
        }
    }

    fn append(&mut self, db: usize, write: impl FnOnce(&mut Vec<u8>)) {
        if self.current_unit != self.unit {
            self.close();
            self.current_unit = self.unit;
            if let Some(u) = self.unit.filter(|u| !self.wrote.contains(u)) {
                self.wrote.push(u);
            }
        }
        if self.db != Some(db) {
            let mut n = itoa::Buffer::new();
            put_command(&mut self.current, &[b"SELECT", n.format(db).as_bytes()]);
            self.db = Some(db);
        }
        write(&mut self.current);
        if self.current.len() >= self.block_size && self.group.is_none() {
            self.close();
        }
        if let Some(w) = self.waker.take() {
            w.wake();
        }
    }

    /// Ends the current item (the next one starts with a `SELECT`).
    pub fn close(&mut self) {
        if self.group.is_some() || self.current.is_empty() {
            return;
        }
        // An exact copy, and `current` keeps its room: no chain of
        // reallocations per item.
        let bytes = self.current.to_vec();
        self.current.clear();
        if self.current.capacity() > 4 * self.block_size {
            self.current = Vec::new();
        }
        self.items.push(match self.current_unit {
            None => FeedItem::Effects(bytes),
            Some(unit) => FeedItem::UnitPart { unit, bytes },
        });
        self.db = None;
    }

    /// Appends a marker after everything logged so far.
    pub fn mark(&mut self, item: FeedItem) {
        self.close();
        self.items.push(item);
        if let Some(w) = self.waker.take() {
            w.wake();
        }
    }

    /// A transaction or script on this shard alone begins: what it writes
    /// goes out between MULTI and EXEC, in one item.
    pub fn begin_group(&mut self) {
        if self.group.is_none() {
            self.group = Some(self.current.len());
            put_command(&mut self.current, &[b"MULTI"]);
        }
    }

    /// Ends the group: EXEC after its writes, or nothing when it wrote
    /// nothing.
    pub fn end_group(&mut self) {
        let Some(start) = self.group.take() else { return };
        if self.current.len() == start + b"*1\r\n$5\r\nMULTI\r\n".len() {
            self.current.truncate(start);
        } else {
            put_command(&mut self.current, &[b"EXEC"]);
            if self.current.len() >= self.block_size {
                self.close();
            }
        }
    }

    /// Takes the items made so far (their first number is `shipped`).
    pub fn take(&mut self) -> (u64, Vec<FeedItem>) {
        self.close();
        self.take_closed()
    }

    /// Takes the items already closed, leaving the open one to fill up
    /// (blocks compress better whole).
    pub fn take_closed(&mut self) -> (u64, Vec<FeedItem>) {
        let first = self.shipped;
        let items = std::mem::take(&mut self.items);
        self.shipped += items.len() as u64;
        (first, items)
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty() && (self.current.is_empty() || self.group.is_some())
    }
}

/// `*N\r\n` then each part as a bulk string.
pub fn put_command(out: &mut Vec<u8>, parts: &[&[u8]]) {
    put_header(out, parts.len());
    for p in parts {
        put_bulk(out, p);
    }
}

pub fn put_header(out: &mut Vec<u8>, n: usize) {
    out.push(b'*');
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
    out.extend_from_slice(b"\r\n");
}

pub fn put_bulk(out: &mut Vec<u8>, b: &[u8]) {
    out.push(b'$');
    out.extend_from_slice(itoa::Buffer::new().format(b.len()).as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(b);
    out.extend_from_slice(b"\r\n");
}

impl Shard {
    /// Starts logging effects for the AOF.
    pub fn enable_effects(&mut self) {
        self.effects.get_or_insert_with(Box::default).aof = true;
        for db in &mut self.dbs {
            db.log_expired = true;
        }
    }

    /// Stops logging effects for the AOF (replicas may still take them);
    /// returns the log when nothing takes effects any more.
    pub fn disable_aof_effects(&mut self) -> Option<Box<EffectLog>> {
        let log = self.effects.as_deref_mut()?;
        log.aof = false;
        log.reselect();
        if log.repl.is_some() {
            log.buf.clear();
            return None;
        }
        for db in &mut self.dbs {
            db.log_expired = false;
            db.expired_log.clear();
        }
        self.effects.take()
    }

    /// Starts the replication feed (a replica connected); for good, as
    /// Redis keeps its backlog.
    pub fn enable_repl_feed(&mut self, block_size: usize) -> &mut ReplFeed {
        let log = self.effects.get_or_insert_with(Box::default);
        for db in &mut self.dbs {
            db.log_expired = true;
        }
        log.repl.get_or_insert_with(|| ReplFeed::new(block_size))
    }

    /// The replication feed, when replicas take effects.
    pub fn repl_feed(&mut self) -> Option<&mut ReplFeed> {
        self.effects.as_deref_mut()?.repl.as_mut()
    }

    /// Appends one effect in `db`, after the `DEL`s of keys expired since
    /// the last one (they happened first). No-op when effects are off.
    pub fn log_effect(&mut self, db: usize, parts: &[&[u8]]) {
        self.log_about(db, parts.get(1).copied());
        self.log_with(db, |out| put_command(out, parts));
    }

    /// The next effects concern `key` (for the replication feed's units).
    pub fn log_about(&mut self, db: usize, key: Option<&[u8]>) {
        if let Some(feed) = self.repl_feed() {
            feed.about(db, key);
        }
    }

    /// Like [`Shard::log_effect`] with the RESP written by `write`.
    pub fn log_with(&mut self, db: usize, write: impl FnOnce(&mut Vec<u8>)) {
        self.log_expired_keys();
        let Some(log) = self.effects.as_deref_mut() else { return };
        log.append(db, write);
    }

    /// Writes out keys expired since the last effect as `DEL`s (also called
    /// after an active-expiry tick).
    pub fn log_expired_keys(&mut self) {
        let Some(log) = self.effects.as_deref_mut() else { return };
        // The effect being logged keeps its unit.
        let tag = log.repl.as_ref().map(|f| f.unit);
        for (i, db) in self.dbs.iter_mut().enumerate() {
            if db.expired_log.is_empty() {
                continue;
            }
            for key in db.expired_log.drain(..) {
                if let Some(feed) = &mut log.repl {
                    feed.about(i, Some(&key));
                }
                log.append(i, |out| put_command(out, &[b"DEL", &key]));
            }
        }
        if let (Some(feed), Some(tag)) = (&mut log.repl, tag) {
            feed.unit = tag;
        }
    }

    /// Logs `key`'s whole current state: `DEL`, then the commands that
    /// build its value and its expiry (writes made outside the command
    /// table, e.g. the proxy's cross-shard RENAME, COPY and stores).
    pub fn log_key_state(&mut self, db: usize, key: &[u8], now: u64) {
        if self.effects.is_none() {
            return;
        }
        self.log_about(db, Some(key));
        let mut bytes = Vec::new();
        put_command(&mut bytes, &[b"DEL", key]);
        if let Some(e) = self.dbs[db].find(key, now) {
            write_value(&mut bytes, key, &e.value, e.expire_at());
        }
        self.log_with(db, |out| out.extend_from_slice(&bytes));
    }
}

/// The commands that rebuild `key` holding `value` (with its expiry): what
/// a RESP-form AOF rewrite writes per key.
pub fn write_value(out: &mut Vec<u8>, key: &[u8], value: &Value, expire_at: Option<u64>) {
    let mut ints = itoa::Buffer::new();
    match value {
        Value::Int(_) | Value::Emb(_) | Value::Long(_) | Value::Raw(_) => {
            let bytes = value.string_bytes(&mut ints).unwrap_or_default();
            put_command(out, &[b"SET", key, bytes]);
        }
        Value::List(l) => {
            let mut chunks = Chunks::new(b"RPUSH", key, 1, l.len());
            l.walk(0, false, |item| {
                chunks.next(out);
                put_item(out, item);
                true
            });
        }
        Value::Set(s) => chunked(out, b"SADD", key, 1, s.len(), s.iter(), |out, item| put_item(out, item)),
        Value::Hash(h) => chunked(out, b"HSET", key, 2, h.len(), h.iter(), |out, (f, v)| {
            put_item(out, f);
            put_item(out, v);
        }),
        Value::Stream(s) => write_stream(out, key, s),
        Value::ZSet(z) => {
            let mut pairs = Vec::with_capacity(z.len());
            z.for_each(|score, member| pairs.push((score, member)));
            chunked(out, b"ZADD", key, 2, pairs.len(), pairs.into_iter(), |out, (score, member)| {
                let mut buf: DoubleBuf = [0; 32];
                put_bulk(out, format_double(score, &mut buf));
                put_bulk(out, member);
            });
        }
    }
    if let Some(at) = expire_at {
        put_command(out, &[b"PEXPIREAT", key, ints.format(at).as_bytes()]);
    }
}

/// A stream as the commands that rebuild it (Redis's rewriteStreamObject):
/// its entries, its counters, its groups with their pending entries and
/// consumers.
fn write_stream(out: &mut Vec<u8>, key: &[u8], s: &crate::types::stream::Stream) {
    use crate::types::stream::StreamId;
    let mut n = itoa::Buffer::new();
    let id = |id: StreamId| id.to_bytes();
    if s.is_empty() {
        put_command(out, &[b"XADD", key, b"MAXLEN", b"0", &id(s.last_id), b"x", b"y"]);
    } else {
        s.range(StreamId::MIN, StreamId::MAX, false, |eid, node, e| {
            let fields = node.fields(e);
            put_header(out, 3 + 2 * fields.len());
            put_bulk(out, b"XADD");
            put_bulk(out, key);
            put_bulk(out, &id(eid));
            for (f, v) in fields {
                put_item(out, f);
                put_item(out, v);
            }
            true
        });
    }
    let added = n.format(s.entries_added).to_string();
    put_command(
        out,
        &[b"XSETID", key, &id(s.last_id), b"ENTRIESADDED", added.as_bytes(), b"MAXDELETEDID", &id(s.max_deleted_id)],
    );
    for (name, g) in &s.groups {
        let read = n.format(g.entries_read).to_string();
        put_command(out, &[b"XGROUP", b"CREATE", key, name, &id(g.last_id), b"ENTRIESREAD", read.as_bytes()]);
        for (pid, nack) in &g.pel {
            let consumer = nack.consumer.as_deref().unwrap_or_default();
            let time = n.format(nack.delivery_time).to_string();
            let count = n.format(nack.delivery_count).to_string();
            put_command(
                out,
                &[
                    b"XCLAIM",
                    key,
                    name,
                    consumer,
                    b"0",
                    &id(*pid),
                    b"TIME",
                    time.as_bytes(),
                    b"RETRYCOUNT",
                    count.as_bytes(),
                    b"JUSTID",
                    b"FORCE",
                ],
            );
        }
        for c in g.consumers.values().filter(|c| c.pel.is_empty()) {
            put_command(out, &[b"XGROUP", b"CREATECONSUMER", key, name, &c.name]);
        }
    }
}

fn put_item(out: &mut Vec<u8>, item: Item) {
    put_bulk(out, item.bytes(&mut itoa::Buffer::new()));
}

/// `cmd key e1 e2 ...` in commands of at most [`ITEMS_PER_CMD`] elements,
/// each element `width` arguments; `len` elements in all.
fn chunked<T>(
    out: &mut Vec<u8>,
    cmd: &[u8],
    key: &[u8],
    width: usize,
    len: usize,
    items: impl Iterator<Item = T>,
    mut put: impl FnMut(&mut Vec<u8>, T),
) {
    let mut chunks = Chunks::new(cmd, key, width, len);
    for item in items {
        chunks.next(out);
        put(out, item);
    }
}

/// [`chunked`]'s commands, for values walked with a callback: `next`
/// before each of the `len` items writes a command's header when one is due.
struct Chunks<'a> {
    cmd: &'a [u8],
    key: &'a [u8],
    width: usize,
    left: usize,
    in_cmd: usize,
}

impl<'a> Chunks<'a> {
    fn new(cmd: &'a [u8], key: &'a [u8], width: usize, len: usize) -> Self {
        Chunks { cmd, key, width, left: len, in_cmd: 0 }
    }

    fn next(&mut self, out: &mut Vec<u8>) {
        if self.in_cmd == 0 {
            let n = self.left.min(ITEMS_PER_CMD);
            put_header(out, 2 + n * self.width);
            put_bulk(out, self.cmd);
            put_bulk(out, self.key);
            self.in_cmd = n;
        }
        self.in_cmd -= 1;
        self.left -= 1;
    }
}

/// Called by `commands::execute` after a write command ran (effects on):
/// logs its effect, judged from the arguments and the reply it wrote.
pub fn after_command(shard: &mut Shard, spec: &CommandSpec, db: usize, now: u64, args: &Args, reply: &[u8]) {
    if let Some(feed) = shard.repl_feed() {
        feed.about(db, spec.key_indexes(args).next().map(|i| args.get(i)));
    }
    if reply.first() == Some(&b'-') {
        // An error changed nothing; keys it expired on the way still go out.
        return shard.log_expired_keys();
    }
    // Stream commands log their own effects (XADD's picked ID, XCLAIMs...).
    if spec.name.starts_with('x') {
        return shard.log_expired_keys();
    }
    let no_change = is_zero(reply) || is_nil(reply);
    let key = || args.get(1);
    let mut ints = itoa::Buffer::new();
    match spec.name {
        "set" => {
            if set_skipped(args, reply) {
                return shard.log_expired_keys();
            }
            match set_expiry(args, 3, now) {
                Some(at) => shard.log_effect(db, &[b"SET", key(), args.get(2), b"PXAT", ints.format(at).as_bytes()]),
                // Without the GET option, as Redis propagates it.
                None => shard.log_with(db, |out| {
                    let kept = || args.iter().enumerate().filter(|(i, a)| *i < 3 || !eq(a, "get"));
                    put_header(out, kept().count());
                    for (_, a) in kept() {
                        put_bulk(out, a);
                    }
                }),
            }
        }
        "setex" | "psetex" => {
            let ms = parse_i64(args.get(2)).unwrap_or(0);
            let at = now as i64 + if spec.name == "setex" { ms.saturating_mul(1000) } else { ms };
            shard.log_effect(db, &[b"SET", key(), args.get(3), b"PXAT", ints.format(at).as_bytes()]);
        }
        "getset" => shard.log_effect(db, &[b"SET", key(), args.get(2)]),
        "getdel" if !no_change => shard.log_effect(db, &[b"DEL", key()]),
        "getex" if !no_change => {
            if let Some(at) = set_expiry(args, 2, now) {
                if at <= now {
                    shard.log_effect(db, &[b"DEL", key()]);
                } else {
                    shard.log_effect(db, &[b"PEXPIREAT", key(), ints.format(at).as_bytes()]);
                }
            } else if (2..args.len()).any(|i| args.is(i, "persist")) {
                shard.log_effect(db, &[b"PERSIST", key()]);
            } else {
                shard.log_expired_keys();
            }
        }
        "expire" | "pexpire" | "expireat" | "pexpireat" if !no_change => {
            let n = parse_i64(args.get(2)).unwrap_or(0);
            let ms = if spec.name.starts_with('p') { n } else { n.saturating_mul(1000) };
            let at = if spec.name.ends_with("at") { ms } else { ms.saturating_add(now as i64) };
            if at <= now as i64 {
                shard.log_effect(db, &[b"DEL", key()]);
            } else {
                shard.log_effect(db, &[b"PEXPIREAT", key(), ints.format(at).as_bytes()]);
            }
        }
        "incrbyfloat" => {
            if let Some(v) = bulk(reply) {
                shard.log_effect(db, &[b"SET", key(), v, b"KEEPTTL"]);
            }
        }
        "hincrbyfloat" => {
            if let Some(v) = bulk(reply) {
                shard.log_effect(db, &[b"HSET", key(), args.get(2), v]);
            }
        }
        "spop" if !no_change => {
            let popped = leaves(reply);
            if !popped.is_empty() {
                let mut parts: Vec<&[u8]> = vec![b"SREM", key()];
                parts.extend(popped);
                shard.log_effect(db, &parts);
            } else {
                shard.log_expired_keys();
            }
        }
        // A count or nil reply that means nothing was changed.
        "del" | "unlink" | "expire" | "pexpire" | "expireat" | "pexpireat" | "persist" | "setnx" | "msetnx"
        | "renamenx" | "hdel" | "hsetnx" | "srem" | "smove" | "sadd" | "zrem" | "zremrangebyrank"
        | "zremrangebyscore" | "zremrangebylex" | "lrem" | "lpushx" | "rpushx" | "copy" | "move" | "pfadd"
        | "getdel" | "getex" | "spop" | "lpop" | "rpop" | "lmove" | "rpoplpush" | "lmpop" | "zmpop" | "zpopmin"
        | "zpopmax"
            if no_change || is_empty_array(reply) =>
        {
            shard.log_expired_keys()
        }
        "linsert" if reply == b":-1\r\n" || no_change => shard.log_expired_keys(),
        // Reads unless they STORE; a STORE logs its destination's state
        // itself (geo.rs, sort.rs).
        "georadius" | "georadiusbymember" | "geosearchstore" | "sort" => shard.log_expired_keys(),
        // Every shard runs these; the replicas' one stream needs them once
        // (SWAPDB twice is no swap): shard 0's copy goes there.
        "swapdb" | "flushall" | "flushdb" if shard.index != 0 => {
            shard.log_expired_keys();
            if let Some(log) = shard.effects.as_deref_mut().filter(|log| log.aof) {
                log.select(db);
                put_header(&mut log.buf, args.len());
                for a in args.iter() {
                    put_bulk(&mut log.buf, a);
                }
                log.wake();
            }
        }
        _ => shard.log_with(db, |out| {
            put_header(out, args.len());
            for a in args.iter() {
                put_bulk(out, a);
            }
        }),
    }
}

fn eq(a: &[u8], word: &str) -> bool {
    a.eq_ignore_ascii_case(word.as_bytes())
}

/// Whether a SET did not set (its NX/XX condition failed): the reply says
/// so, also with GET (NX: an old value means it existed; XX: nil means it
/// did not).
fn set_skipped(args: &Args, reply: &[u8]) -> bool {
    let has = |w: &str| (3..args.len()).any(|i| args.is(i, w));
    match (has("get"), has("nx"), has("xx")) {
        (false, _, _) => is_nil(reply),
        (true, true, _) => !is_nil(reply),
        (true, _, true) => is_nil(reply),
        (true, false, false) => false,
    }
}

/// The absolute expiry in ms an EX/PX/EXAT/PXAT option (from argument
/// `from` on) sets, if any. The command already validated it.
fn set_expiry(args: &Args, from: usize, now: u64) -> Option<u64> {
    let mut at = None;
    let mut i = from;
    while i + 1 < args.len() {
        let n = parse_i64(args.get(i + 1));
        let found = match () {
            _ if args.is(i, "ex") => n.map(|s| now as i64 + s.saturating_mul(1000)),
            _ if args.is(i, "px") => n.map(|ms| now as i64 + ms),
            _ if args.is(i, "exat") => n.map(|s| s.saturating_mul(1000)),
            _ if args.is(i, "pxat") => n,
            _ => {
                i += 1;
                continue;
            }
        };
        at = found.map(|t| t.max(0) as u64);
        i += 2;
    }
    at
}

fn is_zero(reply: &[u8]) -> bool {
    reply == b":0\r\n"
}

fn is_nil(reply: &[u8]) -> bool {
    reply == b"$-1\r\n" || reply == b"_\r\n" || reply == b"*-1\r\n"
}

fn is_empty_array(reply: &[u8]) -> bool {
    reply == b"*0\r\n" || reply == b"~0\r\n"
}

/// The payload of a bulk-string reply.
fn bulk(reply: &[u8]) -> Option<&[u8]> {
    let mut r = ReplyReader { buf: reply, pos: 0 };
    r.leaf()
}

/// Every string leaf of a reply (bulk, simple, integer, double), depth first:
/// the members SPOP returned, `[key, element...]` of a blocking pop.
pub fn leaves(reply: &[u8]) -> Vec<&[u8]> {
    let mut r = ReplyReader { buf: reply, pos: 0 };
    let mut out = Vec::new();
    r.collect(&mut out, 0);
    out
}

/// A reader of replies this process encoded itself (so well formed).
struct ReplyReader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> ReplyReader<'a> {
    fn line(&mut self) -> Option<&'a [u8]> {
        let rest = self.buf.get(self.pos..)?;
        let end = rest.windows(2).position(|w| w == b"\r\n")?;
        self.pos += end + 2;
        Some(&rest[..end])
    }

    fn leaf(&mut self) -> Option<&'a [u8]> {
        let line = self.line()?;
        let (&kind, body) = line.split_first()?;
        match kind {
            b'$' | b'=' => {
                let n = parse_i64(body).filter(|&n| n >= 0)? as usize;
                let data = self.buf.get(self.pos..self.pos + n)?;
                self.pos += n + 2;
                Some(data)
            }
            b'+' | b':' | b',' | b'(' => Some(body),
            _ => None,
        }
    }

    fn collect(&mut self, out: &mut Vec<&'a [u8]>, depth: usize) -> Option<()> {
        let &kind = self.buf.get(self.pos)?;
        if matches!(kind, b'*' | b'~' | b'%' | b'>') {
            let line = self.line()?;
            let n = parse_i64(&line[1..])?;
            let n = if kind == b'%' { n * 2 } else { n };
            if depth > 8 {
                return None;
            }
            for _ in 0..n.max(0) {
                self.collect(out, depth + 1)?;
            }
            return Some(());
        }
        if let Some(leaf) = self.leaf() {
            out.push(leaf);
        }
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::{all, execute, resolve, Ctx};
    use crate::config::Config;
    use crate::reply::Reply;

    /// Runs command lines on a shard with effects on; returns the log.
    fn effects(lines: &[&str], now: u64) -> (Shard, String) {
        let mut shard = Shard::new(0, 1, Config::default());
        shard.enable_effects();
        for line in lines {
            run(&mut shard, line, now);
        }
        let log = shard.effects.as_mut().unwrap().take();
        (shard, String::from_utf8(log).unwrap())
    }

    fn run(shard: &mut Shard, line: &str, now: u64) -> Vec<u8> {
        run_in(shard, 0, line, now)
    }

    fn run_in(shard: &mut Shard, db: usize, line: &str, now: u64) -> Vec<u8> {
        let words: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        let mut buf = Vec::new();
        let mut ranges = Vec::new();
        for w in words {
            ranges.push((buf.len() as u32, (buf.len() + w.len()) as u32));
            buf.extend_from_slice(w);
        }
        let args = Args::new(&buf, &ranges);
        let name = String::from_utf8_lossy(args.get(0)).to_lowercase();
        let spec = all().find(|c| c.name == name).unwrap();
        let spec = resolve(spec, &args).unwrap();
        let mut out = Vec::new();
        let mut ctx = Ctx { db, now, reply: Reply::new(&mut out, false) };
        execute(spec, shard, &mut ctx, args);
        out
    }

    /// The log as readable lines: one command per line, arguments spaced.
    fn lines(log: &str) -> Vec<String> {
        let bytes = log.as_bytes();
        let mut r = ReplyReader { buf: bytes, pos: 0 };
        let mut out = Vec::new();
        while r.pos < bytes.len() {
            let mut parts = Vec::new();
            r.collect(&mut parts, 0).unwrap();
            out.push(parts.iter().map(|p| String::from_utf8_lossy(p)).collect::<Vec<_>>().join(" "));
        }
        out
    }

    #[test]
    fn relative_expiries_become_absolute() {
        let now = 1_000_000;
        let (_, log) = effects(
            &[
                "set a 1 EX 10",
                "set b 2 PX 500 NX",
                "setex c 5 v",
                "psetex d 50 v",
                "expire a 100",
                "pexpire a 100",
                "expireat a 2000",
                "getex b PX 7",
                "getex b PERSIST",
                "getex b",
                "set e 1 KEEPTTL GET",
            ],
            now,
        );
        assert_eq!(
            lines(&log),
            vec![
                "SELECT 0",
                "SET a 1 PXAT 1010000",
                "SET b 2 PXAT 1000500",
                "SET c v PXAT 1005000",
                "SET d v PXAT 1000050",
                "PEXPIREAT a 1100000",
                "PEXPIREAT a 1000100",
                "PEXPIREAT a 2000000",
                "PEXPIREAT b 1000007",
                "PERSIST b",
                "set e 1 KEEPTTL",
            ]
        );
    }

    #[test]
    fn no_ops_and_errors_are_not_logged() {
        let (_, log) = effects(
            &[
                "del nothing",
                "set a 1",
                "set a 2 NX",
                "set nx 2 XX",
                "set a 3 NX GET",
                "sadd s x",
                "sadd s x",
                "srem s y",
                "lpop nolist",
                "incr s",
                "expire nothing 10",
                "hdel h f",
                "spop nothing",
                "expire a 10 NX",
                "expire a 20 NX",
            ],
            1000,
        );
        assert_eq!(lines(&log), vec!["SELECT 0", "set a 1", "sadd s x", "PEXPIREAT a 11000"]);
    }

    #[test]
    fn random_and_float_results_are_logged_as_values() {
        let (mut shard, _) = effects(&["sadd s a b c", "set f 1.5", "hset h x 1"], 0);
        run(&mut shard, "spop s", 0);
        run(&mut shard, "spop s 5", 0);
        run(&mut shard, "incrbyfloat f 0.25", 0);
        run(&mut shard, "hincrbyfloat h x 2.5", 0);
        let log = String::from_utf8(shard.effects.as_mut().unwrap().take()).unwrap();
        let l = lines(&log);
        assert!(l[0].starts_with("SREM s "), "{l:?}");
        assert_eq!(l[0].split(' ').count(), 3);
        assert!(l[1].starts_with("SREM s "));
        assert_eq!(l[1].split(' ').count(), 4);
        assert_eq!(&l[2..], ["SET f 1.75 KEEPTTL", "HSET h x 3.5"]);
    }

    #[test]
    fn expired_keys_go_out_as_del_before_the_next_effect() {
        let (mut shard, _) = effects(&["set a 1 PX 10", "set b 1 PX 10"], 0);
        run(&mut shard, "get a", 100);
        run_in(&mut shard, 3, "set c 1", 100);
        shard.active_expire(100);
        let log = String::from_utf8(shard.effects.as_mut().unwrap().take()).unwrap();
        assert_eq!(lines(&log), vec!["DEL a", "SELECT 3", "set c 1", "SELECT 0", "DEL b"]);
    }

    #[test]
    fn values_rebuild_as_commands() {
        let (mut shard, _) = effects(&["rpush l a b 3", "zadd z 1.5 m 2 n", "hset h f v", "sadd s 1 x", "set k v"], 0);
        let mut out = Vec::new();
        for key in ["l", "z", "h", "s", "k"] {
            let e = shard.dbs[0].get(key.as_bytes(), 0).unwrap();
            write_value(&mut out, key.as_bytes(), &e.value, Some(99));
        }
        let l = lines(&String::from_utf8(out).unwrap());
        assert_eq!(l[0], "RPUSH l a b 3");
        assert_eq!(l[1], "PEXPIREAT l 99");
        assert_eq!(l[2], "ZADD z 1.5 m 2 n");
        assert_eq!(l[4], "HSET h f v");
        assert!(l[6] == "SADD s 1 x" || l[6] == "SADD s x 1", "{}", l[6]);
        assert_eq!(l[8], "SET k v");
        let big: Vec<String> = (0..150).map(|i| i.to_string()).collect();
        run(&mut shard, &format!("rpush big {}", big.join(" ")), 0);
        let mut out = Vec::new();
        let e = shard.dbs[0].get(b"big", 0).unwrap();
        write_value(&mut out, b"big", &e.value, None);
        let l = lines(&String::from_utf8(out).unwrap());
        assert_eq!(l.len(), 3);
        assert_eq!(l[2].split(' ').count(), 2 + 150 - 128);
    }

    fn feed_items(shard: &mut Shard) -> Vec<String> {
        let (_, items) = shard.repl_feed().unwrap().take();
        items
            .into_iter()
            .map(|item| match item {
                FeedItem::Effects(b) => lines(&String::from_utf8(b).unwrap()).join("; "),
                FeedItem::UnitPart { unit, bytes } => {
                    format!("U{unit}: {}", lines(&String::from_utf8(bytes).unwrap()).join("; "))
                }
                FeedItem::UnitEnd { unit, shards } => format!("end U{unit}/{shards}"),
                FeedItem::Cut(seq) => format!("cut {seq}"),
            })
            .collect()
    }

    #[test]
    fn the_replication_feed_groups_transactions_and_tags_units() {
        let mut shard = Shard::new(0, 1, Config::default());
        shard.enable_repl_feed(1 << 20);
        run(&mut shard, "set a 1", 0);
        let feed = shard.repl_feed().unwrap();
        feed.begin_group();
        run(&mut shard, "set b 2", 0);
        run(&mut shard, "incr b", 0);
        shard.repl_feed().unwrap().end_group();
        // A group that wrote nothing leaves nothing.
        shard.repl_feed().unwrap().begin_group();
        run(&mut shard, "get a", 0);
        shard.repl_feed().unwrap().end_group();
        assert_eq!(feed_items(&mut shard), ["SELECT 0; set a 1; MULTI; set b 2; incr b; EXEC"]);
        // Unit 7 holds key k: its effects are its part; its release ends it.
        shard.repl_feed().unwrap().hold(7, [(0, b"k".to_vec())].into_iter(), false);
        run(&mut shard, "set k x", 0);
        run(&mut shard, "set other y", 0);
        shard.repl_feed().unwrap().release(7, 2);
        // A read-only unit (released with 0) that wrote still ends its part.
        shard.repl_feed().unwrap().hold(8, [(0, b"r".to_vec())].into_iter(), false);
        run(&mut shard, "set r z", 0);
        shard.repl_feed().unwrap().release(8, 0);
        shard.repl_feed().unwrap().hold(9, std::iter::empty(), true);
        shard.repl_feed().unwrap().release(9, 0);
        assert_eq!(
            feed_items(&mut shard),
            ["U7: SELECT 0; set k x", "SELECT 0; set other y", "end U7/2", "U8: SELECT 0; set r z", "end U8/1"]
        );
    }
}
