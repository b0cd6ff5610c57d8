//! Scripting commands: EVAL and friends, SCRIPT, FUNCTION, FCALL. The proxy
//! runs them (proxy/src/scripting, proxy/src/commands/scripting.rs); keys
//! follow the numkeys argument.

use super::prelude::*;

const SCRIPT_FLAGS: u32 = NOSCRIPT | STALE;

pub static SCRIPT_SUBCOMMANDS: &[CommandSpec] = &[
    cmd!("script|flush", -2, NOSCRIPT, NOKEYS, Proxy, None),
    cmd!("script|debug", 3, NOSCRIPT, NOKEYS, Proxy, None),
    cmd!("script|help", 2, LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("script|exists", -3, NOSCRIPT, NOKEYS, Proxy, None),
    cmd!("script|load", 3, NOSCRIPT | STALE, NOKEYS, Proxy, None),
    cmd!("script|kill", 2, NOSCRIPT, NOKEYS, Proxy, None),
];

pub static FUNCTION_SUBCOMMANDS: &[CommandSpec] = &[
    cmd!("function|restore", -3, WRITE | DENYOOM | NOSCRIPT, NOKEYS, Proxy, None),
    cmd!("function|list", -2, NOSCRIPT, NOKEYS, Proxy, None),
    cmd!("function|dump", 2, NOSCRIPT, NOKEYS, Proxy, None),
    cmd!("function|load", -3, WRITE | DENYOOM | NOSCRIPT, NOKEYS, Proxy, None),
    cmd!("function|flush", -2, WRITE | NOSCRIPT, NOKEYS, Proxy, None),
    cmd!("function|delete", 3, WRITE | NOSCRIPT, NOKEYS, Proxy, None),
    cmd!("function|help", 2, LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("function|kill", 2, NOSCRIPT, NOKEYS, Proxy, None),
    cmd!("function|stats", 2, NOSCRIPT, NOKEYS, Proxy, None),
];

pub static COMMANDS: &[CommandSpec] = &[
    cmd!("eval", -3, SCRIPT_FLAGS, NOKEYS, Proxy, None).with_keynum(2, 3),
    cmd!("evalsha", -3, SCRIPT_FLAGS, NOKEYS, Proxy, None).with_keynum(2, 3),
    cmd!("eval_ro", -3, READONLY | SCRIPT_FLAGS, NOKEYS, Proxy, None).with_keynum(2, 3),
    cmd!("evalsha_ro", -3, READONLY | SCRIPT_FLAGS, NOKEYS, Proxy, None).with_keynum(2, 3),
    cmd!("fcall", -3, SCRIPT_FLAGS, NOKEYS, Proxy, None).with_keynum(2, 3),
    cmd!("fcall_ro", -3, READONLY | SCRIPT_FLAGS, NOKEYS, Proxy, None).with_keynum(2, 3),
    cmd!("script", -2, 0, NOKEYS, Proxy, None, SCRIPT_SUBCOMMANDS),
    cmd!("function", -2, 0, NOKEYS, Proxy, None, FUNCTION_SUBCOMMANDS),
];
