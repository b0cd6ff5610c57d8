//! Commands the proxy implements itself: connection state, server
//! introspection and configuration, and the keyspace commands that need
//! several phases or every shard. One file per family; this file is the
//! dispatcher (only it names the families; they share `reply.rs`).

pub mod acl;
mod bitmap;
pub mod client;
mod cluster;
mod connection;
pub mod debug;
mod gather;
mod geo;
mod hyperloglog;
mod introspection;
mod keys;
mod latency;
mod lcs;
mod list;
mod memory;
pub mod migrate;
mod module;
pub mod monitor;
mod persistence;
pub mod pubsub;
mod replication;
pub mod reply;
mod scripting;
pub mod server;
mod set;
mod slowlog;
mod sort;
mod stats;
mod stream;
pub mod tracking;
pub mod transactions;
mod zset;

use crate::blocking::BlockWait;
use crate::coordinator::{footprint_of, Unit};
use crate::session::{Connection, Deferred};
use shard::commands::set::Op;
use shard::{Args, CommandSpec};

/// Runs a proxy command whose work is local to this connection and core;
/// returns `Deferred` for the ones that need other cores.
pub fn run_now(conn: &mut Connection, spec: &'static CommandSpec, args: Args) -> Option<Deferred> {
    match spec.name {
        "auth" => connection::auth(conn, args),
        "hello" => connection::hello(conn, args),
        "select" => connection::select(conn, args),
        "quit" if in_push_mode(conn) => return Some(Deferred::Command(spec)),
        "quit" => connection::quit(conn),
        "reset" if !conn.state.watched.is_empty() || in_push_mode(conn) => return Some(Deferred::Command(spec)),
        "reset" => {
            pubsub::reset(conn);
            connection::reset(conn)
        }
        "client|caching" => tracking::caching(conn, args),
        "client|getredir" => tracking::getredir(conn),
        "client|trackinginfo" => tracking::trackinginfo(conn),
        "client|id" | "client|getname" | "client|setname" | "client|info" | "client|help" | "client|reply"
        | "client|no-evict" => client::run_now(conn, spec, args),
        "command"
        | "command|count"
        | "command|info"
        | "command|docs"
        | "command|list"
        | "command|getkeys"
        | "command|getkeysandflags"
        | "command|help" => introspection::command(conn, spec, args),
        "config|get" => server::config_get(conn, args),
        "config|rewrite" => server::config_rewrite(conn),
        name if name.starts_with("acl|") => {
            if !acl::run_now(conn, spec, args) {
                return Some(Deferred::Command(spec));
            }
        }
        "readonly" | "readwrite" | "asking" => cluster::flag_command(conn),
        "cluster|countkeysinslot" | "cluster|getkeysinslot" | "cluster|reload" => return Some(Deferred::Command(spec)),
        name if name.starts_with("cluster|") => cluster::run(conn, spec, args),
        "config|help" => server::config_help(conn),
        "slowlog|help" => slowlog::slowlog_help(conn),
        "latency|help" => latency::latency_help(conn),
        _ if scripting::is_script(spec) => return scripting::run_now(conn, spec, args),
        name if name.starts_with("script|") => return scripting::script_now(conn, spec, args),
        name if name.starts_with("function|") => return scripting::function_now(conn, spec, args),
        "bgrewriteaof" => persistence::bgrewriteaof(conn),
        "psync" if replication::is_failover_request(&args) => return Some(Deferred::Command(spec)),
        "psync" | "sync" => replication::sync(conn, args),
        "replconf" => replication::replconf(conn, args),
        "multi" => transactions::multi(conn),
        "sort" | "sort_ro" => return sort::route(conn, spec, args),
        "msetnx" => match conn.owner_of_keys(spec, &args) {
            _ if args.len().is_multiple_of(2) => conn.error(&shard::commands::arity_error("msetnx")),
            Some(shard) if shard == conn.core.index => conn.run_local(spec, args),
            Some(shard) => {
                let (db, resp3) = (conn.state.db, conn.state.resp3);
                conn.pipeline.remote(shard, spec, db, resp3, args.iter())
            }
            None => return Some(Deferred::Command(spec)),
        },
        _ if pubsub::is_pubsub(spec) => return pubsub::run_now(conn, spec, args),
        "memory|help" => memory::help(conn, args.get(0)),
        name if name.starts_with("module|") => module::module(conn, spec, args),
        "pfselftest" => hyperloglog::pfselftest(conn),
        _ => return Some(Deferred::Command(spec)),
    }
    None
}

