//! Pub/Sub: table entries only. The proxy runs them
//! (`proxy/src/commands/pubsub.rs`, `proxy/src/pubsub/`): subscribers are
//! connections, which the shard knows nothing of.

use super::prelude::*;

/// Shard channels take the place of keys (slot, MOVED, CROSSSLOT).
const CHANNELS: (i32, i32, i32) = (1, -1, 1);

pub static PUBSUB_SUBCOMMANDS: &[CommandSpec] = &[
    cmd!("pubsub|channels", -2, LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("pubsub|help", 2, LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("pubsub|numpat", 2, LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("pubsub|numsub", -2, LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("pubsub|shardchannels", -2, LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("pubsub|shardnumsub", -2, LOADING | STALE, NOKEYS, Proxy, None),
];

pub static COMMANDS: &[CommandSpec] = &[
    cmd!("publish", 3, LOADING | STALE | FAST, NOKEYS, Proxy, None),
    cmd!("subscribe", -2, NOSCRIPT | LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("unsubscribe", -1, NOSCRIPT | LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("psubscribe", -2, NOSCRIPT | LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("punsubscribe", -1, NOSCRIPT | LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("spublish", 3, LOADING | STALE | FAST, KEY1, Proxy, None),
    cmd!("ssubscribe", -2, NOSCRIPT | LOADING | STALE, CHANNELS, Proxy, None),
    cmd!("sunsubscribe", -1, NOSCRIPT | LOADING | STALE, CHANNELS, Proxy, None),
    cmd!("pubsub", -2, 0, NOKEYS, Proxy, None, PUBSUB_SUBCOMMANDS),
];
