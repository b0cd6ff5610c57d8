//! LMOVE between two shards: LMOVE and RPOPLPUSH themselves (inside the
//! unit their command runs as) and a BLMOVE whose source got data (which
//! takes its own unit, `client.rs`). Both keys are held for the whole
//! move, so no client sees the element in neither list or in both, and the
//! mover's reply leaves only once the element is in its destination.

use super::owner::put_logged;
use crate::coordinator::dispatch::call;
use crate::core::Core;
use shard::commands::list::{lmove_take, lmove_taken};
use shard::commands::Ctx;
use shard::value::Value;
use shard::Reply;
use std::rc::Rc;

/// What a move found.
pub enum Moved {
    /// The element now at the destination.
    Value(Vec<u8>),
    /// The source is missing or empty.
    Empty,
    /// The source or the destination holds another type.
    WrongType,
}

/// One end of a move: its key, its shard and its side (head or tail).
pub struct End {
    pub key: Vec<u8>,
    pub shard: usize,
    pub head: bool,
}

/// Whether `key` on `shard` is missing or a list (a move's destination).
pub async fn list_or_missing(core: &Rc<Core>, db: usize, shard: usize, key: Vec<u8>) -> bool {
    call(core, shard, move |c| {
        matches!(
            c.shard.borrow_mut().dbs[db].peek(&key, shard::unix_ms()).map(|e| &e.value),
            None | Some(Value::List(_))
        )
    })
    .await
        == Some(true)
}

/// Checks both types, takes from `from`, pushes to `to` (putting the
/// element back if the destination changed type in between). The caller
/// holds both keys.
pub async fn move_across(core: &Rc<Core>, db: usize, from: End, to: End) -> Moved {
    let probe = from.key.clone();
    let source = call(core, from.shard, move |c| {
        match c.shard.borrow_mut().dbs[db].peek(&probe, shard::unix_ms()).map(|e| &e.value) {
            None => Some(false),
            Some(Value::List(l)) => Some(!l.is_empty()),
            Some(_) => None,
        }
    })
    .await;
    match source.flatten() {
        None => return Moved::WrongType,
        Some(false) => return Moved::Empty,
        Some(true) => {}
    }
    if !list_or_missing(core, db, to.shard, to.key.clone()).await {
        return Moved::WrongType;
    }
    let (src, from_head) = (from.key.clone(), from.head);
    let taken = call(core, from.shard, move |c| {
        let s = &mut *c.shard.borrow_mut();
        let mut scratch = Vec::new();
        let ctx = &mut Ctx { db, now: shard::unix_ms(), reply: Reply::new(&mut scratch, false) };
        let taken = lmove_take(s, ctx, &src, None, from_head).ok().flatten();
        if taken.is_some() {
            lmove_taken(s, ctx, &src, from_head);
            s.log_key_state(db, &src, ctx.now);
        }
        taken
    })
    .await;
    let Some(Some(value)) = taken else { return Moved::Empty };
    let (v, dst, to_head) = (value.clone(), to.key, to.head);
    let put = call(core, to.shard, move |c| put_logged(&mut c.shard.borrow_mut(), db, &dst, &v, to_head)).await;
    if put != Some(true) {
        let (v, src) = (value, from.key);
        call(core, from.shard, move |c| put_logged(&mut c.shard.borrow_mut(), db, &src, &v, from_head)).await;
        return Moved::WrongType;
    }
    Moved::Value(value)
}
