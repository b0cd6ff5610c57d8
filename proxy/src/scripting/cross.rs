//! A script's command whose keys live on another shard than the one the
//! script runs on. A script declared on one shard runs there with no lock;
//! the first time it reaches another shard, before it has written, it
//! stops and the caller runs it again holding every shard as one
//! coordinator unit (`Placement::Whole`). Under that unit nothing else runs
//! anywhere, so the script may call into other cores synchronously
//! (`coordinator::dispatch::call_blocking`): no core can be waiting for this one.

use super::context::{flatten, CallState};
use crate::coordinator::dispatch::call_blocking;
use crate::core::Core;
use shard::commands::{execute, Ctx};
use shard::db::Ttl;
use shard::{Args, CommandSpec, Reply, Route};

/// How far a running script may reach, and how far it tried to.
#[derive(Default)]
pub struct Reach {
    /// It runs holding every shard (a coordinator unit).
    pub whole: bool,
    /// It reached another shard without holding them: it stopped, to be
    /// run again with `whole`.
    pub wants_whole: bool,
    /// It reached another shard at all: next time it runs holding every
    /// shard from the start.
    pub reached_out: bool,
}

/// Runs `argv` on the shards in `owners` for a script on `core`: the
/// encoded reply, or a script error.
#[allow(clippy::too_many_arguments)]
pub fn remote_call(
    core: &Core,
    now: u64,
    tracking: shard::tracking::Caller,
    reach: &mut Reach,
    spec: &'static CommandSpec,
    argv: &[&[u8]],
    owners: &[usize],
    call: &mut CallState,
) -> Result<Vec<u8>, String> {
    if !reach.whole {
        reach.reached_out = true;
        if call.write_dirty {
            return Err("Script attempted to access a key of another shard after writing: declare its keys \
                        (or give them one hash tag) so it can run on every shard at once"
                .into());
        }
        reach.wants_whole = true;
        return Err(RERUN.into());
    }
    let mut shards: Vec<usize> = owners.to_vec();
    shards.sort_unstable();
    shards.dedup();
    let (db, resp3) = (call.db, call.resp3);
    let run_on = |shard: usize, parts: Vec<Vec<u8>>| -> Vec<u8> {
        let job = move |c: &crate::core::Core| {
            let (buf, ranges) = flatten(&parts);
            let mut out = Vec::new();
            c.execute_scripted(tracking, spec, db, resp3, now, Args::new(&buf, &ranges), &mut out);
            out
        };
        if shard == core.index {
            return job(core);
        }
        call_blocking(core, shard, move |c| job(c))
            .unwrap_or_else(|| b"-ERR shard unavailable (server shutting down)\r\n".to_vec())
    };
    let owned = |argv: &[&[u8]]| argv.iter().map(|a| a.to_vec()).collect::<Vec<_>>();
    match spec.route {
        _ if shards.len() == 1 => Ok(run_on(shards[0], owned(argv))),
        Route::SplitKeys(merge) | Route::AllShards(merge) => {
            // One part per shard, merged as the connection path merges them.
            let (buf, ranges) = flatten(argv);
            let args = Args::new(&buf, &ranges);
            let step = spec.keys.2.max(1) as usize;
            let mut key_shards = Vec::new();
            let mut pieces = Vec::new();
            for &shard in &shards {
                let mut part = vec![argv[0].to_vec()];
                if matches!(spec.route, Route::AllShards(_)) {
                    part.extend(argv[1..].iter().map(|a| a.to_vec()));
                } else {
                    for i in spec.key_indexes(&args) {
                        if core.shard_of(args.get(i)) == shard {
                            part.extend((i..i + step).map(|j| argv[j].to_vec()));
                        }
                    }
                }
                pieces.push((shard as u16, run_on(shard, part)));
            }
            if matches!(spec.route, Route::SplitKeys(_)) {
                key_shards = spec.key_indexes(&args).map(|i| core.shard_of(args.get(i)) as u16).collect();
            }
            let pieces: Vec<(u16, &[u8])> = pieces.iter().map(|(s, p)| (*s, p.as_slice())).collect();
            let mut out = Vec::new();
            crate::pipeline::merge_replies(merge, &pieces, &key_shards, &mut out);
            Ok(out)
        }
        _ => Ok(run_gathered(core, now, spec, argv, db, resp3)),
    }
}