/// Runs a deferred command; every earlier reply is already in the output.
/// A blocking pop that has to wait returns what the connection waits on.
pub async fn run_deferred(conn: &mut Connection, spec: &'static CommandSpec, args: Args<'_>) -> Option<BlockWait> {
    if pubsub::is_pubsub(spec) {
        pubsub::run_deferred(conn, spec, args).await;
        return None;
    }
    // Keys on several shards: the command runs as one coordinator unit.
    if conn.pipeline.unit.is_none() && !own_unit(spec) {
        let mut footprint = footprint_of(&conn.core, spec, conn.state.db, &args);
        footprint.whole = matches!(spec.route, shard::Route::AllShards(_));
        // MIGRATE waits on the network between its phases: its keys are
        // held even when one shard owns them all.
        let migrate = spec.name == "migrate";
        if footprint.keys.len() > 1 || footprint.whole || (migrate && !footprint.keys.is_empty()) {
            // CLIENT TRACKING: one BCAST message for all the keys it changes.
            let _hold = crate::tracking::hold(&conn.core);
            // Split commands only send batches: the last shard's locks can
            // travel with its batch.
            let unit = match spec.route {
                shard::Route::SplitKeys(_) | shard::Route::AllShards(_) => {
                    let (unit, last) = Unit::acquire_but_last(&conn.core, &footprint).await;
                    conn.pipeline.lock_with = last;
                    unit
                }
                _ => Unit::acquire(&conn.core, &footprint).await,
            };
            let mut unit = unit;
            unit.writes = spec.has_flag(shard::commands::flags::WRITE);
            conn.pipeline.unit = Some(unit.id);
            let blocked = run_deferred_command(conn, spec, args).await;
            conn.pipeline.flush(&conn.core).await;
            conn.pipeline.unit = None;
            conn.pipeline.lock_with = None;
            // MIGRATE's deletes touch WATCH themselves (a COPY touches none).
            let touch = spec.has_flag(shard::commands::flags::WRITE)
                && !matches!(spec.route, shard::Route::SplitKeys(_))
                && !migrate;
            unit.release_touching(touch).await;
            return blocked;
        }
    }
    run_deferred_command(conn, spec, args).await
}

/// CLIENT TRACKING or MONITOR on: RESET, QUIT and the connection's end
/// have other cores to tell.
fn in_push_mode(conn: &Connection) -> bool {
    conn.state.tracking || conn.core.clients.borrow().list.get(conn.state.registry_key).is_some_and(|c| c.monitor)
}

/// Tracking off and MONITOR ended (RESET, QUIT, a closed connection).
pub async fn leave_push_modes(conn: &mut Connection) {
    tracking::disable(conn).await;
    monitor::stop(conn).await;
}

/// Commands that do not run as a unit over their keys: blocking pops wait
/// per key; scripts and functions take their own unit (every shard).
fn own_unit(spec: &CommandSpec) -> bool {
    scripting::is_script(spec)
        || matches!(
            spec.name,
            "blpop"
                | "brpop"
                | "blmove"
                | "brpoplpush"
                | "blmpop"
                | "bzpopmin"
                | "bzpopmax"
                | "bzmpop"
                | "xread"
                | "xreadgroup"
        )
}

