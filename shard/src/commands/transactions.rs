//! MULTI / EXEC / DISCARD / WATCH / UNWATCH: table entries only. The proxy
//! runs them (`proxy/src/commands/transactions.rs`) on its coordinator.

use super::prelude::*;

pub static COMMANDS: &[CommandSpec] = &[
    cmd!("multi", 1, NOSCRIPT | LOADING | STALE | FAST, NOKEYS, Proxy, None),
    cmd!("exec", 1, NOSCRIPT | LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("discard", 1, NOSCRIPT | LOADING | STALE | FAST, NOKEYS, Proxy, None),
    cmd!("watch", -2, NOSCRIPT | LOADING | STALE | FAST, ALLKEYS, Proxy, None),
    cmd!("unwatch", 1, NOSCRIPT | LOADING | STALE | FAST, NOKEYS, Proxy, None),
];
