//! DEBUG: the subcommands operators and test suites use, with Redis 7.0's
//! replies and errors (debug.c), and the `enable-*-command` check of Redis's
//! protected commands (DEBUG, MODULE LOAD/LOADEX/UNLOAD). What reads data
//! runs on the keys' owners (shard/src/commands/debug.rs); what must see or
//! change the whole dataset at one instant (DIGEST, RELOAD, POPULATE) holds
//! every shard as one coordinator unit, as Redis's single thread would.

use super::reply::reply;
use crate::coordinator::dispatch::{call, call_all};
use crate::coordinator::{Footprint, Unit};
use crate::core::Core;
use crate::log;
use crate::persistence::{self, load::Dump, SaveError};
use crate::session::Connection;
use shard::args::atoi;
use shard::commands::debug::{self as shard_debug, Digest};
use shard::commands::flags;
use shard::config::Protected;
use shard::{Args, CommandSpec};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

/// Redis's rejection of a protected command its setting does not allow
/// (processCommand, before the AUTH check).
pub fn protected_refusal(conn: &Connection, spec: &CommandSpec) -> Option<String> {
    if !spec.has_flag(flags::PROTECTED) {
        return None;
    }
    let debug = spec.name == "debug";
    let setting = {
        let config = conn.core.config();
        if debug {
            config.enable_debug_command
        } else {
            config.enable_module_command
        }
    };
    let local = || {
        let clients = conn.core.clients.borrow();
        clients.list.get(conn.state.registry_key).is_some_and(|c| crate::acl::protected::is_local(c.addr))
    };
    let allowed = match setting {
        Protected::Yes => true,
        Protected::Local => local(),
        Protected::No => false,
    };
    let (cmd, option) = if debug { ("DEBUG", "enable-debug-command") } else { ("MODULE", "enable-module-command") };
    (!allowed).then(|| {
        format!("ERR {cmd} command not allowed. If the {option} option is set to \"local\", you can run it from a local connection, otherwise you need to set this option in the configuration file, and then restart the server.")
    })
}

/// Redis's addReplyHelp: the header, the lines, HELP's own two lines.
pub fn help_reply(conn: &mut Connection, command: &[u8], lines: &[&str]) {
    let header = format!(
        "{} <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        String::from_utf8_lossy(command).to_uppercase()
    );
    reply(conn, |r| {
        r.array(lines.len() + 3);
        r.simple(&header);
        lines.iter().for_each(|l| r.simple(l));
        r.simple("HELP");
        r.simple("    Prints this help.");
    });
}

/// Redis's addReplySubcommandSyntaxError.
pub fn subcommand_error(conn: &mut Connection, args: &Args) {
    let sub = args.get(1);
    let msg = format!(
        "ERR unknown subcommand or wrong number of arguments for '{}'. Try {} HELP.",
        String::from_utf8_lossy(&sub[..sub.len().min(128)]),
        String::from_utf8_lossy(args.get(0)).to_uppercase()
    );
    conn.error(&msg);
}

/// The subcommands corekv implements, in Redis's words (but where corekv
/// does otherwise).
const HELP: &[&str] = &[
    "CHANGE-REPL-ID",
    "    Change the replication IDs of the instance.",
    "    Dangerous: should be used only for testing the replication subsystem.",
    "DIGEST",
    "    Output a hex signature representing the current DB content.",
    "DIGEST-VALUE <key> [<key> ...]",
    "    Output a hex signature of the values of all the specified keys.",
    "ERROR <string>",
    "    Return a Redis protocol error with <string> as message. Useful for clients",
    "    unit tests to simulate Redis errors.",
    "LOG <message>",
    "    Write <message> to the server log.",
    "OBJECT <key>",
    "    Show low level info about `key` and associated value.",
    "POPULATE <count> [<prefix>] [<size>]",
    "    Create <count> string keys named key:<num>. If <prefix> is specified then",
    "    it is used instead of the 'key' prefix. These are not propagated to",
    "    replicas. Cluster slots are not respected so keys not belonging to the",
    "    current node can be created in cluster mode.",
    "PROTOCOL <type>",
    "    Reply with a test value of the specified type. <type> can be: string,",
    "    integer, double, bignum, null, array, set, map, attrib, push, verbatim,",
    "    true, false.",
    "RELOAD [option ...]",
    "    Save the RDB on disk and reload it back to memory. Valid <option> values:",
    "    * MERGE: conflicting keys will be loaded from RDB.",
    "    * NOFLUSH: the existing database will not be removed before load, but",
    "      conflicting keys will make the load fail (Redis kills the server).",
    "    * NOSAVE: the database will be loaded from an existing RDB file.",
    "    Examples:",
    "    * DEBUG RELOAD: verify that the server is able to persist, flush and reload",
    "      the database.",
    "    * DEBUG RELOAD NOSAVE: replace the current database with the contents of an",
    "      existing RDB file.",
    "    * DEBUG RELOAD NOSAVE NOFLUSH MERGE: add the contents of an existing RDB",
    "      file to the database.",
    "SET-ACTIVE-EXPIRE <0|1>",
    "    Setting it to 0 disables expiring keys in background when they are not",
    "    accessed (otherwise the Redis behavior). Setting it to 1 reenables back the",
    "    default.",
    "SLEEP <seconds>",
    "    Stop the server for <seconds>. Decimals allowed.",
];