async fn run_deferred_command(conn: &mut Connection, spec: &'static CommandSpec, args: Args<'_>) -> Option<BlockWait> {
    match spec.route {
        shard::Route::SplitKeys(merge) => {
            conn.split_by_key(spec, merge, args, spec.keys.2 as usize);
            return None;
        }
        shard::Route::AllShards(merge) => {
            conn.split_all(spec, merge, args);
            return None;
        }
        _ => {}
    }
    match spec.name {
        "blpop" | "brpop" | "blmove" | "brpoplpush" | "blmpop" => return list::blocking(conn, spec.name, args).await,
        "bzpopmin" | "bzpopmax" | "bzmpop" => return zset::blocking(conn, spec.name, args).await,
        "xread" | "xreadgroup" => return stream::xread(conn, spec.name, args).await,
        "lmove" => list::lmove(conn, args, false).await,
        "rpoplpush" => list::lmove(conn, args, true).await,
        "lmpop" => list::lmpop(conn, args).await,
        "info" => server::info(conn, args).await,
        // TEMPORARY (repl-replica helper): the lead's commands/replication.rs takes this over.
        "discard" => transactions::discard(conn).await,
        "watch" => transactions::watch(conn, args).await,
        "unwatch" => transactions::unwatch(conn).await,
        "reset" => {
            transactions::forget_watches(conn).await;
            leave_push_modes(conn).await;
            pubsub::reset(conn);
            connection::reset(conn);
        }
        "quit" => {
            leave_push_modes(conn).await;
            connection::quit(conn);
        }
        "client|tracking" => tracking::tracking(conn, args).await,
        "monitor" => monitor::monitor(conn).await,
        "config|set" => server::config_set(conn, args).await,
        "config|resetstat" => server::config_resetstat(conn).await,
        "slowlog|get" => slowlog::get(conn, args).await,
        "slowlog|len" => slowlog::len(conn).await,
        "slowlog|reset" => slowlog::reset(conn).await,
        "latency|latest" => latency::latest(conn).await,
        "latency|history" => latency::history(conn, args).await,
        "latency|reset" => latency::reset(conn, args).await,
        "latency|graph" => latency::graph(conn, args).await,
        "latency|doctor" => latency::doctor(conn).await,
        "latency|histogram" => latency::histogram(conn, args).await,
        "shutdown" => server::shutdown(conn, args).await,
        "save" => persistence::save(conn).await,
        "bgsave" => persistence::bgsave(conn, args).await,
        "lastsave" => persistence::lastsave(conn),
        "wait" => replication::wait_command(conn, args).await,
        "role" => replication::role(conn).await,
        "replicaof" | "slaveof" => replication::replicaof(conn, args).await,
        "failover" => replication::failover(conn, args).await,
        "psync" => replication::psync_failover(conn, args).await,
        "client|list" => client::list(conn, args).await,
        name if name.starts_with("acl|") => acl::run_deferred(conn, spec, args).await,
        "client|kill" => client::kill(conn, args).await,
        "client|pause" => client::pause(conn, args).await,
        "client|unpause" => client::unpause(conn).await,
        "client|unblock" => client::unblock(conn, args).await,
        "scan" => keys::scan(conn, args).await,
        "cluster|countkeysinslot" | "cluster|getkeysinslot" => cluster::keys_in_slot(conn, spec, args).await,
        "cluster|reload" => cluster::reload(conn).await,
        "randomkey" => keys::randomkey(conn).await,
        "msetnx" => keys::msetnx(conn, args).await,
        "rename" | "renamenx" => keys::rename(conn, args, spec.name == "renamenx").await,
        "copy" => keys::copy(conn, args).await,
        "migrate" => migrate::migrate(conn, args).await,
        "zunion" | "zinter" | "zdiff" | "zintercard" | "zunionstore" | "zinterstore" | "zdiffstore" => {
            zset::setop(conn, spec, args).await
        }
        "zrangestore" => zset::rangestore(conn, args).await,
        "zmpop" => zset::mpop(conn, args).await,
        "georadius" | "georadiusbymember" | "geosearchstore" => geo::store(conn, spec, args).await,
        "sort" | "sort_ro" => sort::run(conn, spec, args).await,
        "lcs" => lcs::lcs(conn, args).await,
        "bitop" => bitmap::bitop(conn, args).await,
        "pfcount" => hyperloglog::pfcount(conn, args).await,
        "pfmerge" => hyperloglog::pfmerge(conn, args).await,
        "debug" => debug::debug(conn, args).await,
        "memory|stats" => memory::stats(conn).await,
        "memory|doctor" => memory::doctor(conn).await,
        "memory|malloc-stats" => memory::malloc_stats(conn).await,
        "memory|purge" => memory::purge(conn).await,
        "sinter" => set::op(conn, args, Op::Inter).await,
        "sunion" => set::op(conn, args, Op::Union).await,
        "sdiff" => set::op(conn, args, Op::Diff).await,
        "sinterstore" => set::store(conn, args, Op::Inter).await,
        "sunionstore" => set::store(conn, args, Op::Union).await,
        "sdiffstore" => set::store(conn, args, Op::Diff).await,
        "sintercard" => set::sintercard(conn, args).await,
        "smove" => set::smove(conn, args).await,
        _ if scripting::is_script(spec) => scripting::run_deferred(conn, spec, args).await,
        name if name.starts_with("script|") => scripting::script_deferred(conn, spec, args).await,
        name if name.starts_with("function|") => scripting::function_deferred(conn, spec, args).await,
        other => conn.error(&format!("ERR command '{other}' is not implemented for this route")),
    }
    None
}