/// A command over keys of several shards that the connection path runs in
/// phases (RENAME, SMOVE, MSETNX, the STORE commands...). Inside a script
/// that holds every shard it runs in one step instead: its keys' entries
/// are copied into a scratch shard here, the command runs there with the
/// shard's own code, and every key it changed is written back to its owner
/// (logged for the AOF as the key's new state, and signalled to blocked
/// clients).
fn run_gathered(core: &Core, now: u64, spec: &'static CommandSpec, argv: &[&[u8]], db: usize, resp3: bool) -> Vec<u8> {
    let (buf, ranges) = flatten(argv);
    let args = Args::new(&buf, &ranges);
    let mut keys: Vec<Vec<u8>> = Vec::new();
    for i in spec.key_indexes(&args) {
        if !keys.iter().any(|k| k == args.get(i)) {
            keys.push(args.get(i).to_vec());
        }
    }
    let on_owner = |key: &[u8], f: OnShard| -> Option<Entry> {
        let owner = core.shard_of(key);
        if owner == core.index {
            return f(&mut core.shard.borrow_mut());
        }
        call_blocking(core, owner, move |c| f(&mut c.shard.borrow_mut())).flatten()
    };
    let before: Vec<Option<Entry>> = keys
        .iter()
        .map(|key| {
            let k = key.clone();
            on_owner(key, Box::new(move |s| s.dbs[db].find(&k, now).map(|e| (e.value.clone(), e.expire_at()))))
        })
        .collect();
    let config = core.shard.borrow().config.clone();
    let mut scratch = shard::Shard::new(core.index, core.count, config);
    for (key, entry) in keys.iter().zip(&before) {
        if let Some((value, at)) = entry {
            scratch.dbs[db].set(key, value.clone(), at.map_or(Ttl::Clear, Ttl::At), now);
        }
    }
    scratch.notifications().clear();
    let mut out = Vec::new();
    let mut ctx = Ctx { db, now, reply: Reply::new(&mut out, resp3) };
    execute(spec, &mut scratch, &mut ctx, args);
    // Its keyspace events go to the keys' owners (which raise `new`
    // themselves when the key is written back).
    let events: Vec<(usize, &'static str, Vec<u8>)> =
        scratch.notifications().iter().filter(|e| e.event != "new").map(|e| (e.db, e.event, e.key.to_vec())).collect();
    for (key, entry) in keys.iter().zip(before) {
        let after = scratch.dbs[db].find(key, now).map(|e| (e.value.clone(), e.expire_at()));
        if after == entry {
            continue;
        }
        let k = key.clone();
        on_owner(
            key,
            Box::new(move |s| {
                match after {
                    Some((value, at)) => {
                        s.dbs[db].set(&k, value, at.map_or(Ttl::Clear, Ttl::At), now);
                    }
                    None => {
                        s.dbs[db].remove(&k, now);
                    }
                }
                s.dirty += 1;
                s.log_key_state(db, &k, now);
                s.signal_ready(db, &k);
                None
            }),
        );
    }
    for (db, event, key) in events {
        let k = key.clone();
        on_owner(
            &key,
            Box::new(move |s| {
                s.raise(event, db, &k);
                None
            }),
        );
    }
    out
}

/// A key's entry: its value and expiry.
type Entry = (shard::value::Value, Option<u64>);

/// Work on a key's owning shard.
type OnShard = Box<dyn FnOnce(&mut shard::Shard) -> Option<Entry> + Send>;

/// The error that stops a script to be run again over every shard.
pub const RERUN: &str = "corekv: this script reaches another shard; it runs again holding every shard";