pub async fn debug(conn: &mut Connection, args: Args<'_>) {
    let sub = String::from_utf8_lossy(args.get(1)).to_ascii_lowercase();
    match (sub.as_str(), args.len()) {
        ("help", 2) => help_reply(conn, args.get(0), HELP),
        ("sleep", 3) => sleep(conn, args.get(2)),
        ("object", 3) => object(conn, args.get(2)).await,
        ("reload", _) => reload(conn, &args).await,
        ("set-active-expire", 3) => {
            let on = atoi(args.get(2)) != 0;
            call_all(&conn.core, move |c| c.shard.borrow_mut().active_expire_enabled = on).await;
            reply(conn, |r| r.ok());
        }
        ("digest", 2) => digest(conn).await,
        ("digest-value", _) => digest_value(conn, &args).await,
        ("change-repl-id", 2) => change_repl_id(conn).await,
        ("protocol", 3) => protocol(conn, args.get(2)),
        ("log", 3) => {
            log::warning(&format!("DEBUG LOG: {}", String::from_utf8_lossy(args.get(2))));
            reply(conn, |r| r.ok());
        }
        // The argument is the whole error line ("-" added; newlines become
        // spaces).
        ("error", 3) => conn.error(&String::from_utf8_lossy(args.get(2))),
        ("populate", 3..=5) => populate(conn, &args).await,
        _ => subcommand_error(conn, &args),
    }
}

/// C's strtod on the argument: its longest numeric prefix, 0 for none.
fn strtod(s: &[u8]) -> f64 {
    let s = std::str::from_utf8(s).unwrap_or("").trim_start();
    let s = &s[..s.len().min(64)];
    (1..=s.len()).rev().find_map(|n| s.get(..n).and_then(|p| p.parse::<f64>().ok())).unwrap_or(0.0)
}

/// DEBUG SLEEP: the connection's core stops for that long, as Redis's one
/// thread does (its other clients, and other cores' requests for its
/// shard, wait).
fn sleep(conn: &mut Connection, arg: &[u8]) {
    let micros = strtod(arg) * 1e6;
    if micros >= 1.0 {
        std::thread::sleep(Duration::from_micros(micros.min(u64::MAX as f64) as u64));
    }
    reply(conn, |r| r.ok());
}

async fn object(conn: &mut Connection, key: &[u8]) {
    let (db, owner, key) = (conn.state.db, conn.core.shard_of(key), key.to_vec());
    let line = call(&conn.core, owner, move |c| {
        let now = shard::unix_ms();
        shard_debug::object_line(&c.shard.borrow(), db, &key, now)
    })
    .await
    .flatten();
    match line {
        Some(line) => reply(conn, |r| r.simple(&line)),
        None => conn.error(shard::reply::errors::NO_SUCH_KEY),
    }
}

/// Every shard held as one unit for work that must see one instant (none
/// taken inside EXEC, whose unit holds every shard already: transactions.rs
/// counts DEBUG as whole).
async fn hold_all(conn: &Connection) -> Option<Unit> {
    if conn.pipeline.unit.is_some() {
        return None;
    }
    let whole = Footprint { keys: Vec::new(), whole: true };
    Some(Unit::acquire(&conn.core, &whole).await)
}

async fn release(unit: Option<Unit>) {
    if let Some(u) = unit {
        u.release().await;
    }
}

