//! MODULE's table. corekv cannot load Redis's C modules (they are built
//! against redis-server's own memory, objects and event loop), so the
//! proxy (proxy/src/commands/module.rs) answers LIST with no modules and
//! LOAD/LOADEX/UNLOAD with Redis's own errors.

use super::prelude::*;

pub static MODULE_SUBCOMMANDS: &[CommandSpec] = &[
    cmd!("module|help", 2, LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("module|list", 2, ADMIN | NOSCRIPT, NOKEYS, Proxy, None),
    cmd!("module|load", -3, ADMIN | NOSCRIPT | PROTECTED, NOKEYS, Proxy, None),
    cmd!("module|loadex", -3, ADMIN | NOSCRIPT | PROTECTED, NOKEYS, Proxy, None),
    cmd!("module|unload", 3, ADMIN | NOSCRIPT | PROTECTED, NOKEYS, Proxy, None),
];

pub static COMMANDS: &[CommandSpec] = &[cmd!("module", -2, 0, NOKEYS, Proxy, None, MODULE_SUBCOMMANDS)];
