//! Warms the cache for the keys of the commands a connection has waiting,
//! before they run. A GET's lookup misses the cache three or four times in
//! a row (the index, the entry, the value), and a pipelined batch ran those
//! chains one command after another: over half of a shard's user time at
//! pipeline 16. Looked up back to back, the chains of different keys
//! overlap. A guess, never a result: each command's first argument is
//! taken for its key, in the connection's database. The owner of a batch
//! another core sent does the same for its commands (`batch`).

use crate::core::Core;
use crate::mesh::Batch;
use shard::db::Db;
use shard::Shard;

/// Commands looked ahead at once: enough to overlap the misses, few
/// enough that their lines are still cached when the commands run.
const AHEAD: usize = 16;

/// Commands with more arguments end the look-ahead.
const MAX_ARGS: usize = 64;

/// Looks up the keys of the complete commands in `buf` from `from`, when
/// two or more of them are this shard's (one alone only moves its misses).
/// Returns where to look again: past the commands seen, or the end of
/// `buf` when there were none.
pub fn ahead(core: &Core, db: usize, buf: &[u8], from: usize) -> usize {
    let mut keys: [&[u8]; AHEAD] = [&[]; AHEAD];
    let (mut n, mut at) = (0, from);
    while n < AHEAD {
        let Some((key, len)) = buf.get(at..).and_then(command) else { break };
        if let Some(key) = key {
            keys[n] = key;
            n += 1;
        }
        at += len;
    }
    if n >= 2 {
        if let Ok(shard) = core.shard.try_borrow() {
            if let Some(db) = shard.dbs.get(db) {
                prefetch_owned(core, db, &mut keys[..n]);
            }
        }
    }
    if at == from {
        buf.len()
    } else {
        at
    }
}

/// Databases smaller than this are taken to be cached already: looking
/// ahead would only do each lookup twice.
const RECEIVED_MIN_KEYS: usize = 1 << 16;

/// The keys of the first commands that one reap of the client ring
/// received on several connections (`Ring::on_input`), looked up before
/// any of those connections runs, so the lookups of different
/// connections overlap their misses as a pipelined batch's do. A guess
/// as `ahead` is, in database 0 (a connection's own is not known here).
pub fn received(core: &Core, inputs: &[&[u8]]) {
    let Ok(shard) = core.shard.try_borrow() else { return };
    let Some(db) = shard.dbs.first().filter(|db| db.len() >= RECEIVED_MIN_KEYS) else { return };
    let mut keys: [&[u8]; AHEAD] = [&[]; AHEAD];
    let mut n = 0;
    for input in inputs.iter().take(AHEAD) {
        if let Some((Some(key), _)) = command(input) {
            keys[n] = key;
            n += 1;
        }
    }
    prefetch_owned(core, db, &mut keys[..n]);
}

/// Looks up the `keys` this shard owns ahead, when two or more are (one
/// alone only moves its misses); `keys` is reordered.
fn prefetch_owned(core: &Core, db: &Db, keys: &mut [&[u8]]) {
    let mut local = 0;
    for i in 0..keys.len() {
        if core.shard_of(keys[i]) == core.index {
            keys[local] = keys[i];
            local += 1;
        }
    }
    if local >= 2 {
        db.prefetch(&keys[..local]);
    }
}

/// The keys of ops `from..` of a batch another core sent, up to `AHEAD`
/// of them in the first one's database (each op's first key). Returns
/// where to look again.
pub fn batch(shard: &Shard, batch: &Batch, from: usize) -> usize {
    let ops = &batch.ops[from..batch.ops.len().min(from + AHEAD)];
    let Some(db) = ops.first().and_then(|op| shard.dbs.get(op.db as usize)) else {
        return batch.ops.len();
    };
    let mut keys: [&[u8]; AHEAD] = [&[]; AHEAD];
    let mut n = 0;
    for op in ops {
        let first = op.spec.keys.0;
        let args = batch.args(op);
        if op.db == ops[0].db && first > 0 && (first as usize) < args.len() {
            keys[n] = args.get(first as usize);
            n += 1;
        }
    }
    if n >= 2 {
        db.prefetch(&keys[..n]);
    }
    from + ops.len()
}

/// The complete RESP array at the start of `input`: its first argument
/// (if it has one) and its length. `None` when it is incomplete, not an
/// array (inline commands are not looked ahead) or longer than
/// `MAX_ARGS`: a walk costs at most that many headers, however slowly a
/// huge command arrives.
fn command(input: &[u8]) -> Option<(Option<&[u8]>, usize)> {
    let (count, mut at) = header(input, 0, b'*')?;
    if count > MAX_ARGS {
        return None;
    }
    let mut key = None;
    for i in 0..count {
        let (len, start) = header(input, at, b'$')?;
        let end = start.checked_add(len)?;
        if input.get(end..end + 2)? != b"\r\n" {
            return None;
        }
        if i == 1 {
            key = Some(&input[start..end]);
        }
        at = end + 2;
    }
    Some((key, at))
}

/// `<mark><digits>\r\n` at `at`: the number and where what follows starts.
fn header(input: &[u8], at: usize, mark: u8) -> Option<(usize, usize)> {
    if *input.get(at)? != mark {
        return None;
    }
    let mut n = 0usize;
    for i in at + 1..(at + 12).min(input.len()) {
        match input[i] {
            b'0'..=b'9' => n = n * 10 + usize::from(input[i] - b'0'),
            b'\r' if i > at + 1 && input.get(i + 1) == Some(&b'\n') => return Some((n, i + 2)),
            _ => return None,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::command;

    #[test]
    fn finds_each_command_and_its_key() {
        let two = b"*2\r\n$3\r\nGET\r\n$5\r\nhello\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n";
        let (key, len) = command(two).unwrap();
        assert_eq!((key, len), (Some(&b"hello"[..]), 24));
        assert_eq!(command(&two[len..]), Some((Some(&b"k"[..]), two.len() - len)));
        assert_eq!(command(b"*1\r\n$4\r\nPING\r\n"), Some((None, 14)));
    }

    #[test]
    fn gives_up_on_anything_else() {
        for input in [
            &b"GET hello\r\n"[..],
            b"*2\r\n$3\r\nGET\r\n$5\r\nhel",
            b"*2\r\n$3\r\nGET\r\n$5\r\nhelloXX",
            b"*2\r\n$3\r\nGET\r\n$99999999999\r\n",
            b"*2\r\n$\r\n",
            b"*2\r",
            b"*99999999999999\r\n",
            b"",
        ] {
            assert_eq!(command(input), None, "{input:?}");
        }
    }

    proptest::proptest! {
        /// Any bytes: no panic, and a command found lies within them.
        #[test]
        fn any_bytes(input in proptest::collection::vec(proptest::num::u8::ANY, 0..64)) {
            if let Some((_, len)) = command(&input) {
                proptest::prop_assert!(len <= input.len());
            }
        }

        /// An encoded command, whole or cut short.
        #[test]
        fn encoded(args in proptest::collection::vec(proptest::collection::vec(proptest::num::u8::ANY, 0..20), 1..5), cut in 0usize..200) {
            let mut wire = format!("*{}\r\n", args.len()).into_bytes();
            for a in &args {
                wire.extend(format!("${}\r\n", a.len()).bytes());
                wire.extend(a);
                wire.extend(b"\r\n");
            }
            let whole = command(&wire);
            proptest::prop_assert_eq!(whole, Some((args.get(1).map(|k| &k[..]), wire.len())));
            if cut < wire.len() {
                proptest::prop_assert_eq!(command(&wire[..cut]), None);
            }
        }
    }
}