/// DEBUG DIGEST over every shard; on a per-core node port, over that
/// node's shard (as DBSIZE there).
async fn digest(conn: &mut Connection) {
    let parts: Vec<Vec<(usize, Digest)>> = if conn.state.shard_port {
        vec![shard_debug::dataset_digests(&conn.core.shard.borrow())]
    } else {
        let unit = hold_all(conn).await;
        let parts = call_all(&conn.core, |c| shard_debug::dataset_digests(&c.shard.borrow())).await;
        release(unit).await;
        parts.into_iter().flatten().collect()
    };
    let hex = shard_debug::hex(&shard_debug::combine_digests(&parts));
    reply(conn, |r| r.simple(&hex));
}

async fn digest_value(conn: &mut Connection, args: &Args<'_>) {
    let db = conn.state.db;
    let unit = hold_all(conn).await;
    let mut digests = Vec::with_capacity(args.len() - 2);
    for key in args.iter().skip(2) {
        let (owner, key) = (conn.core.shard_of(key), key.to_vec());
        let d = call(&conn.core, owner, move |c| shard_debug::value_digest(&c.shard.borrow().dbs[db], &key)).await;
        digests.push(shard_debug::hex(&d.unwrap_or_default()));
    }
    release(unit).await;
    reply(conn, |r| {
        r.array(digests.len());
        digests.iter().for_each(|d| r.simple(d));
    });
}

/// Redis's changeReplicationId and clearReplicationId2 on core 0, which
/// holds the replication state.
async fn change_repl_id(conn: &mut Connection) {
    log::warning("Changing replication IDs after receiving DEBUG change-repl-id");
    let new_id = crate::core::random_id();
    call(&conn.core, crate::replication::hub::HUB, move |c| {
        *c.repl.replid.borrow_mut() = Some(new_id.clone());
        if let Some(p) = c.repl.primary.borrow_mut().as_mut() {
            p.replid = new_id.clone();
            p.replid2 = "0".repeat(40);
            p.second_offset = -1;
        }
        let mut link = c.repl.replica.link.borrow_mut();
        if link.synced {
            // A replica's id is its primary's: the next sync is a full one.
            link.replid = new_id;
        }
    })
    .await;
    reply(conn, |r| r.ok());
}

/// DEBUG PROTOCOL: one sample of each RESP3 type (RESP2's equivalent in
/// RESP2), as client test suites expect.
fn protocol(conn: &mut Connection, name: &[u8]) {
    let name = String::from_utf8_lossy(name).to_ascii_lowercase();
    let resp3 = conn.state.resp3;
    if name == "push" && !resp3 {
        return conn.error("ERR RESP2 is not supported by this command");
    }
    let known = matches!(
        name.as_str(),
        "string"
            | "integer"
            | "double"
            | "bignum"
            | "null"
            | "array"
            | "set"
            | "map"
            | "attrib"
            | "push"
            | "verbatim"
            | "true"
            | "false"
    );
    if !known {
        return conn.error("ERR Wrong protocol type name. Please use one of the following: string|integer|double|bignum|null|array|set|map|attrib|push|verbatim|true|false");
    }
    reply(conn, |r| match name.as_str() {
        "string" => r.bulk(b"Hello World"),
        "integer" => r.int(12345),
        // Redis's sample value, not PI.
        #[allow(clippy::approx_constant)]
        "double" => shard::commands::zset::reply_score(r, 3.141),
        "bignum" if resp3 => r.raw(b"(1234567999999999999999999999999999999\r\n"),
        "bignum" => r.bulk(b"1234567999999999999999999999999999999"),
        "null" => r.null(),
        "array" | "set" => {
            if name == "set" {
                r.set(3)
            } else {
                r.array(3)
            }
            (0..3).for_each(|j| r.int(j));
        }
        "map" => {
            r.map(3);
            for j in 0..3 {
                r.int(j);
                r.bool(j == 1);
            }
        }
        "attrib" => {
            if resp3 {
                r.raw(b"|1\r\n");
                r.bulk(b"key-popularity");
                r.array(2);
                r.bulk(b"key:123");
                r.int(90);
            }
            r.bulk(b"Some real reply following the attribute");
        }
        "push" => {
            r.raw(b">2\r\n");
            r.bulk(b"server-cpu-usage");
            r.int(42);
            r.bulk(b"Some real reply following the push reply");
        }
        "verbatim" => r.verbatim(b"This is a verbatim\nstring"),
        _ => r.bool(name == "true"),
    });
}

/// DEBUG POPULATE count [prefix] [size]: each shard creates the keys it
/// owns (keys of slots no shard here owns go to shard 0), under one unit.
async fn populate(conn: &mut Connection, args: &Args<'_>) {
    const RANGE: &str = "ERR value is out of range, must be positive";
    let positive = |i: usize| shard::args::parse_i64(args.get(i)).filter(|n| *n >= 0);
    let Some(count) = positive(2) else { return conn.error(RANGE) };
    let size = match args.len() {
        5 => match positive(4) {
            Some(0) => None,
            Some(n) => Some(n as usize),
            None => return conn.error(RANGE),
        },
        _ => None,
    };
    let prefix = if args.len() >= 4 { args.get(3).to_vec() } else { b"key".to_vec() };
    let db = conn.state.db;
    let unit = hold_all(conn).await;
    call_all(&conn.core, move |c| {
        let owns =
            |key: &[u8]| c.count == 1 || c.cluster().local_shard(crate::slot::key_slot(key)).unwrap_or(0) == c.index;
        let now = shard::unix_ms();
        shard_debug::populate(&mut c.shard.borrow_mut(), db, count as u64, &prefix, size, now, owns);
    })
    .await;
    release(unit).await;
    reply(conn, |r| r.ok());
}

/// DEBUG RELOAD [MERGE] [NOFLUSH] [NOSAVE]: saves the RDB file (unless
/// NOSAVE), empties every shard (unless NOFLUSH) and loads the file back
/// into every shard, all while every shard is held: nothing runs between
/// the save and the load. Neither the flush nor the load is propagated.
async fn reload(conn: &mut Connection, args: &Args<'_>) {
    let (mut merge, mut flush, mut save) = (false, true, true);
    for opt in args.iter().skip(2) {
        match opt.to_ascii_lowercase().as_slice() {
            b"merge" => merge = true,
            b"noflush" => flush = false,
            b"nosave" => save = false,
            _ => return conn.error("ERR DEBUG RELOAD only supports the MERGE, NOFLUSH and NOSAVE options."),
        }
    }
    let mut unit = hold_all(conn).await;
    if save {
        loop {
            match persistence::save_holding_all(&conn.core).await {
                Ok(()) => break,
                // Another save or a rewrite holds the save lock and may be
                // waiting for these shards: let go, wait, take them again.
                Err(SaveError::InProgress | SaveError::Rewriting) if unit.is_some() => {
                    release(unit.take()).await;
                    glommio::timer::sleep(Duration::from_millis(10)).await;
                    unit = hold_all(conn).await;
                }
                Err(_) => {
                    release(unit).await;
                    return conn.error("ERR");
                }
            }
        }
    }
    let result = load_everywhere(&conn.core, flush, merge).await;
    release(unit).await;
    match result {
        Ok(()) => {
            log::warning("DB reloaded by DEBUG RELOAD");
            reply(conn, |r| r.ok());
        }
        Err(e) => {
            log::warning(&format!("DEBUG RELOAD: {e}"));
            conn.error("ERR Error trying to load the RDB dump");
        }
    }
}

async fn load_everywhere(core: &Rc<Core>, flush: bool, merge: bool) -> Result<(), String> {
    let path = {
        let c = core.config();
        std::path::Path::new(&c.dir).join(&c.dbfilename)
    };
    if flush {
        call_all(core, |c| c.shard.borrow_mut().dbs.iter_mut().for_each(|db| db.clear())).await;
    }
    let dump = Arc::new(Dump::open(&path)?.ok_or_else(|| format!("{}: No such file or directory", path.display()))?);
    let results = call_all(core, move |c| {
        let replica = crate::replication::replica::is_replica(c);
        persistence::load::reload(c, &dump, merge, replica)
    })
    .await;
    results.into_iter().try_for_each(|r| r.unwrap_or_else(|| Err("a shard is shutting down".into())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c_number_prefixes() {
        assert_eq!(atoi(b" 12x"), 12);
        assert_eq!(atoi(b"-3"), -3);
        assert_eq!(atoi(b"abc"), 0);
        assert_eq!(strtod(b"0.5s"), 0.5);
        assert_eq!(strtod(b"x"), 0.0);
        assert_eq!(strtod(b"1e-3"), 0.001);
    }
}
